//! Horizontal fusion: adjacent pointwise kernels that share no buffer they
//! write, each too small for its bandwidth to matter, become one kernel over
//! the larger space, each part's loads and stores guarded to its own.
//!
//! A decoding step computes a few hundred elements at a time between its
//! products: the 170 M Llama's key/value rope and cache write (256 elements)
//! and its query's rope (1024) are two launches that neither reads the other's
//! result. On a GPU a launch costs about 2 µs even under dependent launch,
//! while moving such a kernel's bytes takes a fraction of one, so the two run
//! as one. Kernels over one space merge with no guards at all.

use super::ids::IdVec;
use super::index::{Index, Var};
use super::ir::{Buffer, BufferId, Cond, Expr, ExprArena, ExprId, Kernel, Space, Step, Store};
use crate::graph::ir::NodeId;

/// Most bytes a kernel merged so may move, its parts together: a thousandth
/// of a millisecond or less of an H100's copy bandwidth (about 3 TB/s), well
/// under what a launch costs, so that the merged kernel's added work stays
/// small beside the launch it saves.
const SMALL_BYTES: i64 = 1 << 20;

/// Merges each run of adjacent steps that are small, independent pointwise
/// kernels into one kernel; `covers` (the graph nodes of each step) follows.
pub(super) fn merge_small_pointwise(
    steps: Vec<Step>,
    covers: Vec<Vec<NodeId>>,
    buffers: &IdVec<BufferId, Buffer>,
) -> (Vec<Step>, Vec<Vec<NodeId>>) {
    let mut out_steps: Vec<Step> = Vec::with_capacity(steps.len());
    let mut out_covers: Vec<Vec<NodeId>> = Vec::with_capacity(covers.len());
    for (step, cover) in steps.into_iter().zip(covers) {
        if let (Some(Step::Kernel(last)), Step::Kernel(next)) = (out_steps.last_mut(), &step) {
            if let Some(merged) = merged(last, next, buffers) {
                *last = merged;
                if let Some(c) = out_covers.last_mut() {
                    c.extend(cover);
                }
                continue;
            }
        }
        out_steps.push(step);
        out_covers.push(cover);
    }
    (out_steps, out_covers)
}

/// `a` and `b` as one kernel, where both are flat pointwise kernels, `b`
/// neither reads nor writes what `a` writes nor writes what `a` reads, and
/// the two together move at most [`SMALL_BYTES`].
fn merged(a: &Kernel, b: &Kernel, buffers: &IdVec<BufferId, Buffer>) -> Option<Kernel> {
    let flat = |k: &Kernel| !k.is_reduction() && k.space.r == 1 && k.space.inner == 1;
    if !flat(a) || !flat(b) {
        return None;
    }
    let (a_writes, b_writes) = (a.writes(), b.writes());
    let independent = !b.reads().iter().any(|r| a_writes.contains(r))
        && !b_writes
            .iter()
            .any(|w| a_writes.contains(w) || a.reads().contains(w));
    if !independent || bytes_moved(a, buffers).saturating_add(bytes_moved(b, buffers)) > SMALL_BYTES
    {
        return None;
    }
    let space = Space::rows(a.space.x.max(b.space.x), 1);
    let mut exprs = ExprArena::default();
    let mut stores = Vec::new();
    for part in [a, b] {
        // Places past a smaller part's own space neither read nor store.
        let guards: Vec<Cond> = if part.space.x < space.x {
            vec![Cond {
                index: Index::var(Var::X),
                lo: 0,
                hi: part.space.x,
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
        let m = |o: &ExprId| ids[*o];
        let copy = match e {
            Expr::Load {
                buf,
                index,
                guards: own,
                indirect,
            } => Expr::Load {
                buf: *buf,
                index: index.clone(),
                guards: own.iter().chain(guards).cloned().collect(),
                indirect: indirect
                    .iter()
                    .map(|i| super::ir::Indirect {
                        value: m(&i.value),
                        ..i.clone()
                    })
                    .collect(),
            },
            Expr::Literal(l) => Expr::Literal(*l),
            Expr::Unary(op, x) => Expr::Unary(*op, m(x)),
            Expr::Binary(op, x, y) => Expr::Binary(*op, m(x), m(y)),
            Expr::Where(c, x, y) => Expr::Where(m(c), m(x), m(y)),
            Expr::Cast(x) => Expr::Cast(m(x)),
            Expr::Select(c, x, y) => Expr::Select(c.clone(), m(x), m(y)),
            Expr::Reduced(n) => Expr::Reduced(*n),
        };
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
