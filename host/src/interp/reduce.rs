//! Reductions, normalisations, softmax and matrix products of the interpreter. Each works
//! on a contiguous float64 copy of its input and rounds once at the end; none of them may
//! alias storage.

use super::{map_n, Val};
use crate::graph::infer::matmul_shape;
use crate::graph::shape::{contiguous_strides, for_each_index, wrap_dim, wrap_dims};
use crate::graph::{DType, ReduceOp, TensorMeta};
use crate::tensor::Tensor;

/// For each input element, the flat position of its output in a keepdim-shaped result.
fn reduce_positions(shape: &[i64], dims: &[usize]) -> (Vec<usize>, usize) {
    let kept: Vec<i64> = shape
        .iter()
        .enumerate()
        .map(|(i, &d)| if dims.contains(&i) { 1 } else { d })
        .collect();
    let mut st = contiguous_strides(&kept);
    for &d in dims {
        st[d] = 0;
    }
    let n_out = kept.iter().map(|&d| d.max(0) as usize).product();
    let mut pos = Vec::new();
    for_each_index(shape, |idx| {
        pos.push(idx.iter().zip(&st).map(|(i, s)| i * s).sum::<i64>() as usize)
    });
    (pos, n_out)
}

/// `sum mean amax amin` over `dims` (all when `None`).
pub(crate) fn reduce(
    x: &Tensor,
    dims: Option<&[i64]>,
    out: &TensorMeta,
    op: ReduceOp,
    _init: f64,
) -> Result<Tensor, String> {
    let ds = wrap_dims(dims, x.shape.len()).map_err(|e| e.to_string())?;
    let (pos, n_out) = reduce_positions(&x.shape, &ds);
    let vals = x.to_vec();
    let init = match op {
        ReduceOp::Sum | ReduceOp::Mean => 0.0,
        ReduceOp::Amax => f64::NEG_INFINITY,
        ReduceOp::Amin => f64::INFINITY,
    };
    let mut acc = vec![init; n_out];
    let mut count = vec![0usize; n_out];
    for (v, &p) in vals.iter().zip(&pos) {
        let a = &mut acc[p];
        *a = match op {
            ReduceOp::Sum | ReduceOp::Mean => *a + v,
            ReduceOp::Amax if v.is_nan() || a.is_nan() => f64::NAN,
            ReduceOp::Amin if v.is_nan() || a.is_nan() => f64::NAN,
            ReduceOp::Amax => a.max(*v),
            ReduceOp::Amin => a.min(*v),
        };
        count[p] += 1;
    }
    if op == ReduceOp::Mean {
        for (a, c) in acc.iter_mut().zip(&count) {
            *a /= *c as f64;
        }
    }
    Ok(Tensor::new(out.shape.clone(), out.dtype, acc))
}

/// `var` with `correction`, given the (unrounded) means per output.
pub(crate) fn var(
    x: &Tensor,
    dims: Option<&[i64]>,
    out: &TensorMeta,
    mean: &[f64],
    correction: f64,
) -> Result<Tensor, String> {
    let ds = wrap_dims(dims, x.shape.len()).map_err(|e| e.to_string())?;
    let (pos, n_out) = reduce_positions(&x.shape, &ds);
    let mut acc = vec![0.0; n_out];
    let mut count = vec![0usize; n_out];
    for (v, &p) in x.to_vec().iter().zip(&pos) {
        let d = v - mean.get(p).copied().unwrap_or(f64::NAN);
        acc[p] += d * d;
        count[p] += 1;
    }
    let vals = acc
        .iter()
        .zip(&count)
        .map(|(a, &c)| a / (c as f64 - correction).max(0.0))
        .collect();
    Ok(Tensor::new(out.shape.clone(), out.dtype, vals))
}

/// `softmax` / `log_softmax` along `dim`, computed stably (max subtracted).
pub(crate) fn softmax(x: &Tensor, dim: i64, log: bool, out: &TensorMeta) -> Result<Tensor, String> {
    let v = x.to_vec();
    if x.shape.is_empty() {
        return Ok(Tensor::new(
            vec![],
            out.dtype,
            vec![if log { 0.0 } else { 1.0 }],
        ));
    }
    let d = wrap_dim(dim, x.shape.len()).map_err(|e| e.to_string())?;
    let n = x.shape[d].max(0) as usize;
    let inner: usize = x.shape[d + 1..]
        .iter()
        .map(|&s| s.max(0) as usize)
        .product();
    let outer: usize = x.shape[..d].iter().map(|&s| s.max(0) as usize).product();
    let mut o = vec![0.0; v.len()];
    for a in 0..outer {
        for j in 0..inner {
            let at = |i: usize| (a * n + i) * inner + j;
            let m = (0..n).map(|i| v[at(i)]).fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = (0..n).map(|i| (v[at(i)] - m).exp()).sum();
            for i in 0..n {
                o[at(i)] = if log {
                    v[at(i)] - m - s.ln()
                } else {
                    (v[at(i)] - m).exp() / s
                };
            }
        }
    }
    Ok(Tensor::new(out.shape.clone(), out.dtype, o))
}

/// Layer norm (`rms == false`) or RMS norm over the last `k` dims. Returns the output and,
/// for layer norm, the mean and rstd (as `native_layer_norm` does).
pub(crate) fn norm(
    x: &Tensor,
    k: usize,
    eps: Option<f64>,
    w: Option<&Tensor>,
    b: Option<&Tensor>,
    rms: bool,
    outs: &[TensorMeta],
) -> Result<Vec<Tensor>, String> {
    let out = outs.first().ok_or("no output metadata")?;
    let v = x.to_vec();
    let rank = x.shape.len();
    let m: usize = x.shape[rank.saturating_sub(k)..]
        .iter()
        .map(|&s| s.max(0) as usize)
        .product();
    let rows = v.len().checked_div(m).unwrap_or(0);
    // PyTorch's rms_norm default eps is the input dtype's machine epsilon.
    let eps = eps.unwrap_or(match x.dtype {
        DType::Float64 => f64::EPSILON,
        DType::Float16 => 0.0009765625,
        DType::BFloat16 => 0.0078125,
        _ => f32::EPSILON as f64,
    });
    let wv = w.map(|t| t.to_vec());
    let bv = b.map(|t| t.to_vec());
    let mut o = vec![0.0; v.len()];
    let (mut means, mut rstds) = (vec![0.0; rows], vec![0.0; rows]);
    for r in 0..rows {
        let row = &v[r * m..(r + 1) * m];
        let mean = if rms {
            0.0
        } else {
            row.iter().sum::<f64>() / m as f64
        };
        let var = row.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / m as f64;
        let rstd = 1.0 / (var + eps).sqrt();
        for i in 0..m {
            let mut y = (row[i] - mean) * rstd;
            if let Some(w) = &wv {
                y *= w[i];
            }
            if let Some(b) = &bv {
                y += b[i];
            }
            o[r * m + i] = y;
        }
        means[r] = mean;
        rstds[r] = rstd;
    }
    let mut res = vec![Tensor::new(out.shape.clone(), out.dtype, o)];
    if let (Some(mm), Some(rm)) = (outs.get(1), outs.get(2)) {
        res.push(Tensor::new(mm.shape.clone(), mm.dtype, means));
        res.push(Tensor::new(rm.shape.clone(), rm.dtype, rstds));
    }
    Ok(res)
}

/// `torch.matmul` (also `mm`, `bmm`; `transpose_b` gives `linear`'s `x @ w.T`), unrounded.
pub(crate) fn matmul_raw(
    a: &Tensor,
    b: &Tensor,
    out_shape: &[i64],
    transpose_b: bool,
) -> Result<Tensor, String> {
    let b = if transpose_b {
        let r = b.shape.len();
        if r != 2 {
            return Err("linear weight must be 2-D".into());
        }
        b.view(
            vec![b.shape[1], b.shape[0]],
            vec![b.strides[1], b.strides[0]],
            b.offset,
        )
    } else {
        b.clone()
    };
    matmul_shape(&a.shape, &b.shape).map_err(|e| e.to_string())?;
    // Promote 1-D operands to matrices, as matmul does, then broadcast the batch dims.
    let a2 = if a.shape.len() == 1 {
        a.view(vec![1, a.shape[0]], vec![0, a.strides[0]], a.offset)
    } else {
        a.clone()
    };
    let b2 = if b.shape.len() == 1 {
        b.view(vec![b.shape[0], 1], vec![b.strides[0], 0], b.offset)
    } else {
        b
    };
    let (ra, rb) = (a2.shape.len(), b2.shape.len());
    let (n, kk, m) = (a2.shape[ra - 2], a2.shape[ra - 1], b2.shape[rb - 1]);
    let batch = crate::graph::shape::broadcast(&a2.shape[..ra - 2], &b2.shape[..rb - 2])
        .map_err(|e| e.to_string())?;
    let mut full_a = batch.clone();
    full_a.extend([n, kk]);
    let mut full_b = batch.clone();
    full_b.extend([kk, m]);
    let (sa, sb) = (a2.broadcast_strides(&full_a), b2.broadcast_strides(&full_b));
    let nb = batch.len();
    let mut vals = Vec::new();
    for_each_index(&batch, |bi| {
        let oa: i64 = a2.offset + bi.iter().zip(&sa).map(|(i, s)| i * s).sum::<i64>();
        let ob: i64 = b2.offset + bi.iter().zip(&sb).map(|(i, s)| i * s).sum::<i64>();
        for i in 0..n {
            for j in 0..m {
                let mut acc = 0.0;
                for k in 0..kk {
                    let pa = (oa + i * sa[nb] + k * sa[nb + 1]) as usize;
                    let pb = (ob + k * sb[nb] + j * sb[nb + 1]) as usize;
                    acc += a2.data.get(pa).copied().unwrap_or(f64::NAN)
                        * b2.data.get(pb).copied().unwrap_or(f64::NAN);
                }
                vals.push(acc);
            }
        }
    });
    if batch.is_empty() && vals.is_empty() && n > 0 && m > 0 {
        // for_each_index of a rank-0 shape visits once; nothing to add here.
    }
    Ok(Tensor {
        dtype: DType::Float64,
        shape: out_shape.to_vec(),
        strides: contiguous_strides(out_shape),
        offset: 0,
        data: std::sync::Arc::new(vals),
    })
}

/// A matrix product rounded to the output dtype.
pub(crate) fn matmul(
    a: &Tensor,
    b: &Tensor,
    out: &TensorMeta,
    transpose_b: bool,
) -> Result<Tensor, String> {
    let p = matmul_raw(a, b, &out.shape, transpose_b)?;
    Ok(map_n(&[Val::Tensor(&p)], out, |x| x[0]))
}
