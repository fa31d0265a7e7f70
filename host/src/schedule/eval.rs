//! An evaluator of the scheduled program itself, on the CPU in float64 with
//! each value rounded to the dtype its kernel computes in.
//!
//! It runs exactly what the code generators are given (kernels over their
//! index expressions, reductions in phases, extern products over strided
//! views, the memory plan's buffers), so comparing it with the graph's
//! reference interpreter checks lowering, fusion and planning without a device.
//! Slow by design; for tests.

use super::index::Var;
use super::ir::{
    BufferId, BufferKind, Expr, ExternCall, ExternOp, Kernel, Literal, Program, ReduceKind, Step,
    View,
};
use super::Scheduled;
use crate::graph::dtype::DType;
use crate::interp::kernels::{binary, unary};
use crate::tensor::Tensor;

/// Why evaluation stopped: always a Kiln bug or a wrong input count.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("evaluating the scheduled program: {0}")]
pub struct Error(pub String);

fn contiguous_values(t: &Tensor) -> Vec<f64> {
    t.contiguous().to_vec()
}

/// Runs the program on `inputs` (one per graph input) and returns its outputs.
pub fn run(s: &Scheduled, inputs: &[Tensor]) -> Result<Vec<Tensor>, Error> {
    let p = &s.program;
    if inputs.len() != p.inputs.len() {
        return Err(Error(format!(
            "{} inputs given, {} expected",
            inputs.len(),
            p.inputs.len()
        )));
    }
    let mut storage: Vec<Vec<f64>> = p
        .buffers
        .iter()
        .map(|b| match &b.kind {
            BufferKind::Constant { data } => (0..b.numel().max(0) as usize)
                .map(|i| data.get(i))
                .collect(),
            _ => Vec::new(),
        })
        .collect();
    for (b, t) in p.inputs.iter().zip(inputs) {
        storage[b.0 as usize] = contiguous_values(t);
    }
    for (i, step) in p.steps.iter().enumerate() {
        for a in &s.memory.allocs[i] {
            let n = p.buffer(a.buf).numel().max(0) as usize;
            // A reused buffer starts with its donor's stale contents, as on a
            // device; an in-place kernel still reads the donor, so copy it.
            let init = match a.reuse {
                Some(old) => storage[old.0 as usize].clone(),
                None => vec![f64::NAN; n],
            };
            storage[a.buf.0 as usize] = init;
            storage[a.buf.0 as usize].resize(n, f64::NAN);
        }
        match step {
            Step::Kernel(k) => run_kernel(p, k, &mut storage)?,
            Step::Extern(e) => run_extern(p, e, &mut storage)?,
        }
        for b in &s.memory.frees[i] {
            if matches!(p.buffer(*b).kind, BufferKind::Computed) {
                // Freed storage must not be read again: poison it.
                storage[b.0 as usize].iter_mut().for_each(|v| *v = f64::NAN);
            }
        }
    }
    p.outputs.iter().map(|v| gather(p, v, &storage)).collect()
}

fn element(storage: &[Vec<f64>], buf: BufferId, offset: i64) -> Result<f64, Error> {
    usize::try_from(offset)
        .ok()
        .and_then(|o| storage[buf.0 as usize].get(o).copied())
        .ok_or_else(|| {
            Error(format!(
                "read of buffer {} at {offset}, out of bounds",
                buf.0
            ))
        })
}

fn gather(p: &Program, v: &View, storage: &[Vec<f64>]) -> Result<Tensor, Error> {
    let mut values = Vec::new();
    let mut err = None;
    crate::graph::shape::for_each_index(&v.shape, |idx| {
        let off = v.offset + idx.iter().zip(&v.strides).map(|(i, s)| i * s).sum::<i64>();
        match element(storage, v.buf, off) {
            Ok(x) => values.push(x),
            Err(e) => err = Some(e),
        }
    });
    if let Some(e) = err {
        return Err(e);
    }
    if v.shape.is_empty() && values.is_empty() {
        values.push(element(storage, v.buf, v.offset)?);
    }
    Ok(Tensor::new(v.shape.clone(), p.buffer(v.buf).dtype, values))
}

fn neutral(kind: ReduceKind) -> f64 {
    match kind {
        ReduceKind::Sum => 0.0,
        ReduceKind::Max => f64::NEG_INFINITY,
        ReduceKind::Min => f64::INFINITY,
    }
}

fn combine(kind: ReduceKind, acc: f64, v: f64) -> f64 {
    match kind {
        ReduceKind::Sum => acc + v,
        ReduceKind::Max if acc.is_nan() || v.is_nan() => f64::NAN,
        ReduceKind::Min if acc.is_nan() || v.is_nan() => f64::NAN,
        ReduceKind::Max => acc.max(v),
        ReduceKind::Min => acc.min(v),
    }
}

/// Every expression of `k` at (`x`, `r`), given the reductions known so far.
fn eval_all(
    k: &Kernel,
    x: i64,
    r: i64,
    red: &[f64],
    storage: &[Vec<f64>],
    vals: &mut [f64],
) -> Result<(), Error> {
    for (id, e, d) in k.exprs.iter() {
        let v = |e: super::ir::ExprId| vals[e.0 as usize];
        let value = match e {
            Expr::Load { buf, index, guards } => {
                if guards.iter().all(|g| {
                    let i = g.index.eval(x, r);
                    g.lo <= i && i < g.hi
                }) {
                    element(storage, *buf, index.eval(x, r))?
                } else {
                    0.0
                }
            }
            Expr::Literal(l) => match l {
                Literal::Float(bits) => f64::from_bits(*bits),
                Literal::Int(i) => *i as f64,
                Literal::Bool(b) => f64::from(u8::from(*b)),
            },
            Expr::Unary(op, a) => unary(*op, v(*a)),
            Expr::Binary(op, a, b) => binary(*op, v(*a), v(*b), 1.0, !k.exprs.dtype(*a).is_float()),
            Expr::Where(c, a, b) => {
                if v(*c) != 0.0 {
                    v(*a)
                } else {
                    v(*b)
                }
            }
            Expr::Cast(a) => v(*a),
            Expr::Select(c, a, b) => {
                let i = c.index.eval(x, r);
                if c.lo <= i && i < c.hi {
                    v(*a)
                } else {
                    v(*b)
                }
            }
            Expr::Reduced(n) => red.get(*n).copied().unwrap_or(f64::NAN),
        };
        vals[id.0 as usize] = round(d, value);
    }
    Ok(())
}

fn round(d: DType, v: f64) -> f64 {
    d.round(v)
}

fn run_kernel(p: &Program, k: &Kernel, storage: &mut [Vec<f64>]) -> Result<(), Error> {
    let mut vals = vec![0.0; k.exprs.len()];
    let mut red = vec![f64::NAN; k.reductions.len()];
    let (varies, _) = k.phases();
    let uses_r: Vec<bool> = k
        .stores
        .iter()
        .map(|s| varies[s.value.0 as usize] || s.index.uses(Var::R))
        .collect();
    for x in 0..k.space.x {
        for (n, reduction) in k.reductions.iter().enumerate() {
            let mut acc = neutral(reduction.kind);
            for r in 0..k.space.r {
                eval_all(k, x, r, &red, storage, &mut vals)?;
                acc = round(
                    reduction.acc_dtype,
                    combine(reduction.kind, acc, vals[reduction.value.0 as usize]),
                );
            }
            red[n] = acc;
        }
        for (s, varies) in k.stores.iter().zip(&uses_r) {
            let rs = if *varies { k.space.r } else { 1 };
            let dtype = p.buffer(s.buf).dtype;
            for r in 0..rs {
                eval_all(k, x, r, &red, storage, &mut vals)?;
                let off = usize::try_from(s.index.eval(x, r))
                    .map_err(|_| Error(format!("negative store offset in buffer {}", s.buf.0)))?;
                let slot = storage[s.buf.0 as usize].get_mut(off).ok_or_else(|| {
                    Error(format!(
                        "store to buffer {} at {off}, out of bounds",
                        s.buf.0
                    ))
                })?;
                *slot = round(dtype, vals[s.value.0 as usize]);
            }
        }
    }
    Ok(())
}

fn at(storage: &[Vec<f64>], v: &View, idx: &[i64]) -> Result<f64, Error> {
    let off = v.offset + idx.iter().zip(&v.strides).map(|(i, s)| i * s).sum::<i64>();
    element(storage, v.buf, off)
}

fn run_extern(p: &Program, e: &ExternCall, storage: &mut [Vec<f64>]) -> Result<(), Error> {
    let (a, b) = match e.args.as_slice() {
        [a, b] => (a, b),
        _ => return Err(Error("an extern product needs two operands".into())),
    };
    let (batch, m, k, n) = match e.op {
        ExternOp::Mm => (1, a.shape[0], a.shape[1], b.shape[1]),
        ExternOp::Bmm => (a.shape[0], a.shape[1], a.shape[2], b.shape[2]),
    };
    let dtype = p.buffer(e.out).dtype;
    let mut out = vec![0.0; (batch * m * n).max(0) as usize];
    for bi in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0.0;
                for kk in 0..k {
                    let (x, y) = match e.op {
                        ExternOp::Mm => (at(storage, a, &[i, kk])?, at(storage, b, &[kk, j])?),
                        ExternOp::Bmm => {
                            (at(storage, a, &[bi, i, kk])?, at(storage, b, &[bi, kk, j])?)
                        }
                    };
                    acc += x * y;
                }
                out[((bi * m + i) * n + j) as usize] = round(dtype, acc);
            }
        }
    }
    storage[e.out.0 as usize] = out;
    Ok(())
}
