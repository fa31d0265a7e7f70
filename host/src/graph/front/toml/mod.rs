//! The `kiln-graph/1` TOML importer: text → validated [`Graph`].
//!
//! Reports every problem as an [`Error`] naming the node and its line; it must never
//! panic on any text, and never accept a graph that does not validate.

mod raw;

use super::signature::{bind, is_known, Operand, Raw};
use crate::graph::dtype::DType;
use crate::graph::ir::{Arg, Graph, Node, NodeId, TensorMeta, ValueId};
use crate::graph::ops::{ConstData, Op};
use crate::graph::shape::numel;
use crate::graph::{verify, At, Error, UnknownOp};
use raw::{Located, RawTensor};
use std::collections::HashMap;
use std::sync::Arc;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// The format version this importer reads.
pub const FORMAT: &str = "kiln-graph/1";

/// Reads and imports a graph file; errors carry the path.
pub fn load_toml(path: impl AsRef<std::path::Path>) -> Result<Graph, Error> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse_toml(&text).map_err(|e| Error::InFile {
        path: path.display().to_string(),
        source: Box::new(e),
    })
}

struct Lines(Vec<usize>);

impl Lines {
    fn new(text: &str) -> Lines {
        let mut v = vec![0];
        // A byte scan: `'\n'` never occurs inside a multi-byte UTF-8 character.
        v.extend(
            text.bytes()
                .enumerate()
                .filter(|&(_, b)| b == b'\n')
                .map(|(i, _)| i + 1),
        );
        Lines(v)
    }
    /// 1-based line and column of a byte offset.
    fn at(&self, offset: usize) -> (usize, usize) {
        let line = self.0.partition_point(|&s| s <= offset).max(1);
        (line, offset - self.0[line - 1] + 1)
    }
}

fn to_raw(v: &Spanned<DeValue>) -> Result<Raw, Located> {
    Ok(match v.get_ref() {
        DeValue::String(s) => Raw::Str(s.to_string()),
        DeValue::Integer(_) => Raw::Int(raw::integer(v)?),
        DeValue::Float(_) => Raw::Float(raw::float(v)?),
        DeValue::Boolean(b) => Raw::Bool(*b),
        DeValue::Array(a) => Raw::List(a.iter().map(to_raw).collect::<Result<_, _>>()?),
        other => {
            return Err(Located {
                at: v.span().start,
                message: format!("unsupported value: {}", other.type_str()),
            })
        }
    })
}

/// A number of `values` or `fill`; `None` for anything else.
fn number(v: &Spanned<DeValue>) -> Option<f64> {
    match v.get_ref() {
        DeValue::Integer(_) => raw::integer(v).ok().map(|i| i as f64),
        DeValue::Float(_) => raw::float(v).ok(),
        DeValue::Boolean(b) => Some(*b as i64 as f64),
        _ => None,
    }
}

/// Imports a graph from `kiln-graph/1` text and validates it.
pub fn parse_toml(text: &str) -> Result<Graph, Error> {
    let lines = Lines::new(text);
    let located = |at: usize, message: String| {
        let (line, column) = lines.at(at);
        Error::Toml {
            line,
            column,
            message,
        }
    };
    let doc = DeTable::parse(text).map_err(|e| {
        let at = e.span().map_or(0, |s| s.start);
        located(at, e.message().trim().to_string())
    })?;
    let raw = raw::read(&doc).map_err(|e| located(e.at, e.message))?;
    if raw.format != FORMAT {
        return Err(Error::Version(raw.format.into()));
    }
    let line_of = |start: usize| lines.at(start).0 as u32;
    let mut g = Graph::new(raw.name);
    // name → (node, line), borrowing the names from `raw`
    let mut names: HashMap<&str, (NodeId, u32)> =
        HashMap::with_capacity(raw.inputs.len() + raw.constants.len() + raw.nodes.len());

    for (i, t) in raw.inputs.iter().enumerate() {
        let line = line_of(t.at);
        let meta = declared(t, line)?;
        if t.values.is_some() || t.fill.is_some() {
            return Err(decl(t.name, line, "inputs take no `values` or `fill`"));
        }
        check_free(&names, t.name, line)?;
        let id = g.add_node(Node {
            name: t.name.into(),
            op: Op::Input { index: i },
            args: vec![],
            outputs: vec![meta],
            line: Some(line),
        });
        names.insert(t.name, (id, line));
    }
    for r in &raw.constants {
        let line = line_of(r.at);
        let meta = declared(r, line)?;
        let n = meta.numel();
        let data = match (r.values, r.fill) {
            (Some(vs), None) => {
                if vs.len() as i64 != n {
                    return Err(decl(
                        r.name,
                        line,
                        &format!(
                            "{} values for shape {:?} ({n} elements)",
                            vs.len(),
                            meta.shape
                        ),
                    ));
                }
                let vals: Option<Vec<f64>> = vs
                    .iter()
                    .map(|v| number(v).map(|x| meta.dtype.round(x)))
                    .collect();
                let vals = vals.ok_or_else(|| decl(r.name, line, "`values` must be numbers"))?;
                ConstData::Values(Arc::from(vals))
            }
            (None, Some(f)) => {
                let x = number(f).ok_or_else(|| decl(r.name, line, "`fill` must be a number"))?;
                ConstData::Fill(meta.dtype.round(x))
            }
            _ => {
                return Err(decl(
                    r.name,
                    line,
                    "a constant needs exactly one of `values` or `fill`",
                ))
            }
        };
        check_free(&names, r.name, line)?;
        let id = g.add_node(Node {
            name: r.name.into(),
            op: Op::Constant { data },
            args: vec![],
            outputs: vec![meta],
            line: Some(line),
        });
        names.insert(r.name, (id, line));
    }

    // Unknown ops are reported all together before anything else about the nodes.
    let mut unknown: Vec<UnknownOp> = vec![];
    for r in &raw.nodes {
        if !is_known(r.op) {
            let at = At {
                node: r.name.into(),
                line: Some(line_of(r.at)),
            };
            match unknown.iter_mut().find(|u| u.op == r.op) {
                Some(u) => u.nodes.push(at),
                None => unknown.push(UnknownOp {
                    op: r.op.into(),
                    nodes: vec![at],
                    similar: super::signature::similar_ops(r.op),
                }),
            }
        }
    }
    if !unknown.is_empty() {
        return Err(Error::UnknownOps(unknown));
    }

    let mut pending: Vec<(NodeId, Vec<Operand>, bool)> = Vec::with_capacity(raw.nodes.len());
    for r in &raw.nodes {
        let line = line_of(r.at);
        let at = || At {
            node: r.name.into(),
            line: Some(line),
        };
        let sig_err = |source| Error::Signature {
            at: at(),
            op: r.op.into(),
            source: Box::new(source),
        };
        let conv = |v: &Spanned<DeValue>| {
            to_raw(v).map_err(|e| Error::Declaration {
                at: at(),
                message: e.message,
            })
        };
        let args: Vec<Raw> = r.args.iter().map(conv).collect::<Result<_, _>>()?;
        let attrs: Vec<(String, Raw)> = r
            .attrs
            .iter()
            .flat_map(|t| t.iter())
            .map(|(k, v)| Ok((k.get_ref().to_string(), conv(v)?)))
            .collect::<Result<_, Error>>()?;
        let (op, operands) = bind(r.op, &args, &attrs).map_err(sig_err)?;
        check_free(&names, r.name, line)?;
        let is_getitem = matches!(op, Op::GetItem { .. });
        let id = g.add_node(Node {
            name: r.name.into(),
            op,
            args: vec![],
            outputs: vec![],
            line: Some(line),
        });
        names.insert(r.name, (id, line));
        pending.push((id, operands, is_getitem));
    }
    for (id, operands, is_getitem) in &pending {
        let index = match g.node(*id).map(|n| &n.op) {
            Some(Op::GetItem { index }) => *index as u32,
            Some(_) => 0,
            None => continue,
        };
        let mut args = Vec::with_capacity(operands.len());
        for o in operands {
            args.push(match o {
                Operand::Scalar(s) => Arg::Scalar(*s),
                Operand::Name(t) => match names.get(t.as_str()) {
                    Some(&(p, _)) => Arg::Value(ValueId {
                        node: p,
                        output: if *is_getitem { index } else { 0 },
                    }),
                    None => {
                        let (node, line) = g
                            .node(*id)
                            .map_or((String::new(), None), |n| (n.name.clone(), n.line));
                        return Err(Error::UnknownTensor {
                            at: At { node, line },
                            name: t.clone(),
                        });
                    }
                },
            });
        }
        g.set_args(*id, args);
    }
    let mut outputs = vec![];
    for o in &raw.outputs {
        let &(id, _) = names
            .get(o)
            .ok_or_else(|| Error::UnknownOutput(o.to_string()))?;
        outputs.push(ValueId::first(id));
    }
    if outputs.is_empty() {
        return Err(Error::NoOutputs);
    }
    g.set_outputs(outputs.clone());

    let order = g.topo_order().map_err(|n| {
        Error::Cycle(g.node(n).map_or(
            At {
                node: "?".into(),
                line: None,
            },
            |x| At {
                node: x.name.clone(),
                line: x.line,
            },
        ))
    })?;
    for id in order {
        verify::infer_node(&mut g, id)?;
        // In the file a multi-output node is only read through `getitem`.
        check_single_outputs(&g, id)?;
    }
    // Every node was just inferred: nothing is left for incremental re-inference.
    g.take_modified();
    for o in outputs {
        if g.node(o.node)
            .is_some_and(|n| n.outputs.len() != 1 || n.op.returns_sequence())
        {
            let n = g.node(o.node).map_or(String::new(), |n| n.name.clone());
            return Err(Error::UnknownOutput(format!(
                "{n} (a multi-output node: select an output with getitem)"
            )));
        }
    }
    Ok(g)
}

fn check_single_outputs(g: &Graph, id: NodeId) -> Result<(), Error> {
    let Some(node) = g.node(id) else {
        return Ok(());
    };
    if matches!(node.op, Op::GetItem { .. }) {
        return Ok(());
    }
    for v in node.args.iter().filter_map(|a| a.value()) {
        if let Some(p) = g.node(v.node) {
            if p.outputs.len() != 1 || p.op.returns_sequence() {
                return Err(Error::Infer {
                    at: At {
                        node: node.name.clone(),
                        line: node.line,
                    },
                    op: node.op.name().into(),
                    source: Box::new(crate::graph::infer::InferError::Invalid(format!(
                        "operand `{}` is `{}`, which returns a list of {} tensor(s): select one with getitem",
                        p.name,
                        p.op.name(),
                        p.outputs.len()
                    ))),
                });
            }
        }
    }
    Ok(())
}

fn check_free(names: &HashMap<&str, (NodeId, u32)>, name: &str, line: u32) -> Result<(), Error> {
    match names.get(name) {
        Some(&(_, first)) => Err(Error::Duplicate {
            name: name.into(),
            line,
            first,
        }),
        None => Ok(()),
    }
}

fn decl(name: &str, line: u32, message: &str) -> Error {
    Error::Declaration {
        at: At {
            node: name.into(),
            line: Some(line),
        },
        message: message.into(),
    }
}

fn declared(t: &RawTensor, line: u32) -> Result<TensorMeta, Error> {
    let dtype = DType::parse(t.dtype).ok_or_else(|| {
        decl(
            t.name,
            line,
            &format!(
                "unknown dtype `{}` (float32 float16 bfloat16 float64 int64 int32 bool)",
                t.dtype
            ),
        )
    })?;
    numel(&t.shape).map_err(|e| decl(t.name, line, &e.to_string()))?;
    Ok(TensorMeta::contiguous(t.shape.clone(), dtype))
}
