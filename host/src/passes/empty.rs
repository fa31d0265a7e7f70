//! Empty values: a node whose one output has no elements (a size-0 dim) computes
//! nothing, whatever its op, so it becomes an empty constant before any other pass; and
//! a reduction over a dim of size 0 is its identity everywhere (`sum` 0, `mean` and
//! `var` NaN, `any` false, `all` true). Decompositions (a softmax's `amax` of nothing)
//! and kernels (an iteration space of zero) never see either.

use super::{Error, Stats};
use crate::graph::shape::wrap_dim_set;
use crate::graph::{ConstData, Graph, Op, ReduceOp, TensorMeta};

/// The value of a reduction over nothing, if the node is one.
fn empty_reduction(g: &Graph, node: &crate::graph::Node) -> Option<f64> {
    let (dims, value) = match &node.op {
        Op::Reduce { op, dims, .. } => (
            dims,
            match op {
                ReduceOp::Sum => 0.0,
                ReduceOp::Mean => f64::NAN,
                ReduceOp::Any => 0.0,
                ReduceOp::All => 1.0,
                // Refused by shape inference over a dim of size 0.
                ReduceOp::Amax | ReduceOp::Amin => return None,
            },
        ),
        Op::Var { dims, .. } => (dims, f64::NAN),
        _ => return None,
    };
    let input = node.args.first()?.value()?;
    let shape = &g.fixed_meta(input)?.shape;
    let reduced = wrap_dim_set(dims.as_deref(), shape.len()).ok()?;
    reduced.iter().any(|&d| shape[d] == 0).then_some(value)
}

/// Replaces every computed single-output node with zero elements by an empty constant.
pub fn run(g: &mut Graph) -> Result<Stats, Error> {
    let _span = tracing::info_span!("empty").entered();
    let ids: Vec<_> = g.node_ids().collect();
    let mut changed = 0;
    for id in ids {
        let Some(node) = g.node(id) else { continue };
        let [meta] = node.outputs.as_slice() else {
            continue;
        };
        if matches!(node.op, Op::Input { .. } | Op::Constant { .. }) {
            continue;
        }
        let fill = if meta.numel() == 0 {
            0.0
        } else if let Some(v) = empty_reduction(g, node) {
            meta.dtype.round(v)
        } else {
            continue;
        };
        let meta = TensorMeta::contiguous_sizes(meta.shape.clone(), meta.dtype);
        if let Some(n) = g.node_mut(id) {
            n.op = Op::Constant {
                data: ConstData::Fill(fill),
            };
            n.outputs = vec![meta];
        }
        g.set_args(id, vec![]);
        changed += 1;
    }
    Ok(Stats { changed })
}
