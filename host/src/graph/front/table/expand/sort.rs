//! `sort`, `argsort` and `topk` along a dim of static size, by rank: each element's
//! rank is the number of elements that come before it (larger ones for a descending
//! order, smaller ones for an ascending one, NaN counted the largest as PyTorch counts
//! it, and among equal elements the earlier ones), and output position r takes the
//! element of rank r. Equal elements keep their order (a stable sort). The comparisons
//! are pairwise, so a dim is at most [`MAX_SORTED`] long.

use super::{ints, invalid, t, wrap, Args, Raw, SigError, Steps};
use crate::graph::DType;

/// The longest dim sorted (`n * n` comparisons per row, computed in a reduction kernel
/// without an `n x n` buffer): a mixture of experts' (token, expert) pairs of a prefill of
/// 4096 tokens by 8 experts.
const MAX_SORTED: i64 = 1 << 15;
/// The most comparisons of a whole call.
const MAX_COMPARISONS: i64 = 1 << 31;

/// How a sort orders: `descending`, and whether its elements may be NaN (`float`).
#[derive(Clone, Copy)]
struct Order {
    descending: bool,
    float: bool,
}

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
    if n > MAX_SORTED || rows.saturating_mul(n).saturating_mul(n) > MAX_COMPARISONS {
        return Err(invalid(format!(
            "{rows} row(s) of {n}: Kiln sorts by comparing every pair, at most {MAX_SORTED} long and \
             {MAX_COMPARISONS} comparisons in all"
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
    let order = Order {
        descending,
        float: m.dtype.is_float(),
    };
    let index = positions(s, &last, &lead, n, k, order);
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
/// (`[lead.., n]`); `float`: `x` may hold NaN (an integer or bool `x` needs no NaN test).
fn positions(s: &mut Steps<'_>, x: &str, lead: &[i64], n: i64, k: i64, order: Order) -> String {
    let Order { descending, float } = order;
    if n == 0 || k == 0 {
        let mut shape = lead.to_vec();
        shape.push(k);
        return s.op(
            "zeros",
            vec![("size", ints(&shape)), ("dtype", Raw::Str("int64".into()))],
        );
    }
    let a = s.op("unsqueeze", vec![("self", t(x)), ("dim", Raw::Int(-1))]); // [.., n(i), 1]
    let b = s.op("unsqueeze", vec![("self", t(x)), ("dim", Raw::Int(-2))]); // [.., 1, n(j)]
    let beyond = s.bin(if descending { "gt" } else { "lt" }, t(&b), t(&a));
    let eq = s.bin("eq", t(&b), t(&a));
    // j comes before i: beyond it in the order, or NaN where i is a number (NaN is the
    // largest: first when descending), or equal (both NaN) and earlier.
    let (ahead, tie) = if float {
        let (na, nb) = (s.bin("ne", t(&a), t(&a)), s.bin("ne", t(&b), t(&b)));
        let nan_first = if descending {
            let a_num = s.op("logical_not", vec![("self", t(&na))]);
            s.bin("bitwise_and", t(&nb), t(&a_num))
        } else {
            let b_num = s.op("logical_not", vec![("self", t(&nb))]);
            s.bin("bitwise_and", t(&na), t(&b_num))
        };
        let both_nan = s.bin("bitwise_and", t(&na), t(&nb));
        (
            s.bin("bitwise_or", t(&beyond), t(&nan_first)),
            s.bin("bitwise_or", t(&eq), t(&both_nan)),
        )
    } else {
        (beyond, eq)
    };
    // j < i, from the positions along each side (no n x n constant). Ranks count in
    // int32: a dim is at most MAX_SORTED long.
    let i_at = s.konst(vec![n, 1], DType::Int32, (0..n).map(|i| i as f64).collect());
    let j_at = s.konst(vec![1, n], DType::Int32, (0..n).map(|j| j as f64).collect());
    let earlier = s.bin("lt", t(&j_at), t(&i_at));
    let tie_first = s.bin("bitwise_and", t(&tie), t(&earlier));
    let before = s.bin("bitwise_or", t(&ahead), t(&tie_first));
    let rank = s.op(
        "sum",
        vec![
            ("self", t(&before)),
            ("dim", ints(&[-1])),
            ("dtype", Raw::Str("int32".into())),
        ],
    ); // [.., n]
       // Position r of a row takes the i of rank r: each i written at its rank (the ranks
       // of a row are a permutation), the rows flattened into one scatter.
    let rows: i64 = lead.iter().product();
    let row_at = s.op(
        "arange",
        vec![
            ("start", Raw::Int(0)),
            ("end", Raw::Int(rows * n)),
            ("step", Raw::Int(n)),
            ("dtype", Raw::Str("int64".into())),
        ],
    );
    let row_at = s.reshape(&row_at, &[rows, 1]);
    let rank = s.op(
        "_to_copy",
        vec![("self", t(&rank)), ("dtype", Raw::Str("int64".into()))],
    );
    let rank = s.reshape(&rank, &[rows, n]);
    let to = s.bin("add", t(&rank), t(&row_at));
    let to = s.reshape(&to, &[rows * n]);
    let at = s.konst(vec![1, n], DType::Int64, (0..n).map(|i| i as f64).collect());
    let from = s.op("expand", vec![("self", t(&at)), ("size", ints(&[rows, n]))]);
    let from = s.reshape(&from, &[rows * n]);
    let unset = s.op(
        "zeros",
        vec![
            ("size", ints(&[rows * n])),
            ("dtype", Raw::Str("int64".into())),
        ],
    );
    let order = s.op(
        "index_copy",
        vec![
            ("self", t(&unset)),
            ("dim", Raw::Int(0)),
            ("index", t(&to)),
            ("source", t(&from)),
        ],
    );
    let mut shape = lead.to_vec();
    shape.push(n);
    let order = s.reshape(&order, &shape);
    if k == n {
        return order;
    }
    s.op(
        "slice",
        vec![
            ("self", t(&order)),
            ("dim", Raw::Int(-1)),
            ("start", Raw::Int(0)),
            ("end", Raw::Int(k)),
        ],
    )
}
