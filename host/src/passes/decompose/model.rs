//! Decompositions of the model ops into the primitives every device has: `cumsum` as a
//! masked sum, `diff` as slices, attention as matrix products around a softmax, batch
//! norm as a per-channel scale and shift (which `fold_bn` moves into a preceding
//! convolution), max pooling as a maximum over strided slices of the padded input, and
//! adaptive average pooling as products with constant averaging matrices. Each agrees
//! with the interpreter's direct rule for the op (`interp::model`).

use super::B;
use crate::graph::infer::model::Taps;
use crate::graph::sym::Size;
use crate::graph::{
    Arg, BinaryOp, ConstData, DType, FixedMeta, Graph, Node, NodeId, Op, ReduceOp, Scalar, UnaryOp,
    ValueId,
};
use crate::interp::model::adaptive_window;
use crate::passes::Error;
use std::sync::Arc;

/// The most elements of a constant mask a decomposition builds (`cumsum`'s triangle,
/// the causal mask): 16 M, 128 MiB of float64 at compile time.
const MAX_MASK_ELEMENTS: i64 = 1 << 24;

fn mask_size(b: &B, rows: i64, cols: i64, what: &str) -> Result<(), Error> {
    match rows.checked_mul(cols) {
        Some(n) if n <= MAX_MASK_ELEMENTS => Ok(()),
        _ => Err(Error::Unsupported {
            node: b.base.clone(),
            what: format!(
                "{what} over {rows} x {cols} positions needs a mask larger than Kiln builds ({MAX_MASK_ELEMENTS} elements)"
            ),
        }),
    }
}

/// `[C, 1, ...]`: a per-channel vector shaped to broadcast over `[N, C, spatial...]`.
pub(super) fn per_channel(b: &mut B, v: ValueId, out_rank: usize) -> Result<ValueId, Error> {
    let mut shape = vec![b.shape(v).first().copied().unwrap_or(1)];
    shape.extend(std::iter::repeat_n(1, out_rank.saturating_sub(2)));
    b.reshape(v, shape)
}

impl B<'_> {
    /// A constant of `shape` and `dtype` with row-major `values`.
    pub(super) fn constant(&mut self, shape: Vec<i64>, dtype: DType, values: Vec<f64>) -> ValueId {
        let name = self.g.fresh_name(&self.base);
        let values: Vec<f64> = values.into_iter().map(|v| dtype.round(v)).collect();
        let id = self.g.add_node(Node {
            name,
            op: Op::Constant {
                data: ConstData::Values(Arc::from(values)),
            },
            args: vec![],
            outputs: vec![FixedMeta::contiguous(shape, dtype).into()],
            line: self.line,
        });
        ValueId::first(id)
    }

    pub(super) fn shape(&self, v: ValueId) -> Vec<i64> {
        self.g
            .fixed_meta(v)
            .map(|m| m.shape.clone())
            .unwrap_or_default()
    }

    /// `v`'s sizes as the graph has them (integers, or expressions over symbols).
    pub(super) fn sizes(&self, v: ValueId) -> Vec<Size> {
        self.g.meta(v).map(|m| m.shape.clone()).unwrap_or_default()
    }

    /// The size of dim `d` of `v`, which a rule needs as an integer: a symbolic one
    /// (only a batch is taken so far by the rules that call this) is refused by name.
    pub(super) fn dim(&self, v: ValueId, d: usize) -> Result<i64, Error> {
        let sizes = self.sizes(v);
        sizes
            .get(d)
            .and_then(Size::as_const)
            .ok_or_else(|| Error::Unsupported {
                node: self.base.clone(),
                what: format!(
                    "dim {d} of an operand of sizes {sizes:?} is symbolic, and this op takes a \
                 symbolic batch only; compile at one size (--specialize)"
                ),
            })
    }

    /// A tensor of `shape` (sizes that may be symbolic) filled with `value`.
    pub(super) fn full(
        &mut self,
        shape: Vec<Size>,
        value: f64,
        dtype: DType,
    ) -> Result<ValueId, Error> {
        self.op(
            Op::Full {
                size: Some(shape),
                value: Scalar::Float(value),
                dtype: Some(dtype),
            },
            vec![],
        )
    }

    pub(super) fn slice(
        &mut self,
        x: ValueId,
        dim: i64,
        start: i64,
        end: i64,
        step: i64,
    ) -> Result<ValueId, Error> {
        self.op(
            Op::Slice {
                dim,
                start: Some(crate::graph::sym::Size::from(start)),
                end: Some(crate::graph::sym::Size::from(end)),
                step,
            },
            vec![Arg::Value(x)],
        )
    }

    pub(super) fn reshape(&mut self, x: ValueId, shape: Vec<i64>) -> Result<ValueId, Error> {
        self.reshape_sizes(x, crate::graph::shape::sizes(&shape))
    }

    /// `x` reshaped to `shape` (sizes that may be symbolic).
    pub(super) fn reshape_sizes(&mut self, x: ValueId, shape: Vec<Size>) -> Result<ValueId, Error> {
        self.op(Op::Reshape { shape, view: false }, vec![Arg::Value(x)])
    }
}

/// The fewest rows of a `_grouped_mm` that Kiln's kernel takes: one tile of `tl.dot`
/// rows. Fewer (a decoding step's tokens times their experts) are a reduction over K
/// per row ([`grouped_mm`]), which reads only the experts those rows chose.
pub const GROUPED_MM_KERNEL_ROWS: i64 = 16;

/// Whether node `id` is a `_grouped_mm` that stays whole for a target with the kernel:
/// of static sizes, and at least [`GROUPED_MM_KERNEL_ROWS`] rows.
pub fn grouped_mm_kept(g: &Graph, id: NodeId) -> bool {
    let Some(node) = g.node(id) else {
        return false;
    };
    if !matches!(node.op, Op::GroupedMm) {
        return false;
    }
    let fixed = |a: &Arg| a.value().and_then(|v| g.fixed_meta(v));
    let operands: Option<Vec<FixedMeta>> = node.args.iter().map(fixed).collect();
    operands.is_some_and(|ms| {
        ms.first()
            .is_some_and(|a| a.shape[0] >= GROUPED_MM_KERNEL_ROWS)
    })
}

/// `_grouped_mm(a, b, offs)` (`a` `[M, K]`, `b` `[G, K, N]`): row m's group g is the
/// number of offsets at or below m, and its result the sum over K of `a[m, k] *
/// b[g, k, n]` in float32, which the scheduler computes in one reduction kernel reading
/// `b[g]` through the index in place; rows past the last offset are zero.
pub(super) fn grouped_mm(b: &mut B, args: &[Arg], out: &FixedMeta) -> Result<ValueId, Error> {
    let operand = |i: usize| -> Result<ValueId, Error> {
        args.get(i)
            .and_then(Arg::value)
            .ok_or_else(|| Error::Unsupported {
                node: String::new(),
                what: format!("_grouped_mm without operand {i}"),
            })
    };
    let (a, w, offs) = (operand(0)?, operand(1)?, operand(2)?);
    // The rows may be symbolic (a prompt of any length); the groups are not.
    let rows = b.sizes(a).first().cloned().unwrap_or(Size::from(0));
    let groups = b.dim(w, 0)?;
    let end = match rows.as_const() {
        Some(m) => crate::graph::Bound::Scalar(Scalar::Int(m)),
        None => crate::graph::Bound::Size(rows),
    };
    let at = b.op(
        Op::Arange {
            start: Scalar::Int(0),
            end,
            step: Scalar::Int(1),
            dtype: Some(DType::Int64),
        },
        vec![],
    )?;
    let at = b.op(Op::Unsqueeze { dim: 1 }, vec![Arg::Value(at)])?; // [M, 1]
    let ends = b.op(
        Op::Cast {
            dtype: DType::Int64,
        },
        vec![Arg::Value(offs)],
    )?;
    let ends = b.reshape(ends, vec![1, groups])?;
    let passed = b.op(
        Op::Binary {
            op: BinaryOp::Le,
            alpha: None,
        },
        vec![Arg::Value(ends), Arg::Value(at)],
    )?;
    let group = b.op(
        Op::Reduce {
            op: ReduceOp::Sum,
            dims: Some(vec![1]),
            keepdim: false,
            dtype: Some(DType::Int64),
        },
        vec![Arg::Value(passed)],
    )?;
    let kept = b.op(
        Op::Binary {
            op: BinaryOp::Lt,
            alpha: None,
        },
        vec![Arg::Value(group), Arg::Scalar(Scalar::Int(groups))],
    )?;
    let group = b.op(
        Op::Clamp {
            min: None,
            max: Some(Scalar::Int(groups - 1)),
        },
        vec![Arg::Value(group)],
    )?;
    let picked = b.op(
        Op::Index {
            indexed: vec![true],
            nonnegative: false,
        },
        vec![Arg::Value(w), Arg::Value(group)],
    )?; // [M, K, N]
    let rows = b.op(Op::Unsqueeze { dim: 2 }, vec![Arg::Value(a)])?; // [M, K, 1]
    let f32 = |b: &mut B, v| {
        b.op(
            Op::Cast {
                dtype: DType::Float32,
            },
            vec![Arg::Value(v)],
        )
    };
    let (rows, picked) = (f32(b, rows)?, f32(b, picked)?);
    let products = b.op(
        Op::Binary {
            op: BinaryOp::Mul,
            alpha: None,
        },
        vec![Arg::Value(rows), Arg::Value(picked)],
    )?;
    let sum = b.op(
        Op::Reduce {
            op: ReduceOp::Sum,
            dims: Some(vec![1]),
            keepdim: false,
            dtype: None,
        },
        vec![Arg::Value(products)],
    )?;
    let kept = b.op(Op::Unsqueeze { dim: 1 }, vec![Arg::Value(kept)])?;
    let y = b.op(
        Op::Where,
        vec![
            Arg::Value(kept),
            Arg::Value(sum),
            Arg::Scalar(Scalar::Float(0.0)),
        ],
    )?;
    b.op(Op::Cast { dtype: out.dtype }, vec![Arg::Value(y)])
}

/// `cumsum(x, dim)`: `y[.., i, ..] = sum_j x[.., j, ..] * (j <= i)`, a reduction over a
/// broadcast of `x` against a constant lower-triangular mask. Exact for integers (the
/// sum is in int64); for floats it adds in another order than a sequential scan.
pub(super) fn cumsum(b: &mut B, x: ValueId, dim: i64, out: &FixedMeta) -> Result<ValueId, Error> {
    let xc = b.cast(x, out.dtype)?;
    let sizes = b.sizes(x);
    if sizes.is_empty() {
        return Ok(xc);
    }
    let rank = sizes.len() as i64;
    let d = dim.rem_euclid(rank);
    let tri = match sizes[d as usize].as_const() {
        Some(n) => {
            mask_size(b, n, n, "cumsum")?;
            // tri[i, j] = j <= i, shaped [n, n, 1, ...] to broadcast over the dims after d.
            let mut tri = Vec::with_capacity((n * n) as usize);
            for i in 0..n {
                for j in 0..n {
                    tri.push(f64::from(u8::from(j <= i)));
                }
            }
            let mut tri_shape = vec![n, n];
            tri_shape.extend(std::iter::repeat_n(1, (rank - 1 - d) as usize));
            b.constant(tri_shape, DType::Bool, tri)
        }
        // Of a symbolic length: the same mask from two positions, `arange(n)`.
        None => {
            let at = b.op(
                Op::Arange {
                    start: Scalar::Int(0),
                    end: crate::graph::Bound::Size(sizes[d as usize].clone()),
                    step: Scalar::Int(1),
                    dtype: Some(DType::Int64),
                },
                vec![],
            )?;
            let i = b.op(Op::Unsqueeze { dim: 1 }, vec![Arg::Value(at)])?;
            let j = b.op(Op::Unsqueeze { dim: 0 }, vec![Arg::Value(at)])?;
            let mut tri = b.vv(crate::graph::ops::BinaryOp::Le, j, i)?;
            for _ in 0..rank - 1 - d {
                tri = b.op(Op::Unsqueeze { dim: -1 }, vec![Arg::Value(tri)])?;
            }
            tri
        }
    };
    let xu = b.op(Op::Unsqueeze { dim: d }, vec![Arg::Value(xc)])?;
    let masked = b.op(
        Op::Where,
        vec![Arg::Value(tri), Arg::Value(xu), Arg::Scalar(Scalar::Int(0))],
    )?;
    b.op(
        Op::Reduce {
            op: ReduceOp::Sum,
            dims: Some(vec![d + 1]),
            keepdim: false,
            dtype: Some(out.dtype),
        },
        vec![Arg::Value(masked)],
    )
}

/// `diff`: the parts concatenated along `dim`, then `n` times `x[1:] - x[:-1]` (`!=` for
/// bools).
pub(super) fn diff(
    b: &mut B,
    x: ValueId,
    prepend: Option<ValueId>,
    append: Option<ValueId>,
    n: i64,
    dim: i64,
    out: &FixedMeta,
) -> Result<ValueId, Error> {
    // n = 0 is a copy of self: prepend and append are only checked.
    let (prepend, append) = if n == 0 {
        (None, None)
    } else {
        (prepend, append)
    };
    let parts: Vec<Arg> = prepend
        .into_iter()
        .chain([x])
        .chain(append)
        .map(Arg::Value)
        .collect();
    let mut c = if parts.len() > 1 {
        b.op(Op::Cat { dim }, parts)?
    } else {
        x
    };
    let op = if out.dtype == DType::Bool {
        BinaryOp::Ne
    } else {
        BinaryOp::Sub
    };
    for _ in 0..n {
        let sizes = b.sizes(c);
        let d = dim.rem_euclid(sizes.len() as i64) as usize;
        if sizes[d] == 0 {
            break;
        }
        let (hi, lo) = match sizes[d].as_const() {
            Some(len) => (
                b.slice(c, d as i64, 1, len, 1)?,
                b.slice(c, d as i64, 0, len - 1, 1)?,
            ),
            // Of a symbolic length: `x[1:]` and `x[:-1]`.
            None => {
                let part = |start: i64, end: Option<i64>| Op::Slice {
                    dim: d as i64,
                    start: Some(Size::from(start)),
                    end: end.map(Size::from),
                    step: 1,
                };
                (
                    b.op(part(1, None), vec![Arg::Value(c)])?,
                    b.op(part(0, Some(-1)), vec![Arg::Value(c)])?,
                )
            }
        };
        c = b.vv(op, hi, lo)?;
    }
    b.cast(c, out.dtype)
}

/// `scaled_dot_product_attention`: `softmax(q kᵀ · scale + mask) v`, in float32 at
/// least; masked-out scores are `-inf` (a row with every score masked gives NaN, as
/// PyTorch's math path does). With GQA each key/value head is repeated for its group.
#[allow(clippy::too_many_arguments)]
pub(super) fn attention(
    b: &mut B,
    q: ValueId,
    k: ValueId,
    v: ValueId,
    mask: Option<ValueId>,
    causal: bool,
    scale: Option<f64>,
    gqa: bool,
    out: &crate::graph::TensorMeta,
) -> Result<Option<ValueId>, Error> {
    let (qs, ks) = (b.sizes(q), b.sizes(k));
    let (Some([l, e]), Some(s)) = (qs.last_chunk::<2>(), ks.iter().rev().nth(1)) else {
        return Ok(None);
    };
    let (l, s) = (l.clone(), s.clone());
    // The default scale reads the head size: an integer in every model.
    let scale = match (scale, e.as_const()) {
        (Some(scale), _) => scale,
        (None, Some(e)) => 1.0 / (e as f64).sqrt(),
        (None, None) => return Ok(None),
    };
    let (mut k, mut v) = (b.upcast(k)?, b.upcast(v)?);
    let q = b.upcast(q)?;
    if gqa && qs.len() >= 3 && ks.len() == qs.len() {
        let h = qs.len() - 3;
        let (Some(hq), Some(hk)) = (qs[h].as_const(), ks[h].as_const()) else {
            return Ok(None);
        };
        if hk != hq && hk > 0 {
            let group = hq / hk;
            let repeat = |b: &mut B, t: ValueId| -> Result<ValueId, Error> {
                let mut shape = b.sizes(t);
                let u = b.op(Op::Unsqueeze { dim: h as i64 + 1 }, vec![Arg::Value(t)])?;
                let mut wide = shape.clone();
                wide.insert(h + 1, Size::from(group));
                let ex = b.op(Op::Expand { sizes: wide }, vec![Arg::Value(u)])?;
                shape[h] = Size::from(hq);
                b.op(Op::Reshape { shape, view: false }, vec![Arg::Value(ex)])
            };
            k = repeat(b, k)?;
            v = repeat(b, v)?;
        }
    }
    let kt = b.op(Op::Transpose { dim0: -2, dim1: -1 }, vec![Arg::Value(k)])?;
    let scores = b.matmul(q, kt)?;
    let mut scores = b.vs(BinaryOp::Mul, scores, scale)?;
    if causal {
        let keep = causal_mask(b, &l, &s)?;
        scores = b.op(
            Op::Where,
            vec![
                Arg::Value(keep),
                Arg::Value(scores),
                Arg::Scalar(Scalar::Float(f64::NEG_INFINITY)),
            ],
        )?;
    }
    if let Some(m) = mask {
        if b.dtype(m) == DType::Bool {
            scores = b.op(
                Op::Where,
                vec![
                    Arg::Value(m),
                    Arg::Value(scores),
                    Arg::Scalar(Scalar::Float(f64::NEG_INFINITY)),
                ],
            )?;
        } else {
            let mc = b.upcast(m)?;
            scores = b.vv(BinaryOp::Add, scores, mc)?;
        }
    }
    let mx = b.reduce(ReduceOp::Amax, scores, &[-1])?;
    let sh = b.vv(BinaryOp::Sub, scores, mx)?;
    let ex = b.un(UnaryOp::Exp, sh)?;
    let z = b.reduce(ReduceOp::Sum, ex, &[-1])?;
    let mut p = b.vv(BinaryOp::Div, ex, z)?;
    if mask.is_some() {
        // A row whose keys are all masked out is zeros, as PyTorch's `_safe_softmax`
        // makes it (softmax's 0 / 0 would be NaN). A causal mask alone never masks a
        // whole row: key 0 is kept for every query.
        let kept = b.vs(BinaryOp::Ne, mx, f64::NEG_INFINITY)?;
        p = b.op(
            Op::Where,
            vec![
                Arg::Value(kept),
                Arg::Value(p),
                Arg::Scalar(Scalar::Float(0.0)),
            ],
        )?;
    }
    let y = b.matmul(p, v)?;
    let y = if b.sizes(y) != out.shape {
        b.op(
            Op::Expand {
                sizes: out.shape.clone(),
            },
            vec![Arg::Value(y)],
        )?
    } else {
        y
    };
    b.cast(y, out.dtype).map(Some)
}

/// The mask of causal attention, `[L, S]`: key `j` is kept for query `i` where
/// `j <= i` (the top-left lower triangle, as PyTorch's `is_causal`). A constant
/// at integer sizes; of symbolic ones, built from two `arange`s.
fn causal_mask(b: &mut B, l: &Size, s: &Size) -> Result<ValueId, Error> {
    if let (Some(l), Some(s)) = (l.as_const(), s.as_const()) {
        mask_size(b, l, s, "causal attention")?;
        let tril: Vec<f64> = (0..l)
            .flat_map(|i| (0..s).map(move |j| f64::from(u8::from(j <= i))))
            .collect();
        return Ok(b.constant(vec![l, s], DType::Bool, tril));
    }
    let positions = |b: &mut B, n: &Size| {
        b.op(
            Op::Arange {
                start: Scalar::Int(0),
                end: crate::graph::Bound::Size(n.clone()),
                step: Scalar::Int(1),
                dtype: Some(DType::Int64),
            },
            vec![],
        )
    };
    let (qi, kj) = (positions(b, l)?, positions(b, s)?);
    let i = b.op(Op::Unsqueeze { dim: 1 }, vec![Arg::Value(qi)])?;
    let j = b.op(Op::Unsqueeze { dim: 0 }, vec![Arg::Value(kj)])?;
    b.vv(BinaryOp::Le, j, i)
}

/// Whether node `id` is an attention the fused kernel of a Triton target
/// computes as it stands (`ExternOp::Attention`): query, key and value of rank
/// 3 (`[N, L, E]`) or 4 (`[B, H, L, E]`) in one floating dtype of 16 or 32
/// bits, head sizes up to 256, key/value batch and head dims equal to the
/// query's or 1 (or, with `enable_gqa`, heads dividing the query's), a mask (bool
/// or floating) that broadcasts to `[B, H, L, S]`, and a result of the query's
/// dtype and shape `[..., L, Ev]`. Anything else is decomposed.
pub fn fusable_attention(g: &crate::graph::Graph, id: crate::graph::NodeId) -> bool {
    let Some(node) = g.node(id) else {
        return false;
    };
    let Op::Attention { mask, gqa, .. } = node.op else {
        return false;
    };
    // Sizes may be symbolic: the head sizes must be integers; the others compare as
    // expressions.
    let meta = |i: usize| {
        node.args
            .get(i)
            .and_then(Arg::value)
            .and_then(|v| g.meta(v))
    };
    let out = node.outputs.first();
    let (Some(q), Some(k), Some(v), Some(out)) = (meta(0), meta(1), meta(2), out) else {
        return false;
    };
    let rank = q.shape.len();
    let float = |d: DType| matches!(d, DType::Float16 | DType::BFloat16 | DType::Float32);
    if !(rank == 3 || rank == 4)
        || k.shape.len() != rank
        || v.shape.len() != rank
        || !float(q.dtype)
        || k.dtype != q.dtype
        || v.dtype != q.dtype
        || out.dtype != q.dtype
    {
        return false;
    }
    let (l, e) = (&q.shape[rank - 2], &q.shape[rank - 1]);
    let (s, ev) = (&k.shape[rank - 2], &v.shape[rank - 1]);
    let head = |d: &Size| d.as_const().is_some_and(|d| (1..=256).contains(&d));
    let positive = |d: &Size| d.as_const().is_none_or(|d| d >= 1);
    if k.shape[rank - 1] != *e
        || v.shape[rank - 2] != *s
        || !head(e)
        || !head(ev)
        || !positive(l)
        || !positive(s)
    {
        return false;
    }
    // Batch dims: equal or broadcast from 1; heads may also be shared by groups.
    for t in [k, v] {
        for d in 0..rank - 2 {
            let (want, have) = (&q.shape[d], &t.shape[d]);
            let heads = rank == 4 && d == 1;
            let grouped = heads
                && gqa
                && matches!((want.as_const(), have.as_const()), (Some(w), Some(h)) if h > 0 && w % h == 0);
            if have != want && *have != 1 && !grouped {
                return false;
            }
        }
    }
    if rank == 4 && k.shape[1] != v.shape[1] {
        return false;
    }
    let mut expected = q.shape.clone();
    expected[rank - 1] = ev.clone();
    if out.shape != expected {
        return false;
    }
    if mask {
        let Some(m) = meta(3) else {
            return false;
        };
        if m.shape.len() > rank || !(m.dtype == DType::Bool || m.dtype.is_float()) {
            return false;
        }
        let mut full = q.shape.clone();
        full[rank - 1] = s.clone();
        let skip = rank - m.shape.len();
        if m.shape
            .iter()
            .zip(&full[skip..])
            .any(|(have, want)| have != want && *have != 1)
        {
            return false;
        }
    }
    true
}

/// Batch norm in inference: `x * scale[c] + shift[c]` with `scale = w / sqrt(var + eps)`
/// and `shift = b - mean * scale`, the per-channel vectors shaped `[C, 1, ...]`.
#[allow(clippy::too_many_arguments)]
pub(super) fn batch_norm(
    b: &mut B,
    x: ValueId,
    w: Option<ValueId>,
    bias: Option<ValueId>,
    mean: ValueId,
    var: ValueId,
    eps: f64,
    out: &FixedMeta,
) -> Result<ValueId, Error> {
    let rank = b.sizes(x).len();
    let var = b.upcast(var)?;
    let mean = b.upcast(mean)?;
    let ve = b.vs(BinaryOp::Add, var, eps)?;
    let mut scale = b.un(UnaryOp::Rsqrt, ve)?;
    if let Some(w) = w {
        let w = b.upcast(w)?;
        scale = b.vv(BinaryOp::Mul, scale, w)?;
    }
    let ms = b.vv(BinaryOp::Mul, mean, scale)?;
    let shift = match bias {
        Some(bb) => {
            let bb = b.upcast(bb)?;
            b.vv(BinaryOp::Sub, bb, ms)?
        }
        None => b.op(Op::Unary(UnaryOp::Neg), vec![Arg::Value(ms)])?,
    };
    let scale = per_channel(b, scale, rank)?;
    let shift = per_channel(b, shift, rank)?;
    let xc = b.upcast(x)?;
    let y = b.vv(BinaryOp::Mul, xc, scale)?;
    let y = b.vv(BinaryOp::Add, y, shift)?;
    b.cast(y, out.dtype)
}

/// Group norm: `[N, G, rest]` normalised over `rest` (biased variance), then the
/// per-channel weight and bias. Returns the result and the `[N, G, 1]` mean and rstd.
#[allow(clippy::too_many_arguments)]
pub(super) fn group_norm(
    b: &mut B,
    x: ValueId,
    groups: i64,
    eps: f64,
    weight: Option<ValueId>,
    bias: Option<ValueId>,
    out: &FixedMeta,
) -> Result<(ValueId, ValueId, ValueId), Error> {
    // The batch may be symbolic; the rest is static.
    let shape = b.sizes(x);
    let n = shape.first().cloned().unwrap_or(Size::from(1));
    let mut rest = 1;
    for d in 1..shape.len() {
        rest *= b.dim(x, d)?;
    }
    let rest = rest / groups.max(1);
    let xc = b.upcast(x)?;
    let grouped = b.reshape_sizes(xc, vec![n, Size::from(groups), Size::from(rest)])?;
    let mean = b.reduce(ReduceOp::Mean, grouped, &[2])?;
    let d = b.vv(BinaryOp::Sub, grouped, mean)?;
    let sq = b.vv(BinaryOp::Mul, d, d)?;
    let var = b.reduce(ReduceOp::Mean, sq, &[2])?;
    let ve = b.vs(BinaryOp::Add, var, eps)?;
    let rstd = b.un(UnaryOp::Rsqrt, ve)?;
    let y = b.vv(BinaryOp::Mul, d, rstd)?;
    let mut y = b.reshape_sizes(y, shape.clone())?;
    if let Some(w) = weight {
        let w = b.upcast(w)?;
        let w = per_channel(b, w, shape.len())?;
        y = b.vv(BinaryOp::Mul, y, w)?;
    }
    if let Some(bb) = bias {
        let bb = b.upcast(bb)?;
        let bb = per_channel(b, bb, shape.len())?;
        y = b.vv(BinaryOp::Add, y, bb)?;
    }
    Ok((b.cast(y, out.dtype)?, mean, rstd))
}

/// Max pooling: the input padded with `-inf` to exactly the extent the windows cover,
/// then the maximum (NaN-propagating, as PyTorch's) over one strided slice per window
/// position that reaches the input ([`Taps`]): at most `kh * kw` slices of the output's
/// shape.
pub(super) fn max_pool(
    b: &mut B,
    x: ValueId,
    kernel: &[i64],
    stride: &[i64],
    padding: &[i64],
    dilation: &[i64],
    out: &FixedMeta,
) -> Result<ValueId, Error> {
    let r = b.sizes(x).len();
    let mut xp = x;
    let mut taps = vec![];
    for i in 0..2 {
        let d = r - 2 + i;
        let size = b.dim(xp, d)?;
        let t = Taps::of(
            kernel[i],
            stride[i],
            dilation[i],
            padding[i],
            size,
            out.shape[d],
        )
        .map_err(|what| Error::Unsupported {
            node: b.base.clone(),
            what,
        })?;
        xp = super::layout::pad_constant(b, xp, d, t.before, t.after, f64::NEG_INFINITY)?;
        taps.push(t);
    }
    let mut best: Option<ValueId> = None;
    for off in Taps::product(&taps) {
        let mut win = xp;
        for (i, &start) in off.iter().enumerate() {
            let d = r - 2 + i;
            let o = out.shape[d];
            win = b.slice(
                win,
                d as i64,
                start,
                start + (o - 1) * stride[i] + 1,
                stride[i],
            )?;
        }
        best = Some(match best {
            None => win,
            Some(m) => b.vv(BinaryOp::Maximum, m, win)?,
        });
    }
    let y = best.unwrap_or(x);
    // A lone window (1x1 kernel) is a view: copy it so the result is fresh.
    if b.g.node(y.node).is_some_and(|n| n.op.is_view()) {
        return b.op(Op::Clone, vec![Arg::Value(y)]);
    }
    Ok(y)
}

/// Adaptive average pooling, one of the last two dims at a time, with PyTorch's
/// windows: a dim that divides evenly is reshaped and averaged; otherwise its windows
/// are gathered into a padded `[n_out, K]` block and summed where a mask keeps the
/// window (a `where`, never a product with 0, so an inf input stays inf rather than
/// becoming NaN as an averaging matrix would make it).
pub(super) fn adaptive_avg_pool(
    b: &mut B,
    x: ValueId,
    spatial: usize,
    out: &FixedMeta,
) -> Result<ValueId, Error> {
    let r = b.sizes(x).len();
    let xc = b.upcast(x)?;
    let mut y = xc;
    for axis in r - spatial..r {
        y = pool_axis(b, y, axis, out.shape[axis])?;
    }
    b.cast(y, out.dtype)
}

/// Adaptive average pooling of dim `axis` of `x` down to `n` windows.
fn pool_axis(b: &mut B, x: ValueId, axis: usize, n: i64) -> Result<ValueId, Error> {
    let shape = b.sizes(x);
    let size = b.dim(x, axis)?;
    if n == size {
        return Ok(x);
    }
    let reduce = |b: &mut B, v: ValueId, op: ReduceOp, dim: usize| {
        b.op(
            Op::Reduce {
                op,
                dims: Some(vec![dim as i64]),
                keepdim: false,
                dtype: None,
            },
            vec![Arg::Value(v)],
        )
    };
    if size % n == 0 {
        let mut split = shape.clone();
        split.splice(axis..=axis, [Size::from(n), Size::from(size / n)]);
        let v = b.reshape_sizes(x, split)?;
        return reduce(b, v, ReduceOp::Mean, axis + 1);
    }
    let windows: Vec<(i64, i64)> = (0..n).map(|i| adaptive_window(i, n, size)).collect();
    let k = windows.iter().map(|(s, e)| e - s).max().unwrap_or(1).max(1);
    let (mut idx, mut keep, mut lens) = (vec![], vec![], vec![]);
    for &(s, e) in &windows {
        for j in 0..k {
            idx.push((s + j.min(e - s - 1)) as f64);
            keep.push(f64::from(u8::from(j < e - s)));
        }
        lens.push((e - s) as f64);
    }
    let cd = b.dtype(x);
    let idx = b.constant(vec![n, k], DType::Int64, idx);
    // The mask and lengths broadcast over the dims after `axis`.
    let trailing = shape.len() - axis - 1;
    let mut mshape = vec![n, k];
    mshape.extend(std::iter::repeat_n(1, trailing));
    let keep = b.constant(mshape, DType::Bool, keep);
    let mut lshape = vec![n];
    lshape.extend(std::iter::repeat_n(1, trailing));
    let lens = b.constant(lshape, cd, lens);
    let mut indexed = vec![false; axis];
    indexed.push(true);
    let mut args = vec![Arg::Value(x)];
    args.push(Arg::Value(idx));
    let gathered = b.op(
        Op::Index {
            indexed,
            nonnegative: false,
        },
        args,
    )?;
    let kept = b.op(
        Op::Where,
        vec![
            Arg::Value(keep),
            Arg::Value(gathered),
            Arg::Scalar(Scalar::Float(0.0)),
        ],
    )?;
    let sum = reduce(b, kept, ReduceOp::Sum, axis + 1)?;
    b.op(
        Op::Binary {
            op: BinaryOp::Div,
            alpha: None,
        },
        vec![Arg::Value(sum), Arg::Value(lens)],
    )
}

/// A 3-D convolution as 2-D ones, for a target whose convolution is 2-D (the cpu's C++):
/// for each kernel depth, the input's depth slices that meet it (padded, strided and
/// dilated along the depth) folded into the batch and convolved with that depth of the
/// weight; the products summed, then the bias added. `false` for any other node.
pub(super) fn conv3d_as_2d(g: &mut Graph, id: NodeId) -> Result<bool, Error> {
    let Some(node) = g.node(id) else {
        return Ok(false);
    };
    let Op::Conv {
        stride,
        padding,
        dilation,
        groups,
        bias,
    } = node.op.clone()
    else {
        return Ok(false);
    };
    if stride.len() != 3 || padding.len() != 3 || dilation.len() != 3 {
        return Ok(false);
    }
    let args = node.args.clone();
    let (Some(out), Some(x), Some(w)) = (
        node.outputs.first().and_then(|m| m.fixed()),
        args.first().and_then(Arg::value),
        args.get(1).and_then(Arg::value),
    ) else {
        return Ok(false);
    };
    let mut b = B {
        base: node.name.clone(),
        line: node.line,
        g,
    };
    let (xs, ws) = (b.shape(x), b.shape(w));
    let batched = xs.len() == 5;
    let (x, xs) = if batched {
        (x, xs)
    } else {
        let mut s = vec![1];
        s.extend_from_slice(&xs);
        (b.reshape(x, s.clone())?, s)
    };
    let r = out.shape.len();
    let (od, oh, ow) = (out.shape[r - 3], out.shape[r - 2], out.shape[r - 1]);
    let (n, c, h, wd) = (xs[0], xs[1], xs[3], xs[4]);
    let (o, kd) = (ws[0], ws[2]);
    let xp = if padding[0] > 0 {
        super::layout::pad_constant(&mut b, x, 2, padding[0], padding[0], 0.0)?
    } else {
        x
    };
    let mut acc: Option<ValueId> = None;
    for k in 0..kd {
        let start = k * dilation[0];
        let slab = b.slice(xp, 2, start, start + (od - 1) * stride[0] + 1, stride[0])?;
        let slab = b.op(
            Op::Permute {
                dims: vec![0, 2, 1, 3, 4],
            },
            vec![Arg::Value(slab)],
        )?;
        let slab = b.reshape(slab, vec![n * od, c, h, wd])?;
        let wk = b.op(Op::Select { dim: 2, index: k }, vec![Arg::Value(w)])?;
        let y = b.op(
            Op::Conv {
                stride: stride[1..].to_vec(),
                padding: padding[1..].to_vec(),
                dilation: dilation[1..].to_vec(),
                groups,
                bias: false,
            },
            vec![Arg::Value(slab), Arg::Value(wk)],
        )?;
        acc = Some(match acc {
            None => y,
            Some(a) => b.vv(BinaryOp::Add, a, y)?,
        });
    }
    let Some(acc) = acc else {
        return Ok(false);
    };
    let y = b.reshape(acc, vec![n, od, o, oh, ow])?;
    let mut y = b.op(
        Op::Permute {
            dims: vec![0, 2, 1, 3, 4],
        },
        vec![Arg::Value(y)],
    )?;
    if bias {
        if let Some(bv) = args.get(2).and_then(Arg::value) {
            let bv = per_channel(&mut b, bv, 5)?;
            y = b.vv(BinaryOp::Add, y, bv)?;
        }
    }
    if !batched {
        y = b.reshape(y, out.shape.clone())?;
    }
    let y = b.cast(y, out.dtype)?;
    super::replace_node(b.g, id, &[y]);
    Ok(true)
}
