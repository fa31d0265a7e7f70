//! The parts of PyTorch's export schema (`torch/_export/serde/schema.py`, major version 8)
//! that Kiln reads, as serde types, and the decoding of its unions: arguments, symbolic
//! ints and dtype codes.
//!
//! Unions (`Argument`, `SymInt`, `InputSpec`, ...) are objects with one key naming the
//! variant; they stay `serde_json::Value` here and are decoded by hand so that an
//! unsupported variant gets a message naming it rather than a serde error. This module
//! must never build graph nodes.

use super::Pt2Error;
use crate::graph::dtype::DType;
use crate::graph::front::table::Raw;
use crate::graph::sym::{Size, Symbols};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// `models/model.json`: a serialized `ExportedProgram`.
#[derive(Debug, Deserialize)]
pub(super) struct Model {
    pub graph_module: GraphModule,
    pub schema_version: SchemaVersion,
}

/// `schema_version`.
#[derive(Debug, Deserialize)]
pub(super) struct SchemaVersion {
    pub major: i64,
    #[serde(default)]
    pub minor: i64,
}

/// `graph_module`.
#[derive(Debug, Deserialize)]
pub(super) struct GraphModule {
    pub graph: Graph,
    pub signature: Signature,
}

/// `graph_module.graph`, or the subgraph of a higher-order op (`GraphArgument.graph`).
#[derive(Debug, Deserialize)]
pub(super) struct Graph {
    /// the placeholders (`Argument`s, `as_tensor` for tensors)
    #[serde(default)]
    pub inputs: Vec<Value>,
    /// what the graph returns (`Argument`s)
    #[serde(default)]
    pub outputs: Vec<Value>,
    #[serde(default)]
    pub nodes: Vec<Node>,
    #[serde(default)]
    pub tensor_values: BTreeMap<String, TensorMeta>,
}

/// One FX node.
#[derive(Debug, Deserialize)]
pub(super) struct Node {
    pub target: String,
    #[serde(default)]
    pub inputs: Vec<NamedArgument>,
    #[serde(default)]
    pub outputs: Vec<Value>,
    #[serde(default)]
    pub name: String,
}

/// An argument with its ATen parameter name.
#[derive(Debug, Deserialize)]
pub(super) struct NamedArgument {
    #[serde(default)]
    pub name: String,
    pub arg: Value,
}

/// Shape, strides and dtype of a tensor.
#[derive(Debug, Deserialize)]
pub(super) struct TensorMeta {
    pub dtype: i64,
    pub sizes: Vec<Value>,
    #[serde(default)]
    pub strides: Vec<Value>,
    #[serde(default)]
    pub storage_offset: Option<Value>,
}

/// `graph_module.signature`: which placeholders are user inputs, parameters, buffers or
/// constants, and which values are user outputs.
#[derive(Debug, Deserialize)]
pub(super) struct Signature {
    #[serde(default)]
    pub input_specs: Vec<Value>,
    #[serde(default)]
    pub output_specs: Vec<Value>,
}

/// `model_weights_config.json` or `model_constants_config.json`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct PayloadConfig {
    #[serde(default)]
    pub config: BTreeMap<String, PayloadMeta>,
}

/// One stored tensor.
#[derive(Debug, Deserialize)]
pub(super) struct PayloadMeta {
    pub path_name: String,
    #[serde(default)]
    pub use_pickle: bool,
    pub tensor_meta: TensorMeta,
}

/// The single `(key, value)` of a union object.
pub(super) fn variant(v: &Value) -> Option<(&str, &Value)> {
    match v {
        Value::Object(m) if m.len() == 1 => m.iter().next().map(|(k, v)| (k.as_str(), v)),
        _ => None,
    }
}

/// The `name` of a `TensorArgument` (`{"name": ...}`).
pub(super) fn tensor_name(v: &Value) -> Option<&str> {
    v.get("name").and_then(Value::as_str)
}

/// A `SymInt` that must be a plain integer; `tensor` names its owner for messages.
pub(super) fn sym_int(v: &Value, tensor: &str) -> Result<i64, Pt2Error> {
    match variant(v) {
        Some(("as_int", n)) => n.as_i64().ok_or_else(|| Pt2Error::Overflow {
            tensor: tensor.into(),
            message: format!("size or stride {n} does not fit in 64 bits"),
        }),
        Some(("as_expr", e)) => {
            let text = e.get("expr_str").and_then(Value::as_str).unwrap_or("?");
            Err(Pt2Error::Symbolic {
                tensor: tensor.into(),
                symbol: crate::graph::sym::pretty(text).unwrap_or_else(|| text.into()),
            })
        }
        _ => Err(Pt2Error::Schema(format!(
            "tensor `{tensor}`: expected a size (`as_int` or `as_expr`), found {v}"
        ))),
    }
}

/// A `SymInt` that is an integer or, where the importer keeps an export's symbols
/// (`symbols` is not empty), an expression over them.
pub(super) fn sym_size(v: &Value, tensor: &str, symbols: &Symbols) -> Result<Size, Pt2Error> {
    if let (Some(("as_expr", e)), false) = (variant(v), symbols.is_empty()) {
        let text = e.get("expr_str").and_then(Value::as_str).unwrap_or("?");
        let mut find = |name: &str| {
            symbols
                .find(name)
                .ok_or_else(|| format!("`{name}` has no range in the archive"))
        };
        return crate::graph::sym::parse(text, symbols, &mut find)
            .and_then(|e| Size::new(e, symbols))
            .map_err(|e| Pt2Error::Schema(format!("tensor `{tensor}`: size `{text}`: {e}")));
    }
    sym_int(v, tensor).map(Size::from)
}

/// The sizes of a tensor: integers, which must be non-negative, or expressions over
/// `symbols` (see [`sym_size`]).
pub(super) fn sizes(
    m: &TensorMeta,
    tensor: &str,
    symbols: &Symbols,
) -> Result<Vec<Size>, Pt2Error> {
    let out = m
        .sizes
        .iter()
        .map(|s| sym_size(s, tensor, symbols))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(ints) = crate::graph::shape::consts(&out) {
        int_checked(&ints, tensor)?;
    }
    Ok(out)
}

/// The sizes of a tensor, which must all be static and non-negative.
pub(super) fn int_sizes(m: &TensorMeta, tensor: &str) -> Result<Vec<i64>, Pt2Error> {
    let out = m
        .sizes
        .iter()
        .map(|s| sym_int(s, tensor))
        .collect::<Result<Vec<_>, _>>()?;
    int_checked(&out, tensor)?;
    Ok(out)
}

fn int_checked(out: &[i64], tensor: &str) -> Result<(), Pt2Error> {
    if let Some(bad) = out.iter().find(|&&d| d < 0) {
        return Err(Pt2Error::Schema(format!(
            "tensor `{tensor}` has a negative size {bad}"
        )));
    }
    crate::graph::shape::numel(out).map_err(|e| Pt2Error::Overflow {
        tensor: tensor.into(),
        message: e.to_string(),
    })?;
    Ok(())
}

/// The export schema's `ScalarType` code as a Kiln dtype.
pub(super) fn dtype(code: i64, tensor: &str) -> Result<DType, Pt2Error> {
    Ok(match code {
        4 => DType::Int32,
        5 => DType::Int64,
        6 => DType::Float16,
        7 => DType::Float32,
        8 => DType::Float64,
        12 => DType::Bool,
        13 => DType::BFloat16,
        _ => {
            return Err(Pt2Error::Dtype {
                tensor: tensor.into(),
                code,
            })
        }
    })
}

/// `MemoryFormat` codes: Unknown, ContiguousFormat, ChannelsLast, ChannelsLast3d,
/// PreserveFormat. A memory format orders a result's elements in memory and leaves its
/// values as they are; Kiln's tensors are values (each kernel picks its own layout, and
/// a graph's outputs are dense row-major), so every format is the same op to Kiln. A
/// later op that reads the strides themselves (`as_strided`) is checked against the
/// recorded layout where it is imported.
const MEMORY_FORMATS: [i64; 5] = [0, 1, 2, 3, 4];
/// `Layout.Strided`.
const STRIDED: i64 = 7;

/// An argument as a signature-table value, or `None` where it means "the default" and is
/// left out (`as_none`, a dense memory format, the strided layout, a device, a pinning
/// or blocking flag: Kiln places the tensors itself).
pub(super) fn argument(
    node: &str,
    param: &str,
    arg: &Value,
    symbols: &Symbols,
) -> Result<Option<Raw>, Pt2Error> {
    let bad = |message: String| Pt2Error::Argument {
        node: node.into(),
        param: param.into(),
        message,
    };
    if matches!(param, "pin_memory" | "non_blocking") {
        return Ok(None);
    }
    let (kind, v) = variant(arg).ok_or_else(|| bad(format!("not an argument union: {arg}")))?;
    let int = |x: &Value| {
        x.as_i64()
            .ok_or_else(|| bad(format!("`{kind}`: {x} is not a 64-bit integer")))
    };
    // Non-finite floats are written as the strings Python's json module writes.
    let float = |x: &Value| match x.as_str() {
        Some("Infinity") => Ok(f64::INFINITY),
        Some("-Infinity") => Ok(f64::NEG_INFINITY),
        Some("NaN") => Ok(f64::NAN),
        _ => x
            .as_f64()
            .ok_or_else(|| bad(format!("`{kind}`: {x} is not a number"))),
    };
    let list = |x: &Value| {
        x.as_array()
            .cloned()
            .ok_or_else(|| bad(format!("`{kind}`: {x} is not a list")))
    };
    Ok(Some(match kind {
        "as_none" => return Ok(None),
        "as_tensor" => Raw::Str(
            tensor_name(v)
                .ok_or_else(|| bad(format!("a tensor without a name: {v}")))?
                .into(),
        ),
        "as_tensors" => Raw::List(
            list(v)?
                .iter()
                .map(|t| {
                    tensor_name(t)
                        .map(|n| Raw::Str(n.into()))
                        .ok_or_else(|| bad(format!("a tensor without a name: {t}")))
                })
                .collect::<Result<_, _>>()?,
        ),
        "as_optional_tensors" => Raw::List(
            list(v)?
                .iter()
                .map(|t| match variant(t) {
                    Some(("as_none", _)) => Ok(Raw::None),
                    Some(("as_tensor", t)) => tensor_name(t)
                        .map(|n| Raw::Str(n.into()))
                        .ok_or_else(|| bad(format!("a tensor without a name: {t}"))),
                    _ => Err(bad(format!("unexpected optional tensor {t}"))),
                })
                .collect::<Result<_, _>>()?,
        ),
        "as_optional_tensor" => match variant(v) {
            Some(("as_none", _)) => return Ok(None),
            Some(("as_tensor", t)) => Raw::Str(
                tensor_name(t)
                    .ok_or_else(|| bad(format!("a tensor without a name: {t}")))?
                    .into(),
            ),
            _ => return Err(bad(format!("unexpected optional tensor {v}"))),
        },
        "as_int" => Raw::Int(int(v)?),
        "as_ints" => Raw::List(
            list(v)?
                .iter()
                .map(|x| int(x).map(Raw::Int))
                .collect::<Result<_, _>>()?,
        ),
        "as_float" => Raw::Float(float(v)?),
        "as_floats" => Raw::List(
            list(v)?
                .iter()
                .map(|x| float(x).map(Raw::Float))
                .collect::<Result<_, _>>()?,
        ),
        "as_bool" => Raw::Bool(
            v.as_bool()
                .ok_or_else(|| bad(format!("`as_bool`: {v} is not a bool")))?,
        ),
        "as_bools" => Raw::List(
            list(v)?
                .iter()
                .map(|x| {
                    x.as_bool()
                        .map(Raw::Bool)
                        .ok_or_else(|| bad(format!("`as_bools`: {x} is not a bool")))
                })
                .collect::<Result<_, _>>()?,
        ),
        "as_string" => Raw::Str(
            v.as_str()
                .ok_or_else(|| bad(format!("`as_string`: {v} is not a string")))?
                .into(),
        ),
        "as_scalar_type" => Raw::Str(dtype(int(v)?, &format!("{node}.{param}"))?.name().into()),
        "as_memory_format" => {
            let code = int(v)?;
            if MEMORY_FORMATS.contains(&code) {
                return Ok(None);
            }
            return Err(bad(format!("unknown memory format {code}")));
        }
        "as_layout" => {
            let code = int(v)?;
            if code == STRIDED {
                return Ok(None);
            }
            return Err(bad(format!(
                "layout {code} is not supported (only strided)"
            )));
        }
        "as_device" => return Ok(None),
        // Sizes in the canonical form `specialize::keep_symbols` writes.
        "as_sym_int" if !symbols.is_empty() => raw_size(sym_size(v, node, symbols)?),
        "as_sym_ints" if !symbols.is_empty() => Raw::List(
            list(v)?
                .iter()
                .map(|x| sym_size(x, node, symbols).map(raw_size))
                .collect::<Result<_, _>>()?,
        ),
        "as_sym_int" | "as_sym_ints" | "as_sym_float" | "as_sym_floats" | "as_sym_bool"
        | "as_sym_bools" => {
            return Err(Pt2Error::Symbolic {
                tensor: format!("{node}.{param}"),
                symbol: symbol_names(v),
            })
        }
        other => return Err(bad(format!("argument kind `{other}` is not supported"))),
    }))
}

/// A size argument: an integer as itself.
fn raw_size(s: Size) -> Raw {
    match s.as_const() {
        Some(c) => Raw::Int(c),
        None => Raw::Size(s),
    }
}

/// The symbol names in a symbolic argument (`{"as_name": "s0"}` or a list of them).
fn symbol_names(v: &Value) -> String {
    match v {
        Value::Array(items) => items
            .iter()
            .map(symbol_names)
            .collect::<Vec<_>>()
            .join(", "),
        _ => match variant(v) {
            Some(("as_name", Value::String(s))) => s.clone(),
            Some((_, inner)) => inner.to_string(),
            None => v.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn scalar_type_codes() {
        assert_eq!(dtype(7, "t").ok(), Some(DType::Float32));
        assert_eq!(dtype(13, "t").ok(), Some(DType::BFloat16));
        assert_eq!(dtype(12, "t").ok(), Some(DType::Bool));
        assert!(dtype(10, "t").is_err(), "complex");
    }

    #[test]
    fn arguments() {
        let arg = |v| argument("n", "p", &v, Symbols::none()).map_err(|e| e.to_string());
        assert_eq!(arg(json!({"as_int": -1})), Ok(Some(Raw::Int(-1))));
        assert_eq!(arg(json!({"as_none": true})), Ok(None));
        assert_eq!(arg(json!({"as_memory_format": 1})), Ok(None));
        assert_eq!(
            arg(json!({"as_scalar_type": 6})),
            Ok(Some(Raw::Str("float16".into())))
        );
        assert_eq!(arg(json!({"as_memory_format": 2})), Ok(None));
        assert!(arg(json!({"as_memory_format": 9})).is_err_and(|e| e.contains("memory format 9")));
        assert!(arg(json!({"as_sym_int": {"as_name": "s3"}})).is_err_and(|e| e.contains("`s3`")));
        assert!(arg(json!({"as_graph": {}})).is_err_and(|e| e.contains("`as_graph`")));
    }
}
