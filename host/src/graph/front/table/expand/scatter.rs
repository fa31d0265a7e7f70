//! `scatter` (of a tensor or a value), `scatter_add` and `index_add`, as PyTorch defines
//! them. `index_add` is an accumulating `index_put` along its dim. The scatters match each
//! index against each place along the scattered dim (a bounded one-hot): `scatter_add`
//! adds every write, `scatter` keeps the last write to a place (PyTorch leaves the choice
//! among several writes open). Kiln takes an index of `self`'s sizes outside the
//! scattered dim (where PyTorch also takes a smaller one).

use super::more::index_put;
use super::{ints, invalid, t, wrap, Args, Raw, SigError, Steps};
use crate::graph::ir::FixedMeta;
use crate::graph::DType;

/// The most elements of a scatter's one-hot match.
const MAX_MATCH: i64 = 1 << 24;

/// The expansion of `op`, or `None` where this module does not take it.
pub(super) fn expand(
    s: &mut Steps<'_>,
    op: &str,
    args: &Args<'_>,
) -> Result<Option<Vec<String>>, SigError> {
    match op {
        "index_add" => index_add(s, args).map(|r| Some(vec![r])),
        "scatter" | "scatter_add" => scatter(s, op, args).map(|r| Some(vec![r])),
        _ => Ok(None),
    }
}

/// `index_add(self, dim, index, source, alpha)`: `self[.., index[i], ..] += alpha *
/// source[.., i, ..]`, every write added.
fn index_add(s: &mut Steps<'_>, args: &Args<'_>) -> Result<String, SigError> {
    let (x, m) = args.tensor("self")?;
    let (index, im) = args.tensor("index")?;
    let (source, sm) = args.tensor("source")?;
    let d = wrap(args.int_or("dim", 0)?, m.rank()).map_err(invalid)?;
    let k = im.shape.iter().product::<i64>();
    if im.rank() > 1 || !matches!(im.dtype, DType::Int64 | DType::Int32) {
        return Err(invalid(format!(
            "`index` must be an integer vector, found {}{:?}",
            im.dtype, im.shape
        )));
    }
    let mut want = m.shape.clone();
    if let Some(w) = want.get_mut(d) {
        *w = k;
    }
    if m.rank() > 0 && sm.shape != want {
        return Err(invalid(format!(
            "`source` must be {want:?} (self's shape, {k} along dim {d}), found {:?}",
            sm.shape
        )));
    }
    let source = match args.get("alpha") {
        Some(a @ (Raw::Int(_) | Raw::Float(_))) if !matches!(a, Raw::Int(1)) => {
            s.bin("mul", t(&source), a.clone())
        }
        _ => source,
    };
    let index = if im.rank() == 0 {
        s.reshape(&index, &[1])
    } else {
        index
    };
    let entries = [(d, index, FixedMeta::contiguous(vec![k], im.dtype))];
    index_put(s, &x, &m, &source, &entries, true).map_err(invalid)
}

/// `scatter`/`scatter_add(self, dim, index, src or value)`.
fn scatter(s: &mut Steps<'_>, op: &str, args: &Args<'_>) -> Result<String, SigError> {
    let (x, m) = args.tensor("self")?;
    let (index, im) = args.tensor("index")?;
    if m.rank() == 0 {
        return Err(invalid("a scatter into a 0-d tensor".into()));
    }
    let rank = m.rank();
    let d = wrap(args.int_or("dim", 0)?, rank).map_err(invalid)?;
    if im.dtype != DType::Int64 {
        return Err(invalid(format!(
            "`index` must be int64, found {}",
            im.dtype
        )));
    }
    let (shape, ishape) = (m.shape.clone(), im.shape.clone());
    if ishape.len() != shape.len() || (0..rank).any(|i| i != d && ishape[i] != shape[i]) {
        return Err(invalid(format!(
            "an index of {:?} into {:?} along dim {d}: Kiln takes an index of self's sizes outside the scattered dim",
            im.shape, m.shape
        )));
    }
    let (n, k) = (shape[d], ishape[d]);
    let rows: i64 = shape.iter().product::<i64>() / n.max(1);
    if rows.saturating_mul(n).saturating_mul(k) > MAX_MATCH {
        return Err(invalid(format!(
            "{rows} row(s) of {k} indices into {n} places: above the {MAX_MATCH} elements of Kiln's one-hot scatter"
        )));
    }
    let src = written_values(s, args, &index, &ishape, m.dtype)?;
    // The scattered dim last: rows [R, k] of indices and values against places [R, n].
    let mut perm: Vec<usize> = (0..rank).filter(|&i| i != d).collect();
    perm.push(d);
    let (x3, idx3, src3) = (
        s.permute(&x, &perm),
        s.permute(&index, &perm),
        s.permute(&src, &perm),
    );
    let idx4 = s.op("unsqueeze", vec![("self", t(&idx3)), ("dim", Raw::Int(-1))]); // [R, k, 1]
    let places = s.konst(vec![1, n], DType::Int64, (0..n).map(|p| p as f64).collect());
    let hit = s.bin("eq", t(&idx4), t(&places)); // [R, k, n]
    let src4 = s.op("unsqueeze", vec![("self", t(&src3)), ("dim", Raw::Int(-1))]); // [R, k, 1]
    let zero = if m.dtype.is_float() {
        Raw::Float(0.0)
    } else {
        Raw::Int(0)
    };
    let out3 = if op == "scatter_add" {
        let w = s.op(
            "where",
            vec![
                ("condition", t(&hit)),
                ("self", t(&src4)),
                ("other", zero.clone()),
            ],
        );
        let added = s.op(
            "sum",
            vec![
                ("self", t(&w)),
                ("dim", ints(&[-2])),
                ("keepdim", Raw::Bool(false)),
            ],
        );
        s.bin("add", t(&x3), t(&added))
    } else {
        // The last write to each place: the largest j + 1 that hits it (0 for none).
        let order = s.konst(
            vec![k, 1],
            DType::Int64,
            (1..=k).map(|j| j as f64).collect(),
        );
        let ranked = s.op(
            "where",
            vec![
                ("condition", t(&hit)),
                ("self", t(&order)),
                ("other", Raw::Int(0)),
            ],
        );
        let last = s.op(
            "amax",
            vec![
                ("self", t(&ranked)),
                ("dim", ints(&[-2])),
                ("keepdim", Raw::Bool(true)),
            ],
        );
        let chosen = s.bin("eq", t(&ranked), t(&last));
        let pick = s.bin("bitwise_and", t(&chosen), t(&hit));
        let w = s.op(
            "where",
            vec![("condition", t(&pick)), ("self", t(&src4)), ("other", zero)],
        );
        let value = s.op(
            "sum",
            vec![
                ("self", t(&w)),
                ("dim", ints(&[-2])),
                ("keepdim", Raw::Bool(false)),
            ],
        );
        let any = s.op(
            "amax",
            vec![
                ("self", t(&ranked)),
                ("dim", ints(&[-2])),
                ("keepdim", Raw::Bool(false)),
            ],
        );
        let written = s.bin("gt", t(&any), Raw::Int(0));
        s.op(
            "where",
            vec![
                ("condition", t(&written)),
                ("self", t(&value)),
                ("other", t(&x3)),
            ],
        )
    };
    let mut back = vec![0usize; rank];
    for (i, &p) in perm.iter().enumerate() {
        back[p] = i;
    }
    Ok(s.permute(&out3, &back))
}

/// The values a scatter writes (its `src`, cut to the index's sizes, or its `value`), of
/// the index's shape and `self`'s dtype.
fn written_values(
    s: &mut Steps<'_>,
    args: &Args<'_>,
    index: &str,
    ishape: &[i64],
    dtype: DType,
) -> Result<String, SigError> {
    Ok(match args.get("src").or_else(|| args.get("value")) {
        Some(Raw::Str(name)) => {
            let sm = args.meta(name)?;
            if sm.rank() != ishape.len() {
                return Err(invalid(format!(
                    "`src` of {:?} for an index of {:?}: they need as many dims",
                    sm.shape, ishape
                )));
            }
            let mut cur = name.clone();
            for (i, (&have, &need)) in sm.shape.iter().zip(ishape).enumerate() {
                if have < need {
                    return Err(invalid(format!(
                        "`src` of {:?} is smaller than the index {:?}",
                        sm.shape, ishape
                    )));
                }
                if have > need {
                    cur = s.op(
                        "slice",
                        vec![
                            ("self", t(&cur)),
                            ("dim", Raw::Int(i as i64)),
                            ("start", Raw::Int(0)),
                            ("end", Raw::Int(need)),
                        ],
                    );
                }
            }
            s.op(
                "_to_copy",
                vec![("self", t(&cur)), ("dtype", Raw::Str(dtype.name().into()))],
            )
        }
        Some(v @ (Raw::Int(_) | Raw::Float(_) | Raw::Bool(_))) => {
            let z = s.op(
                "zeros_like",
                vec![("self", t(index)), ("dtype", Raw::Str(dtype.name().into()))],
            );
            s.bin("add", t(&z), v.clone())
        }
        _ => {
            return Err(invalid(
                "needs `src` (a tensor) or `value` (a number)".into(),
            ))
        }
    })
}
