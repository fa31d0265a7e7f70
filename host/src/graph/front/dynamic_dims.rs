//! Dims of a static graph made dynamic on the command line:
//! `--dynamic input_ids:1=1..2048` (or `--dynamic input_ids:1,attention_mask:1=1..2048`
//! for dims that are one size). Each such flag makes one size symbol, named after its
//! first dim, with the range given and the graph's size as its hint. Every node's
//! metadata is then inferred again over the symbols, so that one compile serves the
//! range. A node whose arguments fix that size (a `view` to `[2, 8, 768]`, which a
//! static export records) refuses, naming itself: such a graph is exported with
//! `dynamic_shapes=` instead.

use std::str::FromStr;

use crate::graph::sym::{Size, Symbols};
use crate::graph::{Error, Graph, TensorMeta};

/// One `--dynamic INPUT:DIM[,INPUT:DIM...]=LO..HI`: input dims that are one size,
/// from `lo` to `hi` inclusive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DynamicDim {
    /// The inputs (by name) and dims.
    pub dims: Vec<(String, usize)>,
    /// The smallest size, inclusive.
    pub lo: i64,
    /// The largest size, inclusive.
    pub hi: i64,
}

impl DynamicDim {
    /// The symbol's name: the first dim's `input:dim`.
    pub fn name(&self) -> String {
        self.dims
            .first()
            .map_or_else(String::new, |(input, dim)| format!("{input}:{dim}"))
    }
}

impl FromStr for DynamicDim {
    type Err = String;

    fn from_str(text: &str) -> Result<DynamicDim, String> {
        // `host compile --dynamic model.pt2`: the flag took the graph file as its value.
        if !text.contains('=') && std::path::Path::new(text).is_file() {
            return Err(format!(
                "`{text}` is the graph file: put `--dynamic` after it (`host compile {text} \
                 --dynamic`), or give the flag INPUT:DIM=LO..HI"
            ));
        }
        let expected = || {
            format!(
                "`{text}`: expected INPUT:DIM=LO..HI (e.g. input_ids:1=1..2048), or several dims \
                 of one size as INPUT:DIM,INPUT:DIM=LO..HI; `--dynamic` with no value, after the \
                 graph file, keeps an export's own size symbols"
            )
        };
        let (dims, range) = text.split_once('=').ok_or_else(expected)?;
        let (lo, hi) = range.split_once("..").ok_or_else(expected)?;
        let (lo, hi) = (
            lo.trim().parse::<i64>().map_err(|_| expected())?,
            hi.trim()
                .trim_start_matches('=')
                .parse::<i64>()
                .map_err(|_| expected())?,
        );
        if lo < 1 || lo > hi {
            return Err(format!(
                "`{text}`: the range {lo}..{hi} must hold sizes of at least 1, smallest first"
            ));
        }
        let dims = dims
            .split(',')
            .map(|d| {
                let (input, dim) = d.trim().rsplit_once(':').ok_or_else(expected)?;
                let dim = dim.parse::<usize>().map_err(|_| expected())?;
                if input.is_empty() {
                    return Err(expected());
                }
                Ok((input.to_string(), dim))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(DynamicDim { dims, lo, hi })
    }
}

/// Makes `specs`' input dims of the static graph `g` size symbols, and infers every
/// node again over them.
pub fn mark(g: &mut Graph, specs: &[DynamicDim]) -> Result<(), Error> {
    if specs.is_empty() {
        return Ok(());
    }
    let refuse = |what: String| Error::Dynamic(what);
    if !g.symbols().is_empty() {
        return Err(refuse(
            "--dynamic INPUT:DIM=LO..HI marks dims of a graph of static shapes; this one has size \
             symbols already: --dynamic alone keeps them"
                .into(),
        ));
    }
    let mut symbols = Symbols::default();
    let mut marked: Vec<(usize, usize, crate::graph::sym::SymId)> = Vec::new();
    for spec in specs {
        let name = spec.name();
        let id = symbols
            .add(&name, spec.lo, spec.hi)
            .map_err(|e| refuse(format!("--dynamic {name}: {e}")))?;
        let mut hint = None;
        for (input, dim) in &spec.dims {
            let k = input_index(g, input)?;
            let shape = &g.input_meta(k).map(|m| m.shape.clone()).unwrap_or_default();
            let size = shape.get(*dim).and_then(Size::as_const).ok_or_else(|| {
                refuse(format!(
                    "--dynamic {input}:{dim}: input `{input}` has {} dims ({shape:?})",
                    shape.len()
                ))
            })?;
            if hint.is_some_and(|h| h != size) {
                return Err(refuse(format!(
                    "--dynamic {name}: the dims it names are of different sizes in the graph \
                     ({input}:{dim} is {size}); name dims of one size together"
                )));
            }
            hint = Some(size);
            marked.push((k, *dim, id));
        }
        let hint = hint.unwrap_or(spec.lo);
        symbols.set_hint(id, hint).map_err(|_| {
            refuse(format!(
                "--dynamic {name}={}..{}: the graph's size, {hint}, is outside that range",
                spec.lo, spec.hi
            ))
        })?;
    }
    for k in 0..g.inputs().len() {
        let Some(meta) = g.input_meta(k).cloned() else {
            continue;
        };
        let mut shape = meta.shape.clone();
        for (_, dim, id) in marked.iter().filter(|(input, ..)| *input == k) {
            shape[*dim] = Size::symbol(*id, &symbols);
        }
        if shape == meta.shape {
            continue;
        }
        let node = g.inputs()[k];
        let dense = TensorMeta::contiguous_sizes(meta.shape.clone(), meta.dtype);
        if dense.strides != meta.strides {
            return Err(refuse(format!(
                "--dynamic: input {k} is strided ({:?}); only a dense input's dims can vary",
                meta.strides
            )));
        }
        g.set_inferred(node, vec![TensorMeta::contiguous_sizes(shape, meta.dtype)]);
    }
    g.set_symbols(symbols);
    crate::graph::verify::validate(g).map_err(|e| Error::DynamicInfer(Box::new(e)))
}

/// The position of the graph input named `name`.
fn input_index(g: &Graph, name: &str) -> Result<usize, Error> {
    let names: Vec<String> = g
        .inputs()
        .iter()
        .filter_map(|&id| g.node(id).map(|n| n.name.clone()))
        .collect();
    names.iter().position(|n| n == name).ok_or_else(|| {
        Error::Dynamic(format!(
            "--dynamic: the graph has no input `{name}`; its inputs are {}",
            names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_with_their_dims_and_range() {
        let d: DynamicDim = "input_ids:1,attention_mask:1=1..2048".parse().unwrap();
        assert_eq!(
            d.dims,
            vec![("input_ids".into(), 1), ("attention_mask".into(), 1)]
        );
        assert_eq!((d.lo, d.hi, d.name()), (1, 2048, "input_ids:1".to_string()));
        assert_eq!("x:0=2..=8".parse::<DynamicDim>().unwrap().hi, 8);
        for bad in [
            "x:0", "x=1..2", "x:a=1..2", ":0=1..2", "x:0=4..2", "x:0=0..2",
        ] {
            assert!(bad.parse::<DynamicDim>().is_err(), "{bad}");
        }
    }
}
