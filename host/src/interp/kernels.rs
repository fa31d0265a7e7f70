//! Element computations of the interpreter: pointwise ops with broadcasting, reductions,
//! normalisations, softmax and matrix products, all in float64 with one rounding to the
//! node's dtype at the end. Must never reshape or alias storage (that is `views.rs`).

use super::reduce::{matmul, matmul_raw, norm, reduce, softmax, var};
use super::{map_n, OpError, Val};
use crate::graph::dtype::{result_type, OperandKind};
use crate::graph::{BinaryOp, DType, FixedMeta, GeluApprox, Op, Scalar, UnaryOp};
use crate::tensor::Tensor;

fn tensor<'a>(args: &[Val<'a>], i: usize) -> Result<&'a Tensor, String> {
    match args.get(i) {
        Some(Val::Tensor(t)) => Ok(t),
        _ => Err(format!("operand {i} must be a tensor")),
    }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// A unary function in float64.
pub(crate) fn unary(u: UnaryOp, x: f64) -> f64 {
    match u {
        UnaryOp::Abs => x.abs(),
        UnaryOp::Neg => -x,
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Log1p => x.ln_1p(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => 1.0 / x.sqrt(),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => sigmoid(x),
        UnaryOp::Relu => {
            if x.is_nan() {
                x
            } else {
                x.max(0.0)
            }
        }
        UnaryOp::Silu => x * sigmoid(x),
        UnaryOp::Erf => libm::erf(x),
        UnaryOp::Reciprocal => 1.0 / x,
        UnaryOp::Hardsigmoid => hardsigmoid(x),
        UnaryOp::Hardswish => x * hardsigmoid(x),
        UnaryOp::Floor => x.floor(),
        UnaryOp::Ceil => x.ceil(),
        UnaryOp::Round => x.round_ties_even(),
        UnaryOp::Trunc => x.trunc(),
        UnaryOp::Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0
            }
        }
        UnaryOp::Expm1 => x.exp_m1(),
        UnaryOp::Log2 => x.log2(),
        UnaryOp::Log10 => x.log10(),
        UnaryOp::Tan => x.tan(),
        UnaryOp::Atan => x.atan(),
        UnaryOp::Asin => x.asin(),
        UnaryOp::Acos => x.acos(),
        UnaryOp::Sinh => x.sinh(),
        UnaryOp::Cosh => x.cosh(),
        UnaryOp::Asinh => x.asinh(),
        UnaryOp::Acosh => x.acosh(),
        UnaryOp::Atanh => x.atanh(),
    }
}

fn hardsigmoid(x: f64) -> f64 {
    if x.is_nan() {
        x
    } else {
        (x + 3.0).clamp(0.0, 6.0) / 6.0
    }
}

fn gelu(a: GeluApprox, x: f64) -> f64 {
    match a {
        GeluApprox::None => 0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2)),
        GeluApprox::Tanh => {
            let k = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
        }
    }
}

fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

fn nan_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

/// A binary function in float64, given the (promoted) computation dtype.
pub(crate) fn binary(op: BinaryOp, a: f64, b: f64, alpha: f64, int: bool) -> f64 {
    match op {
        BinaryOp::Add => a + alpha * b,
        BinaryOp::Sub => a - alpha * b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::DivTrunc => (a / b).trunc(),
        BinaryOp::DivFloor => {
            if int {
                (a / b).floor()
            } else if b == 0.0 {
                a / b
            } else {
                // PyTorch's float floor division: floor of the true quotient, computed
                // with fmod so that it agrees with Python's `//`.
                let m = a % b;
                let mut d = (a - m) / b;
                if m != 0.0 && ((b < 0.0) != (m < 0.0)) {
                    d -= 1.0;
                }
                if d == 0.0 {
                    0.0f64.copysign(a / b)
                } else {
                    let f = d.floor();
                    if d - f > 0.5 {
                        f + 1.0
                    } else {
                        f
                    }
                }
            }
        }
        BinaryOp::Pow => a.powf(b),
        BinaryOp::Maximum => nan_max(a, b),
        BinaryOp::Minimum => nan_min(a, b),
        BinaryOp::Eq => (a == b) as i64 as f64,
        BinaryOp::Ne => (a != b) as i64 as f64,
        BinaryOp::Lt => (a < b) as i64 as f64,
        BinaryOp::Le => (a <= b) as i64 as f64,
        BinaryOp::Gt => (a > b) as i64 as f64,
        BinaryOp::Ge => (a >= b) as i64 as f64,
        // Integers and bools only (inference refuses floats); exact in float64 for the
        // int64 values a float64 holds exactly.
        BinaryOp::BitAnd => ((a as i64) & (b as i64)) as f64,
        BinaryOp::BitOr => ((a as i64) | (b as i64)) as f64,
        BinaryOp::BitXor => ((a as i64) ^ (b as i64)) as f64,
        // Integer remainders by zero give 0, as the generated code does.
        BinaryOp::Fmod if int && b == 0.0 => 0.0,
        BinaryOp::Fmod => a % b,
        BinaryOp::Atan2 => a.atan2(b),
        BinaryOp::Hypot => a.hypot(b),
        BinaryOp::Copysign => a.copysign(b),
        BinaryOp::Remainder if int && b == 0.0 => 0.0,
        BinaryOp::Remainder => {
            let r = a % b;
            if r != 0.0 && ((r < 0.0) != (b < 0.0)) {
                r + b
            } else {
                r
            }
        }
    }
}

/// Evaluates a non-view op.
pub(crate) fn eval(
    op: &Op,
    args: &[Val],
    out: &FixedMeta,
    outs: &[FixedMeta],
) -> Result<Vec<Tensor>, OpError> {
    let t = match op {
        Op::Unary(u) => map_n(args, out, |x| unary(*u, x[0]))?,
        Op::Gelu { approximate } => map_n(args, out, |x| gelu(*approximate, x[0]))?,
        Op::Binary { op, alpha } => binary_op(*op, *alpha, args, out)?,
        Op::Where => map_n(&cast_args(args, out.dtype), out, |x| {
            if x[0] != 0.0 {
                x[1]
            } else {
                x[2]
            }
        })?,
        Op::Clamp { min, max } => clamp(*min, *max, args, out)?,
        Op::Cast { .. } => map_n(args, out, |x| x[0])?,
        Op::Reduce {
            op, dims, dtype, ..
        } => reduce(tensor(args, 0)?, dims.as_deref(), out, *op, *dtype)?,
        Op::Var {
            dims, correction, ..
        } => var(tensor(args, 0)?, dims.as_deref(), out, *correction)?,
        Op::Softmax {
            dim,
            log,
            dtype: Some(d),
            ..
        } => {
            // The input cast to `dtype` first.
            let x = tensor(args, 0)?;
            let cast = Tensor::new(x.shape.clone(), *d, super::elements(x)?);
            softmax(&cast, *dim, *log, out)?
        }
        Op::Softmax { dim, log, .. } => softmax(tensor(args, 0)?, *dim, *log, out)?,
        Op::LayerNorm {
            normalized_shape,
            eps,
            weight,
            bias,
            native,
        } => return layer_norm(normalized_shape, *eps, *weight, *bias, *native, args, outs),
        Op::RmsNorm {
            normalized_shape,
            eps,
            weight,
        } => return rms_norm(normalized_shape, *eps, *weight, args, outs),
        Op::Mm | Op::Bmm | Op::Matmul => matmul(tensor(args, 0)?, tensor(args, 1)?, out, false)?,
        Op::Linear { bias } => linear(*bias, args, out)?,
        Op::Addmm { beta, alpha } => addmm(*beta, *alpha, args, out)?,
        other => return Err(format!("the interpreter has no rule for `{}`", other.name()).into()),
    };
    Ok(vec![t])
}

/// The operands brought to the computation dtype `d` (PyTorch casts before
/// computing: an int tensor plus a float scalar is computed in float32).
fn cast_args<'a>(args: &[Val<'a>], d: DType) -> Vec<Val<'a>> {
    args.iter()
        .map(|a| match a {
            Val::Scalar(s) => Val::Scalar(Scalar::Float(d.round(s.to_f64()))),
            t => *t,
        })
        .collect()
}

/// A binary op with its `alpha` (the second operand's factor), in the operands'
/// promoted dtype.
fn binary_op(
    op: BinaryOp,
    alpha: Option<Scalar>,
    args: &[Val],
    out: &FixedMeta,
) -> Result<Tensor, OpError> {
    let compute = compute_dtype(args)?;
    let alpha = alpha.map_or(1.0, |a| a.to_f64());
    let int = !compute.is_float();
    map_n(&cast_args(args, compute), out, |x| {
        binary(op, x[0], x[1], alpha, int)
    })
}

/// `clamp` to `min` and `max` (each rounded to the output dtype); NaN stays NaN.
fn clamp(
    min: Option<Scalar>,
    max: Option<Scalar>,
    args: &[Val],
    out: &FixedMeta,
) -> Result<Tensor, OpError> {
    let (lo, hi) = (
        min.map(|s| out.dtype.round(s.to_f64())),
        max.map(|s| out.dtype.round(s.to_f64())),
    );
    map_n(args, out, |x| {
        let mut v = x[0];
        if let Some(l) = lo {
            v = nan_max(v, l);
        }
        if let Some(h) = hi {
            v = nan_min(v, h);
        }
        v
    })
}

/// `layer_norm`; the native form also gives the mean and rstd.
fn layer_norm(
    normalized_shape: &[i64],
    eps: f64,
    weight: bool,
    bias: bool,
    native: bool,
    args: &[Val],
    outs: &[FixedMeta],
) -> Result<Vec<Tensor>, OpError> {
    let w = if weight { Some(tensor(args, 1)?) } else { None };
    let b = if bias {
        Some(tensor(args, 1 + weight as usize)?)
    } else {
        None
    };
    let x = tensor(args, 0)?;
    let r = norm(x, normalized_shape.len(), Some(eps), w, b, false, outs)?;
    Ok(if native {
        r
    } else {
        r.into_iter().take(1).collect()
    })
}

/// `rms_norm`.
fn rms_norm(
    normalized_shape: &[i64],
    eps: Option<f64>,
    weight: bool,
    args: &[Val],
    outs: &[FixedMeta],
) -> Result<Vec<Tensor>, OpError> {
    let w = if weight { Some(tensor(args, 1)?) } else { None };
    let x = tensor(args, 0)?;
    let r = norm(x, normalized_shape.len(), eps, w, None, true, outs)?;
    Ok(r.into_iter().take(1).collect())
}

/// `linear(x, w, bias?)`: `x` times `w` transposed, plus the bias.
fn linear(bias: bool, args: &[Val], out: &FixedMeta) -> Result<Tensor, OpError> {
    if !bias {
        return matmul(tensor(args, 0)?, tensor(args, 1)?, out, true);
    }
    let p = matmul_raw(tensor(args, 0)?, tensor(args, 1)?, &out.shape, true)?;
    let b = tensor(args, 2)?;
    map_n(&[Val::Tensor(&p), Val::Tensor(b)], out, |x| x[0] + x[1])
}

/// `addmm(c, a, b) = beta * c + alpha * a @ b`, the product kept in float64.
fn addmm(beta: Scalar, alpha: Scalar, args: &[Val], out: &FixedMeta) -> Result<Tensor, OpError> {
    let p = matmul_raw(tensor(args, 1)?, tensor(args, 2)?, &out.shape, false)?;
    let p = Tensor {
        dtype: DType::Float64,
        ..p
    };
    let (beta, alpha) = (beta.to_f64(), alpha.to_f64());
    map_n(
        &[Val::Tensor(tensor(args, 0)?), Val::Tensor(&p)],
        out,
        |x| {
            // PyTorch ignores `self` entirely when beta is 0 (NaNs in it do not leak).
            let c = if beta == 0.0 { 0.0 } else { beta * x[0] };
            c + alpha * x[1]
        },
    )
}

fn compute_dtype(args: &[Val]) -> Result<DType, String> {
    let kinds: Vec<(DType, OperandKind)> = args
        .iter()
        .map(|a| match a {
            Val::Tensor(t) if t.shape.is_empty() => (t.dtype, OperandKind::ZeroDim),
            Val::Tensor(t) => (t.dtype, OperandKind::Dim),
            Val::Scalar(s) => (s.dtype(), OperandKind::Scalar),
        })
        .collect();
    result_type(&kinds).ok_or_else(|| "no operands".to_string())
}
