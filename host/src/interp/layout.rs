//! The interpreter's rules for the ops that move elements: `pad`, `roll`,
//! `slice_scatter`/`select_scatter`, `copy`, `type_as` and `as_strided`. Each computes,
//! per output element, the input element it comes from (the plainest reading of
//! PyTorch's definition), as the reference the decompositions are checked against.

use super::model::tensor;
use super::{collect, elements, filled, room, OpError, Val};
use crate::graph::infer::layout::{pad_amounts, scatter_slice};
use crate::graph::shape::{for_each_index, wrap_dim};
use crate::graph::{FixedMeta, Op, PadMode};
use crate::tensor::Tensor;

/// Evaluates one of the layout ops; `None` when `op` is not one of them.
pub(crate) fn eval(op: &Op, args: &[Val], out: &FixedMeta) -> Option<Result<Tensor, OpError>> {
    Some(match op {
        Op::Pad { pads, mode, value } => pad(pads, *mode, *value, args, out),
        Op::Roll { shifts, dims } => roll(shifts, dims, args, out),
        Op::SliceScatter {
            dim,
            start,
            end,
            step,
            select,
        } => slice_scatter(*dim, *start, *end, *step, *select, args, out),
        Op::Copy => copy(args, out),
        Op::Repeat { .. } => repeat(args, out),
        Op::TypeAs => type_as(args, out),
        Op::AsStrided {
            size,
            stride,
            offset,
        } => as_strided(size, stride, *offset, args, out),
        _ => return None,
    })
}

/// The source index along a padded dim of `size` for output position `i` (`before`
/// elements were added in front), or `None` where the constant fills in.
pub fn pad_source(mode: PadMode, i: i64, before: i64, size: i64) -> Option<i64> {
    let j = i - before;
    if (0..size).contains(&j) {
        return Some(j);
    }
    match mode {
        PadMode::Constant => None,
        PadMode::Replicate => Some(j.clamp(0, size - 1)),
        PadMode::Circular => Some(j.rem_euclid(size)),
        PadMode::Reflect => {
            if size == 1 {
                return Some(0);
            }
            let period = 2 * (size - 1);
            let m = j.rem_euclid(period);
            Some(if m < size { m } else { period - m })
        }
    }
}

fn pad(
    pads: &[i64],
    mode: PadMode,
    value: f64,
    args: &[Val],
    out: &FixedMeta,
) -> Result<Tensor, OpError> {
    let x = tensor(args, 0)?;
    let mut before = vec![0i64; x.shape.len()];
    for (d, b, _) in pad_amounts(pads, x.shape.len()).map_err(|e| e.to_string())? {
        before[d] = b;
    }
    let mut vals = room(out.numel() as usize)?;
    let mut src = vec![0i64; x.shape.len()];
    for_each_index(&out.shape, |idx| {
        let inside = idx.iter().enumerate().all(|(d, &i)| {
            match pad_source(mode, i, before[d], x.shape[d]) {
                Some(j) => {
                    src[d] = j;
                    true
                }
                None => false,
            }
        });
        vals.push(if inside { x.at(&src) } else { value });
    });
    Ok(Tensor::new(out.shape.clone(), out.dtype, vals))
}

fn roll(shifts: &[i64], dims: &[i64], args: &[Val], out: &FixedMeta) -> Result<Tensor, OpError> {
    let x = tensor(args, 0)?;
    if dims.is_empty() {
        let xv = elements(x)?;
        let n = xv.len() as i64;
        let s = shifts.first().copied().unwrap_or(0).rem_euclid(n.max(1));
        let vals = collect(
            xv.len(),
            (0..n).map(|i| xv[(i - s).rem_euclid(n.max(1)) as usize]),
        )?;
        return Ok(Tensor::new(out.shape.clone(), out.dtype, vals));
    }
    let rank = x.shape.len();
    let mut shift = vec![0i64; rank];
    for (&d, &s) in dims.iter().zip(shifts) {
        let d = wrap_dim(d, rank).map_err(|e| e.to_string())?;
        shift[d] = (shift[d] + s.rem_euclid(x.shape[d].max(1))).rem_euclid(x.shape[d].max(1));
    }
    let mut vals = room(out.numel() as usize)?;
    let mut src = vec![0i64; rank];
    for_each_index(&out.shape, |idx| {
        for d in 0..rank {
            src[d] = (idx[d] - shift[d]).rem_euclid(x.shape[d].max(1));
        }
        vals.push(x.at(&src));
    });
    Ok(Tensor::new(out.shape.clone(), out.dtype, vals))
}

fn slice_scatter(
    dim: i64,
    start: Option<i64>,
    end: Option<i64>,
    step: i64,
    select: bool,
    args: &[Val],
    out: &FixedMeta,
) -> Result<Tensor, OpError> {
    let (x, src) = (tensor(args, 0)?, tensor(args, 1)?);
    let (d, lo, len, _) =
        scatter_slice(&x.shape, dim, start, end, step, select).map_err(|e| e.to_string())?;
    let mut vals = room(out.numel() as usize)?;
    let mut at = Vec::with_capacity(x.shape.len());
    for_each_index(&out.shape, |idx| {
        let i = idx[d] - lo;
        if i >= 0 && i % step == 0 && i / step < len {
            at.clear();
            at.extend_from_slice(idx);
            if select {
                at.remove(d);
            } else {
                at[d] = i / step;
            }
            vals.push(src.at(&at));
        } else {
            vals.push(x.at(idx));
        }
    });
    Ok(Tensor::new(out.shape.clone(), out.dtype, vals))
}

fn copy(args: &[Val], out: &FixedMeta) -> Result<Tensor, OpError> {
    let n = out.numel() as usize;
    match args.get(1) {
        Some(Val::Scalar(s)) => Ok(Tensor::new(
            out.shape.clone(),
            out.dtype,
            filled(n, s.to_f64())?,
        )),
        Some(Val::Tensor(src)) => {
            let b = src.view(
                out.shape.clone(),
                src.broadcast_strides(&out.shape),
                src.offset,
            );
            Ok(Tensor::new(out.shape.clone(), out.dtype, elements(&b)?))
        }
        None => Err("copy needs a source".into()),
    }
}

fn repeat(args: &[Val], out: &FixedMeta) -> Result<Tensor, OpError> {
    let x = tensor(args, 0)?;
    let lead = out.shape.len() - x.shape.len();
    let mut vals = room(out.numel() as usize)?;
    let mut src = vec![0i64; x.shape.len()];
    for_each_index(&out.shape, |idx| {
        for (d, s) in src.iter_mut().enumerate() {
            *s = idx[lead + d] % x.shape[d].max(1);
        }
        vals.push(x.at(&src));
    });
    Ok(Tensor::new(out.shape.clone(), out.dtype, vals))
}

fn type_as(args: &[Val], out: &FixedMeta) -> Result<Tensor, OpError> {
    let x = tensor(args, 0)?;
    Ok(Tensor::new(out.shape.clone(), out.dtype, elements(x)?))
}

fn as_strided(
    size: &[i64],
    stride: &[i64],
    offset: i64,
    args: &[Val],
    out: &FixedMeta,
) -> Result<Tensor, OpError> {
    let xv = elements(tensor(args, 0)?)?;
    let mut vals = room(out.numel() as usize)?;
    let mut bad = None;
    for_each_index(size, |idx| {
        let p = offset + idx.iter().zip(stride).map(|(i, s)| i * s).sum::<i64>();
        match xv.get(p as usize) {
            Some(&v) if p >= 0 => vals.push(v),
            _ => {
                bad.get_or_insert(p);
                vals.push(f64::NAN);
            }
        }
    });
    if let Some(p) = bad {
        return Err(format!(
            "as_strided reads element {p} of a tensor of {} elements",
            xv.len()
        )
        .into());
    }
    Ok(Tensor::new(out.shape.clone(), out.dtype, vals))
}
