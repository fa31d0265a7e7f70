//! Inference rules of the elementwise ops: unary functions, `gelu`, binary arithmetic
//! and comparisons, `where`, `clamp` and casts. Each broadcasts its operands and
//! promotes their dtypes as PyTorch does, and refuses the dtypes PyTorch refuses.

use super::{count, elementwise, float_of, invalid, op_name, out, tensor, ArgMeta, InferError};
use crate::graph::dtype::{result_type, DType, OperandKind};
use crate::graph::ir::{FixedMeta, Scalar};
use crate::graph::ops::{BinaryOp, UnaryOp};

/// A unary function: integer inputs of the functions that need it become float.
pub(super) fn unary(u: UnaryOp, args: &[ArgMeta]) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 1)?;
    let t = tensor(args, 0)?;
    let d = if u.promotes_int_to_float() {
        float_of(t.dtype)
    } else {
        t.dtype
    };
    if t.dtype == DType::Bool && matches!(u, UnaryOp::Neg) {
        return invalid("neg is not defined for bool tensors");
    }
    if matches!(u, UnaryOp::Hardsigmoid | UnaryOp::Hardswish) && !t.dtype.is_float() {
        return invalid(format!(
            "{u:?} needs a floating-point tensor, found {}",
            t.dtype
        ));
    }
    out(t.shape.clone(), d)
}

/// `gelu`, of floating-point tensors only.
pub(super) fn gelu(args: &[ArgMeta]) -> Result<Vec<FixedMeta>, InferError> {
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

/// A binary op: comparisons give bool, `div` a float.
pub(super) fn binary(op: BinaryOp, args: &[ArgMeta]) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 2)?;
    if !args.iter().any(|a| matches!(a, ArgMeta::Tensor(_))) {
        return invalid("at least one operand must be a tensor");
    }
    let (shape, d) = elementwise(args)?;
    let d = if op.is_comparison() {
        DType::Bool
    } else if matches!(op, BinaryOp::Fmod | BinaryOp::Remainder) && d == DType::Bool {
        return invalid(format!("{} is not defined for bool operands", op_name(op)));
    } else if op.is_bitwise() && d.is_float() {
        return invalid(format!(
            "{} is defined for integer and bool tensors, found {d}",
            op_name(op)
        ));
    } else if op.is_float_valued() {
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

/// `where(cond, a, b)`: a bool condition, the branches' promoted dtype.
pub(super) fn where_(args: &[ArgMeta]) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 3)?;
    let c = tensor(args, 0)?;
    if c.dtype != DType::Bool {
        return invalid(format!("where's condition must be bool, found {}", c.dtype));
    }
    let (shape, _) = elementwise(args)?;
    let (_, d) = elementwise(&args[1..])?;
    out(shape, d)
}

/// `clamp` to `min`, `max` or both; the bounds take part in promotion as numbers.
pub(super) fn clamp(
    min: Option<Scalar>,
    max: Option<Scalar>,
    args: &[ArgMeta],
) -> Result<Vec<FixedMeta>, InferError> {
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

/// A cast to `dtype`.
pub(super) fn cast(dtype: DType, args: &[ArgMeta]) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 1)?;
    out(tensor(args, 0)?.shape.clone(), dtype)
}
