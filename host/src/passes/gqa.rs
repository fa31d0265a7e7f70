//! Grouped-query attention read as it is stored.
//!
//! Models with fewer key/value heads than query heads (Llama's `repeat_kv`)
//! repeat each key and value head for its group of query heads before the
//! attention: `reshape(expand(unsqueeze(k, 2), [B, KVH, R, S, E]), [B, KVH * R, S,
//! E])`. An attention kept whole (a Triton target's fused kernel) reads grouped
//! heads itself (query head `h` reads key/value head `h / R`, the order the
//! repetition makes), so the repetition, which would be written to memory R
//! times over, is dropped and the attention marked `gqa`. Key and value are
//! rewritten together, with the same `R`, or not at all.

use super::{Error, Stats};
use crate::graph::{Arg, Graph, Op, ValueId};

/// Reads repeated key/value heads of whole attentions as grouped heads.
pub fn run(g: &mut Graph) -> Result<Stats, Error> {
    let _span = tracing::info_span!("gqa").entered();
    let mut changed = 0;
    for id in super::topo_order(g, "gqa")? {
        let Some(node) = g.node(id) else { continue };
        if !matches!(node.op, Op::Attention { .. }) {
            continue;
        }
        let (Some(q), Some(k), Some(v)) = (
            node.args.first().and_then(Arg::value),
            node.args.get(1).and_then(Arg::value),
            node.args.get(2).and_then(Arg::value),
        ) else {
            continue;
        };
        let heads = match g.fixed_meta(q) {
            Some(m) if m.rank() == 4 => m.shape[1],
            _ => continue,
        };
        let (Some((k0, rk)), Some((v0, rv))) = (repeated(g, k), repeated(g, v)) else {
            continue;
        };
        if rk != rv || rk < 2 || g.fixed_meta(k0).map(|m| m.shape[1] * rk) != Some(heads) {
            continue;
        }
        let mut args = node.args.clone();
        args[1] = Arg::Value(k0);
        args[2] = Arg::Value(v0);
        if let Some(n) = g.node_mut(id) {
            if let Op::Attention { gqa, .. } = &mut n.op {
                *gqa = true;
            }
        }
        g.set_args(id, args);
        changed += 1;
    }
    Ok(Stats { changed })
}

/// `value` as `reshape(expand(unsqueeze(x, 2), [B, H, R, S, E]), [B, H * R, S, E])`:
/// `x` (`[B, H, S, E]`) and `R`.
fn repeated(g: &Graph, value: ValueId) -> Option<(ValueId, i64)> {
    let reshape = g.node(value.node)?;
    if !matches!(reshape.op, Op::Reshape { .. }) {
        return None;
    }
    let expanded = reshape.args.first()?.value()?;
    let expand = g.node(expanded.node)?;
    if !matches!(expand.op, Op::Expand { .. }) {
        return None;
    }
    let unsqueezed = expand.args.first()?.value()?;
    let unsqueeze = g.node(unsqueezed.node)?;
    if !matches!(unsqueeze.op, Op::Unsqueeze { .. }) {
        return None;
    }
    let x = unsqueeze.args.first()?.value()?;
    let (xs, us, es, rs) = (
        &g.fixed_meta(x)?.shape,
        &g.fixed_meta(unsqueezed)?.shape,
        &g.fixed_meta(expanded)?.shape,
        &g.fixed_meta(value)?.shape,
    );
    if xs.len() != 4 {
        return None;
    }
    let (b, h, s, e) = (xs[0], xs[1], xs[2], xs[3]);
    let r = *es.get(2)?;
    (us[..] == [b, h, 1, s, e] && es[..] == [b, h, r, s, e] && rs[..] == [b, h * r, s, e])
        .then_some((x, r))
}
