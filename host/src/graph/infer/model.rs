//! Inference rules of the ops whole models bring: factories (`arange`, `full`), indexing
//! (`index`, `embedding`, `gather`), scans (`cumsum`, `diff`), attention, convolution,
//! batch norm and pooling. Same contract as `infer.rs`: PyTorch's shapes, dtypes and
//! error checks, and never a panic.

use super::{ArgMeta, InferError};
use crate::graph::dtype::{promote, DType};
use crate::graph::ir::{FixedMeta, Scalar};
use crate::graph::shape::{broadcast, numel, wrap_dim, Shape};

pub(super) fn invalid<T>(msg: impl Into<String>) -> Result<T, InferError> {
    Err(InferError::Invalid(msg.into()))
}

pub(super) fn tensor<'a>(args: &[ArgMeta<'a>], i: usize) -> Result<&'a FixedMeta, InferError> {
    match args.get(i) {
        Some(ArgMeta::Tensor(t)) => Ok(t),
        Some(ArgMeta::Scalar(s)) => invalid(format!(
            "operand {i} must be a tensor, found the number {s}"
        )),
        None => invalid(format!("missing operand {i}")),
    }
}

pub(super) fn count(args: &[ArgMeta], n: usize) -> Result<(), InferError> {
    if args.len() != n {
        return invalid(format!("expected {n} operands, found {}", args.len()));
    }
    Ok(())
}

pub(super) fn one(shape: Shape, dtype: DType) -> Result<Vec<FixedMeta>, InferError> {
    numel(&shape)?;
    Ok(vec![FixedMeta::contiguous(shape, dtype)])
}

fn is_index_dtype(d: DType) -> bool {
    matches!(d, DType::Int64 | DType::Int32)
}

/// The number of elements of `arange(start, end, step)`, as PyTorch computes it
/// (`ceil((end - start) / step)` in double precision).
pub fn arange_len(start: Scalar, end: Scalar, step: Scalar) -> Result<i64, InferError> {
    let (a, b, s) = (start.to_f64(), end.to_f64(), step.to_f64());
    if !(a.is_finite() && b.is_finite()) {
        return invalid("arange: start and end must be finite");
    }
    if s == 0.0 || !s.is_finite() {
        return invalid("arange: step must be finite and non-zero");
    }
    if (s > 0.0 && b < a) || (s < 0.0 && b > a) {
        return invalid(format!(
            "arange: upper bound and larger bound inconsistent with step sign (start {start}, end {end}, step {step})"
        ));
    }
    let n = ((b - a) / s).ceil();
    if n > i64::MAX as f64 / 2.0 {
        return invalid(format!("arange: {n} elements is too many"));
    }
    Ok(n.max(0.0) as i64)
}

/// `arange`'s dtype: the one given, else int64 when every bound is an integer, else the
/// default float dtype.
pub fn arange_dtype(start: Scalar, end: Scalar, step: Scalar, dtype: Option<DType>) -> DType {
    dtype.unwrap_or_else(|| {
        if [start, end, step]
            .iter()
            .all(|s| matches!(s, Scalar::Int(_) | Scalar::Bool(_)))
        {
            DType::Int64
        } else {
            DType::Float32
        }
    })
}

pub(super) fn arange(
    start: Scalar,
    end: Scalar,
    step: Scalar,
    dtype: Option<DType>,
    args: &[ArgMeta],
) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 0)?;
    let n = arange_len(start, end, step)?;
    let d = arange_dtype(start, end, step, dtype);
    if d == DType::Bool {
        return invalid("arange cannot produce bool");
    }
    one(vec![n], d)
}

pub(super) fn full(
    size: Option<&[i64]>,
    value: Scalar,
    dtype: Option<DType>,
    args: &[ArgMeta],
) -> Result<Vec<FixedMeta>, InferError> {
    let like = match args.len() {
        0 => None,
        1 => Some(tensor(args, 0)?),
        n => return invalid(format!("expected at most 1 operand, found {n}")),
    };
    let shape = match (size, like) {
        (Some(s), _) => s.to_vec(),
        (None, Some(t)) => t.shape.clone(),
        (None, None) => return invalid("full needs a size"),
    };
    if let Some(&d) = shape.iter().find(|&&d| d < 0) {
        return invalid(format!("full: negative size {d} in {shape:?}"));
    }
    let d = match (dtype, like) {
        (Some(d), _) => d,
        (None, Some(t)) => t.dtype,
        (None, None) => match value {
            Scalar::Bool(_) => DType::Bool,
            Scalar::Int(_) => DType::Int64,
            Scalar::Float(_) => DType::Float32,
        },
    };
    one(shape, d)
}

/// `index.Tensor`'s result shape: where the broadcast index shape goes and which dims of
/// `self` stay. Shared by inference, the interpreter and lowering.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexPlan {
    /// the dims of `self` that are indexed, in order, one per index operand
    pub indexed_dims: Vec<usize>,
    /// the broadcast shape of the index operands
    pub index_shape: Shape,
    /// where the index shape's dims start in the output
    pub index_at: usize,
    /// for each output dim: `Some(d)` when it is dim `d` of `self`, `None` when it is
    /// one of the index shape's dims
    pub out_dims: Vec<Option<usize>>,
    /// the output shape
    pub out_shape: Shape,
}

/// Plans `self[indices]` for `indexed` flags over `self`'s leading dims.
pub fn index_plan(
    self_shape: &[i64],
    indexed: &[bool],
    index_shapes: &[&[i64]],
) -> Result<IndexPlan, InferError> {
    let rank = self_shape.len();
    if indexed.len() > rank {
        return invalid(format!(
            "too many indices for a tensor of dimension {rank} ({} given)",
            indexed.len()
        ));
    }
    let indexed_dims: Vec<usize> = (0..indexed.len()).filter(|&d| indexed[d]).collect();
    if indexed_dims.is_empty() {
        return invalid("index needs at least one index tensor");
    }
    if indexed_dims.len() != index_shapes.len() {
        return invalid(format!(
            "{} index tensors for {} indexed dims",
            index_shapes.len(),
            indexed_dims.len()
        ));
    }
    let mut index_shape: Shape = vec![];
    for s in index_shapes {
        index_shape = broadcast(&index_shape, s).map_err(|_| InferError::Mismatch {
            what: "index: the index tensors do not broadcast together".into(),
            a: index_shape.clone(),
            b: s.to_vec(),
        })?;
    }
    for &d in &indexed_dims {
        if self_shape[d] == 0 && numel(&index_shape).unwrap_or(0) > 0 {
            return invalid(format!(
                "index: dim {d} of self has size 0, no index is in range"
            ));
        }
    }
    // Adjacent indexed dims put the index shape where they were; separated ones put it
    // first (NumPy's and PyTorch's rule).
    let first = indexed_dims[0];
    let last = *indexed_dims.last().unwrap_or(&first);
    let adjacent = last - first + 1 == indexed_dims.len();
    let index_at = if adjacent { first } else { 0 };
    let kept: Vec<usize> = (0..rank).filter(|d| !indexed_dims.contains(d)).collect();
    let mut out_dims: Vec<Option<usize>> = vec![];
    let (before, after): (Vec<usize>, Vec<usize>) = kept.iter().partition(|&&d| d < index_at);
    let before = if adjacent { before } else { vec![] };
    let after = if adjacent { after } else { kept.clone() };
    out_dims.extend(before.iter().map(|&d| Some(d)));
    out_dims.extend(std::iter::repeat_n(None, index_shape.len()));
    out_dims.extend(after.iter().map(|&d| Some(d)));
    let mut k = 0;
    let out_shape = out_dims
        .iter()
        .map(|o| match o {
            Some(d) => self_shape[*d],
            None => {
                k += 1;
                index_shape[k - 1]
            }
        })
        .collect();
    Ok(IndexPlan {
        indexed_dims,
        index_shape,
        index_at: before.len(),
        out_dims,
        out_shape,
    })
}

pub(super) fn index(indexed: &[bool], args: &[ArgMeta]) -> Result<Vec<FixedMeta>, InferError> {
    let t = tensor(args, 0)?;
    let mut shapes = vec![];
    for i in 1..args.len() {
        let ix = tensor(args, i)?;
        if ix.dtype == DType::Bool {
            return invalid(
                "index with a bool mask: the result's size depends on the data, which a static graph cannot have; use where()",
            );
        }
        if !is_index_dtype(ix.dtype) {
            return invalid(format!(
                "index tensors must be int64 or int32, found {}",
                ix.dtype
            ));
        }
        shapes.push(ix.shape.as_slice());
    }
    let plan = index_plan(&t.shape, indexed, &shapes)?;
    one(plan.out_shape, t.dtype)
}

pub(super) fn gather(dim: i64, args: &[ArgMeta]) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 2)?;
    let (t, ix) = (tensor(args, 0)?, tensor(args, 1)?);
    if !is_index_dtype(ix.dtype) {
        return invalid(format!(
            "gather's index must be int64 or int32, found {}",
            ix.dtype
        ));
    }
    let rank = t.rank().max(1);
    let d = wrap_dim(dim, rank)?;
    if ix.rank() != t.rank() && !(t.rank() == 0 && ix.rank() <= 1) {
        return invalid(format!(
            "gather: index has {} dims, self has {}: they must be equal",
            ix.rank(),
            t.rank()
        ));
    }
    for k in 0..t.rank() {
        if k != d && ix.shape[k] > t.shape[k] {
            return Err(InferError::Mismatch {
                what: format!("gather: index is larger than self in dim {k}"),
                a: ix.shape.clone(),
                b: t.shape.clone(),
            });
        }
    }
    one(ix.shape.clone(), t.dtype)
}

pub(super) fn index_copy(dim: i64, args: &[ArgMeta]) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 3)?;
    let (t, ix, src) = (tensor(args, 0)?, tensor(args, 1)?, tensor(args, 2)?);
    if ix.rank() > 1 || ix.dtype != DType::Int64 {
        return invalid(format!(
            "`index` must be an int64 tensor of at most 1 dim, found {}{:?}",
            ix.dtype, ix.shape
        ));
    }
    let d = wrap_dim(dim, t.rank())?;
    let mut want = t.shape.clone();
    want[d] = ix.numel();
    if src.dtype != t.dtype || src.shape != want {
        return invalid(format!(
            "`source` must be {}{want:?} (self's dtype and shape, {} along dim {d}), found {}{:?}",
            t.dtype,
            ix.numel(),
            src.dtype,
            src.shape
        ));
    }
    one(t.shape.clone(), t.dtype)
}

/// A run of Kiln's sort: a power of two.
fn check_run(run: i64) -> Result<(), InferError> {
    if run < 1 || run.count_ones() != 1 {
        return invalid(format!("`run` must be a power of two, found {run}"));
    }
    Ok(())
}

/// `sort_runs(x)`: the positions of each run's elements in order, int64 of `x`'s shape
/// (1 to 4 dims: the kernels take rows of up to three).
pub(super) fn sort_runs(run: i64, args: &[ArgMeta]) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 1)?;
    check_run(run)?;
    let x = tensor(args, 0)?;
    if !(1..=4).contains(&x.rank()) {
        return invalid(format!(
            "sorts the last dim of a tensor of 1 to 4 dims, found {:?}",
            x.shape
        ));
    }
    one(x.shape.clone(), DType::Int64)
}

/// `merge_runs(x, runs)`: `runs` int64 of `x`'s shape (1 to 4 dims); int64 of `x`'s
/// shape.
pub(super) fn merge_runs(run: i64, args: &[ArgMeta]) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 2)?;
    check_run(run)?;
    let (x, runs) = (tensor(args, 0)?, tensor(args, 1)?);
    if !(1..=4).contains(&x.rank()) || runs.shape != x.shape || runs.dtype != DType::Int64 {
        return invalid(format!(
            "merges int64 runs of the sorted tensor's shape {:?}, found {}{:?}",
            x.shape, runs.dtype, runs.shape
        ));
    }
    one(x.shape.clone(), DType::Int64)
}

/// `_grouped_mm(a, b, offs)`: `a` `[M, K]`, `b` `[G, K, N]` of `a`'s float dtype, `offs`
/// `[G]` int32; `[M, N]`.
pub(super) fn grouped_mm(args: &[ArgMeta]) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 3)?;
    let (a, b, offs) = (tensor(args, 0)?, tensor(args, 1)?, tensor(args, 2)?);
    let float = matches!(a.dtype, DType::Float32 | DType::Float16 | DType::BFloat16);
    if a.rank() != 2 || b.rank() != 3 || a.shape[1] != b.shape[1] || !float || b.dtype != a.dtype {
        return invalid(format!(
            "a 2-D [M, K] by a 3-D [G, K, N] of one of float32, float16 and bfloat16, found {}{:?} and {}{:?}",
            a.dtype, a.shape, b.dtype, b.shape
        ));
    }
    if offs.rank() != 1 || offs.dtype != DType::Int32 || offs.shape[0] != b.shape[0] {
        return invalid(format!(
            "`offs` must be int32 [{}] (one offset per group), found {}{:?}",
            b.shape[0], offs.dtype, offs.shape
        ));
    }
    one(vec![a.shape[0], b.shape[2]], a.dtype)
}

pub(super) fn cumsum(
    dim: i64,
    dtype: Option<DType>,
    args: &[ArgMeta],
) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 1)?;
    let t = tensor(args, 0)?;
    wrap_dim(dim, t.rank().max(1))?;
    let d = dtype.unwrap_or(if t.dtype.is_float() {
        t.dtype
    } else {
        DType::Int64
    });
    one(t.shape.clone(), d)
}

pub(super) fn diff(n: i64, dim: i64, args: &[ArgMeta]) -> Result<Vec<FixedMeta>, InferError> {
    let t = tensor(args, 0)?;
    if t.rank() == 0 {
        return invalid("diff needs at least one dim");
    }
    let d = wrap_dim(dim, t.rank())?;
    let mut shape = t.shape.clone();
    let mut dtype = t.dtype;
    for i in 1..args.len() {
        let p = tensor(args, i)?;
        let mut a = p.shape.clone();
        let mut b = t.shape.clone();
        if a.len() != b.len() {
            return Err(InferError::Mismatch {
                what: "diff: prepend/append must have self's number of dims".into(),
                a,
                b,
            });
        }
        shape[d] += a[d];
        a[d] = 0;
        b[d] = 0;
        if a != b {
            return Err(InferError::Mismatch {
                what: format!("diff: prepend/append differ from self outside dim {d}"),
                a: p.shape.clone(),
                b: t.shape.clone(),
            });
        }
        dtype = promote(dtype, p.dtype);
    }
    if n == 0 {
        // PyTorch checks prepend/append, then returns a copy of self without them.
        return one(t.shape.clone(), t.dtype);
    }
    shape[d] = (shape[d] - n).max(0);
    one(shape, dtype)
}

pub(super) fn attention(
    mask: bool,
    gqa: bool,
    args: &[ArgMeta],
) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 3 + mask as usize)?;
    let (q, k, v) = (tensor(args, 0)?, tensor(args, 1)?, tensor(args, 2)?);
    if q.rank() < 2 || k.rank() < 2 || v.rank() < 2 {
        return invalid("scaled_dot_product_attention needs q, k and v of at least 2 dims");
    }
    if !q.dtype.is_float() || q.dtype != k.dtype || q.dtype != v.dtype {
        return invalid(format!(
            "scaled_dot_product_attention needs q, k and v of one floating-point dtype, found {}, {}, {}",
            q.dtype, k.dtype, v.dtype
        ));
    }
    let (l, e) = (q.shape[q.rank() - 2], q.shape[q.rank() - 1]);
    let (s, ek) = (k.shape[k.rank() - 2], k.shape[k.rank() - 1]);
    let (sv, ev) = (v.shape[v.rank() - 2], v.shape[v.rank() - 1]);
    if e != ek || s != sv {
        return Err(InferError::Mismatch {
            what: "scaled_dot_product_attention: q's last dim must equal k's, and k and v must have one sequence length".into(),
            a: q.shape.clone(),
            b: k.shape.clone(),
        });
    }
    let qb = &q.shape[..q.rank() - 2];
    let mut kb = k.shape[..k.rank() - 2].to_vec();
    let vb = &v.shape[..v.rank() - 2];
    if kb != vb {
        return Err(InferError::Mismatch {
            what: "scaled_dot_product_attention: k and v batch dims differ".into(),
            a: k.shape.clone(),
            b: v.shape.clone(),
        });
    }
    if gqa && !qb.is_empty() && kb.len() == qb.len() {
        let h = qb.len() - 1;
        if kb[h] == 0 || qb[h] % kb[h] != 0 {
            return invalid(format!(
                "enable_gqa: {} query heads are not a multiple of {} key/value heads",
                qb[h], kb[h]
            ));
        }
        kb[h] = qb[h];
    }
    let batch = broadcast(qb, &kb).map_err(|_| InferError::Mismatch {
        what: "scaled_dot_product_attention: q and k batch dims do not broadcast".into(),
        a: q.shape.clone(),
        b: k.shape.clone(),
    })?;
    let mut out = batch.clone();
    out.extend([l, ev]);
    if mask {
        let m = tensor(args, 3)?;
        if m.rank() < 2 {
            // PyTorch reads the mask's last two dims (it fails on a 0-d or 1-d mask).
            return invalid(format!(
                "attn_mask needs at least 2 dims ([..., L, S]), found {}-d",
                m.rank()
            ));
        }
        if m.dtype != DType::Bool && m.dtype != q.dtype {
            return invalid(format!(
                "attn_mask must be bool or q's dtype {}, found {}",
                q.dtype, m.dtype
            ));
        }
        let mut scores = batch;
        scores.extend([l, s]);
        let b = broadcast(&scores, &m.shape).map_err(|_| InferError::Mismatch {
            what: "attn_mask does not broadcast to the scores [..., L, S]".into(),
            a: m.shape.clone(),
            b: scores.clone(),
        })?;
        if b != scores {
            return Err(InferError::Mismatch {
                what: "attn_mask does not broadcast to the scores [..., L, S]".into(),
                a: m.shape.clone(),
                b: scores,
            });
        }
    }
    one(out, q.dtype)
}

/// A convolution's output size along one spatial dim.
pub fn conv_out(input: i64, kernel: i64, stride: i64, pad: i64, dilation: i64) -> i64 {
    window_span(input, kernel, pad, dilation).div_euclid(stride.max(1)) + 1
}

/// `input + 2 pad - dilation (kernel - 1) - 1`, the room a window has to slide in,
/// saturating so that sizes read from a file can never overflow.
fn window_span(input: i64, kernel: i64, pad: i64, dilation: i64) -> i64 {
    input
        .saturating_add(pad.saturating_mul(2))
        .saturating_sub(dilation.saturating_mul(kernel.saturating_sub(1)))
        .saturating_sub(1)
}

pub(super) fn conv(
    stride: &[i64],
    padding: &[i64],
    dilation: &[i64],
    groups: i64,
    bias: bool,
    args: &[ArgMeta],
) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 2 + bias as usize)?;
    let (x, w) = (tensor(args, 0)?, tensor(args, 1)?);
    let spatial = w.rank().saturating_sub(2);
    if spatial == 0 || x.rank() != spatial + 2 {
        return invalid(format!(
            "convolution needs input [N, C, spatial...] and weight [O, C/groups, kernel...] of one rank (unbatched input: unsqueeze(0) first); found {:?} and {:?}",
            x.shape, w.shape
        ));
    }
    for (name, v) in [
        ("stride", stride),
        ("padding", padding),
        ("dilation", dilation),
    ] {
        if v.len() != spatial {
            return invalid(format!(
                "convolution: {name} {v:?} has {} entries for {spatial} spatial dims",
                v.len()
            ));
        }
    }
    if stride.iter().chain(dilation).any(|&s| s < 1) || padding.iter().any(|&p| p < 0) {
        return invalid(format!(
            "convolution: stride {stride:?} and dilation {dilation:?} must be positive, padding {padding:?} non-negative"
        ));
    }
    if !x.dtype.is_float() || x.dtype != w.dtype {
        return invalid(format!(
            "convolution needs input and weight of one floating-point dtype, found {} and {}",
            x.dtype, w.dtype
        ));
    }
    let (c, o) = (x.shape[1], w.shape[0]);
    if w.shape[1].checked_mul(groups) != Some(c) || o % groups != 0 {
        return Err(InferError::Mismatch {
            what: format!(
                "convolution with groups={groups}: weight [O, C/groups, ...] must have O divisible by groups and C/groups = input channels / groups"
            ),
            a: x.shape.clone(),
            b: w.shape.clone(),
        });
    }
    if bias {
        let b = tensor(args, 2)?;
        if b.shape != [o] {
            return Err(InferError::Mismatch {
                what: "convolution: bias must be [out_channels]".into(),
                a: b.shape.clone(),
                b: vec![o],
            });
        }
    }
    let mut out = vec![x.shape[0], o];
    for i in 0..spatial {
        let n = conv_out(
            x.shape[2 + i],
            w.shape[2 + i],
            stride[i],
            padding[i],
            dilation[i],
        );
        if n < 1 {
            return invalid(format!(
                "convolution: the kernel {:?} (dilation {dilation:?}) is larger than the padded input {:?}",
                &w.shape[2..],
                &x.shape[2..]
            ));
        }
        out.push(n);
    }
    one(out, x.dtype)
}

pub(super) fn batch_norm(
    weight: bool,
    bias: bool,
    native: bool,
    args: &[ArgMeta],
) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 3 + weight as usize + bias as usize)?;
    let x = tensor(args, 0)?;
    if x.rank() < 2 || !x.dtype.is_float() {
        return invalid(format!(
            "batch_norm needs a floating-point input [N, C, ...], found {}{:?}",
            x.dtype, x.shape
        ));
    }
    let c = x.shape[1];
    for i in 1..args.len() {
        let p = tensor(args, i)?;
        if p.shape != [c] {
            return Err(InferError::Mismatch {
                what: "batch_norm: weight, bias, running_mean and running_var must be [C]".into(),
                a: p.shape.clone(),
                b: vec![c],
            });
        }
    }
    let mut outs = one(x.shape.clone(), x.dtype)?;
    if native {
        let empty = FixedMeta::contiguous(vec![0], x.dtype);
        outs.push(empty.clone());
        outs.push(empty);
    }
    Ok(outs)
}

/// A pooling window's output size along one dim, with `ceil_mode` as PyTorch rounds it
/// (the last window must start inside the input or its left padding).
pub fn pool_out(input: i64, kernel: i64, stride: i64, pad: i64, dilation: i64, ceil: bool) -> i64 {
    let stride = stride.max(1);
    let span = window_span(input, kernel, pad, dilation);
    let mut n = if ceil {
        span.div_euclid(stride) + 1 + i64::from(span.rem_euclid(stride) != 0)
    } else {
        span.div_euclid(stride) + 1
    };
    if ceil && (n - 1).saturating_mul(stride) >= input.saturating_add(pad) {
        n -= 1;
    }
    n
}

/// The most kernel offsets of one pooled dim whose taps may reach the input (a window's
/// whole width in any real model's pool).
const MAX_TAPS: i64 = 1 << 16;

/// The kernel offsets of one pooled dim whose taps reach the input at some output
/// position, as the start of each one's strided slice of the input padded by `before`
/// and `after` (negative amounts cut): the other offsets read only padding, which adds
/// nothing to a sum and nothing to a maximum. A kernel far wider than its input (the
/// head of transformers' EfficientNet pools a 2 x 2 map with a 2560-wide one, in
/// `ceil_mode`) thus costs slices of the input only.
pub struct Taps {
    /// each live offset's slice start in the padded input
    pub starts: Vec<i64>,
    /// the padding before the input (negative: a cut)
    pub before: i64,
    /// the padding after it (negative: a cut)
    pub after: i64,
}

impl Taps {
    /// The taps of one dim: a window of `kernel` taps `dilation` apart, `out` windows
    /// `stride` apart over an input of `size` padded by `padding` on each side; an error
    /// where more than [`MAX_TAPS`] offsets may reach it.
    pub fn of(
        kernel: i64,
        stride: i64,
        dilation: i64,
        padding: i64,
        size: i64,
        out: i64,
    ) -> Result<Taps, String> {
        // Offset a's taps are the input coordinates a * dilation - padding + o * stride.
        let reaches = |a: i64| {
            let lo = a * dilation - padding;
            let hi = lo + (out - 1) * stride;
            let first = if lo >= 0 {
                lo
            } else {
                lo + (-lo + stride - 1) / stride * stride
            };
            first <= hi && first < size
        };
        // Only offsets from the first whose last tap is not before the input to the last
        // whose first tap is not past it can reach it: a bounded range, however wide the
        // kernel.
        let from = ((padding - (out - 1) * stride).max(0) + dilation - 1) / dilation;
        let to = ((padding + size - 1).max(-1) / dilation).min(kernel - 1);
        if to - from >= MAX_TAPS {
            return Err(format!(
                "a pooling window of {kernel} taps reaches {} of its input's positions along a dim: Kiln \
                 reads at most {MAX_TAPS} taps a dim",
                to - from + 1
            ));
        }
        let mut live: Vec<i64> = (from..=to).filter(|&a| reaches(a)).collect();
        if live.is_empty() {
            // Windows of padding alone: offset 0 reads it.
            live.push(0);
        }
        let first = live[0] * dilation - padding;
        let last = live[live.len() - 1] * dilation - padding + (out - 1) * stride;
        Ok(Taps {
            starts: live
                .iter()
                .map(|a| a * dilation - padding - first)
                .collect(),
            before: -first,
            after: last - (size - 1),
        })
    }

    /// Every combination of one start per dim, the last dim's varying fastest.
    pub fn product(dims: &[Taps]) -> Vec<Vec<i64>> {
        dims.iter().fold(vec![vec![]], |acc, t| {
            acc.iter()
                .flat_map(|p| {
                    t.starts.iter().map(move |&a| {
                        let mut q = p.clone();
                        q.push(a);
                        q
                    })
                })
                .collect()
        })
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn max_pool(
    kernel: &[i64],
    stride: &[i64],
    padding: &[i64],
    dilation: &[i64],
    ceil: bool,
    with_indices: bool,
    args: &[ArgMeta],
) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 1)?;
    let x = tensor(args, 0)?;
    if !(3..=4).contains(&x.rank()) {
        return invalid(format!(
            "max_pool2d needs [N, C, H, W] or [C, H, W], found {:?}",
            x.shape
        ));
    }
    for (name, v) in [
        ("kernel_size", kernel),
        ("stride", stride),
        ("padding", padding),
        ("dilation", dilation),
    ] {
        if v.len() != 2 {
            return invalid(format!("max_pool2d: {name} {v:?} must have 2 entries"));
        }
    }
    if kernel.iter().chain(stride).chain(dilation).any(|&k| k < 1) {
        return invalid("max_pool2d: kernel_size, stride and dilation must be positive");
    }
    if (0..2).any(|i| padding[i] < 0 || padding[i] * 2 > kernel[i]) {
        return invalid(format!(
            "max_pool2d: padding {padding:?} must be at most half of kernel_size {kernel:?}"
        ));
    }
    let r = x.rank();
    let mut shape = x.shape.clone();
    for i in 0..2 {
        let n = pool_out(
            x.shape[r - 2 + i],
            kernel[i],
            stride[i],
            padding[i],
            dilation[i],
            ceil,
        );
        if n < 1 {
            return invalid(format!(
                "max_pool2d: output size {n} is too small for input {:?}",
                x.shape
            ));
        }
        shape[r - 2 + i] = n;
    }
    let mut outs = one(shape.clone(), x.dtype)?;
    if with_indices {
        outs.push(FixedMeta::contiguous(shape, DType::Int64));
    }
    Ok(outs)
}

pub(super) fn adaptive_avg_pool(
    output_size: &[i64],
    args: &[ArgMeta],
) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 1)?;
    let x = tensor(args, 0)?;
    let k = output_size.len();
    let op = match k {
        1 => "adaptive_avg_pool1d",
        3 => "adaptive_avg_pool3d",
        _ => "adaptive_avg_pool2d",
    };
    if !(1..=3).contains(&k) || !(k + 1..=k + 2).contains(&x.rank()) {
        return invalid(format!(
            "{op} needs {k} spatial dims after a channel dim (and an optional batch dim), found {:?} and output size {output_size:?}",
            x.shape
        ));
    }
    if output_size.iter().any(|&s| s < 0) || !x.dtype.is_float() {
        return invalid(format!(
            "{op} needs non-negative output sizes and a float input"
        ));
    }
    let r = x.rank();
    if x.shape[r - k..].contains(&0) {
        return invalid(format!("{op} of an empty input"));
    }
    let mut shape = x.shape.clone();
    shape[r - k..].copy_from_slice(output_size);
    one(shape, x.dtype)
}

/// `group_norm`: `[N, C, ...]` normalised over each group of `C / groups` channels.
pub(super) fn group_norm(
    groups: i64,
    weight: bool,
    bias: bool,
    native: bool,
    args: &[ArgMeta],
) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 1 + weight as usize + bias as usize)?;
    let x = tensor(args, 0)?;
    if x.rank() < 2 || !x.dtype.is_float() {
        return invalid(format!(
            "group_norm needs a floating-point input [N, C, ...], found {} {:?}",
            x.dtype, x.shape
        ));
    }
    let c = x.shape[1];
    if groups < 1 || c % groups != 0 {
        return invalid(format!(
            "group_norm: {c} channels do not split into {groups} groups"
        ));
    }
    for i in 1..args.len() {
        let p = tensor(args, i)?;
        if p.shape != [c] {
            return invalid(format!(
                "group_norm: weight and bias must be [{c}], found {:?}",
                p.shape
            ));
        }
    }
    let mut outs = one(x.shape.clone(), x.dtype)?;
    if native {
        for _ in 0..2 {
            outs.push(FixedMeta::contiguous(vec![x.shape[0], groups], x.dtype));
        }
    }
    Ok(outs)
}

/// `avg_pool1d/2d`: windows without dilation over the last `kernel.len()` dims.
pub(super) fn avg_pool(
    kernel: &[i64],
    stride: &[i64],
    padding: &[i64],
    ceil: bool,
    args: &[ArgMeta],
) -> Result<Vec<FixedMeta>, InferError> {
    count(args, 1)?;
    let x = tensor(args, 0)?;
    let k = kernel.len();
    let op = if k == 1 { "avg_pool1d" } else { "avg_pool2d" };
    if !(1..=2).contains(&k) || !(k + 1..=k + 2).contains(&x.rank()) {
        return invalid(format!(
            "{op} needs {k} spatial dims after a channel dim (and an optional batch dim), found {:?}",
            x.shape
        ));
    }
    if stride.len() != k || padding.len() != k {
        return invalid(format!(
            "{op}: stride {stride:?} and padding {padding:?} must have {k} entries"
        ));
    }
    if kernel.iter().chain(stride).any(|&v| v < 1) {
        return invalid(format!("{op}: kernel_size and stride must be positive"));
    }
    if (0..k).any(|i| padding[i] < 0 || padding[i] * 2 > kernel[i]) {
        return invalid(format!(
            "{op}: padding {padding:?} must be at most half of kernel_size {kernel:?}"
        ));
    }
    if !x.dtype.is_float() {
        return invalid(format!(
            "{op} needs a floating-point input, found {}",
            x.dtype
        ));
    }
    let r = x.rank();
    let mut shape = x.shape.clone();
    for i in 0..k {
        let n = pool_out(
            x.shape[r - k + i],
            kernel[i],
            stride[i],
            padding[i],
            1,
            ceil,
        );
        if n < 1 {
            return invalid(format!(
                "{op}: output size {n} is too small for input {:?}",
                x.shape
            ));
        }
        shape[r - k + i] = n;
    }
    one(shape, x.dtype)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_sizes_follow_pytorch_and_never_overflow() {
        // conv2d 7x7 stride 2 pad 3 on 224: 112; max_pool 3x3 stride 2 pad 1 on 112: 56.
        assert_eq!(conv_out(224, 7, 2, 3, 1), 112);
        assert_eq!(pool_out(112, 3, 2, 1, 1, false), 56);
        // ceil_mode rounds up, but the last window must start inside the input.
        assert_eq!(pool_out(5, 2, 2, 0, 1, true), 3);
        assert_eq!(pool_out(4, 2, 2, 0, 1, true), 2);
        // Sizes from a file that would overflow give a nonsense size, never a panic.
        let _ = conv_out(i64::MAX, i64::MAX, 1, i64::MAX, i64::MAX);
        let _ = pool_out(i64::MAX, 2, i64::MAX, i64::MAX, 1, true);
    }

    #[test]
    fn advanced_indexing_places_the_index_shape_like_numpy() {
        // Adjacent indexed dims: the index shape replaces them in place.
        let p = index_plan(&[5, 6, 7], &[false, true], &[&[2, 3]]).unwrap();
        assert_eq!(p.out_shape, [5, 2, 3, 7]);
        // Separated indexed dims: the index shape comes first.
        let p = index_plan(&[5, 6, 7], &[true, false, true], &[&[4], &[1]]).unwrap();
        assert_eq!(p.out_shape, [4, 6]);
        assert!(index_plan(&[5], &[true, true], &[&[1], &[1]]).is_err());
        assert!(index_plan(&[5, 6], &[true, true], &[&[2], &[3]]).is_err());
    }
}
