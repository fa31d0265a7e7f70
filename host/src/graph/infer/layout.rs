//! Inference rules of the ops that move elements without computing new values:
//! `pad`, `roll`, `slice_scatter`/`select_scatter`, `copy`, `type_as` and `as_strided`.
//! Same contract as `infer.rs`: PyTorch's shapes, dtypes and error checks, never a panic.

use super::model::{count, invalid, one, tensor};
use super::{ArgMeta, InferError};
use crate::graph::ir::FixedMeta;
use crate::graph::ops::PadMode;
use crate::graph::shape::{broadcast, numel, slice_bounds, wrap_dim, Shape};

/// The (dim, before, after) amounts of a flat `pad` list: pairs from the last dim
/// backwards, as `torch.nn.functional.pad` reads them.
pub fn pad_amounts(pads: &[i64], rank: usize) -> Result<Vec<(usize, i64, i64)>, InferError> {
    if !pads.len().is_multiple_of(2) || pads.len() / 2 > rank {
        return invalid(format!(
            "pad: {} amounts for a {rank}-d tensor (pairs, at most one per dim)",
            pads.len()
        ));
    }
    Ok(pads
        .chunks(2)
        .enumerate()
        .map(|(i, p)| (rank - 1 - i, p[0], p[1]))
        .collect())
}

pub(super) fn pad(
    pads: &[i64],
    mode: PadMode,
    args: &[ArgMeta],
) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 1)?;
    let x = tensor(args, 0)?;
    let mut shape = x.shape.clone();
    for (d, before, after) in pad_amounts(pads, x.rank())? {
        let size = x.shape[d];
        if mode != PadMode::Constant {
            if before < 0 || after < 0 {
                return invalid(format!(
                    "pad: {mode:?} padding must not be negative, found {pads:?}"
                ));
            }
            let limit = match mode {
                PadMode::Reflect => size - 1,
                PadMode::Circular => size,
                _ => i64::MAX,
            };
            if size == 0 || before > limit || after > limit {
                return invalid(format!(
                    "pad: {mode:?} padding of ({before}, {after}) does not fit dim {d} of size {size}"
                ));
            }
            if x.rank() - d > 3 {
                return invalid(format!(
                    "pad: {mode:?} padding applies to the last three dims at most, found {} pairs",
                    pads.len() / 2
                ));
            }
        }
        let n = size.saturating_add(before).saturating_add(after);
        if n < 0 {
            return invalid(format!(
                "pad: ({before}, {after}) leaves dim {d} of size {size} with a negative size"
            ));
        }
        shape[d] = n;
    }
    one(shape, x.dtype)
}

pub(super) fn roll(
    shifts: &[i64],
    dims: &[i64],
    args: &[ArgMeta],
) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 1)?;
    let x = tensor(args, 0)?;
    if dims.is_empty() {
        if shifts.len() != 1 {
            return invalid(format!(
                "roll: without dims, one shift for the flattened tensor, found {shifts:?}"
            ));
        }
    } else if dims.len() != shifts.len() {
        return invalid(format!(
            "roll: {} shifts for {} dims",
            shifts.len(),
            dims.len()
        ));
    }
    for &d in dims {
        wrap_dim(d, x.rank())?;
    }
    one(x.shape.clone(), x.dtype)
}

/// The shape of the slice a `slice_scatter` (or `select_scatter`) writes, with the first
/// index and the slice length along `dim`.
pub fn scatter_slice(
    shape: &[i64],
    dim: i64,
    start: Option<i64>,
    end: Option<i64>,
    step: i64,
    select: bool,
) -> Result<(usize, i64, i64, Shape), InferError> {
    if shape.is_empty() {
        return invalid("slice_scatter into a 0-d tensor");
    }
    let d = wrap_dim(dim, shape.len())?;
    let size = shape[d];
    if select {
        let index = start.unwrap_or(0);
        let i = if index < 0 {
            index.saturating_add(size)
        } else {
            index
        };
        if !(0..size).contains(&i) {
            return invalid(format!(
                "select_scatter: index {index} is out of range for dim {d} of size {size}"
            ));
        }
        let mut s = shape.to_vec();
        s.remove(d);
        return Ok((d, i, 1, s));
    }
    if step <= 0 {
        return invalid(format!(
            "slice_scatter: step must be positive, found {step}"
        ));
    }
    let (lo, len) = slice_bounds(size, start, end, step);
    let mut s = shape.to_vec();
    s[d] = len;
    Ok((d, lo, len, s))
}

pub(super) fn slice_scatter(
    dim: i64,
    start: Option<i64>,
    end: Option<i64>,
    step: i64,
    select: bool,
    args: &[ArgMeta],
) -> Result<Vec<FixedMeta>, InferError> {
    let op = if select {
        "select_scatter"
    } else {
        "slice_scatter"
    };
    count(args, 2)?;
    let (x, src) = (tensor(args, 0)?, tensor(args, 1)?);
    let (_, _, _, want) = scatter_slice(&x.shape, dim, start, end, step, select)?;
    if src.shape != want {
        return invalid(format!(
            "{op}: src has shape {:?}, the slice of self it replaces has {want:?}",
            src.shape
        ));
    }
    one(x.shape.clone(), x.dtype)
}

pub(super) fn copy(args: &[ArgMeta]) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 2)?;
    let x = tensor(args, 0)?;
    if let Some(ArgMeta::Tensor(src)) = args.get(1) {
        if broadcast(&x.shape, &src.shape).ok().as_ref() != Some(&x.shape) {
            return invalid(format!(
                "copy: src of shape {:?} does not broadcast to self's {:?}",
                src.shape, x.shape
            ));
        }
    }
    one(x.shape.clone(), x.dtype)
}

pub(super) fn repeat(repeats: &[i64], args: &[ArgMeta]) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 1)?;
    let x = tensor(args, 0)?;
    if repeats.len() < x.rank() || repeats.iter().any(|&r| r < 0) {
        return invalid(format!(
            "repeat: {repeats:?} must give a non-negative count for each of the {} dims (and any leading ones)",
            x.rank()
        ));
    }
    let lead = repeats.len() - x.rank();
    let mut shape = repeats.to_vec();
    for (d, &s) in x.shape.iter().enumerate() {
        shape[lead + d] = s
            .checked_mul(repeats[lead + d])
            .ok_or_else(|| InferError::Invalid("repeat: the size overflows".into()))?;
    }
    one(shape, x.dtype)
}

pub(super) fn type_as(args: &[ArgMeta]) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 2)?;
    let (x, other) = (tensor(args, 0)?, tensor(args, 1)?);
    one(x.shape.clone(), other.dtype)
}

pub(super) fn as_strided(
    size: &[i64],
    stride: &[i64],
    offset: i64,
    args: &[ArgMeta],
) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 1)?;
    let x = tensor(args, 0)?;
    if size.len() != stride.len() {
        return invalid(format!(
            "as_strided: {} sizes and {} strides",
            size.len(),
            stride.len()
        ));
    }
    if size.iter().any(|&s| s < 0) || stride.iter().any(|&s| s < 0) || offset < 0 {
        return invalid(format!(
            "as_strided: sizes {size:?}, strides {stride:?} and offset {offset} must not be negative"
        ));
    }
    let n = numel(size)?;
    if n > 0 {
        let last = size.iter().zip(stride).try_fold(offset, |acc, (&s, &t)| {
            acc.checked_add((s - 1).checked_mul(t)?)
        });
        let have = numel(&x.shape)?;
        if last.is_none_or(|l| l >= have) {
            return invalid(format!(
                "as_strided: sizes {size:?} with strides {stride:?} from offset {offset} reach past the {have} elements of self"
            ));
        }
    }
    one(size.to_vec(), x.dtype)
}
