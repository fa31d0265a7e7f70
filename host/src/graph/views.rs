//! View ops described once. For every op that reads its operand's elements
//! without computing anything (PyTorch's views, plus `getitem`, `contiguous`,
//! `clone` and the inference no-ops), [`view_map`] gives the output's shape and
//! the map from an index into the output to the index into the input it reads.
//!
//! Every stage takes its view semantics from here: shape inference (the output
//! shape and PyTorch's strides), the interpreter (the strides and offset of a
//! zero-copy view), the scheduler's lowering (a view of a buffer stays a strided
//! view) and its kernel builder (index arithmetic through a view). Negative dims,
//! negative `select` indices and `slice` bounds are resolved here and nowhere
//! else. This module must never panic on any operand shape: a bad op is an error.
//!
//! Sizes are [`Size`]s, which may be symbolic. A fact about sizes holds for every
//! value of the symbols or the view is refused: two sizes agree only where they are
//! the same expression, a `select` index is in range only where the symbols' ranges
//! put it there, and a `slice`'s clamped bounds are minima and maxima over the ranges.
//! The groups of dims a `view` merges must have equal element counts as expressions.

use super::ops::Op;
use super::shape::{contiguous_sizes, wrap_dim, wrap_dim_set, wrap_dims, ShapeError};
use super::sym::{Size, SymError, Symbols};

/// Why a view op does not apply to its operand.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ViewError {
    /// Two shapes that must agree do not.
    #[error("{what}: {a:?} vs {b:?}")]
    Mismatch {
        /// What had to agree.
        what: String,
        /// One shape.
        a: Vec<Size>,
        /// The other.
        b: Vec<Size>,
    },
    /// A dim, size or count problem.
    #[error(transparent)]
    Shape(#[from] ShapeError),
    /// Anything else (a bad permutation, an index out of range, ...).
    #[error("{0}")]
    Invalid(String),
}

impl From<SymError> for ViewError {
    fn from(e: SymError) -> ViewError {
        ViewError::Invalid(e.to_string())
    }
}

fn invalid<T>(message: impl Into<String>) -> Result<T, ViewError> {
    Err(ViewError::Invalid(message.into()))
}

/// Where one input dim's index comes from, for an index into the view.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum InDim {
    /// `start + step * out[dim]`: the input dim follows output dim `dim`.
    Out {
        /// The output dim.
        dim: usize,
        /// The stride through the input dim per output element (a `slice` step).
        step: i64,
        /// The first input index (a `slice` start, a `split` chunk's offset).
        start: Size,
    },
    /// Always this index: a `select`ed dim, or a size-1 dim that `expand`
    /// broadcasts or `squeeze` drops.
    Fixed(Size),
}

impl InDim {
    /// Output dim `dim` read from index 0 with step 1.
    fn follow(dim: usize) -> InDim {
        InDim::Out {
            dim,
            step: 1,
            start: Size::from(0),
        }
    }
}

/// The index into the input that an index into the view reads.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum IndexMap {
    /// One entry per input dim, each affine in one output dim or fixed.
    Affine(Vec<InDim>),
    /// The element at the same row-major position (`reshape` and `view`).
    RowMajor,
}

/// What one output of a view op reads from an input of a known shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewMap {
    /// The input's shape.
    pub in_shape: Vec<Size>,
    /// The view's shape.
    pub out_shape: Vec<Size>,
    /// Output index → input index.
    pub map: IndexMap,
}

/// Whether [`view_map`] describes `op`.
pub fn describes(op: &Op) -> bool {
    op.is_view()
        || matches!(
            op,
            Op::Split { .. }
                | Op::SplitWithSizes { .. }
                | Op::GetItem { .. }
                | Op::Contiguous
                | Op::Clone
                | Op::NoOp(_)
        )
}

/// Whether `op` gives a fresh contiguous tensor in PyTorch rather than an
/// alias of its operand (its values are the operand's all the same).
pub fn copies(op: &Op) -> bool {
    matches!(op, Op::Contiguous | Op::Clone)
}

/// How many outputs `op` has for an input of `in_shape`: one per chunk for
/// `split`, one for every other view.
pub fn output_count(op: &Op, in_shape: &[Size]) -> Result<usize, ViewError> {
    Ok(match op {
        Op::Split { split_size, dim } => split_sizes(in_shape, *split_size, *dim)?.len(),
        Op::SplitWithSizes { sizes, .. } => sizes.len(),
        _ => 1,
    })
}

fn identity(rank: usize) -> Vec<InDim> {
    (0..rank).map(InDim::follow).collect()
}

/// The product of `shape`, refusing a negative integer size.
fn count(shape: &[Size]) -> Result<Size, ViewError> {
    let mut n = Size::from(1);
    for d in shape {
        if d.as_const().is_some_and(|c| c < 0) {
            return invalid(format!("shape {shape:?} has a negative size"));
        }
        n = n.mul(d)?;
    }
    Ok(n)
}

/// Whether `lo <= v < hi` for every value of the symbols.
fn within(v: &Size, lo: i64, hi: &Size, symbols: &Symbols) -> bool {
    let below = hi.sub(v).map(|gap| gap.bounds(symbols).0 >= 1);
    v.bounds(symbols).0 >= i128::from(lo) && below.unwrap_or(false)
}

/// The view output `output` of `op` makes of an input of shape `in_shape`,
/// with PyTorch's rules (negative dims wrap, `select` indices count from the
/// end when negative, `slice` bounds clamp, `expand` takes -1 for "keep").
/// `symbols` holds the ranges of the symbols that sizes read.
pub fn view_map(
    op: &Op,
    in_shape: &[Size],
    output: u32,
    symbols: &Symbols,
) -> Result<ViewMap, ViewError> {
    let rank = in_shape.len();
    let (out_shape, map) = match op {
        Op::Reshape { shape, .. } => (resolve_reshape(in_shape, shape)?, IndexMap::RowMajor),
        Op::Flatten { start, end } => {
            // A 0-d tensor flattens to one element; otherwise dims start..=end merge.
            if rank == 0 {
                (vec![Size::from(1)], IndexMap::RowMajor)
            } else {
                let (a, b) = (wrap_dim(*start, rank)?, wrap_dim(*end, rank)?);
                if a > b {
                    return invalid(format!(
                        "flatten: start_dim {start} comes after end_dim {end}"
                    ));
                }
                let mut shape = in_shape[..a].to_vec();
                shape.push(count(&in_shape[a..=b])?);
                shape.extend_from_slice(&in_shape[b + 1..]);
                (shape, IndexMap::RowMajor)
            }
        }
        Op::Permute { dims } => {
            let ds = wrap_dims(Some(dims), rank)?;
            if dims.len() != rank || ds.len() != rank {
                return invalid(format!(
                    "permute: dims {dims:?} are not a permutation of {rank} dims"
                ));
            }
            let mut map = vec![InDim::Fixed(Size::from(0)); rank];
            for (j, &d) in ds.iter().enumerate() {
                map[d] = InDim::follow(j);
            }
            let shape = ds.iter().map(|&d| in_shape[d].clone()).collect();
            (shape, IndexMap::Affine(map))
        }
        Op::Transpose { dim0, dim1 } => {
            let (a, b) = (wrap_dim(*dim0, rank)?, wrap_dim(*dim1, rank)?);
            let mut map = identity(rank);
            let mut shape = in_shape.to_vec();
            if rank > 0 {
                map.swap(a, b);
                shape.swap(a, b);
            }
            (shape, IndexMap::Affine(map))
        }
        Op::Unsqueeze { dim } => {
            let d = wrap_dim(*dim, rank + 1)?;
            let map = (0..rank)
                .map(|i| InDim::follow(if i < d { i } else { i + 1 }))
                .collect();
            let mut shape = in_shape.to_vec();
            shape.insert(d, Size::from(1));
            (shape, IndexMap::Affine(map))
        }
        Op::Squeeze { dims } => {
            // A symbolic size is never squeezed: it is 1 at most at some sizes.
            let ds = wrap_dim_set(dims.as_deref(), rank)?;
            let (mut shape, mut map) = (Vec::new(), Vec::new());
            for (i, size) in in_shape.iter().enumerate() {
                if ds.contains(&i) && *size == 1 {
                    map.push(InDim::Fixed(Size::from(0)));
                } else {
                    map.push(InDim::follow(shape.len()));
                    shape.push(size.clone());
                }
            }
            (shape, IndexMap::Affine(map))
        }
        Op::Expand { sizes } => expand(in_shape, sizes)?,
        Op::Select { dim, index } => {
            if rank == 0 {
                return invalid("select on a 0-d tensor");
            }
            let d = wrap_dim(*dim, rank)?;
            let size = &in_shape[d];
            let i = if *index < 0 {
                size.add(&Size::from(*index))?
            } else {
                Size::from(*index)
            };
            if !within(&i, 0, size, symbols) {
                return invalid(format!(
                    "select: index {index} is out of range for dim {d} of size {size}"
                ));
            }
            let mut map = identity(rank);
            for m in map.iter_mut().skip(d + 1) {
                if let InDim::Out { dim, .. } = m {
                    *dim -= 1;
                }
            }
            map[d] = InDim::Fixed(i);
            let mut shape = in_shape.to_vec();
            shape.remove(d);
            (shape, IndexMap::Affine(map))
        }
        Op::Slice {
            dim,
            start,
            end,
            step,
        } => {
            if rank == 0 {
                return invalid("slice of a 0-d tensor");
            }
            if *step <= 0 {
                return invalid(format!("slice: step must be positive, found {step}"));
            }
            let d = wrap_dim(*dim, rank)?;
            let (lo, len) =
                slice_bounds(&in_shape[d], start.as_ref(), end.as_ref(), *step, symbols)?;
            let mut map = identity(rank);
            map[d] = InDim::Out {
                dim: d,
                step: *step,
                start: lo,
            };
            let mut shape = in_shape.to_vec();
            shape[d] = len;
            (shape, IndexMap::Affine(map))
        }
        Op::Split { split_size, dim } => {
            let sizes = split_sizes(in_shape, *split_size, *dim)?;
            chunk(in_shape, &sizes, *dim, output)?
        }
        Op::SplitWithSizes { sizes, dim } => chunk(in_shape, sizes, *dim, output)?,
        Op::GetItem { .. } | Op::Contiguous | Op::Clone | Op::NoOp(_) => {
            (in_shape.to_vec(), IndexMap::Affine(identity(rank)))
        }
        other => return invalid(format!("`{}` is not a view", other.name())),
    };
    count(&out_shape)?;
    Ok(ViewMap {
        in_shape: in_shape.to_vec(),
        out_shape,
        map,
    })
}

/// The first index and the length of `start:end:step` over a dim of `size`, with
/// Python's clamping: a negative bound counts from the end, and both clamp to
/// `0..=size`.
pub fn slice_bounds(
    size: &Size,
    start: Option<&Size>,
    end: Option<&Size>,
    step: i64,
    symbols: &Symbols,
) -> Result<(Size, Size), ViewError> {
    let zero = Size::from(0);
    let clamp = |v: &Size| -> Result<Size, ViewError> {
        let from_end = v.as_const().is_some_and(|c| c < 0);
        let v = if from_end { size.add(v)? } else { v.clone() };
        Ok(v.maximum(&zero, symbols)?.minimum(size, symbols)?)
    };
    let lo = match start {
        Some(s) => clamp(s)?,
        None => zero.clone(),
    };
    let hi = match end {
        Some(e) => clamp(e)?,
        None => size.clone(),
    };
    let span = hi.sub(&lo)?.maximum(&zero, symbols)?;
    let len = span
        .add(&Size::from(step - 1))?
        .floor_div(&Size::from(step), symbols)?;
    Ok((lo, len))
}

fn expand(in_shape: &[Size], sizes: &[Size]) -> Result<(Vec<Size>, IndexMap), ViewError> {
    let rank = in_shape.len();
    let mismatch = |what: String| ViewError::Mismatch {
        what,
        a: in_shape.to_vec(),
        b: sizes.to_vec(),
    };
    if sizes.len() < rank {
        return Err(mismatch(
            "expand: fewer sizes than the tensor has dims".into(),
        ));
    }
    let negative = |s: &Size| s.as_const().is_some_and(|c| c < 0);
    let lead = sizes.len() - rank;
    let mut shape = Vec::with_capacity(sizes.len());
    for (i, want) in sizes.iter().enumerate() {
        if i < lead {
            if negative(want) {
                return invalid(format!("expand: size {want} of a new dim {i}"));
            }
            shape.push(want.clone());
            continue;
        }
        let have = &in_shape[i - lead];
        if *want == -1 || want == have {
            shape.push(have.clone());
        } else if *have == 1 && !negative(want) {
            shape.push(want.clone());
        } else {
            return Err(mismatch(format!(
                "expand: dim {i} of size {have} cannot become {want}"
            )));
        }
    }
    let map = (0..rank)
        .map(|d| {
            if in_shape[d] == shape[d + lead] {
                InDim::follow(d + lead)
            } else {
                InDim::Fixed(Size::from(0))
            }
        })
        .collect();
    Ok((shape, IndexMap::Affine(map)))
}

/// Chunk `output` of a split of `in_shape` into `sizes` along `dim`.
fn chunk(
    in_shape: &[Size],
    sizes: &[i64],
    dim: i64,
    output: u32,
) -> Result<(Vec<Size>, IndexMap), ViewError> {
    let rank = in_shape.len();
    if rank == 0 {
        return invalid("split of a 0-d tensor");
    }
    let d = wrap_dim(dim, rank)?;
    let total = sizes
        .iter()
        .try_fold(0i64, |a, &s| if s < 0 { None } else { a.checked_add(s) });
    if total.is_none_or(|t| in_shape[d] != t) {
        return Err(ViewError::Mismatch {
            what: format!("split_with_sizes: sizes {sizes:?} must sum to dim {d}"),
            a: in_shape.to_vec(),
            b: sizes.iter().map(|&s| Size::from(s)).collect(),
        });
    }
    let k = output as usize;
    let Some(&size) = sizes.get(k) else {
        return invalid(format!(
            "split has {} outputs, output {k} does not exist",
            sizes.len()
        ));
    };
    let mut map = identity(rank);
    map[d] = InDim::Out {
        dim: d,
        step: 1,
        start: Size::from(sizes[..k].iter().sum::<i64>()),
    };
    let mut shape = in_shape.to_vec();
    shape[d] = Size::from(size);
    Ok((shape, IndexMap::Affine(map)))
}

/// The chunk sizes `split(split_size, dim)` makes (the last may be smaller). The dim
/// must be an integer: over a symbolic one the number of chunks would vary.
pub fn split_sizes(in_shape: &[Size], split_size: i64, dim: i64) -> Result<Vec<i64>, ViewError> {
    if in_shape.is_empty() {
        return invalid("split of a 0-d tensor");
    }
    let d = wrap_dim(dim, in_shape.len())?;
    if split_size <= 0 {
        return invalid("split_size must be positive");
    }
    let Some(n) = in_shape[d].as_const() else {
        return invalid(format!(
            "split: dim {d} has the symbolic size {}, so the number of chunks would vary \
             with it",
            in_shape[d]
        ));
    };
    let mut sizes = Vec::new();
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

/// Resolves one -1 in a reshape target against the element count. Over symbols, the
/// inferred size is the exact quotient, and the counts must be the same expression.
pub fn resolve_reshape(from: &[Size], to: &[Size]) -> Result<Vec<Size>, ViewError> {
    let n = count(from)?;
    let mismatch = || ViewError::Mismatch {
        what: "reshape: element counts differ".into(),
        a: from.to_vec(),
        b: to.to_vec(),
    };
    let mut known = Size::from(1);
    let mut hole = None;
    for (i, d) in to.iter().enumerate() {
        if *d == -1 {
            if hole.is_some() {
                return invalid("reshape: only one dimension can be -1");
            }
            hole = Some(i);
        } else if d.as_const().is_some_and(|c| c < 0) {
            return invalid(format!("reshape: target shape {to:?} has a negative size"));
        } else {
            known = known.mul(d)?;
        }
    }
    let mut shape = to.to_vec();
    if let Some(h) = hole {
        if known == 0 {
            return Err(mismatch());
        }
        shape[h] = n.exact_div(&known).ok_or_else(mismatch)?;
    } else if known != n {
        return Err(mismatch());
    }
    Ok(shape)
}

impl ViewMap {
    /// The strides and offset of the view over an input laid out with
    /// `strides` from `offset`, or `None` when no strides can express it (a
    /// reshape that PyTorch would copy). An output dim that reads no input dim
    /// gets PyTorch's stride: 0 when `expand` broadcasts it, else (a new size-1
    /// dim) the next dim's extent, as `unsqueeze` gives it.
    pub fn restride(&self, strides: &[Size], offset: &Size) -> Option<(Vec<Size>, Size)> {
        if strides.len() != self.in_shape.len() {
            return None;
        }
        match &self.map {
            IndexMap::RowMajor => Some((
                view_strides(&self.in_shape, strides, &self.out_shape)?,
                offset.clone(),
            )),
            IndexMap::Affine(dims) => {
                let mut out: Vec<Option<Size>> = vec![None; self.out_shape.len()];
                let mut offset = offset.clone();
                for (d, m) in dims.iter().enumerate() {
                    match m {
                        InDim::Fixed(i) => offset = offset.add(&i.mul(&strides[d]).ok()?).ok()?,
                        InDim::Out { dim, step, start } => {
                            offset = offset.add(&start.mul(&strides[d]).ok()?).ok()?;
                            let s = strides[d].scale(*step).ok()?;
                            let slot = out.get_mut(*dim)?;
                            *slot = Some(match slot.take() {
                                Some(before) => before.add(&s).ok()?,
                                None => s,
                            });
                        }
                    }
                }
                let mut result = vec![Size::from(0); out.len()];
                for j in (0..out.len()).rev() {
                    result[j] = match out[j].take() {
                        Some(s) => s,
                        None if self.out_shape[j] != 1 => Size::from(0),
                        None if j + 1 < out.len() => {
                            let next = &self.out_shape[j + 1];
                            let extent = match next.as_const() {
                                Some(c) => Size::from(c.max(1)),
                                None => next.clone(),
                            };
                            extent.mul(&result[j + 1]).ok()?
                        }
                        None => Size::from(1),
                    };
                }
                Some((result, offset))
            }
        }
    }

    /// Whether the view reads every element at its own index: the same shape,
    /// and every input dim of more than one element follows the output dim at
    /// its own position (a transpose of two size-1 dims is an identity; the
    /// transpose of a square matrix is not).
    pub fn is_identity(&self) -> bool {
        if self.in_shape != self.out_shape {
            return false;
        }
        match &self.map {
            IndexMap::RowMajor => true,
            IndexMap::Affine(dims) => dims
                .iter()
                .enumerate()
                .all(|(d, m)| self.in_shape[d] == 1 || *m == InDim::follow(d)),
        }
    }
}

/// Strides for viewing `shape`/`strides` as `new_shape` without a copy, as
/// `torch.Tensor.view` computes them (ATen's `computeStride`), or `None` when
/// a copy would be needed. Over symbols, each group of dims that merges must have the
/// same element count and strides as expressions, so the strides hold at every size.
pub fn view_strides(shape: &[Size], strides: &[Size], new_shape: &[Size]) -> Option<Vec<Size>> {
    let product = |s: &[Size]| s.iter().try_fold(Size::from(1), |acc, d| acc.mul(d).ok());
    // Whether the view dims taken so far hold fewer elements than the tensor dims: for
    // symbolic counts, until they are the same expression (a product of positive sizes
    // that passes the count never comes back to it, so an overshoot fails below).
    let short = |view: &Size, tensor: &Size| match (view.as_const(), tensor.as_const()) {
        (Some(v), Some(t)) => v < t,
        _ => view != tensor,
    };
    let numel = product(shape)?;
    if numel != product(new_shape)? || shape.len() != strides.len() {
        return None;
    }
    if numel == 0 || new_shape.is_empty() {
        return Some(contiguous_sizes(new_shape));
    }
    let mut new_strides = vec![Size::from(0); new_shape.len()];
    let mut view_d = new_shape.len() as isize - 1;
    let mut chunk_base_stride = strides.last().cloned().unwrap_or(Size::from(1));
    let mut tensor_numel = Size::from(1);
    let mut view_numel = Size::from(1);
    for tensor_d in (0..shape.len()).rev() {
        tensor_numel = tensor_numel.mul(&shape[tensor_d]).ok()?;
        let merges = tensor_d > 0
            && (shape[tensor_d - 1] == 1
                || Some(&strides[tensor_d - 1])
                    == tensor_numel.mul(&chunk_base_stride).ok().as_ref());
        if !merges {
            while view_d >= 0
                && (short(&view_numel, &tensor_numel) || new_shape[view_d as usize] == 1)
            {
                new_strides[view_d as usize] = view_numel.mul(&chunk_base_stride).ok()?;
                view_numel = view_numel.mul(&new_shape[view_d as usize]).ok()?;
                view_d -= 1;
            }
            if view_numel != tensor_numel {
                return None;
            }
            if tensor_d > 0 {
                chunk_base_stride = strides[tensor_d - 1].clone();
                tensor_numel = Size::from(1);
                view_numel = Size::from(1);
            }
        }
    }
    if view_d != -1 {
        return None;
    }
    Some(new_strides)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::ops::NoOpKind;
    use crate::graph::shape::{contiguous_strides, sizes};
    use proptest::prelude::*;

    fn map(op: Op, shape: &[i64]) -> ViewMap {
        view_map(&op, &sizes(shape), 0, Symbols::none()).expect("a valid view")
    }

    fn ints(v: &[Size]) -> Vec<i64> {
        v.iter()
            .map(|s| s.as_const().expect("an integer"))
            .collect()
    }

    fn restride(m: &ViewMap, strides: &[i64], offset: i64) -> Option<(Vec<i64>, i64)> {
        let (s, o) = m.restride(&sizes(strides), &Size::from(offset))?;
        Some((ints(&s), o.as_const().expect("an integer")))
    }

    fn view_strides(shape: &[i64], strides: &[i64], new_shape: &[i64]) -> Option<Vec<i64>> {
        super::view_strides(&sizes(shape), &sizes(strides), &sizes(new_shape)).map(|s| ints(&s))
    }

    /// Reads input element `idx` (row-major `in_shape`) through the map.
    fn read(m: &ViewMap, out_idx: &[i64]) -> Vec<i64> {
        match &m.map {
            IndexMap::Affine(dims) => dims
                .iter()
                .map(|d| match d {
                    InDim::Fixed(i) => i.hint(),
                    InDim::Out { dim, step, start } => start.hint() + step * out_idx[*dim],
                })
                .collect(),
            IndexMap::RowMajor => {
                let (in_shape, out_shape) = (ints(&m.in_shape), ints(&m.out_shape));
                let flat: i64 = out_idx
                    .iter()
                    .zip(contiguous_strides(&out_shape))
                    .map(|(i, s)| i * s)
                    .sum();
                let mut rem = flat;
                let mut idx = vec![0; in_shape.len()];
                for d in (0..in_shape.len()).rev() {
                    idx[d] = rem % in_shape[d];
                    rem /= in_shape[d];
                }
                idx
            }
        }
    }

    #[test]
    fn every_view_follows_pytorch() {
        let p = map(
            Op::Permute {
                dims: vec![2, 0, -2],
            },
            &[2, 3, 4],
        );
        assert_eq!(p.out_shape, [4, 2, 3]);
        assert_eq!(read(&p, &[3, 1, 2]), [1, 2, 3]);
        let s = map(
            Op::Slice {
                dim: -1,
                start: Some(Size::from(-3)),
                end: None,
                step: 2,
            },
            &[2, 10],
        );
        assert_eq!(s.out_shape, [2, 2]);
        assert_eq!(read(&s, &[1, 1]), [1, 9]);
        let sel = map(Op::Select { dim: 1, index: -1 }, &[2, 3, 4]);
        assert_eq!(sel.out_shape, [2, 4]);
        assert_eq!(read(&sel, &[1, 3]), [1, 2, 3]);
        let e = map(
            Op::Expand {
                sizes: sizes(&[5, -1, 4]),
            },
            &[3, 1],
        );
        assert_eq!(e.out_shape, [5, 3, 4]);
        assert_eq!(read(&e, &[4, 2, 3]), [2, 0]);
        let split = view_map(
            &Op::Split {
                split_size: 4,
                dim: 0,
            },
            &sizes(&[10, 2]),
            2,
            Symbols::none(),
        )
        .unwrap();
        assert_eq!(split.out_shape, [2, 2]);
        assert_eq!(read(&split, &[1, 1]), [9, 1]);
        let sq = map(Op::Squeeze { dims: None }, &[1, 3, 1, 2]);
        assert_eq!(sq.out_shape, [3, 2]);
        assert_eq!(read(&sq, &[2, 1]), [0, 2, 0, 1]);
        let un = map(Op::Unsqueeze { dim: -1 }, &[3, 2]);
        assert_eq!(un.out_shape, [3, 2, 1]);
        let r = map(
            Op::Reshape {
                shape: sizes(&[-1, 4]),
                view: false,
            },
            &[2, 6],
        );
        assert_eq!(r.out_shape, [3, 4]);
        assert_eq!(read(&r, &[2, 1]), [1, 3]);
    }

    #[test]
    fn bad_views_are_errors() {
        for (op, shape) in [
            (Op::Permute { dims: vec![0, 0] }, vec![2, 3]),
            (Op::Select { dim: 0, index: 2 }, vec![2, 3]),
            (Op::Select { dim: 2, index: 0 }, vec![2, 3]),
            (
                Op::Expand {
                    sizes: sizes(&[4, 3]),
                },
                vec![2, 3],
            ),
            (
                Op::Reshape {
                    shape: sizes(&[-1, -1]),
                    view: false,
                },
                vec![6],
            ),
            (
                Op::SplitWithSizes {
                    sizes: vec![1, 1],
                    dim: 0,
                },
                vec![3],
            ),
            (Op::Transpose { dim0: 0, dim1: 5 }, vec![2, 3]),
        ] {
            assert!(
                view_map(&op, &sizes(&shape), 0, Symbols::none()).is_err(),
                "{op:?} on {shape:?}"
            );
        }
    }

    #[test]
    fn strides_match_pytorch() {
        // unsqueeze: a new dim's stride is the next dim's extent.
        let un = map(Op::Unsqueeze { dim: 1 }, &[3, 4]);
        assert_eq!(restride(&un, &[4, 1], 0), Some((vec![4, 4, 1], 0)));
        // select and slice move the offset.
        let sel = map(Op::Select { dim: 0, index: 2 }, &[3, 4]);
        assert_eq!(restride(&sel, &[4, 1], 1), Some((vec![1], 9)));
        // expand broadcasts with stride 0.
        let e = map(
            Op::Expand {
                sizes: sizes(&[2, 3, 4]),
            },
            &[3, 1],
        );
        assert_eq!(restride(&e, &[1, 1], 0), Some((vec![0, 1, 0], 0)));
        // A transposed matrix cannot be flattened without a copy.
        let flat = map(
            Op::Reshape {
                shape: sizes(&[24]),
                view: true,
            },
            &[6, 4],
        );
        assert_eq!(restride(&flat, &[1, 6], 0), None);
        assert_eq!(restride(&flat, &[4, 1], 0), Some((vec![1], 0)));
    }

    #[test]
    fn identities_are_recognised() {
        assert!(map(Op::Transpose { dim0: 0, dim1: 1 }, &[1, 1, 3]).is_identity());
        assert!(!map(Op::Transpose { dim0: 0, dim1: 1 }, &[3, 3]).is_identity());
        assert!(map(Op::NoOp(NoOpKind::Alias), &[3, 3]).is_identity());
        assert!(!map(
            Op::Slice {
                dim: 0,
                start: Some(Size::from(1)),
                end: None,
                step: 1
            },
            &[3]
        )
        .is_identity());
    }

    #[test]
    fn view_strides_follow_torch_view() {
        assert_eq!(view_strides(&[4, 6], &[6, 1], &[24]), Some(vec![1]));
        assert_eq!(
            view_strides(&[4, 6], &[6, 1], &[2, 2, 6]),
            Some(vec![12, 6, 1])
        );
        assert_eq!(view_strides(&[6, 4], &[1, 6], &[24]), None);
        // Merging leading dims of a permuted 4-D tensor (attention's kᵀ) works.
        assert_eq!(
            view_strides(
                &[16, 8, 64, 1024],
                &[524288, 65536, 1, 64],
                &[128, 64, 1024]
            ),
            Some(vec![65536, 1, 64])
        );
        assert_eq!(
            view_strides(&[2, 1, 3], &[3, 3, 1], &[2, 3]),
            Some(vec![3, 1])
        );
    }

    /// Views over symbolic sizes: each size is exact for every value of the symbols,
    /// and what holds only at some values is refused.
    #[test]
    fn views_over_symbols_are_exact_or_refused() {
        let mut symbols = Symbols::default();
        let b = symbols.add("b", 1, 16).unwrap();
        let l = symbols.add("l", 2, 64).unwrap();
        let (b, l) = (Size::symbol(b, &symbols), Size::symbol(l, &symbols));
        let x = [b.clone(), l.clone(), Size::from(16)];
        let at = |op: Op, shape: &[Size]| view_map(&op, shape, 0, &symbols);
        // view(-1, 16) merges b and l; view(b, l, -1, 8) splits the last dim.
        let flat = at(
            Op::Reshape {
                shape: sizes(&[-1, 16]),
                view: true,
            },
            &x,
        )
        .unwrap();
        let bl = b.mul(&l).unwrap();
        assert_eq!(flat.out_shape, [bl.clone(), Size::from(16)]);
        let heads = Op::Reshape {
            shape: vec![b.clone(), l.clone(), Size::from(-1), Size::from(8)],
            view: true,
        };
        assert_eq!(at(heads, &flat.out_shape).unwrap().out_shape[2], 2);
        // Element counts equal only at some sizes do not reshape.
        let wrong = Op::Reshape {
            shape: vec![l.clone(), Size::from(-1)],
            view: true,
        };
        assert!(at(wrong, &[b.clone(), Size::from(7)]).is_err());
        // A slice to l of a dim of 64 is l (l <= 64 always); from -1 it starts at l - 1.
        let to_l = Op::Slice {
            dim: 1,
            start: Some(Size::from(0)),
            end: Some(l.clone()),
            step: 1,
        };
        assert_eq!(
            at(to_l, &[Size::from(1), Size::from(64)])
                .unwrap()
                .out_shape[1],
            l
        );
        let last = Op::Slice {
            dim: 1,
            start: Some(Size::from(-1)),
            end: None,
            step: 1,
        };
        let m = at(last, &x).unwrap();
        assert_eq!(m.out_shape[1], 1);
        let IndexMap::Affine(dims) = &m.map else {
            panic!("{m:?}")
        };
        assert_eq!(
            dims[1],
            InDim::Out {
                dim: 1,
                step: 1,
                start: l.sub(&Size::from(1)).unwrap()
            }
        );
        // select(-1) is in range (l >= 2); select(2) is not for l = 2.
        assert!(at(Op::Select { dim: 1, index: -1 }, &x).is_ok());
        assert!(at(Op::Select { dim: 1, index: 2 }, &x).is_err());
        // expand keeps -1 and takes a symbol for a size-1 dim, but never changes one.
        let e = at(
            Op::Expand {
                sizes: vec![b.clone(), Size::from(-1)],
            },
            &[Size::from(1), l.clone()],
        );
        assert_eq!(e.unwrap().out_shape, [b.clone(), l.clone()]);
        assert!(at(
            Op::Expand {
                sizes: vec![l.clone()]
            },
            std::slice::from_ref(&b)
        )
        .is_err());
        // A transposed [b, l, 16] viewed as [b, 16 * l] cannot be; contiguous can.
        let strides = crate::graph::shape::contiguous_sizes(&x);
        let t = [b.clone(), Size::from(16), l.clone()];
        let t_strides = [strides[0].clone(), strides[2].clone(), strides[1].clone()];
        let merged = [b.clone(), l.scale(16).unwrap()];
        assert_eq!(super::view_strides(&t, &t_strides, &merged), None);
        let merged = [b.clone(), l.scale(16).unwrap()];
        assert_eq!(
            super::view_strides(&x, &strides, &merged),
            Some(vec![l.scale(16).unwrap(), Size::from(1)])
        );
    }

    proptest! {
        /// Restriding and index maps agree: the storage position a view's
        /// strides give for an output index is the one its index map reads.
        #[test]
        fn strides_and_index_maps_agree(
            shape in proptest::collection::vec(1i64..4, 1..4),
            which in 0usize..7,
            a in -3i64..3,
            b in 0i64..4,
        ) {
            let rank = shape.len() as i64;
            let op = match which {
                0 => Op::Permute { dims: (0..rank).rev().collect() },
                1 => Op::Transpose { dim0: a.rem_euclid(rank), dim1: b % rank },
                2 => Op::Unsqueeze { dim: a.rem_euclid(rank + 1) },
                3 => Op::Squeeze { dims: None },
                4 => Op::Select { dim: a.rem_euclid(rank), index: 0 },
                5 => Op::Slice { dim: a.rem_euclid(rank), start: Some(Size::from(b % 2)), end: None, step: 1 + b % 2 },
                _ => Op::Reshape { shape: sizes(&[-1]), view: false },
            };
            let m = view_map(&op, &sizes(&shape), 0, Symbols::none()).expect("valid");
            let strides = contiguous_strides(&shape);
            let Some((out_strides, offset)) = restride(&m, &strides, 3) else {
                prop_assert!(false, "a view of a contiguous tensor always has strides");
                unreachable!()
            };
            crate::graph::shape::for_each_index(&ints(&m.out_shape), |idx| {
                let by_strides: i64 = offset + idx.iter().zip(&out_strides).map(|(i, s)| i * s).sum::<i64>();
                let input = read(&m, idx);
                let by_map: i64 = 3 + input.iter().zip(&strides).map(|(i, s)| i * s).sum::<i64>();
                assert_eq!(by_strides, by_map, "{op:?} {shape:?} at {idx:?}");
            });
        }
    }
}
