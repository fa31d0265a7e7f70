//! The ops a mixture-of-experts layer routes its tokens with, as PyTorch defines them:
//! `histc` (the tokens each expert takes) and `_grouped_mm` (each expert's product over
//! its rows), with transformers' `grouped_mm_fallback`, the same product by another name.
//!
//! A 2-D input by 3-D weights (the forward product) is Kiln's op, `Op::GroupedMm`: a
//! Triton device's kernel, or the passes' reduction over K (`passes/decompose/model.rs`).
//! A 3-D input by 2-D weights (columns grouped) is that op on the transposed operands; a
//! 2-D by 2-D product with K grouped is a batched product of the input masked to each
//! group's slice of K; 3-D by 3-D is `bmm`.

use super::extra::pick;
use super::{ints, invalid, t, Args, Raw, SigError, Steps};
use crate::graph::ir::FixedMeta;
use crate::graph::DType;

/// An expansion's outputs, `None` where the op is not one of this module's.
type Expanded = Result<Option<Vec<String>>, SigError>;

/// The most elements a `histc` compares with its bins (`elements * bins`).
const MAX_HISTC_COMPARISONS: i64 = 1 << 26;

/// The expansion of `op`, or `None` where this module does not take it.
pub(super) fn expand(s: &mut Steps<'_>, op: &str, args: &Args<'_>) -> Expanded {
    match op {
        "histc" => histc(s, args).map(|r| Some(vec![r])),
        "_grouped_mm" => Ok(grouped_mm(s, args, ("self", "mat2"))?.map(|r| vec![r])),
        // transformers' stand-in for `_grouped_mm` (its `integrations/moe.py`), registered
        // as the custom op `transformers::grouped_mm_fallback(input, weight, offs)`: the
        // same product of a 2-D input by 3-D weights, with rows past the last offset zero.
        "grouped_mm_fallback" => {
            let (_, wm) = args.tensor("weight")?;
            if wm.rank() != 3 {
                return Err(invalid(format!(
                    "`weight` must be 3-D (experts, K, N), found {:?}",
                    wm.shape
                )));
            }
            Ok(grouped_mm(s, args, ("input", "weight"))?.map(|r| vec![r]))
        }
        _ => Ok(None),
    }
}

/// `histc(self, bins, min, max)`: the count of elements in each of `bins` equal bins
/// between `min` and `max` (the tensor's own least and greatest where both are equal,
/// widened by one each side where those are equal too), in the input's dtype. An element
/// goes to bin `trunc((x - min) * bins / (max - min))`, `max` itself to the last; those
/// outside the range and NaN are not counted.
fn histc(s: &mut Steps<'_>, args: &Args<'_>) -> Result<String, SigError> {
    let (x, m) = args.tensor("self")?;
    let bins = args.int_or("bins", 100)?;
    if bins <= 0 {
        return Err(invalid(format!("bins must be positive, found {bins}")));
    }
    let (lo, hi) = (args.num("min", 0.0), args.num("max", 0.0));
    if lo > hi {
        return Err(invalid(format!("max ({hi}) must be at least min ({lo})")));
    }
    if !(lo.is_finite() && hi.is_finite()) {
        return Err(invalid(format!("the range [{lo}, {hi}] is not finite")));
    }
    if m.dtype == DType::Bool {
        return Err(invalid(
            "histc of a bool tensor: cast it to a number type".into(),
        ));
    }
    let n: i64 = m.shape.iter().product();
    if n.saturating_mul(bins) > MAX_HISTC_COMPARISONS {
        return Err(invalid(format!(
            "{n} elements into {bins} bins: Kiln compares every element with every bin, at most {MAX_HISTC_COMPARISONS} pairs"
        )));
    }
    // The arithmetic of PyTorch's kernel, in the input's float type (float32 for 16-bit
    // and integer inputs).
    let work = if m.dtype == DType::Float64 {
        DType::Float64
    } else {
        DType::Float32
    };
    let flat = s.reshape(&x, &[n, 1]);
    let xf = cast(s, &flat, work);
    let (lo, hi) = if lo == hi {
        let least = s.reduce("amin", &xf, None, false);
        let most = s.reduce("amax", &xf, None, false);
        let same = s.bin("eq", t(&least), t(&most));
        let below = s.bin("sub", t(&least), Raw::Float(1.0));
        let above = s.bin("add", t(&most), Raw::Float(1.0));
        (
            t(&pick(s, &same, t(&below), t(&least))),
            t(&pick(s, &same, t(&above), t(&most))),
        )
    } else {
        (Raw::Float(lo), Raw::Float(hi))
    };
    let from = s.bin("sub", t(&xf), lo.clone());
    let scaled = s.bin("mul", t(&from), Raw::Int(bins));
    let width = match (&lo, &hi) {
        (Raw::Float(a), Raw::Float(b)) => Raw::Float(b - a),
        _ => t(&s.bin("sub", hi.clone(), lo.clone())),
    };
    let pos = s.bin("div", t(&scaled), width);
    let pos = s.un("trunc", &pos);
    let pos = s.op(
        "clamp",
        vec![("self", t(&pos)), ("max", Raw::Float((bins - 1) as f64))],
    );
    let bin_ids = s.konst(vec![1, bins], work, (0..bins).map(|b| b as f64).collect());
    let at = s.bin("eq", t(&pos), t(&bin_ids));
    let above_lo = s.bin("ge", t(&xf), lo);
    let below_hi = s.bin("le", t(&xf), hi);
    let inside = s.bin("bitwise_and", t(&above_lo), t(&below_hi));
    let hit = s.bin("bitwise_and", t(&at), t(&inside));
    let counts = s.op(
        "sum",
        vec![
            ("self", t(&hit)),
            ("dim", ints(&[0])),
            ("keepdim", Raw::Bool(false)),
            ("dtype", Raw::Str("int64".into())),
        ],
    );
    Ok(cast(s, &counts, m.dtype))
}

/// `_grouped_mm(a, b, offs, bias, out_dtype)` on the operands named `names`: a product
/// per group, in one of PyTorch's four layouts.
/// - `a` 2-D `[M, K]`, `b` 3-D `[G, K, N]`: rows `offs[g-1]..offs[g]` of `a` times `b[g]`,
///   `[M, N]` (a mixture of experts' forward product, rows sorted by expert);
/// - `a` 3-D `[G, M, K]`, `b` 2-D `[K, N]`: columns `offs[g-1]..offs[g]` of `b` times
///   `a[g]`, `[M, N]`;
/// - both 2-D, `[M, K]` and `[K, N]`: `K` cut by `offs`, a product per group, `[G, M, N]`;
/// - both 3-D: `bmm`, without `offs`.
///
/// Rows or columns past the last offset are zero (PyTorch leaves them unwritten). The
/// products of 16-bit operands are summed in float32, as PyTorch's kernels do.
fn grouped_mm(
    s: &mut Steps<'_>,
    args: &Args<'_>,
    names: (&str, &str),
) -> Result<Option<String>, SigError> {
    let (a, am, symbolic_rows) = rows_operand(args, names.0)?;
    let (b, bm) = args.tensor(names.1)?;
    check_operands(args, &am, &bm)?;
    if symbolic_rows && (am.rank(), bm.rank()) != (2, 3) {
        return Err(invalid(format!(
            "`{}` has symbolic sizes, which a grouped product takes in its 2-D by 3-D layout only \
             so far; compile at one size (--specialize)",
            names.0
        )));
    }
    let offs = match args.get("offs") {
        Some(Raw::Str(o)) => Some((o.clone(), args.meta(o)?)),
        _ => None,
    };
    let out = match (am.rank(), bm.rank(), offs) {
        (3, 3, None) => {
            return Ok(Some(s.op("bmm", vec![("self", t(&a)), ("mat2", t(&b))])));
        }
        (3, 3, Some(_)) => {
            return Err(invalid(
                "`offs` given for two 3-D operands, which are a batched product without groups"
                    .into(),
            ))
        }
        (_, _, None) => {
            return Err(invalid(format!(
                "`offs` is needed for a {}-D by {}-D grouped product",
                am.rank(),
                bm.rank()
            )))
        }
        (2, 3, Some((o, om))) => {
            check_offs(&om, bm.shape[0], names.1)?;
            // Kiln's op (`Op::GroupedMm`): bound as it is, or the step that binds it.
            if names.0 == "self" {
                return Ok(None);
            }
            let attrs = vec![("self", t(&a)), ("mat2", t(&b)), ("offs", t(&o))];
            return Ok(Some(s.op("_grouped_mm", attrs)));
        }
        (3, 2, Some((o, om))) => {
            check_offs(&om, am.shape[0], names.0)?;
            // Column n of `b` times `a[g]`: row n of `b`'s transpose times `a[g]`'s.
            let rows = s.permute(&b, &[1, 0]); // [N, K]
            let mats = s.permute(&a, &[0, 2, 1]); // [G, K, M]
            let attrs = vec![("self", t(&rows)), ("mat2", t(&mats)), ("offs", t(&o))];
            let product = s.op("_grouped_mm", attrs); // [N, M]
            return Ok(Some(s.permute(&product, &[1, 0])));
        }
        (2, 2, Some((o, om))) => {
            let g = check_offs(&om, om.shape.first().copied().unwrap_or(0), "")?;
            k_by_group(s, &a, &am, &b, &bm, &o, g)
        }
        (ra, rb, _) => {
            return Err(invalid(format!(
                "operands must be 2-D or 3-D, found {ra}-D and {rb}-D"
            )))
        }
    };
    Ok(Some(cast(s, &out, am.dtype)))
}

/// Tensor argument `name` with its metadata, its first size at its hint where that
/// alone is symbolic (a 2-D input's rows: the tokens of a prompt of any length), and
/// whether it was.
fn rows_operand(args: &Args<'_>, name: &str) -> Result<(String, FixedMeta, bool), SigError> {
    let Some(Raw::Str(x)) = args.get(name) else {
        return Err(invalid(format!("needs the tensor `{name}`")));
    };
    let m = (args.metas)(x).ok_or_else(|| invalid(format!("`{x}` names no tensor known here")))?;
    if let Some(fixed) = m.fixed() {
        return Ok((x.clone(), fixed, false));
    }
    if m.rank() != 2 || m.shape[1].as_const().is_none() {
        return args.tensor(name).map(|(x, m)| (x, m, false));
    }
    let shape = m.shape.iter().map(|d| d.hint()).collect();
    Ok((x.clone(), FixedMeta::contiguous(shape, m.dtype), true))
}

/// The dtypes and contraction sizes `_grouped_mm` takes.
fn check_operands(args: &Args<'_>, am: &FixedMeta, bm: &FixedMeta) -> Result<(), SigError> {
    let float = |d: DType| matches!(d, DType::Float32 | DType::Float16 | DType::BFloat16);
    if !float(am.dtype) || am.dtype != bm.dtype {
        return Err(invalid(format!(
            "operands of one of float32, float16 and bfloat16, the same for both, found {} and {}",
            am.dtype, bm.dtype
        )));
    }
    if !matches!(args.get("bias"), None | Some(Raw::None)) {
        return Err(invalid(
            "a `bias`, which PyTorch's grouped product does not take: add it after".into(),
        ));
    }
    if let Some(Raw::Str(d)) = args.get("out_dtype") {
        if DType::parse(d) != Some(am.dtype) {
            return Err(invalid(format!(
                "out_dtype {d} for {} operands: the result has the operands' dtype",
                am.dtype
            )));
        }
    }
    let ka = am.shape.last().copied();
    let kb = bm.shape.get(bm.rank().wrapping_sub(2)).copied();
    if ka != kb || am.rank() < 2 || bm.rank() < 2 {
        return Err(invalid(format!(
            "the contraction sizes differ: {:?} by {:?}",
            am.shape, bm.shape
        )));
    }
    if am.rank() == 3 && bm.rank() == 3 && am.shape[0] != bm.shape[0] {
        return Err(invalid(format!(
            "batches of {} and {}",
            am.shape[0], bm.shape[0]
        )));
    }
    Ok(())
}

/// The number of groups of a 1-D int32 `offs`, which must be `groups` long where that is
/// given (`what` non-empty).
fn check_offs(om: &FixedMeta, groups: i64, what: &str) -> Result<i64, SigError> {
    if om.rank() != 1 || om.dtype != DType::Int32 {
        return Err(invalid(format!(
            "`offs` must be a 1-D int32 tensor, found {}{:?}",
            om.dtype, om.shape
        )));
    }
    if om.shape[0] == 0 {
        return Err(invalid(
            "`offs` is empty: a grouped product needs a group".into(),
        ));
    }
    if !what.is_empty() && om.shape[0] != groups {
        return Err(invalid(format!(
            "{} offsets for the {groups} groups of `{what}`",
            om.shape[0]
        )));
    }
    Ok(om.shape[0])
}

/// For each of `n` positions, its group by `offs` (the offsets at or below it), `[n]`
/// int64 (`groups` past the last offset), and whether it is before the last offset.
fn group_of(s: &mut Steps<'_>, offs: &str, n: i64, groups: i64) -> (String, String) {
    let at = s.konst(vec![n, 1], DType::Int64, (0..n).map(|i| i as f64).collect());
    let ends = s.op(
        "_to_copy",
        vec![("self", t(offs)), ("dtype", Raw::Str("int64".into()))],
    );
    let ends = s.reshape(&ends, &[1, groups]);
    let passed = s.bin("le", t(&ends), t(&at));
    let group = s.op(
        "sum",
        vec![
            ("self", t(&passed)),
            ("dim", ints(&[1])),
            ("keepdim", Raw::Bool(false)),
            ("dtype", Raw::Str("int64".into())),
        ],
    );
    let kept = s.bin("lt", t(&group), Raw::Int(groups));
    let group = s.op(
        "clamp",
        vec![("self", t(&group)), ("max", Raw::Int(groups - 1))],
    );
    (group, kept)
}

/// `[M, K]` by `[K, N]` with K cut into groups: `[G, M, N]`, group g summing over its
/// slice of K only (zero for an empty one).
fn k_by_group(
    s: &mut Steps<'_>,
    a: &str,
    am: &FixedMeta,
    b: &str,
    bm: &FixedMeta,
    o: &str,
    g: i64,
) -> String {
    let k = am.shape[1];
    let (group, kept) = group_of(s, o, k, g);
    let ids = s.konst(vec![g, 1], DType::Int64, (0..g).map(|i| i as f64).collect());
    let mine = s.bin("eq", t(&group), t(&ids)); // [G, K]
    let mine = s.bin("bitwise_and", t(&mine), t(&kept));
    let mine = s.op("unsqueeze", vec![("self", t(&mine)), ("dim", Raw::Int(1))]); // [G, 1, K]
    let masked = pick(s, &mine, t(a), Raw::Float(0.0)); // [G, M, K]
    let masked = cast(s, &masked, am.dtype);
    let full = s.op(
        "expand",
        vec![("self", t(b)), ("size", ints(&[g, k, bm.shape[1]]))],
    );
    s.op("bmm", vec![("self", t(&masked)), ("mat2", t(&full))])
}

/// `x` as `dtype`.
fn cast(s: &mut Steps<'_>, x: &str, dtype: DType) -> String {
    s.op(
        "_to_copy",
        vec![("self", t(x)), ("dtype", Raw::Str(dtype.name().into()))],
    )
}
