//! Symbolic sizes: integer expressions over the symbols of a dynamic compile (a batch
//! size, a sequence length), each symbol with an inclusive range.
//!
//! An [`Expr`] is kept canonical: a sum of terms, each an integer coefficient times a
//! product of atoms (symbols, and the floor divisions, remainders, minima and maxima that
//! do not simplify away), the terms sorted, no coefficient zero. Expressions the rules
//! here prove equal are then one value (`==`, hashing), which is what shape inference
//! needs to check that two dims agree. The constructors simplify the forms exported
//! programs produce: exact division by a constant or by a product (`(s0*s1)//s1`), a
//! remainder smaller than the divisor dropped from a division (`(2*s0 + 1)//2`), nested
//! divisions merged, remainders of multiples, and minima and maxima the symbols' ranges
//! decide (`Min(16, 16*s0)` with `s0 >= 1`).
//!
//! Division and remainder are Python's (floor), as PyTorch computes sizes. [`parse`]
//! reads the expressions `torch.export` writes, in either of its forms (`16*s27` and
//! `Mul(Integer(16), Symbol('s27', positive=True, integer=True))`).

use std::fmt::Write as _;

mod parse;
mod size;
pub use parse::parse;
pub use size::Size;

/// A size expression of an export (either form) as Python writes it, its symbols by name
/// and without ranges; `None` where it does not parse.
pub fn pretty(text: &str) -> Option<String> {
    let names = std::cell::RefCell::new(Symbols::default());
    let unranged = Symbols::default();
    let expr = parse(text, &unranged, &mut |name| {
        let mut table = names.borrow_mut();
        match table.find(name) {
            Some(id) => Ok(id),
            None => table
                .add(name, i64::MIN, i64::MAX)
                .map_err(|e| e.to_string()),
        }
    })
    .ok()?;
    let shown = expr.display(&names.borrow());
    Some(shown)
}

/// How [`Expr::display_with`] writes an expression.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syntax {
    /// Python's: `//` and `%`, `min` and `max`, powers as products (a Python wrapper,
    /// Triton).
    Python,
    /// C's, with Python's floor division and remainder spelled out (C++ kernels and
    /// wrappers).
    C,
}

/// A symbol of a [`Symbols`] table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SymId(pub u32);

/// A named size that varies between calls, within `lo..=hi`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    /// The name (`s0`, `batch`).
    pub name: String,
    /// The smallest value, inclusive.
    pub lo: i64,
    /// The largest value, inclusive.
    pub hi: i64,
    /// The value decisions are made at (launch configs, tiling, fusion thresholds): the
    /// example's size. Never read for correctness.
    pub hint: i64,
}

/// Why a symbolic expression cannot be built, parsed or evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SymError {
    /// A coefficient or a value past 64 bits.
    #[error("a size past 64 bits: {0}")]
    Overflow(String),
    /// A division or remainder by zero.
    #[error("a size divided by zero: {0}")]
    DivisionByZero(String),
    /// An expression that does not parse.
    #[error("cannot read the size expression `{text}`: {why}")]
    Parse {
        /// the expression
        text: String,
        /// what is wrong, where
        why: String,
    },
    /// A symbol defined twice, or with an empty range.
    #[error("symbol `{name}`: {why}")]
    Symbol {
        /// the symbol
        name: String,
        /// what is wrong
        why: String,
    },
}

/// The symbols of a graph, in the order they were declared.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Symbols {
    list: Vec<Symbol>,
}

impl Symbols {
    /// Declares symbol `name` over `lo..=hi`, refusing a name declared before or an
    /// empty range.
    pub fn add(&mut self, name: &str, lo: i64, hi: i64) -> Result<SymId, SymError> {
        let bad = |why: String| SymError::Symbol {
            name: name.to_string(),
            why,
        };
        if self.find(name).is_some() {
            return Err(bad("declared twice".into()));
        }
        if lo > hi {
            return Err(bad(format!("an empty range {lo}..={hi}")));
        }
        let id = SymId(u32::try_from(self.list.len()).map_err(|_| bad("too many symbols".into()))?);
        self.list.push(Symbol {
            name: name.to_string(),
            lo,
            hi,
            hint: lo,
        });
        Ok(id)
    }

    /// A table of no symbols, for what is static.
    pub fn none() -> &'static Symbols {
        static NONE: Symbols = Symbols { list: Vec::new() };
        &NONE
    }

    /// Makes `value` symbol `id`'s hint (it starts at the range's low end), refusing a
    /// value outside the range.
    pub fn set_hint(&mut self, id: SymId, value: i64) -> Result<(), SymError> {
        let Some(s) = self.list.get_mut(id.0 as usize) else {
            return Err(SymError::Symbol {
                name: format!("#{}", id.0),
                why: "not in this table".into(),
            });
        };
        if value < s.lo || value > s.hi {
            return Err(SymError::Symbol {
                name: s.name.clone(),
                why: format!("a hint {value} outside {}..={}", s.lo, s.hi),
            });
        }
        s.hint = value;
        Ok(())
    }

    /// Symbol `id`'s hint; 1 for an id of no symbol here (which only a bug makes, and
    /// 1 keeps arithmetic on it defined).
    pub fn hint(&self, id: SymId) -> i64 {
        self.get(id).map_or(1, |s| s.hint)
    }

    /// The symbol named `name`.
    pub fn find(&self, name: &str) -> Option<SymId> {
        let at = self.list.iter().position(|s| s.name == name)?;
        Some(SymId(at as u32))
    }

    /// Symbol `id` (of this table).
    pub fn get(&self, id: SymId) -> Option<&Symbol> {
        self.list.get(id.0 as usize)
    }

    /// Every symbol with its id, in declaration order.
    pub fn iter(&self) -> impl Iterator<Item = (SymId, &Symbol)> {
        self.list
            .iter()
            .enumerate()
            .map(|(i, s)| (SymId(i as u32), s))
    }

    /// Number of symbols.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether there are none (a static graph).
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    fn range(&self, id: SymId) -> (i128, i128) {
        self.get(id)
            .map_or((i128::from(i64::MIN), i128::from(i64::MAX)), |s| {
                (i128::from(s.lo), i128::from(s.hi))
            })
    }
}

/// A factor of a term that is not a constant.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Atom {
    /// A symbol.
    Sym(SymId),
    /// `a // b` (floor) that does not simplify.
    FloorDiv(Box<Expr>, Box<Expr>),
    /// `a % b` (Python's: the sign of `b`) that does not simplify.
    Mod(Box<Expr>, Box<Expr>),
    /// The least of two or more expressions.
    Min(Vec<Expr>),
    /// The greatest of two or more expressions.
    Max(Vec<Expr>),
}

/// A product of atoms, each with a power of at least 1, sorted by atom; empty for the
/// constant term.
type Monomial = Vec<(Atom, u32)>;

/// A canonical integer expression ([module docs](self)).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Expr {
    terms: Vec<(Monomial, i64)>,
}

/// An interval of values, in 128 bits so that bounds of 64-bit sizes never overflow.
type Bounds = (i128, i128);

const UNBOUNDED: Bounds = (i64::MIN as i128, i64::MAX as i128);

fn overflow(what: &str) -> SymError {
    SymError::Overflow(what.to_string())
}

fn floor_div_i128(a: i128, b: i128) -> i128 {
    let q = a / b;
    if (a % b != 0) && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    }
}

fn py_mod_i128(a: i128, b: i128) -> i128 {
    a - b * floor_div_i128(a, b)
}

fn mul_monomials(a: &Monomial, b: &Monomial) -> Monomial {
    let mut out: Monomial = a.clone();
    for (atom, p) in b {
        match out.iter_mut().find(|(x, _)| x == atom) {
            Some((_, q)) => *q += p,
            None => out.push((atom.clone(), *p)),
        }
    }
    out.sort();
    out
}

/// `a / b` where `b`'s every atom appears in `a` at least as often.
fn divide_monomial(a: &Monomial, b: &Monomial) -> Option<Monomial> {
    let mut out = a.clone();
    for (atom, p) in b {
        let at = out.iter().position(|(x, _)| x == atom)?;
        if out[at].1 < *p {
            return None;
        }
        out[at].1 -= p;
        if out[at].1 == 0 {
            out.remove(at);
        }
    }
    Some(out)
}

impl From<i64> for Expr {
    fn from(c: i64) -> Expr {
        Expr::constant(c)
    }
}

impl Expr {
    /// The constant `c`.
    pub fn constant(c: i64) -> Expr {
        if c == 0 {
            return Expr::default();
        }
        Expr {
            terms: vec![(Vec::new(), c)],
        }
    }

    /// The symbol `id`.
    pub fn symbol(id: SymId) -> Expr {
        Expr::atom(Atom::Sym(id))
    }

    fn atom(a: Atom) -> Expr {
        Expr {
            terms: vec![(vec![(a, 1)], 1)],
        }
    }

    /// The value, when the expression is a constant.
    pub fn as_const(&self) -> Option<i64> {
        match self.terms.as_slice() {
            [] => Some(0),
            [(m, c)] if m.is_empty() => Some(*c),
            _ => None,
        }
    }

    /// Canonical form of a sum of `terms`: equal monomials merged, zeros dropped.
    fn from_terms(mut terms: Vec<(Monomial, i128)>) -> Result<Expr, SymError> {
        terms.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(Monomial, i64)> = Vec::with_capacity(terms.len());
        let mut pending: Option<(Monomial, i128)> = None;
        let mut flush = |p: Option<(Monomial, i128)>| -> Result<(), SymError> {
            if let Some((m, c)) = p {
                if c != 0 {
                    let c = i64::try_from(c).map_err(|_| overflow("a coefficient"))?;
                    out.push((m, c));
                }
            }
            Ok(())
        };
        for (m, c) in terms {
            pending = match pending {
                Some((pm, pc)) if pm == m => Some((pm, pc + c)),
                other => {
                    flush(other)?;
                    Some((m, c))
                }
            };
        }
        flush(pending)?;
        Ok(Expr { terms: out })
    }

    fn wide_terms(&self) -> impl Iterator<Item = (Monomial, i128)> + '_ {
        self.terms.iter().map(|(m, c)| (m.clone(), i128::from(*c)))
    }

    /// `self + other`.
    pub fn add(&self, other: &Expr) -> Result<Expr, SymError> {
        Expr::from_terms(self.wide_terms().chain(other.wide_terms()).collect())
    }

    /// `self - other`.
    pub fn sub(&self, other: &Expr) -> Result<Expr, SymError> {
        self.add(&other.scale(-1)?)
    }

    /// `c * self`.
    pub fn scale(&self, c: i64) -> Result<Expr, SymError> {
        Expr::from_terms(
            self.wide_terms()
                .map(|(m, k)| (m, k * i128::from(c)))
                .collect(),
        )
    }

    /// `self * other`.
    pub fn mul(&self, other: &Expr) -> Result<Expr, SymError> {
        let mut terms = Vec::with_capacity(self.terms.len() * other.terms.len());
        for (ma, ca) in &self.terms {
            for (mb, cb) in &other.terms {
                terms.push((mul_monomials(ma, mb), i128::from(*ca) * i128::from(*cb)));
            }
        }
        Expr::from_terms(terms)
    }

    /// `self ** n`.
    pub fn pow(&self, n: u32) -> Result<Expr, SymError> {
        let mut out = Expr::constant(1);
        for _ in 0..n {
            out = out.mul(self)?;
        }
        Ok(out)
    }

    /// `self / d` where that is exact for every value of the symbols: each term divides
    /// by a constant `d`, or by `d`'s one term. `None` where the rules cannot show it.
    pub fn exact_div(&self, d: &Expr) -> Option<Expr> {
        if let (Some(a), Some(b)) = (self.as_const(), d.as_const()) {
            return (b != 0 && a % b == 0).then(|| Expr::constant(a / b));
        }
        let [(dm, dc)] = d.terms.as_slice() else {
            return None;
        };
        let quotient: Option<Vec<(Monomial, i128)>> = self
            .terms
            .iter()
            .map(|(m, c)| {
                let q = divide_monomial(m, dm)?;
                (c % dc == 0).then(|| (q, i128::from(c / dc)))
            })
            .collect();
        Expr::from_terms(quotient?).ok()
    }

    /// Whether every value is a multiple of `k` (each coefficient is: the atoms are
    /// integers).
    pub fn is_multiple_of(&self, k: i64) -> bool {
        k != 0 && self.terms.iter().all(|(_, c)| c % k == 0)
    }

    /// Symbols that make every value a multiple of `k` when each of them is one: a
    /// symbol of each term whose coefficient is not a multiple of `k` (the term is a
    /// multiple then, its other atoms being integers). `None` where such a term has no
    /// symbol (a constant, or divisions, remainders, minima and maxima alone).
    pub fn multiple_of_given(&self, k: i64) -> Option<Vec<SymId>> {
        if k == 0 {
            return None;
        }
        let mut given: Vec<SymId> = Vec::new();
        for (monomial, c) in &self.terms {
            if c % k == 0 {
                continue;
            }
            let symbol = monomial.iter().find_map(|(atom, _)| match atom {
                Atom::Sym(s) => Some(*s),
                _ => None,
            })?;
            if !given.contains(&symbol) {
                given.push(symbol);
            }
        }
        given.sort();
        Some(given)
    }

    /// The symbol, when the expression is exactly one symbol.
    pub fn as_symbol(&self) -> Option<SymId> {
        match self.terms.as_slice() {
            [(m, 1)] => match m.as_slice() {
                [(Atom::Sym(s), 1)] => Some(*s),
                _ => None,
            },
            _ => None,
        }
    }

    /// `self // d` (floor division), simplified where `symbols`' ranges allow.
    pub fn floor_div(&self, d: &Expr, symbols: &Symbols) -> Result<Expr, SymError> {
        if let Some(b) = d.as_const() {
            return self.floor_div_const(b, symbols);
        }
        // Exact division by one term that divides every term (`(s0*s1)//s1`).
        if let Some(q) = self.exact_div(d) {
            return Ok(q);
        }
        Ok(Expr::atom(Atom::FloorDiv(
            Box::new(self.clone()),
            Box::new(d.clone()),
        )))
    }

    fn floor_div_const(&self, b: i64, symbols: &Symbols) -> Result<Expr, SymError> {
        if b == 0 {
            return Err(SymError::DivisionByZero(format!("{self:?} // 0")));
        }
        if b < 0 {
            return self.scale(-1)?.floor_div_const(
                b.checked_neg().ok_or_else(|| overflow("a divisor"))?,
                symbols,
            );
        }
        if b == 1 {
            return Ok(self.clone());
        }
        if let Some(a) = self.as_const() {
            return Ok(Expr::constant(floor_div_i128(a.into(), b.into()) as i64));
        }
        // (x // c) // b = x // (c * b) for positive c.
        if let [(m, 1)] = self.terms.as_slice() {
            if let [(Atom::FloorDiv(x, c), 1)] = m.as_slice() {
                if let Some(c) = c.as_const().filter(|c| *c > 0) {
                    let cb = c.checked_mul(b).ok_or_else(|| overflow("a divisor"))?;
                    return x.floor_div_const(cb, symbols);
                }
            }
        }
        // self = b*q + r: self // b = q + r // b, and r // b is one value where r's range
        // lies between two multiples of b.
        let (mut q, mut r) = (Vec::new(), Vec::new());
        for (m, c) in &self.terms {
            if c % b == 0 {
                q.push((m.clone(), i128::from(c / b)));
            } else {
                r.push((m.clone(), i128::from(*c)));
            }
        }
        let q = Expr::from_terms(q)?;
        let r = Expr::from_terms(r)?;
        let (lo, hi) = r.bounds(symbols);
        let (flo, fhi) = (floor_div_i128(lo, b.into()), floor_div_i128(hi, b.into()));
        let rest = if flo == fhi {
            Expr::constant(i64::try_from(flo).map_err(|_| overflow("a quotient"))?)
        } else {
            Expr::atom(Atom::FloorDiv(Box::new(r), Box::new(Expr::constant(b))))
        };
        q.add(&rest)
    }

    /// `self % d` (Python's remainder, of `d`'s sign), simplified where `symbols`'
    /// ranges allow.
    pub fn modulo(&self, d: &Expr, symbols: &Symbols) -> Result<Expr, SymError> {
        let atom = |a: &Expr| Expr::atom(Atom::Mod(Box::new(a.clone()), Box::new(d.clone())));
        let Some(b) = d.as_const() else {
            // A multiple of a one-term divisor leaves nothing (`(s0*s1) % s1`).
            if let [(dm, dc)] = d.terms.as_slice() {
                let multiple = self
                    .terms
                    .iter()
                    .all(|(m, c)| c % dc == 0 && divide_monomial(m, dm).is_some());
                if multiple {
                    return Ok(Expr::default());
                }
            }
            return Ok(atom(self));
        };
        if b == 0 {
            return Err(SymError::DivisionByZero(format!("{self:?} % 0")));
        }
        if let Some(a) = self.as_const() {
            return Ok(Expr::constant(py_mod_i128(a.into(), b.into()) as i64));
        }
        if b < 0 {
            return Ok(atom(self));
        }
        // Each coefficient modulo b: the remainder is periodic in every term.
        let r = Expr::from_terms(
            self.wide_terms()
                .map(|(m, c)| (m, py_mod_i128(c, b.into())))
                .collect(),
        )?;
        if let Some(c) = r.as_const() {
            return Ok(Expr::constant(c));
        }
        let (lo, hi) = r.bounds(symbols);
        if lo >= 0 && hi < i128::from(b) {
            return Ok(r);
        }
        Ok(Expr::atom(Atom::Mod(
            Box::new(r),
            Box::new(Expr::constant(b)),
        )))
    }

    /// The least of `args` (at least one), dropping those the symbols' ranges prove
    /// no smaller than another.
    pub fn min(args: &[Expr], symbols: &Symbols) -> Result<Expr, SymError> {
        Expr::extremum(args, symbols, true)
    }

    /// The greatest of `args` (at least one), likewise.
    pub fn max(args: &[Expr], symbols: &Symbols) -> Result<Expr, SymError> {
        Expr::extremum(args, symbols, false)
    }

    fn extremum(args: &[Expr], symbols: &Symbols, least: bool) -> Result<Expr, SymError> {
        // Flattened: Min(a, Min(b, c)) = Min(a, b, c).
        let mut flat: Vec<Expr> = Vec::new();
        for a in args {
            match a.terms.as_slice() {
                [(m, 1)] if matches!(m.as_slice(), [(Atom::Min(_), 1)]) && least => {
                    if let [(Atom::Min(inner), 1)] = m.as_slice() {
                        flat.extend(inner.iter().cloned());
                    }
                }
                [(m, 1)] if matches!(m.as_slice(), [(Atom::Max(_), 1)]) && !least => {
                    if let [(Atom::Max(inner), 1)] = m.as_slice() {
                        flat.extend(inner.iter().cloned());
                    }
                }
                _ => flat.push(a.clone()),
            }
        }
        flat.sort();
        flat.dedup();
        // Drop each argument another is provably at least as good as (`a <= b` always
        // for a minimum: b goes).
        let mut keep = vec![true; flat.len()];
        for i in 0..flat.len() {
            for j in 0..flat.len() {
                if i == j || !keep[i] || !keep[j] {
                    continue;
                }
                let (lo, hi) = flat[i].sub(&flat[j])?.bounds(symbols);
                let i_wins = if least { hi <= 0 } else { lo >= 0 };
                if i_wins {
                    keep[j] = false;
                }
            }
        }
        let mut kept: Vec<Expr> = flat
            .into_iter()
            .zip(keep)
            .filter_map(|(e, k)| k.then_some(e))
            .collect();
        match kept.len() {
            0 => Err(SymError::Parse {
                text: if least { "Min()" } else { "Max()" }.into(),
                why: "no arguments".into(),
            }),
            1 => Ok(kept.remove(0)),
            _ => Ok(Expr::atom(if least {
                Atom::Min(kept)
            } else {
                Atom::Max(kept)
            })),
        }
    }

    /// The smallest and largest values over `symbols`' ranges (conservative: the true
    /// range lies inside), clamped to 64 bits.
    pub fn bounds(&self, symbols: &Symbols) -> Bounds {
        let mut total: Bounds = (0, 0);
        for (m, c) in &self.terms {
            let c = i128::from(*c);
            let mut b: Bounds = (1, 1);
            for (atom, p) in m {
                let a = atom_bounds(atom, symbols);
                for _ in 0..*p {
                    b = mul_bounds(b, a);
                }
            }
            let scaled = mul_bounds(b, (c, c));
            total = (
                total.0.saturating_add(scaled.0),
                total.1.saturating_add(scaled.1),
            );
        }
        (total.0.max(UNBOUNDED.0), total.1.min(UNBOUNDED.1))
    }

    /// The value with each symbol at `value(id)`, in Python's arithmetic.
    pub fn eval(&self, value: &dyn Fn(SymId) -> i64) -> Result<i64, SymError> {
        let mut total: i128 = 0;
        for (m, c) in &self.terms {
            let mut t = i128::from(*c);
            for (atom, p) in m {
                let a = i128::from(eval_atom(atom, value)?);
                for _ in 0..*p {
                    t = t.checked_mul(a).ok_or_else(|| overflow("a term"))?;
                }
            }
            total = total.checked_add(t).ok_or_else(|| overflow("a sum"))?;
        }
        i64::try_from(total).map_err(|_| overflow("a size"))
    }

    /// The symbols the expression reads, sorted.
    pub fn symbols(&self) -> Vec<SymId> {
        let mut out = Vec::new();
        self.collect_symbols(&mut out);
        out.sort();
        out.dedup();
        out
    }

    fn collect_symbols(&self, out: &mut Vec<SymId>) {
        for (m, _) in &self.terms {
            for (atom, _) in m {
                match atom {
                    Atom::Sym(s) => out.push(*s),
                    Atom::FloorDiv(a, b) | Atom::Mod(a, b) => {
                        a.collect_symbols(out);
                        b.collect_symbols(out);
                    }
                    Atom::Min(xs) | Atom::Max(xs) => xs.iter().for_each(|x| x.collect_symbols(out)),
                }
            }
        }
    }

    /// The expression in Python's syntax, each symbol by its name in `symbols`
    /// (`2*s0 + 1`, `(s0 + 1)//2`, `max(1, s0)`): what a Python wrapper computes.
    pub fn display(&self, symbols: &Symbols) -> String {
        self.display_with(
            &|s| {
                symbols
                    .get(s)
                    .map_or_else(|| format!("<symbol {}>", s.0), |s| s.name.clone())
            },
            Syntax::Python,
        )
    }

    /// [`Expr::display`] with each symbol written as `name` gives it: generated code
    /// names a symbol by its id (`ks0`), never by a name from an input file.
    pub fn display_with(&self, name: &dyn Fn(SymId) -> String, syntax: Syntax) -> String {
        if self.terms.is_empty() {
            return "0".into();
        }
        let mut out = String::new();
        // The constant (sorted first) goes last, as one writes it.
        let mut terms: Vec<&(Monomial, i64)> =
            self.terms.iter().filter(|(m, _)| !m.is_empty()).collect();
        terms.extend(self.terms.iter().filter(|(m, _)| m.is_empty()));
        for (k, (m, c)) in terms.into_iter().enumerate() {
            let (sign, c) = if *c < 0 {
                ("-", c.unsigned_abs())
            } else {
                ("+", c.unsigned_abs())
            };
            match (k, sign) {
                (0, "-") => out.push('-'),
                (0, _) => {}
                (_, s) => {
                    let _ = write!(out, " {s} ");
                }
            }
            if m.is_empty() {
                let _ = write!(out, "{c}");
                continue;
            }
            if c != 1 {
                let _ = write!(out, "{c}*");
            }
            let factors: Vec<String> = m
                .iter()
                .map(|(a, p)| {
                    let a = atom_text(a, name, syntax);
                    match (p, syntax) {
                        (1, _) => a,
                        // A product rather than `**`, which Triton's JIT may not take
                        // on integer arguments.
                        (p, _) => vec![a; *p as usize].join("*"),
                    }
                })
                .collect();
            out.push_str(&factors.join("*"));
        }
        out
    }

    /// Whether the printed expression is one operand as it stands: a constant of at
    /// least zero, or one atom.
    pub fn is_operand(&self) -> bool {
        match self.terms.as_slice() {
            [] => true,
            [(m, c)] if m.is_empty() => *c >= 0,
            [(m, 1)] => matches!(m.as_slice(), [(_, 1)]),
            _ => false,
        }
    }
}

fn atom_text(a: &Atom, name: &dyn Fn(SymId) -> String, syntax: Syntax) -> String {
    let wrapped = |e: &Expr| {
        let t = e.display_with(name, syntax);
        if e.is_operand() {
            t
        } else {
            format!("({t})")
        }
    };
    let texts =
        |xs: &[Expr]| -> Vec<String> { xs.iter().map(|x| x.display_with(name, syntax)).collect() };
    match (a, syntax) {
        (Atom::Sym(s), _) => name(*s),
        (Atom::FloorDiv(x, y), Syntax::Python) => format!("({}//{})", wrapped(x), wrapped(y)),
        (Atom::Mod(x, y), Syntax::Python) => format!("({} % {})", wrapped(x), wrapped(y)),
        (Atom::Min(xs), Syntax::Python) => format!("min({})", texts(xs).join(", ")),
        (Atom::Max(xs), Syntax::Python) => format!("max({})", texts(xs).join(", ")),
        // C's `/` and `%` truncate: adjust to Python's floor where the signs differ.
        (Atom::FloorDiv(x, y), Syntax::C) => {
            let (x, y) = (wrapped(x), wrapped(y));
            format!("({x} / {y} - (({x} % {y} != 0) && (({x} < 0) != ({y} < 0))))")
        }
        (Atom::Mod(x, y), Syntax::C) => {
            let (x, y) = (wrapped(x), wrapped(y));
            format!("({x} % {y} + ((({x} % {y} != 0) && (({x} < 0) != ({y} < 0))) ? {y} : 0))")
        }
        (Atom::Min(xs) | Atom::Max(xs), Syntax::C) => {
            let op = if matches!(a, Atom::Min(_)) { "<" } else { ">" };
            let mut parts = texts(xs).into_iter();
            let first = parts.next().unwrap_or_else(|| "0".into());
            parts.fold(first, |acc, b| {
                format!("(({acc}) {op} ({b}) ? ({acc}) : ({b}))")
            })
        }
    }
}

fn mul_bounds(a: Bounds, b: Bounds) -> Bounds {
    let products = [
        a.0.saturating_mul(b.0),
        a.0.saturating_mul(b.1),
        a.1.saturating_mul(b.0),
        a.1.saturating_mul(b.1),
    ];
    let lo = products.iter().copied().min().unwrap_or(0);
    let hi = products.iter().copied().max().unwrap_or(0);
    (lo, hi)
}

fn atom_bounds(a: &Atom, symbols: &Symbols) -> Bounds {
    match a {
        Atom::Sym(s) => symbols.range(*s),
        Atom::FloorDiv(x, y) => {
            let ((xl, xh), (yl, yh)) = (x.bounds(symbols), y.bounds(symbols));
            if yl <= 0 {
                return UNBOUNDED;
            }
            let qs = [
                floor_div_i128(xl, yl),
                floor_div_i128(xl, yh),
                floor_div_i128(xh, yl),
                floor_div_i128(xh, yh),
            ];
            (
                qs.iter().copied().min().unwrap_or(0),
                qs.iter().copied().max().unwrap_or(0),
            )
        }
        Atom::Mod(x, y) => {
            let ((xl, xh), (yl, yh)) = (x.bounds(symbols), y.bounds(symbols));
            if yl <= 0 {
                return UNBOUNDED;
            }
            if xl >= 0 && xh < yl {
                (xl, xh)
            } else {
                (0, yh - 1)
            }
        }
        Atom::Min(xs) => xs
            .iter()
            .map(|x| x.bounds(symbols))
            .fold((i128::MAX, i128::MAX), |(l, h), (xl, xh)| {
                (l.min(xl), h.min(xh))
            }),
        Atom::Max(xs) => xs
            .iter()
            .map(|x| x.bounds(symbols))
            .fold((i128::MIN, i128::MIN), |(l, h), (xl, xh)| {
                (l.max(xl), h.max(xh))
            }),
    }
}

fn eval_atom(a: &Atom, value: &dyn Fn(SymId) -> i64) -> Result<i64, SymError> {
    let pair = |x: &Expr, y: &Expr| -> Result<(i128, i128), SymError> {
        let (x, y) = (x.eval(value)?, y.eval(value)?);
        if y == 0 {
            return Err(SymError::DivisionByZero(format!("{x} by 0")));
        }
        Ok((x.into(), y.into()))
    };
    let v = match a {
        Atom::Sym(s) => return Ok(value(*s)),
        Atom::FloorDiv(x, y) => {
            let (x, y) = pair(x, y)?;
            floor_div_i128(x, y)
        }
        Atom::Mod(x, y) => {
            let (x, y) = pair(x, y)?;
            py_mod_i128(x, y)
        }
        Atom::Min(xs) | Atom::Max(xs) => {
            let vals = xs
                .iter()
                .map(|x| x.eval(value))
                .collect::<Result<Vec<_>, _>>()?;
            let v = if matches!(a, Atom::Min(_)) {
                vals.into_iter().min()
            } else {
                vals.into_iter().max()
            };
            return v.ok_or_else(|| overflow("an empty minimum"));
        }
    };
    i64::try_from(v).map_err(|_| overflow("a quotient"))
}

#[cfg(test)]
mod tests;
