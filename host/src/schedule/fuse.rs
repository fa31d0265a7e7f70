//! Fusion: which scheduler nodes share a kernel, in Inductor's terms
//! `can_fuse` (legality) and `score_fusion` (memory traffic saved).
//!
//! Nodes are visited in topological order. A node may join an existing kernel
//! when every kernel it depends on comes no later than that kernel, when its
//! values can be built in the kernel's iteration space (a pointwise kernel is
//! re-tiled into rows × reduction elements when a reduction joins it), and
//! when it saves memory traffic: bytes of a producer's output it would
//! otherwise re-read, plus bytes of inputs it shares with the kernel. Among
//! legal kernels the highest score wins; ties keep the original order (the
//! latest kernel). Extern calls never fuse. On a GPU a reduction may also take
//! in a smaller reduction kernel its input broadcasts across its rows
//! ([`takes_in`]).

use std::collections::HashSet;

use super::build::{broadcast_rows, natural_space, space_index, KernelBuilder};
use super::ids::IdVec;
use super::index::Size;
use super::ir::{BufferId, Space};
use super::lower::{Def, Lowered, SKind, SNodeId};
use crate::graph::ir::{Arg, Graph, NodeId, ValueId};

/// Nodes one kernel may hold: bounds the cost of re-building a kernel on
/// every fusion attempt.
pub const MAX_KERNEL_NODES: usize = 48;

/// A group of scheduler nodes that becomes one step.
#[derive(Clone, Debug, PartialEq)]
pub enum Group {
    /// A generated kernel over `space`.
    Kernel {
        /// Its nodes, in order.
        members: Vec<SNodeId>,
        /// Its iteration space.
        space: Space,
    },
    /// One extern call.
    Extern(SNodeId),
}

/// What a node reads: the scheduler nodes it depends on and the buffers it loads.
#[derive(Debug, Default, Clone)]
pub struct Reads {
    /// Producer nodes.
    pub deps: Vec<SNodeId>,
    /// Input and constant buffers (and producer buffers) it loads.
    pub buffers: Vec<BufferId>,
    /// Producers it reads at data-dependent positions (the operand an `index`,
    /// `embedding` or `gather` takes rows from): any element may be read, so
    /// the producer must have finished, in an earlier kernel.
    pub barriers: Vec<SNodeId>,
}

/// The reads of node `id`, found by walking its inline definitions.
pub fn reads_of(graph: &Graph, low: &Lowered, id: SNodeId) -> Reads {
    let s = &low.snodes[id];
    let mut roots: Vec<ValueId> = match &s.kind {
        SKind::Pointwise { value } => inline_operands(graph, *value),
        SKind::Reduction { input, .. } => vec![*input],
        SKind::Scatter { source, index, .. } => vec![*source, *index],
        SKind::Extern { .. } => vec![],
    };
    let mut reads = Reads::default();
    // The node's own value may be an index of a producer (an output `index` of a
    // node that is itself computed here): it reads that producer at data-dependent
    // positions too.
    if let SKind::Pointwise { value } = &s.kind {
        barrier_on_source(low, &mut reads, value.node, id);
    }
    if let SKind::Extern { args, .. } = &s.kind {
        for a in args {
            push_buffer(low, &mut reads, a.buf);
        }
        return reads;
    }
    let mut seen = HashSet::new();
    while let Some(v) = roots.pop() {
        if !seen.insert(v) {
            continue;
        }
        match low.defs.get(&v) {
            Some(Def::Strided(view)) => push_buffer(low, &mut reads, view.buf),
            Some(Def::Node(n)) if *n != id => {
                if !reads.deps.contains(n) {
                    reads.deps.push(*n);
                }
                let b = low.snodes[*n].buf;
                if !reads.buffers.contains(&b) {
                    reads.buffers.push(b);
                }
            }
            Some(Def::Inline { node, .. }) => {
                barrier_on_source(low, &mut reads, *node, id);
                roots.extend(inline_operands(graph, v));
            }
            _ => {}
        }
    }
    reads
}

/// Records the producer of the tensor an `index`/`gather` node takes values from.
fn barrier_on_source(low: &Lowered, reads: &mut Reads, node: NodeId, id: SNodeId) {
    let Some(source) = low.sources.get(&node) else {
        return;
    };
    if let Some(owner) = low.snodes.position(|s| s.buf == source.buf) {
        if owner != id && !reads.barriers.contains(&owner) {
            reads.barriers.push(owner);
        }
    }
}

fn push_buffer(low: &Lowered, reads: &mut Reads, buf: BufferId) {
    if !reads.buffers.contains(&buf) {
        reads.buffers.push(buf);
    }
    if let Some(owner) = low.snodes.position(|s| s.buf == buf) {
        if !reads.deps.contains(&owner) {
            reads.deps.push(owner);
        }
        // A scatter's stores land anywhere in its buffer: its readers come in a
        // later kernel.
        if matches!(low.snodes[owner].kind, SKind::Scatter { .. })
            && !reads.barriers.contains(&owner)
        {
            reads.barriers.push(owner);
        }
    }
}

fn inline_operands(graph: &Graph, v: ValueId) -> Vec<ValueId> {
    graph
        .node(v.node)
        .map(|n| n.args.iter().filter_map(Arg::value).collect())
        .unwrap_or_default()
}

fn buildable(graph: &Graph, low: &Lowered, members: &[SNodeId], space: Space) -> bool {
    let mut b = KernelBuilder::new(graph, low, space);
    members.iter().all(|m| b.add(*m).is_ok())
}

/// The scheduler nodes in an order where every producer comes before its readers
/// (lowering may make a producer's node after a reader's, when a later `index` needs
/// the producer in memory), otherwise in creation order.
fn dependency_order(reads: &IdVec<SNodeId, Reads>) -> Vec<SNodeId> {
    let n = reads.len();
    let waiting_on = |i: SNodeId, r: &Reads| -> HashSet<SNodeId> {
        r.deps
            .iter()
            .chain(&r.barriers)
            .copied()
            .filter(|d| *d != i)
            .collect()
    };
    let mut waiting: IdVec<SNodeId, usize> = reads
        .iter_enumerated()
        .map(|(i, r)| waiting_on(i, r).len())
        .collect();
    let mut readers: IdVec<SNodeId, Vec<SNodeId>> = IdVec::filled(n, Vec::new());
    for (i, r) in reads.iter_enumerated() {
        for d in waiting_on(i, r) {
            readers[d].push(i);
        }
    }
    let mut ready: std::collections::BTreeSet<SNodeId> =
        waiting.ids().filter(|&i| waiting[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &r in &readers[i] {
            waiting[r] -= 1;
            if waiting[r] == 0 {
                ready.insert(r);
            }
        }
    }
    // A cycle cannot happen (the graph is acyclic); keep every node regardless.
    if order.len() < n {
        let placed: HashSet<SNodeId> = order.iter().copied().collect();
        order.extend(reads.ids().filter(|i| !placed.contains(i)));
    }
    order
}

/// Groups the scheduler nodes into kernels and extern calls, in execution order.
/// With `broadcast`, a reduction may also join a reduction kernel of fewer rows
/// over the same elements ([`takes_in`]).
pub fn fuse(graph: &Graph, low: &Lowered, broadcast: bool) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    let mut group_of: IdVec<SNodeId, usize> = IdVec::filled(low.snodes.len(), usize::MAX);
    let mut group_reads: Vec<HashSet<BufferId>> = Vec::new();
    let all_reads: IdVec<SNodeId, Reads> = low
        .snodes
        .ids()
        .map(|id| reads_of(graph, low, id))
        .collect();
    let mut readers: IdVec<SNodeId, Vec<SNodeId>> = IdVec::filled(low.snodes.len(), Vec::new());
    for (i, r) in all_reads.iter_enumerated() {
        for d in r.deps.iter().chain(&r.barriers) {
            readers[*d].push(i);
        }
    }
    for id in dependency_order(&all_reads) {
        let reads = all_reads[id].clone();
        let earliest = reads
            .deps
            .iter()
            .map(|d| group_of[*d])
            .filter(|g| *g != usize::MAX)
            .max();
        // A producer read at data-dependent positions finishes in an earlier kernel:
        // programs of one kernel do not wait for each other's stores.
        let after_barriers = reads
            .barriers
            .iter()
            .map(|d| group_of[*d])
            .filter(|g| *g != usize::MAX)
            .max()
            .map(|g| g + 1);
        let earliest = match (earliest, after_barriers) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let Some(space) = natural_space(low, graph, id) else {
            group_of[id] = groups.len();
            groups.push(Group::Extern(id));
            group_reads.push(reads.buffers.into_iter().collect());
            continue;
        };
        let mut best: Option<(i64, usize, Space)> = None;
        for g in (earliest.unwrap_or(0)..groups.len()).rev() {
            let Group::Kernel {
                members,
                space: gspace,
            } = &groups[g]
            else {
                continue;
            };
            if members.len() >= MAX_KERNEL_NODES {
                continue;
            }
            let is_reduction = space.is_reduction();
            // A pointwise kernel a reduction joins is re-tiled into its rows: each
            // member must be one value per row or per element (one broadcast across
            // the rows would be computed again per row: `takes_in` says where that pays).
            let fits = |m: &SNodeId| space_index(&low.snodes[*m].meta.shape, &space).is_some();
            let target = if *gspace == space
                || (gspace.r.as_const() == Some(1) && is_reduction && members.iter().all(fits))
            {
                space.clone()
            } else if !is_reduction && space_index(&low.snodes[id].meta.shape, gspace).is_some() {
                gspace.clone()
            } else if broadcast && takes_in(graph, low, &readers, members, gspace, id, &reads) {
                space.clone()
            } else {
                continue;
            };
            let saved: i64 = reads
                .deps
                .iter()
                .filter(|d| members.contains(d))
                .map(|d| low.buffers[low.snodes[*d].buf].bytes())
                .sum::<i64>()
                + reads
                    .buffers
                    .iter()
                    .filter(|b| group_reads[g].contains(b))
                    .map(|b| low.buffers[*b].bytes())
                    .sum::<i64>();
            if saved <= 0 || best.as_ref().is_some_and(|(s, _, _)| *s >= saved) {
                continue;
            }
            let mut trial = members.clone();
            trial.push(id);
            if buildable(graph, low, &trial, target.clone()) {
                best = Some((saved, g, target));
            }
        }
        match best {
            Some((_, g, target)) => {
                if let Group::Kernel { members, space } = &mut groups[g] {
                    members.push(id);
                    *space = target;
                }
                group_reads[g].extend(reads.buffers);
                group_of[id] = g;
            }
            None => {
                group_of[id] = groups.len();
                groups.push(Group::Kernel {
                    members: vec![id],
                    space,
                });
                group_reads.push(reads.buffers.into_iter().collect());
            }
        }
    }
    groups
}

/// Whether reduction `id` over `space` may take in the reduction kernel of
/// `members` over `group` whose rows its own broadcast ([`broadcast_rows`]):
/// a layer norm's statistics and output, over the one row of a token, read by
/// each output column of the one-row product after it (`passes::few_rows`).
/// The kernel of both computes each of the group's rows once per row of its
/// own, from memory the first computation brought into the cache, and one
/// launch goes. Only where that pays and stays exact:
/// - `id` reads a buffer of a whole element per row and row element (the
///   product's weight), which the repeated work is small beside;
/// - nothing else reads what the group computes (it is then stored by no row),
///   but other reductions over `id`'s space, which join the kernel after it (a
///   query's, key's and value's products of one normed row, `split_parts`);
/// - the group reduces at most twice (an RMS norm, or a layer norm's mean and
///   its variance about it): each of its reductions is one more reduction over
///   the row, in series, in every program. The Triton generator computes them
///   on one row of each program's tile (`same_for_every_row`); computed on the
///   whole tile, a layer norm's two held so many registers that GPT-2 small's
///   bf16 decoding step lost (0.317 -> 0.361 ms), where on one row it gains
///   (0.265 -> 0.257 ms; float32 0.335 -> 0.337; the 170 M Llama's RMS norms
///   the same; `bench/gpu/results/2026-11-27-horizontal-state-h100.txt`).
fn takes_in(
    graph: &Graph,
    low: &Lowered,
    readers: &IdVec<SNodeId, Vec<SNodeId>>,
    members: &[SNodeId],
    group: &Space,
    id: SNodeId,
    reads: &Reads,
) -> bool {
    let Some(space) = natural_space(low, graph, id) else {
        return false;
    };
    let Some(rows) = group.x.as_const() else {
        return false;
    };
    if group.r != space.r || broadcast_rows(&Size::from(rows), &space).is_none() {
        return false;
    }
    // Another reduction over the same space, which joins the kernel after `id`.
    let sibling = |r: SNodeId| {
        matches!(low.snodes[r].kind, SKind::Reduction { .. })
            && natural_space(low, graph, r).as_ref() == Some(&space)
    };
    let whole = space.x_hint().saturating_mul(space.r_hint());
    let reads_whole = reads
        .buffers
        .iter()
        .any(|b| low.buffers[*b].numel() >= whole);
    let reductions = members
        .iter()
        .filter(|m| matches!(low.snodes[**m].kind, SKind::Reduction { .. }))
        .count();
    let outputs: HashSet<BufferId> = low.outputs.iter().map(|v| v.buf).collect();
    reads_whole
        && reductions <= 2
        && members.iter().all(|m| {
            !outputs.contains(&low.snodes[*m].buf)
                && readers[*m]
                    .iter()
                    .all(|r| *r == id || members.contains(r) || sibling(*r))
        })
}
