//! Shape inference over symbolic sizes, for the op families whose rules take them so
//! far: elementwise ops, reductions over dims, softmax and the norms, and the matrix
//! products `mm`, `addmm` and `linear`.
//!
//! Each rule computes the output's shape over [`Size`]s. Everything else (the dtype, the
//! operand checks) comes from the integer rule run at the sizes' hints, and that rule's
//! shape must be the symbolic one evaluated there. A pair of sizes must agree for every
//! value of the symbols, not only at the hints: `s0` against `8` is refused, where
//! PyTorch would guard `s0 == 8` (an export that did so has made the size 8 already).

use super::{infer, ArgMeta, InferError};
use crate::graph::ir::{FixedMeta, TensorMeta};
use crate::graph::ops::Op;
use crate::graph::shape::{contiguous_sizes, contiguous_strides, wrap_dim_set};
use crate::graph::sym::Size;

/// An operand as the symbolic rules see it.
#[derive(Clone, Copy, Debug)]
pub enum SymArg<'a> {
    /// a tensor
    Tensor(&'a TensorMeta),
    /// a number
    Scalar(crate::graph::ir::Scalar),
}

/// The outputs of `op` over operands of which some have symbolic sizes; `None` where
/// no symbolic rule covers the op (the caller refuses it by name).
pub fn infer_symbolic(op: &Op, args: &[SymArg]) -> Option<Result<Vec<TensorMeta>, InferError>> {
    let shapes = match output_shapes(op, args)? {
        Ok(shapes) => shapes,
        Err(e) => return Some(Err(e)),
    };
    Some(with_integer_rule(op, args, shapes))
}

/// The integer rule at the hints gives the dtypes and checks the operands; its shapes
/// must be the symbolic ones there, and its outputs contiguous (a layout that follows an
/// operand's strides is not derived symbolically yet).
fn with_integer_rule(
    op: &Op,
    args: &[SymArg],
    shapes: Vec<Vec<Size>>,
) -> Result<Vec<TensorMeta>, InferError> {
    let hinted: Vec<FixedMeta> = args
        .iter()
        .filter_map(|a| match a {
            SymArg::Tensor(m) => Some(FixedMeta {
                shape: m.hint_shape(),
                strides: m.hint_strides(),
                dtype: m.dtype,
            }),
            SymArg::Scalar(_) => None,
        })
        .collect();
    let mut tensors = hinted.iter();
    let at_hints: Vec<ArgMeta> = args
        .iter()
        .filter_map(|a| match a {
            SymArg::Tensor(_) => tensors.next().map(ArgMeta::Tensor),
            SymArg::Scalar(s) => Some(ArgMeta::Scalar(*s)),
        })
        .collect();
    let fixed = infer(op, &at_hints)?;
    if fixed.len() != shapes.len() {
        return Err(InferError::Invalid(format!(
            "{} outputs at the sizes' hints, {} over the symbols",
            fixed.len(),
            shapes.len()
        )));
    }
    fixed
        .into_iter()
        .zip(shapes)
        .map(|(f, shape)| {
            let hints: Vec<i64> = shape.iter().map(Size::hint).collect();
            if f.shape != hints || f.strides != contiguous_strides(&f.shape) {
                return Err(InferError::Invalid(format!(
                    "the shape over the symbols {shape:?} is {hints:?} at their hints, but the \
                     rule gives {:?} (strides {:?}) there",
                    f.shape, f.strides
                )));
            }
            Ok(TensorMeta {
                strides: contiguous_sizes(&shape),
                shape,
                dtype: f.dtype,
            })
        })
        .collect()
}

/// The shapes of `op`'s outputs over the symbols; `None` for an op no rule here covers.
fn output_shapes(op: &Op, args: &[SymArg]) -> Option<Result<Vec<Vec<Size>>, InferError>> {
    let tensors: Vec<&TensorMeta> = args
        .iter()
        .filter_map(|a| match a {
            SymArg::Tensor(m) => Some(*m),
            SymArg::Scalar(_) => None,
        })
        .collect();
    let first = tensors.first()?;
    let one = |s: Result<Vec<Size>, InferError>| Some(s.map(|s| vec![s]));
    match op {
        Op::Unary(_) | Op::Gelu { .. } | Op::Cast { .. } | Op::Clamp { .. } => {
            one(Ok(first.shape.clone()))
        }
        Op::Binary { .. } | Op::Where => one(broadcast_all(&tensors)),
        Op::Softmax { .. } => one(Ok(first.shape.clone())),
        Op::LayerNorm { native: false, .. } | Op::RmsNorm { .. } => one(Ok(first.shape.clone())),
        Op::Reduce { dims, keepdim, .. } | Op::Var { dims, keepdim, .. } => {
            one(reduced(&first.shape, dims.as_deref(), *keepdim))
        }
        Op::Mm => one(product(&first.shape, &tensors.get(1)?.shape)),
        Op::Addmm { .. } => {
            let s = product(&tensors.get(1)?.shape, &tensors.get(2)?.shape);
            one(s.and_then(|s| expands_to(&first.shape, s)))
        }
        Op::Linear { bias } => {
            let w = &tensors.get(1)?.shape;
            let s = linear(&first.shape, w);
            match (bias, tensors.get(2)) {
                (true, Some(b)) => one(s.and_then(|s| expands_to(&b.shape, s))),
                (true, None) => None,
                (false, _) => one(s),
            }
        }
        _ => None,
    }
}

/// Two sizes as one dim of a broadcast: equal ones, or either the integer 1.
fn broadcast_dim(a: &Size, b: &Size) -> Option<Size> {
    if a == b || *b == 1 {
        Some(a.clone())
    } else if *a == 1 {
        Some(b.clone())
    } else {
        None
    }
}

/// PyTorch's broadcast of sizes that may be symbolic (trailing dims pair up).
pub fn broadcast_sizes(a: &[Size], b: &[Size]) -> Result<Vec<Size>, InferError> {
    let rank = a.len().max(b.len());
    let at = |s: &[Size], i: usize| {
        (i + s.len())
            .checked_sub(rank)
            .map_or(Size::from(1), |k| s[k].clone())
    };
    (0..rank)
        .map(|i| {
            broadcast_dim(&at(a, i), &at(b, i)).ok_or_else(|| {
                InferError::Invalid(format!(
                    "shapes {a:?} and {b:?} do not broadcast for every value of their symbols"
                ))
            })
        })
        .collect()
}

fn broadcast_all(tensors: &[&TensorMeta]) -> Result<Vec<Size>, InferError> {
    tensors
        .iter()
        .try_fold(Vec::new(), |acc, t| broadcast_sizes(&acc, &t.shape))
}

/// `shape` reduced over `dims` (all of them when `None`).
fn reduced(shape: &[Size], dims: Option<&[i64]>, keepdim: bool) -> Result<Vec<Size>, InferError> {
    let gone = wrap_dim_set(dims, shape.len())?;
    Ok(shape
        .iter()
        .enumerate()
        .filter_map(|(d, s)| match (gone.contains(&d), keepdim) {
            (false, _) => Some(s.clone()),
            (true, true) => Some(Size::from(1)),
            (true, false) => None,
        })
        .collect())
}

fn disagree(what: &str, a: &[Size], b: &[Size]) -> InferError {
    InferError::Invalid(format!(
        "{what}: {a:?} vs {b:?} (the sizes must agree for every value of their symbols)"
    ))
}

/// `[m, k] @ [k, n]`.
fn product(a: &[Size], b: &[Size]) -> Result<Vec<Size>, InferError> {
    match (a, b) {
        ([m, k], [k2, n]) if k == k2 => Ok(vec![m.clone(), n.clone()]),
        _ => Err(disagree("mm needs [m, k] and [k, n]", a, b)),
    }
}

/// `x @ w.T` with `w` `[out, in]`.
fn linear(x: &[Size], w: &[Size]) -> Result<Vec<Size>, InferError> {
    match (x.split_last(), w) {
        (Some((k, rows)), [n, k2]) if k == k2 => {
            Ok(rows.iter().cloned().chain([n.clone()]).collect())
        }
        _ => Err(disagree(
            "linear: input's last dim must equal weight's dim 1",
            x,
            w,
        )),
    }
}

/// `out`, where `operand` expands to it without changing it (a bias).
fn expands_to(operand: &[Size], out: Vec<Size>) -> Result<Vec<Size>, InferError> {
    match broadcast_sizes(&out, operand) {
        Ok(b) if b == out => Ok(out),
        _ => Err(disagree(
            "the operand does not expand to the result",
            operand,
            &out,
        )),
    }
}
