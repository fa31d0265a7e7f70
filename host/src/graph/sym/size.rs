//! [`Size`]: a size of the compiler's IRs, an [`Expr`] that carries its value at the
//! symbols' hints.
//!
//! Decisions (launch configs, tiling, fusion thresholds, which of two layouts) read
//! [`Size::hint`], so a dynamic compile makes the static compile's choices at its
//! example and nothing needs the symbol table to make them. Correctness reads the
//! expression: its ranges ([`Size::bounds`]) or a guard the wrapper checks.

use super::{Expr, SymError, SymId, Symbols, Syntax};

/// A size: an integer, or an expression over size symbols with its value at their
/// hints ([module docs](self)). `Ord` is a canonical order for sorting and maps, not
/// a comparison of values: compare [`Size::hint`]s to decide, and bounds to prove.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Size {
    expr: Expr,
    hint: i64,
}

impl From<i64> for Size {
    fn from(c: i64) -> Size {
        Size {
            expr: Expr::constant(c),
            hint: c,
        }
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
        Size {
            expr: Expr::symbol(id),
            hint: symbols.hint(id),
        }
    }

    /// `expr` with each symbol at its hint in `symbols`.
    pub fn of(expr: Expr, symbols: &Symbols) -> Result<Size, SymError> {
        let hint = expr.eval(&|s| symbols.hint(s))?;
        Ok(Size { expr, hint })
    }

    /// The expression.
    pub fn expr(&self) -> &Expr {
        &self.expr
    }

    /// The value at the symbols' hints: what decisions read, never correctness.
    pub fn hint(&self) -> i64 {
        self.hint
    }

    /// The value, when the size is an integer.
    pub fn as_const(&self) -> Option<i64> {
        self.expr.as_const()
    }

    /// The symbol, when the size is exactly one symbol.
    pub fn as_symbol(&self) -> Option<SymId> {
        self.expr.as_symbol()
    }

    /// Whether the size is an integer.
    pub fn is_const(&self) -> bool {
        self.expr.is_const()
    }

    fn with(expr: Expr, hint: Option<i64>) -> Result<Size, SymError> {
        let hint = hint.ok_or_else(|| SymError::Overflow("a size's hint".into()))?;
        Ok(Size { expr, hint })
    }

    /// `self + other`.
    pub fn add(&self, other: &Size) -> Result<Size, SymError> {
        Size::with(
            self.expr.add(&other.expr)?,
            self.hint.checked_add(other.hint),
        )
    }

    /// `self - other`.
    pub fn sub(&self, other: &Size) -> Result<Size, SymError> {
        Size::with(
            self.expr.sub(&other.expr)?,
            self.hint.checked_sub(other.hint),
        )
    }

    /// `c * self`.
    pub fn scale(&self, c: i64) -> Result<Size, SymError> {
        Size::with(self.expr.scale(c)?, self.hint.checked_mul(c))
    }

    /// `self * other`.
    pub fn mul(&self, other: &Size) -> Result<Size, SymError> {
        Size::with(
            self.expr.mul(&other.expr)?,
            self.hint.checked_mul(other.hint),
        )
    }

    /// `self // d` (floor), simplified where `symbols`' ranges allow.
    pub fn floor_div(&self, d: &Size, symbols: &Symbols) -> Result<Size, SymError> {
        Size::with(
            self.expr.floor_div(&d.expr, symbols)?,
            Some(floor_div(self.hint, d.hint)),
        )
    }

    /// `self % d` (Python's), simplified where `symbols`' ranges allow.
    pub fn modulo(&self, d: &Size, symbols: &Symbols) -> Result<Size, SymError> {
        let q = floor_div(self.hint, d.hint);
        let hint = q.checked_mul(d.hint).and_then(|p| self.hint.checked_sub(p));
        Size::with(self.expr.modulo(&d.expr, symbols)?, hint)
    }

    /// `self / d` where that is exact for every value of the symbols
    /// ([`Expr::exact_div`]).
    pub fn exact_div(&self, d: &Size) -> Option<Size> {
        let expr = self.expr.exact_div(&d.expr)?;
        let hint = if d.hint == 0 { 0 } else { self.hint / d.hint };
        Some(Size { expr, hint })
    }

    /// Whether every value is a multiple of `k`.
    pub fn is_multiple_of(&self, k: i64) -> bool {
        self.expr.is_multiple_of(k)
    }

    /// The interval that holds every value over `symbols`' ranges.
    pub fn bounds(&self, symbols: &Symbols) -> (i128, i128) {
        match self.as_const() {
            Some(c) => (c.into(), c.into()),
            None => self.expr.bounds(symbols),
        }
    }

    /// The value with each symbol at `value(id)`.
    pub fn eval(&self, value: &dyn Fn(SymId) -> i64) -> Result<i64, SymError> {
        match self.as_const() {
            Some(c) => Ok(c),
            None => self.expr.eval(value),
        }
    }

    /// The symbols the size reads, sorted.
    pub fn symbols(&self) -> Vec<SymId> {
        self.expr.symbols()
    }

    /// [`Expr::display_with`].
    pub fn display_with(&self, name: &dyn Fn(SymId) -> String, syntax: Syntax) -> String {
        self.expr.display_with(name, syntax)
    }

    /// [`Expr::is_operand`].
    pub fn is_operand(&self) -> bool {
        self.expr.is_operand()
    }
}
