//! Reductions, normalisations, softmax and matrix products of the interpreter.
//! Each reads its input through strides (no copy of a permuted or broadcast
//! input), accumulates in float64, rounds once at the end, and spreads its
//! outputs over the cores; none may alias storage. The order of accumulation
//! for one output never depends on the number of threads, so results are the
//! same on every machine.

use super::{dense, elements, filled, OpError};
use crate::graph::infer::matmul_shape;
use crate::graph::shape::{contiguous_strides, wrap_dim, wrap_dim_set};
use crate::graph::{DType, FixedMeta, ReduceOp};
use crate::tensor::walk::{Walk, CHUNK};
use crate::tensor::Tensor;
use rayon::prelude::*;

/// The most outputs one piece of a reduction's parallel work holds.
const MAX_OUTPUTS_PER_TASK: usize = 4096;

/// `x` split into the dims a reduction keeps and the dims it folds.
struct Folding<'a> {
    x: &'a Tensor,
    /// The kept dims, in order: one visit per output, in the output's order.
    kept: Walk<1>,
    /// The folded dims, relative to a kept position.
    folded: Walk<1>,
    /// Whether the folded elements of one output lie closer together than
    /// neighbouring outputs do: then each output folds its own run (an inner
    /// reduction); else a task folds all its outputs one step at a time (an
    /// outer reduction, reading along the contiguous dim).
    per_output: bool,
}

impl<'a> Folding<'a> {
    fn new(x: &'a Tensor, dims: &[usize]) -> Folding<'a> {
        let (mut kept_shape, mut kept_strides) = (vec![], vec![]);
        let (mut fold_shape, mut fold_strides) = (vec![], vec![]);
        for (d, (&size, &stride)) in x.shape.iter().zip(&x.strides).enumerate() {
            if dims.contains(&d) {
                fold_shape.push(size);
                fold_strides.push(stride);
            } else {
                kept_shape.push(size);
                kept_strides.push(stride);
            }
        }
        // The step between consecutive elements along each side's innermost
        // dim that is not of size 1.
        let innermost = |shape: &[i64], strides: &[i64]| {
            shape
                .iter()
                .zip(strides)
                .rev()
                .find(|(&n, _)| n > 1)
                .map_or(i64::MAX, |(_, &s)| s.abs())
        };
        let per_output =
            innermost(&fold_shape, &fold_strides) <= innermost(&kept_shape, &kept_strides);
        Folding {
            x,
            kept: Walk::new(&kept_shape, [(&kept_strides, x.offset)]),
            folded: Walk::new(&fold_shape, [(&fold_strides, 0)]),
            per_output,
        }
    }

    /// Elements folded into each output.
    fn count(&self) -> usize {
        self.folded.len()
    }

    /// `acc[j] = step(acc[j], element, j)` over every folded element of every
    /// output `j`, from `init`; one value per output.
    fn fold(
        &self,
        init: f64,
        step: impl Fn(f64, f64, usize) -> f64 + Sync,
    ) -> Result<Vec<f64>, crate::memory::OutOfMemory> {
        let data = self.x.data.as_slice();
        let read = |p: isize| data.get(p as usize).copied().unwrap_or(f64::NAN);
        let mut acc = filled(self.kept.len(), init)?;
        let per_task = (CHUNK / self.count().max(1)).clamp(1, MAX_OUTPUTS_PER_TASK);
        acc.par_chunks_mut(per_task)
            .enumerate()
            .for_each(|(c, acc)| {
                let first = c * per_task;
                let mut base = vec![0isize; acc.len()];
                self.kept
                    .run(first..first + acc.len(), |j, [p]| base[j - first] = p);
                if self.per_output {
                    for (i, (a, &b)) in acc.iter_mut().zip(&base).enumerate() {
                        self.folded.run(0..self.count(), |_, [q]| {
                            *a = step(*a, read(b + q), first + i)
                        });
                    }
                } else {
                    self.folded.run(0..self.count(), |_, [q]| {
                        for (i, (a, &b)) in acc.iter_mut().zip(&base).enumerate() {
                            *a = step(*a, read(b + q), first + i);
                        }
                    });
                }
            });
        Ok(acc)
    }
}

fn nan_or(a: f64, v: f64, pick: fn(f64, f64) -> f64) -> f64 {
    if a.is_nan() || v.is_nan() {
        f64::NAN
    } else {
        pick(a, v)
    }
}

/// The unrounded `sum mean amax amin` of `x` over `dims` (all when `None`),
/// each element first cast to `cast` when given; one value per output, in
/// row-major order of the kept dims.
fn reduce_raw(
    x: &Tensor,
    dims: Option<&[i64]>,
    op: ReduceOp,
    cast: Option<DType>,
) -> Result<Vec<f64>, OpError> {
    let ds = wrap_dim_set(dims, x.shape.len()).map_err(|e| e.to_string())?;
    let folding = Folding::new(x, &ds);
    let cast = cast.unwrap_or(DType::Float64);
    let mut acc = match op {
        ReduceOp::Sum | ReduceOp::Mean => folding.fold(0.0, |a, v, _| a + cast.round(v)),
        ReduceOp::Amax => folding.fold(f64::NEG_INFINITY, |a, v, _| {
            nan_or(a, cast.round(v), f64::max)
        }),
        ReduceOp::Amin => folding.fold(f64::INFINITY, |a, v, _| nan_or(a, cast.round(v), f64::min)),
        ReduceOp::Any => folding.fold(0.0, |a, v, _| f64::max(a, f64::from(u8::from(v != 0.0)))),
        ReduceOp::All => folding.fold(1.0, |a, v, _| f64::min(a, f64::from(u8::from(v != 0.0)))),
    }?;
    if op == ReduceOp::Mean {
        let n = folding.count() as f64;
        acc.par_iter_mut().for_each(|a| *a /= n);
    }
    Ok(acc)
}

/// `sum mean amax amin` over `dims` (all when `None`), each element first cast
/// to `cast` when given.
pub(crate) fn reduce(
    x: &Tensor,
    dims: Option<&[i64]>,
    out: &FixedMeta,
    op: ReduceOp,
    cast: Option<DType>,
) -> Result<Tensor, OpError> {
    let acc = reduce_raw(x, dims, op, cast)?;
    Ok(Tensor::new(out.shape.clone(), out.dtype, acc))
}

/// `var` over `dims` with `correction`, from the unrounded means.
pub(crate) fn var(
    x: &Tensor,
    dims: Option<&[i64]>,
    out: &FixedMeta,
    correction: f64,
) -> Result<Tensor, OpError> {
    let mean = reduce_raw(x, dims, ReduceOp::Mean, None)?;
    let ds = wrap_dim_set(dims, x.shape.len()).map_err(|e| e.to_string())?;
    let folding = Folding::new(x, &ds);
    let divisor = (folding.count() as f64 - correction).max(0.0);
    let mut acc = folding.fold(0.0, |a, v, j| {
        let d = v - mean[j];
        a + d * d
    })?;
    acc.par_iter_mut().for_each(|a| *a /= divisor);
    Ok(Tensor::new(out.shape.clone(), out.dtype, acc))
}

/// `softmax` / `log_softmax` along `dim`, computed stably (max subtracted).
pub(crate) fn softmax(x: &Tensor, dim: i64, log: bool, out: &FixedMeta) -> Result<Tensor, OpError> {
    if x.shape.is_empty() {
        let v = x
            .data
            .get(x.offset.max(0) as usize)
            .copied()
            .unwrap_or(f64::NAN);
        let y = if v.is_nan() {
            v
        } else if log {
            0.0
        } else {
            1.0
        };
        return Ok(Tensor::new(vec![], out.dtype, vec![y]));
    }
    let d = wrap_dim(dim, x.shape.len()).map_err(|e| e.to_string())?;
    let n = x.shape[d].max(0) as usize;
    let along = x.strides[d] as isize;
    // The result is laid out with `dim` innermost (each row contiguous) and
    // returned as the permuted view of that layout that has `x`'s shape.
    let mut rows_shape: Vec<i64> = x.shape.clone();
    rows_shape.remove(d);
    let mut rows_strides = x.strides.clone();
    rows_strides.remove(d);
    let rows = Walk::<1>::new(&rows_shape, [(&rows_strides, x.offset)]);
    let mut o = filled(rows.len() * n, 0.0)?;
    if !o.is_empty() {
        let data = x.data.as_slice();
        let read = |p: isize| data.get(p as usize).copied().unwrap_or(f64::NAN);
        let per_task = (CHUNK / n).max(1);
        o.par_chunks_mut(per_task * n)
            .enumerate()
            .for_each(|(c, block)| {
                let first = c * per_task;
                rows.run(first..first + block.len() / n, |r, [base]| {
                    let row = &mut block[(r - first) * n..(r - first + 1) * n];
                    for (i, y) in row.iter_mut().enumerate() {
                        *y = read(base + i as isize * along);
                    }
                    let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
                    for y in row.iter_mut() {
                        *y = out.dtype.round(if log {
                            *y - m - s.ln()
                        } else {
                            (*y - m).exp() / s
                        });
                    }
                });
            });
    }
    rows_shape.push(x.shape[d]);
    let mut inner = contiguous_strides(&rows_shape);
    let row_stride = inner.pop().unwrap_or(1);
    inner.insert(d, row_stride);
    Ok(Tensor {
        dtype: out.dtype,
        shape: x.shape.clone(),
        strides: inner,
        offset: 0,
        data: std::sync::Arc::new(o),
    })
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
    outs: &[FixedMeta],
) -> Result<Vec<Tensor>, OpError> {
    let out = outs.first().ok_or("no output metadata")?;
    let x = dense(x)?;
    let v = x.data.as_slice();
    let split = x.shape.len().saturating_sub(k);
    let size = |dims: &[i64]| dims.iter().map(|&s| s.max(0) as usize).product::<usize>();
    let (rows, m) = (size(&x.shape[..split]), size(&x.shape[split..]));
    // PyTorch's rms_norm default eps is the input dtype's machine epsilon.
    let eps = eps.unwrap_or(match x.dtype {
        // PyTorch's default is the epsilon of the type it computes in: float32
        // for 16-bit inputs too.
        DType::Float64 => f64::EPSILON,
        _ => f32::EPSILON as f64,
    });
    let wv = w.map(elements).transpose()?;
    let bv = b.map(elements).transpose()?;
    let mut o = filled(rows * m, 0.0)?;
    // Rows of nothing (m = 0): mean 0 and rstd NaN, as PyTorch's CUDA kernel gives
    // (its moments start from 0, and the variance is 0 / 0).
    let (mut means, mut rstds) = (filled(rows, 0.0)?, filled(rows, f64::NAN)?);
    if m > 0 {
        o.par_chunks_mut(m)
            .zip(v.par_chunks(m))
            .zip(means.par_iter_mut().zip(rstds.par_iter_mut()))
            .for_each(|((o, row), (mean_out, rstd_out))| {
                let mean = if rms {
                    0.0
                } else {
                    row.iter().sum::<f64>() / m as f64
                };
                let var = row.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / m as f64;
                let rstd = 1.0 / (var + eps).sqrt();
                for (i, (y, x)) in o.iter_mut().zip(row).enumerate() {
                    let mut r = (x - mean) * rstd;
                    if let Some(w) = &wv {
                        r *= w[i];
                    }
                    if let Some(b) = &bv {
                        r += b[i];
                    }
                    *y = out.dtype.round(r);
                }
                *mean_out = mean;
                *rstd_out = rstd;
            });
    }
    let mut res = vec![Tensor::from_rounded(out.shape.clone(), out.dtype, o)];
    if let (Some(mm), Some(rm)) = (outs.get(1), outs.get(2)) {
        res.push(Tensor::new(mm.shape.clone(), mm.dtype, means));
        res.push(Tensor::new(rm.shape.clone(), rm.dtype, rstds));
    }
    Ok(res)
}

/// The lowest and highest storage positions a strided block reaches.
fn reach(offset: isize, dims: &[(i64, i64)]) -> (isize, isize) {
    let (mut lo, mut hi) = (offset, offset);
    for &(size, stride) in dims {
        let span = (size.max(1) - 1) as isize * stride as isize;
        if span < 0 {
            lo += span;
        } else {
            hi += span;
        }
    }
    (lo, hi)
}

/// `torch.matmul` (also `mm`, `bmm`; `transpose_b` gives `linear`'s `x @ w.T`),
/// unrounded: float64 products through `matrixmultiply`'s blocked kernels,
/// batches and row blocks spread over the cores.
pub(crate) fn matmul_raw(
    a: &Tensor,
    b: &Tensor,
    out_shape: &[i64],
    transpose_b: bool,
) -> Result<Tensor, OpError> {
    let b = if transpose_b {
        if b.shape.len() != 2 {
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
    // Every position the product reads must lie in its operand's storage:
    // the kernels below read through raw pointers.
    for (t, full, st) in [(&a2, &full_a, &sa), (&b2, &full_b, &sb)] {
        let dims: Vec<(i64, i64)> = full.iter().copied().zip(st.iter().copied()).collect();
        let (lo, hi) = reach(t.offset as isize, &dims);
        let empty = full.iter().any(|&s| s <= 0);
        if !empty && (lo < 0 || hi as usize >= t.data.len()) {
            return Err(format!(
                "matmul operand {:?} (strides {:?}, offset {}) reaches outside its storage",
                t.shape, t.strides, t.offset
            )
            .into());
        }
    }
    let (n, kk, m) = (n.max(0) as usize, kk.max(0) as usize, m.max(0) as usize);
    // The operands' starts for each batch, in row-major order of the batch.
    let mut starts = vec![];
    Walk::<2>::new(&batch, [(&sa[..nb], a2.offset), (&sb[..nb], b2.offset)])
        .run(0..usize::MAX, |_, [pa, pb]| starts.push((pa, pb)));
    let mut vals = filled(starts.len() * n * m, 0.0)?;
    if n * m > 0 && kk > 0 {
        // Enough row blocks that every core has several, none under 16 rows.
        let tasks = 4 * rayon::current_num_threads();
        let blocks_per_batch = tasks.div_ceil(starts.len()).max(1);
        let rows_per_block = n.div_ceil(blocks_per_batch).max(16);
        let (a_rs, a_cs) = (sa[nb] as isize, sa[nb + 1] as isize);
        let (b_rs, b_cs) = (sb[nb] as isize, sb[nb + 1] as isize);
        let (a_ptr, b_ptr) = (a2.data.as_ptr() as usize, b2.data.as_ptr() as usize);
        vals.par_chunks_mut(n * m)
            .zip(starts.par_iter())
            .for_each(|(c, &(pa, pb))| {
                c.par_chunks_mut(rows_per_block * m)
                    .enumerate()
                    .for_each(|(blk, c)| {
                        let row0 = blk * rows_per_block;
                        let rows = c.len() / m;
                        // SAFETY: every position read lies in the operands'
                        // storage (checked above for the whole product, so for
                        // this block of it), which outlives the call; `c` is
                        // this task's own `rows × m` block, row-major.
                        unsafe {
                            matrixmultiply::dgemm(
                                rows,
                                kk,
                                m,
                                1.0,
                                (a_ptr as *const f64).offset(pa + row0 as isize * a_rs),
                                a_rs,
                                a_cs,
                                (b_ptr as *const f64).offset(pb),
                                b_rs,
                                b_cs,
                                0.0,
                                c.as_mut_ptr(),
                                m as isize,
                                1,
                            );
                        }
                    });
            });
    }
    Ok(Tensor::from_rounded(
        out_shape.to_vec(),
        DType::Float64,
        vals,
    ))
}

/// A matrix product rounded to the output dtype.
pub(crate) fn matmul(
    a: &Tensor,
    b: &Tensor,
    out: &FixedMeta,
    transpose_b: bool,
) -> Result<Tensor, OpError> {
    let p = matmul_raw(a, b, &out.shape, transpose_b)?;
    let values = std::sync::Arc::try_unwrap(p.data).unwrap_or_else(|shared| (*shared).clone());
    Ok(Tensor::new(out.shape.clone(), out.dtype, values))
}

#[cfg(test)]
mod tests {
    //! Each kernel against the plainest possible computation of the same
    //! thing (a dot product per index), on layouts that take every path:
    //! contiguous, permuted, broadcast (zero strides), sliced with an offset.

    use super::*;
    use crate::graph::shape::for_each_index;

    /// A float64 tensor of `shape` whose values are distinct and irregular.
    fn values(shape: &[i64], seed: u64) -> Tensor {
        let n: i64 = shape.iter().product();
        let v = (0..n)
            .map(|i| (((i as u64 + 1) * 2654435761 + seed * 97) % 1009) as f64 / 101.0 - 5.0)
            .collect();
        Tensor::new(shape.to_vec(), DType::Float64, v)
    }

    /// The layouts of one logical `[a, b, c]` tensor.
    fn layouts(a: i64, b: i64, c: i64) -> Vec<(&'static str, Tensor)> {
        let dense = values(&[a, b, c], 1);
        // Stored as [c, a, b] and permuted back.
        let stored = values(&[c, a, b], 2);
        let permuted = stored.view(
            vec![a, b, c],
            vec![stored.strides[1], stored.strides[2], stored.strides[0]],
            0,
        );
        // Stored as [a, 1, c] and broadcast along b.
        let row = values(&[a, 1, c], 3);
        let broadcast = row.view(vec![a, b, c], vec![c, 0, 1], 0);
        // Every other element of a larger tensor, from an offset.
        let big = values(&[a + 1, b, 2 * c], 4);
        let sliced = big.view(vec![a, b, c], vec![b * 2 * c, 2 * c, 2], b * 2 * c + 1);
        vec![
            ("dense", dense),
            ("permuted", permuted),
            ("broadcast", broadcast),
            ("sliced", sliced),
        ]
    }

    fn meta(shape: Vec<i64>) -> FixedMeta {
        FixedMeta::contiguous(shape, DType::Float64)
    }

    fn close(got: &[f64], want: &[f64], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            let ok = (g.is_nan() && w.is_nan()) || (g - w).abs() <= 1e-9 * w.abs().max(1.0);
            assert!(ok, "{what}: element {i} is {g}, want {w}");
        }
    }

    #[test]
    fn reductions_over_any_dims_of_any_layout_match_a_plain_fold() {
        for (name, x) in layouts(3, 4, 5) {
            for dims in [
                vec![0],
                vec![1],
                vec![2],
                vec![0, 2],
                vec![-1, -2],
                vec![0, 1, 2],
            ] {
                let kept: Vec<usize> = (0..3)
                    .filter(|d| !dims.iter().any(|&k| (k + 3) as usize % 3 == *d))
                    .collect();
                let out_shape: Vec<i64> = kept.iter().map(|&d| x.shape[d]).collect();
                for op in [
                    ReduceOp::Sum,
                    ReduceOp::Mean,
                    ReduceOp::Amax,
                    ReduceOp::Amin,
                    ReduceOp::Any,
                    ReduceOp::All,
                ] {
                    let got = reduce(&x, Some(&dims), &meta(out_shape.clone()), op, None)
                        .expect("reduce")
                        .to_vec();
                    let mut want = vec![];
                    for_each_index(&out_shape, |o| {
                        let mut acc = vec![];
                        for_each_index(&x.shape, |i| {
                            if kept.iter().zip(o).all(|(&d, &v)| i[d] == v) {
                                acc.push(x.at(i));
                            }
                        });
                        want.push(match op {
                            ReduceOp::Sum => acc.iter().sum(),
                            ReduceOp::Mean => acc.iter().sum::<f64>() / acc.len() as f64,
                            ReduceOp::Amax => acc.iter().copied().fold(f64::MIN, f64::max),
                            ReduceOp::Amin => acc.iter().copied().fold(f64::MAX, f64::min),
                            ReduceOp::Any => f64::from(u8::from(acc.iter().any(|&v| v != 0.0))),
                            ReduceOp::All => f64::from(u8::from(acc.iter().all(|&v| v != 0.0))),
                        });
                    });
                    close(&got, &want, &format!("{name} {op:?} over {dims:?}"));
                }
                let got = var(&x, Some(&dims), &meta(out_shape.clone()), 1.0)
                    .expect("var")
                    .to_vec();
                let mut want = vec![];
                for_each_index(&out_shape, |o| {
                    let mut acc = vec![];
                    for_each_index(&x.shape, |i| {
                        if kept.iter().zip(o).all(|(&d, &v)| i[d] == v) {
                            acc.push(x.at(i));
                        }
                    });
                    let mean = acc.iter().sum::<f64>() / acc.len() as f64;
                    let ss: f64 = acc.iter().map(|v| (v - mean) * (v - mean)).sum();
                    want.push(ss / (acc.len() as f64 - 1.0));
                });
                close(&got, &want, &format!("{name} var over {dims:?}"));
            }
        }
    }

    #[test]
    fn a_nan_anywhere_in_a_max_or_min_wins() {
        let x = Tensor::new(
            vec![2, 3],
            DType::Float64,
            vec![1.0, f64::NAN, 3.0, 4.0, 5.0, 6.0],
        );
        for op in [ReduceOp::Amax, ReduceOp::Amin] {
            let got = reduce(&x, Some(&[1]), &meta(vec![2]), op, None).expect("reduce");
            assert!(got.at(&[0]).is_nan(), "{op:?}");
            assert!(!got.at(&[1]).is_nan(), "{op:?}");
        }
    }

    #[test]
    fn softmax_along_every_dim_of_any_layout_matches_the_formula() {
        for (name, x) in layouts(3, 4, 5) {
            for dim in [0i64, 1, 2, -1] {
                for log in [false, true] {
                    let got = softmax(&x, dim, log, &meta(x.shape.clone()))
                        .expect("softmax")
                        .to_vec();
                    let d = ((dim + 3) % 3) as usize;
                    let mut want = vec![];
                    for_each_index(&x.shape, |i| {
                        let mut j = i.to_vec();
                        let row: Vec<f64> = (0..x.shape[d])
                            .map(|k| {
                                j[d] = k;
                                x.at(&j)
                            })
                            .collect();
                        let s: f64 = row.iter().map(|v| v.exp()).sum();
                        let v = x.at(i);
                        want.push(if log { v - s.ln() } else { v.exp() / s });
                    });
                    close(&got, &want, &format!("{name} softmax dim {dim} log {log}"));
                }
            }
        }
    }

    #[test]
    fn matmul_of_any_layouts_and_broadcast_batches_matches_dot_products() {
        // [b, n, k] @ [k, m] with every layout of the left operand.
        for (name, a) in layouts(3, 4, 5) {
            let w = values(&[7, 5], 9);
            // `linear` multiplies by the transpose of a [m, k] weight.
            let got = matmul_raw(&a, &w, &[3, 4, 7], true)
                .expect("matmul")
                .to_vec();
            let mut want = vec![];
            for_each_index(&[3, 4, 7], |i| {
                want.push(
                    (0..5)
                        .map(|k| a.at(&[i[0], i[1], k]) * w.at(&[i[2], k]))
                        .sum(),
                );
            });
            close(&got, &want, &format!("{name} @ w.T"));
        }
        // Broadcast batch dims: [2, 1, 3, 4] @ [5, 4, 2] -> [2, 5, 3, 2].
        let a = values(&[2, 1, 3, 4], 5);
        let b = values(&[5, 4, 2], 6);
        let got = matmul_raw(&a, &b, &[2, 5, 3, 2], false)
            .expect("matmul")
            .to_vec();
        let mut want = vec![];
        for_each_index(&[2, 5, 3, 2], |i| {
            want.push(
                (0..4)
                    .map(|k| a.at(&[i[0], 0, i[2], k]) * b.at(&[i[1], k, i[3]]))
                    .sum(),
            );
        });
        close(&got, &want, "broadcast batches");
        // 1-D operands: vector @ matrix, matrix @ vector, vector @ vector.
        let (v, m) = (values(&[4], 7), values(&[4, 3], 8));
        let got = matmul_raw(&v, &m, &[3], false).expect("v@m").to_vec();
        let want: Vec<f64> = (0..3)
            .map(|j| (0..4).map(|k| v.at(&[k]) * m.at(&[k, j])).sum())
            .collect();
        close(&got, &want, "vector @ matrix");
        let mt = m.view(vec![3, 4], vec![1, 3], 0);
        let got = matmul_raw(&mt, &v, &[3], false).expect("m@v").to_vec();
        let want: Vec<f64> = (0..3)
            .map(|i| (0..4).map(|k| mt.at(&[i, k]) * v.at(&[k])).sum())
            .collect();
        close(&got, &want, "matrix @ vector");
        let got = matmul_raw(&v, &v, &[], false).expect("v@v").to_vec();
        close(
            &got,
            &[(0..4).map(|k| v.at(&[k]).powi(2)).sum()],
            "vector @ vector",
        );
        // Large enough to be split into row blocks over the cores.
        let (a, b) = (values(&[300, 70], 10), values(&[70, 40], 11));
        let got = matmul_raw(&a, &b, &[300, 40], false)
            .expect("blocks")
            .to_vec();
        let mut want = vec![];
        for_each_index(&[300, 40], |i| {
            want.push((0..70).map(|k| a.at(&[i[0], k]) * b.at(&[k, i[1]])).sum());
        });
        close(&got, &want, "row blocks");
    }

    #[test]
    fn a_product_whose_operand_reaches_outside_its_storage_is_an_error_not_a_read() {
        let a = values(&[2, 3], 1);
        let lying = a.view(vec![4, 3], vec![3, 1], 0);
        let err = matmul_raw(&lying, &values(&[3, 2], 2), &[4, 2], false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("reaches outside its storage"), "{err}");
    }

    #[test]
    fn layer_and_rms_norm_of_a_permuted_input_match_the_formula() {
        let (_, x) = layouts(3, 4, 5).swap_remove(1);
        let w = values(&[5], 3);
        let outs = [
            meta(vec![3, 4, 5]),
            meta(vec![3, 4, 1]),
            meta(vec![3, 4, 1]),
        ];
        for rms in [false, true] {
            let got = norm(&x, 1, Some(1e-5), Some(&w), None, rms, &outs).expect("norm");
            let mut want = vec![];
            for_each_index(&[3, 4, 5], |i| {
                let row: Vec<f64> = (0..5).map(|k| x.at(&[i[0], i[1], k])).collect();
                let mean = if rms {
                    0.0
                } else {
                    row.iter().sum::<f64>() / 5.0
                };
                let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 5.0;
                want.push((x.at(i) - mean) / (var + 1e-5).sqrt() * w.at(&[i[2]]));
            });
            close(&got[0].to_vec(), &want, &format!("rms {rms}"));
        }
    }
}
