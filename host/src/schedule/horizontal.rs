//! Horizontal fusion: pointwise kernels that share no buffer they write, each
//! too small for its bandwidth to matter, become one kernel over the larger
//! space, each part's loads and stores guarded to its own. A kernel joins the
//! one before it, or one a few steps earlier where it shares no written buffer
//! with the steps between (it then runs before them).
//!
//! A decoding step computes a few hundred elements at a time between its
//! products: the 170 M Llama's key/value rope and cache write (256 elements)
//! and its query's rope (1024) are two launches that neither reads the other's
//! result. On a GPU a launch costs about 2 µs even under dependent launch,
//! while moving such a kernel's bytes takes a fraction of one, so the two run
//! as one. Kernels over one space merge with no guards at all.

use super::ids::IdVec;
use super::index::{Index, Size, Var};
use super::ir::{Buffer, BufferId, Cond, Expr, ExprArena, ExprId, Kernel, Space, Step, Store};
use crate::graph::ir::NodeId;

/// Most bytes a kernel merged so may move, its parts together: a thousandth
/// of a millisecond or less of an H100's copy bandwidth (about 3 TB/s), well
/// under what a launch costs, so that the merged kernel's added work stays
/// small beside the launch it saves.
const SMALL_BYTES: i64 = 1 << 20;

/// Most steps a small pointwise kernel moves back over to join an earlier one.
const LOOK_BACK: usize = 3;

/// Merges each small pointwise kernel into an earlier one, the step before it or
/// one of the [`LOOK_BACK`] steps before, where it shares no buffer either writes
/// with the steps it moves over; `covers` (the graph nodes of each step) follows.
pub(super) fn merge_small_pointwise(
    steps: Vec<Step>,
    covers: Vec<Vec<NodeId>>,
    buffers: &IdVec<BufferId, Buffer>,
) -> (Vec<Step>, Vec<Vec<NodeId>>) {
    let mut out_steps: Vec<Step> = Vec::with_capacity(steps.len());
    let mut out_covers: Vec<Vec<NodeId>> = Vec::with_capacity(covers.len());
    for (step, cover) in steps.into_iter().zip(covers) {
        match joined(&mut out_steps, &step, buffers) {
            Some(at) => out_covers[at].extend(cover),
            None => {
                out_steps.push(step);
                out_covers.push(cover);
            }
        }
    }
    (out_steps, out_covers)
}

/// Merges `step` into one of the last [`LOOK_BACK`] kernels of `steps` that it may
/// join, the latest first, moving it over the steps between where it shares no
/// buffer either writes with them; the merged step's position.
fn joined(steps: &mut [Step], step: &Step, buffers: &IdVec<BufferId, Buffer>) -> Option<usize> {
    let Step::Kernel(next) = step else {
        return None;
    };
    let first = steps.len().saturating_sub(LOOK_BACK);
    for at in (first..steps.len()).rev() {
        if let Step::Kernel(earlier) = &steps[at] {
            if let Some(merged) = merged(earlier, next, buffers) {
                steps[at] = Step::Kernel(merged);
                return Some(at);
            }
        }
        // `step` may move over this one only if neither writes what the other touches.
        if !apart(
            (steps[at].reads(), steps[at].writes()),
            (step.reads(), step.writes()),
        ) {
            return None;
        }
    }
    None
}

/// Whether neither of two steps, each given by the buffers it reads and those it
/// writes, writes a buffer the other reads or writes: either may run first.
fn apart(a: (Vec<BufferId>, Vec<BufferId>), b: (Vec<BufferId>, Vec<BufferId>)) -> bool {
    let ((a_reads, a_writes), (b_reads, b_writes)) = (a, b);
    !a_writes
        .iter()
        .any(|w| b_reads.contains(w) || b_writes.contains(w))
        && !b_writes.iter().any(|w| a_reads.contains(w))
}

/// `a` and `b` as one kernel, where both are flat pointwise kernels, neither
/// writes what the other reads or writes, and the two together move at most
/// [`SMALL_BYTES`].
fn merged(a: &Kernel, b: &Kernel, buffers: &IdVec<BufferId, Buffer>) -> Option<Kernel> {
    let flat = |k: &Kernel| {
        !k.is_reduction() && k.space.r.as_const() == Some(1) && k.space.inner.as_const() == Some(1)
    };
    if !flat(a) || !flat(b) {
        return None;
    }
    let independent = apart((a.reads(), a.writes()), (b.reads(), b.writes()));
    if !independent || bytes_moved(a, buffers).saturating_add(bytes_moved(b, buffers)) > SMALL_BYTES
    {
        return None;
    }
    let (ax, bx) = (a.space.x.as_const()?, b.space.x.as_const()?);
    let space = Space::rows(ax.max(bx), 1);
    let mut exprs = ExprArena::default();
    let mut stores = Vec::new();
    for part in [a, b] {
        // Places past a smaller part's own space neither read nor store.
        let part_x = if std::ptr::eq(part, a) { ax } else { bx };
        let guards: Vec<Cond> = if part_x < ax.max(bx) {
            vec![Cond {
                index: Index::var(Var::X),
                lo: Size::from(0),
                hi: Size::from(part_x),
            }]
        } else {
            Vec::new()
        };
        let ids = copy_exprs(part, &guards, &mut exprs);
        stores.extend(part.stores.iter().map(|s| {
            Store {
                buf: s.buf,
                index: s.index.clone(),
                value: ids[s.value],
                indirect: s
                    .indirect
                    .iter()
                    .map(|i| super::ir::Indirect {
                        value: ids[i.value],
                        ..i.clone()
                    })
                    .collect(),
                guards: s.guards.iter().chain(&guards).cloned().collect(),
            }
        }));
    }
    let mut ops = a.ops.clone();
    ops.extend(b.ops.iter().filter(|o| !a.ops.contains(o)));
    Some(Kernel::new(ops, space, exprs, Vec::new(), stores))
}

/// `part`'s expressions interned into `exprs`, each load also guarded by
/// `guards`: the new id of each.
fn copy_exprs(part: &Kernel, guards: &[Cond], exprs: &mut ExprArena) -> IdVec<ExprId, ExprId> {
    let mut ids: IdVec<ExprId, ExprId> = IdVec::filled(part.exprs.len(), ExprId(0));
    // Operands come before their users, so each is mapped when it is needed.
    for (id, e, dtype) in part.exprs.iter() {
        let mut copy = e.with_operands(|o| ids[o]);
        if let Expr::Load { guards: own, .. } = &mut copy {
            own.extend(guards.iter().cloned());
        }
        ids[id] = exprs.intern(copy, dtype);
    }
    ids
}

/// The bytes a kernel's loads and stores move over its space.
fn bytes_moved(k: &Kernel, buffers: &IdVec<BufferId, Buffer>) -> i64 {
    let size = |b: BufferId| buffers[b].dtype.size_bytes() as i64;
    let loads = k.exprs.iter().filter_map(|(_, e, _)| match e {
        Expr::Load { buf, index, .. } => Some(k.space.access(index, size(*buf)).bytes),
        _ => None,
    });
    let stores = k
        .stores
        .iter()
        .map(|s| k.space.access(&s.index, size(s.buf)).bytes);
    loads.chain(stores).fold(0i64, i64::saturating_add)
}
