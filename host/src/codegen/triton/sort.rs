//! Kiln's sort on a Triton device, in two template kernels:
//!
//! - `sort_runs`: a program per run of `RUN` elements of a row (a power of two) sorts
//!   it in registers by a bitonic network over (key, position) pairs, and stores the
//!   positions in that order;
//! - `merge_runs`: merges each pair of neighbouring runs into one of twice the run (a
//!   sort of n takes log2(n / RUN) of them): a program per block of a run finds each
//!   element's place in the pair, its place in its run plus how many of the other
//!   run's elements come before it, by binary search over that run. (Merging eight
//!   runs at once, in fewer launches, measured twice as slow on an H200.)
//!
//! Both compare one integer key per element, the order PyTorch sorts in: a float's
//! bits made monotone (negative numbers' magnitude bits flipped), -0.0 taken as 0.0
//! and every NaN as one key above +inf; an integer as itself; all of it inverted
//! (`~key`) for a descending sort. Equal keys keep their positions' order (stable).
//! Rows are the dims before the last (at most three of them); any strides.

use std::collections::HashMap;
use std::fmt::Write;

use kiln_plugin_api::Grid;

use super::attention::{Attention, AttentionKernel, TemplateLaunch};
use super::expr::pointer_type;
use super::Error;
use crate::codegen::heuristics::LaunchHeuristics;
use crate::codegen::namer::Namer;
use crate::graph::dtype::DType;
use crate::schedule::index::Size;
use crate::schedule::ir::{ExternOp, Program, Step, View};

/// Elements of a row `merge_runs` places per program (at most a run).
const MERGE_BLOCK: i64 = 256;

/// The integer parameters of `sort_runs`: the row dims' sizes and the sorted dim's,
/// the operand's strides, the result's row stride.
const SORT_PARAMS: [&str; 9] = ["a0", "a1", "a2", "n", "x0", "x1", "x2", "xs", "o_row"];
/// `merge_runs`'s: as `sort_runs`', and the runs' row stride.
const MERGE_PARAMS: [&str; 10] = [
    "a0", "a1", "a2", "n", "x0", "x1", "x2", "xs", "r_row", "o_row",
];

/// The launches of every sort step of `program`, their kernels added to `templates`.
/// A step the kernels do not take (symbolic sizes, a result that is not dense rows) is
/// an error naming it: no library call stands in for Kiln's sort.
pub fn write(
    program: &Program,
    heuristics: &dyn LaunchHeuristics,
    namer: &mut Namer,
    templates: &mut Attention,
) -> Result<HashMap<usize, TemplateLaunch>, Error> {
    let mut launches = HashMap::new();
    let mut by_key: HashMap<(bool, DType, bool, i64), String> = HashMap::new();
    for (i, step) in program.steps.iter().enumerate() {
        let Step::Extern(e) = step else { continue };
        let (merge, descending, run) = match e.op {
            ExternOp::SortRuns { descending, run } => (false, descending, run),
            ExternOp::MergeRuns { descending, run } => (true, descending, run),
            _ => continue,
        };
        let unsupported = |what: String| Error::Unsupported {
            kernel: e.op.name().into(),
            what,
        };
        let Some(x) = e.args.first() else {
            return Err(unsupported("no operand".into()));
        };
        let out = program.buffer(e.out);
        let rank = x.shape.len();
        let fixed = |v: &[Size]| v.iter().map(Size::as_const).collect::<Option<Vec<i64>>>();
        let (Some(shape), Some(strides)) = (fixed(&x.shape), fixed(&x.strides)) else {
            return Err(unsupported(format!(
                "Kiln's sort takes static sizes, found {:?}",
                x.shape
            )));
        };
        // The result (and a merge's runs) are dense rows, as the wrappers allocate them.
        let dense = |v: &View| v.strides.last().is_none_or(|s| *s == 1) && is_row_major(v);
        let out_view = View {
            buf: e.out,
            shape: out.shape.clone(),
            strides: out.strides.clone(),
            offset: Size::from(0),
        };
        if !(1..=4).contains(&rank)
            || out.shape != x.shape
            || run < 1
            || run.count_ones() != 1
            || !dense(&out_view)
        {
            return Err(unsupported(format!(
                "a sort of {:?} in runs of {run} into a result of strides {:?}: the kernels take 1 to \
                 4 dims, runs of a power of two, and a dense result",
                x.shape, out.strides
            )));
        }
        let n = shape[rank - 1];
        let row_stride = |v: &[Size]| -> i64 {
            v.get(rank.wrapping_sub(2))
                .and_then(Size::as_const)
                .unwrap_or(n)
        };
        // The row dims, padded in front to three.
        let pad = 4 - rank;
        let lead = |v: &[i64], fill: i64| -> Vec<i64> {
            std::iter::repeat_n(fill, pad)
                .chain(v[..rank - 1].iter().copied())
                .collect()
        };
        let mut scalars = lead(&shape, 1);
        scalars.push(n);
        scalars.extend(lead(&strides, 0));
        scalars.push(strides[rank - 1]);
        let mut pointers = vec![x.clone(), out_view];
        if merge {
            let Some(runs) = e.args.get(1).filter(|r| r.shape == x.shape && dense(r)) else {
                return Err(unsupported(format!(
                    "a merge of {:?} without dense runs of its shape",
                    x.shape
                )));
            };
            scalars.push(row_stride(&runs.strides));
            pointers.insert(1, runs.clone());
        }
        scalars.push(row_stride(&out.strides));
        let dtype = program.buffer(x.buf).dtype;
        let rows: i64 = shape[..rank - 1].iter().product();
        let per_row = if merge { run.min(MERGE_BLOCK) } else { run };
        let constants = vec![
            ("DESC", i64::from(descending)),
            ("RUN", run),
            ("LOG", i64::from(run.trailing_zeros())),
            ("BLOCK", per_row),
        ];
        let warps = super::index_copy::warps(heuristics, e.op.name(), per_row, dtype)?;
        let params: &[&str] = if merge { &MERGE_PARAMS } else { &SORT_PARAMS };
        let kernel = templates.template(
            &mut by_key,
            (merge, dtype, descending, run),
            namer,
            if merge {
                "kiln_merge_runs"
            } else {
                "kiln_sort_runs"
            },
            |out, name| kernel_text(out, name, dtype, merge, params),
            |name| {
                let mut signature = vec![("X".to_string(), pointer_type(dtype).to_string())];
                if merge {
                    signature.push(("R".into(), pointer_type(DType::Int64).into()));
                }
                signature.push(("OUT".into(), pointer_type(DType::Int64).into()));
                signature.extend(params.iter().map(|p| (p.to_string(), "i64".to_string())));
                Ok(AttentionKernel {
                    name,
                    signature,
                    constants: constants.clone(),
                    aligned: Vec::new(),
                    num_warps: warps,
                    num_stages: 1,
                })
            },
        )?;
        let grid = heuristics
            .adjust_grid(Grid {
                x: rows.max(1) as u64,
                y: ((n + per_row - 1) / per_row).max(1) as u64,
                z: 1,
            })
            .map_err(|source| Error::Heuristics {
                kernel: e.op.name().into(),
                source,
            })?;
        launches.insert(
            i,
            TemplateLaunch {
                kernel,
                pointers,
                scalars,
                constants,
                num_warps: warps,
                grid,
                sizes: Vec::new(),
                dynamic: None,
            },
        );
    }
    Ok(launches)
}

/// Whether `v`'s rows lie one after another: each dim's stride the next one's times its
/// size, but for dims of one element.
fn is_row_major(v: &View) -> bool {
    let dims: Vec<(i64, i64)> = v
        .shape
        .iter()
        .zip(&v.strides)
        .filter_map(|(d, s)| Some((d.as_const()?, s.as_const()?)))
        .collect();
    dims.len() == v.shape.len()
        && dims
            .windows(2)
            .all(|w| w[0].0 == 1 || w[0].1 == w[1].1 * w[1].0)
}

/// The key helper's body for elements of `dtype` (`x` loaded, `DESC` the order): an
/// integer of the same order as the sort's, and its type's largest value.
fn key_body(dtype: DType) -> (&'static str, &'static str) {
    match dtype {
        DType::Float64 => (
            "    b = x.to(tl.int64, bitcast=True)\n    \
             k = b ^ ((b >> 63) & 0x7FFFFFFFFFFFFFFF)\n    \
             k = tl.where(x == 0, 0, k)\n    \
             k = tl.where(x != x, 0x7FF8000000000000, k)\n",
            "0x7FFFFFFFFFFFFFFF",
        ),
        d if d.is_float() => (
            "    f = x.to(tl.float32)\n    \
             b = f.to(tl.int32, bitcast=True)\n    \
             k = b ^ ((b >> 31) & 0x7FFFFFFF)\n    \
             k = tl.where(f == 0, 0, k)\n    \
             k = tl.where(f != f, 0x7FC00000, k)\n",
            "0x7FFFFFFF",
        ),
        DType::Int64 => ("    k = x\n", "0x7FFFFFFFFFFFFFFF"),
        _ => ("    k = x.to(tl.int32)\n", "0x7FFFFFFF"),
    }
}

/// The kernel's text and its helpers (named after it): the key, the bitonic network
/// (a run as a hypercube of `LOG` dims of two, each step a compare-and-swap with the
/// partner across one of them, as `tl.sort` does), and `sort_runs` or `merge_runs`.
fn kernel_text(
    out: &mut String,
    name: &str,
    dtype: DType,
    merge: bool,
    params: &[&str],
) -> std::fmt::Result {
    let (key, largest) = key_body(dtype);
    write!(
        out,
        "\n\n@triton.jit\ndef {name}_key(x, DESC: tl.constexpr):\n{key}    \
         if DESC:\n        k = ~k\n    return k\n"
    )?;
    if !merge {
        write!(
            out,
            r#"

@triton.jit
def {name}_bit(LOG: tl.constexpr, j: tl.constexpr):
    return tl.reshape(tl.arange(0, 2), [1] * (LOG - j - 1) + [2] + [1] * j)


@triton.jit
def {name}_swap(k, v, flip, LOG: tl.constexpr, j: tl.constexpr):
    # Each element against its partner across dim j of the hypercube: the pair in
    # order of (key, position), flipped where `flip` says (a descending half).
    pk = k ^ tl.xor_sum(k, LOG - 1 - j, True)
    pv = v ^ tl.xor_sum(v, LOG - 1 - j, True)
    after = (k > pk) | ((k == pk) & (v > pv))
    swap = after != (flip ^ {name}_bit(LOG, j)).to(tl.int1)
    return tl.where(swap, pk, k), tl.where(swap, pv, v)


@triton.jit
def {name}_merge(k, v, LOG: tl.constexpr, stage: tl.constexpr):
    if stage < LOG:
        flip = {name}_bit(LOG, stage)
    else:
        flip = 0
    for i in tl.static_range(stage):
        k, v = {name}_swap(k, v, flip, LOG, stage - 1 - i)
    return k, v


@triton.jit
def {name}_network(k, v, LOG: tl.constexpr):
    hk = tl.reshape(k, [2] * LOG)
    hv = tl.reshape(v, [2] * LOG)
    for stage in tl.static_range(1, LOG + 1):
        hk, hv = {name}_merge(hk, hv, LOG, stage)
    return tl.reshape(hk, k.shape), tl.reshape(hv, v.shape)
"#
        )?;
    }
    let pointers = if merge { "X, R, OUT" } else { "X, OUT" };
    writeln!(out, "\n\n@triton.jit")?;
    writeln!(
        out,
        "def {name}({pointers}, {}, DESC: tl.constexpr, RUN: tl.constexpr, LOG: tl.constexpr, \
         BLOCK: tl.constexpr):",
        params.join(", ")
    )?;
    let head = r#"    kiln_dependent_wait()
    lane = tl.arange(0, BLOCK)
    for row in range(tl.program_id(0), a0 * a1 * a2, tl.num_programs(0)):
        i2 = row % a2
        i1 = (row // a2) % a1
        i0 = row // (a2 * a1)
        base = i0 * x0 + i1 * x1 + i2 * x2
"#;
    out.push_str(head);
    let body = if merge {
        format!(
            r#"        for b in range(tl.program_id(1), tl.cdiv(n, BLOCK), tl.num_programs(1)):
            # Slots b * BLOCK.. of the row's runs, all in run q; its pair's other run,
            # by binary search, says how many of its elements come before each: a
            # smaller key, or an equal one at an earlier position (all of the pair's
            # first run, none of its second).
            s = b * BLOCK + lane
            ok = s < n
            pos = tl.load(R + row * r_row + s, mask=ok, other=0)
            k = {name}_key(tl.load(X + base + pos * xs, mask=ok, other=0), DESC)
            q = (b * BLOCK) // RUN
            second = q % 2
            start = (q ^ 1) * RUN
            lo = tl.zeros([BLOCK], dtype=tl.int64)
            hi = lo + tl.minimum(tl.maximum(n - start, 0), RUN)
            for _ in tl.static_range(LOG + 1):
                live = ok & (lo < hi)
                mid = (lo + hi) // 2
                mp = tl.load(R + row * r_row + start + mid, mask=live, other=0)
                mk = {name}_key(tl.load(X + base + mp * xs, mask=live, other=0), DESC)
                before = (mk < k) | ((mk == k) & (second == 1))
                lo = tl.where(live & before, mid + 1, lo)
                hi = tl.where(live & ~before, mid, hi)
            place = (q - second) * RUN + (s - q * RUN) + lo
            tl.store(OUT + row * o_row + place, pos, mask=ok)
"#
        )
    } else {
        format!(
            r#"        for q in range(tl.program_id(1), tl.cdiv(n, RUN), tl.num_programs(1)):
            at = q * RUN + lane
            ok = at < n
            x = tl.load(X + base + at.to(tl.int64) * xs, mask=ok, other=0)
            # Past the row's end: the largest key at a later position, so last.
            k = tl.where(ok, {name}_key(x, DESC), {largest})
            v = at
            if LOG > 0:
                k, v = {name}_network(k, v, LOG)
            tl.store(OUT + row * o_row + at, v.to(tl.int64), mask=ok)
"#
        )
    };
    out.push_str(&body);
    Ok(())
}
