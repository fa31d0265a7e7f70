//! Printers: a readable text form (used by golden snapshots and `host graph`), Graphviz
//! DOT, and JSON. They only read the graph and must never fail on a validated one.

use super::ir::{Arg, Graph, TensorMeta, ValueId};
use super::ops::{ConstData, Op};
use std::fmt::Write;

fn ty(m: &TensorMeta) -> String {
    let dims: Vec<String> = m.shape.iter().map(|d| d.to_string()).collect();
    format!("{}[{}]", m.dtype, dims.join(", "))
}

fn value_name(g: &Graph, v: ValueId) -> String {
    g.value_name(v)
}

fn arg_text(g: &Graph, a: &Arg) -> String {
    match a {
        Arg::Value(v) => value_name(g, *v),
        Arg::Scalar(s) => s.to_string(),
    }
}

fn const_text(d: &ConstData) -> String {
    match d {
        ConstData::Fill(x) => format!("fill={x}"),
        d if d.len() <= 8 => {
            let vs: Vec<String> = (0..d.len()).map(|i| d.get(i).to_string()).collect();
            format!("[{}]", vs.join(", "))
        }
        d => format!("<{} values>", d.len()),
    }
}

/// One line per node in topological order, then the outputs:
/// `name: float32[4, 8] = op(args) {attrs}`.
pub fn to_text(g: &Graph) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "graph {}", g.name);
    let order = g.topo_order().unwrap_or_else(|_| g.node_ids().collect());
    for id in order {
        let Some(n) = g.node(id) else { continue };
        let tys: Vec<String> = n.outputs.iter().map(ty).collect();
        let tys = if tys.len() == 1 {
            tys.join("")
        } else {
            format!("({})", tys.join(", "))
        };
        let body = match &n.op {
            Op::Input { index } => format!("input({index})"),
            Op::Constant { data } => format!("constant({})", const_text(data)),
            op => {
                let args: Vec<String> = n.args.iter().map(|a| arg_text(g, a)).collect();
                let attrs = op.attr_text();
                if attrs.is_empty() {
                    format!("{}({})", op.name(), args.join(", "))
                } else {
                    format!("{}({}) {{{attrs}}}", op.name(), args.join(", "))
                }
            }
        };
        let _ = writeln!(s, "  {}: {tys} = {body}", n.name);
    }
    let outs: Vec<String> = g.outputs().iter().map(|v| value_name(g, *v)).collect();
    let _ = writeln!(s, "  return ({})", outs.join(", "));
    s
}

fn dot_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Graphviz DOT: one box per node labelled with name, op and output types.
pub fn to_dot(g: &Graph) -> String {
    let mut s = String::from(
        "digraph kiln {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\"];\n",
    );
    for id in g.node_ids() {
        let Some(n) = g.node(id) else { continue };
        let tys: Vec<String> = n.outputs.iter().map(ty).collect();
        let label = format!(
            "{}\\n{}\\n{}",
            dot_escape(&n.name),
            n.op.name(),
            dot_escape(&tys.join(", "))
        );
        let _ = writeln!(s, "  n{} [label=\"{label}\"];", id.index());
    }
    for e in g.petgraph().edge_indices() {
        if let (Some((a, b)), Some(w)) =
            (g.petgraph().edge_endpoints(e), g.petgraph().edge_weight(e))
        {
            let _ = writeln!(
                s,
                "  n{} -> n{} [label=\"{}\"];",
                a.index(),
                b.index(),
                w.operand
            );
        }
    }
    for (i, o) in g.outputs().iter().enumerate() {
        let _ = writeln!(
            s,
            "  out{i} [label=\"output {i}\", shape=ellipse];\n  n{} -> out{i};",
            o.node.index()
        );
    }
    s.push_str("}\n");
    s
}

#[derive(serde::Serialize)]
struct JsonNode<'a> {
    name: &'a str,
    op: &'static str,
    args: Vec<String>,
    attrs: serde_json::Value,
    outputs: &'a [TensorMeta],
}

#[derive(serde::Serialize)]
struct JsonGraph<'a> {
    name: &'a str,
    nodes: Vec<JsonNode<'a>>,
    outputs: Vec<String>,
}

/// An op's attributes as a JSON object: `{"dims": [1], "keepdim": true}`;
/// unset optional attributes are left out, and a constant gives its fill
/// value, its values (up to eight) or their count.
fn json_attrs(op: &Op) -> serde_json::Value {
    use serde_json::{json, Map, Value};
    if let Op::Constant { data } = op {
        return match data {
            ConstData::Fill(x) => json!({ "fill": x }),
            d if d.len() <= 8 => {
                json!({ "values": (0..d.len()).map(|i| d.get(i)).collect::<Vec<_>>() })
            }
            d => json!({ "value_count": d.len() }),
        };
    }
    // Serde writes a variant with fields as `{"Variant": {fields}}`; the op's
    // name is printed beside, so only the fields are kept (and not `op`,
    // which the name already says, as in `add`).
    let fields = match serde_json::to_value(op) {
        Ok(Value::Object(outer)) => outer.into_iter().next().map(|(_, v)| v),
        _ => None,
    };
    let mut attrs = Map::new();
    if let Some(Value::Object(fields)) = fields {
        for (k, v) in fields {
            if !v.is_null() && k != "op" {
                attrs.insert(k, v);
            }
        }
    }
    Value::Object(attrs)
}

/// JSON: `{name, nodes: [{name, op, args, attrs, outputs: [{shape, strides, dtype}]}], outputs}`,
/// with `attrs` an object of the op's attributes.
pub fn to_json(g: &Graph) -> String {
    let order = g.topo_order().unwrap_or_else(|_| g.node_ids().collect());
    let nodes = order
        .iter()
        .filter_map(|&id| g.node(id))
        .map(|n| JsonNode {
            name: &n.name,
            op: n.op.name(),
            args: n.args.iter().map(|a| arg_text(g, a)).collect(),
            attrs: json_attrs(&n.op),
            outputs: &n.outputs,
        })
        .collect();
    let j = JsonGraph {
        name: &g.name,
        nodes,
        outputs: g.outputs().iter().map(|v| value_name(g, *v)).collect(),
    };
    serde_json::to_string_pretty(&j).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}
