//! A program at one binding of its size symbols: every size evaluated to the integer
//! it takes there. The loop-IR evaluator runs a symbolic program this way at any size
//! its inputs give ([`super::eval::run`]), and a test can compare what one symbolic
//! compile computes at several sizes with the reference.
//!
//! Only sizes change: each kernel keeps its expressions, indexes and parameters, so
//! the bound program computes what the symbolic one computes at those sizes.

use super::index::{Index, Size};
use super::ir::{Buffer, Cond, Expr, ExprArena, Indirect, Kernel, Program, Space, Step, View};
use crate::graph::sym::{SymError, SymId};

/// How a size becomes an integer.
type Value<'a> = &'a dyn Fn(SymId) -> i64;

fn size(s: &Size, value: Value) -> Result<Size, SymError> {
    match s.as_const() {
        Some(_) => Ok(s.clone()),
        None => s.eval(value).map(Size::from),
    }
}

fn sizes(v: &[Size], value: Value) -> Result<Vec<Size>, SymError> {
    v.iter().map(|s| size(s, value)).collect()
}

fn index(i: &Index, value: Value) -> Result<Index, SymError> {
    Ok(match i {
        Index::Var(v) => Index::Var(*v),
        Index::Const(c) => Index::Const(size(c, value)?),
        Index::Add(terms) => Index::Add(
            terms
                .iter()
                .map(|t| index(t, value))
                .collect::<Result<_, _>>()?,
        ),
        Index::Mul(a, k) => Index::Mul(Box::new(index(a, value)?), size(k, value)?),
        Index::Div(a, k) => Index::Div(Box::new(index(a, value)?), size(k, value)?),
        Index::Mod(a, k) => Index::Mod(Box::new(index(a, value)?), size(k, value)?),
    })
}

fn cond(c: &Cond, value: Value) -> Result<Cond, SymError> {
    Ok(Cond {
        index: index(&c.index, value)?,
        lo: size(&c.lo, value)?,
        hi: size(&c.hi, value)?,
    })
}

fn indirect(i: &Indirect, value: Value) -> Result<Indirect, SymError> {
    Ok(Indirect {
        size: size(&i.size, value)?,
        stride: size(&i.stride, value)?,
        ..i.clone()
    })
}

fn view(v: &View, value: Value) -> Result<View, SymError> {
    Ok(View {
        buf: v.buf,
        shape: sizes(&v.shape, value)?,
        strides: sizes(&v.strides, value)?,
        offset: size(&v.offset, value)?,
    })
}

fn expr(e: &Expr, value: Value) -> Result<Expr, SymError> {
    Ok(match e {
        Expr::Load {
            buf,
            index: at,
            guards,
            indirect: parts,
        } => Expr::Load {
            buf: *buf,
            index: index(at, value)?,
            guards: guards
                .iter()
                .map(|c| cond(c, value))
                .collect::<Result<_, _>>()?,
            indirect: parts
                .iter()
                .map(|i| indirect(i, value))
                .collect::<Result<_, _>>()?,
        },
        Expr::Select(c, a, b) => Expr::Select(cond(c, value)?, *a, *b),
        other => other.clone(),
    })
}

fn kernel(k: &Kernel, value: Value) -> Result<Kernel, SymError> {
    let nodes = k
        .exprs
        .iter()
        .map(|(_, e, dtype)| Ok((expr(e, value)?, dtype)))
        .collect::<Result<Vec<_>, SymError>>()?;
    let mut stores = k.stores.clone();
    for s in &mut stores {
        s.index = index(&s.index, value)?;
        s.indirect = s
            .indirect
            .iter()
            .map(|i| indirect(i, value))
            .collect::<Result<_, _>>()?;
        s.guards = s
            .guards
            .iter()
            .map(|c| cond(c, value))
            .collect::<Result<_, _>>()?;
    }
    Ok(Kernel {
        space: Space {
            x: size(&k.space.x, value)?,
            r: size(&k.space.r, value)?,
            inner: size(&k.space.inner, value)?,
        },
        exprs: ExprArena::from_nodes(nodes),
        stores,
        ..k.clone()
    })
}

/// `p` with every size at `value`'s binding of the symbols.
pub fn at_sizes(p: &Program, value: Value) -> Result<Program, SymError> {
    let buffers = p
        .buffers
        .iter()
        .map(|b| {
            Ok(Buffer {
                shape: sizes(&b.shape, value)?,
                strides: sizes(&b.strides, value)?,
                ..b.clone()
            })
        })
        .collect::<Result<Vec<_>, SymError>>()?;
    let steps = p
        .steps
        .iter()
        .map(|s| {
            Ok(match s {
                Step::Kernel(k) => Step::Kernel(kernel(k, value)?),
                Step::Extern(e) => {
                    let mut e = e.clone();
                    e.args = e
                        .args
                        .iter()
                        .map(|a| view(a, value))
                        .collect::<Result<_, _>>()?;
                    Step::Extern(e)
                }
            })
        })
        .collect::<Result<Vec<_>, SymError>>()?;
    Ok(Program {
        name: p.name.clone(),
        buffers: buffers.into_iter().collect(),
        inputs: p.inputs.clone(),
        outputs: p
            .outputs
            .iter()
            .map(|o| view(o, value))
            .collect::<Result<_, _>>()?,
        steps,
        symbols: crate::graph::sym::Symbols::default(),
    })
}
