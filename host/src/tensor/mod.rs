//! The reference tensor: float64 elements in a shared buffer, viewed through shape,
//! strides and an offset so views cost nothing, as in PyTorch.
//!
//! Used by the interpreter and by tensor files. Values are always already rounded to the
//! tensor's dtype. This module must never know about graphs.

pub mod walk;

use crate::graph::shape::contiguous_strides;
use crate::graph::DType;
use rayon::prelude::*;
use std::sync::Arc;
use walk::{Walk, CHUNK};

/// A strided float64 tensor that stands for a tensor of `dtype`.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// the dtype the values stand for
    pub dtype: DType,
    /// sizes
    pub shape: Vec<i64>,
    /// strides into `data`, in elements (0 for broadcast dims)
    pub strides: Vec<i64>,
    /// position of element `[0, 0, ...]` in `data`
    pub offset: i64,
    /// the storage, shared between views
    pub data: Arc<Vec<f64>>,
}

impl Tensor {
    /// A contiguous tensor; values are rounded to `dtype`. The caller guarantees
    /// `values.len()` is the element count of `shape`.
    pub fn new(shape: Vec<i64>, dtype: DType, mut values: Vec<f64>) -> Tensor {
        if dtype != DType::Float64 {
            values
                .par_chunks_mut(CHUNK)
                .for_each(|c| c.iter_mut().for_each(|v| *v = dtype.round(*v)));
        }
        Tensor::from_rounded(shape, dtype, values)
    }

    /// A contiguous tensor of values already rounded to `dtype`.
    pub fn from_rounded(shape: Vec<i64>, dtype: DType, values: Vec<f64>) -> Tensor {
        Tensor {
            dtype,
            strides: contiguous_strides(&shape),
            shape,
            offset: 0,
            data: Arc::new(values),
        }
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape
            .iter()
            .fold(1usize, |n, &d| n.saturating_mul(d.max(0) as usize))
    }

    /// Storage position of a multi-index.
    pub fn position(&self, idx: &[i64]) -> usize {
        let mut p = self.offset;
        for (i, s) in idx.iter().zip(&self.strides) {
            p += i * s;
        }
        p as usize
    }

    /// The element at a multi-index.
    pub fn at(&self, idx: &[i64]) -> f64 {
        self.data
            .get(self.position(idx))
            .copied()
            .unwrap_or(f64::NAN)
    }

    /// The walk over this tensor's elements in row-major order.
    pub fn walk(&self) -> Walk<1> {
        Walk::new(&self.shape, [(&self.strides, self.offset)])
    }

    /// The elements in row-major order, borrowed when the storage already
    /// holds them that way.
    pub fn values(&self) -> std::borrow::Cow<'_, [f64]> {
        let walk = self.walk();
        let start = self.offset.max(0) as usize;
        if walk.is_dense(0) && start + walk.len() <= self.data.len() {
            return std::borrow::Cow::Borrowed(&self.data[start..start + walk.len()]);
        }
        std::borrow::Cow::Owned(self.to_vec())
    }

    /// The elements in row-major order.
    pub fn to_vec(&self) -> Vec<f64> {
        self.gather(Vec::with_capacity(self.walk().len()))
    }

    /// [`Tensor::to_vec`], or the refusal naming `what` when the process
    /// cannot allocate the copy (never an abort).
    pub fn try_to_vec(
        &self,
        what: impl FnOnce() -> String,
    ) -> Result<Vec<f64>, crate::memory::OutOfMemory> {
        Ok(self.gather(crate::memory::try_vec(what, self.walk().len())?))
    }

    /// The elements in row-major order, written into `out` (empty, with room
    /// for them).
    fn gather(&self, mut out: Vec<f64>) -> Vec<f64> {
        let walk = self.walk();
        let start = self.offset.max(0) as usize;
        if walk.is_dense(0) && start + walk.len() <= self.data.len() {
            out.extend_from_slice(&self.data[start..start + walk.len()]);
            return out;
        }
        out.resize(walk.len(), 0.0);
        out.par_chunks_mut(CHUNK)
            .enumerate()
            .for_each(|(c, chunk)| {
                let first = c * CHUNK;
                walk.run(first..first + chunk.len(), |j, [p]| {
                    chunk[j - first] = self.data.get(p as usize).copied().unwrap_or(f64::NAN);
                });
            });
        out
    }

    /// A contiguous copy (or `self` when already contiguous from offset 0).
    pub fn contiguous(&self) -> Tensor {
        if self.is_contiguous() {
            return self.clone();
        }
        self.with_data(self.to_vec())
    }

    /// [`Tensor::contiguous`], or the refusal naming `what` when the process
    /// cannot allocate the copy (never an abort).
    pub fn try_contiguous(
        &self,
        what: impl FnOnce() -> String,
    ) -> Result<Tensor, crate::memory::OutOfMemory> {
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        Ok(self.with_data(self.try_to_vec(what)?))
    }

    fn is_contiguous(&self) -> bool {
        self.offset == 0
            && self.strides == contiguous_strides(&self.shape)
            && self.data.len() == self.numel()
    }

    /// A contiguous tensor of this one's shape and dtype over `data`.
    fn with_data(&self, data: Vec<f64>) -> Tensor {
        Tensor {
            dtype: self.dtype,
            strides: contiguous_strides(&self.shape),
            shape: self.shape.clone(),
            offset: 0,
            data: Arc::new(data),
        }
    }

    /// Strides that read this tensor broadcast to `shape` (aligned at the right).
    pub fn broadcast_strides(&self, shape: &[i64]) -> Vec<i64> {
        let lead = shape.len().saturating_sub(self.shape.len());
        (0..shape.len())
            .map(|i| {
                if i < lead {
                    0
                } else {
                    let j = i - lead;
                    if self.shape[j] == 1 && shape[i] != 1 {
                        0
                    } else {
                        self.strides[j]
                    }
                }
            })
            .collect()
    }

    /// A view with another shape and strides over the same storage.
    pub fn view(&self, shape: Vec<i64>, strides: Vec<i64>, offset: i64) -> Tensor {
        Tensor {
            dtype: self.dtype,
            shape,
            strides,
            offset,
            data: self.data.clone(),
        }
    }
}

/// The largest error a dtype tolerates, relative to the output's largest magnitude.
pub fn tolerance(d: DType) -> f64 {
    match d {
        DType::Float32 => 1e-4,
        DType::Float16 | DType::BFloat16 => 1e-2,
        DType::Float64 => 1e-9,
        DType::Bool | DType::Int32 | DType::Int64 => 0.0,
    }
}

/// `(max absolute error, max error relative to the reference's largest magnitude)`.
/// NaN where the reference has NaN is a match; NaN anywhere else is infinitely wrong.
pub fn errors(got: &Tensor, want: &Tensor) -> (f64, f64) {
    let (g, w) = (got.values(), want.values());
    if g.len() != w.len() {
        return (f64::INFINITY, f64::INFINITY);
    }
    let scale = w
        .iter()
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    let mut abs = 0.0f64;
    for (a, b) in g.iter().zip(w.iter()) {
        let e = if a.is_nan() && b.is_nan() || a == b {
            0.0
        } else if a.is_nan() || b.is_nan() {
            f64::INFINITY
        } else {
            (a - b).abs()
        };
        abs = abs.max(e);
    }
    let rel = if abs == 0.0 {
        0.0
    } else {
        abs / scale.max(f64::MIN_POSITIVE)
    };
    (abs, rel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_too_large_to_allocate_is_refused() {
        let one = Tensor::new(vec![1, 1], DType::Float32, vec![2.0]);
        let broadcast = one.view(vec![1 << 40, 1 << 20], vec![0, 0], 0);
        let refused = broadcast
            .try_contiguous(|| "copying `y`".to_string())
            .unwrap_err();
        assert_eq!(refused.bytes, 1 << 63);
        assert!(refused
            .to_string()
            .starts_with("copying `y` needs 8388608.0 TiB"));
        let small = one.view(vec![2, 3], vec![0, 0], 0);
        let copy = small.try_contiguous(String::new).unwrap();
        assert_eq!(copy.to_vec(), vec![2.0; 6]);
        assert_eq!(copy.strides, vec![3, 1]);
        assert_eq!(small.contiguous(), copy);
    }
}
