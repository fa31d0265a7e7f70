//! The `kiln-graph/1` file's structure read from the TOML document tree: the top-level
//! keys and the `[[inputs]]`, `[[constants]]` and `[[nodes]]` tables, borrowing every
//! string from the tree.
//!
//! It walks `toml`'s parse tree (`DeTable`) by hand rather than through `serde`, which for
//! a large graph allocated a `String` or `toml::Value` per field and doubled the import
//! time. Every structural error carries its byte offset, which the importer turns into a
//! line and column; this module must never look at what the names or ops mean.

use toml::de::{DeArray, DeTable, DeValue};
use toml::Spanned;

/// A structural error at a byte offset of the text.
pub(super) struct Located {
    /// byte offset of the offending key, value or table
    pub at: usize,
    /// what is wrong, in the words the `serde` derive used
    pub message: String,
}

type Result<T> = std::result::Result<T, Located>;
type Value<'i> = Spanned<DeValue<'i>>;

/// The top level of a graph file.
pub(super) struct RawGraph<'t, 'i> {
    pub format: &'t str,
    pub name: &'t str,
    pub outputs: Vec<&'t str>,
    pub dims: Vec<RawDim<'t>>,
    pub inputs: Vec<RawTensor<'t, 'i>>,
    pub constants: Vec<RawTensor<'t, 'i>>,
    pub nodes: Vec<RawNode<'t, 'i>>,
}

/// A named size of the `[dims]` table: `batch = { min = 1, max = 64, example = 8 }`.
pub(super) struct RawDim<'t> {
    /// byte offset of the entry
    pub at: usize,
    pub name: &'t str,
    pub min: i64,
    pub max: i64,
    pub example: Option<i64>,
}

/// One size of a shape: a number, or a name of `[dims]`.
pub(super) enum RawSize<'t> {
    Fixed(i64),
    Named {
        name: &'t str,
        /// byte offset of the name
        at: usize,
    },
}

/// An `[[inputs]]` or `[[constants]]` table.
pub(super) struct RawTensor<'t, 'i> {
    /// byte offset of the table
    pub at: usize,
    pub name: &'t str,
    pub shape: Vec<RawSize<'t>>,
    pub dtype: &'t str,
    pub values: Option<&'t [Value<'i>]>,
    pub fill: Option<&'t Value<'i>>,
}

/// A `[[nodes]]` table.
pub(super) struct RawNode<'t, 'i> {
    /// byte offset of the table
    pub at: usize,
    pub name: &'t str,
    pub op: &'t str,
    pub args: &'t [Value<'i>],
    pub attrs: Option<&'t DeTable<'i>>,
}

/// The fields of one table, checked against the names it may have.
struct Fields<'t, 'i> {
    table: &'t DeTable<'i>,
    at: usize,
}

impl<'t, 'i> Fields<'t, 'i> {
    /// A table value's fields; see [`Fields::of_table`].
    fn new(v: &'t Value<'i>, allowed: &[&str]) -> Result<Fields<'t, 'i>> {
        match v.get_ref() {
            DeValue::Table(t) => Fields::of_table(t, v.span().start, allowed),
            other => Err(invalid(v, other, "a table")),
        }
    }

    /// Rejects any key outside `allowed`, as `#[serde(deny_unknown_fields)]` did.
    fn of_table(table: &'t DeTable<'i>, at: usize, allowed: &[&str]) -> Result<Fields<'t, 'i>> {
        for (k, _) in table.iter() {
            if !allowed.contains(&k.get_ref().as_ref()) {
                let expected: Vec<String> = allowed.iter().map(|a| format!("`{a}`")).collect();
                return Err(Located {
                    at: k.span().start,
                    message: format!(
                        "unknown field `{}`, expected one of {}",
                        k.get_ref(),
                        expected.join(", ")
                    ),
                });
            }
        }
        Ok(Fields { table, at })
    }

    fn get(&self, key: &str) -> Option<&'t Value<'i>> {
        self.table.get(key)
    }

    fn required(&self, key: &str) -> Result<&'t Value<'i>> {
        self.get(key).ok_or_else(|| Located {
            at: self.at,
            message: format!("missing field `{key}`"),
        })
    }

    fn string(&self, key: &str) -> Result<&'t str> {
        string(self.required(key)?)
    }

    fn opt_string(&self, key: &str) -> Result<&'t str> {
        self.get(key).map_or(Ok(""), string)
    }

    fn array(&self, key: &str) -> Result<&'t [Value<'i>]> {
        self.get(key).map_or(Ok(&[]), array)
    }
}

fn invalid(v: &Value, found: &DeValue, expected: &str) -> Located {
    let found = match found {
        DeValue::String(s) => format!("string {s:?}"),
        DeValue::Integer(i) => format!("integer `{i}`"),
        DeValue::Float(f) => format!("floating point `{f}`"),
        DeValue::Boolean(b) => format!("boolean `{b}`"),
        DeValue::Datetime(d) => format!("datetime `{d}`"),
        DeValue::Array(_) => "sequence".into(),
        DeValue::Table(_) => "map".into(),
    };
    Located {
        at: v.span().start,
        message: format!("invalid type: {found}, expected {expected}"),
    }
}

fn string<'t>(v: &'t Value) -> Result<&'t str> {
    match v.get_ref() {
        DeValue::String(s) => Ok(s),
        other => Err(invalid(v, other, "a string")),
    }
}

fn array<'t, 'i>(v: &'t Value<'i>) -> Result<&'t [Value<'i>]> {
    match v.get_ref() {
        DeValue::Array(a) => Ok(DeArray::as_ref(a)),
        other => Err(invalid(v, other, "a sequence")),
    }
}

/// A TOML integer as an `i64`.
pub(super) fn integer(v: &Value) -> Result<i64> {
    match v.get_ref() {
        DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix()).map_err(|_| Located {
            at: v.span().start,
            message: format!("integer `{i}` does not fit in 64 bits"),
        }),
        other => Err(invalid(v, other, "i64")),
    }
}

/// A TOML float as an `f64` (`inf` and `nan` included).
pub(super) fn float(v: &Value) -> Result<f64> {
    match v.get_ref() {
        DeValue::Float(f) => f.as_str().parse().map_err(|_| Located {
            at: v.span().start,
            message: format!("invalid float `{f}`"),
        }),
        other => Err(invalid(v, other, "f64")),
    }
}

fn tensor<'t, 'i>(v: &'t Value<'i>) -> Result<RawTensor<'t, 'i>> {
    let f = Fields::new(v, &["name", "shape", "dtype", "values", "fill"])?;
    Ok(RawTensor {
        at: f.at,
        name: f.string("name")?,
        shape: array(f.required("shape")?)?
            .iter()
            .map(|v| match v.get_ref() {
                DeValue::String(name) => Ok(RawSize::Named {
                    name,
                    at: v.span().start,
                }),
                _ => integer(v).map(RawSize::Fixed),
            })
            .collect::<Result<_>>()?,
        dtype: f.string("dtype")?,
        values: f.get("values").map(array).transpose()?,
        fill: f.get("fill"),
    })
}

fn node<'t, 'i>(v: &'t Value<'i>) -> Result<RawNode<'t, 'i>> {
    let f = Fields::new(v, &["name", "op", "args", "attrs"])?;
    Ok(RawNode {
        at: f.at,
        name: f.string("name")?,
        op: f.string("op")?,
        args: f.array("args")?,
        attrs: match f.get("attrs") {
            None => None,
            Some(a) => match a.get_ref() {
                DeValue::Table(t) => Some(t),
                other => return Err(invalid(a, other, "a table")),
            },
        },
    })
}

fn dim<'t>(key: &'t Spanned<std::borrow::Cow<'_, str>>, v: &'t Value<'_>) -> Result<RawDim<'t>> {
    let f = Fields::new(v, &["min", "max", "example"])?;
    Ok(RawDim {
        at: key.span().start,
        name: key.get_ref().as_ref(),
        min: integer(f.required("min")?)?,
        max: integer(f.required("max")?)?,
        example: f.get("example").map(integer).transpose()?,
    })
}

/// Reads a graph file's structure from its parsed document.
pub(super) fn read<'t, 'i>(doc: &'t Spanned<DeTable<'i>>) -> Result<RawGraph<'t, 'i>> {
    let f = Fields::of_table(
        doc.get_ref(),
        doc.span().start,
        &[
            "format",
            "name",
            "outputs",
            "dims",
            "inputs",
            "constants",
            "nodes",
        ],
    )?;
    let dims = match f.get("dims") {
        None => vec![],
        Some(v) => match v.get_ref() {
            DeValue::Table(t) => t.iter().map(|(k, v)| dim(k, v)).collect::<Result<_>>()?,
            other => return Err(invalid(v, other, "a table of named sizes")),
        },
    };
    Ok(RawGraph {
        format: f.string("format")?,
        name: f.opt_string("name")?,
        dims,
        outputs: f
            .array("outputs")?
            .iter()
            .map(string)
            .collect::<Result<_>>()?,
        inputs: f
            .array("inputs")?
            .iter()
            .map(tensor)
            .collect::<Result<_>>()?,
        constants: f
            .array("constants")?
            .iter()
            .map(tensor)
            .collect::<Result<_>>()?,
        nodes: f.array("nodes")?.iter().map(node).collect::<Result<_>>()?,
    })
}
