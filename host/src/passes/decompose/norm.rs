//! Decompositions of the normalisations and moments into reductions and elementwise
//! ops: `softmax`/`log_softmax` via amax/sub/exp/sum/div (or log), `layer_norm` and
//! `rms_norm` via mean and rsqrt, `var` via a shifted mean of squares. Each computes
//! 16-bit floats in float32 and casts back, and agrees with the interpreter's direct
//! rule for the op.

use super::{Rewrite, Site, B};
use crate::graph::{Arg, BinaryOp, DType, Op, ReduceOp, Scalar, UnaryOp, ValueId};
use crate::passes::Error;

/// `softmax` (or `log_softmax`) over `dim`; `dtype` casts the input first (a narrower
/// dtype rounds it).
pub(super) fn softmax(
    b: &mut B,
    s: &Site,
    dim: i64,
    log: bool,
    dtype: Option<DType>,
) -> Result<ValueId, Error> {
    let xd = match dtype {
        Some(d) => b.cast(s.x, d)?,
        None => s.x,
    };
    let xc = b.upcast(xd)?;
    let m = b.reduce(ReduceOp::Amax, xc, &[dim])?;
    let sub = b.vv(BinaryOp::Sub, xc, m)?;
    let e = b.un(UnaryOp::Exp, sub)?;
    let z = b.reduce(ReduceOp::Sum, e, &[dim])?;
    let y = if log {
        let lz = b.un(UnaryOp::Log, z)?;
        b.vv(BinaryOp::Sub, sub, lz)?
    } else {
        b.vv(BinaryOp::Div, e, z)?
    };
    b.cast(y, s.out.dtype)
}

/// `layer_norm` over the last `normalized.len()` dims; the native form also gives the mean
/// and rstd.
pub(super) fn layer_norm(
    b: &mut B,
    s: &Site,
    normalized: &[i64],
    eps: f64,
    weight: bool,
    bias: bool,
    native: bool,
) -> Rewrite {
    let dims = s.trailing(normalized.len());
    let xc = b.upcast(s.x)?;
    let mean = b.reduce(ReduceOp::Mean, xc, &dims)?;
    let d = b.vv(BinaryOp::Sub, xc, mean)?;
    let sq = b.vv(BinaryOp::Mul, d, d)?;
    let var = b.reduce(ReduceOp::Mean, sq, &dims)?;
    let ve = b.vs(BinaryOp::Add, var, eps)?;
    let rstd = b.un(UnaryOp::Rsqrt, ve)?;
    let mut y = b.vv(BinaryOp::Mul, d, rstd)?;
    if weight {
        y = b.vv(BinaryOp::Mul, y, s.arg(1).unwrap_or(y))?;
    }
    if bias {
        y = b.vv(BinaryOp::Add, y, s.arg(1 + weight as usize).unwrap_or(y))?;
    }
    let out = &s.out;
    let mut r = vec![b.cast(y, out.dtype)?];
    if native {
        let stat = s.outs.get(1).map_or(out.dtype, |m| m.dtype);
        let shape = &s.metas[0].shape;
        let k = shape.len().saturating_sub(normalized.len());
        if shape[k..].iter().any(|d| *d == 0) {
            if s.symbolic {
                return Ok(None);
            }
            // Rows of nothing: mean 0 and rstd NaN, as PyTorch's CUDA kernel
            // gives (its moments start from 0; the variance is 0 / 0).
            for v in [0.0, f64::NAN] {
                r.push(b.op(
                    Op::Full {
                        size: Some(crate::graph::shape::sizes(&s.outs[1].shape)),
                        value: Scalar::Float(v),
                        dtype: Some(stat),
                    },
                    vec![],
                )?);
            }
        } else {
            r.push(b.cast(mean, stat)?);
            r.push(b.cast(rstd, stat)?);
        }
    }
    Ok(Some(r))
}

/// `rms_norm` over the last `normalized.len()` dims.
pub(super) fn rms_norm(
    b: &mut B,
    s: &Site,
    normalized: &[i64],
    eps: Option<f64>,
    weight: bool,
) -> Result<ValueId, Error> {
    let dims = s.trailing(normalized.len());
    let eps = eps.unwrap_or(match b.dtype(s.x) {
        // PyTorch's default is the epsilon of the type it computes in: float32
        // for 16-bit inputs too.
        DType::Float64 => f64::EPSILON,
        _ => f32::EPSILON as f64,
    });
    let xc = b.upcast(s.x)?;
    let sq = b.vv(BinaryOp::Mul, xc, xc)?;
    let ms = b.reduce(ReduceOp::Mean, sq, &dims)?;
    let e = b.vs(BinaryOp::Add, ms, eps)?;
    let r = b.un(UnaryOp::Rsqrt, e)?;
    let mut y = b.vv(BinaryOp::Mul, xc, r)?;
    if weight {
        y = b.vv(BinaryOp::Mul, y, s.arg(1).unwrap_or(y))?;
    }
    b.cast(y, s.out.dtype)
}

/// `var` over `dims` (all when `None`) with Bessel's `correction`.
pub(super) fn var(
    b: &mut B,
    s: &Site,
    dims: Option<Vec<i64>>,
    correction: f64,
    keepdim: bool,
) -> Result<ValueId, Error> {
    let xc = b.upcast(s.x)?;
    let ds = dims.unwrap_or_else(|| (0..s.rank).collect());
    let shape =
        b.g.fixed_meta(s.x)
            .map(|m| m.shape.clone())
            .unwrap_or_default();
    let wrapped = crate::graph::shape::wrap_dim_set(Some(&ds), shape.len()).unwrap_or_default();
    let n: f64 = wrapped
        .iter()
        .map(|&d| shape.get(d).copied().unwrap_or(1) as f64)
        .product();
    if n == 1.0 {
        // One element: its deviation is exactly 0 (computed, a fused
        // multiply-add can leave a rounding residue that 0 / 0 turns into inf).
        let v = if 1.0 - correction > 0.0 {
            0.0
        } else {
            f64::NAN
        };
        return b.op(
            Op::Full {
                size: Some(crate::graph::shape::sizes(&s.out.shape)),
                value: Scalar::Float(v),
                dtype: Some(s.out.dtype),
            },
            vec![],
        );
    }
    // Deviations of the data shifted by its first element along the reduced
    // dims: a run of equal values then has variance exactly 0, as PyTorch's
    // Welford gives (a float32 mean of equal values need not equal them, and
    // `var > 0` must not flip), and large offsets cancel before squaring.
    let mut first = xc;
    for &d in &wrapped {
        first = b.slice(first, d as i64, 0, 1, 1)?;
    }
    let xc = b.vv(BinaryOp::Sub, xc, first)?;
    let mean = b.reduce(ReduceOp::Mean, xc, &ds)?;
    let d = b.vv(BinaryOp::Sub, xc, mean)?;
    let sq = b.vv(BinaryOp::Mul, d, d)?;
    let sum = b.op(
        Op::Reduce {
            op: ReduceOp::Sum,
            dims: Some(ds),
            keepdim,
            dtype: None,
        },
        vec![Arg::Value(sq)],
    )?;
    let y = b.vs(BinaryOp::Div, sum, (n - correction).max(0.0))?;
    b.cast(y, s.out.dtype)
}
