//! The named sizes of a graph file (`[dims]`): each takes one value within its range (the
//! one `--specialize` gives, else its `example`, else its `min`), which the shapes naming
//! it (`shape = ["batch", 128]`) and the node arguments referring to it
//! (`{ dim = "batch" }`) stand for. With `--dynamic` each is a size symbol over its range
//! instead (its value the hint), so that one compile serves the range
//! (docs/dynamic-shapes.md).

use super::raw::{RawDim, RawSize};
use super::Lines;
use crate::graph::front::table::Raw;
use crate::graph::sym::{Size, Symbols};
use crate::graph::{Error, SizeChoice};

/// Each named size with its value and range.
pub(super) struct Sizes {
    dims: Vec<SizeChoice>,
    /// With `--dynamic`: each size a symbol of this table, by the same name.
    symbols: Option<Symbols>,
}

fn located(lines: &Lines, at: usize, message: String) -> Error {
    let (line, column) = lines.at(at);
    Error::Toml {
        line,
        column,
        message,
    }
}

impl Sizes {
    /// The sizes of `[dims]` at their values, checked: ranges that are not empty and not
    /// negative, examples and `specialize`'s values within them, every name `specialize`
    /// gives one of the file's.
    pub fn of(
        dims: &[RawDim<'_>],
        specialize: &[(String, i64)],
        lines: &Lines,
    ) -> Result<Sizes, Error> {
        let list = || {
            dims.iter()
                .map(|d| format!("{} ({}..={})", d.name, d.min, d.max))
                .collect::<Vec<_>>()
                .join(", ")
        };
        for (name, _) in specialize {
            if !dims.iter().any(|d| d.name == name) {
                return Err(Error::Specialize(if dims.is_empty() {
                    format!("--specialize {name}: the graph has static shapes (no [dims] to specialise)")
                } else {
                    format!(
                        "--specialize {name}: the graph has no size `{name}`; its [dims] are {}",
                        list()
                    )
                }));
            }
        }
        let mut out = Vec::with_capacity(dims.len());
        for d in dims {
            if d.min < 0 || d.min > d.max {
                return Err(located(
                    lines,
                    d.at,
                    format!(
                        "size `{}`: the range {}..={} is empty or negative",
                        d.name, d.min, d.max
                    ),
                ));
            }
            let chosen = specialize.iter().rev().find(|(n, _)| n == d.name);
            let value = match (chosen, d.example) {
                (Some((_, v)), _) if *v < d.min || *v > d.max => {
                    return Err(Error::Specialize(format!(
                        "--specialize {}={v} is outside the range the graph gives it, {}..={}",
                        d.name, d.min, d.max
                    )))
                }
                (Some((_, v)), _) => *v,
                (None, Some(e)) if e < d.min || e > d.max => {
                    return Err(located(
                        lines,
                        d.at,
                        format!(
                            "size `{}`: the example {e} is outside its range {}..={}",
                            d.name, d.min, d.max
                        ),
                    ))
                }
                (None, Some(e)) => e,
                (None, None) => d.min,
            };
            out.push(SizeChoice {
                name: d.name.to_string(),
                value,
                lo: d.min,
                hi: d.max,
            });
        }
        let sizes = Sizes {
            dims: out,
            symbols: None,
        };
        if !sizes.dims.is_empty() {
            tracing::warn!(
                "the graph has named sizes; compiled at {}: a call at other sizes is refused \
                 (--specialize NAME=VALUE compiles at others)",
                SizeChoice::describe(&sizes.dims)
            );
        }
        Ok(sizes)
    }

    /// The sizes of `[dims]` as size symbols over their ranges, each hinted at its
    /// example (`--dynamic`): a range must hold sizes of at least 1.
    pub fn symbolic(dims: &[RawDim<'_>], lines: &Lines) -> Result<Sizes, Error> {
        let mut sizes = Sizes::of(dims, &[], lines)?;
        let mut symbols = Symbols::default();
        for (d, raw) in sizes.dims.iter().zip(dims) {
            let bad = |message: String| located(lines, raw.at, message);
            if d.lo < 1 {
                return Err(bad(format!(
                    "size `{}`: with --dynamic a range starts at 1 or more, not {}",
                    d.name, d.lo
                )));
            }
            let id = symbols
                .add(&d.name, d.lo, d.hi)
                .map_err(|e| bad(e.to_string()))?;
            symbols
                .set_hint(id, d.value)
                .map_err(|e| bad(e.to_string()))?;
        }
        sizes.symbols = Some(symbols);
        Ok(sizes)
    }

    /// Each size at its value, as the graph records them (none where they are symbols).
    pub fn choices(&self) -> Vec<SizeChoice> {
        if self.symbols.is_some() {
            return Vec::new();
        }
        self.dims.clone()
    }

    /// The size symbols, with `--dynamic`.
    pub fn symbols(&self) -> Option<&Symbols> {
        self.symbols.as_ref()
    }

    fn value(&self, name: &str) -> Option<Size> {
        if let Some(symbols) = &self.symbols {
            return symbols.find(name).map(|id| Size::symbol(id, symbols));
        }
        self.dims
            .iter()
            .find(|d| d.name == name)
            .map(|d| Size::from(d.value))
    }

    /// A declared shape's sizes, each name at its value (its symbol, with `--dynamic`);
    /// an unknown name is an error at its place.
    pub fn shape(&self, raw: &[RawSize], lines: &Lines) -> Result<Vec<Size>, Error> {
        raw.iter()
            .map(|s| match s {
                RawSize::Fixed(n) => Ok(Size::from(*n)),
                RawSize::Named { name, at } => self.value(name).ok_or_else(|| {
                    located(
                        lines,
                        *at,
                        format!(
                            "unknown size `{name}` in a shape (sizes are numbers, or names of \
                             the file's [dims] table)"
                        ),
                    )
                }),
            })
            .collect()
    }

    /// The value of a node argument `{ dim = "batch" }`: the named size's (its symbol,
    /// with `--dynamic`).
    pub fn reference(&self, table: &toml::de::DeTable) -> Result<Raw, String> {
        let name =
            match table.iter().next() {
                Some((k, v)) if table.len() == 1 && k.get_ref() == "dim" => match v.get_ref() {
                    toml::de::DeValue::String(s) => s.to_string(),
                    _ => return Err("`dim` takes the name of a size of [dims]".into()),
                },
                _ => return Err(
                    "a table argument must be `{ dim = \"NAME\" }`, a size of the file's [dims]"
                        .into(),
                ),
            };
        let size = self.value(&name).ok_or_else(|| {
            format!("unknown size `{name}` (sizes are the names of the file's [dims] table)")
        })?;
        Ok(match size.as_const() {
            Some(n) => Raw::Int(n),
            None => Raw::Size(size),
        })
    }
}
