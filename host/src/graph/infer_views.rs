//! Shape and stride inference for views and data movement (`reshape` … `cat`), split from
//! `infer.rs` to keep files short. Views keep PyTorch's strides so the later lowering can
//! turn them into index maps. Must never panic on any operand.

use super::infer::{resolve_reshape, slice_of, ArgMeta, InferError};
use super::ir::TensorMeta;
use super::ops::Op;
use super::shape::{contiguous_strides, is_contiguous, numel, wrap_dim, wrap_dims, ShapeError};

fn tensor<'a>(args: &[ArgMeta<'a>], i: usize) -> Result<&'a TensorMeta, InferError> {
    match args.get(i) {
        Some(ArgMeta::Tensor(t)) => Ok(t),
        _ => Err(InferError::Invalid(format!("operand {i} must be a tensor"))),
    }
}

fn meta(shape: Vec<i64>, strides: Vec<i64>, t: &TensorMeta) -> Result<Vec<TensorMeta>, InferError> {
    numel(&shape)?;
    Ok(vec![TensorMeta {
        shape,
        strides,
        dtype: t.dtype,
    }])
}

/// Inference for the view and data-movement ops.
pub fn infer_view(op: &Op, args: &[ArgMeta]) -> Result<Vec<TensorMeta>, InferError> {
    if let Op::Cat { dim } = op {
        return cat(args, *dim);
    }
    if args.len() != 1 {
        return Err(InferError::Invalid(format!(
            "expected 1 operand, found {}",
            args.len()
        )));
    }
    let t = tensor(args, 0)?;
    let rank = t.rank();
    match op {
        Op::Reshape { shape, .. } => {
            let s = resolve_reshape(&t.shape, shape)?;
            // A contiguous input is viewed in place; otherwise reshape copies. (`view` of a
            // non-viewable input would fail in PyTorch; Kiln is lenient and copies.)
            let strides = contiguous_strides(&s);
            let _ = is_contiguous(&t.shape, &t.strides);
            meta(s, strides, t)
        }
        Op::Permute { dims } => {
            let ds = wrap_dims(Some(dims), rank)?;
            if dims.len() != rank || ds.len() != rank {
                return Err(InferError::Invalid(format!(
                    "permute: dims {dims:?} are not a permutation of {rank} dims"
                )));
            }
            let shape = ds.iter().map(|&d| t.shape[d]).collect();
            let strides = ds.iter().map(|&d| t.strides[d]).collect();
            meta(shape, strides, t)
        }
        Op::Transpose { dim0, dim1 } => {
            let (a, b) = (wrap_dim(*dim0, rank)?, wrap_dim(*dim1, rank)?);
            let (mut s, mut st) = (t.shape.clone(), t.strides.clone());
            if rank > 0 {
                s.swap(a, b);
                st.swap(a, b);
            }
            meta(s, st, t)
        }
        Op::Unsqueeze { dim } => {
            let d = wrap_dim(*dim, rank + 1)?;
            let stride = if d < rank {
                t.shape[d].max(1) * t.strides[d]
            } else {
                1
            };
            let (mut s, mut st) = (t.shape.clone(), t.strides.clone());
            s.insert(d, 1);
            st.insert(d, stride);
            meta(s, st, t)
        }
        Op::Squeeze { dims } => {
            let ds = wrap_dims(dims.as_deref(), rank)?;
            let (mut s, mut st) = (vec![], vec![]);
            for i in 0..rank {
                if !(ds.contains(&i) && t.shape[i] == 1) {
                    s.push(t.shape[i]);
                    st.push(t.strides[i]);
                }
            }
            meta(s, st, t)
        }
        Op::Expand { sizes } => {
            if sizes.len() < rank {
                return Err(InferError::Mismatch {
                    what: "expand: fewer sizes than the tensor has dims".into(),
                    a: t.shape.clone(),
                    b: sizes.clone(),
                });
            }
            let lead = sizes.len() - rank;
            let (mut s, mut st) = (vec![], vec![]);
            for (i, &want) in sizes.iter().enumerate() {
                if i < lead {
                    if want < 0 {
                        return Err(ShapeError::Size(sizes.clone()).into());
                    }
                    s.push(want);
                    st.push(0);
                    continue;
                }
                let (have, stride) = (t.shape[i - lead], t.strides[i - lead]);
                if want == -1 || want == have {
                    s.push(have);
                    st.push(stride);
                } else if have == 1 && want >= 0 {
                    s.push(want);
                    st.push(0);
                } else {
                    return Err(InferError::Mismatch {
                        what: format!("expand: dim {i} of size {have} cannot become {want}"),
                        a: t.shape.clone(),
                        b: sizes.clone(),
                    });
                }
            }
            meta(s, st, t)
        }
        Op::Select { dim, index } => {
            if rank == 0 {
                return Err(InferError::Invalid("select on a 0-d tensor".into()));
            }
            let d = wrap_dim(*dim, rank)?;
            let size = t.shape[d];
            let i = if *index < 0 { index + size } else { *index };
            if i < 0 || i >= size {
                return Err(InferError::Invalid(format!(
                    "select: index {index} is out of range for dim {d} of size {size}"
                )));
            }
            let (mut s, mut st) = (t.shape.clone(), t.strides.clone());
            s.remove(d);
            st.remove(d);
            meta(s, st, t)
        }
        Op::Slice {
            dim,
            start,
            end,
            step,
        } => {
            let (d, _, len) = slice_of(t, *dim, *start, *end, *step)?;
            let (mut s, mut st) = (t.shape.clone(), t.strides.clone());
            s[d] = len;
            st[d] = st[d].saturating_mul(*step);
            meta(s, st, t)
        }
        Op::Split { split_size, dim } => {
            let sizes = split_sizes(t, *split_size, *dim)?;
            split(t, &sizes, *dim)
        }
        Op::SplitWithSizes { sizes, dim } => split(t, sizes, *dim),
        Op::GetItem { .. } | Op::NoOp(_) => Ok(vec![t.clone()]),
        Op::Contiguous | Op::Clone => meta(t.shape.clone(), contiguous_strides(&t.shape), t),
        other => Err(InferError::Invalid(format!(
            "no inference rule for `{}`",
            other.name()
        ))),
    }
}

/// The chunk sizes `split(split_size, dim)` makes (the last may be smaller).
pub fn split_sizes(t: &TensorMeta, split_size: i64, dim: i64) -> Result<Vec<i64>, InferError> {
    if t.rank() == 0 {
        return Err(InferError::Invalid("split of a 0-d tensor".into()));
    }
    let d = wrap_dim(dim, t.rank())?;
    let n = t.shape[d];
    if split_size <= 0 {
        return Err(InferError::Invalid("split_size must be positive".into()));
    }
    let mut sizes = vec![];
    let mut at = 0;
    while at < n {
        sizes.push(split_size.min(n - at));
        at += split_size;
    }
    if sizes.is_empty() {
        sizes.push(0);
    }
    Ok(sizes)
}

fn split(t: &TensorMeta, sizes: &[i64], dim: i64) -> Result<Vec<TensorMeta>, InferError> {
    if t.rank() == 0 {
        return Err(InferError::Invalid("split of a 0-d tensor".into()));
    }
    let d = wrap_dim(dim, t.rank())?;
    let total = sizes
        .iter()
        .try_fold(0i64, |a, &s| if s < 0 { None } else { a.checked_add(s) });
    if total != Some(t.shape[d]) {
        return Err(InferError::Mismatch {
            what: format!("split_with_sizes: sizes {sizes:?} must sum to dim {d}"),
            a: t.shape.clone(),
            b: sizes.to_vec(),
        });
    }
    Ok(sizes
        .iter()
        .map(|&s| {
            let mut shape = t.shape.clone();
            shape[d] = s;
            TensorMeta {
                shape,
                strides: t.strides.clone(),
                dtype: t.dtype,
            }
        })
        .collect())
}

fn cat(args: &[ArgMeta], dim: i64) -> Result<Vec<TensorMeta>, InferError> {
    let first = tensor(args, 0)?;
    let d = wrap_dim(dim, first.rank())?;
    if first.rank() == 0 {
        return Err(InferError::Invalid("cat of 0-d tensors".into()));
    }
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
        dtype = super::dtype::promote(dtype, t.dtype);
    }
    numel(&shape)?;
    Ok(vec![TensorMeta::contiguous(shape, dtype)])
}
