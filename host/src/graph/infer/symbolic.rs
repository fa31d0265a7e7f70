//! Shape inference over symbolic sizes, for the op families whose rules take them so
//! far: elementwise ops, reductions over dims, softmax and the norms, the matrix
//! products `mm`, `bmm`, `addmm` and `linear`, attention, advanced indexing and `gather`,
//! `cumsum` and `diff`, `full`, `arange` of a symbolic length, every view (through
//! `graph::views`, which takes symbolic sizes itself), and convolution, the norms of
//! images and the poolings over a symbolic batch.
//!
//! Each rule computes the output's shape over [`Size`]s. Everything else (the dtype, the
//! operand checks) comes from the integer rule run at the sizes' hints, and that rule's
//! shape must be the symbolic one evaluated there. A pair of sizes must agree for every
//! value of the symbols, not only at the hints: `s0` against `8` is refused, where
//! PyTorch would guard `s0 == 8` (an export that did so has made the size 8 already).

use super::{infer, ArgMeta, InferError};
use crate::graph::ir::{FixedMeta, Scalar, TensorMeta};
use crate::graph::ops::{Bound, Op};
use crate::graph::shape::{contiguous_sizes, contiguous_strides, wrap_dim, wrap_dim_set};
use crate::graph::sym::{Size, Symbols};
use crate::graph::views;

/// An operand as the symbolic rules see it.
#[derive(Clone, Copy, Debug)]
pub enum SymArg<'a> {
    /// a tensor
    Tensor(&'a TensorMeta),
    /// a number
    Scalar(crate::graph::ir::Scalar),
}

/// The outputs of `op` over operands of which some have symbolic sizes, or with
/// symbolic size arguments, over `symbols`; `None` where no symbolic rule covers the
/// op (the caller refuses it by name).
pub fn infer_symbolic(
    op: &Op,
    args: &[SymArg],
    symbols: &Symbols,
) -> Option<Result<Vec<TensorMeta>, InferError>> {
    if views::describes(op) {
        return Some(view(op, args, symbols));
    }
    if let Op::Arange { .. } = op {
        return Some(arange(op, args, symbols));
    }
    if let Op::Full {
        size: Some(size), ..
    } = op
    {
        // A factory of symbolic sizes (`ones(batch, seq)`): no operand to take them from.
        return Some(with_integer_rule(op, args, vec![size.clone()]));
    }
    if keeps_batch(op) {
        return over_batch(op, args);
    }
    let shapes = match output_shapes(op, args, symbols)? {
        Ok(shapes) => shapes,
        Err(e) => return Some(Err(e)),
    };
    Some(with_integer_rule(op, args, shapes))
}

/// Whether `op`'s outputs keep its first operand's batch (dim 0) while the rest of
/// their sizes follow from that operand's other dims and the other operands:
/// convolution, batch and group norm, and the poolings. Their rule ([`over_batch`])
/// takes a symbolic batch, as a model served at many batch sizes has, and every other
/// size static.
fn keeps_batch(op: &Op) -> bool {
    matches!(
        op,
        Op::Conv { .. }
            | Op::BatchNorm { .. }
            | Op::GroupNorm { .. }
            | Op::MaxPool { .. }
            | Op::AvgPool { .. }
            | Op::AdaptiveAvgPool { .. }
    )
}

/// The outputs of a [`keeps_batch`] op over an input whose batch alone is symbolic
/// (its other dims and every other operand static): the integer rule at the hints,
/// with the batch put back as the symbol in every output that carries it (the first,
/// and each other of rank 2 or more: pooling's indices, group norm's `[N, G]`
/// statistics; batch norm's saved statistics, `[0]`, carry none). Any other symbolic
/// size (an image's) is refused, saying so.
fn over_batch(op: &Op, args: &[SymArg]) -> Option<Result<Vec<TensorMeta>, InferError>> {
    let mut tensors = args.iter().filter_map(|a| match a {
        SymArg::Tensor(m) => Some(*m),
        SymArg::Scalar(_) => None,
    });
    let x = tensors.next()?;
    let (batch, rest) = x.shape.split_first()?;
    if rest.iter().any(|d| d.as_const().is_none()) || !tensors.all(TensorMeta::is_static) {
        return Some(Err(InferError::Invalid(format!(
            "an input of sizes {:?}: this op takes a symbolic batch (dim 0) only, its other \
             sizes and operands static; compile at one image size (--specialize)",
            x.shape
        ))));
    }
    if batch.as_const().is_some() {
        return None;
    }
    let fixed = match infer(op, &at_hints(args, &hinted(args))) {
        Ok(fixed) => fixed,
        Err(e) => return Some(Err(e)),
    };
    let outputs = fixed
        .into_iter()
        .enumerate()
        .map(|(i, f)| {
            let mut shape: Vec<Size> = f.shape.iter().map(|&d| Size::from(d)).collect();
            if i == 0 || f.rank() >= 2 {
                if f.shape.first() != Some(&batch.hint())
                    || f.strides != contiguous_strides(&f.shape)
                {
                    return Err(InferError::Invalid(format!(
                        "output {i} of the rule at the hints is {:?} (strides {:?}): not a \
                         contiguous tensor of the input's batch {}",
                        f.shape,
                        f.strides,
                        batch.hint()
                    )));
                }
                shape[0] = batch.clone();
            }
            Ok(TensorMeta {
                strides: contiguous_sizes(&shape),
                shape,
                dtype: f.dtype,
            })
        })
        .collect();
    Some(outputs)
}

/// Every tensor operand at its sizes' hints.
fn hinted(args: &[SymArg]) -> Vec<FixedMeta> {
    args.iter()
        .filter_map(|a| match a {
            SymArg::Tensor(m) => Some(FixedMeta {
                shape: m.hint_shape(),
                strides: m.hint_strides(),
                dtype: m.dtype,
            }),
            SymArg::Scalar(_) => None,
        })
        .collect()
}

/// The operands as the integer rule takes them, the tensors from `hinted`.
fn at_hints<'a>(args: &[SymArg], hinted: &'a [FixedMeta]) -> Vec<ArgMeta<'a>> {
    let mut tensors = hinted.iter();
    args.iter()
        .filter_map(|a| match a {
            SymArg::Tensor(_) => tensors.next().map(ArgMeta::Tensor),
            SymArg::Scalar(s) => Some(ArgMeta::Scalar(*s)),
        })
        .collect()
}

/// The integer rule at the hints gives the dtypes and checks the operands; its shapes
/// must be the symbolic ones there, and its outputs contiguous (a layout that follows an
/// operand's strides is not derived symbolically yet).
fn with_integer_rule(
    op: &Op,
    args: &[SymArg],
    shapes: Vec<Vec<Size>>,
) -> Result<Vec<TensorMeta>, InferError> {
    let hinted = hinted(args);
    let fixed = infer(op, &at_hints(args, &hinted))?;
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

/// A view's outputs: `graph::views` gives shapes and strides over the symbols.
fn view(op: &Op, args: &[SymArg], symbols: &Symbols) -> Result<Vec<TensorMeta>, InferError> {
    match args {
        [SymArg::Tensor(t)] => Ok(super::view_metas(op, t, symbols)?),
        _ => Err(InferError::Invalid(format!(
            "`{}` takes one tensor operand",
            op.name()
        ))),
    }
}

/// `arange` with a symbolic end: `ceil((end - start) / step)` elements for an integer
/// start and a positive integer step; the dtype is the integer rule's at the hints.
fn arange(op: &Op, args: &[SymArg], symbols: &Symbols) -> Result<Vec<TensorMeta>, InferError> {
    let Op::Arange {
        start: Scalar::Int(start),
        end: Bound::Size(end),
        step: Scalar::Int(step),
        ..
    } = op
    else {
        return Err(InferError::Invalid(
            "arange over a symbolic end takes an integer start and step".into(),
        ));
    };
    if *step <= 0 || !args.is_empty() {
        return Err(InferError::Invalid(
            "arange over a symbolic end takes a positive step and no operands".into(),
        ));
    }
    let hinted = infer(op, &[])?;
    let dtype = hinted
        .first()
        .map(|m| m.dtype)
        .ok_or_else(|| InferError::Invalid("arange gives one output".into()))?;
    let span = end
        .sub(&Size::from(*start))?
        .maximum(&Size::from(0), symbols)?;
    let len = span
        .add(&Size::from(step - 1))?
        .floor_div(&Size::from(*step), symbols)?;
    Ok(vec![TensorMeta::contiguous_sizes(vec![len], dtype)])
}

/// The shapes of `op`'s outputs over the symbols; `None` for an op no rule here covers.
fn output_shapes(
    op: &Op,
    args: &[SymArg],
    symbols: &Symbols,
) -> Option<Result<Vec<Vec<Size>>, InferError>> {
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
        Op::Unary(_) | Op::Gelu { .. } | Op::Cast { .. } | Op::Clamp { .. } | Op::TypeAs => {
            one(Ok(first.shape.clone()))
        }
        Op::Binary { .. } | Op::Where => one(broadcast_all(&tensors)),
        Op::Softmax { .. } | Op::Cumsum { .. } => one(Ok(first.shape.clone())),
        Op::LayerNorm { native: false, .. } | Op::RmsNorm { .. } => one(Ok(first.shape.clone())),
        Op::LayerNorm {
            native: true,
            normalized_shape,
            ..
        } => {
            let k = first.rank().checked_sub(normalized_shape.len())?;
            let mut stats = first.shape[..k].to_vec();
            stats.extend(std::iter::repeat_n(Size::from(1), normalized_shape.len()));
            Some(Ok(vec![first.shape.clone(), stats.clone(), stats]))
        }
        Op::Full { size, .. } => one(Ok(size.clone().unwrap_or_else(|| first.shape.clone()))),
        Op::Gather { .. } => one(Ok(tensors.get(1)?.shape.clone())),
        Op::SortRuns { .. } | Op::MergeRuns { .. } => one(Ok(first.shape.clone())),
        Op::Index { indexed, .. } => one(index(&first.shape, indexed, &tensors[1..])),
        Op::Diff { n, dim, .. } => one(diff(&tensors, *n, *dim, symbols)),
        Op::Attention { mask, gqa, .. } => one(attention(&tensors, *mask, *gqa)),
        Op::Cat { dim } => one(cat(&tensors, *dim)),
        Op::Reduce { dims, keepdim, .. } | Op::Var { dims, keepdim, .. } => {
            one(reduced(&first.shape, dims.as_deref(), *keepdim))
        }
        Op::Mm => one(product(&first.shape, &tensors.get(1)?.shape)),
        Op::GroupedMm => {
            let (a, b) = (&first.shape, &tensors.get(1)?.shape);
            (a.len() == 2 && b.len() == 3).then(|| Ok(vec![vec![a[0].clone(), b[2].clone()]]))
        }
        Op::Bmm => one(batched_product(&first.shape, &tensors.get(1)?.shape)),
        Op::Matmul => one(matmul(&first.shape, &tensors.get(1)?.shape)),
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

/// `bmm`: `[b, m, k]` by `[b, k, n]`, the batches and the `k`s equal for every value
/// of the symbols.
fn batched_product(a: &[Size], b: &[Size]) -> Result<Vec<Size>, InferError> {
    match (a, b) {
        ([batch, m, k], [batch2, k2, n]) if batch == batch2 && k == k2 => {
            Ok(vec![batch.clone(), m.clone(), n.clone()])
        }
        _ => Err(disagree("bmm needs [b, m, k] and [b, k, n]", a, b)),
    }
}

/// `torch.matmul`: a 1-D operand is a row (first) or a column (second) whose dim
/// the result drops; the dims before the last two broadcast.
fn matmul(a: &[Size], b: &[Size]) -> Result<Vec<Size>, InferError> {
    let (Some(k), Some(k2)) = (a.last(), b.get(b.len().saturating_sub(2))) else {
        return Err(disagree("matmul of a 0-d operand", a, b));
    };
    if k != k2 {
        return Err(disagree("matmul needs [.., k] and [.., k, n]", a, b));
    }
    let rows = &a[..a.len() - 1];
    match (a.len(), b.len()) {
        (1, 1) => Ok(vec![]),
        (_, 1) => Ok(rows.to_vec()),
        (1, _) => {
            let mut out = b[..b.len() - 2].to_vec();
            out.extend(b.last().cloned());
            Ok(out)
        }
        _ => {
            let mut out = broadcast_sizes(&a[..a.len() - 2], &b[..b.len() - 2])?;
            out.extend(rows.last().cloned());
            out.extend(b.last().cloned());
            Ok(out)
        }
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

/// `self[indices]`: the structure (where the index dims go) from the integer plan at
/// the hints, which depends only on the ranks; the sizes over the symbols.
fn index(
    shape: &[Size],
    indexed: &[bool],
    indices: &[&TensorMeta],
) -> Result<Vec<Size>, InferError> {
    let hinted: Vec<Vec<i64>> = indices.iter().map(|t| t.hint_shape()).collect();
    let refs: Vec<&[i64]> = hinted.iter().map(Vec::as_slice).collect();
    let self_hint: Vec<i64> = shape.iter().map(Size::hint).collect();
    let plan = super::model::index_plan(&self_hint, indexed, &refs)?;
    let index_shape = indices
        .iter()
        .try_fold(Vec::new(), |acc, t| broadcast_sizes(&acc, &t.shape))?;
    let mut k = 0;
    plan.out_dims
        .iter()
        .map(|o| match o {
            Some(d) => Ok(shape[*d].clone()),
            None => {
                k += 1;
                index_shape.get(k - 1).cloned().ok_or_else(|| {
                    InferError::Invalid("index: the index shapes' ranks differ".into())
                })
            }
        })
        .collect()
}

/// `diff(self, n, dim, prepend, append)`: dim `dim` grows by the extra operands' and
/// shrinks by `n` (to no less than 0).
fn diff(
    tensors: &[&TensorMeta],
    n: i64,
    dim: i64,
    symbols: &Symbols,
) -> Result<Vec<Size>, InferError> {
    let t = tensors[0];
    let d = wrap_dim(dim, t.rank())?;
    let mut shape = t.shape.clone();
    if n == 0 {
        return Ok(shape);
    }
    for p in &tensors[1..] {
        let along = p.shape.get(d).ok_or_else(|| {
            disagree(
                "diff: prepend/append must have self's number of dims",
                &p.shape,
                &t.shape,
            )
        })?;
        shape[d] = shape[d].add(along)?;
    }
    shape[d] = shape[d]
        .sub(&Size::from(n))?
        .maximum(&Size::from(0), symbols)?;
    Ok(shape)
}

/// `scaled_dot_product_attention(q, k, v[, mask])`: `[*batch, L, Ev]`, with the batch
/// dims of `q` and of `k` (and `v`, which must equal `k`'s) broadcast.
fn attention(tensors: &[&TensorMeta], mask: bool, gqa: bool) -> Result<Vec<Size>, InferError> {
    let (q, k, v) = match tensors {
        [q, k, v, ..] => (&q.shape, &k.shape, &v.shape),
        _ => return Err(InferError::Invalid("attention takes q, k and v".into())),
    };
    let split = |s: &[Size]| -> Result<(Vec<Size>, Size, Size), InferError> {
        match s {
            [batch @ .., a, b] => Ok((batch.to_vec(), a.clone(), b.clone())),
            _ => Err(InferError::Invalid(
                "attention needs operands of at least 2 dims".into(),
            )),
        }
    };
    let ((qb, l, e), (kb, s, ek), (vb, sv, ev)) = (split(q)?, split(k)?, split(v)?);
    if e != ek || s != sv || kb != vb {
        return Err(disagree("attention: q, k and v's sizes", q, k));
    }
    // Grouped heads (`enable_gqa`, checked by the integer rule): k's become q's.
    let mut kb = kb;
    if let (true, Some(h), true) = (gqa, qb.len().checked_sub(1), kb.len() == qb.len()) {
        kb[h] = qb[h].clone();
    }
    let mut out = broadcast_sizes(&qb, &kb)?;
    if mask {
        let m = &tensors
            .get(3)
            .ok_or_else(|| InferError::Invalid("attention's mask is missing".into()))?
            .shape;
        let mut scores = out.clone();
        scores.extend([l.clone(), s]);
        expands_to(m, scores)?;
    }
    out.extend([l, ev]);
    Ok(out)
}

/// `cat(tensors, dim)`: the sizes along `dim` added, the others equal (a tensor whose
/// only dim is the integer 0 is skipped, as PyTorch skips it).
fn cat(tensors: &[&TensorMeta], dim: i64) -> Result<Vec<Size>, InferError> {
    let parts: Vec<&TensorMeta> = tensors
        .iter()
        .copied()
        .filter(|t| !(t.rank() == 1 && t.shape[0] == 0))
        .collect();
    let Some(first) = parts.first() else {
        return Ok(tensors.first().map_or_else(Vec::new, |t| t.shape.clone()));
    };
    let d = wrap_dim(dim, first.rank())?;
    let mut shape = first.shape.clone();
    for t in &parts[1..] {
        let same =
            t.rank() == shape.len() && (0..shape.len()).all(|k| k == d || t.shape[k] == shape[k]);
        if !same {
            return Err(disagree(
                "cat: sizes outside the dim",
                &t.shape,
                &first.shape,
            ));
        }
        shape[d] = shape[d].add(&t.shape[d])?;
    }
    Ok(shape)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::DType;

    /// The ops of images over a symbolic batch: every output's shape over the symbol is
    /// the integer rule's at each batch, the batch in the outputs that carry it.
    #[test]
    fn image_ops_keep_a_symbolic_batch_as_the_integer_rules_do_at_each_batch() {
        let mut symbols = Symbols::default();
        let n = symbols.add("batch", 1, 64).unwrap();
        let batch = Size::symbol(n, &symbols);
        let image = |b: Size| {
            TensorMeta::contiguous_sizes(
                vec![b, Size::from(8), Size::from(15), Size::from(15)],
                DType::Float32,
            )
        };
        let vector = TensorMeta::contiguous(vec![8], DType::Float32);
        let weight = TensorMeta::contiguous(vec![4, 8, 3, 3], DType::Float32);
        let ops: Vec<(Op, Vec<&TensorMeta>)> = vec![
            (
                Op::Conv {
                    stride: vec![2, 2],
                    padding: vec![1, 1],
                    dilation: vec![1, 1],
                    groups: 1,
                    bias: false,
                },
                vec![&weight],
            ),
            (
                Op::BatchNorm {
                    eps: 1e-5,
                    weight: true,
                    bias: true,
                    native: true,
                },
                vec![&vector; 4],
            ),
            (
                Op::GroupNorm {
                    groups: 2,
                    eps: 1e-5,
                    weight: true,
                    bias: true,
                    native: true,
                },
                vec![&vector; 2],
            ),
            (
                Op::MaxPool {
                    kernel: vec![3, 3],
                    stride: vec![2, 2],
                    padding: vec![1, 1],
                    dilation: vec![1, 1],
                    ceil_mode: true,
                    with_indices: true,
                },
                vec![],
            ),
            (
                Op::AdaptiveAvgPool {
                    output_size: vec![4, 4],
                },
                vec![],
            ),
        ];
        let symbolic = image(batch.clone());
        for (op, rest) in &ops {
            let args: Vec<SymArg> = std::iter::once(&symbolic)
                .chain(rest.iter().copied())
                .map(SymArg::Tensor)
                .collect();
            let outs = infer_symbolic(op, &args, &symbols)
                .unwrap_or_else(|| panic!("{op:?}: no rule"))
                .unwrap_or_else(|e| panic!("{op:?}: {e}"));
            assert_eq!(outs[0].shape[0], batch, "{op:?}");
            for b in [1, 5, 64] {
                let x = FixedMeta::contiguous(vec![b, 8, 15, 15], DType::Float32);
                let fixed: Vec<FixedMeta> = rest.iter().map(|m| m.fixed().unwrap()).collect();
                let mut at = vec![ArgMeta::Tensor(&x)];
                at.extend(fixed.iter().map(ArgMeta::Tensor));
                let want = infer(op, &at).unwrap();
                assert_eq!(want.len(), outs.len(), "{op:?}");
                for (w, o) in want.iter().zip(&outs) {
                    let got: Vec<i64> = o.shape.iter().map(|d| d.eval(&|_| b).unwrap()).collect();
                    assert_eq!(got, w.shape, "{op:?} at batch {b}");
                }
            }
        }
        // An image size that varies is refused, saying what the op takes.
        let wide = TensorMeta::contiguous_sizes(
            vec![Size::from(2), Size::from(8), batch.clone(), Size::from(15)],
            DType::Float32,
        );
        let (conv, rest) = &ops[0];
        let args = [SymArg::Tensor(&wide), SymArg::Tensor(rest[0])];
        let err = infer_symbolic(conv, &args, &symbols).unwrap().unwrap_err();
        assert!(
            err.to_string().contains("symbolic batch (dim 0) only"),
            "{err}"
        );
    }
}
