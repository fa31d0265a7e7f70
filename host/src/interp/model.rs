//! The interpreter's rules for the ops whole models bring: factories, advanced indexing,
//! scans, attention, convolution, batch norm and pooling. Each is written the plainest
//! way (contiguous float64 copies of the operands, index arithmetic per element), as the
//! reference the decompositions and generated code are checked against; out-of-range
//! indices are errors naming the offending value, never a read outside a tensor.

use super::{collect, elements, filled, room, OpError, Val};
use crate::graph::infer::model::{arange_dtype, index_plan, pool_out};
use crate::graph::shape::{contiguous_strides, wrap_dim};
use crate::graph::{DType, FixedMeta, Op, Scalar};
use crate::tensor::Tensor;

pub(super) fn tensor<'a>(args: &[Val<'a>], i: usize) -> Result<&'a Tensor, String> {
    match args.get(i) {
        Some(Val::Tensor(t)) => Ok(t),
        _ => Err(format!("operand {i} must be a tensor")),
    }
}

/// The row-major multi-index of flat position `i` in `shape`.
fn unravel(mut i: i64, shape: &[i64], idx: &mut [i64]) {
    for d in (0..shape.len()).rev() {
        let s = shape[d].max(1);
        idx[d] = i % s;
        i /= s;
    }
}

/// The flat position in a contiguous tensor of `shape` read at `idx` broadcast from a
/// (right-aligned) output index.
fn broadcast_at(shape: &[i64], out_idx: &[i64]) -> usize {
    let lead = out_idx.len() - shape.len();
    let mut p = 0i64;
    for (d, &s) in shape.iter().enumerate() {
        let i = if s == 1 { 0 } else { out_idx[lead + d] };
        p = p * s + i;
    }
    p as usize
}

/// An index value checked against a dim of `size` (negative counts from the end).
pub fn checked_index(value: f64, size: i64, what: &str) -> Result<i64, String> {
    let i = value as i64;
    let w = if i < 0 { i + size } else { i };
    if value.fract() != 0.0 || w < 0 || w >= size {
        return Err(format!(
            "{what}: index {value} is out of range for a dim of size {size}"
        ));
    }
    Ok(w)
}

/// `value` as an `embedding` index into a dim of `size`: as [`checked_index`], but a
/// negative one is out of range (PyTorch's embedding counts no index from the end).
pub fn checked_nonnegative_index(value: f64, size: i64, what: &str) -> Result<i64, String> {
    if value < 0.0 {
        return Err(format!(
            "{what}: index {value} is out of range for a dim of size {size} \
             (embedding takes no negative indices)"
        ));
    }
    checked_index(value, size, what)
}

/// Evaluates one of the model ops; `None` when `op` is not one of them.
pub(crate) fn eval(
    op: &Op,
    args: &[Val],
    outs: &[FixedMeta],
) -> Option<Result<Vec<Tensor>, OpError>> {
    let out = outs.first()?;
    let r = match op {
        Op::Arange {
            start,
            end,
            step,
            dtype,
        } => match end.scalar() {
            Some(end) => arange(*start, end, *step, *dtype, out).map(|t| vec![t]),
            None => Err(OpError::from(format!(
                "arange's end {end:?} is a symbolic size the call has not bound"
            ))),
        },
        Op::Full { value, .. } => filled(out.numel() as usize, value.to_f64())
            .map(|values| vec![Tensor::new(out.shape.clone(), out.dtype, values)])
            .map_err(OpError::from),
        Op::Index {
            indexed,
            nonnegative,
        } => index(indexed, *nonnegative, args, out).map(|t| vec![t]),
        Op::Gather { dim } => gather(*dim, args, out).map(|t| vec![t]),
        Op::IndexCopy { dim } => index_copy(*dim, args, out).map(|t| vec![t]),
        Op::GroupedMm => grouped_mm(args, out).map(|t| vec![t]),
        Op::SortRuns { descending, run } => {
            sorted_rows(args, out, *descending, *run as usize).map(|t| vec![t])
        }
        // The runs only make the device's merge cheaper: the result is the order of each
        // pair of them.
        Op::MergeRuns { descending, run } => {
            let merged = (*run as usize).saturating_mul(2);
            sorted_rows(args, out, *descending, merged).map(|t| vec![t])
        }
        Op::Cumsum { dim, .. } => cumsum(*dim, args, out).map(|t| vec![t]),
        Op::Diff {
            n,
            dim,
            prepend,
            append,
        } => diff(*n, *dim, *prepend, *append, args, out).map(|t| vec![t]),
        Op::Attention {
            mask,
            causal,
            scale,
            gqa,
        } => attention(*mask, *causal, *scale, *gqa, args, out).map(|t| vec![t]),
        Op::Conv {
            stride,
            padding,
            dilation,
            groups,
            bias,
        } => conv(stride, padding, dilation, *groups, *bias, args, out).map(|t| vec![t]),
        Op::BatchNorm {
            eps,
            weight,
            bias,
            native,
        } => batch_norm(*eps, *weight, *bias, args, out).map(|t| {
            let mut r = vec![t];
            if *native {
                for m in &outs[1..] {
                    r.push(Tensor::new(m.shape.clone(), m.dtype, vec![]));
                }
            }
            r
        }),
        Op::MaxPool {
            kernel,
            stride,
            padding,
            dilation,
            ceil_mode,
            with_indices,
        } => max_pool(kernel, stride, padding, dilation, *ceil_mode, args, out).map(
            |(values, indices)| {
                let mut r = vec![values];
                if *with_indices {
                    r.push(indices);
                }
                r
            },
        ),
        Op::AdaptiveAvgPool { output_size } => {
            adaptive_avg_pool(args, out, output_size.len()).map(|t| vec![t])
        }
        Op::GroupNorm {
            groups,
            eps,
            weight,
            bias,
            native,
        } => group_norm(*groups, *eps, *weight, *bias, args, out).map(|(y, mean, rstd)| {
            let mut r = vec![y];
            if *native {
                for (v, m) in [mean, rstd].into_iter().zip(&outs[1..]) {
                    r.push(Tensor::new(m.shape.clone(), m.dtype, v));
                }
            }
            r
        }),
        Op::AvgPool {
            kernel,
            stride,
            padding,
            count_include_pad,
            divisor_override,
            ..
        } => avg_pool(
            kernel,
            stride,
            padding,
            *count_include_pad,
            *divisor_override,
            args,
            out,
        )
        .map(|t| vec![t]),
        _ => return None,
    };
    Some(r)
}

fn arange(
    start: Scalar,
    end: Scalar,
    step: Scalar,
    dtype: Option<DType>,
    out: &FixedMeta,
) -> Result<Tensor, OpError> {
    let n = out.numel() as usize;
    let d = arange_dtype(start, end, step, dtype);
    let (a, s) = (start.to_f64(), step.to_f64());
    // PyTorch computes integer aranges exactly and float ones as start + i * step.
    let values = collect(n, (0..n).map(|i| a + i as f64 * s))?;
    Ok(Tensor::new(out.shape.clone(), d, values))
}

/// `index.Tensor`, and `embedding` where `nonnegative` (a negative index is then out
/// of range, as PyTorch's embedding has it).
fn index(
    indexed: &[bool],
    nonnegative: bool,
    args: &[Val],
    out: &FixedMeta,
) -> Result<Tensor, OpError> {
    let x = tensor(args, 0)?;
    let ixs: Vec<&Tensor> = (1..args.len())
        .map(|i| tensor(args, i))
        .collect::<Result<_, _>>()?;
    let shapes: Vec<&[i64]> = ixs.iter().map(|t| t.shape.as_slice()).collect();
    let plan = index_plan(&x.shape, indexed, &shapes).map_err(|e| e.to_string())?;
    let xv = elements(x)?;
    let ivs = ixs
        .iter()
        .map(|t| elements(t))
        .collect::<Result<Vec<_>, _>>()?;
    let xs = contiguous_strides(&x.shape);
    let n = out.numel() as usize;
    let mut vals = room(n)?;
    let mut oi = vec![0i64; out.shape.len()];
    let k = plan.index_shape.len();
    for p in 0..n {
        unravel(p as i64, &out.shape, &mut oi);
        let bidx = &oi[plan.index_at..plan.index_at + k];
        let mut pos = 0i64;
        for (o, dim) in plan.out_dims.iter().enumerate() {
            if let Some(d) = dim {
                pos += oi[o] * xs[*d];
            }
        }
        for (j, &d) in plan.indexed_dims.iter().enumerate() {
            let v = ivs[j][broadcast_at(&ixs[j].shape, bidx)];
            let what = format!("index of dim {d}");
            let w = if nonnegative {
                checked_nonnegative_index(v, x.shape[d], &what)?
            } else {
                checked_index(v, x.shape[d], &what)?
            };
            pos += w * xs[d];
        }
        vals.push(xv[pos as usize]);
    }
    Ok(Tensor::new(out.shape.clone(), out.dtype, vals))
}

fn gather(dim: i64, args: &[Val], out: &FixedMeta) -> Result<Tensor, OpError> {
    let (x, ix) = (tensor(args, 0)?, tensor(args, 1)?);
    let rank = x.shape.len();
    let d = wrap_dim(dim, rank.max(1)).map_err(|e| e.to_string())?;
    let xv = elements(x)?;
    let iv = elements(ix)?;
    let xs = contiguous_strides(&x.shape);
    let mut oi = vec![0i64; out.shape.len()];
    let mut vals = room(iv.len())?;
    for (p, &v) in iv.iter().enumerate() {
        unravel(p as i64, &out.shape, &mut oi);
        if rank == 0 {
            checked_index(v, 1, "gather")?;
            vals.push(xv[0]);
            continue;
        }
        let mut pos = 0i64;
        for k in 0..rank {
            let i = if k == d {
                checked_index(v, x.shape[d], "gather")?
            } else {
                oi[k]
            };
            pos += i * xs[k];
        }
        vals.push(xv[pos as usize]);
    }
    Ok(Tensor::new(out.shape.clone(), out.dtype, vals))
}

/// `index_copy`: `self`'s slices `index[k]` along `dim` replaced by `source`'s slices
/// `k`, in order (a repeated index takes the last); an index out of `[0, size)` is an
/// error, as PyTorch's.
fn index_copy(dim: i64, args: &[Val], out: &FixedMeta) -> Result<Tensor, OpError> {
    let (x, ix, src) = (tensor(args, 0)?, tensor(args, 1)?, tensor(args, 2)?);
    let d = wrap_dim(dim, x.shape.len()).map_err(|e| e.to_string())?;
    let mut vals = elements(x)?;
    let (sv, iv) = (elements(src)?, elements(ix)?);
    let (outer, n, inner) = around(&x.shape, d);
    let k = iv.len();
    for (j, &v) in iv.iter().enumerate() {
        if v < 0.0 {
            return Err(
                format!("index_copy: index {v} is out of range for a dim of size {n}").into(),
            );
        }
        let to = checked_index(v, n as i64, "index_copy")? as usize;
        for o in 0..outer {
            let (dst, from) = ((o * n + to) * inner, (o * k + j) * inner);
            vals[dst..dst + inner].copy_from_slice(&sv[from..from + inner]);
        }
    }
    Ok(Tensor::new(out.shape.clone(), out.dtype, vals))
}

/// How two elements of a sort compare: NaN the largest (equal to another NaN), -0.0
/// equal to 0.0; reversed when `descending`.
fn sort_order(a: f64, b: f64, descending: bool) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let order = match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    };
    if descending {
        order.reverse()
    } else {
        order
    }
}

/// The positions within each row (the last dim) of its elements in stable sorted
/// order, each run of `run` elements of a row sorted on its own (`sort_runs`, and a
/// merge with twice its operand's run).
fn sorted_rows(
    args: &[Val],
    out: &FixedMeta,
    descending: bool,
    run: usize,
) -> Result<Tensor, OpError> {
    let x = tensor(args, 0)?;
    let xv = elements(x)?;
    let n = x.shape.last().copied().unwrap_or(1).max(0) as usize;
    let mut vals = Vec::with_capacity(xv.len());
    for row in xv.chunks(n.max(1)) {
        for (r, chunk) in row.chunks(run.min(n).max(1)).enumerate() {
            let start = r * run.min(n).max(1);
            let mut order: Vec<usize> = (0..chunk.len()).collect();
            order.sort_by(|&a, &b| sort_order(chunk[a], chunk[b], descending));
            vals.extend(order.into_iter().map(|i| (start + i) as f64));
        }
    }
    Ok(Tensor::new(out.shape.clone(), out.dtype, vals))
}

/// `_grouped_mm(a, b, offs)`: row m of `a` `[M, K]` times `b[g]` of `[G, K, N]`, g the
/// number of offsets at or below m; rows past the last offset zero.
fn grouped_mm(args: &[Val], out: &FixedMeta) -> Result<Tensor, OpError> {
    let (a, b, offs) = (tensor(args, 0)?, tensor(args, 1)?, tensor(args, 2)?);
    let (av, bv, ov) = (elements(a)?, elements(b)?, elements(offs)?);
    let (m, k) = (a.shape[0] as usize, a.shape[1] as usize);
    let (g, n) = (b.shape[0] as usize, b.shape[2] as usize);
    let mut vals = vec![0.0; m * n];
    for (row, out_row) in vals.chunks_mut(n.max(1)).enumerate().take(m) {
        let group = ov.iter().filter(|&&o| o <= row as f64).count();
        if group >= g {
            continue;
        }
        for (kk, &x) in av[row * k..(row + 1) * k].iter().enumerate() {
            let w = &bv[(group * k + kk) * n..(group * k + kk + 1) * n];
            for (o, &wv) in out_row.iter_mut().zip(w) {
                *o += x * wv;
            }
        }
    }
    Ok(Tensor::new(out.shape.clone(), out.dtype, vals))
}

/// (outer, size, inner) around dim `d`.
fn around(shape: &[i64], d: usize) -> (usize, usize, usize) {
    let outer: i64 = shape[..d].iter().product();
    let inner: i64 = shape[d + 1..].iter().product();
    (outer as usize, shape[d] as usize, inner as usize)
}

fn cumsum(dim: i64, args: &[Val], out: &FixedMeta) -> Result<Tensor, OpError> {
    let x = tensor(args, 0)?;
    let mut vals = elements(x)?;
    vals.iter_mut().for_each(|v| *v = out.dtype.round(*v));
    if !x.shape.is_empty() {
        let d = wrap_dim(dim, x.shape.len()).map_err(|e| e.to_string())?;
        let (outer, n, inner) = around(&x.shape, d);
        for o in 0..outer {
            for i in 0..inner {
                let mut acc = 0.0;
                for k in 0..n {
                    let p = (o * n + k) * inner + i;
                    acc += vals[p];
                    vals[p] = out.dtype.round(acc);
                }
            }
        }
    }
    Ok(Tensor::new(out.shape.clone(), out.dtype, vals))
}

fn diff(
    n: i64,
    dim: i64,
    prepend: bool,
    append: bool,
    args: &[Val],
    out: &FixedMeta,
) -> Result<Tensor, OpError> {
    let x = tensor(args, 0)?;
    let d = wrap_dim(dim, x.shape.len()).map_err(|e| e.to_string())?;
    let mut parts = vec![];
    let mut k = 1;
    // n = 0 is a copy of self: prepend and append are only checked.
    let (prepend, append) = (prepend && n > 0, append && n > 0);
    if prepend {
        parts.push(tensor(args, k)?);
        k += 1;
    }
    parts.push(x);
    if append {
        parts.push(tensor(args, k)?);
    }
    // Concatenate along d.
    let mut shape = x.shape.clone();
    shape[d] = parts.iter().map(|t| t.shape[d]).sum();
    let (outer, _, inner) = around(&shape, d);
    let values = parts
        .iter()
        .map(|t| elements(t))
        .collect::<Result<Vec<_>, _>>()?;
    let mut vals = room(outer * shape[d] as usize * inner)?;
    for o in 0..outer {
        for (t, v) in parts.iter().zip(&values) {
            let len = t.shape[d] as usize * inner;
            vals.extend_from_slice(&v[o * len..(o + 1) * len]);
        }
    }
    let bool_diff = out.dtype == DType::Bool;
    for _ in 0..n {
        if shape[d] == 0 {
            break;
        }
        let (outer, size, inner) = around(&shape, d);
        let mut next = room(outer * (size - 1) * inner)?;
        for o in 0..outer {
            for s in 1..size {
                for i in 0..inner {
                    let (a, b) = (
                        vals[(o * size + s) * inner + i],
                        vals[(o * size + s - 1) * inner + i],
                    );
                    next.push(if bool_diff {
                        f64::from(u8::from(a != b))
                    } else {
                        a - b
                    });
                }
            }
        }
        vals = next;
        shape[d] -= 1;
    }
    Ok(Tensor::new(out.shape.clone(), out.dtype, vals))
}

fn attention(
    mask: bool,
    causal: bool,
    scale: Option<f64>,
    gqa: bool,
    args: &[Val],
    out: &FixedMeta,
) -> Result<Tensor, OpError> {
    let (q, k, v) = (tensor(args, 0)?, tensor(args, 1)?, tensor(args, 2)?);
    let m = if mask { Some(tensor(args, 3)?) } else { None };
    let (qr, kr) = (q.shape.len(), k.shape.len());
    let (l, e) = (q.shape[qr - 2], q.shape[qr - 1]);
    let s = k.shape[kr - 2];
    let ev = v.shape[v.shape.len() - 1];
    let scale = scale.unwrap_or(1.0 / (e as f64).sqrt());
    let batch: Vec<i64> = out.shape[..out.shape.len() - 2].to_vec();
    let (qv, kv, vv) = (elements(q)?, elements(k)?, elements(v)?);
    let mv = m.map(elements).transpose()?;
    // With GQA, key/value head h serves query heads h*G .. (h+1)*G.
    let heads_dim = batch.len().checked_sub(1);
    let group = match (gqa, heads_dim) {
        (true, Some(h)) if kr - 2 == batch.len() => batch[h] / k.shape[h].max(1),
        _ => 1,
    };
    let nb: i64 = batch.iter().product();
    let mut vals = filled(out.numel() as usize, 0.0)?;
    let mut bi = vec![0i64; batch.len()];
    let mut scores = filled(s as usize, 0.0)?;
    for b in 0..nb {
        unravel(b, &batch, &mut bi);
        let qb = broadcast_at(&q.shape[..qr - 2], &bi);
        let mut kidx = bi.clone();
        if let (true, Some(h)) = (group > 1, heads_dim) {
            kidx[h] /= group;
        }
        let kb = broadcast_at(&k.shape[..kr - 2], &kidx);
        for i in 0..l {
            let qrow = &qv[((qb as i64 * l + i) * e) as usize..][..e as usize];
            for j in 0..s {
                let krow = &kv[((kb as i64 * s + j) * e) as usize..][..e as usize];
                let mut dot: f64 = qrow.iter().zip(krow).map(|(a, b)| a * b).sum();
                dot *= scale;
                if causal && j > i {
                    dot = f64::NEG_INFINITY;
                }
                if let (Some(mt), Some(mv)) = (m, &mv) {
                    let mut full = bi.clone();
                    full.extend([i, j]);
                    let x = mv[broadcast_at(&mt.shape, &full)];
                    if mt.dtype == DType::Bool {
                        if x == 0.0 {
                            dot = f64::NEG_INFINITY;
                        }
                    } else {
                        dot += x;
                    }
                }
                scores[j as usize] = dot;
            }
            let mx = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if mx == f64::NEG_INFINITY {
                // Every key masked out: PyTorch's attention (its `_safe_softmax`) gives
                // zeros, not softmax's 0 / 0.
                continue;
            }
            let mut z = 0.0;
            for x in scores.iter_mut() {
                *x = (*x - mx).exp();
                z += *x;
            }
            let orow = &mut vals[((b * l + i) * ev) as usize..][..ev as usize];
            for j in 0..s {
                let p = scores[j as usize] / z;
                let vrow = &vv[((kb as i64 * s + j) * ev) as usize..][..ev as usize];
                for (o, x) in orow.iter_mut().zip(vrow) {
                    *o += p * x;
                }
            }
        }
    }
    Ok(Tensor::new(out.shape.clone(), out.dtype, vals))
}

#[allow(clippy::too_many_arguments)]
fn conv(
    stride: &[i64],
    padding: &[i64],
    dilation: &[i64],
    groups: i64,
    bias: bool,
    args: &[Val],
    out: &FixedMeta,
) -> Result<Tensor, OpError> {
    let (x, w) = (tensor(args, 0)?, tensor(args, 1)?);
    let bv = if bias {
        Some(elements(tensor(args, 2)?)?)
    } else {
        None
    };
    let sp = w.shape.len() - 2;
    let (xv, wv) = (elements(x)?, elements(w)?);
    let (n, c, o) = (x.shape[0], x.shape[1], w.shape[0]);
    let cg = c / groups;
    let og = o / groups;
    let in_sp = &x.shape[2..];
    let k_sp = &w.shape[2..];
    let out_sp = &out.shape[2..];
    let in_n: i64 = in_sp.iter().product();
    let k_n: i64 = k_sp.iter().product();
    let out_n: i64 = out_sp.iter().product();
    let mut vals = filled(out.numel() as usize, 0.0)?;
    let (mut oi, mut ki, mut ii) = (vec![0i64; sp], vec![0i64; sp], vec![0i64; sp]);
    for b in 0..n {
        for oc in 0..o {
            let g = oc / og;
            for p in 0..out_n {
                unravel(p, out_sp, &mut oi);
                let mut acc = bv.as_ref().map_or(0.0, |b| b[oc as usize]);
                for cc in 0..cg {
                    let ic = g * cg + cc;
                    for kp in 0..k_n {
                        unravel(kp, k_sp, &mut ki);
                        let mut inside = true;
                        for d in 0..sp {
                            ii[d] = oi[d] * stride[d] - padding[d] + ki[d] * dilation[d];
                            inside &= ii[d] >= 0 && ii[d] < in_sp[d];
                        }
                        if !inside {
                            continue;
                        }
                        let mut pos = 0i64;
                        for d in 0..sp {
                            pos = pos * in_sp[d] + ii[d];
                        }
                        let xval = xv[((b * c + ic) * in_n + pos) as usize];
                        let wval = wv[((oc * cg + cc) * k_n + kp) as usize];
                        acc += xval * wval;
                    }
                }
                vals[((b * o + oc) * out_n + p) as usize] = acc;
            }
        }
    }
    Ok(Tensor::new(out.shape.clone(), out.dtype, vals))
}

fn batch_norm(
    eps: f64,
    weight: bool,
    bias: bool,
    args: &[Val],
    out: &FixedMeta,
) -> Result<Tensor, OpError> {
    let x = tensor(args, 0)?;
    let mut k = 1;
    let w = if weight {
        k += 1;
        Some(elements(tensor(args, k - 1)?)?)
    } else {
        None
    };
    let b = if bias {
        k += 1;
        Some(elements(tensor(args, k - 1)?)?)
    } else {
        None
    };
    let (mean, var) = (elements(tensor(args, k)?)?, elements(tensor(args, k + 1)?)?);
    let c = x.shape[1] as usize;
    let inner: i64 = x.shape[2..].iter().product();
    let mut vals = elements(x)?;
    for (p, v) in vals.iter_mut().enumerate() {
        let ch = (p / inner.max(1) as usize) % c;
        let mut y = (*v - mean[ch]) / (var[ch] + eps).sqrt();
        if let Some(w) = &w {
            y *= w[ch];
        }
        if let Some(b) = &b {
            y += b[ch];
        }
        *v = y;
    }
    Ok(Tensor::new(out.shape.clone(), out.dtype, vals))
}

#[allow(clippy::too_many_arguments)]
/// The taps `a` of a window starting at `start` (`start + a * dilation`, `a` below
/// `kernel`) that fall inside `0..size`: the others read padding only.
fn taps(start: i64, kernel: i64, dilation: i64, size: i64) -> std::ops::Range<i64> {
    let first = (-start).max(0).div_euclid(dilation) + i64::from((-start).max(0) % dilation != 0);
    let end = if size - 1 - start < 0 {
        0
    } else {
        (size - 1 - start).div_euclid(dilation) + 1
    };
    first..end.min(kernel).max(first)
}

fn max_pool(
    kernel: &[i64],
    stride: &[i64],
    padding: &[i64],
    dilation: &[i64],
    ceil: bool,
    args: &[Val],
    out: &FixedMeta,
) -> Result<(Tensor, Tensor), OpError> {
    let x = tensor(args, 0)?;
    let r = x.shape.len();
    let (h, w) = (x.shape[r - 2], x.shape[r - 1]);
    let (oh, ow) = (out.shape[r - 2], out.shape[r - 1]);
    debug_assert_eq!(
        oh,
        pool_out(h, kernel[0], stride[0], padding[0], dilation[0], ceil)
    );
    let planes: i64 = x.shape[..r - 2].iter().product();
    let xv = elements(x)?;
    let mut vals = room(out.numel() as usize)?;
    let mut idxs = room(out.numel() as usize)?;
    for pl in 0..planes {
        for i in 0..oh {
            for j in 0..ow {
                let (mut best, mut at) = (f64::NEG_INFINITY, -1i64);
                for a in taps(i * stride[0] - padding[0], kernel[0], dilation[0], h) {
                    let y = i * stride[0] - padding[0] + a * dilation[0];
                    for b in taps(j * stride[1] - padding[1], kernel[1], dilation[1], w) {
                        let z = j * stride[1] - padding[1] + b * dilation[1];
                        let v = xv[((pl * h + y) * w + z) as usize];
                        if v > best || v.is_nan() && !best.is_nan() || at < 0 {
                            best = v;
                            at = y * w + z;
                        }
                    }
                }
                vals.push(best);
                idxs.push(at as f64);
            }
        }
    }
    Ok((
        Tensor::new(out.shape.clone(), out.dtype, vals),
        Tensor::new(out.shape.clone(), DType::Int64, idxs),
    ))
}

/// PyTorch's adaptive pooling window of output `i` of `n` over an input of `size`.
pub fn adaptive_window(i: i64, n: i64, size: i64) -> (i64, i64) {
    let start = (i * size) / n;
    let end = ((i + 1) * size + n - 1) / n;
    (start, end)
}

/// Group norm in float64: the result and each (sample, group)'s mean and rstd.
fn group_norm(
    groups: i64,
    eps: f64,
    weight: bool,
    bias: bool,
    args: &[Val],
    out: &FixedMeta,
) -> Result<(Tensor, Vec<f64>, Vec<f64>), OpError> {
    let x = tensor(args, 0)?;
    let w = if weight {
        Some(elements(tensor(args, 1)?)?)
    } else {
        None
    };
    let b = if bias {
        Some(elements(tensor(args, 1 + weight as usize)?)?)
    } else {
        None
    };
    let n = x.shape[0];
    let c = x.shape[1];
    let inner: i64 = x.shape[2..].iter().product();
    let per = (c / groups) * inner;
    let mut vals = elements(x)?;
    let (mut means, mut rstds) = (vec![], vec![]);
    for s in 0..n {
        for gi in 0..groups {
            let start = ((s * groups + gi) * per) as usize;
            let chunk = &mut vals[start..start + per as usize];
            let mean = chunk.iter().sum::<f64>() / per as f64;
            let var = chunk.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / per as f64;
            let rstd = 1.0 / (var + eps).sqrt();
            for (k, v) in chunk.iter_mut().enumerate() {
                let ch = (gi * (c / groups) + k as i64 / inner) as usize;
                let mut y = (*v - mean) * rstd;
                if let Some(w) = &w {
                    y *= w[ch];
                }
                if let Some(b) = &b {
                    y += b[ch];
                }
                *v = y;
            }
            means.push(mean);
            rstds.push(rstd);
        }
    }
    Ok((
        Tensor::new(out.shape.clone(), out.dtype, vals),
        means,
        rstds,
    ))
}

/// The last two dims of `shape` as (planes, h, w), a 1-d pooling as h = 1.
fn planes_hw(shape: &[i64], spatial: usize) -> (i64, i64, i64) {
    let r = shape.len();
    let planes = shape[..r - spatial].iter().product();
    match spatial {
        1 => (planes, 1, shape[r - 1]),
        _ => (planes, shape[r - 2], shape[r - 1]),
    }
}

fn adaptive_avg_pool(args: &[Val], out: &FixedMeta, spatial: usize) -> Result<Tensor, OpError> {
    // Separable: the mean over a box of windows is the mean along each spatial dim in
    // turn, each over its own window.
    let x = tensor(args, 0)?;
    let mut shape = x.shape.clone();
    let mut vals = elements(x)?;
    let r = shape.len();
    for d in r - spatial..r {
        let (size, want) = (shape[d], out.shape[d]);
        let inner: i64 = shape[d + 1..].iter().product();
        let outer: i64 = shape[..d].iter().product();
        let mut next = room((outer * want * inner).max(0) as usize)?;
        for o in 0..outer {
            for i in 0..want {
                let (a, b) = adaptive_window(i, want, size);
                for k in 0..inner {
                    let acc: f64 = (a..b)
                        .map(|j| vals[((o * size + j) * inner + k) as usize])
                        .sum();
                    next.push(acc / (b - a) as f64);
                }
            }
        }
        shape[d] = want;
        vals = next;
    }
    Ok(Tensor::new(out.shape.clone(), out.dtype, vals))
}

/// PyTorch's average pooling: the window clipped to the padded input (`ceil_mode`
/// windows may run past it); the divisor is the override, or the clipped window's size
/// counting padding, or not counting it.
pub fn avg_pool_divisor(
    start: i64,
    kernel: i64,
    size: i64,
    pad: i64,
    count_include_pad: bool,
) -> (i64, i64, i64) {
    let end = (start + kernel).min(size + pad);
    let padded = end - start;
    let (lo, hi) = (start.max(0), end.min(size));
    (lo, hi, if count_include_pad { padded } else { hi - lo })
}

#[allow(clippy::too_many_arguments)]
fn avg_pool(
    kernel: &[i64],
    stride: &[i64],
    padding: &[i64],
    count_include_pad: bool,
    divisor_override: Option<i64>,
    args: &[Val],
    out: &FixedMeta,
) -> Result<Tensor, OpError> {
    let x = tensor(args, 0)?;
    let k = kernel.len();
    let (planes, h, w) = planes_hw(&x.shape, k);
    let (_, oh, ow) = planes_hw(&out.shape, k);
    let two = |v: &[i64], fill: i64| if k == 1 { [fill, v[0]] } else { [v[0], v[1]] };
    let (kernel, stride, padding) = (two(kernel, 1), two(stride, 1), two(padding, 0));
    let xv = elements(x)?;
    let mut vals = room(out.numel() as usize)?;
    for pl in 0..planes {
        for i in 0..oh {
            let (y0, y1, dy) = avg_pool_divisor(
                i * stride[0] - padding[0],
                kernel[0],
                h,
                padding[0],
                count_include_pad,
            );
            for j in 0..ow {
                let (z0, z1, dz) = avg_pool_divisor(
                    j * stride[1] - padding[1],
                    kernel[1],
                    w,
                    padding[1],
                    count_include_pad,
                );
                let mut acc = 0.0;
                for y in y0..y1 {
                    for z in z0..z1 {
                        acc += xv[((pl * h + y) * w + z) as usize];
                    }
                }
                let d = divisor_override.unwrap_or(dy * dz);
                vals.push(acc / d as f64);
            }
        }
    }
    Ok(Tensor::new(out.shape.clone(), out.dtype, vals))
}
