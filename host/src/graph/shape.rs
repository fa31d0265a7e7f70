//! Shapes, strides and the index arithmetic PyTorch applies to them (broadcasting,
//! wrapping negative dims, slicing bounds).
//!
//! Pure functions on small vectors; this module must never know about nodes or ops, so
//! that the interpreter and the later lowering can share it.

use super::sym::Size;

/// A tensor's sizes, outermost first.
pub type Shape = Vec<i64>;

/// [`Size`]s of integers.
pub fn sizes(values: &[i64]) -> Vec<Size> {
    values.iter().map(|&v| Size::from(v)).collect()
}

/// The integers of sizes that are all constants; `None` where one is symbolic, and
/// the caller takes its general path (a copy instead of a view, say) or refuses.
pub fn consts(sizes: &[Size]) -> Option<Vec<i64>> {
    sizes.iter().map(Size::as_const).collect()
}

/// Row-major strides of sizes that may be symbolic (a size of 0 or 1 counts as 1, as
/// [`contiguous_strides`] does; a symbolic size counts as itself, and the strides of
/// an empty tensor are never read).
pub fn contiguous_sizes(shape: &[Size]) -> Vec<Size> {
    let mut strides = vec![Size::from(1); shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        let next = &shape[d + 1];
        let step = match next.as_const() {
            Some(c) => Size::from(c.max(1)),
            None => next.clone(),
        };
        strides[d] = strides[d + 1]
            .mul(&step)
            .unwrap_or_else(|_| Size::from(i64::MAX));
    }
    strides
}

/// Why a shape computation failed; the caller adds the node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// Two shapes do not broadcast.
    #[error("shapes {a:?} and {b:?} do not broadcast")]
    Broadcast {
        /// the left shape
        a: Shape,
        /// the right shape
        b: Shape,
    },
    /// A dimension index is outside `[-rank, rank)`.
    #[error("dimension {dim} is out of range for a tensor of rank {rank}")]
    Dim {
        /// the dim as given
        dim: i64,
        /// the rank it applies to
        rank: usize,
    },
    /// A dim is named twice in a set of dims.
    #[error("dim {dim} appears more than once in the list of dims")]
    DimTwice {
        /// the dim as given
        dim: i64,
    },
    /// A size is negative or the element count does not fit in `i64`.
    #[error("shape {0:?} has a negative size or more than i64::MAX elements")]
    Size(Shape),
}

/// Number of elements, or an error when a size is negative or the product overflows.
pub fn numel(shape: &[i64]) -> Result<i64, ShapeError> {
    let mut n: i64 = 1;
    for &d in shape {
        if d < 0 {
            return Err(ShapeError::Size(shape.to_vec()));
        }
        n = n
            .checked_mul(d)
            .ok_or_else(|| ShapeError::Size(shape.to_vec()))?;
    }
    Ok(n)
}

/// Whether `strides` from `offset` lay `shape` out row-major from the start of its
/// storage (a size-1 dim may have any stride).
pub fn is_row_major(shape: &[i64], strides: &[i64], offset: i64) -> bool {
    offset == 0
        && strides.len() == shape.len()
        && shape
            .iter()
            .zip(strides.iter().zip(contiguous_strides(shape)))
            .all(|(&s, (&t, c))| s == 1 || t == c)
}

/// Whether `strides` lay `shape` out densely in row-major order (a dim of
/// size 1 may have any stride).
pub fn is_dense(shape: &[i64], strides: &[i64]) -> bool {
    let contiguous = contiguous_strides(shape);
    shape.len() == strides.len()
        && shape
            .iter()
            .zip(strides.iter().zip(&contiguous))
            .all(|(size, (s, c))| *size == 1 || s == c)
}

/// Row-major strides of a contiguous tensor of this shape (sizes of 0 or 1 count as 1,
/// as PyTorch does, so the strides never overflow for a valid shape).
pub fn contiguous_strides(shape: &[i64]) -> Vec<i64> {
    let mut strides = vec![1i64; shape.len()];
    let mut acc: i64 = 1;
    for i in (0..shape.len()).rev() {
        strides[i] = acc;
        acc = acc.saturating_mul(shape[i].max(1));
    }
    strides
}

/// Whether `strides` are the contiguous strides of `shape` (dims of size 1 are ignored).
pub fn is_contiguous(shape: &[i64], strides: &[i64]) -> bool {
    let mut expected: i64 = 1;
    for i in (0..shape.len()).rev() {
        if shape[i] != 1 && strides[i] != expected {
            return false;
        }
        expected = expected.saturating_mul(shape[i].max(1));
    }
    true
}

/// The broadcast of two shapes (numpy / PyTorch rules, aligned at the right).
pub fn broadcast(a: &[i64], b: &[i64]) -> Result<Shape, ShapeError> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i < n - a.len() {
            1
        } else {
            a[i - (n - a.len())]
        };
        let db = if i < n - b.len() {
            1
        } else {
            b[i - (n - b.len())]
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(ShapeError::Broadcast {
                a: a.to_vec(),
                b: b.to_vec(),
            });
        };
    }
    Ok(out)
}

/// Wraps a possibly negative dim into `0..rank` (a rank-0 tensor accepts -1 and 0, as
/// PyTorch's `maybe_wrap_dim` does).
pub fn wrap_dim(dim: i64, rank: usize) -> Result<usize, ShapeError> {
    let r = rank.max(1) as i64;
    let d = if dim < 0 { dim + r } else { dim };
    if d < 0 || d >= r {
        return Err(ShapeError::Dim { dim, rank });
    }
    Ok(d as usize)
}

/// Wraps a list of dims, keeping order; `None` or an empty list means every dim.
pub fn wrap_dims(dims: Option<&[i64]>, rank: usize) -> Result<Vec<usize>, ShapeError> {
    match dims {
        None => Ok((0..rank).collect()),
        Some([]) => Ok((0..rank).collect()),
        Some(ds) => {
            let mut out = Vec::with_capacity(ds.len());
            for &d in ds {
                let w = wrap_dim(d, rank)?;
                if rank > 0 && !out.contains(&w) {
                    out.push(w);
                }
            }
            Ok(out)
        }
    }
}

/// The dims a reduction (or squeeze) works on, as a set: wrapped, ascending, whatever
/// order the graph lists them in (`dim=[1, -1, 0]`); a dim named twice is an error, as
/// in PyTorch. `None` or an empty list means every dim.
pub fn wrap_dim_set(dims: Option<&[i64]>, rank: usize) -> Result<Vec<usize>, ShapeError> {
    let Some(ds) = dims.filter(|d| !d.is_empty()) else {
        return Ok((0..rank).collect());
    };
    let mut out = Vec::with_capacity(ds.len());
    for &d in ds {
        let w = wrap_dim(d, rank)?;
        if out.contains(&w) {
            return Err(ShapeError::DimTwice { dim: d });
        }
        out.push(w);
    }
    if rank == 0 {
        // A 0-d tensor accepts dim 0 or -1 and has no dim to reduce.
        out.clear();
    }
    out.sort_unstable();
    Ok(out)
}

/// The start, length and step a PyTorch `slice(dim, start, end, step)` selects on a dim of
/// `size`: negative bounds count from the end and out-of-range bounds clamp.
pub fn slice_bounds(size: i64, start: Option<i64>, end: Option<i64>, step: i64) -> (i64, i64) {
    let clamp = |v: i64| {
        let v = if v < 0 { v.saturating_add(size) } else { v };
        v.clamp(0, size)
    };
    let s = clamp(start.unwrap_or(0));
    let e = clamp(end.unwrap_or(size));
    let len = if e > s { (e - s + step - 1) / step } else { 0 };
    (s, len)
}

/// Calls `f` with every multi-index of `shape` in row-major order, iteratively.
pub fn for_each_index(shape: &[i64], mut f: impl FnMut(&[i64])) {
    if shape.iter().any(|&d| d <= 0) {
        return;
    }
    let mut idx = vec![0i64; shape.len()];
    loop {
        f(&idx);
        let mut i = shape.len();
        loop {
            if i == 0 {
                return;
            }
            i -= 1;
            idx[i] += 1;
            if idx[i] < shape[i] {
                break;
            }
            idx[i] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_layouts_are_row_major_with_any_stride_on_size_one_dims() {
        assert!(is_dense(&[2, 3], &[3, 1]));
        assert!(!is_dense(&[2, 3], &[1, 2]));
        assert!(is_dense(&[1, 3], &[99, 1]));
        assert!(is_dense(&[], &[]));
        assert!(!is_dense(&[2, 3], &[3]));
    }

    #[test]
    fn slices_clamp_like_pytorch() {
        assert_eq!(slice_bounds(10, Some(-3), None, 1), (7, 3));
        assert_eq!(slice_bounds(10, Some(2), Some(100), 3), (2, 3));
        assert_eq!(slice_bounds(10, Some(8), Some(2), 1), (8, 0));
        assert_eq!(slice_bounds(10, None, Some(i64::MAX), 1), (0, 10));
    }

    #[test]
    fn broadcasting() {
        assert_eq!(broadcast(&[3, 1], &[4]).ok(), Some(vec![3, 4]));
        assert!(broadcast(&[3], &[4]).is_err());
        assert!(numel(&[i64::MAX, 2]).is_err());
    }
}
