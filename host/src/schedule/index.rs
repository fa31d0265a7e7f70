//! Index arithmetic: the expressions that say which element of a buffer a
//! kernel reads or writes. Views (permute, reshape, expand, slice, select,
//! cat pieces) never copy data: they become these expressions.
//!
//! An [`Index`] is an integer expression over the kernel's two loop variables
//! (`x`, the flat index of the rows or elements a program owns, and `r`, the
//! flat reduction index). Constructors simplify as they build, using the known
//! ranges of the loop variables, so that generated code stays readable.

use std::fmt;

/// A kernel loop variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Var {
    /// The flat index over the kernel's non-reduction iteration space.
    X,
    /// The flat index over the reduction iteration space.
    R,
}

/// An integer index expression.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Index {
    /// A loop variable.
    Var(Var),
    /// A constant.
    Const(i64),
    /// A sum of terms.
    Add(Vec<Index>),
    /// A product with a constant factor.
    Mul(Box<Index>, i64),
    /// Floor division by a positive constant (operands are never negative).
    Div(Box<Index>, i64),
    /// Remainder by a positive constant (operands are never negative).
    Mod(Box<Index>, i64),
}

/// The exclusive upper bounds of the loop variables, for simplification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ranges {
    /// `x` ranges over `0..x`.
    pub x: i64,
    /// `r` ranges over `0..r`.
    pub r: i64,
}

impl Index {
    /// A loop variable.
    pub fn var(v: Var) -> Index {
        Index::Var(v)
    }

    /// A constant.
    pub fn constant(c: i64) -> Index {
        Index::Const(c)
    }

    /// The largest value this expression can take, if it can be bounded.
    pub fn max_value(&self, ranges: Ranges) -> Option<i64> {
        match self {
            Index::Var(Var::X) => Some(ranges.x - 1),
            Index::Var(Var::R) => Some(ranges.r - 1),
            Index::Const(c) => Some(*c),
            Index::Add(terms) => terms
                .iter()
                .try_fold(0i64, |acc, t| acc.checked_add(t.max_value(ranges)?)),
            Index::Mul(e, k) if *k >= 0 => e.max_value(ranges)?.checked_mul(*k),
            Index::Mul(..) => None,
            Index::Div(e, k) => Some(e.max_value(ranges)? / k),
            Index::Mod(e, k) => Some(e.max_value(ranges)?.min(k - 1)),
        }
    }

    /// `self + other`, flattened and with constants folded.
    pub fn plus(self, other: Index) -> Index {
        let mut terms = Vec::new();
        let mut constant = 0i64;
        for t in [self, other] {
            match t {
                Index::Add(inner) => {
                    for i in inner {
                        match i {
                            Index::Const(c) => constant += c,
                            other => terms.push(other),
                        }
                    }
                }
                Index::Const(c) => constant += c,
                other => terms.push(other),
            }
        }
        recombine_div_mod(&mut terms);
        if constant != 0 {
            terms.push(Index::Const(constant));
        }
        match terms.len() {
            0 => Index::Const(0),
            1 => terms.pop().unwrap_or(Index::Const(0)),
            _ => Index::Add(terms),
        }
    }

    /// `self * k`.
    pub fn times(self, k: i64) -> Index {
        match (self, k) {
            (_, 0) => Index::Const(0),
            (e, 1) => e,
            (Index::Const(c), k) => Index::Const(c * k),
            (Index::Mul(e, a), k) => Index::Mul(e, a * k),
            (Index::Add(terms), k) => terms
                .into_iter()
                .map(|t| t.times(k))
                .fold(Index::Const(0), Index::plus),
            (e, k) => Index::Mul(Box::new(e), k),
        }
    }

    /// `self // k` for a positive `k`.
    pub fn div(self, k: i64, ranges: Ranges) -> Index {
        if k == 1 {
            return self;
        }
        if let Index::Const(c) = self {
            return Index::Const(c.div_euclid(k));
        }
        if self.max_value(ranges).is_some_and(|m| m < k) {
            return Index::Const(0);
        }
        if let Some((multiples, _)) = split_multiples(&self, k, ranges) {
            // (k*a + b) // k == a when 0 <= b < k.
            return multiples;
        }
        if let Some((g, a, _)) = split_common_factor(&self, k, ranges) {
            // (g*a + b) // k == a // (k/g) when g divides k and 0 <= b < g.
            return a.div(k / g, ranges);
        }
        match self {
            // (e * a) // k with k dividing a.
            Index::Mul(e, a) if a % k == 0 => e.times(a / k),
            // (e // a) // k == e // (a * k).
            Index::Div(e, a) => e.div(a * k, ranges),
            other => Index::Div(Box::new(other), k),
        }
    }

    /// `self % k` for a positive `k`.
    pub fn rem(self, k: i64, ranges: Ranges) -> Index {
        if k == 1 {
            return Index::Const(0);
        }
        if let Index::Const(c) = self {
            return Index::Const(c.rem_euclid(k));
        }
        if self.max_value(ranges).is_some_and(|m| m < k) {
            return self;
        }
        if let Some((_, rest)) = split_multiples(&self, k, ranges) {
            // (k*a + b) % k == b when 0 <= b < k.
            return rest;
        }
        if let Some((g, a, b)) = split_common_factor(&self, k, ranges) {
            // (g*a + b) % k == g*(a % (k/g)) + b when g divides k and 0 <= b < g.
            return a.rem(k / g, ranges).times(g).plus(b);
        }
        match self {
            Index::Mul(_, a) if a % k == 0 => Index::Const(0),
            other => Index::Mod(Box::new(other), k),
        }
    }

    /// Whether the expression mentions `v`.
    pub fn uses(&self, v: Var) -> bool {
        match self {
            Index::Var(w) => *w == v,
            Index::Const(_) => false,
            Index::Add(terms) => terms.iter().any(|t| t.uses(v)),
            Index::Mul(e, _) | Index::Div(e, _) | Index::Mod(e, _) => e.uses(v),
        }
    }

    /// How far the expression moves when `v` grows by one, when that is the
    /// same everywhere: `Some(0)` when it does not use `v`, `Some(k)` when `v`
    /// appears only in sums and products (never under a division or a
    /// remainder), `None` otherwise.
    pub fn step_along(&self, v: Var) -> Option<i64> {
        match self {
            Index::Var(w) => Some(i64::from(*w == v)),
            Index::Const(_) => Some(0),
            Index::Add(terms) => terms
                .iter()
                .try_fold(0i64, |acc, t| acc.checked_add(t.step_along(v)?)),
            Index::Mul(e, k) => e.step_along(v)?.checked_mul(*k),
            Index::Div(e, _) | Index::Mod(e, _) => (!e.uses(v)).then_some(0),
        }
    }

    /// How far the expression moves when `v` grows by one inside an aligned
    /// block of `block` values of `v` (a power of two): `Some(k)` when, for
    /// every start `v0` that is a multiple of `block`, every `0 <= i < block`
    /// and any values of the other variables, `e(v0 + i) = e(v0) + k * i`.
    /// Divisions and remainders of `v` by multiples of `block` qualify (inside
    /// the block the quotient stays and the remainder steps by one), which
    /// [`Index::step_along`] cannot see: `(x / 512) * 131072 + x % 512` steps
    /// by one in blocks of 512. `None` when the rules below cannot tell.
    pub fn block_step(&self, v: Var, block: i64) -> Option<i64> {
        self.block_walk(v, block).map(|(step, _)| step)
    }

    /// ([`Index::block_step`], whether the value at every block start is a
    /// multiple of `block` whatever the other variables are).
    fn block_walk(&self, v: Var, block: i64) -> Option<(i64, bool)> {
        if block < 1 {
            return None;
        }
        match self {
            Index::Var(w) if *w == v => Some((1, true)),
            Index::Var(_) => Some((0, false)),
            Index::Const(c) => Some((0, c % block == 0)),
            Index::Add(terms) => terms.iter().try_fold((0i64, true), |(step, aligned), t| {
                let (s, a) = t.block_walk(v, block)?;
                Some((step.checked_add(s)?, aligned && a))
            }),
            Index::Mul(e, k) => {
                let (s, a) = e.block_walk(v, block)?;
                Some((s.checked_mul(*k)?, a || k % block == 0))
            }
            Index::Div(e, k) | Index::Mod(e, k) => {
                if !e.uses(v) {
                    return Some((0, false));
                }
                // e(v0 + i) = e(v0) + i with e(v0) a multiple of `block`, and
                // `block` divides k: e(v0) % k + i stays below k.
                let (s, a) = e.block_walk(v, block)?;
                if s == 0 {
                    // Constant inside the block, and so is any quotient or remainder.
                    return Some((0, false));
                }
                if s != 1 || !a || *k <= 0 || k % block != 0 {
                    return None;
                }
                match self {
                    Index::Div(..) => Some((0, false)),
                    _ => Some((1, true)),
                }
            }
        }
    }

    /// Evaluates the expression for concrete loop variables (tests, the interpreter of the loop IR).
    pub fn eval(&self, x: i64, r: i64) -> i64 {
        match self {
            Index::Var(Var::X) => x,
            Index::Var(Var::R) => r,
            Index::Const(c) => *c,
            Index::Add(terms) => terms.iter().map(|t| t.eval(x, r)).sum(),
            Index::Mul(e, k) => e.eval(x, r) * k,
            Index::Div(e, k) => e.eval(x, r).div_euclid(*k),
            Index::Mod(e, k) => e.eval(x, r).rem_euclid(*k),
        }
    }
}

impl fmt::Display for Index {
    /// Python/Triton syntax (`//` and `%` are floor operations there, and the
    /// operands are never negative, so C++ prints the same text with `/`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Index::Var(Var::X) => f.write_str("xindex"),
            Index::Var(Var::R) => f.write_str("rindex"),
            Index::Const(c) => write!(f, "{c}"),
            Index::Add(terms) => {
                for (i, t) in terms.iter().enumerate() {
                    match t {
                        Index::Const(c) if i > 0 && *c < 0 => write!(f, " - {}", c.unsigned_abs())?,
                        _ if i > 0 => write!(f, " + {t}")?,
                        _ => write!(f, "{t}")?,
                    }
                }
                Ok(())
            }
            Index::Mul(e, k) => match **e {
                Index::Add(_) => write!(f, "{k}*({e})"),
                _ => write!(f, "{k}*{e}"),
            },
            Index::Div(e, k) => write!(f, "(({e}) // {k})"),
            Index::Mod(e, k) => write!(f, "(({e}) % {k})"),
        }
    }
}

/// For a sum `k*a + b` whose terms split into multiples of `k` and a
/// remainder `b` known to lie in `0..k`: `(a, b)`.
fn split_multiples(e: &Index, k: i64, ranges: Ranges) -> Option<(Index, Index)> {
    let Index::Add(terms) = e else { return None };
    let mut multiples = Index::Const(0);
    let mut rest = Index::Const(0);
    for t in terms {
        match t {
            Index::Mul(inner, c) if c % k == 0 => {
                multiples = multiples.plus((**inner).clone().times(c / k))
            }
            Index::Const(c) if c % k == 0 => multiples = multiples.plus(Index::Const(c / k)),
            other => rest = rest.plus(other.clone()),
        }
    }
    let bounded = rest.max_value(ranges).is_some_and(|m| m < k) && nonnegative(&rest);
    (bounded && multiples != Index::Const(0)).then_some((multiples, rest))
}

/// For a sum `g*a + b` with `g` a proper divisor of `k` taken from a term's
/// coefficient and `b` known to lie in `0..g`: `(g, a, b)`.
fn split_common_factor(e: &Index, k: i64, ranges: Ranges) -> Option<(i64, Index, Index)> {
    let Index::Add(terms) = e else { return None };
    let mut factors: Vec<i64> = terms
        .iter()
        .filter_map(|t| match t {
            Index::Mul(_, c) if *c > 1 => Some(gcd(*c, k)),
            _ => None,
        })
        .filter(|g| *g > 1 && *g < k)
        .collect();
    factors.sort_unstable_by(|a, b| b.cmp(a));
    factors.dedup();
    factors
        .into_iter()
        .find_map(|g| split_multiples(e, g, ranges).map(|(a, b)| (g, a, b)))
}

fn gcd(a: i64, b: i64) -> i64 {
    let (mut a, mut b) = (a.abs(), b.abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

fn nonnegative(e: &Index) -> bool {
    match e {
        Index::Var(_) => true,
        Index::Const(c) => *c >= 0,
        Index::Add(t) => t.iter().all(nonnegative),
        Index::Mul(e, k) => *k >= 0 && nonnegative(e),
        Index::Div(e, _) | Index::Mod(e, _) => nonnegative(e),
    }
}

/// A term as `(coefficient, expression)`.
fn coefficient(term: &Index) -> (i64, &Index) {
    match term {
        Index::Mul(e, k) => (*k, e),
        other => (1, other),
    }
}

/// Rewrites `c*((e // a) % k) + c*k*(e // (a*k))` into `c*(e // a)` among the
/// terms of a sum (with `a = 1`: `c*(e % k) + c*k*(e // k)` into `c*e`): the
/// identity that undoes `unflatten` when a view's strides are contiguous.
fn recombine_div_mod(terms: &mut Vec<Index>) {
    loop {
        let mut found = None;
        'search: for (i, t) in terms.iter().enumerate() {
            let (c, inner) = coefficient(t);
            let Index::Mod(m, k) = inner else { continue };
            let (base, a) = match &**m {
                Index::Div(e, a) => (&**e, *a),
                other => (other, 1),
            };
            for (j, u) in terms.iter().enumerate() {
                let (cu, inner_u) = coefficient(u);
                if let Index::Div(eu, ku) = inner_u {
                    if i != j && *ku == a * k && &**eu == base && cu == c * k {
                        let merged = if a == 1 {
                            base.clone()
                        } else {
                            Index::Div(Box::new(base.clone()), a)
                        };
                        found = Some((i, j, merged.times(c)));
                        break 'search;
                    }
                }
            }
        }
        let Some((i, j, merged)) = found else { return };
        let (hi, lo) = if i > j { (i, j) } else { (j, i) };
        terms.remove(hi);
        terms.remove(lo);
        match merged {
            Index::Add(inner) => terms.extend(inner),
            Index::Const(0) => {}
            other => terms.push(other),
        }
    }
}

/// Splits a flat index over `shape` (row-major) into one index per dim.
pub fn unflatten(flat: Index, shape: &[i64], ranges: Ranges) -> Vec<Index> {
    let mut out = vec![Index::Const(0); shape.len()];
    let mut stride = 1i64;
    for d in (0..shape.len()).rev() {
        let size = shape[d];
        // A size-1 dim has only index 0; a size-0 dim has none (nothing iterates over
        // an empty space, so any index will do).
        out[d] = if size <= 1 {
            Index::Const(0)
        } else {
            let q = flat.clone().div(stride, ranges);
            if d == 0 {
                q
            } else {
                q.rem(size, ranges)
            }
        };
        stride = stride.saturating_mul(size.max(1));
    }
    out
}

/// The linear offset of a multi-dimensional index with these strides.
pub fn linear(index: &[Index], strides: &[i64], offset: i64) -> Index {
    index
        .iter()
        .zip(strides)
        .fold(Index::Const(offset), |acc, (i, s)| {
            acc.plus(i.clone().times(*s))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: Ranges = Ranges { x: 64, r: 16 };

    #[test]
    fn block_steps_hold_for_every_aligned_block() {
        let x = || Box::new(Index::Var(Var::X));
        let r = || Box::new(Index::Var(Var::R));
        // (expression, block, the step it must claim or None)
        let cases = [
            // [.., 32, 512] reduced over the 32: x = (outer, inner 512).
            (
                Index::Add(vec![
                    Index::Mul(Box::new(Index::Div(x(), 512)), 131072),
                    Index::Mul(r(), 512),
                    Index::Mod(x(), 512),
                ]),
                512,
                Some(1),
            ),
            // Nested: 262144 * (x / 8192) + 8192 * r + 128 * ((x / 128) % 64) + x % 128.
            (
                Index::Add(vec![
                    Index::Mul(Box::new(Index::Div(x(), 8192)), 262144),
                    Index::Mul(r(), 8192),
                    Index::Mul(
                        Box::new(Index::Mod(Box::new(Index::Div(x(), 128)), 64)),
                        128,
                    ),
                    Index::Mod(x(), 128),
                ]),
                128,
                Some(1),
            ),
            // The same at a block the remainders' period does not divide.
            (
                Index::Add(vec![
                    Index::Mul(Box::new(Index::Div(x(), 8192)), 262144),
                    Index::Mod(x(), 128),
                ]),
                256,
                None,
            ),
            // A per-row value: constant inside blocks of 64.
            (Index::Div(x(), 64), 64, Some(0)),
            // An offset that is not a multiple of the block shifts the remainder.
            (
                Index::Mod(
                    Box::new(Index::Add(vec![Index::Var(Var::X), Index::Const(3)])),
                    64,
                ),
                16,
                None,
            ),
            (
                Index::Mod(
                    Box::new(Index::Add(vec![Index::Var(Var::X), Index::Const(32)])),
                    64,
                ),
                16,
                Some(1),
            ),
            // r inside the division: unknown alignment.
            (
                Index::Div(
                    Box::new(Index::Add(vec![Index::Var(Var::X), Index::Var(Var::R)])),
                    64,
                ),
                16,
                None,
            ),
        ];
        for (e, block, want) in cases {
            let got = e.block_step(Var::X, block);
            assert_eq!(got, want, "{e} in blocks of {block}");
            let Some(step) = got else { continue };
            for x0 in (0..4 * 8192).step_by(block as usize) {
                for rv in [0, 1, 7] {
                    let base = e.eval(x0, rv);
                    for i in [0, 1, block / 2, block - 1] {
                        assert_eq!(
                            e.eval(x0 + i, rv),
                            base + step * i,
                            "{e} at x0 {x0} + {i}, r {rv}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn unflatten_then_linear_is_the_identity_for_contiguous_strides() {
        let shape = [4, 4, 4];
        let idx = unflatten(Index::var(Var::X), &shape, R);
        let back = linear(&idx, &[16, 4, 1], 0);
        assert_eq!(back, Index::var(Var::X));
        let scaled = linear(&unflatten(Index::var(Var::X), &[2, 3], R), &[24, 8], 0);
        assert_eq!(scaled, Index::var(Var::X).times(8));
    }

    #[test]
    fn simplification_uses_the_loop_ranges() {
        assert_eq!(Index::var(Var::R).rem(16, R), Index::var(Var::R));
        assert_eq!(Index::var(Var::R).div(16, R), Index::Const(0));
        assert_eq!(
            Index::var(Var::X).times(4).div(2, R),
            Index::var(Var::X).times(2)
        );
        assert_eq!(
            Index::var(Var::X).div(4, R).div(4, R),
            Index::Div(Box::new(Index::var(Var::X)), 16)
        );
        assert_eq!(Index::var(Var::X).plus(Index::Const(0)), Index::var(Var::X));
    }

    #[test]
    fn division_of_a_sum_with_a_bounded_remainder() {
        let e = Index::var(Var::X).times(768).plus(Index::var(Var::R));
        let r = Ranges { x: 4096, r: 768 };
        assert_eq!(e.clone().div(768, r), Index::var(Var::X));
        assert_eq!(e.clone().rem(768, r), Index::var(Var::R));
        // Unflattening a reshape of [4096, 768] into [8, 512, 768] gives the row's own dims.
        let idx = unflatten(e, &[8, 512, 768], r);
        assert_eq!(
            idx,
            unflatten(Index::var(Var::X), &[8, 512], r)
                .into_iter()
                .chain([Index::var(Var::R)])
                .collect::<Vec<_>>()
        );
        // The remainder must be bounded: r ranges past 768 here.
        let wide = Ranges { x: 4096, r: 1024 };
        let f = Index::var(Var::X).times(768).plus(Index::var(Var::R));
        assert!(matches!(f.div(768, wide), Index::Div(..)));
    }

    #[test]
    fn permuted_access_evaluates_like_the_strided_tensor() {
        // A [2, 3] contiguous tensor read transposed as [3, 2].
        let r = Ranges { x: 6, r: 1 };
        let idx = unflatten(Index::var(Var::X), &[3, 2], r);
        let access = linear(&idx, &[1, 3], 0);
        let got: Vec<i64> = (0..6).map(|x| access.eval(x, 0)).collect();
        assert_eq!(got, [0, 3, 1, 4, 2, 5]);
        assert_eq!(access.to_string(), "((xindex) // 2) + 3*((xindex) % 2)");
    }
}
