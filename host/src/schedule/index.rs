//! Index arithmetic: the expressions that say which element of a buffer a
//! kernel reads or writes. Views (permute, reshape, expand, slice, select,
//! cat pieces) never copy data: they become these expressions.
//!
//! An [`Index`] is an integer expression over the kernel's two loop variables
//! (`x`, the flat index of the rows or elements a program owns, and `r`, the
//! flat reduction index). Constructors simplify as they build, using the known
//! ranges of the loop variables, so that generated code stays readable.

use std::fmt;

use crate::graph::sym::{self, SymId, Symbols};

/// A size free of the loop variables: an integer, or an expression over the size
/// symbols of a dynamic compile. A static compile's sizes are all constants, and
/// take [`Size::as_const`]'s fast path everywhere here.
pub use crate::graph::shape::{consts, contiguous_sizes, sizes};
pub use crate::graph::sym::Size;

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
    /// A size: a constant, or an expression over size symbols.
    Const(Size),
    /// A sum of terms.
    Add(Vec<Index>),
    /// A product with a size.
    Mul(Box<Index>, Size),
    /// Floor division by a positive size (operands are never negative).
    Div(Box<Index>, Size),
    /// Remainder by a positive size (operands are never negative).
    Mod(Box<Index>, Size),
}

/// The exclusive upper bounds of the loop variables, and the ranges of the size
/// symbols, for simplification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ranges<'a> {
    /// `x` ranges over `0..x`.
    pub x: Size,
    /// `r` ranges over `0..r`.
    pub r: Size,
    /// The size symbols the sizes read.
    pub symbols: &'a Symbols,
}

impl Ranges<'static> {
    /// The ranges of a static kernel.
    pub fn fixed(x: i64, r: i64) -> Ranges<'static> {
        Ranges {
            x: Size::from(x),
            r: Size::from(r),
            symbols: Symbols::none(),
        }
    }
}

impl Ranges<'_> {
    /// The interval that holds every value of `s`.
    fn bounds(&self, s: &Size) -> (i128, i128) {
        s.bounds(self.symbols)
    }
}

/// `a + b`, or `None` past 64 bits.
fn size_add(a: &Size, b: &Size) -> Option<Size> {
    match (a.as_const(), b.as_const()) {
        (Some(a), Some(b)) => a.checked_add(b).map(Size::from),
        _ => a.add(b).ok(),
    }
}

/// `a * b`, or `None` past 64 bits.
fn size_mul(a: &Size, b: &Size) -> Option<Size> {
    match (a.as_const(), b.as_const()) {
        (Some(a), Some(b)) => a.checked_mul(b).map(Size::from),
        _ => a.mul(b).ok(),
    }
}

/// `a / k` where that is exact for every value of the symbols.
fn size_exact_div(a: &Size, k: &Size) -> Option<Size> {
    match (a.as_const(), k.as_const()) {
        (Some(a), Some(k)) => (k != 0 && a % k == 0).then(|| Size::from(a / k)),
        _ => a.exact_div(k),
    }
}

fn floor_div_i128(a: i128, b: i128) -> i128 {
    let q = a / b;
    if a % b != 0 && (a < 0) != (b < 0) {
        q - 1
    } else {
        q
    }
}

impl Index {
    /// A loop variable.
    pub fn var(v: Var) -> Index {
        Index::Var(v)
    }

    /// A constant.
    pub fn constant(c: impl Into<Size>) -> Index {
        Index::Const(c.into())
    }

    /// The constant, where the expression is one integer.
    pub fn as_const(&self) -> Option<i64> {
        match self {
            Index::Const(c) => c.as_const(),
            _ => None,
        }
    }

    /// The largest value this expression can take, if it can be bounded.
    pub fn max_value(&self, ranges: &Ranges) -> Option<i128> {
        match self {
            Index::Var(Var::X) => Some(ranges.bounds(&ranges.x).1 - 1),
            Index::Var(Var::R) => Some(ranges.bounds(&ranges.r).1 - 1),
            Index::Const(c) => Some(ranges.bounds(c).1),
            Index::Add(terms) => terms
                .iter()
                .try_fold(0i128, |acc, t| acc.checked_add(t.max_value(ranges)?)),
            Index::Mul(e, k) => {
                let (lo, hi) = ranges.bounds(k);
                let m = e.max_value(ranges)?;
                (lo >= 0).then_some(())?;
                m.checked_mul(if m >= 0 { hi } else { lo })
            }
            Index::Div(e, k) => {
                let (lo, hi) = ranges.bounds(k);
                let m = e.max_value(ranges)?;
                (lo >= 1).then(|| floor_div_i128(m, if m >= 0 { lo } else { hi }))
            }
            Index::Mod(e, k) => Some(e.max_value(ranges)?.min(ranges.bounds(k).1 - 1)),
        }
    }

    /// `self + other`, flattened and with constants folded.
    pub fn plus(self, other: Index) -> Index {
        let mut terms = Vec::new();
        let mut constant = Size::default();
        let mut fold = |c: Size, terms: &mut Vec<Index>| match size_add(&constant, &c) {
            Some(sum) => constant = sum,
            None => terms.push(Index::Const(c)),
        };
        for t in [self, other] {
            match t {
                Index::Add(inner) => {
                    for i in inner {
                        match i {
                            Index::Const(c) => fold(c, &mut terms),
                            other => terms.push(other),
                        }
                    }
                }
                Index::Const(c) => fold(c, &mut terms),
                other => terms.push(other),
            }
        }
        recombine_div_mod(&mut terms);
        if constant != Size::default() {
            terms.push(Index::Const(constant));
        }
        match terms.len() {
            0 => Index::constant(0),
            1 => terms.pop().unwrap_or(Index::constant(0)),
            _ => Index::Add(terms),
        }
    }

    /// `self * k`.
    pub fn times(self, k: impl Into<Size>) -> Index {
        let k: Size = k.into();
        match k.as_const() {
            Some(0) => return Index::constant(0),
            Some(1) => return self,
            _ => {}
        }
        match self {
            Index::Const(c) => match size_mul(&c, &k) {
                Some(ck) => Index::Const(ck),
                None => Index::Mul(Box::new(Index::Const(c)), k),
            },
            Index::Mul(e, a) => match size_mul(&a, &k) {
                Some(ak) => Index::Mul(e, ak),
                None => Index::Mul(Box::new(Index::Mul(e, a)), k),
            },
            Index::Add(terms) => terms
                .into_iter()
                .map(|t| t.times(k.clone()))
                .fold(Index::constant(0), Index::plus),
            e => Index::Mul(Box::new(e), k),
        }
    }

    /// `self // k` for a positive `k`.
    pub fn div(self, k: impl Into<Size>, ranges: &Ranges) -> Index {
        let k: Size = k.into();
        if k.as_const() == Some(1) {
            return self;
        }
        if let Index::Const(c) = &self {
            if let Ok(q) = c.floor_div(&k, ranges.symbols) {
                return Index::Const(q);
            }
        }
        if self
            .max_value(ranges)
            .is_some_and(|m| m < ranges.bounds(&k).0)
        {
            return Index::constant(0);
        }
        if let Some((multiples, _)) = split_multiples(&self, &k, ranges) {
            // (k*a + b) // k == a when 0 <= b < k.
            return multiples;
        }
        if let Some((_, rest, a, _)) = split_common_factor(&self, &k, ranges) {
            // (g*a + b) // k == a // (k/g) when g divides k and 0 <= b < g.
            return a.div(rest, ranges);
        }
        match self {
            // (e * a) // k with k dividing a.
            Index::Mul(e, a) => match size_exact_div(&a, &k) {
                Some(q) => e.times(q),
                None => Index::Div(Box::new(Index::Mul(e, a)), k),
            },
            // (e // a) // k == e // (a * k).
            Index::Div(e, a) => match size_mul(&a, &k) {
                Some(ak) => e.div(ak, ranges),
                None => Index::Div(Box::new(Index::Div(e, a)), k),
            },
            other => Index::Div(Box::new(other), k),
        }
    }

    /// `self % k` for a positive `k`.
    pub fn rem(self, k: impl Into<Size>, ranges: &Ranges) -> Index {
        let k: Size = k.into();
        if k.as_const() == Some(1) {
            return Index::constant(0);
        }
        if let Index::Const(c) = &self {
            if let Ok(m) = c.modulo(&k, ranges.symbols) {
                return Index::Const(m);
            }
        }
        if self
            .max_value(ranges)
            .is_some_and(|m| m < ranges.bounds(&k).0)
        {
            return self;
        }
        if let Some((_, rest)) = split_multiples(&self, &k, ranges) {
            // (k*a + b) % k == b when 0 <= b < k.
            return rest;
        }
        if let Some((g, rest, a, b)) = split_common_factor(&self, &k, ranges) {
            // (g*a + b) % k == g*(a % (k/g)) + b when g divides k and 0 <= b < g.
            return a.rem(rest, ranges).times(g).plus(b);
        }
        match self {
            Index::Mul(_, a) if size_exact_div(&a, &k).is_some() => Index::constant(0),
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

    /// The size symbols the expression reads, sorted.
    pub fn symbols(&self) -> Vec<SymId> {
        let mut out = Vec::new();
        self.collect_symbols(&mut out);
        out.sort();
        out.dedup();
        out
    }

    fn collect_symbols(&self, out: &mut Vec<SymId>) {
        match self {
            Index::Var(_) => {}
            Index::Const(c) => out.extend(c.symbols()),
            Index::Add(terms) => terms.iter().for_each(|t| t.collect_symbols(out)),
            Index::Mul(e, k) | Index::Div(e, k) | Index::Mod(e, k) => {
                out.extend(k.symbols());
                e.collect_symbols(out);
            }
        }
    }

    /// How far the expression moves when `v` grows by one, when that is the
    /// same everywhere: `Some(0)` when it does not use `v`, `Some(k)` when `v`
    /// appears only in sums and products by constants (never under a division or
    /// a remainder), `None` otherwise.
    pub fn step_along(&self, v: Var) -> Option<i64> {
        match self {
            Index::Var(w) => Some(i64::from(*w == v)),
            Index::Const(_) => Some(0),
            Index::Add(terms) => terms
                .iter()
                .try_fold(0i64, |acc, t| acc.checked_add(t.step_along(v)?)),
            Index::Mul(e, k) => match e.step_along(v)? {
                0 => Some(0),
                s => s.checked_mul(k.as_const()?),
            },
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
            Index::Const(c) => Some((0, c.is_multiple_of(block))),
            Index::Add(terms) => terms.iter().try_fold((0i64, true), |(step, aligned), t| {
                let (s, a) = t.block_walk(v, block)?;
                Some((step.checked_add(s)?, aligned && a))
            }),
            Index::Mul(e, k) => {
                let (s, a) = e.block_walk(v, block)?;
                let step = match s {
                    0 => 0,
                    s => s.checked_mul(k.as_const()?)?,
                };
                Some((step, a || k.is_multiple_of(block)))
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
                // A symbolic divisor is a positive size by construction.
                let positive = k.as_const().is_none_or(|k| k > 0);
                if s != 1 || !a || !positive || !k.is_multiple_of(block) {
                    return None;
                }
                match self {
                    Index::Div(..) => Some((0, false)),
                    _ => Some((1, true)),
                }
            }
        }
    }

    /// The value for concrete loop variables, each size at its hint (the decisions a
    /// compile makes; [`Index::eval_at`] computes a call's values).
    pub fn eval(&self, x: i64, r: i64) -> i64 {
        self.eval_with(x, r, &Size::hint)
    }

    /// The value for concrete loop variables and size symbols (each at `size`), in
    /// Python's floor arithmetic, saturating past 64 bits; a division or remainder by
    /// zero, which only an empty iteration space can hold, gives 0.
    pub fn eval_at(&self, x: i64, r: i64, size: &dyn Fn(SymId) -> i64) -> i64 {
        self.eval_with(x, r, &|s: &Size| s.eval(size).unwrap_or(0))
    }

    fn eval_with(&self, x: i64, r: i64, value: &dyn Fn(&Size) -> i64) -> i64 {
        let k = |s: &Size| s.as_const().unwrap_or_else(|| value(s));
        match self {
            Index::Var(Var::X) => x,
            Index::Var(Var::R) => r,
            Index::Const(c) => k(c),
            Index::Add(terms) => terms
                .iter()
                .fold(0i64, |acc, t| acc.saturating_add(t.eval_with(x, r, value))),
            Index::Mul(e, c) => e.eval_with(x, r, value).saturating_mul(k(c)),
            Index::Div(e, c) => match k(c) {
                0 => 0,
                c => e.eval_with(x, r, value).div_euclid(c),
            },
            Index::Mod(e, c) => match k(c) {
                0 => 0,
                c => e.eval_with(x, r, value).rem_euclid(c),
            },
        }
    }
}

/// A size as kernel text: its integer, or its expression with each symbol as the
/// kernel argument `ks<id>`, parenthesised unless it is one operand.
pub fn size_text(s: &Size, syntax: sym::Syntax) -> String {
    match s.as_const() {
        Some(c) => c.to_string(),
        None => {
            let text = s.display_with(&|id| format!("ks{}", id.0), syntax);
            if s.is_operand() {
                text
            } else {
                format!("({text})")
            }
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
            Index::Const(c) => f.write_str(&size_text(c, sym::Syntax::Python)),
            Index::Add(terms) => {
                for (i, t) in terms.iter().enumerate() {
                    match t.as_const() {
                        Some(c) if i > 0 && c < 0 => write!(f, " - {}", c.unsigned_abs())?,
                        _ if i > 0 => write!(f, " + {t}")?,
                        _ => write!(f, "{t}")?,
                    }
                }
                Ok(())
            }
            Index::Mul(e, k) => match **e {
                Index::Add(_) => write!(f, "{}*({e})", size_text(k, sym::Syntax::Python)),
                _ => write!(f, "{}*{e}", size_text(k, sym::Syntax::Python)),
            },
            Index::Div(e, k) => write!(f, "(({e}) // {})", size_text(k, sym::Syntax::Python)),
            Index::Mod(e, k) => write!(f, "(({e}) % {})", size_text(k, sym::Syntax::Python)),
        }
    }
}

/// For a sum `k*a + b` whose terms split into multiples of `k` and a
/// remainder `b` known to lie in `0..k`: `(a, b)`.
fn split_multiples(e: &Index, k: &Size, ranges: &Ranges) -> Option<(Index, Index)> {
    let Index::Add(terms) = e else { return None };
    let mut multiples = Index::constant(0);
    let mut rest = Index::constant(0);
    for t in terms {
        let quotient = match t {
            Index::Mul(inner, c) => size_exact_div(c, k).map(|q| (**inner).clone().times(q)),
            Index::Const(c) => size_exact_div(c, k).map(Index::Const),
            _ => None,
        };
        match quotient {
            Some(q) => multiples = multiples.plus(q),
            None => rest = rest.plus(t.clone()),
        }
    }
    let bounded = rest
        .max_value(ranges)
        .is_some_and(|m| m < ranges.bounds(k).0)
        && nonnegative(&rest, ranges);
    (bounded && multiples.as_const() != Some(0)).then_some((multiples, rest))
}

/// For a sum `g*a + b` with `g` a proper divisor of a constant `k` taken from a
/// term's constant coefficient and `b` known to lie in `0..g`: `(g, a, b)`.
fn split_common_factor(e: &Index, k: &Size, ranges: &Ranges) -> Option<(i64, Size, Index, Index)> {
    let Index::Add(terms) = e else { return None };
    // Each term's constant factor, or its largest one that divides an integer `k`; a
    // symbolic `k` takes a factor it is a multiple of for every value of its symbols
    // (`(16*x + r) // (16*s)`).
    let candidate = |c: i64| match k.as_const() {
        Some(k) => Some(gcd(c, k)).filter(|g| *g > 1 && *g < k),
        None => k.is_multiple_of(c).then_some(c),
    };
    let mut factors: Vec<i64> = terms
        .iter()
        .filter_map(|t| match t {
            Index::Mul(_, c) => c.as_const().filter(|c| *c > 1).and_then(candidate),
            _ => None,
        })
        .collect();
    factors.sort_unstable_by(|a, b| b.cmp(a));
    factors.dedup();
    factors.into_iter().find_map(|g| {
        let (a, b) = split_multiples(e, &Size::from(g), ranges)?;
        Some((g, size_exact_div(k, &Size::from(g))?, a, b))
    })
}

fn gcd(a: i64, b: i64) -> i64 {
    let (mut a, mut b) = (a.abs(), b.abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

fn nonnegative(e: &Index, ranges: &Ranges) -> bool {
    match e {
        Index::Var(_) => true,
        Index::Const(c) => ranges.bounds(c).0 >= 0,
        Index::Add(t) => t.iter().all(|t| nonnegative(t, ranges)),
        Index::Mul(e, k) => ranges.bounds(k).0 >= 0 && nonnegative(e, ranges),
        Index::Div(e, _) | Index::Mod(e, _) => nonnegative(e, ranges),
    }
}

/// A term as `(coefficient, expression)`.
fn coefficient(term: &Index) -> (Size, &Index) {
    match term {
        Index::Mul(e, k) => (k.clone(), e),
        other => (Size::from(1), other),
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
                Index::Div(e, a) => (&**e, a.clone()),
                other => (other, Size::from(1)),
            };
            let (Some(ak), Some(ck)) = (size_mul(&a, k), size_mul(&c, k)) else {
                continue;
            };
            for (j, u) in terms.iter().enumerate() {
                let (cu, inner_u) = coefficient(u);
                if let Index::Div(eu, ku) = inner_u {
                    if i != j && *ku == ak && &**eu == base && cu == ck {
                        let merged = if a.as_const() == Some(1) {
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
            m if m.as_const() == Some(0) => {}
            other => terms.push(other),
        }
    }
}

/// Splits a flat index over `shape` (row-major; integers or [`Size`]s) into one
/// index per dim.
pub fn unflatten<S: Clone + Into<Size>>(flat: Index, shape: &[S], ranges: &Ranges) -> Vec<Index> {
    let mut out = vec![Index::constant(0); shape.len()];
    let mut stride = Size::from(1);
    for d in (0..shape.len()).rev() {
        let size: &Size = &shape[d].clone().into();
        // A size-1 dim has only index 0; a size-0 dim has none (nothing iterates over
        // an empty space, so any index will do).
        out[d] = if ranges.bounds(size).1 <= 1 {
            Index::constant(0)
        } else {
            let q = flat.clone().div(stride.clone(), ranges);
            if d == 0 {
                q
            } else {
                q.rem(size.clone(), ranges)
            }
        };
        stride = match size.as_const() {
            Some(c) => size_mul(&stride, &Size::from(c.max(1))),
            // A symbolic size that can be 0 holds an empty space, where no stride is read.
            None => size_mul(&stride, size),
        }
        .unwrap_or_else(|| Size::from(i64::MAX));
    }
    out
}

/// The product of `sizes` (past 64 bits: `i64::MAX`, which no allocation meets).
pub fn product(sizes: &[Size]) -> Size {
    sizes
        .iter()
        .try_fold(Size::from(1), |acc, s| acc.mul(s))
        .unwrap_or_else(|_| Size::from(i64::MAX))
}

/// The sizes at their hints: what decisions read. (Until the code generators take
/// symbolic sizes, step 4 of `docs/dynamic-shapes.md`, no program with size symbols
/// reaches them, so they may also read these as the values.)
pub fn hints(sizes: &[Size]) -> Vec<i64> {
    sizes.iter().map(Size::hint).collect()
}

/// The linear offset of a multi-dimensional index with these strides (integers or
/// [`Size`]s).
pub fn linear<S: Clone + Into<Size>>(
    index: &[Index],
    strides: &[S],
    offset: impl Into<Size>,
) -> Index {
    index
        .iter()
        .zip(strides)
        .fold(Index::Const(offset.into()), |acc, (i, s)| {
            acc.plus(i.clone().times(s.clone()))
        })
}

#[cfg(test)]
mod tests;
