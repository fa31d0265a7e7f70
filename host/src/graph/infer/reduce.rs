//! Inference rules of the reductions and normalisations: `sum`/`mean`/`amax`/...,
//! `var`, `softmax`, `layer_norm` and `rms_norm`.

use super::{
    check_norm, count, float_of, invalid, out, reduced_shape, tensor, ArgMeta, InferError,
};
use crate::graph::dtype::DType;
use crate::graph::ir::FixedMeta;
use crate::graph::ops::ReduceOp;
use crate::graph::shape::{wrap_dim, wrap_dim_set};

/// A reduction over `dims` (all when `None`): `any`/`all` give bool, an integer sum
/// int64 unless `dtype` says otherwise.
pub(super) fn reduce(
    op: ReduceOp,
    dims: Option<&[i64]>,
    keepdim: bool,
    dtype: Option<DType>,
    args: &[ArgMeta],
) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 1)?;
    let t = tensor(args, 0)?;
    let shape = reduced_shape(&t.shape, dims, keepdim)?;
    let d = match (op, dtype) {
        (ReduceOp::Any | ReduceOp::All, _) => DType::Bool,
        (_, Some(d)) => d,
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
        && wrap_dim_set(dims, t.rank())?
            .iter()
            .any(|&d| t.shape[d] == 0)
    {
        return invalid("amax/amin over a dim of size 0");
    }
    out(shape, d)
}

/// `var` over `dims`, of floating-point input.
pub(super) fn var(
    dims: Option<&[i64]>,
    keepdim: bool,
    args: &[ArgMeta],
) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 1)?;
    let t = tensor(args, 0)?;
    if !t.dtype.is_float() {
        return invalid(format!(
            "var needs a floating-point input, found {}",
            t.dtype
        ));
    }
    out(reduced_shape(&t.shape, dims, keepdim)?, t.dtype)
}

/// `softmax` over `dim`, in `dtype` (or float32 for `half_to_float`).
pub(super) fn softmax(
    dim: i64,
    half_to_float: bool,
    dtype: Option<DType>,
    args: &[ArgMeta],
) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 1)?;
    let t = tensor(args, 0)?;
    wrap_dim(dim, t.rank())?;
    if half_to_float && t.dtype != DType::Float16 {
        return invalid(format!(
            "half_to_float is a conversion of float16 input (PyTorch refuses it for {})",
            t.dtype
        ));
    }
    let d = if half_to_float {
        DType::Float32
    } else {
        dtype.unwrap_or_else(|| float_of(t.dtype))
    };
    out(t.shape.clone(), d)
}

/// `layer_norm` over the trailing `normalized_shape`; the native form also gives the
/// mean and rstd per row.
pub(super) fn layer_norm(
    normalized_shape: &[i64],
    weight: bool,
    bias: bool,
    native: bool,
    args: &[ArgMeta],
) -> Result<Vec<FixedMeta>, InferError> {
    let n = 1 + weight as usize + bias as usize;
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
    if native {
        let k = t.rank() - normalized_shape.len();
        let mut s = t.shape[..k].to_vec();
        s.extend(std::iter::repeat_n(1, normalized_shape.len()));
        // The statistics are in the accumulation dtype, as PyTorch's CUDA
        // kernel (and Inductor) give them: float32 for 16-bit inputs.
        let acc = match t.dtype {
            DType::Float16 | DType::BFloat16 => DType::Float32,
            d => d,
        };
        let stat = FixedMeta::contiguous(s, acc);
        outs.push(stat.clone());
        outs.push(stat);
    }
    Ok(outs)
}

/// `rms_norm` over the trailing `normalized_shape`.
pub(super) fn rms_norm(
    normalized_shape: &[i64],
    weight: bool,
    args: &[ArgMeta],
) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 1 + weight as usize)?;
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
