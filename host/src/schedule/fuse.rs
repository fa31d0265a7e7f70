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
//! latest kernel). Extern calls never fuse.

use std::collections::HashSet;

use super::build::{natural_space, space_index, KernelBuilder};
use super::ir::{BufferId, Space};
use super::lower::{Def, Lowered, SKind, SNodeId};
use crate::graph::ir::{Arg, Graph, ValueId};

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
    let s = &low.snodes[id.0 as usize];
    let mut roots: Vec<ValueId> = match &s.kind {
        SKind::Pointwise { value } => inline_operands(graph, *value),
        SKind::Reduction { input, .. } => vec![*input],
        SKind::Extern { .. } => vec![],
    };
    let mut reads = Reads::default();
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
                let b = low.snodes[n.0 as usize].buf;
                if !reads.buffers.contains(&b) {
                    reads.buffers.push(b);
                }
            }
            Some(Def::Inline { node, .. }) => {
                if let Some(source) = low.sources.get(node) {
                    if let Some(owner) = low.snodes.iter().position(|s| s.buf == source.buf) {
                        let owner = SNodeId(owner as u32);
                        if owner != id && !reads.barriers.contains(&owner) {
                            reads.barriers.push(owner);
                        }
                    }
                }
                roots.extend(inline_operands(graph, v));
            }
            _ => {}
        }
    }
    reads
}

fn push_buffer(low: &Lowered, reads: &mut Reads, buf: BufferId) {
    if !reads.buffers.contains(&buf) {
        reads.buffers.push(buf);
    }
    if let Some(owner) = low.snodes.iter().position(|s| s.buf == buf) {
        let owner = SNodeId(owner as u32);
        if !reads.deps.contains(&owner) {
            reads.deps.push(owner);
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

/// Groups the scheduler nodes into kernels and extern calls, in execution order.
pub fn fuse(graph: &Graph, low: &Lowered) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    let mut group_of: Vec<usize> = vec![usize::MAX; low.snodes.len()];
    let mut group_reads: Vec<HashSet<BufferId>> = Vec::new();
    for i in 0..low.snodes.len() {
        let id = SNodeId(i as u32);
        let reads = reads_of(graph, low, id);
        let earliest = reads
            .deps
            .iter()
            .map(|d| group_of[d.0 as usize])
            .filter(|g| *g != usize::MAX)
            .max();
        // A producer read at data-dependent positions finishes in an earlier kernel:
        // programs of one kernel do not wait for each other's stores.
        let after_barriers = reads
            .barriers
            .iter()
            .map(|d| group_of[d.0 as usize])
            .filter(|g| *g != usize::MAX)
            .max()
            .map(|g| g + 1);
        let earliest = match (earliest, after_barriers) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let Some(space) = natural_space(low, graph, id) else {
            group_of[i] = groups.len();
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
            let is_reduction = space.r > 1;
            let target = if *gspace == space || (gspace.r == 1 && is_reduction) {
                space
            } else if !is_reduction && space_index(&low.snodes[i].meta.shape, *gspace).is_some() {
                *gspace
            } else {
                continue;
            };
            let saved: i64 = reads
                .deps
                .iter()
                .filter(|d| members.contains(d))
                .map(|d| low.buffers[low.snodes[d.0 as usize].buf.0 as usize].bytes())
                .sum::<i64>()
                + reads
                    .buffers
                    .iter()
                    .filter(|b| group_reads[g].contains(b))
                    .map(|b| low.buffers[b.0 as usize].bytes())
                    .sum::<i64>();
            if saved <= 0 || best.as_ref().is_some_and(|(s, _, _)| *s >= saved) {
                continue;
            }
            let mut trial = members.clone();
            trial.push(id);
            if buildable(graph, low, &trial, target) {
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
                group_of[i] = g;
            }
            None => {
                group_of[i] = groups.len();
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
