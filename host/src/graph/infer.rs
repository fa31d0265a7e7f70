//! Shape, stride and dtype inference for every op, with PyTorch's rules and error checks.
//!
//! Given the metadata of a node's operands it returns the metadata of its outputs, or says
//! why the operands are invalid. It must never panic on any input: validation is the
//! contract that lets later stages assume well-formed graphs.

use super::dtype::{promote, result_type, DType, OperandKind};
pub mod layout;
pub mod model;
use super::ir::{Scalar, TensorMeta};
use super::ops::{BinaryOp, Op, ReduceOp};
use super::shape::{
    broadcast, contiguous_strides, numel, wrap_dim, wrap_dim_set, Shape, ShapeError,
};
use super::views;
use model as infer_model;

/// An operand as inference sees it.
#[derive(Clone, Copy, Debug)]
pub enum ArgMeta<'a> {
    /// a tensor
    Tensor(&'a TensorMeta),
    /// a number
    Scalar(Scalar),
}

/// Why a node's operands are invalid; the caller adds the node's name and line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InferError {
    /// Two operand shapes that must agree do not.
    #[error("{what}: {a:?} vs {b:?}")]
    Mismatch {
        /// what had to agree
        what: String,
        /// one shape
        a: Shape,
        /// the other
        b: Shape,
    },
    /// A dim, size or count problem.
    #[error(transparent)]
    Shape(#[from] ShapeError),
    /// A view op does not apply to its operand.
    #[error(transparent)]
    View(#[from] super::views::ViewError),
    /// Anything else (wrong operand count or kind, unsupported dtype, ...).
    #[error("{0}")]
    Invalid(String),
}

fn invalid<T>(msg: impl Into<String>) -> Result<T, InferError> {
    Err(InferError::Invalid(msg.into()))
}

fn tensor<'a>(args: &[ArgMeta<'a>], i: usize) -> Result<&'a TensorMeta, InferError> {
    match args.get(i) {
        Some(ArgMeta::Tensor(t)) => Ok(t),
        Some(ArgMeta::Scalar(s)) => invalid(format!(
            "operand {i} must be a tensor, found the number {s}"
        )),
        None => invalid(format!("missing operand {i}")),
    }
}

fn kind_of(a: &ArgMeta) -> (DType, OperandKind, Shape) {
    match a {
        ArgMeta::Tensor(t) if t.rank() == 0 => (t.dtype, OperandKind::ZeroDim, vec![]),
        ArgMeta::Tensor(t) => (t.dtype, OperandKind::Dim, t.shape.clone()),
        ArgMeta::Scalar(s) => (s.dtype(), OperandKind::Scalar, vec![]),
    }
}

/// Broadcast shape and promoted dtype of elementwise operands.
pub fn elementwise(args: &[ArgMeta]) -> Result<(Shape, DType), InferError> {
    let mut shape: Shape = vec![];
    let mut kinds = Vec::with_capacity(args.len());
    for a in args {
        let (d, k, s) = kind_of(a);
        shape = broadcast(&shape, &s).map_err(|_| InferError::Mismatch {
            what: "operand shapes do not broadcast".into(),
            a: shape.clone(),
            b: s.clone(),
        })?;
        kinds.push((d, k));
    }
    let dtype = result_type(&kinds).ok_or_else(|| InferError::Invalid("no operands".into()))?;
    Ok((shape, dtype))
}

fn out(shape: Shape, dtype: DType) -> Result<Vec<TensorMeta>, InferError> {
    numel(&shape)?;
    Ok(vec![TensorMeta::contiguous(shape, dtype)])
}

fn float_of(d: DType) -> DType {
    if d.is_float() {
        d
    } else {
        DType::Float32
    }
}

fn count(args: &[ArgMeta], n: usize) -> Result<(), InferError> {
    if args.len() != n {
        return invalid(format!("expected {n} operands, found {}", args.len()));
    }
    Ok(())
}

fn op_name(op: BinaryOp) -> &'static str {
    BinaryOp::ALL
        .iter()
        .find(|(o, _)| *o == op)
        .map_or("this op", |(_, n)| n)
}

/// The output metadata of `op` applied to `args`.
pub fn infer(op: &Op, args: &[ArgMeta]) -> Result<Vec<TensorMeta>, InferError> {
    match op {
        Op::Input { .. } | Op::Constant { .. } => {
            invalid("inputs and constants declare their own metadata")
        }
        Op::Unary(u) => {
            count(args, 1)?;
            let t = tensor(args, 0)?;
            let d = if u.promotes_int_to_float() {
                float_of(t.dtype)
            } else {
                t.dtype
            };
            if t.dtype == DType::Bool && matches!(u, super::ops::UnaryOp::Neg) {
                return invalid("neg is not defined for bool tensors");
            }
            if matches!(
                u,
                super::ops::UnaryOp::Hardsigmoid | super::ops::UnaryOp::Hardswish
            ) && !t.dtype.is_float()
            {
                return invalid(format!(
                    "{u:?} needs a floating-point tensor, found {}",
                    t.dtype
                ));
            }
            out(t.shape.clone(), d)
        }
        Op::Gelu { .. } => {
            count(args, 1)?;
            let t = tensor(args, 0)?;
            if !t.dtype.is_float() {
                return invalid(format!(
                    "gelu needs a floating-point tensor, found {}",
                    t.dtype
                ));
            }
            out(t.shape.clone(), t.dtype)
        }
        Op::Binary { op, .. } => {
            count(args, 2)?;
            if !args.iter().any(|a| matches!(a, ArgMeta::Tensor(_))) {
                return invalid("at least one operand must be a tensor");
            }
            let (shape, d) = elementwise(args)?;
            let d = if op.is_comparison() {
                DType::Bool
            } else if matches!(op, BinaryOp::Fmod | BinaryOp::Remainder) && d == DType::Bool {
                return invalid(format!("{} is not defined for bool operands", op_name(*op)));
            } else if op.is_bitwise() && d.is_float() {
                return invalid(format!(
                    "{} is defined for integer and bool tensors, found {d}",
                    op_name(*op)
                ));
            } else if *op == BinaryOp::Div {
                float_of(d)
            } else if matches!(op, BinaryOp::Sub)
                && args.iter().any(|a| match a {
                    ArgMeta::Tensor(t) => t.dtype == DType::Bool,
                    ArgMeta::Scalar(s) => matches!(s, Scalar::Bool(_)),
                })
            {
                // As in PyTorch, whatever the other operand: `~` or logical_not
                // inverts a mask.
                return invalid("sub is not defined for bool operands");
            } else {
                d
            };
            out(shape, d)
        }
        Op::Where => {
            count(args, 3)?;
            let c = tensor(args, 0)?;
            if c.dtype != DType::Bool {
                return invalid(format!("where's condition must be bool, found {}", c.dtype));
            }
            let (shape, _) = elementwise(args)?;
            let (_, d) = elementwise(&args[1..])?;
            out(shape, d)
        }
        Op::Clamp { min, max } => {
            count(args, 1)?;
            let t = tensor(args, 0)?;
            if min.is_none() && max.is_none() {
                return invalid("clamp needs `min` or `max`");
            }
            let mut ops = vec![(
                t.dtype,
                if t.rank() == 0 {
                    OperandKind::ZeroDim
                } else {
                    OperandKind::Dim
                },
            )];
            for s in [min, max].into_iter().flatten() {
                ops.push((s.dtype(), OperandKind::Scalar));
            }
            out(t.shape.clone(), result_type(&ops).unwrap_or(t.dtype))
        }
        Op::Cast { dtype } => {
            count(args, 1)?;
            out(tensor(args, 0)?.shape.clone(), *dtype)
        }
        Op::Reduce {
            op,
            dims,
            keepdim,
            dtype,
        } => {
            count(args, 1)?;
            let t = tensor(args, 0)?;
            let shape = reduced_shape(&t.shape, dims.as_deref(), *keepdim)?;
            let d = match (op, dtype) {
                (ReduceOp::Any | ReduceOp::All, _) => DType::Bool,
                (_, Some(d)) => *d,
                (ReduceOp::Sum, None) if !t.dtype.is_float() => DType::Int64,
                (ReduceOp::Mean, None) if !t.dtype.is_float() => {
                    return invalid(format!(
                        "mean needs a floating-point input or a `dtype`, found {}",
                        t.dtype
                    ))
                }
                _ => t.dtype,
            };
            // PyTorch refuses a max or min over a dim of size 0 (there is no identity);
            // an empty tensor reduced over non-empty dims gives an empty result.
            if matches!(op, ReduceOp::Amax | ReduceOp::Amin)
                && wrap_dim_set(dims.as_deref(), t.rank())?
                    .iter()
                    .any(|&d| t.shape[d] == 0)
            {
                return invalid("amax/amin over a dim of size 0");
            }
            out(shape, d)
        }
        Op::Var { dims, keepdim, .. } => {
            count(args, 1)?;
            let t = tensor(args, 0)?;
            if !t.dtype.is_float() {
                return invalid(format!(
                    "var needs a floating-point input, found {}",
                    t.dtype
                ));
            }
            out(reduced_shape(&t.shape, dims.as_deref(), *keepdim)?, t.dtype)
        }
        Op::Softmax {
            dim,
            half_to_float,
            dtype,
            ..
        } => {
            count(args, 1)?;
            let t = tensor(args, 0)?;
            wrap_dim(*dim, t.rank())?;
            if *half_to_float && t.dtype != DType::Float16 {
                return invalid(format!(
                    "half_to_float is a conversion of float16 input (PyTorch refuses it for {})",
                    t.dtype
                ));
            }
            let d = if *half_to_float {
                DType::Float32
            } else {
                dtype.unwrap_or_else(|| float_of(t.dtype))
            };
            out(t.shape.clone(), d)
        }
        Op::LayerNorm {
            normalized_shape,
            weight,
            bias,
            native,
            ..
        } => {
            let n = 1 + *weight as usize + *bias as usize;
            count(args, n)?;
            let t = tensor(args, 0)?;
            check_norm(t, normalized_shape, &args[1..])?;
            if !t.dtype.is_float() {
                return invalid(format!(
                    "layer_norm needs a floating-point input, found {}",
                    t.dtype
                ));
            }
            let mut outs = out(t.shape.clone(), t.dtype)?;
            if *native {
                let k = t.rank() - normalized_shape.len();
                let mut s = t.shape[..k].to_vec();
                s.extend(std::iter::repeat_n(1, normalized_shape.len()));
                // The statistics are in the accumulation dtype, as PyTorch's CUDA
                // kernel (and Inductor) give them: float32 for 16-bit inputs.
                let acc = match t.dtype {
                    DType::Float16 | DType::BFloat16 => DType::Float32,
                    d => d,
                };
                let stat = TensorMeta::contiguous(s, acc);
                outs.push(stat.clone());
                outs.push(stat);
            }
            Ok(outs)
        }
        Op::RmsNorm {
            normalized_shape,
            weight,
            ..
        } => {
            count(args, 1 + *weight as usize)?;
            let t = tensor(args, 0)?;
            check_norm(t, normalized_shape, &args[1..])?;
            if !t.dtype.is_float() {
                return invalid(format!(
                    "rms_norm needs a floating-point input, found {}",
                    t.dtype
                ));
            }
            out(t.shape.clone(), t.dtype)
        }
        Op::Linear { bias } => {
            count(args, 2 + *bias as usize)?;
            let x = tensor(args, 0)?;
            let w = tensor(args, 1)?;
            if w.rank() != 2 || x.rank() < 1 || x.shape[x.rank() - 1] != w.shape[1] {
                return Err(InferError::Mismatch {
                    what:
                        "linear: input's last dim must equal weight's dim 1 (weight is [out, in])"
                            .into(),
                    a: x.shape.clone(),
                    b: w.shape.clone(),
                });
            }
            same_dtype(&[x, w])?;
            let mut s = x.shape.clone();
            let last = s.len() - 1;
            s[last] = w.shape[0];
            if *bias {
                let b = tensor(args, 2)?;
                broadcast(&s, &b.shape).map_err(|_| InferError::Mismatch {
                    what: "linear: bias does not broadcast to the output".into(),
                    a: s.clone(),
                    b: b.shape.clone(),
                })?;
            }
            out(s, x.dtype)
        }
        Op::Addmm { .. } => {
            count(args, 3)?;
            let (c, a, b) = (tensor(args, 0)?, tensor(args, 1)?, tensor(args, 2)?);
            // `baddbmm` is the batched form: [b, n, k] @ [b, k, m].
            let s = if a.rank() == 3 || b.rank() == 3 {
                infer(&Op::Bmm, &args[1..])?.remove(0).shape
            } else {
                mm_shape(a, b)?
            };
            // `self` is expanded to the product's shape: it may not add dims or
            // sizes of its own (broadcasting both ways would be another shape).
            if broadcast(&s, &c.shape).ok().as_ref() != Some(&s) {
                return Err(InferError::Mismatch {
                    what: "addmm: self does not expand to the product's shape".into(),
                    a: c.shape.clone(),
                    b: s.clone(),
                });
            }
            same_dtype(&[a, b, c])?;
            out(s, a.dtype)
        }
        Op::Mm => {
            count(args, 2)?;
            let (a, b) = (tensor(args, 0)?, tensor(args, 1)?);
            same_dtype(&[a, b])?;
            out(mm_shape(a, b)?, a.dtype)
        }
        Op::Bmm => {
            count(args, 2)?;
            let (a, b) = (tensor(args, 0)?, tensor(args, 1)?);
            same_dtype(&[a, b])?;
            if a.rank() != 3
                || b.rank() != 3
                || a.shape[0] != b.shape[0]
                || a.shape[2] != b.shape[1]
            {
                return Err(InferError::Mismatch {
                    what: "bmm needs [b, n, k] and [b, k, m]".into(),
                    a: a.shape.clone(),
                    b: b.shape.clone(),
                });
            }
            out(vec![a.shape[0], a.shape[1], b.shape[2]], a.dtype)
        }
        Op::Matmul => {
            count(args, 2)?;
            let (a, b) = (tensor(args, 0)?, tensor(args, 1)?);
            same_dtype(&[a, b])?;
            out(matmul_shape(&a.shape, &b.shape)?, a.dtype)
        }
        Op::Cat { dim } => cat(args, *dim),
        Op::Arange {
            start,
            end,
            step,
            dtype,
        } => infer_model::arange(*start, *end, *step, *dtype, args),
        Op::Full { size, value, dtype } => infer_model::full(size.as_deref(), *value, *dtype, args),
        Op::Index { indexed } => infer_model::index(indexed, args),
        Op::Gather { dim } => infer_model::gather(*dim, args),
        Op::Cumsum { dim, dtype } => infer_model::cumsum(*dim, *dtype, args),
        Op::Diff { n, dim, .. } => infer_model::diff(*n, *dim, args),
        Op::Attention { mask, gqa, .. } => infer_model::attention(*mask, *gqa, args),
        Op::Conv {
            stride,
            padding,
            dilation,
            groups,
            bias,
        } => infer_model::conv(stride, padding, dilation, *groups, *bias, args),
        Op::BatchNorm {
            weight,
            bias,
            native,
            ..
        } => infer_model::batch_norm(*weight, *bias, *native, args),
        Op::MaxPool {
            kernel,
            stride,
            padding,
            dilation,
            ceil_mode,
            with_indices,
        } => infer_model::max_pool(
            kernel,
            stride,
            padding,
            dilation,
            *ceil_mode,
            *with_indices,
            args,
        ),
        Op::AdaptiveAvgPool { output_size } => infer_model::adaptive_avg_pool(output_size, args),
        Op::AvgPool {
            kernel,
            stride,
            padding,
            ceil_mode,
            ..
        } => infer_model::avg_pool(kernel, stride, padding, *ceil_mode, args),
        Op::GroupNorm {
            groups,
            weight,
            bias,
            native,
            ..
        } => infer_model::group_norm(*groups, *weight, *bias, *native, args),
        Op::Pad { pads, mode, .. } => layout::pad(pads, *mode, args),
        Op::Roll { shifts, dims } => layout::roll(shifts, dims, args),
        Op::SliceScatter {
            dim,
            start,
            end,
            step,
            select,
        } => layout::slice_scatter(*dim, *start, *end, *step, *select, args),
        Op::Copy => layout::copy(args),
        Op::TypeAs => layout::type_as(args),
        Op::Repeat { repeats } => layout::repeat(repeats, args),
        Op::AsStrided {
            size,
            stride,
            offset,
        } => layout::as_strided(size, stride, *offset, args),
        op if views::describes(op) => view(op, args),
        other => invalid(format!("no inference rule for `{}`", other.name())),
    }
}

/// Every output of a view op: the shape its [`views::view_map`] gives, with
/// PyTorch's strides (a copy, or a reshape that cannot be a view, is contiguous).
fn view(op: &Op, args: &[ArgMeta]) -> Result<Vec<TensorMeta>, InferError> {
    count(args, 1)?;
    let t = tensor(args, 0)?;
    (0..views::output_count(op, &t.shape)?)
        .map(|k| {
            let map = views::view_map(op, &t.shape, k as u32)?;
            let strides = match map.restride(&t.strides, 0) {
                Some((strides, _)) if !views::copies(op) => strides,
                _ => contiguous_strides(&map.out_shape),
            };
            Ok(TensorMeta {
                shape: map.out_shape,
                strides,
                dtype: t.dtype,
            })
        })
        .collect()
}

fn cat(args: &[ArgMeta], dim: i64) -> Result<Vec<TensorMeta>, InferError> {
    let first = tensor(args, 0)?;
    if first.rank() == 0 {
        return invalid("cat of 0-d tensors");
    }
    let d = wrap_dim(dim, first.rank())?;
    let mut shape = first.shape.clone();
    let mut dtype = first.dtype;
    shape[d] = 0;
    for i in 0..args.len() {
        let t = tensor(args, i)?;
        let mut a = t.shape.clone();
        let mut b = first.shape.clone();
        if t.rank() == first.rank() {
            a[d] = 0;
            b[d] = 0;
        }
        if a != b {
            return Err(InferError::Mismatch {
                what: format!("cat: operand {i} differs outside dim {d}"),
                a: first.shape.clone(),
                b: t.shape.clone(),
            });
        }
        shape[d] = shape[d]
            .checked_add(t.shape[d])
            .ok_or_else(|| ShapeError::Size(t.shape.clone()))?;
        dtype = promote(dtype, t.dtype);
    }
    out(shape, dtype)
}

fn same_dtype(ts: &[&TensorMeta]) -> Result<(), InferError> {
    if let Some(t) = ts.iter().find(|t| t.dtype != ts[0].dtype) {
        return invalid(format!(
            "operands must have the same dtype, found {} and {}",
            ts[0].dtype, t.dtype
        ));
    }
    Ok(())
}

fn check_norm(t: &TensorMeta, ns: &[i64], params: &[ArgMeta]) -> Result<(), InferError> {
    if ns.is_empty() || ns.len() > t.rank() || t.shape[t.rank() - ns.len()..] != *ns {
        return Err(InferError::Mismatch {
            what: "normalized_shape must be the input's trailing dims".into(),
            a: t.shape.clone(),
            b: ns.to_vec(),
        });
    }
    for p in params {
        let p = match p {
            ArgMeta::Tensor(p) => p,
            ArgMeta::Scalar(_) => return invalid("weight/bias must be tensors"),
        };
        if p.shape != ns {
            return Err(InferError::Mismatch {
                what: "weight/bias must have the normalized_shape".into(),
                a: p.shape.clone(),
                b: ns.to_vec(),
            });
        }
    }
    Ok(())
}

/// The shape of a reduction over `dims` (all when `None`).
pub fn reduced_shape(
    shape: &[i64],
    dims: Option<&[i64]>,
    keepdim: bool,
) -> Result<Shape, InferError> {
    let ds = wrap_dim_set(dims, shape.len())?;
    let mut s = Vec::with_capacity(shape.len());
    for (i, &d) in shape.iter().enumerate() {
        if ds.contains(&i) {
            if keepdim {
                s.push(1);
            }
        } else {
            s.push(d);
        }
    }
    Ok(s)
}

fn mm_shape(a: &TensorMeta, b: &TensorMeta) -> Result<Shape, InferError> {
    if a.rank() != 2 || b.rank() != 2 || a.shape[1] != b.shape[0] {
        return Err(InferError::Mismatch {
            what: "mm needs [n, k] and [k, m]".into(),
            a: a.shape.clone(),
            b: b.shape.clone(),
        });
    }
    Ok(vec![a.shape[0], b.shape[1]])
}

/// `torch.matmul`'s output shape: 1-D operands get a dim prepended/appended and removed
/// afterwards, batch dims broadcast.
pub fn matmul_shape(a: &[i64], b: &[i64]) -> Result<Shape, InferError> {
    let mismatch = || InferError::Mismatch {
        what: "matmul: inner dims differ or batch dims do not broadcast".into(),
        a: a.to_vec(),
        b: b.to_vec(),
    };
    if a.is_empty() || b.is_empty() {
        return Err(mismatch());
    }
    let a2: Shape = if a.len() == 1 {
        vec![1, a[0]]
    } else {
        a.to_vec()
    };
    let b2: Shape = if b.len() == 1 {
        vec![b[0], 1]
    } else {
        b.to_vec()
    };
    let (n, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let (k2, m) = (b2[b2.len() - 2], b2[b2.len() - 1]);
    if k != k2 {
        return Err(mismatch());
    }
    let mut s = broadcast(&a2[..a2.len() - 2], &b2[..b2.len() - 2]).map_err(|_| mismatch())?;
    if a.len() > 1 {
        s.push(n);
    }
    if b.len() > 1 {
        s.push(m);
    }
    Ok(s)
}
