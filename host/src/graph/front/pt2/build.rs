//! Builds the [`Graph`] of an opened archive: inputs from the graph signature, stored
//! tensors as constants (or inputs), one node per FX node through the shared op table, `getitem` nodes for multi-output ops, outputs, then validation and a check of
//! Kiln's inferred shapes against the ones PyTorch recorded.

use super::archive::Archive;
use super::schema::{self, Model, PayloadConfig};
use super::{Pt2Error, Pt2Options, SUPPORTED_MAJOR};
use crate::graph::front::table::{self, Call, Lowered, Operand, Raw, SigError, Step};
use crate::graph::ir::{Arg, Graph, Node, NodeId, TensorMeta, ValueId};
use crate::graph::ops::{ConstData, NoOpKind, Op};
use crate::graph::{verify, At, Error, UnknownOp};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
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
    /// `torch.ops.higher_order.wrap_with_set_grad_enabled`: a subgraph run under a grad
    /// mode, which inference ignores; the importer inlines the subgraph
    WrapSetGradEnabled,
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
    if rest == "higher_order.wrap_with_set_grad_enabled" {
        return Target::WrapSetGradEnabled;
    }
    let mut parts = rest.split('.');
    let (Some("aten"), Some(op), _, None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Target::Unsupported;
    };
    if op != "getitem" && table::is_known(op) {
        return Target::Aten(op);
    }
    // An in-place op (`relu_`, `add_`, `hardtanh_`) in an inference graph computes what
    // its functional form does; the importer makes later readers of `self` read the
    // result.
    match op.strip_suffix('_') {
        Some(base) if !base.ends_with('_') && table::is_known(base) => Target::InPlace(base),
        _ => Target::Unsupported,
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
    /// a non-tensor argument whose value the graph was specialised on
    Fixed,
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
        // A non-tensor argument of the call (`use_cache=False`): export specialises the
        // graph on its value, so it is no input of Kiln's graph.
        "constant_input" => InputSpec::Fixed,
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
    let (prefix, model) = read_model(archive)?;
    let gm = &model.graph_module;

    // Symbolic sizes first: every later message would be about their consequences.
    let metas = tensor_metas(&gm.graph.tensor_values)?;

    // Unsupported ops, each listed once with every node using it (in subgraphs too).
    let mut unknown: Vec<UnknownOp> = vec![];
    unsupported_ops(&gm.graph.nodes, &gm.graph.outputs, &mut unknown, 0, "");
    if !unknown.is_empty() {
        return Err(Error::UnknownOps(unknown));
    }

    let mut g = Graph::new(name);
    let specs = gm
        .signature
        .input_specs
        .iter()
        .map(input_spec)
        .collect::<Result<Vec<_>, _>>()?;
    let mut payloads = Payloads {
        archive,
        prefix,
        configs: HashMap::new(),
        max_bytes: options.limits.max_total_bytes,
    };
    let values = add_inputs(&mut g, &specs, &metas, &mut payloads, options)?;

    let mut produced: Vec<Produced> = vec![];
    let mut scope = Scope {
        values,
        multi: HashMap::new(),
        metas,
        prefix: String::new(),
        depth: 0,
        path: String::new(),
        layouts: tensor_layouts(&gm.graph.tensor_values),
        aliases: Aliases::default(),
    };
    import_nodes(
        &mut g,
        &gm.graph.nodes,
        &mut scope,
        &mut produced,
        &gm.graph.outputs,
    )?;
    let outputs = user_outputs(&mut g, &mut scope, &gm.signature.output_specs)?;
    g.set_outputs(outputs);
    verify::validate(&mut g)?;
    check_recorded(&g, &produced)?;
    Ok(g)
}

/// The archive's model folder and its `model.json`, checked for a little-endian archive
/// of a schema version this importer reads.
fn read_model<R: Read + Seek>(archive: &mut Archive<R>) -> Result<(String, Model), Error> {
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
    Ok((prefix, model))
}

/// The graph's inputs: the user inputs first (so that `inputN.bin` counts user inputs
/// only), then parameters, buffers and constants (as constants read from the archive,
/// or as inputs). Returns each placeholder's value.
fn add_inputs<R: Read + Seek>(
    g: &mut Graph,
    specs: &[InputSpec],
    metas: &HashMap<&str, TensorMeta>,
    payloads: &mut Payloads<'_, R>,
    options: &Pt2Options,
) -> Result<HashMap<String, ValueId>, Error> {
    let meta_of = |t: &str| {
        metas
            .get(t)
            .cloned()
            .ok_or_else(|| Pt2Error::Schema(format!("tensor `{t}` has no entry in tensor_values")))
    };
    let mut values: HashMap<String, ValueId> = HashMap::new();
    let mut index = 0;
    for s in specs {
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
    for s in specs {
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
    Ok(values)
}

/// The values of the graph signature's user outputs.
fn user_outputs(
    g: &mut Graph,
    scope: &mut Scope<'_>,
    specs: &[Value],
) -> Result<Vec<ValueId>, Error> {
    let mut outputs = vec![];
    for spec in specs {
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
        if !scope.values.contains_key(t) {
            return Err(Error::UnknownOutput(t.to_string()));
        }
        outputs.push(current(g, scope, t, "the graph's output")?);
    }
    if outputs.is_empty() {
        return Err(Error::NoOutputs);
    }
    Ok(outputs)
}

/// Kiln's inferred shapes and dtypes against the ones PyTorch recorded.
fn check_recorded(g: &Graph, produced: &[Produced]) -> Result<(), Error> {
    for p in produced {
        let (Some(want), Some(got)) = (&p.want, g.meta(p.value)) else {
            continue;
        };
        if want.shape != got.shape || want.dtype != got.dtype {
            return Err(Pt2Error::ShapeMismatch {
                node: p.node.clone(),
                tensor: p.tensor.clone(),
                expected: format!("{}{:?}", want.dtype, want.shape),
                found: format!("{}{:?}", got.dtype, got.shape),
            }
            .into());
        }
    }
    Ok(())
}

/// The deepest nesting of subgraphs the importer follows (the JSON parser's own
/// recursion limit stops an archive at about 17).
const MAX_SUBGRAPH_DEPTH: usize = 8;

/// Where the outputs of a multi-output FX node are, for explicit `getitem` nodes.
enum Multi {
    /// the outputs of one Kiln node
    Node(NodeId),
    /// the values an inlined subgraph returns, in order (`None` for a returned `None`)
    Values(Vec<Option<ValueId>>),
}

/// The tensor names of one FX graph: the program's, or the subgraph of a higher-order
/// op, which is a namespace of its own that the enclosing graph reaches only through
/// its placeholders and outputs.
struct Scope<'a> {
    /// tensor name → value
    values: HashMap<String, ValueId>,
    /// multi-output node name → its outputs
    multi: HashMap<String, Multi>,
    /// the shapes and dtypes PyTorch recorded (the graph's `tensor_values`)
    metas: HashMap<&'a str, TensorMeta>,
    /// what the names of the Kiln nodes made here start with ("" in the program's graph)
    prefix: String,
    /// how many subgraphs enclose this one
    depth: usize,
    /// where this graph is, for messages: "" in the program's graph, else the
    /// enclosing subgraphs' names, outermost first, each followed by `/`
    path: String,
    /// the strides and storage offsets PyTorch recorded, where they are static
    layouts: HashMap<&'a str, (Vec<i64>, i64)>,
    /// which tensors share storage, and which were overwritten through another alias
    aliases: Aliases,
}

/// ATen ops whose output may share its operand's storage (views, and ops that return
/// their operand unchanged when there is nothing to do).
fn aliases_operand(op: &str) -> bool {
    matches!(
        op,
        "view"
            | "reshape"
            | "_unsafe_view"
            | "view_as"
            | "slice"
            | "select"
            | "permute"
            | "transpose"
            | "t"
            | "numpy_T"
            | "unsqueeze"
            | "squeeze"
            | "expand"
            | "expand_as"
            | "alias"
            | "detach"
            | "as_strided"
            | "diagonal"
            | "narrow"
            | "unflatten"
            | "flatten"
            | "split"
            | "split_with_sizes"
            | "chunk"
            | "unbind"
            | "dropout"
            | "contiguous"
            | "to"
            | "type_as"
    )
}

/// Storage sharing between the tensors of a training-IR graph, whose in-place ops
/// (`fill_` into a slice of a mask, `copy_` into a row) change every alias of what they
/// write. Kiln functionalises them as PyTorch's `run_decompositions()` would: the write
/// goes back up the chain of views into the tensor they view (`slice_scatter`,
/// `select_scatter`, the inverse reshape or permutation), and every other view of that
/// storage is made again from the new value when it is next read. A write back through a
/// view Kiln cannot invert (`expand`, `as_strided`, a piece of `split`) leaves the other
/// aliases stale, and reading one is refused rather than computed from the value before
/// the write.
#[derive(Default)]
struct Aliases {
    /// tensor → the tensor whose storage it shares (absent: its own)
    root: HashMap<String, String>,
    /// root → every tensor sharing its storage, the root first
    members: HashMap<String, Vec<String>>,
    /// view → how it was made from the tensor it views
    views: HashMap<String, ViewOf>,
    /// tensors whose storage a write changed after they were made, and that are made
    /// again from their base when next read
    outdated: HashSet<String>,
    /// tensor → the node that wrote into its storage through an alias it cannot be
    /// made again from
    stale: HashMap<String, String>,
}

/// How a view was made from the tensor whose storage it shares.
#[derive(Clone)]
struct ViewOf {
    /// the tensor it views
    base: String,
    /// the view op (one tensor operand), or `None` for the same tensor under another
    /// name (an in-place op's result, `alias`, `detach`)
    op: Option<Op>,
}

/// What a write into a view does to the tensor it views.
enum WriteBack {
    /// the view is the tensor
    Same,
    /// `op(base, view)`: the view's elements put back into the base
    Scatter(Op),
    /// `op(view)`: the view reshaped or permuted back to the base
    Undo(Op),
}

impl Aliases {
    fn root_of(&self, t: &str) -> String {
        self.root.get(t).cloned().unwrap_or_else(|| t.to_string())
    }

    /// `out` shares the storage of `of`.
    fn share(&mut self, out: &str, of: &str) {
        let root = self.root_of(of);
        self.root.insert(out.to_string(), root.clone());
        self.members
            .entry(root.clone())
            .or_insert_with(|| vec![root])
            .push(out.to_string());
    }

    /// Whether `t` can be made again from the root of its storage: every step from it
    /// up to the root is a recorded view.
    fn remakeable(&self, t: &str) -> bool {
        let root = self.root_of(t);
        let mut cur = t;
        // A chain of views is acyclic (each names an earlier tensor); the bound only
        // guards against a corrupt map.
        for _ in 0..=self.root.len() {
            if cur == root {
                return true;
            }
            match self.views.get(cur) {
                Some(v) => cur = &v.base,
                None => return false,
            }
        }
        false
    }

    /// An error if `t` was overwritten through an alias it cannot be made again from.
    fn check(&self, t: &str, reader: &str) -> Result<(), Pt2Error> {
        match self.stale.get(t) {
            Some(writer) => Err(Pt2Error::Schema(format!(
                "node `{reader}` reads `{t}` after node `{writer}` changed it in place through a view Kiln cannot write back through (only slice, select, view/reshape, squeeze/unsqueeze, flatten, permute and transpose are): save `exported.run_decompositions()` instead, which writes the change out as `slice_scatter`/`copy`"
            ))),
            None => Ok(()),
        }
    }
}

/// The view op a node's (op, operands) records, if it is one Kiln can apply again:
/// `Some(None)` for the operand itself under another name.
fn view_step(op: &Op, args: &[Arg]) -> Option<Option<Op>> {
    let [Arg::Value(_)] = args else {
        return None;
    };
    match op {
        Op::NoOp(NoOpKind::Alias | NoOpKind::Dropout) | Op::Contiguous => Some(None),
        Op::Reshape { .. }
        | Op::Flatten { .. }
        | Op::Unsqueeze { .. }
        | Op::Squeeze { .. }
        | Op::Permute { .. }
        | Op::Transpose { .. }
        | Op::Select { .. }
        | Op::Slice { .. }
        | Op::Expand { .. } => Some(Some(op.clone())),
        _ => None,
    }
}

/// How a write into a view made by `op` reaches the tensor it views (of shape `base`,
/// where PyTorch recorded it); `None` where it cannot.
fn write_back(op: &Option<Op>, base: Option<&[i64]>) -> Option<WriteBack> {
    let Some(op) = op else {
        return Some(WriteBack::Same);
    };
    Some(match *op {
        Op::Slice {
            dim,
            start,
            end,
            step,
        } => WriteBack::Scatter(Op::SliceScatter {
            dim,
            start,
            end,
            step,
            select: false,
        }),
        Op::Select { dim, index } => WriteBack::Scatter(Op::SliceScatter {
            dim,
            start: Some(index),
            end: Some(index.wrapping_add(1)),
            step: 1,
            select: true,
        }),
        Op::Reshape { .. } | Op::Flatten { .. } | Op::Unsqueeze { .. } | Op::Squeeze { .. } => {
            WriteBack::Undo(Op::Reshape {
                shape: base?.to_vec(),
                view: false,
            })
        }
        Op::Permute { ref dims } => {
            let rank = dims.len();
            let mut inverse = vec![-1i64; rank];
            for (i, &d) in dims.iter().enumerate() {
                let d = if d < 0 { d + rank as i64 } else { d };
                let slot = inverse.get_mut(usize::try_from(d).ok()?)?;
                if *slot != -1 {
                    return None;
                }
                *slot = i as i64;
            }
            WriteBack::Undo(Op::Permute { dims: inverse })
        }
        Op::Transpose { dim0, dim1 } => WriteBack::Undo(Op::Transpose { dim0, dim1 }),
        _ => return None,
    })
}

/// The current value of tensor `t` for node `reader`: a view whose storage a write
/// changed is made again from its base.
fn current(g: &mut Graph, scope: &mut Scope<'_>, t: &str, reader: &str) -> Result<ValueId, Error> {
    scope.aliases.check(t, reader)?;
    if scope.aliases.outdated.remove(t) {
        let Some(view) = scope.aliases.views.get(t).cloned() else {
            return Err(Pt2Error::Schema(format!(
                "node `{reader}` reads `{t}`, an alias whose storage changed and that has no recorded view"
            ))
            .into());
        };
        let base = current(g, scope, &view.base, reader)?;
        let value = match view.op {
            None => base,
            Some(op) => {
                let name = unique(g, &format!("{}{t}", scope.prefix));
                ValueId::first(g.add_node(Node {
                    name,
                    op,
                    args: vec![Arg::Value(base)],
                    outputs: vec![],
                    line: None,
                }))
            }
        };
        scope.values.insert(t.to_string(), value);
    }
    scope
        .values
        .get(t)
        .copied()
        .ok_or_else(|| Error::UnknownTensor {
            at: At {
                node: reader.into(),
                line: None,
            },
            name: t.into(),
        })
}

/// Node `writer` wrote `value` into tensor `t` in place, and returned it as `result`:
/// `t` and the tensors it views, up to the root of its storage, take the new elements,
/// and the storage's other aliases are made again when next read (or, past a view that
/// cannot be written back through, are stale).
fn write_into(
    g: &mut Graph,
    scope: &mut Scope<'_>,
    t: &str,
    value: ValueId,
    writer: &str,
    result: &str,
) -> Result<(), Error> {
    scope.values.insert(t.to_string(), value);
    scope.aliases.outdated.remove(t);
    scope.aliases.stale.remove(t);
    let mut chain = vec![t.to_string()];
    let mut reached_root = true;
    while let Some(view) = scope
        .aliases
        .views
        .get(chain[chain.len() - 1].as_str())
        .cloned()
    {
        let shape = scope.metas.get(view.base.as_str()).map(|m| m.shape.clone());
        let Some(back) = write_back(&view.op, shape.as_deref()) else {
            reached_root = false;
            break;
        };
        let written = scope.values[chain[chain.len() - 1].as_str()];
        let (op, args) = match back {
            WriteBack::Same => {
                scope.values.insert(view.base.clone(), written);
                scope.aliases.outdated.remove(&view.base);
                scope.aliases.stale.remove(&view.base);
                chain.push(view.base);
                continue;
            }
            WriteBack::Scatter(op) => {
                let base = current(g, scope, &view.base, writer)?;
                (op, vec![Arg::Value(base), Arg::Value(written)])
            }
            WriteBack::Undo(op) => (op, vec![Arg::Value(written)]),
        };
        let name = unique(g, &format!("{}{}", scope.prefix, view.base));
        let id = g.add_node(Node {
            name,
            op,
            args,
            outputs: vec![],
            line: None,
        });
        scope.values.insert(view.base.clone(), ValueId::first(id));
        scope.aliases.outdated.remove(&view.base);
        scope.aliases.stale.remove(&view.base);
        chain.push(view.base);
    }
    let aliases = &mut scope.aliases;
    let root = aliases.root_of(t);
    let members = aliases
        .members
        .get(&root)
        .cloned()
        .unwrap_or_else(|| vec![root]);
    for m in members {
        if m == result || chain.contains(&m) {
            continue;
        }
        if reached_root && !aliases.stale.contains_key(&m) && aliases.remakeable(&m) {
            aliases.outdated.insert(m);
        } else {
            aliases.outdated.remove(&m);
            aliases.stale.insert(m, writer.to_string());
        }
    }
    Ok(())
}

/// A tensor an FX node produced, for the shape check after validation.
struct Produced {
    /// the tensor's name in the archive
    tensor: String,
    /// the FX node
    node: String,
    /// the Kiln value
    value: ValueId,
    /// the shape and dtype PyTorch recorded, if it did
    want: Option<TensorMeta>,
}

/// A graph's `tensor_values` as Kiln metadata (static sizes only).
fn tensor_metas(
    values: &std::collections::BTreeMap<String, schema::TensorMeta>,
) -> Result<HashMap<&str, TensorMeta>, Pt2Error> {
    let mut metas = HashMap::with_capacity(values.len());
    for (t, m) in values {
        let shape = schema::sizes(m, t)?;
        let dtype = schema::dtype(m.dtype, t)?;
        metas.insert(t.as_str(), TensorMeta::contiguous(shape, dtype));
    }
    Ok(metas)
}

/// The recorded strides and storage offsets that are static.
fn tensor_layouts(
    values: &std::collections::BTreeMap<String, schema::TensorMeta>,
) -> HashMap<&str, (Vec<i64>, i64)> {
    values
        .iter()
        .filter_map(|(t, m)| {
            let strides = m
                .strides
                .iter()
                .map(|s| s.get("as_int").and_then(Value::as_i64))
                .collect::<Option<Vec<_>>>()?;
            let offset = match &m.storage_offset {
                None => 0,
                Some(o) => o.get("as_int").and_then(Value::as_i64)?,
            };
            Some((t.as_str(), (strides, offset)))
        })
        .collect()
}

/// Every tensor name an argument mentions (a superset of what it reads: any `name`).
fn mentioned(v: &Value, into: &mut HashSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("name", Value::String(s)) => {
                        into.insert(s.clone());
                    }
                    _ => mentioned(x, into),
                }
            }
        }
        Value::Array(a) => {
            for x in a {
                mentioned(x, into);
            }
        }
        _ => {}
    }
}

/// The nodes of a graph whose results nothing reads: no later live node and no output of
/// the graph. An in-place op and a node without outputs (a check) are kept, for what they
/// do besides returning. Dropping them lets a model import whose graph computes
/// something it never uses with an op Kiln does not have (`rand` for a layer-drop test
/// that only training reads).
fn dead_nodes(nodes: &[schema::Node], outputs: &[Value]) -> HashSet<String> {
    let mut live = HashSet::new();
    for o in outputs {
        mentioned(o, &mut live);
    }
    let mut dead = HashSet::new();
    for n in nodes.iter().rev() {
        let (outs, _) = output_names(n);
        let in_place = matches!(target(&n.target), Target::InPlace(_))
            || n.target
                .rsplit('.')
                .nth(1)
                .is_some_and(|op| op.ends_with('_') && !op.ends_with("__"));
        let used = in_place
            || outs.iter().all(Option::is_none)
            || live.contains(&n.name)
            || outs.iter().flatten().any(|o| live.contains(o));
        if used {
            for a in &n.inputs {
                mentioned(&a.arg, &mut live);
            }
        } else {
            dead.insert(n.name.clone());
        }
    }
    dead
}

/// Lists the nodes of `nodes` whose op Kiln does not have, in the subgraphs of
/// higher-order ops too (a subgraph that does not parse is reported by the import);
/// nodes whose results nothing reads are left out.
fn unsupported_ops(
    nodes: &[schema::Node],
    outputs: &[Value],
    unknown: &mut Vec<UnknownOp>,
    depth: usize,
    path: &str,
) {
    let dead = dead_nodes(nodes, outputs);
    for n in nodes {
        if dead.contains(&n.name) {
            continue;
        }
        match target(&n.target) {
            Target::Unsupported => {
                let at = At {
                    node: format!("{path}{}", n.name),
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
            Target::WrapSetGradEnabled if depth < MAX_SUBGRAPH_DEPTH => {
                let Some(("as_graph", sub)) = n.inputs.get(1).and_then(|a| schema::variant(&a.arg))
                else {
                    continue;
                };
                let name = match sub.get("name").and_then(Value::as_str) {
                    Some(s) if !s.is_empty() => s,
                    _ => &n.name,
                };
                if let Some(graph) = sub
                    .get("graph")
                    .and_then(|g| schema::Graph::deserialize(g).ok())
                {
                    unsupported_ops(
                        &graph.nodes,
                        &graph.outputs,
                        unknown,
                        depth + 1,
                        &format!("{path}{name}/"),
                    );
                }
            }
            _ => {}
        }
    }
}

/// Imports the FX nodes of one graph, in order, into `g`.
fn import_nodes(
    g: &mut Graph,
    nodes: &[schema::Node],
    scope: &mut Scope<'_>,
    produced: &mut Vec<Produced>,
    outputs: &[Value],
) -> Result<(), Error> {
    let dead = dead_nodes(nodes, outputs);
    for n in nodes {
        if dead.contains(&n.name) {
            tracing::debug!(node = %n.name, op = %n.target, "dropped: nothing reads its result");
            continue;
        }
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
        let fx = FxNode {
            n,
            // The node as messages name it: with the subgraphs it is in.
            shown: format!("{}{node_name}", scope.path),
            name: node_name,
            outs,
            multi,
        };
        let (op, args) = match target(&n.target) {
            Target::Unsupported => continue, // reported before the import
            Target::WrapSetGradEnabled => {
                inline_wrap(g, n, &fx.name, scope, produced)?;
                continue;
            }
            Target::GetItem => import_getitem(scope, &fx)?,
            Target::Aten(op) => match import_aten(g, scope, produced, &fx, op, false)? {
                Some(bound) => bound,
                None => continue,
            },
            Target::InPlace(op) => match import_aten(g, scope, produced, &fx, op, true)? {
                Some(bound) => bound,
                None => continue,
            },
        };
        add_node(g, scope, produced, &fx, op, args)?;
    }
    Ok(())
}

/// One FX node being imported.
struct FxNode<'n> {
    n: &'n schema::Node,
    /// its name (its first output's where the archive gives none)
    name: String,
    /// its name as messages show it, with the subgraphs it is in
    shown: String,
    /// the tensors its outputs define
    outs: Vec<Option<String>>,
    /// whether it has several outputs
    multi: bool,
}

impl FxNode<'_> {
    fn at(&self) -> At {
        At {
            node: self.shown.clone(),
            line: None,
        }
    }

    fn unknown_tensor(&self, t: &str) -> Error {
        Error::UnknownTensor {
            at: self.at(),
            name: t.into(),
        }
    }

    fn in_place(&self) -> bool {
        matches!(target(&self.n.target), Target::InPlace(_))
    }
}

/// `operator.getitem(source, index)`: the op and its operand, the selected output.
fn import_getitem(scope: &mut Scope<'_>, fx: &FxNode<'_>) -> Result<(Op, Vec<Arg>), Error> {
    let (source, index) = getitem_args(fx.n, &fx.shown)?;
    if let Raw::Str(t) = &source {
        scope.aliases.check(t, &fx.shown)?;
        if let Some(Some(out)) = fx.outs.first() {
            if scope.aliases.root.contains_key(t) {
                scope.aliases.share(out, t);
            }
        }
    }
    let out_of_range = || Pt2Error::Argument {
        node: fx.shown.clone(),
        param: "index".into(),
        message: format!("index {index} is out of range"),
    };
    let arg = match source {
        Raw::Str(t) => match scope.multi.get(&t) {
            Some(&Multi::Node(node)) => ValueId {
                node,
                output: u32::try_from(index).unwrap_or(u32::MAX),
            },
            Some(Multi::Values(vs)) => usize::try_from(index)
                .ok()
                .and_then(|i| vs.get(i).copied().flatten())
                .ok_or_else(out_of_range)?,
            None => return Err(fx.unknown_tensor(&t)),
        },
        Raw::List(ts) => match usize::try_from(index).ok().and_then(|i| ts.get(i)) {
            Some(Raw::Str(t)) => *scope.values.get(t).ok_or_else(|| fx.unknown_tensor(t))?,
            _ => return Err(out_of_range().into()),
        },
        _ => return Err(fx.unknown_tensor("?")),
    };
    Ok((Op::GetItem { index }, vec![Arg::Value(arg)]))
}

/// The arguments of an ATen node by their ATen names; for an in-place op whose
/// functional form names its operand otherwise (`dropout_(self)`, `dropout(input)`),
/// `self` renamed to the functional form's first parameter.
fn aten_arguments(fx: &FxNode<'_>, op: &str, in_place: bool) -> Result<Vec<(String, Raw)>, Error> {
    let mut attrs: Vec<(String, Raw)> = Vec::with_capacity(fx.n.inputs.len());
    for a in &fx.n.inputs {
        if a.name.is_empty() {
            return Err(Pt2Error::Argument {
                node: fx.shown.clone(),
                param: "?".into(),
                message: "an argument without a parameter name".into(),
            }
            .into());
        }
        if let Some(raw) = schema::argument(&fx.shown, &a.name, &a.arg)? {
            attrs.push((a.name.clone(), raw));
        }
    }
    if in_place {
        let params = table::entry(op).map(|e| e.params()).unwrap_or_default();
        if let Some(first) = params.first().filter(|_| !params.contains(&"self")) {
            for (k, _) in attrs.iter_mut() {
                if k == "self" {
                    *k = (*first).to_string();
                }
            }
        }
    }
    Ok(attrs)
}

/// An ATen node lowered through the op table: its op and operands, or `None` where an
/// expansion already added its nodes.
fn import_aten(
    g: &mut Graph,
    scope: &mut Scope<'_>,
    produced: &mut Vec<Produced>,
    fx: &FxNode<'_>,
    fx_op: &str,
    in_place: bool,
) -> Result<Option<(Op, Vec<Arg>)>, Error> {
    let attrs = aten_arguments(fx, fx_op, in_place)?;
    if fx_op == "as_strided" {
        check_as_strided_input(&attrs, scope, &fx.shown)?;
    }
    let first_out = fx.outs.iter().flatten().next().unwrap_or(&fx.name).clone();
    let call = Call {
        node: &first_out,
        op: fx_op,
        args: &[],
        kwargs: &attrs,
    };
    let metas = &scope.metas;
    let lowered = table::lower(&call, &|t| metas.get(t).cloned())
        .map_err(|e| signature_error(&fx.shown, fx_op, e))?;
    let (op, operands) = match lowered {
        Lowered::Expansion(x) => {
            import_expansion(g, scope, produced, fx, fx_op, x)?;
            return Ok(None);
        }
        Lowered::Op { op, operands } => (op, operands),
    };
    let args = resolve(g, scope, operands, &fx.shown)?;
    // Storage sharing: views alias their operand, in-place ops write into theirs (and
    // return it).
    if let Some(src) = in_place_self(fx.n) {
        if in_place || aliases_operand(fx_op) {
            let step = if in_place {
                Some(None)
            } else {
                view_step(&op, &args)
            };
            for o in fx.outs.iter().flatten() {
                scope.aliases.share(o, &src);
                if let (Some(step), false) = (&step, fx.multi) {
                    scope.aliases.views.insert(
                        o.clone(),
                        ViewOf {
                            base: src.clone(),
                            op: step.clone(),
                        },
                    );
                }
            }
            if fx.multi {
                scope.aliases.share(&fx.name, &src);
            }
        }
    }
    Ok(Some((op, args)))
}

/// The nodes of an expansion for FX node `fx`, its outputs bound to the results.
fn import_expansion(
    g: &mut Graph,
    scope: &mut Scope<'_>,
    produced: &mut Vec<Produced>,
    fx: &FxNode<'_>,
    fx_op: &str,
    x: table::Expansion,
) -> Result<(), Error> {
    if x.results.len() != fx.outs.len() {
        return Err(Pt2Error::Argument {
            node: fx.shown.clone(),
            param: fx_op.into(),
            message: format!(
                "the node has {} output(s), the op gives {}",
                fx.outs.len(),
                x.results.len()
            ),
        }
        .into());
    }
    // The node that makes an output is named after it.
    let names: HashMap<String, String> = x
        .results
        .iter()
        .zip(&fx.outs)
        .filter_map(|(r, o)| Some((r.clone(), o.clone()?)))
        .collect();
    import_steps(g, scope, x.steps, &fx.shown, &names)?;
    let mut values = Vec::with_capacity(fx.outs.len());
    for (o, r) in fx.outs.iter().zip(&x.results) {
        let value = current(g, scope, r, &fx.shown)?;
        values.push(Some(value));
        let Some(o) = o else { continue };
        scope.values.insert(o.clone(), value);
        produced.push(Produced {
            tensor: o.clone(),
            node: fx.shown.clone(),
            value,
            want: scope.metas.get(o.as_str()).cloned(),
        });
    }
    if fx.multi {
        scope.multi.insert(fx.name.clone(), Multi::Values(values));
    } else if fx.in_place() {
        if let (Some(src), Some(Some(out))) = (in_place_self(fx.n), fx.outs.first()) {
            scope.aliases.share(out, &src);
            let value = scope.values[out];
            write_into(g, scope, &src, value, &fx.shown, out)?;
        }
    }
    Ok(())
}

/// Adds the node of FX node `fx` (and, for several outputs, a `getitem` per output).
fn add_node(
    g: &mut Graph,
    scope: &mut Scope<'_>,
    produced: &mut Vec<Produced>,
    fx: &FxNode<'_>,
    op: Op,
    args: Vec<Arg>,
) -> Result<(), Error> {
    if !fx.multi {
        let Some(Some(out)) = fx.outs.first() else {
            // `_assert_tensor_metadata` as real models export it checks and returns
            // nothing: Kiln's inference already fixes every dtype it could assert.
            if matches!(op, Op::NoOp(NoOpKind::AssertTensorMetadata)) {
                return Ok(());
            }
            return Err(
                Pt2Error::Schema(format!("node `{}` has no tensor output", fx.name)).into(),
            );
        };
        // Later readers of the tensor an in-place op mutated read its result.
        let mutated = if fx.in_place() {
            in_place_self(fx.n)
        } else {
            None
        };
        let name = unique(g, &format!("{}{out}", scope.prefix));
        let id = g.add_node(Node {
            name,
            op,
            args,
            outputs: vec![],
            line: None,
        });
        scope.values.insert(out.clone(), ValueId::first(id));
        if let Some(mutated) = mutated {
            write_into(g, scope, &mutated, ValueId::first(id), &fx.shown, out)?;
        }
        produced.push(Produced {
            tensor: out.clone(),
            node: fx.shown.clone(),
            value: ValueId::first(id),
            want: scope.metas.get(out.as_str()).cloned(),
        });
        return Ok(());
    }
    let name = unique(g, &format!("{}{}", scope.prefix, fx.name));
    let id = g.add_node(Node {
        name,
        op,
        args,
        outputs: vec![],
        line: None,
    });
    scope.multi.insert(fx.name.clone(), Multi::Node(id));
    for (i, out) in fx.outs.iter().enumerate() {
        let Some(out) = out else { continue };
        let source = ValueId {
            node: id,
            output: i as u32,
        };
        let item = g.add_node(Node {
            name: unique(g, &format!("{}{out}", scope.prefix)),
            op: Op::GetItem { index: i as i64 },
            args: vec![Arg::Value(source)],
            outputs: vec![],
            line: None,
        });
        scope.values.insert(out.clone(), ValueId::first(item));
        produced.push(Produced {
            tensor: out.clone(),
            node: fx.shown.clone(),
            value: ValueId::first(item),
            want: scope.metas.get(out.as_str()).cloned(),
        });
    }
    Ok(())
}

/// The op table's refusal of node `shown`'s arguments.
fn signature_error(shown: &str, op: &str, source: SigError) -> Error {
    Error::Signature {
        at: At {
            node: shown.to_string(),
            line: None,
        },
        op: op.into(),
        source: Box::new(source),
    }
}

/// Operands resolved to their current values for FX node `shown`.
fn resolve(
    g: &mut Graph,
    scope: &mut Scope<'_>,
    operands: Vec<Operand>,
    shown: &str,
) -> Result<Vec<Arg>, Error> {
    let mut args = Vec::with_capacity(operands.len());
    for o in operands {
        args.push(match o {
            Operand::Scalar(s) => Arg::Scalar(s),
            Operand::Name(t) => Arg::Value(current(g, scope, &t, shown)?),
        });
    }
    Ok(args)
}

/// Adds the nodes of an expansion for FX node `shown`; each step's tensor is
/// reachable by its name in `scope`.
fn import_steps(
    g: &mut Graph,
    scope: &mut Scope<'_>,
    steps: Vec<Step>,
    shown: &str,
    names: &HashMap<String, String>,
) -> Result<(), Error> {
    for step in steps {
        let (name, op, args, outputs) = match step {
            Step::Op { out, op, attrs } => {
                let (kop, operands) =
                    table::bind_step(op, &attrs).map_err(|e| signature_error(shown, op, e))?;
                let args = resolve(g, scope, operands, shown)?;
                (out, kop, args, vec![])
            }
            Step::Const { out, meta, values } => (
                out,
                Op::Constant {
                    data: ConstData::Values(values.into()),
                },
                vec![],
                vec![meta],
            ),
        };
        let id = g.add_node(Node {
            name: unique(
                g,
                &format!(
                    "{}{}",
                    scope.prefix,
                    names.get(&name).unwrap_or(&name).replace('.', "_")
                ),
            ),
            op,
            args,
            outputs,
            line: None,
        });
        scope.values.insert(name, ValueId::first(id));
    }
    Ok(())
}

/// The single tensor name of an `as_tensor` argument.
fn as_tensor(arg: &Value) -> Option<&str> {
    match schema::variant(arg) {
        Some(("as_tensor", t)) => schema::tensor_name(t),
        _ => None,
    }
}

/// An argument for a message: its JSON, cut short.
fn brief(v: &Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(120) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text,
    }
}

/// `wrap_with_set_grad_enabled(enable_grad, subgraph, *operands)`: in inference the grad
/// mode changes nothing, so the subgraph is imported in place. Its placeholders are
/// bound to the operands, its nodes imported (named after the subgraph, so that names
/// stay unique), and the node's outputs bound to what the subgraph returns.
fn inline_wrap(
    g: &mut Graph,
    n: &schema::Node,
    node: &str,
    outer: &mut Scope<'_>,
    produced: &mut Vec<Produced>,
) -> Result<(), Error> {
    let shown = format!("{}{node}", outer.path);
    let bad = |message: String| -> Error {
        Pt2Error::Schema(format!(
            "node `{shown}` (wrap_with_set_grad_enabled): {message}"
        ))
        .into()
    };
    let [grad, body, operands @ ..] = n.inputs.as_slice() else {
        return Err(bad(
            "expected the grad mode, a subgraph (`as_graph`) and the subgraph's operands".into(),
        ));
    };
    if !matches!(
        schema::variant(&grad.arg),
        Some(("as_bool", Value::Bool(_)))
    ) {
        return Err(bad(format!(
            "the first argument must be the grad mode (`as_bool`), found {}",
            brief(&grad.arg)
        )));
    }
    let Some(("as_graph", sub)) = schema::variant(&body.arg) else {
        return Err(bad(format!(
            "the second argument must be a subgraph (`as_graph`), found {}",
            brief(&body.arg)
        )));
    };
    let sub_name = sub.get("name").and_then(Value::as_str).unwrap_or("");
    let what = if sub_name.is_empty() {
        "the subgraph".to_string()
    } else {
        format!("subgraph `{sub_name}`")
    };
    let Some(graph) = sub.get("graph") else {
        return Err(bad(format!(
            "{what} has no `graph`: the export schema stores a subgraph inline"
        )));
    };
    let graph =
        schema::Graph::deserialize(graph).map_err(|e| bad(format!("{what} is malformed: {e}")))?;
    if outer.depth >= MAX_SUBGRAPH_DEPTH {
        return Err(bad(format!(
            "{what} is nested more than {MAX_SUBGRAPH_DEPTH} subgraphs deep"
        )));
    }
    let placeholders = graph
        .inputs
        .iter()
        .map(|i| {
            as_tensor(i).ok_or_else(|| {
                bad(format!(
                    "{what} has a placeholder that is not a tensor: {}",
                    brief(i)
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if placeholders.len() != operands.len() {
        return Err(bad(format!(
            "{what} takes {} tensor(s), the node passes {}",
            placeholders.len(),
            operands.len()
        )));
    }
    let prefix = if sub_name.is_empty() { node } else { sub_name };
    let mut inner = Scope {
        values: HashMap::with_capacity(placeholders.len() + graph.nodes.len()),
        multi: HashMap::new(),
        metas: tensor_metas(&graph.tensor_values)?,
        prefix: format!("{}{prefix}_", outer.prefix),
        layouts: tensor_layouts(&graph.tensor_values),
        aliases: Aliases::default(),
        depth: outer.depth + 1,
        path: format!(
            "{}{}/",
            outer.path,
            if sub_name.is_empty() { node } else { sub_name }
        ),
    };
    for (p, o) in placeholders.iter().zip(operands) {
        let t = as_tensor(&o.arg)
            .ok_or_else(|| bad(format!("operand {} is not a tensor", brief(&o.arg))))?;
        if !outer.values.contains_key(t) {
            return Err(Error::UnknownTensor {
                at: At {
                    node: shown.clone(),
                    line: None,
                },
                name: t.into(),
            });
        }
        let v = current(g, outer, t, &shown)?;
        if inner.values.insert(p.to_string(), v).is_some() {
            return Err(bad(format!("{what} has placeholder `{p}` twice")));
        }
    }
    import_nodes(g, &graph.nodes, &mut inner, produced, &graph.outputs)?;

    let reader = format!("{}{node}", inner.path);
    let returned = subgraph_returns(g, &graph.outputs, &mut inner, &reader, &what, &bad)?;
    let (outs, _) = output_names(n);
    if outs.len() != returned.len() {
        return Err(bad(format!(
            "the node has {} output(s), {what} returns {}",
            outs.len(),
            returned.len()
        )));
    }
    for (o, r) in outs.iter().zip(&returned) {
        let Some(o) = o else { continue };
        let v = r.ok_or_else(|| bad(format!("output `{o}` is a `None` {what} returns")))?;
        outer.values.insert(o.clone(), v);
        produced.push(Produced {
            tensor: o.clone(),
            node: node.into(),
            value: v,
            want: outer.metas.get(o.as_str()).cloned(),
        });
    }
    outer.multi.insert(node.into(), Multi::Values(returned));
    Ok(())
}

/// What subgraph `what` returns (its `outputs`), flattened as the node's outputs are
/// (`None` for a returned `None`), read by `reader`.
fn subgraph_returns(
    g: &mut Graph,
    outputs: &[Value],
    inner: &mut Scope<'_>,
    reader: &str,
    what: &str,
    bad: &dyn Fn(String) -> Error,
) -> Result<Vec<Option<ValueId>>, Error> {
    let mut returned: Vec<Option<ValueId>> = vec![];
    for o in outputs {
        let mut lookup = |t: &Value| -> Result<(), Error> {
            let name = schema::tensor_name(t)
                .ok_or_else(|| bad(format!("{what} returns a tensor without a name: {t}")))?;
            if !inner.values.contains_key(name) {
                return Err(bad(format!(
                    "{what} returns `{name}`, a tensor it does not define"
                )));
            }
            returned.push(Some(current(g, inner, name, reader)?));
            Ok(())
        };
        match schema::variant(o) {
            Some(("as_tensor", t)) => lookup(t)?,
            Some(("as_tensors", Value::Array(ts))) => {
                for t in ts {
                    lookup(t)?;
                }
            }
            Some(("as_none", _)) => returned.push(None),
            _ => {
                return Err(bad(format!(
                    "{what} returns {}: Kiln takes tensor outputs only",
                    brief(o)
                )))
            }
        }
    }
    Ok(returned)
}

/// `as_strided` addresses its operand's storage: Kiln's reading of it over the operand's
/// elements is PyTorch's only when the operand was laid out row-major from offset 0.
fn check_as_strided_input(attrs: &[(String, Raw)], scope: &Scope, node: &str) -> Result<(), Error> {
    let Some((_, Raw::Str(t))) = attrs.iter().find(|(k, _)| k == "self") else {
        return Ok(());
    };
    let (Some(meta), Some((strides, offset))) =
        (scope.metas.get(t.as_str()), scope.layouts.get(t.as_str()))
    else {
        return Ok(());
    };
    if crate::graph::shape::is_row_major(&meta.shape, strides, *offset) {
        return Ok(());
    }
    Err(Pt2Error::Argument {
        node: node.into(),
        param: "self".into(),
        message: format!(
            "as_strided over `{t}`, which PyTorch laid out with strides {strides:?} from storage offset {offset}: Kiln reads as_strided over row-major operands only"
        ),
    }
    .into())
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
            Target::WrapSetGradEnabled => "wrap".into(),
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
        assert_eq!(op("torch.ops.aten.__and__.Tensor"), "__and__");
        assert_eq!(op("torch.ops.aten.add__.Tensor"), "-");
        assert_eq!(op("torch.ops.aten.frobnicate_.default"), "-");
        assert_eq!(
            op("torch.ops.higher_order.wrap_with_set_grad_enabled"),
            "wrap"
        );
        assert_eq!(op("torch.ops.higher_order.wrap_with_autocast"), "-");
    }
}
