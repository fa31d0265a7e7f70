//! `sort`, `argsort` and `topk` along a dim of static size, as Kiln's sort of the dim
//! moved last: `sort_runs` orders each run of [`RUN`] elements of a row, and each
//! `merge_runs` merges pairs of runs into one until one holds the row (`Op::SortRuns`,
//! `Op::MergeRuns`). The order is PyTorch's stable one: larger first for a descending
//! sort, NaN the largest, -0.0 equal to 0.0, equal elements in their order. `topk` is the
//! sort's first k; the values are gathered at the positions.

use super::{ints, invalid, t, wrap, Args, Raw, SigError, Steps};

/// The elements of a run `sort_runs` orders on its own (a program's registers on a
/// Triton device). A row of at most this many is one run, and no merge.
const RUN: i64 = 256;
/// The longest dim sorted: a vocabulary's logits (`topk` for sampling) and more.
const MAX_SORTED: i64 = 1 << 24;

/// The expansion of `op`: (values, indices), or indices alone for `argsort`.
pub(super) fn expand(
    s: &mut Steps<'_>,
    op: &str,
    args: &Args<'_>,
) -> Result<Option<Vec<String>>, SigError> {
    let (x, m) = args.tensor("self")?;
    let dim = args.int_or("dim", -1)?;
    let rank = m.rank();
    let d = if rank == 0 {
        0
    } else {
        wrap(dim, rank).map_err(invalid)?
    };
    let n = m.shape.get(d).copied().unwrap_or(1);
    let (descending, k) = match op {
        "topk" => {
            let k = args.int("k").ok_or_else(|| invalid("needs `k`".into()))?;
            if !(0..=n).contains(&k) {
                return Err(invalid(format!("k = {k} for a dim of {n}")));
            }
            (!matches!(args.get("largest"), Some(Raw::Bool(false))), k)
        }
        _ => (matches!(args.get("descending"), Some(Raw::Bool(true))), n),
    };
    let rows: i64 = m.shape.iter().product::<i64>() / n.max(1);
    if n > MAX_SORTED {
        return Err(invalid(format!(
            "{rows} row(s) of {n}: Kiln sorts a dim of at most {MAX_SORTED}"
        )));
    }
    if rank == 0 {
        let zero = s.op(
            "zeros_like",
            vec![("self", t(&x)), ("dtype", Raw::Str("int64".into()))],
        );
        return Ok(Some(if op == "argsort" {
            vec![zero]
        } else {
            vec![x, zero]
        }));
    }
    // The sorted dim last.
    let mut perm: Vec<usize> = (0..rank).filter(|&i| i != d).collect();
    perm.push(d);
    let last = s.permute(&x, &perm);
    let lead: Vec<i64> = perm[..rank - 1].iter().map(|&i| m.shape[i]).collect();
    let index = positions(s, &last, &lead, n, k, descending);
    let values = s.op(
        "gather",
        vec![
            ("self", t(&last)),
            ("dim", Raw::Int(rank as i64 - 1)),
            ("index", t(&index)),
        ],
    );
    let mut back = vec![0usize; rank];
    for (i, &p) in perm.iter().enumerate() {
        back[p] = i;
    }
    let index = s.permute(&index, &back);
    let values = s.permute(&values, &back);
    Ok(Some(if op == "argsort" {
        vec![index]
    } else {
        vec![values, index]
    }))
}

/// The indices (int64, `[..., k]`) of the elements of ranks 0..k of each row of `x`
/// (`[lead.., n]`): Kiln's sort, runs of [`RUN`] elements each sorted (`sort_runs`),
/// then merged in pairs (`merge_runs`) until one run holds the row.
fn positions(s: &mut Steps<'_>, x: &str, lead: &[i64], n: i64, k: i64, descending: bool) -> String {
    let mut shape = lead.to_vec();
    shape.push(k);
    if n <= 1 || k == 0 {
        return s.op(
            "zeros",
            vec![("size", ints(&shape)), ("dtype", Raw::Str("int64".into()))],
        );
    }
    let mut run = RUN.min((n as u64).next_power_of_two() as i64);
    // The rows flattened into one dim: Kiln's sort takes rows of at most three.
    let rows: i64 = lead.iter().product();
    let flat = s.reshape(x, &[rows, n]);
    let x = flat.as_str();
    let mut sorted = s.op(
        "sort_runs",
        vec![
            ("self", t(x)),
            ("descending", Raw::Bool(descending)),
            ("run", Raw::Int(run)),
        ],
    );
    while run < n {
        let attrs = vec![
            ("self", t(x)),
            ("runs", t(&sorted)),
            ("descending", Raw::Bool(descending)),
            ("run", Raw::Int(run)),
        ];
        sorted = s.op("merge_runs", attrs);
        run *= 2;
    }
    if k < n {
        sorted = s.op(
            "slice",
            vec![
                ("self", t(&sorted)),
                ("dim", Raw::Int(-1)),
                ("start", Raw::Int(0)),
                ("end", Raw::Int(k)),
            ],
        );
    }
    s.reshape(&sorted, &shape)
}
