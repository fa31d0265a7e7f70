//! Builds the [`Graph`] of an opened archive: inputs from the graph signature, stored
//! tensors as constants (or inputs, `payloads.rs`), one node per FX node through the
//! shared op table, `getitem` nodes for multi-output ops, storage sharing between views
//! and in-place writes (`aliases.rs`), outputs, then validation and a check of Kiln's
//! inferred shapes against the ones PyTorch recorded.

mod aliases;
mod nodes;
mod payloads;
mod state;

use super::archive::Archive;
use super::schema::{self, Model};
use super::{Pt2Error, Pt2Options, SUPPORTED_MAJOR};
use crate::graph::front::table::{self, Call, Lowered, Operand, Raw, SigError, Step};
use crate::graph::ir::{Arg, Graph, Node, NodeId, TensorMeta, ValueId};
use crate::graph::ops::{ConstData, NoOpKind, Op};
use crate::graph::sym::Symbols;
use crate::graph::{verify, At, Error, UnknownOp};
use aliases::{aliases_operand, current, view_step, write_into, Aliases, ViewOf};
use nodes::import_nodes;
use payloads::Payloads;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::io::{Read, Seek};

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

/// Custom ops of libraries that models call, each an entry of the op table under its
/// own name, as the library defines it: transformers' `grouped_mm_fallback`, the product
/// its mixture-of-experts layers make per expert where PyTorch's `_grouped_mm` does not
/// serve (float32 weights under `torch.compile`; `integrations/moe.py`).
const LIBRARY_OPS: &[(&str, &str)] = &[("transformers", "grouped_mm_fallback")];

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
    let (Some(namespace), Some(op), _, None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Target::Unsupported;
    };
    if namespace != "aten" {
        return match LIBRARY_OPS.contains(&(namespace, op)) {
            true => Target::Aten(op),
            false => Target::Unsupported,
        };
    }
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
    /// config, whether it is a tensor constant, and what it is ("buffer")
    Stored {
        placeholder: String,
        key: String,
        constant: bool,
        kind: &'static str,
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
            kind: "parameter",
        },
        "buffer" => InputSpec::Stored {
            placeholder: arg_name(v)?,
            key: key("buffer_name")?,
            constant: false,
            kind: "buffer",
        },
        "tensor_constant" => InputSpec::Stored {
            placeholder: arg_name(v)?,
            key: key("tensor_constant_name")?,
            constant: true,
            kind: "tensor constant",
        },
        // A non-tensor argument of the call (`use_cache=False`): export specialises the
        // graph on its value, so it is no input of Kiln's graph.
        "constant_input" => InputSpec::Fixed,
        other => return Err(bad(format!("input kind `{other}` is not supported"))),
    })
}

/// A tensor input's placeholder and what it is, for messages.
fn described(spec: &InputSpec) -> Option<(String, String)> {
    match spec {
        InputSpec::User(t) => Some((t.clone(), format!("the user input `{t}`"))),
        InputSpec::Stored {
            placeholder,
            key,
            kind,
            ..
        } => Some((placeholder.clone(), format!("the {kind} `{key}`"))),
        InputSpec::Fixed => None,
    }
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
    let (prefix, model, sizes, symbols) = read_model(archive, options)?;
    let gm = &model.graph_module;

    // Symbolic sizes first: every later message would be about their consequences.
    let metas = tensor_metas(&gm.graph.tensor_values, &symbols)?;

    // Unsupported ops, each listed once with every node using it (in subgraphs too).
    let mut unknown: Vec<UnknownOp> = vec![];
    unsupported_ops(&gm.graph.nodes, &gm.graph.outputs, &mut unknown, 0, "");
    if !unknown.is_empty() {
        return Err(Error::UnknownOps(unknown));
    }

    let mut g = Graph::new(name);
    g.set_sizes(sizes);
    g.set_symbols(symbols);
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
    };
    let values = add_inputs(&mut g, &specs, &metas, &mut payloads, options)?;
    let placeholders = values.clone();

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
        inputs: specs
            .iter()
            .filter(|s| options.params_as_inputs || matches!(s, InputSpec::User(_)))
            .filter_map(described)
            .collect(),
        stored: stored_keys(&specs, options),
        written: vec![],
    };
    import_nodes(
        &mut g,
        &gm.graph.nodes,
        &mut scope,
        &mut produced,
        &gm.graph.outputs,
    )?;
    let (mut outputs, mutations) = user_outputs(&mut g, &mut scope, &gm.signature.output_specs)?;
    let state = state::kept(
        &mut g,
        &mut scope,
        &specs,
        &placeholders,
        &mutations,
        outputs.len(),
    )?;
    outputs.extend(state.iter().map(|(_, v)| *v));
    g.set_outputs(outputs);
    g.set_state(state.into_iter().map(|(s, _)| s).collect());
    verify::validate(&mut g)?;
    check_recorded(&g, &produced)?;
    Ok(g)
}

/// The archive's model folder and its `model.json`, checked for a little-endian archive
/// of a schema version this importer reads.
fn read_model<R: Read + Seek>(
    archive: &mut Archive<R>,
    options: &Pt2Options,
) -> Result<(String, Model, Vec<crate::graph::SizeChoice>, Symbols), Error> {
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
    let member = format!("{prefix}{MODEL_JSON}");
    let mut raw: serde_json::Value = json(archive, &member)?;
    let mut sizes = vec![];
    let mut symbols = Symbols::default();
    if options.dynamic && options.specialize.is_empty() {
        if let Some(s) = super::specialize::keep_symbols(&mut raw)? {
            symbols = s;
        }
    } else if let Some(s) = super::specialize::specialize(&mut raw, &options.specialize)? {
        let how = if s.at_example {
            "the example's sizes"
        } else {
            "the sizes --specialize gives"
        };
        tracing::warn!(
            "the archive has dynamic sizes; compiled at {}, {how}: a call at other sizes is refused \
             (--specialize SYMBOL=VALUE compiles at others)",
            crate::graph::SizeChoice::describe(&s.symbols)
        );
        sizes = s.symbols;
    }
    let model: Model = serde_json::from_value(raw).map_err(|e| Pt2Error::Json {
        member: member.clone(),
        message: e.to_string(),
    })?;
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
    Ok((prefix, model, sizes, symbols))
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
            ..
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

/// A write the signature records as an output (`buffer_mutation`): the key of the
/// parameter or buffer written, and the tensor that is its new value.
type Mutation = (String, String);

/// The values of the graph signature's user outputs, and its mutation outputs.
fn user_outputs(
    g: &mut Graph,
    scope: &mut Scope<'_>,
    specs: &[Value],
) -> Result<(Vec<ValueId>, Vec<Mutation>), Error> {
    let mut outputs = vec![];
    let mut mutations = vec![];
    for spec in specs {
        let bad = || Pt2Error::Schema(format!("graph signature: unsupported output {spec}"));
        let (kind, v) = schema::variant(spec).ok_or_else(bad)?;
        let mutated = match kind {
            "buffer_mutation" => Some(("buffer", "buffer_name")),
            "parameter_mutation" => Some(("parameter", "parameter_name")),
            "user_input_mutation" => Some(("user input", "user_input_name")),
            _ => None,
        };
        if let Some((what, field)) = mutated {
            let target = v.get(field).and_then(Value::as_str).unwrap_or("?");
            let value = v.get("arg").and_then(schema::tensor_name);
            match value {
                // A functionalised write into a parameter or buffer: its new value.
                Some(t) if what != "user input" && scope.stored.values().any(|k| k == target) => {
                    mutations.push((target.to_string(), t.to_string()));
                    continue;
                }
                _ => {
                    return Err(Pt2Error::InputMutation {
                        node: format!("the graph signature's output `{kind}`"),
                        what: format!("the {what} `{target}`"),
                    }
                    .into())
                }
            }
        }
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
    if outputs.is_empty() && mutations.is_empty() && scope.written.is_empty() {
        return Err(Error::NoOutputs);
    }
    Ok((outputs, mutations))
}

/// The placeholders of the parameters, buffers and tensor constants held in the archive
/// (none where they are the caller's inputs), with their keys.
fn stored_keys(specs: &[InputSpec], options: &Pt2Options) -> HashMap<String, String> {
    if options.params_as_inputs {
        return HashMap::new();
    }
    specs
        .iter()
        .filter_map(|s| match s {
            InputSpec::Stored {
                placeholder, key, ..
            } => Some((placeholder.clone(), key.clone())),
            _ => None,
        })
        .collect()
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
    /// the graph's inputs the caller passes (placeholder → what it is, for messages:
    /// "the user input `x`"), which no node may write into; empty in a subgraph
    inputs: HashMap<String, String>,
    /// the parameters, buffers and tensor constants held in the archive (placeholder →
    /// its key), which a node may write into: each written becomes state the program
    /// keeps between calls ([`Graph::state`]); empty in a subgraph
    stored: HashMap<String, String>,
    /// the placeholders of `stored` written so far, in order
    written: Vec<String>,
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

/// A graph's `tensor_values` as Kiln metadata: integer sizes, or expressions over
/// `symbols` where the importer keeps an export's symbols.
fn tensor_metas<'a>(
    values: &'a std::collections::BTreeMap<String, schema::TensorMeta>,
    symbols: &Symbols,
) -> Result<HashMap<&'a str, TensorMeta>, Pt2Error> {
    let mut metas = HashMap::with_capacity(values.len());
    for (t, m) in values {
        let shape = schema::sizes(m, t, symbols)?;
        let dtype = schema::dtype(m.dtype, t)?;
        metas.insert(t.as_str(), TensorMeta::contiguous_sizes(shape, dtype));
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
    let shape = meta.hint_shape();
    if crate::graph::shape::is_row_major(&shape, strides, *offset) {
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
    let source = schema::argument(node, "self", &source.arg, Symbols::none())?
        .ok_or_else(|| bad("the source is None"))?;
    match schema::argument(node, "index", &index.arg, Symbols::none())? {
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
        assert_eq!(
            op("torch.ops.transformers.grouped_mm_fallback.default"),
            "grouped_mm_fallback"
        );
        assert_eq!(op("torch.ops.transformers.other_op.default"), "-");
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
