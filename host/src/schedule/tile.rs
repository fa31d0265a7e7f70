//! Two-dimensional tiling of pointwise kernels, Inductor's tiled pointwise
//! kernels: a kernel that reads memory contiguous along one dim and writes
//! memory contiguous along another (a transpose, a permute copy) coalesces
//! neither side when its elements are walked in one flat order. Split into
//! rows (the outer dims) and row elements (the inner dims) and launched on
//! square-ish tiles, every access steps by one element along one of the two.

use super::build::KernelBuilder;
use super::ir::{Expr, Space};
use super::lower::{Lowered, SNodeId};
use crate::graph::ir::Graph;

/// Rows and row elements a tiled kernel needs at least: below this a tile
/// is mostly masked off and the flat kernel does as well.
const MIN_SIDE: i64 = 16;

/// The space a pointwise group of `members` runs best in: `space` itself, or
/// rows × row elements when that coalesces at least a quarter more of the
/// bytes the kernel moves.
pub fn tiled_space(graph: &Graph, low: &Lowered, members: &[SNodeId], space: Space) -> Space {
    if space.r != 1 || space.x < MIN_SIDE * MIN_SIDE {
        return space;
    }
    let Some((flat, total)) = coalesced_bytes(graph, low, members, space) else {
        return space;
    };
    if flat >= total {
        return space;
    }
    let Some(first) = members.first() else {
        return space;
    };
    let shape = &low.snodes[first.0 as usize].meta.shape;
    let mut best = (flat + total / 4, space);
    let mut rows = 1i64;
    for &size in &shape[..shape.len().saturating_sub(1)] {
        rows *= size;
        let row_len = space.x / rows.max(1);
        if size == 1 || rows < MIN_SIDE || row_len < MIN_SIDE {
            continue;
        }
        let tiled = Space {
            x: rows,
            r: row_len,
        };
        if let Some((bytes, _)) = coalesced_bytes(graph, low, members, tiled) {
            if bytes > best.0 {
                best = (bytes, tiled);
            }
        }
    }
    best.1
}

/// Bytes the kernel of `members` in `space` moves with unit steps along the
/// rows or along the row, and all the bytes it moves; `None` when it does not
/// build in `space`.
fn coalesced_bytes(
    graph: &Graph,
    low: &Lowered,
    members: &[SNodeId],
    space: Space,
) -> Option<(i64, i64)> {
    let mut b = KernelBuilder::new(graph, low, space);
    for m in members {
        b.add(*m).ok()?;
    }
    let (mut coalesced, mut total) = (0i64, 0i64);
    let loads = b.exprs.iter().filter_map(|(_, e, _)| match e {
        Expr::Load { buf, index, .. } => Some((*buf, index)),
        _ => None,
    });
    let stores = b.stores.iter().map(|(_, s)| (s.buf, &s.index));
    for (buf, index) in loads.chain(stores) {
        let access = space.access(index, low.buffers[buf.0 as usize].dtype.size_bytes() as i64);
        total = total.saturating_add(access.bytes);
        if access.unit_along_row || access.unit_across_rows {
            coalesced = coalesced.saturating_add(access.bytes);
        }
    }
    Some((coalesced, total))
}
