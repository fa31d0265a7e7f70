//! Views and data movement in the interpreter: zero-copy where PyTorch's op is a view
//! (strides and offsets only), copies for `contiguous`, `clone`, `cat` and non-viewable
//! reshapes. Must never compute element values.

use super::Val;
use crate::graph::infer_views::split_sizes;
use crate::graph::shape::{contiguous_strides, is_contiguous, wrap_dim, wrap_dims};
use crate::graph::{Op, TensorMeta};
use crate::tensor::Tensor;

fn t0<'a>(args: &[Val<'a>]) -> Result<&'a Tensor, String> {
    match args.first() {
        Some(Val::Tensor(t)) => Ok(t),
        _ => Err("operand 0 must be a tensor".into()),
    }
}

/// Evaluates a view/data-movement op, or returns `None` for other ops.
pub(crate) fn eval_view(
    op: &Op,
    args: &[Val],
    outs: &[TensorMeta],
) -> Result<Option<Vec<Tensor>>, String> {
    let out = outs.first().ok_or("no output metadata")?;
    let r = match op {
        Op::Reshape { .. } => {
            let t = t0(args)?;
            let t = if is_contiguous(&t.shape, &t.strides) {
                t.clone()
            } else {
                t.contiguous()
            };
            vec![t.view(out.shape.clone(), contiguous_strides(&out.shape), t.offset)]
        }
        Op::Permute { .. }
        | Op::Transpose { .. }
        | Op::Unsqueeze { .. }
        | Op::Squeeze { .. }
        | Op::Expand { .. } => {
            // Shape inference already worked out the view's shape and strides relative to a
            // tensor laid out like the input; apply the same transformation to the actual
            // strides, which may differ (the input may itself be a view).
            let t = t0(args)?;
            vec![restride(op, t, out)?]
        }
        Op::Select { dim, index } => {
            let t = t0(args)?;
            let d = wrap_dim(*dim, t.shape.len()).map_err(|e| e.to_string())?;
            let i = if *index < 0 {
                index + t.shape[d]
            } else {
                *index
            };
            let (mut s, mut st) = (t.shape.clone(), t.strides.clone());
            let off = t.offset + i * st[d];
            s.remove(d);
            st.remove(d);
            vec![t.view(s, st, off)]
        }
        Op::Slice {
            dim,
            start,
            end,
            step,
        } => {
            let t = t0(args)?;
            let d = wrap_dim(*dim, t.shape.len()).map_err(|e| e.to_string())?;
            let (s0, len) = crate::graph::shape::slice_bounds(t.shape[d], *start, *end, *step);
            let (mut s, mut st) = (t.shape.clone(), t.strides.clone());
            let off = t.offset + s0 * st[d];
            s[d] = len;
            st[d] *= step;
            vec![t.view(s, st, off)]
        }
        Op::Split { split_size, dim } => {
            let t = t0(args)?;
            let meta = TensorMeta {
                shape: t.shape.clone(),
                strides: t.strides.clone(),
                dtype: t.dtype,
            };
            let sizes = split_sizes(&meta, *split_size, *dim).map_err(|e| e.to_string())?;
            split(t, &sizes, *dim)?
        }
        Op::SplitWithSizes { sizes, dim } => split(t0(args)?, sizes, *dim)?,
        Op::GetItem { .. } | Op::NoOp(_) => vec![t0(args)?.clone()],
        Op::Contiguous | Op::Clone => vec![t0(args)?.contiguous()],
        Op::Cat { dim } => {
            let ts: Vec<&Tensor> = args
                .iter()
                .filter_map(|a| match a {
                    Val::Tensor(t) => Some(*t),
                    Val::Scalar(_) => None,
                })
                .collect();
            let d = wrap_dim(*dim, out.shape.len()).map_err(|e| e.to_string())?;
            let outer: i64 = out.shape[..d].iter().product();
            let mut vals = Vec::with_capacity(out.numel() as usize);
            let parts: Vec<Vec<f64>> = ts.iter().map(|t| t.to_vec()).collect();
            for o in 0..outer {
                for (t, p) in ts.iter().zip(&parts) {
                    // Each part's rows of the concatenated dim, for this outer index.
                    let chunk: i64 = t.shape[d..].iter().product();
                    let start = (o * chunk) as usize;
                    vals.extend(p.iter().skip(start).take(chunk as usize).copied());
                }
            }
            vec![Tensor::new(out.shape.clone(), out.dtype, vals)]
        }
        _ => return Ok(None),
    };
    Ok(Some(r))
}

fn split(t: &Tensor, sizes: &[i64], dim: i64) -> Result<Vec<Tensor>, String> {
    let d = wrap_dim(dim, t.shape.len()).map_err(|e| e.to_string())?;
    let mut at = 0;
    Ok(sizes
        .iter()
        .map(|&s| {
            let mut shape = t.shape.clone();
            shape[d] = s;
            let v = t.view(shape, t.strides.clone(), t.offset + at * t.strides[d]);
            at += s;
            v
        })
        .collect())
}

fn restride(op: &Op, t: &Tensor, out: &TensorMeta) -> Result<Tensor, String> {
    let rank = t.shape.len();
    let st = &t.strides;
    let strides: Vec<i64> = match op {
        Op::Permute { dims } => wrap_dims(Some(dims), rank)
            .map_err(|e| e.to_string())?
            .iter()
            .map(|&d| st[d])
            .collect(),
        Op::Transpose { dim0, dim1 } => {
            let mut s = st.clone();
            if rank > 0 {
                let a = wrap_dim(*dim0, rank).map_err(|e| e.to_string())?;
                let b = wrap_dim(*dim1, rank).map_err(|e| e.to_string())?;
                s.swap(a, b);
            }
            s
        }
        Op::Unsqueeze { dim } => {
            let d = wrap_dim(*dim, rank + 1).map_err(|e| e.to_string())?;
            let mut s = st.clone();
            s.insert(d, 0);
            s
        }
        Op::Squeeze { dims } => {
            let ds = wrap_dims(dims.as_deref(), rank).map_err(|e| e.to_string())?;
            (0..rank)
                .filter(|&i| !(ds.contains(&i) && t.shape[i] == 1))
                .map(|i| st[i])
                .collect()
        }
        Op::Expand { .. } => t.broadcast_strides(&out.shape),
        _ => return Err("not a restriding view".into()),
    };
    Ok(t.view(out.shape.clone(), strides, t.offset))
}
