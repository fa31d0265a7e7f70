//! Shape, stride and dtype inference for every op, with PyTorch's rules and error checks.
//!
//! Given the metadata of a node's operands it returns the metadata of its outputs, or says
//! why the operands are invalid. It must never panic on any input: validation is the
//! contract that lets later stages assume well-formed graphs.

use super::dtype::{promote, result_type, DType, OperandKind};
pub mod layout;
mod linalg;
pub mod model;
mod pointwise;
mod reduce;
pub mod symbolic;
use super::ir::{FixedMeta, Scalar, TensorMeta};
use super::ops::{BinaryOp, Op};
use super::shape::{broadcast, numel, wrap_dim, wrap_dim_set, Shape, ShapeError};
use super::views;
use model as infer_model;

/// An operand as inference sees it.
#[derive(Clone, Copy, Debug)]
pub enum ArgMeta<'a> {
    /// a tensor
    Tensor(&'a FixedMeta),
    /// a number
    Scalar(Scalar),
}

/// Why a node's operands are invalid; the caller adds the node's name and line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InferError {
    /// Two operand shapes that must agree do not.
    #[error("{what}: {a:?} vs {b:?}")]
    Mismatch {
        /// what had to agree
        what: String,
        /// one shape
        a: Shape,
        /// the other
        b: Shape,
    },
    /// A dim, size or count problem.
    #[error(transparent)]
    Shape(#[from] ShapeError),
    /// A view op does not apply to its operand.
    #[error(transparent)]
    View(#[from] super::views::ViewError),
    /// Arithmetic on symbolic sizes failed (an overflow, a division by zero).
    #[error(transparent)]
    Sym(#[from] super::sym::SymError),
    /// Anything else (wrong operand count or kind, unsupported dtype, ...).
    #[error("{0}")]
    Invalid(String),
}

fn invalid<T>(msg: impl Into<String>) -> Result<T, InferError> {
    Err(InferError::Invalid(msg.into()))
}

fn tensor<'a>(args: &[ArgMeta<'a>], i: usize) -> Result<&'a FixedMeta, InferError> {
    match args.get(i) {
        Some(ArgMeta::Tensor(t)) => Ok(t),
        Some(ArgMeta::Scalar(s)) => invalid(format!(
            "operand {i} must be a tensor, found the number {s}"
        )),
        None => invalid(format!("missing operand {i}")),
    }
}

fn kind_of(a: &ArgMeta) -> (DType, OperandKind, Shape) {
    match a {
        ArgMeta::Tensor(t) if t.rank() == 0 => (t.dtype, OperandKind::ZeroDim, vec![]),
        ArgMeta::Tensor(t) => (t.dtype, OperandKind::Dim, t.shape.clone()),
        ArgMeta::Scalar(s) => (s.dtype(), OperandKind::Scalar, vec![]),
    }
}

/// Broadcast shape and promoted dtype of elementwise operands.
pub fn elementwise(args: &[ArgMeta]) -> Result<(Shape, DType), InferError> {
    let mut shape: Shape = vec![];
    let mut kinds = Vec::with_capacity(args.len());
    for a in args {
        let (d, k, s) = kind_of(a);
        shape = broadcast(&shape, &s).map_err(|_| InferError::Mismatch {
            what: "operand shapes do not broadcast".into(),
            a: shape.clone(),
            b: s.clone(),
        })?;
        kinds.push((d, k));
    }
    let dtype = result_type(&kinds).ok_or_else(|| InferError::Invalid("no operands".into()))?;
    Ok((shape, dtype))
}

fn out(shape: Shape, dtype: DType) -> Result<Vec<FixedMeta>, InferError> {
    numel(&shape)?;
    Ok(vec![FixedMeta::contiguous(shape, dtype)])
}

fn float_of(d: DType) -> DType {
    if d.is_float() {
        d
    } else {
        DType::Float32
    }
}

fn count(args: &[ArgMeta], n: usize) -> Result<(), InferError> {
    if args.len() != n {
        return invalid(format!("expected {n} operands, found {}", args.len()));
    }
    Ok(())
}

fn op_name(op: BinaryOp) -> &'static str {
    BinaryOp::ALL
        .iter()
        .find(|(o, _)| *o == op)
        .map_or("this op", |(_, n)| n)
}

/// The output metadata of `op` applied to `args`.
pub fn infer(op: &Op, args: &[ArgMeta]) -> Result<Vec<FixedMeta>, InferError> {
    match op {
        Op::Input { .. } | Op::Constant { .. } => {
            invalid("inputs and constants declare their own metadata")
        }
        Op::Unary(u) => pointwise::unary(*u, args),
        Op::Gelu { .. } => pointwise::gelu(args),
        Op::Binary { op, .. } => pointwise::binary(*op, args),
        Op::Where => pointwise::where_(args),
        Op::Clamp { min, max } => pointwise::clamp(*min, *max, args),
        Op::Cast { dtype } => pointwise::cast(*dtype, args),
        Op::Reduce {
            op,
            dims,
            keepdim,
            dtype,
        } => reduce::reduce(*op, dims.as_deref(), *keepdim, *dtype, args),
        Op::Var { dims, keepdim, .. } => reduce::var(dims.as_deref(), *keepdim, args),
        Op::Softmax {
            dim,
            half_to_float,
            dtype,
            ..
        } => reduce::softmax(*dim, *half_to_float, *dtype, args),
        Op::LayerNorm {
            normalized_shape,
            weight,
            bias,
            native,
            ..
        } => reduce::layer_norm(normalized_shape, *weight, *bias, *native, args),
        Op::RmsNorm {
            normalized_shape,
            weight,
            ..
        } => reduce::rms_norm(normalized_shape, *weight, args),
        Op::Linear { bias } => linalg::linear(*bias, args),
        Op::Addmm { .. } => linalg::addmm(args),
        Op::Mm => linalg::mm(args),
        Op::Bmm => linalg::bmm(args),
        Op::Matmul => linalg::matmul(args),
        Op::Cat { dim } => cat(args, *dim),
        Op::Arange {
            start,
            end,
            step,
            dtype,
        } => infer_model::arange(*start, end.hint(), *step, *dtype, args),
        Op::Full { size, value, dtype } => {
            // Symbolic sizes at their hints (the symbolic rule gives the shape over them).
            let size: Option<Vec<i64>> = size
                .as_ref()
                .map(|s| s.iter().map(crate::graph::sym::Size::hint).collect());
            infer_model::full(size.as_deref(), *value, *dtype, args)
        }
        Op::Index { indexed, .. } => infer_model::index(indexed, args),
        Op::Gather { dim } => infer_model::gather(*dim, args),
        Op::IndexCopy { dim } => infer_model::index_copy(*dim, args),
        Op::GroupedMm => infer_model::grouped_mm(args),
        Op::SortRuns { run, .. } => infer_model::sort_runs(*run, args),
        Op::MergeRuns { run, .. } => infer_model::merge_runs(*run, args),
        Op::Cumsum { dim, dtype } => infer_model::cumsum(*dim, *dtype, args),
        Op::Diff { n, dim, .. } => infer_model::diff(*n, *dim, args),
        Op::Attention { mask, gqa, .. } => infer_model::attention(*mask, *gqa, args),
        Op::Conv {
            stride,
            padding,
            dilation,
            groups,
            bias,
        } => infer_model::conv(stride, padding, dilation, *groups, *bias, args),
        Op::BatchNorm {
            weight,
            bias,
            native,
            ..
        } => infer_model::batch_norm(*weight, *bias, *native, args),
        Op::MaxPool {
            kernel,
            stride,
            padding,
            dilation,
            ceil_mode,
            with_indices,
        } => infer_model::max_pool(
            kernel,
            stride,
            padding,
            dilation,
            *ceil_mode,
            *with_indices,
            args,
        ),
        Op::AdaptiveAvgPool { output_size } => infer_model::adaptive_avg_pool(output_size, args),
        Op::AvgPool {
            kernel,
            stride,
            padding,
            ceil_mode,
            ..
        } => infer_model::avg_pool(kernel, stride, padding, *ceil_mode, args),
        Op::GroupNorm {
            groups,
            weight,
            bias,
            native,
            ..
        } => infer_model::group_norm(*groups, *weight, *bias, *native, args),
        Op::Pad { pads, mode, .. } => layout::pad(pads, *mode, args),
        Op::Roll { shifts, dims } => layout::roll(shifts, dims, args),
        Op::SliceScatter {
            dim,
            start,
            end,
            step,
            select,
        } => layout::slice_scatter(*dim, *start, *end, *step, *select, args),
        Op::Copy => layout::copy(args),
        Op::TypeAs => layout::type_as(args),
        Op::Repeat { repeats } => layout::repeat(repeats, args),
        Op::AsStrided {
            size,
            stride,
            offset,
        } => layout::as_strided(size, stride, *offset, args),
        op if views::describes(op) => view(op, args),
        other => invalid(format!("no inference rule for `{}`", other.name())),
    }
}

/// Every output of a view op: the shape its [`views::view_map`] gives, with
/// PyTorch's strides (a copy, or a reshape that cannot be a view, is contiguous).
fn view(op: &Op, args: &[ArgMeta]) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 1)?;
    let t = tensor(args, 0)?;
    let meta = TensorMeta::strided(&t.shape, &t.strides, t.dtype);
    let outs = view_metas(op, &meta, crate::graph::sym::Symbols::none())?;
    outs.iter()
        .map(|m| {
            m.fixed().ok_or_else(|| {
                InferError::Invalid(format!(
                    "sizes {:?} over symbols the graph does not define",
                    m.shape
                ))
            })
        })
        .collect()
}

/// Every output's metadata for view op `op` of a tensor `t`: the shape its
/// [`views::view_map`] gives, with PyTorch's strides (a copy, or a reshape that cannot be a
/// view, is contiguous). Shape inference reads this for integer and symbolic sizes
/// alike.
pub(crate) fn view_metas(
    op: &Op,
    t: &TensorMeta,
    symbols: &crate::graph::sym::Symbols,
) -> Result<Vec<TensorMeta>, views::ViewError> {
    (0..views::output_count(op, &t.shape)?)
        .map(|k| {
            let map = views::view_map(op, &t.shape, k as u32, symbols)?;
            let strides = match map.restride(&t.strides, &crate::graph::sym::Size::from(0)) {
                Some((strides, _)) if !views::copies(op) => strides,
                _ => super::shape::contiguous_sizes(&map.out_shape),
            };
            Ok(TensorMeta {
                shape: map.out_shape,
                strides,
                dtype: t.dtype,
            })
        })
        .collect()
}

fn cat(args: &[ArgMeta], dim: i64) -> Result<Vec<FixedMeta>, InferError> {
    // A 1-D tensor of no elements is skipped, whatever the others' rank, as PyTorch
    // skips it (an empty cache concatenated with a layer's keys); it still takes part
    // in the dtype.
    let parts: Vec<usize> = (0..args.len())
        .filter(|&i| tensor(args, i).map_or(true, |t| !is_legacy_empty(t)))
        .collect();
    let Some(&head) = parts.first() else {
        let first = tensor(args, 0)?;
        let dtype = (0..args.len()).try_fold(first.dtype, |d, i| {
            tensor(args, i).map(|t| promote(d, t.dtype))
        })?;
        return out(first.shape.clone(), dtype);
    };
    let first = tensor(args, head)?;
    if first.rank() == 0 {
        return invalid("cat of 0-d tensors");
    }
    let d = wrap_dim(dim, first.rank())?;
    let mut shape = first.shape.clone();
    let mut dtype = first.dtype;
    shape[d] = 0;
    for i in 0..args.len() {
        let t = tensor(args, i)?;
        if !parts.contains(&i) {
            dtype = promote(dtype, t.dtype);
            continue;
        }
        let mut a = t.shape.clone();
        let mut b = first.shape.clone();
        if t.rank() == first.rank() {
            a[d] = 0;
            b[d] = 0;
        }
        if a != b {
            return Err(InferError::Mismatch {
                what: format!("cat: operand {i} differs outside dim {d}"),
                a: first.shape.clone(),
                b: t.shape.clone(),
            });
        }
        shape[d] = shape[d]
            .checked_add(t.shape[d])
            .ok_or_else(|| ShapeError::Size(t.shape.clone()))?;
        dtype = promote(dtype, t.dtype);
    }
    out(shape, dtype)
}

/// A 1-D tensor of no elements, which `cat` skips.
fn is_legacy_empty(t: &FixedMeta) -> bool {
    t.shape == [0]
}

fn same_dtype(ts: &[&FixedMeta]) -> Result<(), InferError> {
    if let Some(t) = ts.iter().find(|t| t.dtype != ts[0].dtype) {
        return invalid(format!(
            "operands must have the same dtype, found {} and {}",
            ts[0].dtype, t.dtype
        ));
    }
    Ok(())
}

fn check_norm(t: &FixedMeta, ns: &[i64], params: &[ArgMeta]) -> Result<(), InferError> {
    if ns.is_empty() || ns.len() > t.rank() || t.shape[t.rank() - ns.len()..] != *ns {
        return Err(InferError::Mismatch {
            what: "normalized_shape must be the input's trailing dims".into(),
            a: t.shape.clone(),
            b: ns.to_vec(),
        });
    }
    for p in params {
        let p = match p {
            ArgMeta::Tensor(p) => p,
            ArgMeta::Scalar(_) => return invalid("weight/bias must be tensors"),
        };
        if p.shape != ns {
            return Err(InferError::Mismatch {
                what: "weight/bias must have the normalized_shape".into(),
                a: p.shape.clone(),
                b: ns.to_vec(),
            });
        }
    }
    Ok(())
}

/// The shape of a reduction over `dims` (all when `None`).
pub fn reduced_shape(
    shape: &[i64],
    dims: Option<&[i64]>,
    keepdim: bool,
) -> Result<Shape, InferError> {
    let ds = wrap_dim_set(dims, shape.len())?;
    let mut s = Vec::with_capacity(shape.len());
    for (i, &d) in shape.iter().enumerate() {
        if ds.contains(&i) {
            if keepdim {
                s.push(1);
            }
        } else {
            s.push(d);
        }
    }
    Ok(s)
}

fn mm_shape(a: &FixedMeta, b: &FixedMeta) -> Result<Shape, InferError> {
    if a.rank() != 2 || b.rank() != 2 || a.shape[1] != b.shape[0] {
        return Err(InferError::Mismatch {
            what: "mm needs [n, k] and [k, m]".into(),
            a: a.shape.clone(),
            b: b.shape.clone(),
        });
    }
    Ok(vec![a.shape[0], b.shape[1]])
}

/// `torch.matmul`'s output shape: 1-D operands get a dim prepended/appended and removed
/// afterwards, batch dims broadcast.
pub fn matmul_shape(a: &[i64], b: &[i64]) -> Result<Shape, InferError> {
    let mismatch = || InferError::Mismatch {
        what: "matmul: inner dims differ or batch dims do not broadcast".into(),
        a: a.to_vec(),
        b: b.to_vec(),
    };
    if a.is_empty() || b.is_empty() {
        return Err(mismatch());
    }
    let a2: Shape = if a.len() == 1 {
        vec![1, a[0]]
    } else {
        a.to_vec()
    };
    let b2: Shape = if b.len() == 1 {
        vec![b[0], 1]
    } else {
        b.to_vec()
    };
    let (n, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let (k2, m) = (b2[b2.len() - 2], b2[b2.len() - 1]);
    if k != k2 {
        return Err(mismatch());
    }
    let mut s = broadcast(&a2[..a2.len() - 2], &b2[..b2.len() - 2]).map_err(|_| mismatch())?;
    if a.len() > 1 {
        s.push(n);
    }
    if b.len() > 1 {
        s.push(m);
    }
    Ok(s)
}
