//! No-op removal: `dropout`, `alias`, `_assert_tensor_metadata`, `getitem`, identity views
//! and copies, casts to the same dtype, reductions of one element per result (kept dims),
//! and `x*1`, `x+0`, `x-0`, `x/1`. A node is only
//! dropped when its output's shape and dtype equal its operand's, so a `x+0` whose promotion
//! changes the dtype (an int tensor plus `0.0`) stays.

use super::{replace_node, Error, Stats};
use crate::graph::views::view_map;
use crate::graph::{Arg, BinaryOp, Graph, Op, ValueId};

fn is_identity_scalar(op: BinaryOp, s: f64, scalar_is_rhs: bool) -> bool {
    match op {
        BinaryOp::Add => s == 0.0,
        BinaryOp::Sub => s == 0.0 && scalar_is_rhs,
        BinaryOp::Mul => s == 1.0,
        BinaryOp::Div => s == 1.0 && scalar_is_rhs,
        _ => false,
    }
}

/// The operand a node passes through unchanged, if it is a no-op.
fn passthrough(g: &Graph, id: crate::graph::NodeId) -> Option<ValueId> {
    let node = g.node(id)?;
    let candidate = match (&node.op, node.args.as_slice()) {
        (Op::NoOp(_) | Op::GetItem { .. }, [Arg::Value(v), ..]) => *v,
        (Op::Contiguous | Op::Clone, [Arg::Value(v)]) if !copy_is_needed(g, id, *v) => *v,
        (Op::Cast { .. }, [Arg::Value(v)]) => *v,
        // A reduction of one element per result is that element (a softmax
        // over a dim of one: `exp(x - x) / exp(x - x)`, one pointwise pass).
        (Op::Reduce { dims, .. }, [Arg::Value(v)])
            if reduces_one_element(g, *v, dims.as_deref()) =>
        {
            *v
        }
        (op, [Arg::Value(v)]) if op.is_view() && reads_in_place(g, op, &g.meta(*v)?.shape) => *v,
        (Op::Binary { op, alpha }, [a, b]) => {
            let alpha = alpha.map_or(1.0, |a| a.to_f64());
            match (a, b) {
                (Arg::Value(v), Arg::Scalar(s))
                    if is_identity_scalar(*op, s.to_f64() * alpha, true) =>
                {
                    *v
                }
                (Arg::Scalar(s), Arg::Value(v))
                    if alpha == 1.0 && is_identity_scalar(*op, s.to_f64(), false) =>
                {
                    *v
                }
                _ => return None,
            }
        }
        _ => return None,
    };
    // Same values: same shape and dtype (strides may differ; re-inference after the pass
    // gives users the operand's layout, and values never depend on layout). Sizes that
    // may be symbolic are the same expressions.
    let (m, o) = (g.meta(candidate)?, node.outputs.first()?);
    (m.shape == o.shape && m.dtype == o.dtype && node.outputs.len() == 1).then_some(candidate)
}

/// Whether a reduction of `v` over `dims` (all of them when `None`) reduces
/// one element into each result.
fn reduces_one_element(g: &Graph, v: ValueId, dims: Option<&[i64]>) -> bool {
    let Some(meta) = g.fixed_meta(v) else {
        return false;
    };
    crate::graph::shape::wrap_dim_set(dims, meta.shape.len())
        .is_ok_and(|reduced| reduced.iter().map(|&d| meta.shape[d]).product::<i64>() == 1)
}

/// Whether `contiguous`/`clone` node `id` of operand `v` must stay a copy: it gives a
/// graph output, and dropping it would hand the caller a strided view (the transpose a
/// `contiguous` was asked to lay out), an alias of a graph input (which the caller may
/// mutate), or the same tensor as another output.
fn copy_is_needed(g: &Graph, id: crate::graph::NodeId, v: ValueId) -> bool {
    let outputs = g.outputs();
    if !outputs.iter().any(|o| o.node == id) {
        return false;
    }
    if outputs.contains(&v) {
        return true;
    }
    let Some(meta) = g.fixed_meta(v) else {
        return true;
    };
    let dense = meta
        .shape
        .iter()
        .zip(&meta.strides)
        .zip(crate::graph::shape::contiguous_strides(&meta.shape))
        .all(|((&size, &stride), want)| size <= 1 || stride == want);
    if !dense {
        return true;
    }
    // An alias of an input: walk back through views and pass-throughs.
    let mut at = v;
    loop {
        let Some(node) = g.node(at.node) else {
            return true;
        };
        match (&node.op, node.args.first()) {
            (Op::Input { .. } | Op::Constant { .. }, _) => return true,
            (op, Some(Arg::Value(next)))
                if op.is_view() || matches!(op, Op::NoOp(_) | Op::GetItem { .. }) =>
            {
                at = *next;
            }
            _ => return false,
        }
    }
}

/// Whether view `op` reads every element of an input of `shape` at its own
/// index (the transpose of a square matrix keeps the shape and moves every
/// value; a transpose of two size-1 dims moves none).
fn reads_in_place(g: &Graph, op: &Op, shape: &[crate::graph::sym::Size]) -> bool {
    view_map(op, shape, 0, g.symbols()).is_ok_and(|m| m.is_identity())
}

/// Runs no-op removal.
pub fn run(g: &mut Graph) -> Result<Stats, Error> {
    let _span = tracing::info_span!("noop").entered();
    let order = super::topo_order(g, "noop")?;
    let mut changed = 0;
    for id in order {
        if let Some(v) = passthrough(g, id) {
            replace_node(g, id, &[v]);
            changed += 1;
        }
    }
    Ok(Stats { changed })
}
