//! Expressions, indices and literals as C++ text.
//!
//! float16 and bfloat16 values are computed in `float`: they are converted by
//! the runtime's `kiln_h2f`/`kiln_bf2f` (`kiln/scalar.h`) when loaded and rounded back by
//! `kiln_f2h`/`kiln_f2bf` when stored. Index arithmetic is `int64_t`; `/` and
//! `%` are C++'s truncating operators, which equal Python's floor operators
//! because index operands are never negative.

use crate::graph::dtype::DType;
use crate::graph::ops::{BinaryOp, UnaryOp};
use crate::graph::sym::Syntax;
use crate::schedule::index::{size_text, Index, Size, Var};
use crate::schedule::ir::{Cond, Expr, ExprArena, ExprId, Literal, ReduceKind};

/// The C++ type a value of `d` is computed in.
pub fn compute_type(d: DType) -> &'static str {
    match d {
        DType::Bool => "bool",
        DType::Int32 => "int32_t",
        DType::Int64 => "int64_t",
        DType::Float16 | DType::BFloat16 | DType::Float32 => "float",
        DType::Float64 => "double",
    }
}

/// Bytes of `d`'s compute type ([`compute_type`]).
pub fn compute_bytes(d: DType) -> i64 {
    match d {
        DType::Bool => 1,
        DType::Int32 | DType::Float16 | DType::BFloat16 | DType::Float32 => 4,
        DType::Int64 | DType::Float64 => 8,
    }
}

/// The C++ type an element of `d` is stored as.
pub fn storage_type(d: DType) -> &'static str {
    match d {
        DType::Float16 | DType::BFloat16 => "uint16_t",
        other => compute_type(other),
    }
}

/// `value` (an element read from storage of `d`) converted to its compute type.
pub fn load_conversion(d: DType, value: &str) -> String {
    match d {
        DType::Float16 => format!("kiln_h2f({value})"),
        DType::BFloat16 => format!("kiln_bf2f({value})"),
        _ => value.to_string(),
    }
}

/// `value` (of compute type `from`) converted for storage as `to`.
pub fn store_conversion(from: DType, to: DType, value: &str) -> String {
    match to {
        DType::Float16 => format!("kiln_f2h(static_cast<float>({value}))"),
        DType::BFloat16 => format!("kiln_f2bf(static_cast<float>({value}))"),
        DType::Bool if from != DType::Bool => format!("({value} != 0)"),
        _ if compute_type(from) == compute_type(to) => value.to_string(),
        _ => format!("static_cast<{}>({value})", compute_type(to)),
    }
}

/// A C++ literal of `value` in the compute type of `d`: exact (the shortest
/// decimal that reads back as the same number), with infinities and NaN from
/// `std::numeric_limits`.
pub fn float_text(value: f64, d: DType) -> String {
    let ty = compute_type(d);
    if value.is_nan() {
        return format!("std::numeric_limits<{ty}>::quiet_NaN()");
    }
    if value.is_infinite() {
        let sign = if value < 0.0 { "-" } else { "" };
        return format!("{sign}std::numeric_limits<{ty}>::infinity()");
    }
    if ty == "float" {
        // The value rounded to float once, printed so that it reads back exactly.
        format!("{:?}f", value as f32)
    } else {
        format!("{value:?}")
    }
}

/// An integer literal of type `int64_t` (`i64::MIN` has no literal of its own).
pub fn int_text(i: i64) -> String {
    if i == i64::MIN {
        "(-INT64_C(9223372036854775807) - 1)".to_string()
    } else {
        format!("INT64_C({i})")
    }
}

/// A literal in the compute type of `d`.
pub fn literal_text(l: Literal, d: DType) -> String {
    match (l, d) {
        (_, DType::Bool) => if l.to_f64() != 0.0 { "true" } else { "false" }.to_string(),
        (Literal::Float(bits), d) if d.is_float() => float_text(f64::from_bits(bits), d),
        (l, DType::Int32) => format!("static_cast<int32_t>({})", int_text(l.to_f64() as i64)),
        (Literal::Int(i), _) => int_text(i),
        (l, d) if d.is_float() => float_text(l.to_f64(), d),
        (l, _) => int_text(l.to_f64() as i64),
    }
}

/// How index expressions are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexStyle {
    /// `r` renders as `0` (pointwise kernels have no reduction loop).
    pub r_zero: bool,
    /// Arithmetic in `int32_t`, the loop variables included: allowed when no
    /// part of any index of the kernel can leave its range ([`fits_i32`]),
    /// and what lets compilers vectorise division and remainder by constants
    /// (x86 has no 64-bit vector multiply-high), as broadcasts and views
    /// need. (A cast of 64-bit loop variables is not enough: GCC then leaves
    /// the loops of OpenMP-outlined functions scalar.)
    pub narrow: bool,
    /// `x` renders as `xs`, the first row of an aligned block of rows (the
    /// outer reductions' blocks; see [`crate::schedule::index::Index::block_step`]).
    pub x_block_start: bool,
    /// `r` renders as `rs`, the first element of an aligned block of the row
    /// (the inner reductions' blocks).
    pub r_block_start: bool,
}

impl IndexStyle {
    /// `int64_t` arithmetic, `r` as the reduction loop's variable.
    pub const WIDE: IndexStyle = IndexStyle {
        r_zero: false,
        narrow: false,
        x_block_start: false,
        r_block_start: false,
    };
}

/// Whether every part of `i` stays within `int32_t` while `x` ranges over
/// `0..x_extent` and `r` over `0..r_extent`: the largest magnitude any
/// subexpression can take is below 2^31.
pub fn fits_i32(i: &Index, x_extent: i64, r_extent: i64) -> bool {
    // (bound on |value|, largest bound in the subtree), in i128 so that
    // nothing overflows on the way.
    fn walk(i: &Index, x: i128, r: i128) -> (i128, i128) {
        // A symbolic size is bounded by nothing here: it never fits.
        let mag = |k: &Size| k.as_const().map_or(i128::MAX, |k| i128::from(k).abs());
        let (b, inner) = match i {
            Index::Var(Var::X) => (x, 0),
            Index::Var(Var::R) => (r, 0),
            Index::Const(c) => (mag(c), 0),
            Index::Add(terms) => terms.iter().fold((0i128, 0i128), |(sum, m), t| {
                let (tb, tm) = walk(t, x, r);
                (sum.saturating_add(tb), m.max(tm))
            }),
            Index::Mul(e, k) => {
                let (eb, em) = walk(e, x, r);
                (eb.saturating_mul(mag(k)), em.max(mag(k)))
            }
            Index::Div(e, k) => {
                let (eb, em) = walk(e, x, r);
                let divisor = k.as_const().map_or(1, |k| i128::from(k).abs().max(1));
                (eb / divisor, em.max(mag(k)))
            }
            Index::Mod(e, k) => {
                let (eb, em) = walk(e, x, r);
                (eb.min(mag(k)), em.max(eb).max(mag(k)))
            }
        };
        (b, inner.max(b))
    }
    let x = i128::from(x_extent.max(0));
    let r = i128::from(r_extent.max(0));
    walk(i, x, r).1 < (1i128 << 31)
}

/// An index expression over the loop variables `x` and `r`.
pub fn index_text(i: &Index, style: IndexStyle) -> String {
    let int = |c: i64| match (style.narrow, c < 0) {
        (true, false) => c.to_string(),
        (true, true) => format!("({c})"),
        (false, _) => int_text(c),
    };
    // A symbolic size is its expression over the kernel's `int64_t` size arguments.
    let size = |k: &Size| match k.as_const() {
        Some(c) => int(c),
        None => size_text(k, Syntax::C),
    };
    match i {
        Index::Var(Var::R) if style.r_zero => int(0),
        Index::Var(Var::R) if style.r_block_start => "rs".to_string(),
        Index::Var(Var::X) if style.x_block_start => "xs".to_string(),
        Index::Var(Var::X) => "x".to_string(),
        Index::Var(Var::R) => "r".to_string(),
        Index::Const(c) => size(c),
        Index::Add(terms) => {
            let parts: Vec<String> = terms.iter().map(|t| index_text(t, style)).collect();
            format!("({})", parts.join(" + "))
        }
        Index::Mul(e, k) => format!("({} * {})", size(k), index_text(e, style)),
        Index::Div(e, k) => format!("({} / {})", index_text(e, style), size(k)),
        Index::Mod(e, k) => format!("({} % {})", index_text(e, style), size(k)),
    }
}

/// An index condition `lo <= index < hi` as a C++ boolean (the bounds always
/// in `int64_t`, so that the comparison is exact whatever the index's type).
pub fn cond_text(c: &Cond, style: IndexStyle) -> String {
    let idx = index_text(&c.index, style);
    let bound = |s: &Size| match s.as_const() {
        Some(c) => int_text(c),
        None => size_text(s, Syntax::C),
    };
    format!("({} <= {idx} && {idx} < {})", bound(&c.lo), bound(&c.hi))
}

/// The neutral element of a reduction accumulating in `d`.
pub fn neutral(kind: ReduceKind, d: DType) -> String {
    let ty = compute_type(d);
    match (kind, d) {
        (ReduceKind::Sum, DType::Bool) => "false".into(),
        (ReduceKind::Sum, _) => format!("static_cast<{ty}>(0)"),
        (ReduceKind::Max, DType::Bool) => "false".into(),
        (ReduceKind::Min, DType::Bool) => "true".into(),
        (ReduceKind::Max, d) if d.is_float() => format!("-std::numeric_limits<{ty}>::infinity()"),
        (ReduceKind::Min, d) if d.is_float() => format!("std::numeric_limits<{ty}>::infinity()"),
        (ReduceKind::Max, _) => format!("std::numeric_limits<{ty}>::lowest()"),
        (ReduceKind::Min, _) => format!("std::numeric_limits<{ty}>::max()"),
    }
}

/// Renders the right-hand sides of computed expressions.
pub struct Renderer<'a> {
    /// The kernel's expressions.
    pub exprs: &'a ExprArena,
    /// Whether the kernel's indices are written in `int32_t`.
    pub narrow: bool,
}

impl Renderer<'_> {
    /// The variable naming `id`.
    pub fn var(id: ExprId) -> String {
        format!("tmp{}", id.0)
    }

    /// `id` as an operand: a literal inline, a reduction result by its name,
    /// anything else by its variable.
    pub fn operand(&self, id: ExprId) -> String {
        match self.exprs.get(id) {
            Expr::Literal(l) => literal_text(*l, self.exprs.dtype(id)),
            Expr::Reduced(n) => format!("red{n}"),
            _ => Self::var(id),
        }
    }

    /// Whether `id` is an integer cast from a float.
    fn truncated_float(&self, id: ExprId) -> bool {
        !self.exprs.dtype(id).is_float()
            && matches!(self.exprs.get(id), Expr::Cast(f) if self.exprs.dtype(*f).is_float())
    }

    /// The right-hand side computing `id` from its operands (loads are
    /// written by the kernel writer, which knows the buffers).
    pub fn rhs(&self, id: ExprId, r_zero: bool) -> Result<String, String> {
        let d = self.exprs.dtype(id);
        let ty = compute_type(d);
        Ok(match self.exprs.get(id) {
            Expr::Unary(op, a) => unary(*op, &self.operand(*a), d)?,
            Expr::Binary(op, a, b) => binary(
                *op,
                &self.operand(*a),
                &self.operand(*b),
                self.exprs.dtype(*a),
                ty,
            )?,
            Expr::Where(c, a, b) => format!(
                "({} ? static_cast<{ty}>({}) : static_cast<{ty}>({}))",
                self.operand(*c),
                self.operand(*a),
                self.operand(*b)
            ),
            Expr::Cast(a) => {
                let src = self.operand(*a);
                if d == DType::Bool {
                    format!("({src} != 0)")
                } else if d.is_float() && self.truncated_float(*a) {
                    // An integer has no negative zero, but with -fno-trapping-math GCC
                    // turns a float truncated to an integer and back into one rounding,
                    // which keeps the sign (-0.5 to -0.0) and drops a `+ 0`. A zero chosen
                    // on the integer stays PyTorch's +0 (atan2 and copysign see the sign).
                    format!(
                        "({src} == 0 ? {} : static_cast<{ty}>({src}))",
                        float_text(0.0, d)
                    )
                } else {
                    format!("static_cast<{ty}>({src})")
                }
            }
            Expr::Select(c, a, b) => format!(
                "({} ? static_cast<{ty}>({}) : static_cast<{ty}>({}))",
                cond_text(
                    c,
                    IndexStyle {
                        r_zero,
                        narrow: self.narrow,
                        x_block_start: false,
                        r_block_start: false,
                    }
                ),
                self.operand(*a),
                self.operand(*b)
            ),
            Expr::Load { .. } | Expr::Literal(_) | Expr::Reduced(_) => {
                return Err("internal: not a computed expression".into())
            }
        })
    }
}

fn unary(op: UnaryOp, a: &str, d: DType) -> Result<String, String> {
    let ty = compute_type(d);
    let float_only = |f: &str| {
        if d.is_float() {
            Ok(format!("{f}({a})"))
        } else {
            Err(format!("`{op:?}` of {}", d.name()))
        }
    };
    match op {
        UnaryOp::Abs if d == DType::Bool => Ok(a.to_string()),
        UnaryOp::Abs => Ok(format!("static_cast<{ty}>(std::abs({a}))")),
        UnaryOp::Neg => Ok(format!("static_cast<{ty}>(-{a})")),
        UnaryOp::Relu => Ok(format!(
            "({a} < static_cast<{ty}>(0) ? static_cast<{ty}>(0) : {a})"
        )),
        UnaryOp::Exp => float_only("kiln_exp"),
        UnaryOp::Log => float_only("std::log"),
        UnaryOp::Log1p => float_only("std::log1p"),
        UnaryOp::Sqrt => float_only("std::sqrt"),
        UnaryOp::Rsqrt => float_only("std::sqrt").map(|s| format!("(static_cast<{ty}>(1) / {s})")),
        UnaryOp::Sin => float_only("std::sin"),
        UnaryOp::Cos => float_only("std::cos"),
        UnaryOp::Tanh => float_only("kiln_tanh"),
        UnaryOp::Erf => float_only("kiln_erf"),
        UnaryOp::Sigmoid => float_only("kiln_sigmoid"),
        UnaryOp::Silu => float_only("kiln_sigmoid").map(|s| format!("({a} * {s})")),
        UnaryOp::Reciprocal => float_only("").map(|_| format!("(static_cast<{ty}>(1) / {a})")),
        // std::max/min keep a NaN in their first operand, as PyTorch's hardsigmoid does.
        UnaryOp::Hardsigmoid => float_only("").map(|_| hardsigmoid(a, ty)),
        UnaryOp::Hardswish => float_only("").map(|_| format!("({a} * {})", hardsigmoid(a, ty))),
        // Rounding an integer leaves it as it is.
        UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Trunc if !d.is_float() => {
            Ok(a.to_string())
        }
        UnaryOp::Floor => float_only("std::floor"),
        UnaryOp::Ceil => float_only("std::ceil"),
        // nearbyint rounds halves to even in the default rounding mode, as torch.round.
        UnaryOp::Round => float_only("std::nearbyint"),
        UnaryOp::Trunc => float_only("std::trunc"),
        UnaryOp::Sign if d == DType::Bool => Ok(a.to_string()),
        UnaryOp::Sign => Ok(format!(
            "static_cast<{ty}>((static_cast<{ty}>(0) < {a}) - ({a} < static_cast<{ty}>(0)))"
        )),
        UnaryOp::Expm1 => float_only("std::expm1"),
        UnaryOp::Log2 => float_only("std::log2"),
        UnaryOp::Log10 => float_only("std::log10"),
        UnaryOp::Tan => float_only("std::tan"),
        UnaryOp::Atan => float_only("std::atan"),
        UnaryOp::Asin => float_only("std::asin"),
        UnaryOp::Acos => float_only("std::acos"),
        UnaryOp::Sinh => float_only("std::sinh"),
        UnaryOp::Cosh => float_only("std::cosh"),
        UnaryOp::Asinh => float_only("std::asinh"),
        UnaryOp::Acosh => float_only("std::acosh"),
        UnaryOp::Atanh => float_only("std::atanh"),
    }
}

fn hardsigmoid(a: &str, ty: &str) -> String {
    format!(
        "(std::min(std::max({a} + static_cast<{ty}>(3), static_cast<{ty}>(0)), static_cast<{ty}>(6)) / static_cast<{ty}>(6))"
    )
}

fn binary(op: BinaryOp, a: &str, b: &str, operand: DType, ty: &str) -> Result<String, String> {
    let float = operand.is_float();
    Ok(match op {
        BinaryOp::Add => format!("static_cast<{ty}>({a} + {b})"),
        BinaryOp::Sub => format!("static_cast<{ty}>({a} - {b})"),
        BinaryOp::Mul => format!("static_cast<{ty}>({a} * {b})"),
        BinaryOp::Div if float => format!("({a} / {b})"),
        BinaryOp::Div => format!("(static_cast<{ty}>({a}) / static_cast<{ty}>({b}))"),
        BinaryOp::DivTrunc if float => format!("std::trunc({a} / {b})"),
        BinaryOp::DivFloor if float => format!("kiln_divfloor_float({a}, {b})"),
        // Integer division by zero would trap; PyTorch raises, Kiln gives 0.
        BinaryOp::DivTrunc => format!("static_cast<{ty}>(kiln_divtrunc({a}, {b}))"),
        BinaryOp::DivFloor => format!("static_cast<{ty}>(kiln_divfloor({a}, {b}))"),
        BinaryOp::Pow if float => format!("std::pow({a}, {b})"),
        BinaryOp::Pow if operand == DType::Bool => format!("static_cast<{ty}>({a} || !{b})"),
        BinaryOp::Pow => format!("static_cast<{ty}>(kiln_ipow<{ty}>({a}, {b}))"),
        BinaryOp::Maximum => format!("kiln_maximum({a}, {b})"),
        BinaryOp::Minimum => format!("kiln_minimum({a}, {b})"),
        BinaryOp::Eq => format!("({a} == {b})"),
        BinaryOp::Ne => format!("({a} != {b})"),
        BinaryOp::Lt => format!("({a} < {b})"),
        BinaryOp::Le => format!("({a} <= {b})"),
        BinaryOp::Gt => format!("({a} > {b})"),
        BinaryOp::Ge => format!("({a} >= {b})"),
        BinaryOp::BitAnd => format!("static_cast<{ty}>({a} & {b})"),
        BinaryOp::BitOr => format!("static_cast<{ty}>({a} | {b})"),
        BinaryOp::BitXor => format!("static_cast<{ty}>({a} ^ {b})"),
        BinaryOp::Fmod if float => format!("std::fmod({a}, {b})"),
        BinaryOp::Remainder if float => {
            let r = format!("std::fmod({a}, {b})");
            format!("(({r} != 0 && (({r} < 0) != ({b} < 0))) ? {r} + {b} : {r})")
        }
        // Float-valued: the operands are already in the result's float type.
        BinaryOp::Atan2 => format!("std::atan2({a}, {b})"),
        BinaryOp::Hypot => format!("std::hypot({a}, {b})"),
        BinaryOp::Copysign => format!("std::copysign({a}, {b})"),
        // Integer remainder by zero would trap; as for division, Kiln gives 0.
        BinaryOp::Fmod => format!("static_cast<{ty}>({b} == 0 ? 0 : {a} % {b})"),
        BinaryOp::Remainder => {
            let r = format!("({b} == 0 ? 0 : {a} % {b})");
            format!("static_cast<{ty}>(({r} != 0 && (({r} < 0) != ({b} < 0))) ? {r} + {b} : {r})")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_read_back_exactly() {
        assert_eq!(float_text(0.1, DType::Float64), "0.1");
        assert_eq!(float_text(1e-5, DType::Float32), "1e-5f");
        assert_eq!(float_text(3.0, DType::Float32), "3.0f");
        assert_eq!(
            float_text(f64::NEG_INFINITY, DType::Float32),
            "-std::numeric_limits<float>::infinity()"
        );
        assert_eq!(int_text(-4), "INT64_C(-4)");
        assert!(int_text(i64::MIN).contains("9223372036854775807"));
        assert_eq!(literal_text(Literal::Int(1), DType::Bool), "true");
    }

    #[test]
    fn indices_use_truncating_operators_on_non_negative_operands() {
        let i = Index::Add(vec![
            Index::Div(Box::new(Index::Var(Var::X)), Size::from(2)),
            Index::Mul(
                Box::new(Index::Mod(Box::new(Index::Var(Var::R)), Size::from(2))),
                Size::from(3),
            ),
        ]);
        assert_eq!(
            index_text(&i, IndexStyle::WIDE),
            "((x / INT64_C(2)) + (INT64_C(3) * (r % INT64_C(2))))"
        );
        let pointwise = IndexStyle {
            r_zero: true,
            narrow: false,
            x_block_start: false,
            r_block_start: false,
        };
        assert_eq!(index_text(&Index::Var(Var::R), pointwise), "INT64_C(0)");
        let narrow = IndexStyle {
            r_zero: false,
            narrow: true,
            x_block_start: false,
            r_block_start: false,
        };
        assert_eq!(index_text(&i, narrow), "((x / 2) + (3 * (r % 2)))");
        let block = IndexStyle {
            x_block_start: true,
            ..narrow
        };
        assert_eq!(index_text(&i, block), "((xs / 2) + (3 * (r % 2)))");
    }

    #[test]
    fn indices_are_narrow_only_when_every_part_fits() {
        let x = || Box::new(Index::Var(Var::X));
        // x % 3072 over 786432 elements: fits.
        assert!(fits_i32(&Index::Mod(x(), Size::from(3072)), 786_432, 1));
        // The final value is small, but x itself is not.
        assert!(!fits_i32(&Index::Mod(x(), Size::from(3072)), 1 << 31, 1));
        // A product that leaves the range on the way to a small quotient.
        assert!(!fits_i32(
            &Index::Div(
                Box::new(Index::Mul(x(), Size::from(1 << 20))),
                Size::from(1 << 20)
            ),
            1 << 12,
            1
        ));
        // Negative factors (flips) count by magnitude.
        let flip = Index::Add(vec![Index::Mul(x(), Size::from(-1)), Index::constant(99)]);
        assert!(fits_i32(&flip, 100, 1));
        assert!(!fits_i32(&Index::Mul(x(), Size::from(i64::MIN)), 2, 1));
        assert!(fits_i32(&Index::Var(Var::R), 1, (1 << 31) - 1));
        assert!(!fits_i32(&Index::Var(Var::R), 1, (1 << 31) + 1));
    }

    #[test]
    fn a_symbolic_size_is_a_c_expression_and_never_narrow() {
        let mut table = crate::graph::sym::Symbols::default();
        let s0 = table.add("batch", 1, 64).unwrap();
        let batch = Size::symbol(s0, &table);
        let i = Index::var(Var::X)
            .times(batch.scale(768).unwrap())
            .plus(Index::Const(
                batch
                    .add(&Size::from(-3))
                    .unwrap()
                    .floor_div(&Size::from(2), &table)
                    .unwrap(),
            ));
        let c = index_text(&i, IndexStyle::WIDE);
        // The symbol by its id (never its name from the input), and Python's floor
        // division spelled out in C.
        assert!(
            c.contains("768*ks0") && !c.contains("batch") && !c.contains("//"),
            "{c}"
        );
        assert!(
            c.contains("((ks0 - 3) / 2 - (((ks0 - 3) % 2 != 0) && (((ks0 - 3) < 0) != (2 < 0))))"),
            "{c}"
        );
        // No claim of 32-bit arithmetic over a size the kernel does not know.
        assert!(!fits_i32(&i, 4, 1));
        // A cat piece's bounds over the symbol.
        let piece = Cond {
            index: Index::var(Var::X),
            lo: batch.clone(),
            hi: batch.scale(2).unwrap(),
        };
        assert_eq!(
            cond_text(&piece, IndexStyle::WIDE),
            "(ks0 <= x && x < (2*ks0))"
        );
    }
}
