//! [`Size`]: a size of the compiler's IRs, an [`Expr`] that carries its value at the
//! symbols' hints.
//!
//! Decisions (launch configs, tiling, fusion thresholds, which of two layouts) read
//! [`Size::hint`], so a dynamic compile makes the static compile's choices at its
//! example and nothing needs the symbol table to make them. Correctness reads the
//! expression: its ranges ([`Size::bounds`]) or a guard the wrapper checks.

use super::{Expr, SymError, SymId, Symbols, Syntax};

/// A size: an integer, or an expression over size symbols with its value at their
/// hints ([module docs](self)). An integer is held as itself (no allocation: a static
/// compile's sizes are all integers). `Ord` is a canonical order for sorting and maps,
/// not a comparison of values: compare [`Size::hint`]s to decide, and bounds to prove.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Size(Repr);

/// An integer, or an expression that is not one (so that each size has one form).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Repr {
    Const(i64),
    Sym { expr: Expr, hint: i64 },
}

impl Default for Size {
    fn default() -> Size {
        Size(Repr::Const(0))
    }
}

impl From<i64> for Size {
    fn from(c: i64) -> Size {
        Size(Repr::Const(c))
    }
}

impl std::fmt::Display for Size {
    /// The integer, or the expression in Python's syntax with each symbol as `ks<id>`
    /// (as kernels name them).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.as_const() {
            Some(c) => write!(f, "{c}"),
            None => f.write_str(&self.display_with(&|s| format!("ks{}", s.0), Syntax::Python)),
        }
    }
}

impl PartialEq<i64> for Size {
    /// Whether the size is the integer `c` (a symbolic size never is, whatever values
    /// its range holds).
    fn eq(&self, c: &i64) -> bool {
        self.as_const() == Some(*c)
    }
}

impl serde::Serialize for Size {
    /// An integer as a number; a symbolic size as its text (`ks<id>` symbols).
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.as_const() {
            Some(c) => s.serialize_i64(c),
            None => s.serialize_str(&self.to_string()),
        }
    }
}

impl std::fmt::Debug for Size {
    /// As [`Display`](std::fmt::Display): a list of sizes reads `[2, 8*ks0]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

fn floor_div(a: i64, b: i64) -> i64 {
    if b == 0 {
        return 0;
    }
    let q = a.wrapping_div(b);
    if a.wrapping_rem(b) != 0 && (a < 0) != (b < 0) {
        q - 1
    } else {
        q
    }
}

impl Size {
    /// Symbol `id` of `symbols`, at its hint.
    pub fn symbol(id: SymId, symbols: &Symbols) -> Size {
        Size(Repr::Sym {
            expr: Expr::symbol(id),
            hint: symbols.hint(id),
        })
    }

    /// The size of `expr`, its hint its value at `symbols`' hints.
    pub fn new(expr: Expr, symbols: &Symbols) -> Result<Size, SymError> {
        let hint = expr.eval(&|id| symbols.hint(id))?;
        Size::with(expr, Some(hint))
    }

    /// The expression.
    pub fn expr(&self) -> Expr {
        match &self.0 {
            Repr::Const(c) => Expr::constant(*c),
            Repr::Sym { expr, .. } => expr.clone(),
        }
    }

    /// The value at the symbols' hints: what decisions read, never correctness.
    pub fn hint(&self) -> i64 {
        match &self.0 {
            Repr::Const(c) => *c,
            Repr::Sym { hint, .. } => *hint,
        }
    }

    /// The value, when the size is an integer.
    pub fn as_const(&self) -> Option<i64> {
        match &self.0 {
            Repr::Const(c) => Some(*c),
            Repr::Sym { .. } => None,
        }
    }

    /// The symbol, when the size is exactly one symbol.
    pub fn as_symbol(&self) -> Option<SymId> {
        match &self.0 {
            Repr::Const(_) => None,
            Repr::Sym { expr, .. } => expr.as_symbol(),
        }
    }

    /// Whether the size is an integer.
    pub fn is_const(&self) -> bool {
        matches!(self.0, Repr::Const(_))
    }

    /// The size of `expr` with value `hint` at the hints, in its one form.
    fn with(expr: Expr, hint: Option<i64>) -> Result<Size, SymError> {
        if let Some(c) = expr.as_const() {
            return Ok(Size(Repr::Const(c)));
        }
        let hint = hint.ok_or_else(|| SymError::Overflow("a size's hint".into()))?;
        Ok(Size(Repr::Sym { expr, hint }))
    }

    /// Applies an integer operation where both sizes are integers, else the
    /// expression's, with the hints combined by `on_hints`.
    fn combine(
        &self,
        other: &Size,
        on_ints: impl Fn(i64, i64) -> Option<i64>,
        on_exprs: impl Fn(&Expr, &Expr) -> Result<Expr, SymError>,
        what: &str,
    ) -> Result<Size, SymError> {
        if let (Some(a), Some(b)) = (self.as_const(), other.as_const()) {
            return on_ints(a, b)
                .map(Size::from)
                .ok_or_else(|| SymError::Overflow(what.into()));
        }
        let hint = on_ints(self.hint(), other.hint());
        Size::with(on_exprs(&self.expr(), &other.expr())?, hint)
    }

    /// `self + other`.
    pub fn add(&self, other: &Size) -> Result<Size, SymError> {
        self.combine(other, i64::checked_add, Expr::add, "a sum")
    }

    /// `self - other`.
    pub fn sub(&self, other: &Size) -> Result<Size, SymError> {
        self.combine(other, i64::checked_sub, Expr::sub, "a difference")
    }

    /// `c * self`.
    pub fn scale(&self, c: i64) -> Result<Size, SymError> {
        self.combine(&Size::from(c), i64::checked_mul, Expr::mul, "a product")
    }

    /// `self * other`.
    pub fn mul(&self, other: &Size) -> Result<Size, SymError> {
        self.combine(other, i64::checked_mul, Expr::mul, "a product")
    }

    /// `self // d` (floor), simplified where `symbols`' ranges allow.
    pub fn floor_div(&self, d: &Size, symbols: &Symbols) -> Result<Size, SymError> {
        if d.as_const() == Some(0) {
            return Err(SymError::DivisionByZero(format!("{self} // 0")));
        }
        self.combine(
            d,
            |a, b| Some(floor_div(a, b)),
            |a, b| a.floor_div(b, symbols),
            "a quotient",
        )
    }

    /// `self % d` (Python's), simplified where `symbols`' ranges allow.
    pub fn modulo(&self, d: &Size, symbols: &Symbols) -> Result<Size, SymError> {
        if d.as_const() == Some(0) {
            return Err(SymError::DivisionByZero(format!("{self} % 0")));
        }
        self.combine(
            d,
            |a, b| {
                floor_div(a, b)
                    .checked_mul(b)
                    .and_then(|p| a.checked_sub(p))
            },
            |a, b| a.modulo(b, symbols),
            "a remainder",
        )
    }

    /// The lesser of `self` and `other`, decided by `symbols`' ranges where they can.
    pub fn minimum(&self, other: &Size, symbols: &Symbols) -> Result<Size, SymError> {
        self.combine(
            other,
            |a, b| Some(a.min(b)),
            |a, b| Expr::min(&[a.clone(), b.clone()], symbols),
            "a minimum",
        )
    }

    /// The greater of `self` and `other`, likewise.
    pub fn maximum(&self, other: &Size, symbols: &Symbols) -> Result<Size, SymError> {
        self.combine(
            other,
            |a, b| Some(a.max(b)),
            |a, b| Expr::max(&[a.clone(), b.clone()], symbols),
            "a maximum",
        )
    }

    /// `self / d` where that is exact for every value of the symbols
    /// ([`Expr::exact_div`]).
    pub fn exact_div(&self, d: &Size) -> Option<Size> {
        if let (Some(a), Some(b)) = (self.as_const(), d.as_const()) {
            return (b != 0 && a % b == 0).then(|| Size::from(a / b));
        }
        let expr = self.expr().exact_div(&d.expr())?;
        let hint = if d.hint() == 0 {
            0
        } else {
            self.hint() / d.hint()
        };
        Size::with(expr, Some(hint)).ok()
    }

    /// Whether every value is a multiple of `k`.
    pub fn is_multiple_of(&self, k: i64) -> bool {
        match &self.0 {
            Repr::Const(c) => k != 0 && c % k == 0,
            Repr::Sym { expr, .. } => expr.is_multiple_of(k),
        }
    }

    /// Symbols that make every value a multiple of `k` when each of them is one
    /// ([`Expr::multiple_of_given`]): none for a multiple, `None` where no symbols do.
    pub fn multiple_of_given(&self, k: i64) -> Option<Vec<SymId>> {
        match &self.0 {
            Repr::Const(c) => (k != 0 && c % k == 0).then(Vec::new),
            Repr::Sym { expr, .. } => expr.multiple_of_given(k),
        }
    }

    /// The interval that holds every value over `symbols`' ranges.
    pub fn bounds(&self, symbols: &Symbols) -> (i128, i128) {
        match &self.0 {
            Repr::Const(c) => ((*c).into(), (*c).into()),
            Repr::Sym { expr, .. } => expr.bounds(symbols),
        }
    }

    /// The value with each symbol at `value(id)`.
    pub fn eval(&self, value: &dyn Fn(SymId) -> i64) -> Result<i64, SymError> {
        match &self.0 {
            Repr::Const(c) => Ok(*c),
            Repr::Sym { expr, .. } => expr.eval(value),
        }
    }

    /// The symbols the size reads, sorted.
    pub fn symbols(&self) -> Vec<SymId> {
        match &self.0 {
            Repr::Const(_) => Vec::new(),
            Repr::Sym { expr, .. } => expr.symbols(),
        }
    }

    /// [`Expr::display_with`].
    pub fn display_with(&self, name: &dyn Fn(SymId) -> String, syntax: Syntax) -> String {
        match &self.0 {
            Repr::Const(c) => c.to_string(),
            Repr::Sym { expr, .. } => expr.display_with(name, syntax),
        }
    }

    /// [`Expr::is_operand`].
    pub fn is_operand(&self) -> bool {
        match &self.0 {
            Repr::Const(c) => *c >= 0,
            Repr::Sym { expr, .. } => expr.is_operand(),
        }
    }
}
