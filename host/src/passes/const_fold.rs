//! Constant folding: a node whose operands are all constants is evaluated with the
//! reference interpreter and becomes a constant. Only small results are folded (at most
//! [`MAX_FOLD_ELEMENTS`] elements, single-output nodes), so folding never blows up a graph
//! with a huge literal.

use super::{Error, Stats};
use crate::graph::{Arg, ConstData, Graph, Op, TensorMeta};
use crate::interp::{constant, eval_op, Val};
use std::sync::Arc;

/// The largest result folded.
pub const MAX_FOLD_ELEMENTS: i64 = 4096;

/// Runs constant folding in one topological sweep (folded nodes feed later folds).
pub fn run(g: &mut Graph) -> Result<Stats, Error> {
    let _span = tracing::info_span!("const_fold").entered();
    let order = super::topo_order(g, "const_fold")?;
    let mut changed = 0;
    for id in order {
        let Some(node) = g.node(id) else { continue };
        // `full` of any size is one number.
        if let (Op::Full { value, .. }, [meta]) = (&node.op, node.outputs.as_slice()) {
            let meta = meta.clone();
            let x = meta.dtype.round(value.to_f64());
            if let Some(n) = g.node_mut(id) {
                n.op = Op::Constant {
                    data: ConstData::Fill(x),
                };
                n.outputs = vec![meta];
            }
            g.set_args(id, vec![]);
            changed += 1;
            continue;
        }
        if matches!(node.op, Op::Input { .. } | Op::Constant { .. })
            || node.outputs.len() != 1
            || node.outputs.iter().any(|m| m.numel() > MAX_FOLD_ELEMENTS)
        {
            continue;
        }
        let mut tensors = Vec::new();
        let mut all_const = true;
        for a in &node.args {
            if let Arg::Value(v) = a {
                match g.node(v.node).map(|p| (&p.op, p.outputs.first())) {
                    Some((Op::Constant { data }, Some(m))) if m.numel() <= MAX_FOLD_ELEMENTS => {
                        // A constant that cannot be allocated is not folded.
                        let Some(Ok(t)) = m.fixed().map(|m| constant(&m, data)) else {
                            all_const = false;
                            break;
                        };
                        tensors.push(t);
                    }
                    _ => {
                        all_const = false;
                        break;
                    }
                }
            }
        }
        // Factories (`full`, `arange`) have no operands and fold too.
        let factory = matches!(node.op, Op::Full { .. } | Op::Arange { .. });
        if !all_const || (tensors.is_empty() && !factory) {
            continue;
        }
        let mut it = tensors.iter();
        let vals: Vec<Val> = node
            .args
            .iter()
            .filter_map(|a| match a {
                Arg::Value(_) => it.next().map(Val::Tensor),
                Arg::Scalar(s) => Some(Val::Scalar(*s)),
            })
            .collect();
        // A fold the interpreter cannot do is simply not done.
        let Some(outs) = node
            .outputs
            .iter()
            .map(TensorMeta::fixed)
            .collect::<Option<Vec<_>>>()
        else {
            continue;
        };
        let Ok(result) = eval_op(&node.op, &vals, &outs) else {
            continue;
        };
        let Some(t) = result.first() else { continue };
        let meta = TensorMeta::contiguous(t.shape.clone(), t.dtype);
        let data = ConstData::Values(Arc::from(t.to_vec()));
        // A folded view (a transposed weight) becomes a contiguous constant: its users,
        // which read its strides (an `expand` too large to fold), are inferred again.
        if node.outputs.first() != Some(&meta) {
            let users: Vec<_> = g.users(id).map(|(u, _)| u).collect();
            for u in users {
                g.node_mut(u);
            }
        }
        if let Some(n) = g.node_mut(id) {
            n.op = Op::Constant { data };
            n.outputs = vec![meta];
        }
        g.set_args(id, vec![]);
        changed += 1;
    }
    Ok(Stats { changed })
}
