//! An evaluator of the scheduled program itself, on the CPU in float64 with
//! each value rounded to the dtype its kernel computes in.
//!
//! It runs exactly what the code generators are given (kernels over their
//! index expressions, reductions in phases, extern products over strided
//! views, the memory plan's buffers), so comparing it with the graph's
//! reference interpreter checks lowering, fusion and planning without a device.
//! Kernels run their rows on all cores, as a device runs its programs (so a
//! kernel that read another row's result would be caught as a race, not
//! hidden by a sequential order); products use a blocked matrix product.

use super::ids::IdVec;
use super::index::{hints, Var};
use super::ir::ExprId;
use super::ir::{
    BufferId, BufferKind, Expr, ExternCall, ExternOp, Kernel, Literal, Program, ReduceKind, Step,
    View,
};
use super::Scheduled;
use crate::graph::dtype::DType;
use crate::interp::kernels::{binary, unary};
use crate::tensor::Tensor;
use rayon::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};

/// Why evaluation stopped: always a Kiln bug or a wrong input count.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("evaluating the scheduled program: {0}")]
pub struct Error(pub String);

/// Storage the process could not allocate: the refusal, as the message.
impl From<crate::memory::OutOfMemory> for Error {
    fn from(refused: crate::memory::OutOfMemory) -> Error {
        Error(refused.to_string())
    }
}

/// A copy of `values`, allocated fallibly, with room for `len` elements.
fn copy_of(values: &[f64], len: usize) -> Result<Vec<f64>, Error> {
    let mut copy = crate::interp::room(len.max(values.len()))?;
    copy.extend_from_slice(values);
    Ok(copy)
}

/// The most memory [`run`] holds, in bytes: every buffer of the program in
/// float64 (freed buffers are kept, poisoned, to catch reads after a free),
/// and the outputs it gathers. `None` past 64 bits.
pub fn memory_needed(s: &Scheduled) -> Option<u64> {
    let p = &s.program;
    let f64_bytes = |n: i64| crate::memory::elements(n, std::mem::size_of::<f64>() as u64);
    let buffers = p.buffers.iter().map(|b| f64_bytes(b.numel()));
    let outputs = p.outputs.iter().map(|v| {
        f64_bytes(
            v.shape
                .iter()
                .fold(1i64, |n, d| n.saturating_mul(d.hint().max(0))),
        )
    });
    crate::memory::total(buffers.chain(outputs))
}

/// The value of each size symbol that an input's dim is, read from `inputs`, and
/// `p` at those sizes (`p` itself where its sizes are all integers).
fn bound<'p>(p: &'p Program, inputs: &[Tensor]) -> Result<std::borrow::Cow<'p, Program>, Error> {
    let mut values = std::collections::HashMap::new();
    for (b, t) in p.inputs.iter().zip(inputs) {
        let buf = p.buffer(*b);
        for (size, &dim) in buf.shape.iter().zip(&t.shape) {
            if let Some(s) = size.as_symbol() {
                if *values.entry(s).or_insert(dim) != dim {
                    return Err(Error(format!(
                        "input `{}` gives {size} = {dim}, another input {}",
                        buf.name, values[&s]
                    )));
                }
            }
        }
    }
    let symbolic = p
        .buffers
        .iter()
        .any(|b| b.shape.iter().any(|s| !s.is_const()));
    if !symbolic {
        return Ok(std::borrow::Cow::Borrowed(p));
    }
    let unbound = std::cell::Cell::new(None);
    let value = |s: crate::graph::sym::SymId| {
        values.get(&s).copied().unwrap_or_else(|| {
            unbound.set(Some(s));
            0
        })
    };
    let at = super::bind::at_sizes(p, &value).map_err(|e| Error(e.to_string()))?;
    if let Some(s) = unbound.get() {
        return Err(Error(format!("size ks{} is no input's dim", s.0)));
    }
    for (b, t) in at.inputs.iter().zip(inputs) {
        let buf = at.buffer(*b);
        if hints(&buf.shape) != t.shape {
            return Err(Error(format!(
                "input `{}` is {:?}, the program takes {:?} there",
                buf.name,
                t.shape,
                p.buffer(*b).shape
            )));
        }
    }
    Ok(std::borrow::Cow::Owned(at))
}

/// Runs the program on `inputs` (one per graph input) and returns its outputs. A
/// program of symbolic sizes runs at the sizes its inputs give.
pub fn run(s: &Scheduled, inputs: &[Tensor]) -> Result<Vec<Tensor>, Error> {
    if inputs.len() != s.program.inputs.len() {
        return Err(Error(format!(
            "{} inputs given, {} expected",
            inputs.len(),
            s.program.inputs.len()
        )));
    }
    let p = &*bound(&s.program, inputs)?;
    let mut storage: Storage = p
        .buffers
        .iter()
        .map(|b| match &b.kind {
            BufferKind::Constant { data } => {
                let n = b.numel().max(0) as usize;
                crate::interp::collect(n, (0..n).map(|i| data.get(i)))
            }
            _ => Ok(Vec::new()),
        })
        .collect::<Result<_, _>>()?;
    for (b, t) in p.inputs.iter().zip(inputs) {
        storage[*b] = crate::interp::elements(t)?;
    }
    for (i, step) in p.steps.iter().enumerate() {
        for a in &s.memory.allocs[i] {
            let n = p.buffer(a.buf).numel().max(0) as usize;
            // A reused buffer starts with its donor's stale contents, as on a
            // device; an in-place kernel still reads the donor, so copy it.
            let init = match a.reuse {
                Some(old) => copy_of(&storage[old], n)?,
                None => crate::interp::filled(n, f64::NAN)?,
            };
            storage[a.buf] = init;
            storage[a.buf].resize(n, f64::NAN);
        }
        match step {
            Step::Kernel(k) => run_kernel(p, k, &mut storage)?,
            Step::Extern(e) => run_extern(p, e, &mut storage)?,
        }
        for b in &s.memory.frees[i] {
            if matches!(p.buffer(*b).kind, BufferKind::Computed) {
                // Freed storage must not be read again: poison it.
                storage[*b].iter_mut().for_each(|v| *v = f64::NAN);
            }
        }
    }
    p.outputs.iter().map(|v| gather(p, v, &storage)).collect()
}

fn out_of_bounds(buf: BufferId, offset: i64) -> Error {
    Error(format!(
        "read of buffer {} at {offset}, out of bounds",
        buf.0
    ))
}

/// The program's storage while one kernel runs: each buffer's elements as
/// cells that the kernel's rows, running on several threads as on a device,
/// read and write without data races.
type Cells<'a> = IdVec<BufferId, &'a [AtomicU64]>;

/// Each buffer's elements, by buffer.
type Storage = IdVec<BufferId, Vec<f64>>;

fn cells(storage: &mut Storage) -> Cells<'_> {
    storage
        .iter_mut()
        .map(|v| {
            // SAFETY: AtomicU64 has the size, alignment and bit validity of
            // u64, and so of f64; the exclusive borrow of `storage` lasts as
            // long as the cells, so nothing else touches the memory meanwhile.
            unsafe { std::slice::from_raw_parts(v.as_mut_ptr().cast::<AtomicU64>(), v.len()) }
        })
        .collect()
}

fn element(cells: &Cells, buf: BufferId, offset: i64) -> Result<f64, Error> {
    usize::try_from(offset)
        .ok()
        .and_then(|o| cells[buf].get(o))
        .map(|c| f64::from_bits(c.load(Ordering::Relaxed)))
        .ok_or_else(|| out_of_bounds(buf, offset))
}

/// The storage a view reads, as a tensor of its own (a copy of the buffer).
/// The elements of a contiguous `[A, B, C, D]` tensor (`shape`) laid out
/// `[A, C, B, D]`.
fn swap_middle(values: &[f64], shape: &[i64]) -> Result<Vec<f64>, Error> {
    let [a, b, c, d] = shape else {
        return Err(Error(format!(
            "a transpose of dims 1 and 2 of shape {shape:?}"
        )));
    };
    let [a, b, c, d] = [*a, *b, *c, *d].map(|n| n.max(0) as usize);
    if values.len() != a * b * c * d {
        return Err(Error(format!(
            "{} elements for a tensor of shape {shape:?}",
            values.len()
        )));
    }
    let mut out = Vec::with_capacity(values.len());
    for i in 0..a {
        for k in 0..c {
            for j in 0..b {
                let at = ((i * b + j) * c + k) * d;
                out.extend_from_slice(&values[at..at + d]);
            }
        }
    }
    Ok(out)
}

fn view_tensor(p: &Program, v: &View, storage: &Storage) -> Result<Tensor, Error> {
    let values = &storage[v.buf];
    Ok(Tensor {
        dtype: p.buffer(v.buf).dtype,
        shape: hints(&v.shape),
        strides: hints(&v.strides),
        offset: v.offset.hint(),
        data: std::sync::Arc::new(copy_of(values, values.len())?),
    })
}

fn gather(p: &Program, v: &View, storage: &Storage) -> Result<Tensor, Error> {
    let t = view_tensor(p, v, storage)?;
    let walk = t.walk();
    let len = storage[v.buf].len();
    let mut bad = None;
    walk.run(0..walk.len(), |_, [pos]| {
        if bad.is_none() && usize::try_from(pos).map_or(true, |p| p >= len) {
            bad = Some(out_of_bounds(v.buf, pos as i64));
        }
    });
    match bad {
        Some(e) => Err(e),
        None => Ok(crate::interp::dense(&t)?),
    }
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
    cells: &Cells,
    vals: &mut IdVec<ExprId, f64>,
) -> Result<(), Error> {
    for (id, e, d) in k.exprs.iter() {
        let v = |e: super::ir::ExprId| vals[e];
        let value = match e {
            Expr::Load {
                buf,
                index,
                guards,
                indirect,
            } => {
                if holds(guards, x, r) {
                    let at = index.eval(x, r) + indirect_offset(indirect, vals)?;
                    element(cells, *buf, at)?
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
                if c.lo.hint() <= i && i < c.hi.hint() {
                    v(*a)
                } else {
                    v(*b)
                }
            }
            Expr::Reduced(n) => red.get(*n).copied().unwrap_or(f64::NAN),
        };
        vals[id] = round(d, value);
    }
    Ok(())
}

fn round(d: DType, v: f64) -> f64 {
    d.round(v)
}

/// Rows of a kernel one task runs: enough that a task costs far more than
/// handing it to a thread.
const ROWS_PER_TASK: usize = 256;

fn run_kernel(p: &Program, k: &Kernel, storage: &mut Storage) -> Result<(), Error> {
    let (varies, _) = k.phases();
    let uses_r: Vec<bool> = k
        .stores
        .iter()
        .map(|s| varies[s.value] || s.index.uses(Var::R))
        .collect();
    let cells = cells(storage);
    let rows = usize::try_from(k.space.x_hint()).unwrap_or(0);
    (0..rows)
        .into_par_iter()
        .with_min_len(ROWS_PER_TASK)
        .try_for_each_init(
            || {
                (
                    IdVec::filled(k.exprs.len(), 0.0),
                    vec![f64::NAN; k.reductions.len()],
                )
            },
            |(vals, red), x| run_row(p, k, x as i64, &uses_r, &cells, vals, red),
        )
}

/// The data-dependent part of an offset: each index value, checked against its dim
/// (wrapped once if negative, unless `nonnegative`), times its stride.
fn indirect_offset(
    indirect: &[super::ir::Indirect],
    vals: &IdVec<ExprId, f64>,
) -> Result<i64, Error> {
    let mut at = 0;
    for i in indirect {
        let value = vals[i.value];
        let what = "an index tensor";
        let w = if i.nonnegative {
            crate::interp::model::checked_nonnegative_index(value, i.size.hint(), what)
        } else {
            crate::interp::model::checked_index(value, i.size.hint(), what)
        }
        .map_err(Error)?;
        at += w * i.stride.hint();
    }
    Ok(at)
}

/// Whether every condition of `guards` holds at `(x, r)`.
fn holds(guards: &[super::ir::Cond], x: i64, r: i64) -> bool {
    guards.iter().all(|g| {
        let i = g.index.eval(x, r);
        g.lo.hint() <= i && i < g.hi.hint()
    })
}

/// Row `x` of kernel `k`: its reductions, then its stores.
fn run_row(
    p: &Program,
    k: &Kernel,
    x: i64,
    uses_r: &[bool],
    cells: &Cells,
    vals: &mut IdVec<ExprId, f64>,
    red: &mut [f64],
) -> Result<(), Error> {
    for (n, reduction) in k.reductions.iter().enumerate() {
        let mut acc = neutral(reduction.kind);
        for r in 0..k.space.r_hint() {
            eval_all(k, x, r, red, cells, vals)?;
            acc = round(
                reduction.acc_dtype,
                combine(reduction.kind, acc, vals[reduction.value]),
            );
        }
        red[n] = acc;
    }
    for (s, varies) in k.stores.iter().zip(uses_r) {
        let rs = if *varies { k.space.r_hint() } else { 1 };
        let dtype = p.buffer(s.buf).dtype;
        for r in 0..rs {
            if !holds(&s.guards, x, r) {
                continue;
            }
            eval_all(k, x, r, red, cells, vals)?;
            let off = usize::try_from(s.index.eval(x, r) + indirect_offset(&s.indirect, vals)?)
                .map_err(|_| Error(format!("negative store offset in buffer {}", s.buf.0)))?;
            let slot = cells[s.buf].get(off).ok_or_else(|| {
                Error(format!(
                    "store to buffer {} at {off}, out of bounds",
                    s.buf.0
                ))
            })?;
            slot.store(round(dtype, vals[s.value]).to_bits(), Ordering::Relaxed);
        }
    }
    Ok(())
}

/// Row-major `values` of `shape` placed in dense storage of `strides` (themselves
/// when the strides are row-major).
fn laid_out(values: Vec<f64>, shape: &[i64], strides: &[i64]) -> Result<Vec<f64>, Error> {
    if strides == crate::graph::shape::contiguous_strides(shape).as_slice() {
        return Ok(values);
    }
    let mut out = copy_of(&values, values.len())?;
    let mut idx = vec![0i64; shape.len()];
    for &v in &values {
        let at: i64 = idx.iter().zip(strides).map(|(i, s)| i * s).sum();
        let slot = usize::try_from(at)
            .ok()
            .and_then(|a| out.get_mut(a))
            .ok_or_else(|| Error(format!("a strided extern result at {at}, out of bounds")))?;
        *slot = v;
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(out)
}

/// The row-major values of graph op `op` on the extern call's operands, by the
/// interpreter (for the calls whose op the graph has: a convolution, an index_copy).
fn interpreted(
    p: &Program,
    e: &ExternCall,
    storage: &Storage,
    op: &crate::graph::Op,
) -> Result<Vec<f64>, Error> {
    let out = p.buffer(e.out);
    let meta = crate::graph::FixedMeta::contiguous(out.shape_hint(), out.dtype);
    let tensors = e
        .args
        .iter()
        .map(|a| view_tensor(p, a, storage))
        .collect::<Result<Vec<_>, _>>()?;
    let vals: Vec<crate::interp::Val> = tensors.iter().map(crate::interp::Val::Tensor).collect();
    let y = crate::interp::eval_op(op, &vals, std::slice::from_ref(&meta))
        .map_err(|err| Error(format!("extern {}: {err}", op.name())))?;
    Ok(match y.first() {
        Some(t) => crate::interp::elements(t)?,
        None => Vec::new(),
    })
}

fn run_extern(p: &Program, e: &ExternCall, storage: &mut Storage) -> Result<(), Error> {
    if let ExternOp::Conv {
        stride,
        padding,
        dilation,
        groups,
    } = &e.op
    {
        let op = crate::graph::Op::Conv {
            stride: stride.clone(),
            padding: padding.clone(),
            dilation: dilation.clone(),
            groups: *groups,
            bias: false,
        };
        let out = p.buffer(e.out);
        let values = interpreted(p, e, storage, &op)?;
        // A result planned channels-last lies in its buffer's strides.
        storage[e.out] = laid_out(values, &out.shape_hint(), &out.strides_hint())?;
        return Ok(());
    }
    let own = match &e.op {
        ExternOp::GroupedMm => Some(crate::graph::Op::GroupedMm),
        &ExternOp::SortRuns { descending, run } => {
            Some(crate::graph::Op::SortRuns { descending, run })
        }
        &ExternOp::MergeRuns { descending, run } => {
            Some(crate::graph::Op::MergeRuns { descending, run })
        }
        _ => None,
    };
    if let Some(op) = own {
        storage[e.out] = interpreted(p, e, storage, &op)?;
        return Ok(());
    }
    if let ExternOp::IndexCopy { dim, .. } = &e.op {
        let op = crate::graph::Op::IndexCopy { dim: *dim as i64 };
        storage[e.out] = interpreted(p, e, storage, &op)?;
        return Ok(());
    }
    if let ExternOp::Attention {
        causal,
        scale_bits,
        mask,
        heads_inner,
        ..
    } = &e.op
    {
        let out = p.buffer(e.out);
        // The result is `[B, H, L, Ev]`; a `heads_inner` buffer holds it `[B, L, H, Ev]`.
        let mut shape = out.shape_hint();
        if *heads_inner {
            if shape.len() != 4 {
                return Err(Error(format!(
                    "extern attention into a [B, L, H, Ev] buffer of shape {shape:?}"
                )));
            }
            shape.swap(1, 2);
        }
        let meta = crate::graph::FixedMeta::contiguous(shape.clone(), out.dtype);
        let tensors = e
            .args
            .iter()
            .map(|a| view_tensor(p, a, storage))
            .collect::<Result<Vec<_>, _>>()?;
        let vals: Vec<crate::interp::Val> =
            tensors.iter().map(crate::interp::Val::Tensor).collect();
        let op = crate::graph::Op::Attention {
            mask: *mask,
            causal: *causal,
            scale: Some(f64::from_bits(*scale_bits)),
            gqa: true,
        };
        let y = crate::interp::eval_op(&op, &vals, std::slice::from_ref(&meta))
            .map_err(|err| Error(format!("extern attention: {err}")))?;
        let values = match y.first() {
            Some(t) => crate::interp::elements(t)?,
            None => Vec::new(),
        };
        storage[e.out] = if *heads_inner {
            swap_middle(&values, &shape)?
        } else {
            values
        };
        return Ok(());
    }
    let (bias, a, b) = match (&e.op, e.args.as_slice()) {
        (ExternOp::Addmm, [bias, a, b]) => (Some(bias), a, b),
        (_, [a, b]) => (None, a, b),
        _ => {
            return Err(Error(
                "an extern product needs two operands and a bias".into(),
            ))
        }
    };
    let shape_ok = match e.op {
        ExternOp::Mm | ExternOp::Addmm => a.shape.len() == 2 && b.shape.len() == 2,
        ExternOp::Bmm => a.shape.len() == 3 && b.shape.len() == 3,
        ExternOp::Conv { .. }
        | ExternOp::Attention { .. }
        | ExternOp::IndexCopy { .. }
        | ExternOp::GroupedMm
        | ExternOp::SortRuns { .. }
        | ExternOp::MergeRuns { .. } => false,
    };
    if !shape_ok {
        return Err(Error(format!(
            "{:?} of operands {:?} and {:?}",
            e.op, a.shape, b.shape
        )));
    }
    let out_shape = crate::graph::infer::matmul_shape(&hints(&a.shape), &hints(&b.shape))
        .map_err(|err| Error(format!("extern product: {err}")))?;
    let product = crate::interp::matmul_raw(
        &view_tensor(p, a, storage)?,
        &view_tensor(p, b, storage)?,
        &out_shape,
        false,
    )
    .map_err(|err| Error(format!("extern product: {err}")))?;
    let dtype = p.buffer(e.out).dtype;
    // `addmm`'s bias, added to every row before the one rounding.
    let bias = match bias {
        Some(v) => view_tensor(p, v, storage)?.to_vec(),
        None => Vec::new(),
    };
    let n = bias.len().max(1);
    storage[e.out] = crate::interp::collect(
        product.data.len(),
        product
            .data
            .iter()
            .enumerate()
            .map(|(i, &v)| round(dtype, v + bias.get(i % n).copied().unwrap_or(0.0))),
    )?;
    Ok(())
}
