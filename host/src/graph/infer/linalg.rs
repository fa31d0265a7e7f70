//! Inference rules of the matrix products: `linear`, `addmm`/`baddbmm`, `mm`, `bmm`
//! and `matmul`. Operands must share a dtype.

use super::{count, infer, matmul_shape, mm_shape, out, same_dtype, tensor, ArgMeta, InferError};
use crate::graph::ir::FixedMeta;
use crate::graph::ops::Op;
use crate::graph::shape::broadcast;

/// `linear(x, w, bias?)`: `x`'s last dim times `w` of `[out, in]`.
pub(super) fn linear(bias: bool, args: &[ArgMeta]) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 2 + bias as usize)?;
    let x = tensor(args, 0)?;
    let w = tensor(args, 1)?;
    if w.rank() != 2 || x.rank() < 1 || x.shape[x.rank() - 1] != w.shape[1] {
        return Err(InferError::Mismatch {
            what: "linear: input's last dim must equal weight's dim 1 (weight is [out, in])".into(),
            a: x.shape.clone(),
            b: w.shape.clone(),
        });
    }
    same_dtype(&[x, w])?;
    let mut s = x.shape.clone();
    let last = s.len() - 1;
    s[last] = w.shape[0];
    if bias {
        let b = tensor(args, 2)?;
        broadcast(&s, &b.shape).map_err(|_| InferError::Mismatch {
            what: "linear: bias does not broadcast to the output".into(),
            a: s.clone(),
            b: b.shape.clone(),
        })?;
    }
    out(s, x.dtype)
}

/// `addmm(c, a, b)` (`baddbmm` when batched): `c` expands to the product's shape.
pub(super) fn addmm(args: &[ArgMeta]) -> Result<Vec<FixedMeta>, InferError> {
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

/// `mm` of `[n, k]` and `[k, m]`.
pub(super) fn mm(args: &[ArgMeta]) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 2)?;
    let (a, b) = (tensor(args, 0)?, tensor(args, 1)?);
    same_dtype(&[a, b])?;
    out(mm_shape(a, b)?, a.dtype)
}

/// `bmm` of `[b, n, k]` and `[b, k, m]`.
pub(super) fn bmm(args: &[ArgMeta]) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 2)?;
    let (a, b) = (tensor(args, 0)?, tensor(args, 1)?);
    same_dtype(&[a, b])?;
    if a.rank() != 3 || b.rank() != 3 || a.shape[0] != b.shape[0] || a.shape[2] != b.shape[1] {
        return Err(InferError::Mismatch {
            what: "bmm needs [b, n, k] and [b, k, m]".into(),
            a: a.shape.clone(),
            b: b.shape.clone(),
        });
    }
    out(vec![a.shape[0], a.shape[1], b.shape[2]], a.dtype)
}

/// `matmul` with `torch.matmul`'s rules ([`matmul_shape`]).
pub(super) fn matmul(args: &[ArgMeta]) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 2)?;
    let (a, b) = (tensor(args, 0)?, tensor(args, 1)?);
    same_dtype(&[a, b])?;
    out(matmul_shape(&a.shape, &b.shape)?, a.dtype)
}
