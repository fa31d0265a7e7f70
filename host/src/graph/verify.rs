//! Validation (shape inference over the whole graph) and the IR verifier run between
//! passes in debug builds.
//!
//! Both are read-only apart from [`validate`] filling in output metadata; neither may
//! rewrite the graph's structure.

use super::infer::{infer, ArgMeta};
use super::ir::{Arg, Graph, NodeId};
use super::ops::Op;
use super::{At, Error};

fn at(g: &Graph, id: NodeId) -> At {
    match g.node(id) {
        Some(n) => At {
            node: n.name.clone(),
            line: n.line,
        },
        None => At {
            node: format!("#{}", id.index()),
            line: None,
        },
    }
}

/// Infers node `id`'s output metadata from its operands' (which must be inferred
/// already) and returns it, without storing it.
pub fn infer_outputs(g: &Graph, id: NodeId) -> Result<Vec<super::TensorMeta>, Error> {
    let node = g.node(id).ok_or_else(|| Error::Invariant {
        at: at(g, id),
        message: "no such node".into(),
    })?;
    if matches!(node.op, Op::Input { .. } | Op::Constant { .. }) {
        return Ok(node.outputs.clone());
    }
    if let Some(outputs) = infer_over_symbols(g, node) {
        return outputs.map_err(|source| Error::Infer {
            at: at(g, id),
            op: node.op.name().into(),
            source: Box::new(source),
        });
    }
    // The other rules take integer sizes: a symbolic operand is refused by name until
    // they take symbols (docs/dynamic-shapes.md).
    let mut fixed = Vec::with_capacity(node.args.len());
    for a in &node.args {
        if let Arg::Value(v) = a {
            if let Some(m) = g.meta(*v) {
                let f = m.fixed().ok_or_else(|| Error::Infer {
                    at: at(g, id),
                    op: node.op.name().into(),
                    source: Box::new(super::infer::InferError::Invalid(format!(
                        "an operand of symbolic sizes {:?}: this op's shape rule takes integer \
                         sizes; compile at one size (--specialize)",
                        m.shape
                    ))),
                })?;
                fixed.push((*v, f));
            }
        }
    }
    let find = |v: &super::ValueId| fixed.iter().find(|(w, _)| w == v).map(|(_, m)| m);
    let mut metas = Vec::with_capacity(node.args.len());
    for a in &node.args {
        metas.push(match a {
            Arg::Scalar(s) => ArgMeta::Scalar(*s),
            Arg::Value(v) => match find(v) {
                Some(m) => ArgMeta::Tensor(m),
                None => {
                    let producer = g.node(v.node).map_or("?".to_string(), |p| p.name.clone());
                    let count = g.node(v.node).map_or(0, |p| p.outputs.len());
                    return Err(Error::Infer {
                        at: at(g, id),
                        op: node.op.name().into(),
                        source: Box::new(super::infer::InferError::Invalid(format!(
                            "operand `{producer}` has {count} outputs, output {} does not exist",
                            v.output
                        ))),
                    });
                }
            },
        });
    }
    let outputs = infer(&node.op, &metas).map_err(|source| Error::Infer {
        at: at(g, id),
        op: node.op.name().into(),
        source: Box::new(source),
    })?;
    Ok(outputs.into_iter().map(super::TensorMeta::from).collect())
}

/// `node`'s outputs by the symbolic rules, where an operand has a symbolic size and a
/// rule covers the op (`infer::symbolic`); `None` otherwise.
fn infer_over_symbols(
    g: &Graph,
    node: &super::Node,
) -> Option<Result<Vec<super::TensorMeta>, super::infer::InferError>> {
    use super::infer::symbolic::{infer_symbolic, SymArg};
    let mut args = Vec::with_capacity(node.args.len());
    let mut symbolic = !node.op.symbolic_sizes().is_empty();
    for a in &node.args {
        args.push(match a {
            Arg::Scalar(s) => SymArg::Scalar(*s),
            Arg::Value(v) => {
                let m = g.meta(*v)?;
                symbolic |= !m.is_static();
                SymArg::Tensor(m)
            }
        });
    }
    if !symbolic {
        return None;
    }
    infer_symbolic(&node.op, &args, g.symbols())
}

/// Infers and stores node `id`'s output metadata.
pub fn infer_node(g: &mut Graph, id: NodeId) -> Result<(), Error> {
    let outs = infer_outputs(g, id)?;
    g.set_inferred(id, outs);
    Ok(())
}

/// Checks the graph is acyclic and has outputs, and (re)infers every node's metadata in
/// topological order.
pub fn validate(g: &mut Graph) -> Result<(), Error> {
    let order = g.topo_order().map_err(|n| Error::Cycle(at(g, n)))?;
    g.take_modified();
    for id in order {
        infer_node(g, id)?;
    }
    check_outputs(g)
}

/// Does what [`validate`] does for a graph whose metadata was exact before the changes
/// [`Graph::take_modified`] lists: re-infers the modified nodes, and the users of every
/// node whose metadata changed, in topological order. A pass that rewrites a few nodes
/// thus costs a sweep over the ids rather than a full inference. Debug builds check the
/// result with [`verify`] after every pass.
pub fn revalidate(g: &mut Graph) -> Result<(), Error> {
    let order = g.topo_order().map_err(|n| Error::Cycle(at(g, n)))?;
    let bound = order.iter().map(|n| n.index() + 1).max().unwrap_or(0);
    let mut stale = vec![false; bound];
    for id in g.take_modified() {
        if let Some(s) = stale.get_mut(id.index()) {
            *s = true;
        }
    }
    let mut users = vec![];
    for id in order {
        if !stale[id.index()] {
            continue;
        }
        let outs = infer_outputs(g, id)?;
        if g.node(id).is_some_and(|n| n.outputs != outs) {
            users.extend(g.users(id).map(|(u, _)| u));
            for u in users.drain(..) {
                stale[u.index()] = true;
            }
            g.set_inferred(id, outs);
        }
    }
    check_outputs(g)
}

fn check_outputs(g: &Graph) -> Result<(), Error> {
    if g.outputs().is_empty() {
        return Err(Error::NoOutputs);
    }
    for o in g.outputs() {
        if g.meta(*o).is_none() {
            return Err(Error::UnknownOutput(format!(
                "#{}:{}",
                o.node.index(),
                o.output
            )));
        }
    }
    check_state(g)
}

/// The state the program keeps: the graph's last inputs, in order, each with an output
/// of its own shape and dtype as its new value.
fn check_state(g: &Graph) -> Result<(), Error> {
    let first = g.inputs().len().saturating_sub(g.state().len());
    for (k, s) in g.state().iter().enumerate() {
        let new = g.outputs().get(s.output).and_then(|&v| g.meta(v));
        let fits = |m: &crate::graph::TensorMeta| {
            new.is_some_and(|n| n.shape == m.shape && n.dtype == m.dtype)
        };
        if s.input != first + k || !g.input_meta(s.input).is_some_and(fits) {
            return Err(Error::Invariant {
                at: At {
                    node: s.name.clone(),
                    line: None,
                },
                message: format!(
                    "the state `{}` must be input {} and an output of its shape and dtype",
                    s.name,
                    first + k
                ),
            });
        }
    }
    Ok(())
}

/// The verifier: every operand exists, the petgraph edges mirror the operands, the graph
/// is acyclic, and the stored metadata equals what inference gives now. A failure is a
/// bug in whichever pass ran last.
pub fn verify(g: &Graph) -> Result<(), Error> {
    let order = g.topo_order().map_err(|n| Error::Cycle(at(g, n)))?;
    for id in order {
        let Some(node) = g.node(id) else { continue };
        let operand_count = node.args.iter().filter(|a| a.value().is_some()).count();
        let edge_count = g
            .petgraph()
            .edges_directed(id.0, petgraph::Direction::Incoming)
            .count();
        if operand_count != edge_count {
            return Err(Error::Invariant {
                at: at(g, id),
                message: format!("{operand_count} tensor operands but {edge_count} edges"),
            });
        }
        let now = infer_outputs(g, id)?;
        if now != node.outputs {
            return Err(Error::Invariant {
                at: at(g, id),
                message: format!(
                    "stored metadata {:?} differs from inferred {:?}",
                    node.outputs, now
                ),
            });
        }
    }
    check_outputs(g)
}
