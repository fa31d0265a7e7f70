//! Expressions as Triton text.

use crate::graph::dtype::DType;
use crate::graph::ops::{BinaryOp, UnaryOp};
use crate::graph::sym::Syntax;
use crate::schedule::index::{size_text, Index};
use crate::schedule::ir::{Cond, Expr, ExprArena, ExprId, Literal, ReduceKind};

/// The Triton dtype of a Kiln dtype.
pub fn tl_dtype(d: DType) -> &'static str {
    match d {
        DType::Bool => "tl.int1",
        DType::Int32 => "tl.int32",
        DType::Int64 => "tl.int64",
        DType::Float16 => "tl.float16",
        DType::BFloat16 => "tl.bfloat16",
        DType::Float32 => "tl.float32",
        DType::Float64 => "tl.float64",
    }
}

/// The Triton signature type of a pointer to `d`.
pub fn pointer_type(d: DType) -> &'static str {
    match d {
        DType::Bool => "*i1",
        DType::Int32 => "*i32",
        DType::Int64 => "*i64",
        DType::Float16 => "*fp16",
        DType::BFloat16 => "*bf16",
        DType::Float32 => "*fp32",
        DType::Float64 => "*fp64",
    }
}

/// A Python literal for `value` (never a name from an input file).
pub fn float_text(value: f64) -> String {
    if value.is_nan() {
        "float(\"nan\")".to_string()
    } else if value.is_infinite() {
        if value > 0.0 {
            "float(\"inf\")".to_string()
        } else {
            "float(\"-inf\")".to_string()
        }
    } else {
        let text = format!("{value:?}");
        if text.contains(['.', 'e', 'E']) {
            text
        } else {
            format!("{text}.0")
        }
    }
}

/// A literal as Python text.
pub fn literal_text(l: Literal) -> String {
    match l {
        Literal::Float(bits) => float_text(f64::from_bits(bits)),
        Literal::Int(i) => i.to_string(),
        Literal::Bool(b) => if b { "True" } else { "False" }.to_string(),
    }
}

/// An index condition as a Triton boolean expression.
pub fn cond_text(c: &Cond) -> String {
    let idx = format!("({})", c.index);
    let (lo, hi) = (
        size_text(&c.lo, Syntax::Python),
        size_text(&c.hi, Syntax::Python),
    );
    if c.lo.as_const().is_some_and(|lo| lo <= 0) && index_nonnegative(&c.index) {
        format!("({idx} < {hi})")
    } else {
        format!("(({lo} <= {idx}) & ({idx} < {hi}))")
    }
}

fn index_nonnegative(i: &Index) -> bool {
    match i {
        Index::Var(_) => true,
        // A symbolic size may be anything its range allows: no claim.
        Index::Const(c) => c.as_const().is_some_and(|c| c >= 0),
        Index::Add(t) => t.iter().all(index_nonnegative),
        Index::Mul(e, k) => k.as_const().is_some_and(|k| k >= 0) && index_nonnegative(e),
        Index::Div(e, _) | Index::Mod(e, _) => index_nonnegative(e),
    }
}

/// The neutral element of a reduction in `d`.
pub fn neutral(kind: ReduceKind, d: DType) -> String {
    match (kind, d.is_float()) {
        (ReduceKind::Sum, true) => "0.0".into(),
        (ReduceKind::Sum, false) => "0".into(),
        (ReduceKind::Max, true) => "float(\"-inf\")".into(),
        (ReduceKind::Min, true) => "float(\"inf\")".into(),
        (ReduceKind::Max, false) => match d {
            DType::Int32 => i32::MIN.to_string(),
            DType::Bool => "0".into(),
            _ => i64::MIN.to_string(),
        },
        (ReduceKind::Min, false) => match d {
            DType::Int32 => i32::MAX.to_string(),
            DType::Bool => "1".into(),
            _ => i64::MAX.to_string(),
        },
    }
}

/// Renders operands: a literal inline, anything else by its variable name.
pub struct Renderer<'a> {
    /// The kernel's expressions.
    pub exprs: &'a ExprArena,
}

impl Renderer<'_> {
    /// The variable naming `id` (assigned by the kernel writer).
    pub fn var(id: ExprId) -> String {
        format!("tmp{}", id.0)
    }

    /// `id` as an operand: a literal inline (wrapped in a tensor when `wrap`),
    /// a reduction result by its name, anything else by its variable.
    pub fn operand(&self, id: ExprId, wrap: bool) -> String {
        match self.exprs.get(id) {
            Expr::Literal(l) if wrap => {
                format!(
                    "tl.full([1], {}, {})",
                    literal_text(*l),
                    tl_dtype(self.exprs.dtype(id))
                )
            }
            Expr::Literal(l) => literal_text(*l),
            Expr::Reduced(n) => format!("red{n}"),
            _ => Self::var(id),
        }
    }

    /// `id` as an operand, a literal as a one-element tensor of dtype `d`.
    fn typed(&self, id: ExprId, d: DType) -> String {
        match self.exprs.get(id) {
            Expr::Literal(l) => format!("tl.full([1], {}, {})", literal_text(*l), tl_dtype(d)),
            _ => self.operand(id, false),
        }
    }

    fn is_literal(&self, id: ExprId) -> bool {
        matches!(self.exprs.get(id), Expr::Literal(_))
    }

    /// The right-hand side computing `id` from its operands (loads are
    /// written by the kernel writer, which knows the masks).
    pub fn rhs(&self, id: ExprId) -> Result<String, String> {
        let d = self.exprs.dtype(id);
        Ok(match self.exprs.get(id) {
            Expr::Unary(op, a) => unary(*op, &self.operand(*a, true), d)?,
            Expr::Binary(op, a, b) => {
                let operand = self.exprs.dtype(*a);
                // libdevice's two-operand functions take one dtype: a literal operand
                // is a tensor of the other's dtype (a bare 0.5 is float32 in Triton).
                let typed = operand.is_float()
                    && matches!(op, BinaryOp::Pow | BinaryOp::DivFloor | BinaryOp::DivTrunc);
                let (ta, tb) = if typed {
                    (self.typed(*a, operand), self.typed(*b, operand))
                } else {
                    let wrap_a = self.is_literal(*a) && self.is_literal(*b);
                    (self.operand(*a, wrap_a), self.operand(*b, false))
                };
                binary(*op, &ta, &tb, operand)?
            }
            Expr::Where(c, a, b) => format!(
                "tl.where({}, {}, {})",
                self.operand(*c, true),
                self.operand(*a, false),
                self.operand(*b, false)
            ),
            Expr::Cast(a) => {
                let src = self.operand(*a, true);
                if d == DType::Bool {
                    format!("({src} != 0)")
                } else {
                    format!("{src}.to({})", tl_dtype(d))
                }
            }
            Expr::Select(c, a, b) => format!(
                "tl.where({}, {}, {})",
                cond_text(c),
                self.operand(*a, false),
                self.operand(*b, false)
            ),
            Expr::Load { .. } | Expr::Literal(_) | Expr::Reduced(_) => {
                return Err("internal: not a computed expression".into())
            }
        })
    }
}

fn unary(op: UnaryOp, a: &str, d: DType) -> Result<String, String> {
    let float_only = |f: &str| {
        if d.is_float() {
            Ok(format!("{f}({a})"))
        } else {
            Err(format!("`{op:?}` of {}", d.name()))
        }
    };
    match op {
        UnaryOp::Abs => Ok(format!("tl.abs({a})")),
        UnaryOp::Neg => Ok(format!("-{a}")),
        UnaryOp::Relu => Ok(format!("tl.where({a} < 0, 0, {a})")),
        // libdevice's exp and log are as accurate as PyTorch's (tl.exp goes through
        // exp2 of x * log2(e), whose rounding grows with |x|).
        UnaryOp::Exp => float_only("libdevice.exp"),
        UnaryOp::Log => float_only("libdevice.log"),
        UnaryOp::Log1p => float_only("libdevice.log1p"),
        UnaryOp::Sqrt => float_only("libdevice.sqrt"),
        UnaryOp::Rsqrt => float_only("libdevice.rsqrt"),
        UnaryOp::Sin => float_only("libdevice.sin"),
        UnaryOp::Cos => float_only("libdevice.cos"),
        UnaryOp::Tanh => float_only("libdevice.tanh"),
        UnaryOp::Erf => float_only("libdevice.erf"),
        UnaryOp::Sigmoid => float_only("tl.sigmoid"),
        UnaryOp::Silu => float_only("tl.sigmoid").map(|s| format!("({a} * {s})")),
        UnaryOp::Reciprocal => float_only("").map(|_| format!("(1.0 / {a})")),
        UnaryOp::Hardsigmoid => float_only("").map(|_| hardsigmoid(a)),
        UnaryOp::Hardswish => float_only("").map(|_| format!("({a} * {})", hardsigmoid(a))),
        // Rounding an integer leaves it as it is.
        UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Trunc if !d.is_float() => {
            Ok(a.to_string())
        }
        UnaryOp::Floor => float_only("libdevice.floor"),
        UnaryOp::Ceil => float_only("libdevice.ceil"),
        // rint rounds halves to even, as torch.round.
        UnaryOp::Round => float_only("libdevice.rint"),
        UnaryOp::Trunc => float_only("libdevice.trunc"),
        UnaryOp::Sign if d == DType::Bool => Ok(a.to_string()),
        UnaryOp::Sign => Ok(format!(
            "((0 < {a}).to({a}.dtype) - ({a} < 0).to({a}.dtype))"
        )),
        UnaryOp::Expm1 => float_only("libdevice.expm1"),
        UnaryOp::Log2 => float_only("libdevice.log2"),
        UnaryOp::Log10 => float_only("libdevice.log10"),
        UnaryOp::Tan => float_only("libdevice.tan"),
        UnaryOp::Atan => float_only("libdevice.atan"),
        UnaryOp::Asin => float_only("libdevice.asin"),
        UnaryOp::Acos => float_only("libdevice.acos"),
        UnaryOp::Sinh => float_only("libdevice.sinh"),
        UnaryOp::Cosh => float_only("libdevice.cosh"),
        UnaryOp::Asinh => float_only("libdevice.asinh"),
        UnaryOp::Acosh => float_only("libdevice.acosh"),
        UnaryOp::Atanh => float_only("libdevice.atanh"),
    }
}

/// `clamp(x + 3, 0, 6) / 6`, NaN kept (PyTorch's hardsigmoid propagates it).
fn hardsigmoid(a: &str) -> String {
    format!(
        "(tl.minimum(tl.maximum({a} + 3.0, 0.0, propagate_nan=tl.PropagateNan.ALL), 6.0, propagate_nan=tl.PropagateNan.ALL) / 6.0)"
    )
}

fn binary(op: BinaryOp, a: &str, b: &str, operand: DType) -> Result<String, String> {
    let float = operand.is_float();
    Ok(match op {
        BinaryOp::Add => format!("({a} + {b})"),
        BinaryOp::Sub => format!("({a} - {b})"),
        BinaryOp::Mul => format!("({a} * {b})"),
        BinaryOp::Div => format!("({a} / {b})"),
        // Correctly rounded division (Triton's `/` is approximate for float32): a
        // quotient of exactly 1 must not truncate to 0.
        // (`tl.div_rn` is float32-only; float64's `/` is already correctly rounded.)
        BinaryOp::DivTrunc if operand == DType::Float64 => format!("libdevice.trunc({a} / {b})"),
        BinaryOp::DivTrunc if float => format!("libdevice.trunc(tl.div_rn({a}, {b}))"),
        BinaryOp::DivFloor if operand == DType::Float64 => format!("kiln_div_floor64({a}, {b})"),
        BinaryOp::DivFloor if float => format!("kiln_div_floor({a}, {b})"),
        // Integer division on magnitudes only, so the result never depends on
        // how the target rounds negative quotients.
        BinaryOp::DivTrunc => format!(
            "tl.where(({a} < 0) != ({b} < 0), -(tl.abs({a}) // tl.abs({b})), tl.abs({a}) // tl.abs({b}))"
        ),
        BinaryOp::DivFloor => format!(
            "tl.where(({a} < 0) != ({b} < 0), -((tl.abs({a}) + tl.abs({b}) - 1) // tl.abs({b})), tl.abs({a}) // tl.abs({b}))"
        ),
        BinaryOp::Pow if float => format!("libdevice.pow({a}, {b})"),
        // Integers: exact through float64 while the result fits in 53 bits.
        BinaryOp::Pow => format!(
            "tl.cast(libdevice.rint(libdevice.pow(tl.cast({a}, tl.float64), tl.cast({b}, tl.float64))), {})",
            tl_dtype(operand)
        ),
        BinaryOp::Maximum if float => format!("tl.maximum({a}, {b}, propagate_nan=tl.PropagateNan.ALL)"),
        BinaryOp::Minimum if float => format!("tl.minimum({a}, {b}, propagate_nan=tl.PropagateNan.ALL)"),
        BinaryOp::Maximum => format!("tl.maximum({a}, {b})"),
        BinaryOp::Minimum => format!("tl.minimum({a}, {b})"),
        BinaryOp::Eq => format!("({a} == {b})"),
        BinaryOp::Ne => format!("({a} != {b})"),
        BinaryOp::Lt => format!("({a} < {b})"),
        BinaryOp::Le => format!("({a} <= {b})"),
        BinaryOp::Gt => format!("({a} > {b})"),
        BinaryOp::Ge => format!("({a} >= {b})"),
        BinaryOp::BitAnd => format!("({a} & {b})"),
        BinaryOp::BitOr => format!("({a} | {b})"),
        BinaryOp::BitXor => format!("({a} ^ {b})"),
        BinaryOp::Fmod if float => format!("libdevice.fmod({a}, {b})"),
        BinaryOp::Remainder if float => {
            let r = format!("libdevice.fmod({a}, {b})");
            format!("tl.where(({r} != 0) & (({r} < 0) != ({b} < 0)), {r} + {b}, {r})")
        }
        // Float-valued: the operands are already in the result's float type.
        BinaryOp::Atan2 => format!("libdevice.atan2({a}, {b})"),
        BinaryOp::Hypot => format!("libdevice.hypot({a}, {b})"),
        BinaryOp::Copysign => format!("libdevice.copysign({a}, {b})"),
        // Integers: `a - q * b` with the sign-safe quotients above.
        BinaryOp::Fmod => format!("({a} - {} * {b})", binary(BinaryOp::DivTrunc, a, b, operand)?),
        BinaryOp::Remainder => {
            format!("({a} - {} * {b})", binary(BinaryOp::DivFloor, a, b, operand)?)
        }
    })
}
