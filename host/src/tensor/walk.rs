//! Strided iteration: the storage positions of `K` tensors read together in
//! the row-major order of one shape, as a kernel over broadcast, permuted or
//! sliced operands reads them.
//!
//! A [`Walk`] first merges the dims that every operand steps through as one
//! (a contiguous tensor walks as a single dim), then visits any flat range of
//! the shape, so that disjoint ranges can go to different threads. Each visit
//! costs `K` additions: no index is ever multiplied out per element.

use std::ops::Range;

/// Elements per piece of parallel work: large enough that a piece costs far
/// more than handing it to a thread, small enough to balance two to 64 cores.
pub const CHUNK: usize = 1 << 14;

/// The row-major iteration of one shape over `K` strided operands.
#[derive(Clone, Debug)]
pub struct Walk<const K: usize> {
    /// `(size, stride of each operand)` per merged dim, outermost first;
    /// never a dim of size 1.
    dims: Vec<(usize, [isize; K])>,
    /// Each operand's position at the first element.
    offsets: [isize; K],
    /// Elements visited in all.
    len: usize,
}

impl<const K: usize> Walk<K> {
    /// The walk of `shape` over operands given as `(strides, offset)`, each
    /// stride list as long as `shape` (a broadcast dim has stride 0). A
    /// negative size counts as 0.
    pub fn new(shape: &[i64], operands: [(&[i64], i64); K]) -> Walk<K> {
        let offsets = operands.map(|(_, o)| o as isize);
        let mut len = 1usize;
        let mut dims: Vec<(usize, [isize; K])> = Vec::with_capacity(shape.len());
        for (d, &size) in shape.iter().enumerate() {
            let size = size.max(0) as usize;
            len = len.saturating_mul(size);
            if size == 1 {
                continue;
            }
            let strides = operands.map(|(s, _)| s.get(d).copied().unwrap_or(0) as isize);
            match dims.last_mut() {
                // The previous dim is this one's outer part when each operand
                // steps over exactly one run of this dim per step of it.
                Some((outer, outer_strides))
                    if size > 0
                        && (0..K).all(|k| outer_strides[k] == strides[k] * size as isize) =>
                {
                    *outer *= size;
                    *outer_strides = strides;
                }
                _ => dims.push((size, strides)),
            }
        }
        Walk { dims, offsets, len }
    }

    /// Elements visited.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is visited.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether operand `k` is read in storage order from its offset, one
    /// element after another.
    pub fn is_dense(&self, k: usize) -> bool {
        match self.dims.as_slice() {
            [] => true,
            [(_, strides)] => strides[k] == 1,
            _ => false,
        }
    }

    /// Calls `f(j, positions)` for each flat index `j` in `range` (clipped to
    /// the shape), in order.
    pub fn run(&self, range: Range<usize>, mut f: impl FnMut(usize, [isize; K])) {
        let end = range.end.min(self.len);
        let mut j = range.start;
        if j >= end {
            return;
        }
        let Some(&(inner, inner_strides)) = self.dims.last() else {
            // A single element (every dim of size 1, or rank 0).
            f(j, self.offsets);
            return;
        };
        // The multi-index of `j` over the merged dims, and the positions there.
        let mut idx = vec![0usize; self.dims.len()];
        let mut pos = self.offsets;
        let mut rest = j;
        for (d, &(size, strides)) in self.dims.iter().enumerate().rev() {
            idx[d] = rest % size;
            rest /= size;
            advance(&mut pos, &strides, idx[d] as isize);
        }
        let last = self.dims.len() - 1;
        while j < end {
            let count = (inner - idx[last]).min(end - j);
            let mut p = pos;
            for t in 0..count {
                f(j + t, p);
                advance(&mut p, &inner_strides, 1);
            }
            j += count;
            idx[last] += count;
            advance(&mut pos, &inner_strides, count as isize);
            // Carry into the outer dims.
            let mut d = last;
            while idx[d] == self.dims[d].0 && d > 0 {
                advance(&mut pos, &self.dims[d].1, -(self.dims[d].0 as isize));
                idx[d] = 0;
                d -= 1;
                idx[d] += 1;
                advance(&mut pos, &self.dims[d].1, 1);
            }
        }
    }
}

/// Moves each operand's position `times` steps of its stride.
#[inline(always)]
fn advance<const K: usize>(pos: &mut [isize; K], strides: &[isize; K], times: isize) {
    for (p, s) in pos.iter_mut().zip(strides) {
        *p += times * s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::shape::for_each_index;

    /// Positions the slow way: a dot product per element.
    fn reference(shape: &[i64], strides: &[i64], offset: i64) -> Vec<isize> {
        let mut out = vec![];
        for_each_index(shape, |idx| {
            out.push((offset + idx.iter().zip(strides).map(|(i, s)| i * s).sum::<i64>()) as isize)
        });
        out
    }

    #[test]
    fn every_range_of_every_layout_visits_the_positions_a_dot_product_gives() {
        let cases: &[(&[i64], &[i64], i64)] = &[
            (&[], &[], 3),
            (&[1, 1], &[5, 7], 2),
            (&[4, 5], &[5, 1], 0),
            (&[4, 5], &[1, 4], 1),
            (&[3, 1, 4], &[0, 9, 1], 0),
            (&[2, 3, 4], &[12, 4, 1], 0),
            (&[2, 3, 4], &[1, 2, 6], 0),
            (&[2, 3, 4], &[24, 8, 2], 5),
            (&[3, 0, 2], &[2, 2, 1], 0),
            (&[5, 3], &[-3, 1], 12),
        ];
        for &(shape, strides, offset) in cases {
            let want = reference(shape, strides, offset);
            let walk = Walk::<1>::new(shape, [(strides, offset)]);
            assert_eq!(walk.len(), want.len(), "{shape:?}");
            for start in 0..=want.len() {
                for end in start..=want.len() + 1 {
                    let mut got = vec![];
                    walk.run(start..end, |j, [p]| got.push((j, p)));
                    let expect: Vec<(usize, isize)> =
                        (start..end.min(want.len())).map(|j| (j, want[j])).collect();
                    assert_eq!(got, expect, "{shape:?} {strides:?} {start}..{end}");
                }
            }
        }
    }

    #[test]
    fn operands_walk_together_and_dense_ones_merge_into_one_dim() {
        let walk = Walk::<2>::new(&[2, 3, 4], [(&[12, 4, 1], 0), (&[0, 1, 3], 0)]);
        let mut got = vec![];
        walk.run(0..24, |_, p| got.push(p));
        let a = reference(&[2, 3, 4], &[12, 4, 1], 0);
        let b = reference(&[2, 3, 4], &[0, 1, 3], 0);
        assert_eq!(
            got,
            a.into_iter()
                .zip(b)
                .map(|(x, y)| [x, y])
                .collect::<Vec<_>>()
        );
        assert!(Walk::<1>::new(&[2, 3, 4], [(&[12, 4, 1], 0)]).is_dense(0));
        assert!(!Walk::<1>::new(&[2, 3, 4], [(&[1, 2, 6], 0)]).is_dense(0));
    }
}
