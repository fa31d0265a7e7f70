//! Split reductions, Inductor's `num_splits`: a reduction of many elements into
//! few results runs on few programs and leaves most of the device idle (the sum
//! of a whole tensor on one program; `x.sum(0)` of a tall matrix on a program per
//! 64 columns). Such a reduction becomes two: partial results over equal chunks
//! of its outermost reduced dim, then the reduction of those partials.
//!
//! `sum` and `mean` accumulate their partials in float32 (float64 for float64
//! results; int64 for integers) and round once at the end, as the unsplit
//! reduction does; `amax` and `amin` are exact. The mean of equal chunks' means
//! is the mean.

use super::{emit, replace_node, Error, Stats};
use crate::graph::shape::wrap_dim_set;
use crate::graph::{Arg, DType, Graph, NodeId, Op, ReduceOp};

/// Reductions of fewer elements in all are never split: below this a graph is
/// bound by launches, and a second kernel costs more than idle units (a
/// decode step's norms). Inductor's `min_elements_per_device` is of this order.
const MIN_TOTAL: i64 = 1 << 22;
/// Elements per result from which a reduction is split whatever its total: one
/// program walking them costs more than a second launch. T5's fp16 overflow guard,
/// `isinf(x).any()` of 8 x 512 x 512 (half of `MIN_TOTAL`), took 160 us per call on
/// one program of the H100, Inductor's split 7 us; a quarter million 4-byte elements
/// are about 8 us on one unit against two launches of 2-3 us.
const MIN_LONE_RESULT: i64 = 1 << 18;
/// Inner reductions (each result's elements contiguous) of at most this many
/// elements per result are never split, as in Inductor's `inner_reduction_splits`.
const MIN_INNER_REDUCED: i64 = 8192;
/// Elements each partial of an inner reduction reduces at least.
const MIN_CHUNK: i64 = 256;
/// Elements each partial of an outer reduction reduces at least.
const MIN_OUTER_CHUNK: i64 = 128;
/// Results one program of an outer reduction computes (the heuristics' tile).
const OUTER_RESULTS_PER_PROGRAM: i64 = 64;
/// Programs per parallel unit a split of an inner reduction aims for.
const PROGRAMS_PER_UNIT: i64 = 2;
/// Programs per parallel unit a split of an outer reduction (its innermost
/// dim kept) aims for: its programs are short (a tile of 64 results by a few
/// rows), and a unit needs many in flight to keep its memory busy. On the
/// H100, softmax over the first dim of 4096 × 4096: Inductor's 32 chunks of
/// 128 rows (2048 programs) take 28.6 µs per partial kernel, Kiln's 8 chunks
/// (512 programs) 36.7 µs. Not more: a reduction left whole keeps its
/// broadcast consumer in its kernel (`x - x.mean(1)` of `[512, 512, 256]`,
/// 2048 programs, stays one kernel).
const OUTER_PROGRAMS_PER_UNIT: i64 = 8;
/// The warps of the programs the constants above were measured with (the
/// H100's outer tile of 64 x 8, Inductor's `triton_config_reduction`). A
/// device whose reduction programs have fewer warps wants proportionally more
/// programs per unit to keep as many loads in flight (the gxu runs one warp a
/// program: four times as many).
const REFERENCE_PROGRAM_WARPS: i64 = 4;

/// What to split a reduction node into.
struct Split {
    /// The first of `merge` consecutive reduced dims which, taken as one, are cut
    /// into `chunks` × `size / chunks`.
    dim: usize,
    merge: usize,
    chunks: i64,
}

/// The device a split aims to keep busy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Device {
    /// Parallel units (multiprocessors); 0 splits nothing.
    pub units: u32,
    /// Warps in one program of a long reduction as the device's heuristics
    /// launch it; 0 when unknown (taken as [`REFERENCE_PROGRAM_WARPS`]).
    pub program_warps: u32,
}

impl Device {
    /// How many more programs than the reference each unit wants: programs
    /// of fewer warps carry fewer loads each.
    fn programs_scale(self) -> i64 {
        match i64::from(self.program_warps) {
            0 => 1,
            warps => (REFERENCE_PROGRAM_WARPS / warps).max(1),
        }
    }
}

/// How to split node `id`, if it is a reduction worth splitting for `device`.
fn plan(g: &Graph, id: NodeId, device: Device) -> Option<Split> {
    let units = i64::from(device.units);
    let node = g.node(id)?;
    let Op::Reduce { op, dims, .. } = &node.op else {
        return None;
    };
    if matches!(op, ReduceOp::Any | ReduceOp::All) {
        return None;
    }
    let input = node.args.first()?.value()?;
    let shape = g.fixed_meta(input)?.shape.clone();
    let reduced = wrap_dim_set(dims.as_deref(), shape.len()).ok()?;
    let r: i64 = reduced.iter().map(|&d| shape[d]).product();
    let kept: i64 = shape.iter().product::<i64>() / r.max(1);
    if kept < 1 || (r.saturating_mul(kept) < MIN_TOTAL && r < MIN_LONE_RESULT) {
        return None;
    }
    // Inner: every dim after the first reduced one with more than one element
    // is reduced, so a result's elements are contiguous; else one program takes
    // a tile of results.
    let first = *reduced.first()?;
    let inner = (first..shape.len()).all(|d| shape[d] == 1 || reduced.contains(&d));
    if inner && r <= MIN_INNER_REDUCED {
        return None;
    }
    // Outer: the innermost dim with more than one element is kept, so the
    // results a program computes side by side are contiguous in memory.
    let outer = shape
        .iter()
        .rposition(|&n| n != 1)
        .is_some_and(|d| !reduced.contains(&d));
    let tiles = (kept + OUTER_RESULTS_PER_PROGRAM - 1) / OUTER_RESULTS_PER_PROGRAM;
    let (programs, per_unit, min_chunk) = if inner {
        (kept, PROGRAMS_PER_UNIT, MIN_CHUNK)
    } else if outer {
        (tiles, OUTER_PROGRAMS_PER_UNIT, MIN_OUTER_CHUNK)
    } else {
        (tiles, PROGRAMS_PER_UNIT, MIN_CHUNK)
    };
    let wanted = per_unit * units * device.programs_scale();
    if programs >= wanted {
        return None;
    }
    let chunks_wanted = (wanted + programs - 1) / programs;
    // A divisor of `size` that gives chunks of enough elements: the fewest
    // chunks that reach the programs wanted, else the most there can be.
    let cut = |size: i64| {
        let fits = |c: &i64| size % c == 0 && r / c >= min_chunk;
        (chunks_wanted.max(2)..=size)
            .find(fits)
            .or_else(|| (2..chunks_wanted.min(size + 1)).rev().find(fits))
    };
    // The outermost reduced dim that can be cut.
    let single = reduced.iter().find_map(|&dim| {
        cut(shape[dim]).map(|chunks| Split {
            dim,
            merge: 1,
            chunks,
        })
    });
    if single.as_ref().is_some_and(|s| s.chunks >= chunks_wanted) {
        return single;
    }
    // Reduced dims that are consecutive, taken as one, cut finer: a whole
    // `[8, 512, 512]` reduces in 512 chunks where its first dim gives 8.
    let consecutive = reduced.windows(2).all(|w| w[1] == w[0] + 1);
    let merged = (consecutive && reduced.len() > 1)
        .then(|| cut(r))
        .flatten()
        .map(|chunks| Split {
            dim: first,
            merge: reduced.len(),
            chunks,
        });
    match (single, merged) {
        (Some(s), Some(m)) if m.chunks <= s.chunks => Some(s),
        (s, None) => s,
        (_, m) => m,
    }
}

/// The dtype partials accumulate in for a result of `dtype`.
fn partial_dtype(op: ReduceOp, dtype: DType) -> Option<DType> {
    match op {
        ReduceOp::Amax | ReduceOp::Amin | ReduceOp::Any | ReduceOp::All => None,
        ReduceOp::Sum | ReduceOp::Mean if dtype == DType::Float64 => Some(DType::Float64),
        ReduceOp::Sum | ReduceOp::Mean if dtype.is_float() => Some(DType::Float32),
        ReduceOp::Sum | ReduceOp::Mean => Some(dtype),
    }
}

/// Splits the reductions that would leave `device` idle; a device of no units
/// splits none.
pub fn run(g: &mut Graph, device: Device) -> Result<Stats, Error> {
    let _span = tracing::info_span!("split").entered();
    if device.units == 0 {
        return Ok(Stats::default());
    }
    let order = super::topo_order(g, "split")?;
    let mut changed = 0;
    for id in order {
        let Some(split) = plan(g, id, device) else {
            continue;
        };
        let Some(node) = g.node(id).cloned() else {
            continue;
        };
        let Op::Reduce {
            op, dims, keepdim, ..
        } = node.op
        else {
            continue;
        };
        let (Some(input), Some(out)) = (
            node.args.first().and_then(Arg::value),
            node.outputs.first().and_then(|m| m.fixed()),
        ) else {
            continue;
        };
        let Some(shape) = g.fixed_meta(input).map(|m| m.shape.clone()) else {
            continue;
        };
        let Ok(reduced) = wrap_dim_set(dims.as_deref(), shape.len()) else {
            continue;
        };
        let (d, merge) = (split.dim, split.merge);
        let size: i64 = shape[d..d + merge].iter().product();
        let mut cut = shape[..d].to_vec();
        cut.extend([split.chunks, size / split.chunks]);
        cut.extend(&shape[d + merge..]);
        let line = node.line;
        let x = emit(
            g,
            "split",
            &node.name,
            Op::Reshape {
                shape: crate::graph::shape::sizes(&cut),
                view: false,
            },
            vec![Arg::Value(input)],
            line,
        )?;
        // The cut dims' chunks stay; their rest and every other reduced dim go.
        let mut partial_dims: Vec<i64> = reduced
            .iter()
            .filter(|&&e| e < d || e >= d + merge)
            .map(|&e| {
                if e < d {
                    e as i64
                } else {
                    (e + 2 - merge) as i64
                }
            })
            .collect();
        partial_dims.push(d as i64 + 1);
        partial_dims.sort_unstable();
        let partial = emit(
            g,
            "split",
            &node.name,
            Op::Reduce {
                op,
                dims: Some(partial_dims),
                keepdim,
                dtype: partial_dtype(op, out.dtype),
            },
            vec![Arg::Value(x)],
            line,
        )?;
        let chunks_at = if keepdim {
            d
        } else {
            (0..d).filter(|e| !reduced.contains(e)).count()
        };
        let mut result = emit(
            g,
            "split",
            &node.name,
            Op::Reduce {
                op,
                dims: Some(vec![chunks_at as i64]),
                keepdim: false,
                dtype: None,
            },
            vec![Arg::Value(partial)],
            line,
        )?;
        if g.fixed_meta(result).map(|m| m.dtype) != Some(out.dtype) {
            result = emit(
                g,
                "split",
                &node.name,
                Op::Cast { dtype: out.dtype },
                vec![Arg::Value(result)],
                line,
            )?;
        }
        // A merged cut kept one dim where the node kept `merge`.
        if g.fixed_meta(result).map(|m| m.shape) != Some(out.shape.clone()) {
            result = emit(
                g,
                "split",
                &node.name,
                Op::Reshape {
                    shape: crate::graph::shape::sizes(&out.shape),
                    view: false,
                },
                vec![Arg::Value(result)],
                line,
            )?;
        }
        replace_node(g, id, &[result]);
        changed += 1;
    }
    Ok(Stats { changed })
}
