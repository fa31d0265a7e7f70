//! Builds the [`Graph`] of an opened archive: inputs from the graph signature, stored
//! tensors as constants (or inputs), one node per FX node through the shared signature
//! table, `getitem` nodes for multi-output ops, outputs, then validation and a check of
//! Kiln's inferred shapes against the ones PyTorch recorded.

use super::archive::Archive;
use super::schema::{self, Model, PayloadConfig};
use super::{Pt2Error, Pt2Options, SUPPORTED_MAJOR};
use crate::graph::front::signature::{bind, is_known, Operand, Raw};
use crate::graph::ir::{Arg, Graph, Node, NodeId, TensorMeta, ValueId};
use crate::graph::ops::{ConstData, NoOpKind, Op};
use crate::graph::{verify, At, Error, UnknownOp};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::HashMap;
use std::io::{Read, Seek};
use std::sync::Arc;

const MODEL_JSON: &str = "models/model.json";
const WEIGHTS_DIR: &str = "data/weights/";
const WEIGHTS_CONFIG: &str = "data/weights/model_weights_config.json";
const CONSTANTS_DIR: &str = "data/constants/";
const CONSTANTS_CONFIG: &str = "data/constants/model_constants_config.json";

/// What an FX node's target names.
enum Target<'a> {
    /// an ATen op in the op set, namespace and overload dropped
    Aten(&'a str),
    /// the in-place form of an op of the op set (`relu_`): the functional op's name
    InPlace(&'a str),
    /// Python's `operator.getitem` on a multi-output node
    GetItem,
    /// anything else
    Unsupported,
}

fn target(t: &str) -> Target<'_> {
    if matches!(
        t,
        "_operator.getitem" | "operator.getitem" | "<built-in function getitem>"
    ) {
        return Target::GetItem;
    }
    let rest = t.strip_prefix("torch.ops.").unwrap_or(t);
    let mut parts = rest.split('.');
    let (Some("aten"), Some(op), _, None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Target::Unsupported;
    };
    let op = aten_alias(op);
    if op != "getitem" && is_known(op) {
        return Target::Aten(op);
    }
    // An in-place op (`relu_`, `add_`, `hardtanh_`) in an inference graph computes what
    // its functional form does; the importer makes later readers of `self` read the
    // result.
    match op.strip_suffix('_') {
        Some(base) if !base.ends_with('_') && is_known(aten_alias(base)) => {
            Target::InPlace(aten_alias(base))
        }
        _ => Target::Unsupported,
    }
}

/// ATen names that are another spelling of an op of the op set.
fn aten_alias(op: &str) -> &str {
    match op {
        "__and__" => "bitwise_and",
        "__or__" => "bitwise_or",
        "__xor__" => "bitwise_xor",
        other => other,
    }
}

/// ATen parameter names that Kiln's signature table spells differently.
fn param_name<'a>(op: &str, param: &'a str) -> &'a str {
    match (op, param) {
        ("pow", "exponent") => "other",
        _ => param,
    }
}

fn json<T: DeserializeOwned, R: Read + Seek>(
    archive: &mut Archive<R>,
    member: &str,
) -> Result<T, Pt2Error> {
    let bytes = archive.read(member)?;
    serde_json::from_slice(&bytes).map_err(|e| Pt2Error::Json {
        member: member.into(),
        message: e.to_string(),
    })
}

/// The folder holding `models/model.json`: `archive/` as torch.export.save writes it,
/// or the model's name in older archives.
fn find_prefix<R: Read + Seek>(archive: &Archive<R>) -> Result<String, Pt2Error> {
    let mut found: Vec<&str> = archive
        .names()
        .iter()
        .filter_map(|n| n.strip_suffix(MODEL_JSON))
        .filter(|p| p.is_empty() || (p.ends_with('/') && p.matches('/').count() == 1))
        .collect();
    found.sort_unstable();
    match found.as_slice() {
        [] => Err(Pt2Error::MissingMember(format!("archive/{MODEL_JSON}"))),
        [one] => Ok((*one).to_string()),
        many if many.contains(&"archive/") => Ok("archive/".into()),
        many => Err(Pt2Error::Schema(format!(
            "the archive holds several models ({}): expected one",
            many.iter()
                .map(|p| format!("{p}{MODEL_JSON}"))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// A placeholder of the graph signature.
enum InputSpec {
    User(String),
    /// a parameter, buffer or constant: the placeholder, its key in the payload
    /// config, and whether it is a tensor constant
    Stored {
        placeholder: String,
        key: String,
        constant: bool,
    },
}

fn input_spec(spec: &Value) -> Result<InputSpec, Pt2Error> {
    let bad = |what: String| Pt2Error::Schema(format!("graph signature: {what}"));
    let (kind, v) = schema::variant(spec).ok_or_else(|| bad(format!("malformed input {spec}")))?;
    let arg_name = |v: &Value| -> Result<String, Pt2Error> {
        v.get("arg")
            .and_then(schema::tensor_name)
            .map(str::to_string)
            .ok_or_else(|| bad(format!("`{kind}` without a tensor name: {v}")))
    };
    let key = |field: &str| -> Result<String, Pt2Error> {
        v.get(field)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| bad(format!("`{kind}` without `{field}`: {v}")))
    };
    Ok(match kind {
        "user_input" => {
            let arg = v.get("arg").unwrap_or(&Value::Null);
            match schema::variant(arg) {
                Some(("as_tensor", t)) => InputSpec::User(
                    schema::tensor_name(t)
                        .ok_or_else(|| bad(format!("a user input without a name: {t}")))?
                        .into(),
                ),
                _ => {
                    return Err(bad(format!(
                        "user input {arg} is not a tensor: Kiln graphs take tensor inputs only"
                    )))
                }
            }
        }
        "parameter" => InputSpec::Stored {
            placeholder: arg_name(v)?,
            key: key("parameter_name")?,
            constant: false,
        },
        "buffer" => InputSpec::Stored {
            placeholder: arg_name(v)?,
            key: key("buffer_name")?,
            constant: false,
        },
        "tensor_constant" => InputSpec::Stored {
            placeholder: arg_name(v)?,
            key: key("tensor_constant_name")?,
            constant: true,
        },
        other => return Err(bad(format!("input kind `{other}` is not supported"))),
    })
}

/// Reads stored tensors, loading each config member once.
struct Payloads<'a, R> {
    archive: &'a mut Archive<R>,
    prefix: String,
    configs: HashMap<&'static str, PayloadConfig>,
    max_bytes: u64,
}

impl<R: Read + Seek> Payloads<'_, R> {
    fn config(&mut self, member: &'static str) -> Result<&PayloadConfig, Pt2Error> {
        if !self.configs.contains_key(member) {
            let full = format!("{}{member}", self.prefix);
            let c: PayloadConfig = json(self.archive, &full)?;
            self.configs.insert(member, c);
        }
        self.configs
            .get(member)
            .ok_or_else(|| Pt2Error::MissingMember(member.into()))
    }

    /// The values of a parameter/buffer (`constant` false) or tensor constant.
    fn values(
        &mut self,
        key: &str,
        constant: bool,
        want: &TensorMeta,
    ) -> Result<ConstData, Pt2Error> {
        let mut places = vec![(CONSTANTS_CONFIG, CONSTANTS_DIR)];
        if !constant {
            // Non-persistent buffers are stored with the constants.
            places.insert(0, (WEIGHTS_CONFIG, WEIGHTS_DIR));
        }
        for (i, (config, dir)) in places.iter().enumerate() {
            let full = format!("{}{config}", self.prefix);
            if i > 0 && !self.archive.has(&full) {
                continue;
            }
            let Some(meta) = self.config(config)?.config.get(key) else {
                continue;
            };
            let (use_pickle, path_name) = (meta.use_pickle, meta.path_name.clone());
            let (dtype, shape, strides, offset) = layout(&meta.tensor_meta, key)?;
            if use_pickle {
                return Err(Pt2Error::Weight {
                    name: key.into(),
                    message: "stored pickled (use_pickle), which Kiln cannot read".into(),
                });
            }
            let member = format!("{}{dir}{path_name}", self.prefix);
            if dtype != want.dtype || shape != want.shape {
                return Err(Pt2Error::Weight {
                    name: key.into(),
                    message: format!(
                        "stored as {dtype}{shape:?}, but the graph uses it as {}{:?}",
                        want.dtype, want.shape
                    ),
                });
            }
            let numel = want.numel() as u64;
            if numel.saturating_mul(dtype.size_bytes() as u64) > self.max_bytes {
                return Err(Pt2Error::TooLarge {
                    member,
                    max: self.max_bytes,
                });
            }
            let need = extent_bytes(key, dtype, &shape, &strides, offset)?;
            let stored = self.archive.read_prefix(&member, need)?;
            let bytes = gather(stored, key, dtype, &shape, &strides, offset)?;
            return Ok(ConstData::Bytes { dtype, bytes });
        }
        Err(Pt2Error::Weight {
            name: key.into(),
            message: format!(
                "not listed in {}{}",
                self.prefix,
                places.iter().map(|p| p.0).collect::<Vec<_>>().join(" or ")
            ),
        })
    }
}

type Layout = (crate::graph::DType, Vec<i64>, Vec<i64>, i64);

fn layout(m: &schema::TensorMeta, key: &str) -> Result<Layout, Pt2Error> {
    let dtype = schema::dtype(m.dtype, key)?;
    let shape = schema::sizes(m, key)?;
    let strides = if m.strides.is_empty() {
        crate::graph::shape::contiguous_strides(&shape)
    } else {
        m.strides
            .iter()
            .map(|s| schema::sym_int(s, key))
            .collect::<Result<Vec<_>, _>>()?
    };
    let offset = match &m.storage_offset {
        Some(o) => schema::sym_int(o, key)?,
        None => 0,
    };
    if strides.len() != shape.len() || strides.iter().any(|&s| s < 0) || offset < 0 {
        return Err(Pt2Error::Weight {
            name: key.into(),
            message: format!(
                "bad layout: strides {strides:?}, offset {offset} for sizes {shape:?}"
            ),
        });
    }
    Ok((dtype, shape, strides, offset))
}

/// The bytes of storage a strided tensor's layout reaches (0 for no elements).
fn extent_bytes(
    key: &str,
    dtype: crate::graph::DType,
    shape: &[i64],
    strides: &[i64],
    offset: i64,
) -> Result<u64, Pt2Error> {
    let overflow = || Pt2Error::Overflow {
        tensor: key.into(),
        message: "the storage extent does not fit in 64 bits".into(),
    };
    if shape.iter().product::<i64>() == 0 {
        return Ok(0);
    }
    // One past the last element read, in elements.
    let mut end = offset.checked_add(1).ok_or_else(overflow)?;
    for (&d, &s) in shape.iter().zip(strides) {
        end = (d - 1)
            .checked_mul(s)
            .and_then(|x| end.checked_add(x))
            .ok_or_else(overflow)?;
    }
    let need = end
        .checked_mul(dtype.size_bytes() as i64)
        .ok_or_else(overflow)?;
    Ok(need.max(0) as u64)
}

/// The row-major elements of a strided tensor whose storage is `stored` (as
/// much as its layout reaches), as dense little-endian storage of `dtype`:
/// `stored` itself when the layout is already dense, so that weights are
/// never copied nor decoded.
fn gather(
    stored: Arc<[u8]>,
    key: &str,
    dtype: crate::graph::DType,
    shape: &[i64],
    strides: &[i64],
    offset: i64,
) -> Result<Arc<[u8]>, Pt2Error> {
    let numel: i64 = shape.iter().product();
    if numel == 0 {
        return Ok(Arc::from(Vec::new()));
    }
    let elem = dtype.size_bytes();
    let need = extent_bytes(key, dtype, shape, strides, offset)?;
    if (stored.len() as u64) < need {
        return Err(Pt2Error::Weight {
            name: key.into(),
            message: format!(
                "the stored file has {} bytes, its layout needs {need}",
                stored.len()
            ),
        });
    }
    let dense = offset == 0
        && crate::graph::shape::contiguous_strides(shape)
            .iter()
            .zip(strides.iter().zip(shape))
            .all(|(c, (s, d))| *d == 1 || c == s);
    if dense && stored.len() == numel as usize * elem {
        return Ok(stored);
    }
    let mut out = Vec::with_capacity(numel as usize * elem);
    let mut index = vec![0i64; shape.len()];
    for _ in 0..numel {
        let at = (offset + index.iter().zip(strides).map(|(i, s)| i * s).sum::<i64>()) as usize;
        out.extend_from_slice(&stored[at * elem..(at + 1) * elem]);
        for d in (0..shape.len()).rev() {
            index[d] += 1;
            if index[d] < shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
    Ok(Arc::from(out))
}

/// The tensor names an FX node's outputs define, and whether it has several outputs.
fn output_names(n: &schema::Node) -> (Vec<Option<String>>, bool) {
    let mut names = vec![];
    let mut multi = n.outputs.len() > 1;
    for o in &n.outputs {
        match schema::variant(o) {
            Some(("as_tensor", t)) => names.push(schema::tensor_name(t).map(str::to_string)),
            Some(("as_tensors", Value::Array(ts))) => {
                multi = true;
                names.extend(
                    ts.iter()
                        .map(|t| schema::tensor_name(t).map(str::to_string)),
                );
            }
            _ => names.push(None),
        }
    }
    (names, multi)
}

/// Builds and validates the graph of an opened archive.
pub(super) fn build<R: Read + Seek>(
    archive: &mut Archive<R>,
    name: &str,
    options: &Pt2Options,
) -> Result<Graph, Error> {
    let prefix = find_prefix(archive)?;
    let byteorder = format!("{prefix}byteorder");
    if archive.has(&byteorder) {
        let order = archive.read(&byteorder)?;
        if order.trim_ascii() != b"little" {
            return Err(Pt2Error::Schema(format!(
                "`{byteorder}` says {:?}: Kiln reads little-endian archives only",
                String::from_utf8_lossy(&order)
            ))
            .into());
        }
    }
    let model: Model = json(archive, &format!("{prefix}{MODEL_JSON}"))?;
    let v = &model.schema_version;
    if !SUPPORTED_MAJOR.contains(&v.major) {
        return Err(Pt2Error::SchemaVersion {
            major: v.major,
            minor: v.minor,
            supported: SUPPORTED_MAJOR
                .iter()
                .map(|m| m.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        }
        .into());
    }
    let gm = &model.graph_module;

    // Symbolic sizes first: every later message would be about their consequences.
    let mut metas: HashMap<&str, TensorMeta> = HashMap::with_capacity(gm.graph.tensor_values.len());
    for (t, m) in &gm.graph.tensor_values {
        let shape = schema::sizes(m, t)?;
        let dtype = schema::dtype(m.dtype, t)?;
        metas.insert(t, TensorMeta::contiguous(shape, dtype));
    }
    let meta_of = |t: &str| {
        metas
            .get(t)
            .cloned()
            .ok_or_else(|| Pt2Error::Schema(format!("tensor `{t}` has no entry in tensor_values")))
    };

    // Unsupported ops, each listed once with every node using it.
    let mut unknown: Vec<UnknownOp> = vec![];
    for n in &gm.graph.nodes {
        if matches!(target(&n.target), Target::Unsupported) {
            let at = At {
                node: n.name.clone(),
                line: None,
            };
            match unknown.iter_mut().find(|u| u.op == n.target) {
                Some(u) => u.nodes.push(at),
                None => unknown.push(UnknownOp {
                    op: n.target.clone(),
                    nodes: vec![at],
                    // An ATen op outside the op set is a missing feature, not a typo.
                    similar: vec![],
                }),
            }
        }
    }
    if !unknown.is_empty() {
        return Err(Error::UnknownOps(unknown));
    }

    let mut g = Graph::new(name);
    let mut values: HashMap<String, ValueId> = HashMap::new();
    let specs = gm
        .signature
        .input_specs
        .iter()
        .map(input_spec)
        .collect::<Result<Vec<_>, _>>()?;
    // User inputs come first so that `inputN.bin` counts user inputs only.
    let mut index = 0;
    for s in &specs {
        if let InputSpec::User(t) = s {
            if g.has_name(t) {
                return Err(Pt2Error::Schema(format!("placeholder `{t}` is defined twice")).into());
            }
            let id = g.add_node(Node {
                name: t.clone(),
                op: Op::Input { index },
                args: vec![],
                outputs: vec![meta_of(t)?],
                line: None,
            });
            index += 1;
            values.insert(t.clone(), ValueId::first(id));
        }
    }
    let mut payloads = Payloads {
        archive,
        prefix: prefix.clone(),
        configs: HashMap::new(),
        max_bytes: options.limits.max_total_bytes,
    };
    for s in &specs {
        let InputSpec::Stored {
            placeholder,
            key,
            constant,
        } = s
        else {
            continue;
        };
        let meta = meta_of(placeholder)?;
        let op = if options.params_as_inputs {
            index += 1;
            Op::Input { index: index - 1 }
        } else {
            Op::Constant {
                data: payloads.values(key, *constant, &meta)?,
            }
        };
        if g.has_name(placeholder) {
            return Err(
                Pt2Error::Schema(format!("placeholder `{placeholder}` is defined twice")).into(),
            );
        }
        let id = g.add_node(Node {
            name: placeholder.clone(),
            op,
            args: vec![],
            outputs: vec![meta],
            line: None,
        });
        values.insert(placeholder.clone(), ValueId::first(id));
    }

    // (tensor, node, value) for the shape check after validation
    let mut produced: Vec<(String, String, ValueId)> = vec![];
    let mut multi_nodes: HashMap<String, NodeId> = HashMap::new();
    for n in &gm.graph.nodes {
        let (outs, multi) = output_names(n);
        let node_name = if n.name.is_empty() {
            outs.iter()
                .flatten()
                .next()
                .cloned()
                .unwrap_or_else(|| "node".into())
        } else {
            n.name.clone()
        };
        let at = || At {
            node: node_name.clone(),
            line: None,
        };
        let unknown_tensor = |t: &str| Error::UnknownTensor {
            at: at(),
            name: t.into(),
        };
        let (op, args) = match target(&n.target) {
            Target::Unsupported => continue, // reported above
            Target::GetItem => {
                let (source, index) = getitem_args(n, &node_name)?;
                let arg = match source {
                    Raw::Str(t) => match multi_nodes.get(&t) {
                        Some(&node) => ValueId {
                            node,
                            output: u32::try_from(index).unwrap_or(u32::MAX),
                        },
                        None => return Err(unknown_tensor(&t)),
                    },
                    Raw::List(ts) => match usize::try_from(index).ok().and_then(|i| ts.get(i)) {
                        Some(Raw::Str(t)) => *values.get(t).ok_or_else(|| unknown_tensor(t))?,
                        _ => {
                            return Err(Pt2Error::Argument {
                                node: node_name.clone(),
                                param: "index".into(),
                                message: format!("index {index} is out of range"),
                            }
                            .into())
                        }
                    },
                    _ => return Err(unknown_tensor("?")),
                };
                (Op::GetItem { index }, vec![Arg::Value(arg)])
            }
            Target::Aten(op_name) | Target::InPlace(op_name) => {
                let mut attrs: Vec<(String, Raw)> = Vec::with_capacity(n.inputs.len());
                for a in &n.inputs {
                    if a.name.is_empty() {
                        return Err(Pt2Error::Argument {
                            node: node_name.clone(),
                            param: "?".into(),
                            message: "an argument without a parameter name".into(),
                        }
                        .into());
                    }
                    if let Some(raw) = schema::argument(&node_name, &a.name, &a.arg)? {
                        attrs.push((param_name(op_name, &a.name).to_string(), raw));
                    }
                }
                let (op, operands) =
                    bind(op_name, &[], &attrs).map_err(|source| Error::Signature {
                        at: at(),
                        op: op_name.into(),
                        source: Box::new(source),
                    })?;
                let mut args = Vec::with_capacity(operands.len());
                for o in operands {
                    args.push(match o {
                        Operand::Scalar(s) => Arg::Scalar(s),
                        Operand::Name(t) => {
                            Arg::Value(*values.get(&t).ok_or_else(|| unknown_tensor(&t))?)
                        }
                    });
                }
                (op, args)
            }
        };
        if !multi {
            let Some(Some(out)) = outs.first() else {
                // `_assert_tensor_metadata` as real models export it checks and returns
                // nothing: Kiln's inference already fixes every dtype it could assert.
                if matches!(op, Op::NoOp(NoOpKind::AssertTensorMetadata)) {
                    continue;
                }
                return Err(
                    Pt2Error::Schema(format!("node `{node_name}` has no tensor output")).into(),
                );
            };
            // Later readers of the tensor an in-place op mutated read its result.
            let mutated = match target(&n.target) {
                Target::InPlace(_) => in_place_self(n),
                _ => None,
            };
            let name = unique(&g, out);
            let id = g.add_node(Node {
                name,
                op,
                args,
                outputs: vec![],
                line: None,
            });
            values.insert(out.clone(), ValueId::first(id));
            if let Some(mutated) = mutated {
                values.insert(mutated, ValueId::first(id));
            }
            produced.push((out.clone(), node_name.clone(), ValueId::first(id)));
            continue;
        }
        let name = unique(&g, &node_name);
        let id = g.add_node(Node {
            name,
            op,
            args,
            outputs: vec![],
            line: None,
        });
        multi_nodes.insert(node_name.clone(), id);
        for (i, out) in outs.iter().enumerate() {
            let Some(out) = out else { continue };
            let source = ValueId {
                node: id,
                output: i as u32,
            };
            let item = g.add_node(Node {
                name: unique(&g, out),
                op: Op::GetItem { index: i as i64 },
                args: vec![Arg::Value(source)],
                outputs: vec![],
                line: None,
            });
            values.insert(out.clone(), ValueId::first(item));
            produced.push((out.clone(), node_name.clone(), ValueId::first(item)));
        }
    }

    let mut outputs = vec![];
    for spec in &gm.signature.output_specs {
        let bad = || Pt2Error::Schema(format!("graph signature: unsupported output {spec}"));
        let (kind, v) = schema::variant(spec).ok_or_else(bad)?;
        if kind != "user_output" {
            return Err(Pt2Error::Schema(format!(
                "graph signature: output kind `{kind}` (a mutation or training output) is not supported"
            ))
            .into());
        }
        let t = v
            .get("arg")
            .and_then(|a| match schema::variant(a) {
                Some(("as_tensor", t)) => schema::tensor_name(t),
                _ => None,
            })
            .ok_or_else(bad)?;
        outputs.push(
            *values
                .get(t)
                .ok_or_else(|| Error::UnknownOutput(t.to_string()))?,
        );
    }
    if outputs.is_empty() {
        return Err(Error::NoOutputs);
    }
    g.set_outputs(outputs);
    verify::validate(&mut g)?;

    for (t, node, v) in &produced {
        let (Some(want), Some(got)) = (metas.get(t.as_str()), g.meta(*v)) else {
            continue;
        };
        if want.shape != got.shape || want.dtype != got.dtype {
            return Err(Pt2Error::ShapeMismatch {
                node: node.clone(),
                tensor: t.clone(),
                expected: format!("{}{:?}", want.dtype, want.shape),
                found: format!("{}{:?}", got.dtype, got.shape),
            }
            .into());
        }
    }
    Ok(g)
}

/// The tensor an in-place node mutates: its `self` argument.
fn in_place_self(n: &schema::Node) -> Option<String> {
    let a = n
        .inputs
        .iter()
        .find(|a| a.name == "self" || a.name == "input")?;
    match schema::variant(&a.arg) {
        Some(("as_tensor", t)) => schema::tensor_name(t).map(str::to_string),
        _ => None,
    }
}

/// `name`, or a fresh variant of it if a node already has it.
fn unique(g: &Graph, name: &str) -> String {
    if !g.has_name(name) {
        return name.into();
    }
    (1..)
        .map(|i| format!("{name}_{i}"))
        .find(|n| !g.has_name(n))
        .unwrap_or_else(|| name.into())
}

/// `getitem(source, index)`'s two arguments, given positionally.
fn getitem_args(n: &schema::Node, node: &str) -> Result<(Raw, i64), Pt2Error> {
    let bad = |message: &str| Pt2Error::Argument {
        node: node.into(),
        param: "getitem".into(),
        message: message.into(),
    };
    let [source, index] = n.inputs.as_slice() else {
        return Err(bad(
            "expected two arguments (a multi-output value and an index)",
        ));
    };
    let source =
        schema::argument(node, "self", &source.arg)?.ok_or_else(|| bad("the source is None"))?;
    match schema::argument(node, "index", &index.arg)? {
        Some(Raw::Int(i)) if i >= 0 => Ok((source, i)),
        _ => Err(bad("the index must be a non-negative integer")),
    }
}

#[cfg(test)]
mod tests {
    use super::{target, Target};

    #[test]
    fn targets_drop_namespace_and_overload() {
        let op = |t| match target(t) {
            Target::Aten(op) => op.to_string(),
            Target::InPlace(op) => format!("{op} in place"),
            Target::GetItem => "getitem".into(),
            Target::Unsupported => "-".into(),
        };
        assert_eq!(op("torch.ops.aten.linear.default"), "linear");
        assert_eq!(op("torch.ops.aten.split.Tensor"), "split");
        assert_eq!(op("aten.add"), "add");
        assert_eq!(op("_operator.getitem"), "getitem");
        assert_eq!(op("<built-in function getitem>"), "getitem");
        assert_eq!(op("torch.ops.aten.getitem.default"), "-");
        assert_eq!(op("torch.ops.prims.add.default"), "-");
        assert_eq!(op("torch.ops.aten.frobnicate.default"), "-");
        assert_eq!(op("torch.ops.aten.add.Tensor.extra"), "-");
        assert_eq!(op("torch.ops.aten.relu_.default"), "relu in place");
        assert_eq!(op("torch.ops.aten.__and__.Tensor"), "bitwise_and");
        assert_eq!(op("torch.ops.aten.add__.Tensor"), "-");
        assert_eq!(op("torch.ops.aten.frobnicate_.default"), "-");
    }
}
