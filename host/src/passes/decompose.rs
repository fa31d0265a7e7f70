//! Decompositions of the composite ops into primitives: `softmax`/`_softmax`/`log_softmax`
//! via amax/sub/exp/sum/div (or log), `layer_norm`/`native_layer_norm` and `rms_norm` via
//! mean and rsqrt, `var` via mean/sub/mul/sum/div, `gelu` (erf or tanh formula), `silu` via
//! sigmoid, `linear` into permute + mm (+ add), `addmm` into mm + add. 16-bit floats are
//! computed in float32 and cast back, as PyTorch's decompositions do. Each decomposition
//! must agree with the interpreter's direct evaluation of the composite.

mod layout;
mod model;
mod norm;

pub use model::GROUPED_MM_KERNEL_ROWS;

use super::{emit, replace_node, Error, Stats};
use crate::graph::{
    Arg, BinaryOp, DType, FixedMeta, GeluApprox, Graph, NodeId, Op, ReduceOp, Scalar, UnaryOp,
    ValueId,
};

struct B<'g> {
    g: &'g mut Graph,
    base: String,
    line: Option<u32>,
}

impl B<'_> {
    /// The operands of `matmul(x, y)` with any operand whose batch dims broadcast in part
    /// (`[3, 1, M, K] @ [4, K, N]`) expanded to the full batch shape: such batch dims
    /// cannot be flattened into one strided batch dim (lowering copies the expansion).
    /// `None` when both operands flatten as they are.
    fn matmul_operands(&mut self, x: ValueId, y: ValueId) -> Option<Vec<Arg>> {
        let (ma, mb) = (self.g.fixed_meta(x)?, self.g.fixed_meta(y)?);
        if ma.rank() < 2 || mb.rank() < 2 {
            return None;
        }
        let batch =
            crate::graph::shape::broadcast(&ma.shape[..ma.rank() - 2], &mb.shape[..mb.rank() - 2])
                .ok()?;
        if batch.is_empty() {
            return None;
        }
        let whole = |m: &crate::graph::FixedMeta| {
            let own = &m.shape[..m.rank() - 2];
            own == batch.as_slice() || own.iter().product::<i64>() == 1
        };
        if whole(&ma) && whole(&mb) {
            return None;
        }
        let mut operands = vec![];
        for (v, m) in [(x, &ma), (y, &mb)] {
            operands.push(Arg::Value(if whole(m) {
                v
            } else {
                let mut sizes = batch.clone();
                sizes.extend_from_slice(&m.shape[m.rank() - 2..]);
                self.op(
                    Op::Expand {
                        sizes: crate::graph::shape::sizes(&sizes),
                    },
                    vec![Arg::Value(v)],
                )
                .ok()?
            }));
        }
        Some(operands)
    }

    /// `matmul(x, y)`, its operands expanded where lowering needs it.
    fn matmul(&mut self, x: ValueId, y: ValueId) -> Result<ValueId, Error> {
        let operands = self
            .matmul_operands(x, y)
            .unwrap_or_else(|| vec![Arg::Value(x), Arg::Value(y)]);
        self.op(Op::Matmul, operands)
    }

    fn op(&mut self, op: Op, args: Vec<Arg>) -> Result<ValueId, Error> {
        emit(self.g, "decompose", &self.base, op, args, self.line)
    }
    fn un(&mut self, u: UnaryOp, x: ValueId) -> Result<ValueId, Error> {
        self.op(Op::Unary(u), vec![Arg::Value(x)])
    }
    fn bin(&mut self, op: BinaryOp, a: Arg, b: Arg) -> Result<ValueId, Error> {
        self.op(Op::Binary { op, alpha: None }, vec![a, b])
    }
    fn vv(&mut self, op: BinaryOp, a: ValueId, b: ValueId) -> Result<ValueId, Error> {
        self.bin(op, Arg::Value(a), Arg::Value(b))
    }
    fn vs(&mut self, op: BinaryOp, a: ValueId, s: f64) -> Result<ValueId, Error> {
        self.bin(op, Arg::Value(a), Arg::Scalar(Scalar::Float(s)))
    }
    fn reduce(&mut self, op: ReduceOp, x: ValueId, dims: &[i64]) -> Result<ValueId, Error> {
        self.op(
            Op::Reduce {
                op,
                dims: Some(dims.to_vec()),
                keepdim: true,
                dtype: None,
            },
            vec![Arg::Value(x)],
        )
    }
    fn dtype(&self, v: ValueId) -> DType {
        self.g.meta(v).map_or(DType::Float32, |m| m.dtype)
    }
    /// Casts to `d` unless already of that dtype.
    fn cast(&mut self, x: ValueId, d: DType) -> Result<ValueId, Error> {
        if self.dtype(x) == d {
            return Ok(x);
        }
        self.op(Op::Cast { dtype: d }, vec![Arg::Value(x)])
    }
    /// The dtype to compute in: float32 for 16-bit floats and integers.
    fn upcast(&mut self, x: ValueId) -> Result<ValueId, Error> {
        let d = self.dtype(x);
        self.cast(
            x,
            if d == DType::Float64 {
                d
            } else {
                DType::Float32
            },
        )
    }
}

fn value(a: Option<&Arg>) -> Option<ValueId> {
    a.and_then(|a| a.value())
}

/// Runs the decompositions over every composite node.
pub fn run(g: &mut Graph) -> Result<Stats, Error> {
    run_with(g, &super::Options::default())
}

/// [`run`], keeping the nodes the target computes whole (`options`):
/// attention that [`model::fusable_attention`] accepts, for a target with a
/// fused attention kernel.
pub fn run_with(g: &mut Graph, options: &super::Options) -> Result<Stats, Error> {
    let _span = tracing::info_span!("decompose").entered();
    let order = super::topo_order(g, "decompose")?;
    let mut changed = 0;
    for id in order {
        if options.fused_attention && model::fusable_attention(g, id) {
            continue;
        }
        if options.grouped_mm_kernel && model::grouped_mm_kept(g, id) {
            continue;
        }
        if options.convs_in_2d && model::conv3d_as_2d(g, id)? {
            changed += 1;
            continue;
        }
        if decompose(g, id)? {
            changed += 1;
        }
    }
    Ok(Stats { changed })
}

/// The node being decomposed, as the rules read it.
struct Site {
    id: NodeId,
    /// its first operand
    x: ValueId,
    args: Vec<Arg>,
    /// every output's metadata, with integer sizes (at the hints where a size is
    /// symbolic: only a rule that [`takes_symbols`] runs then, reading dtypes and ranks)
    outs: Vec<FixedMeta>,
    /// the first output's metadata, likewise
    out: FixedMeta,
    /// every output's metadata as the graph has it (sizes that may be symbolic)
    metas: Vec<crate::graph::TensorMeta>,
    /// whether a size of an output is symbolic
    symbolic: bool,
    /// the rank of `x`
    rank: i64,
}

impl Site {
    /// Operand `i`, when it is a tensor.
    fn arg(&self, i: usize) -> Option<ValueId> {
        value(self.args.get(i))
    }

    /// The last `k` dims of `x`.
    fn trailing(&self, k: usize) -> Vec<i64> {
        (self.rank - k as i64..self.rank).collect()
    }
}

/// A rule's replacement values, or `None` when it leaves the node as it is.
type Rewrite = Result<Option<Vec<ValueId>>, Error>;

/// A rule's one replacement value.
fn one(v: Result<ValueId, Error>) -> Rewrite {
    Ok(Some(vec![v?]))
}

/// The composite node `id` as the rules read it, with its op and a builder of its
/// replacement; `None` for a primitive.
fn site(g: &mut Graph, id: NodeId) -> Option<(Op, Site, B<'_>)> {
    let node = g.node(id)?;
    // Most nodes are primitives: test that before cloning anything.
    if !node.op.is_composite() {
        return None;
    }
    let outs: Vec<FixedMeta> = node
        .outputs
        .iter()
        .map(|m| FixedMeta {
            shape: m.hint_shape(),
            strides: m.hint_strides(),
            dtype: m.dtype,
        })
        .collect();
    let out = outs.first().cloned()?;
    let x = value(node.args.first())?;
    let symbolic = !node.outputs.iter().all(crate::graph::TensorMeta::is_static)
        || g.meta(x).is_some_and(|m| !m.is_static());
    let site = Site {
        id,
        x,
        args: node.args.clone(),
        outs,
        out,
        metas: node.outputs.clone(),
        symbolic,
        rank: g.meta(x).map_or(0, |m| m.rank()) as i64,
    };
    let (op, base, line) = (node.op.clone(), node.name.clone(), node.line);
    Some((op, site, B { g, base, line }))
}

/// Rewrites node `id` into primitives when it is a composite: one rule per op.
fn decompose(g: &mut Graph, id: NodeId) -> Result<bool, Error> {
    let Some((op, s, mut b)) = site(g, id) else {
        return Ok(false);
    };
    if s.symbolic && !takes_symbols(&op) {
        // The other rules rewrite at integer sizes: the node stays as it is.
        return Ok(false);
    }
    let x = s.x;
    let rewrite = match op {
        Op::Matmul => matmul(&mut b, &s),
        Op::Softmax {
            dim, log, dtype, ..
        } => one(norm::softmax(&mut b, &s, dim, log, dtype)),
        Op::LayerNorm {
            normalized_shape: shape,
            eps,
            weight,
            bias,
            native,
        } => norm::layer_norm(&mut b, &s, &shape, eps, weight, bias, native),
        Op::RmsNorm {
            normalized_shape: shape,
            eps,
            weight,
        } => one(norm::rms_norm(&mut b, &s, &shape, eps, weight)),
        Op::Var {
            dims,
            correction,
            keepdim,
        } => one(norm::var(&mut b, &s, dims, correction, keepdim)),
        Op::Gelu { approximate } => one(gelu(&mut b, &s, approximate)),
        Op::Unary(UnaryOp::Silu) => one(silu(&mut b, x)),
        Op::Linear { bias } => linear(&mut b, &s, bias),
        Op::Addmm { beta, alpha } => addmm(&mut b, &s, beta, alpha),
        Op::Reduce {
            op: op @ (ReduceOp::Any | ReduceOp::All),
            dims,
            keepdim,
            ..
        } => one(any_all(&mut b, x, op, dims, keepdim)),
        Op::Cumsum { dim, .. } => one(model::cumsum(&mut b, x, dim, &s.out)),
        Op::GroupedMm => one(model::grouped_mm(&mut b, &s.args, &s.out)),
        Op::Diff {
            n,
            dim,
            prepend,
            append,
        } => one(diff(&mut b, &s, n, dim, prepend, append)),
        Op::Attention {
            mask,
            causal,
            scale,
            gqa,
        } => attention(&mut b, &s, mask, causal, scale, gqa),
        Op::BatchNorm {
            eps,
            weight,
            bias,
            native,
        } => batch_norm(&mut b, &s, eps, weight, bias, native),
        Op::MaxPool {
            kernel,
            stride,
            padding,
            dilation,
            with_indices,
            ..
        } => max_pool(
            &mut b,
            &s,
            &kernel,
            &stride,
            &padding,
            &dilation,
            with_indices,
        ),
        Op::AdaptiveAvgPool { output_size } => one(model::adaptive_avg_pool(
            &mut b,
            x,
            output_size.len(),
            &s.out,
        )),
        Op::AvgPool {
            kernel,
            stride,
            padding,
            count_include_pad,
            divisor_override,
            ..
        } => one(layout::avg_pool(
            &mut b,
            x,
            &layout::Window {
                kernel: &kernel,
                stride: &stride,
                padding: &padding,
                count_include_pad,
                divisor_override,
            },
            &s.out,
        )),
        Op::GroupNorm {
            groups,
            eps,
            weight,
            bias,
            native,
        } => group_norm(&mut b, &s, groups, eps, weight, bias, native),
        Op::Pad { pads, mode, value } => one(layout::pad(&mut b, x, &pads, mode, value, &s.out)),
        Op::Roll { shifts, dims } => one(layout::roll(&mut b, x, &shifts, &dims, &s.out)),
        Op::SliceScatter {
            dim,
            start,
            end,
            step,
            select,
        } => slice_scatter(&mut b, &s, dim, start, end, step, select),
        Op::Copy => one(layout::copy(&mut b, s.args.get(1), &s.out)),
        Op::TypeAs => one(layout::fresh(&mut b, x, s.out.dtype)),
        Op::Repeat { repeats } => one(layout::repeat(&mut b, x, &repeats, &s.out)),
        Op::AsStrided {
            size,
            stride,
            offset,
        } => one(layout::as_strided(
            &mut b, x, &size, &stride, offset, &s.out,
        )),
        Op::Conv {
            stride,
            padding,
            dilation,
            groups,
            bias: true,
        } => conv_bias(&mut b, &s, stride, padding, dilation, groups),
        _ => Ok(None),
    };
    let Some(new) = rewrite? else {
        return Ok(false);
    };
    replace_node(b.g, id, &new);
    Ok(true)
}

/// Whether `op`'s rule takes symbolic sizes: it reads only its output's dtype and the
/// ranks, or its sizes as they are.
fn takes_symbols(op: &Op) -> bool {
    matches!(
        op,
        Op::Matmul
            | Op::GroupedMm
            | Op::Softmax { .. }
            | Op::LayerNorm { .. }
            | Op::RmsNorm { .. }
            | Op::Gelu { .. }
            | Op::Unary(UnaryOp::Silu)
            | Op::Linear { .. }
            | Op::Addmm { .. }
            | Op::Cumsum { .. }
            | Op::Diff { .. }
            | Op::Attention { .. }
            | Op::TypeAs
            | Op::Reduce {
                op: ReduceOp::Any | ReduceOp::All,
                ..
            }
            // Over a symbolic batch (shape inference takes no other symbolic size for
            // them): their rules read the other dims, which are static.
            | Op::Conv { .. }
            | Op::BatchNorm { .. }
            | Op::GroupNorm { .. }
            | Op::MaxPool { .. }
            | Op::AvgPool { .. }
            | Op::AdaptiveAvgPool { .. }
    )
}

/// `matmul` whose batch dims broadcast in part: its operands expanded.
fn matmul(b: &mut B, s: &Site) -> Rewrite {
    let Some(y) = s.arg(1) else {
        return Ok(None);
    };
    match b.matmul_operands(s.x, y) {
        Some(operands) => one(b.op(Op::Matmul, operands)),
        None => Ok(None),
    }
}

/// `gelu` by its erf or tanh formula, in float32 for 16-bit floats.
fn gelu(b: &mut B, s: &Site, approximate: GeluApprox) -> Result<ValueId, Error> {
    let xc = b.upcast(s.x)?;
    let inner = match approximate {
        GeluApprox::None => {
            let t = b.vs(BinaryOp::Mul, xc, std::f64::consts::FRAC_1_SQRT_2)?;
            b.un(UnaryOp::Erf, t)?
        }
        GeluApprox::Tanh => {
            let x2 = b.vv(BinaryOp::Mul, xc, xc)?;
            let x3 = b.vv(BinaryOp::Mul, x2, xc)?;
            let c = b.vs(BinaryOp::Mul, x3, 0.044715)?;
            let u = b.vv(BinaryOp::Add, xc, c)?;
            let v = b.vs(BinaryOp::Mul, u, (2.0 / std::f64::consts::PI).sqrt())?;
            b.un(UnaryOp::Tanh, v)?
        }
    };
    let a = b.vs(BinaryOp::Add, inner, 1.0)?;
    let h = b.vs(BinaryOp::Mul, xc, 0.5)?;
    let y = b.vv(BinaryOp::Mul, h, a)?;
    b.cast(y, s.out.dtype)
}

/// `silu(x) = x * sigmoid(x)`.
fn silu(b: &mut B, x: ValueId) -> Result<ValueId, Error> {
    let s = b.un(UnaryOp::Sigmoid, x)?;
    b.vv(BinaryOp::Mul, x, s)
}

/// `linear(x, w, bias)`: `x` flattened to rows, times `w` transposed, reshaped back,
/// plus the bias.
fn linear(b: &mut B, s: &Site, bias: bool) -> Rewrite {
    let Some(w) = s.arg(1) else {
        return Ok(None);
    };
    let x = s.x;
    let wt = b.op(Op::Permute { dims: vec![1, 0] }, vec![Arg::Value(w)])?;
    let in_f =
        b.g.fixed_meta(w)
            .and_then(|m| m.shape.get(1).copied())
            .unwrap_or(1);
    let x2 = if s.rank == 2 {
        x
    } else {
        b.op(
            Op::Reshape {
                shape: crate::graph::shape::sizes(&[-1, in_f]),
                view: false,
            },
            vec![Arg::Value(x)],
        )?
    };
    let mut y = b.op(Op::Mm, vec![Arg::Value(x2), Arg::Value(wt)])?;
    if s.rank != 2 {
        y = b.op(
            Op::Reshape {
                shape: s.metas[0].shape.clone(),
                view: false,
            },
            vec![Arg::Value(y)],
        )?;
    }
    if bias {
        let bv = s.arg(2).unwrap_or(y);
        y = b.vv(BinaryOp::Add, y, bv)?;
    }
    Ok(Some(vec![y]))
}

/// `addmm(c, m1, m2) = beta * c + alpha * m1 @ m2` (`baddbmm` when batched).
fn addmm(b: &mut B, s: &Site, beta: Scalar, alpha: Scalar) -> Rewrite {
    let (Some(m1), Some(m2)) = (s.arg(1), s.arg(2)) else {
        return Ok(None);
    };
    // `baddbmm` is the batched form.
    let mm = if b.g.meta(m1).is_some_and(|m| m.rank() == 3) {
        Op::Bmm
    } else {
        Op::Mm
    };
    let mut p = b.op(mm, vec![Arg::Value(m1), Arg::Value(m2)])?;
    if alpha.to_f64() != 1.0 {
        p = b.bin(BinaryOp::Mul, Arg::Value(p), Arg::Scalar(alpha))?;
    }
    if beta.to_f64() == 0.0 {
        return Ok(Some(vec![p]));
    }
    let c = if beta.to_f64() != 1.0 {
        b.bin(BinaryOp::Mul, Arg::Value(s.x), Arg::Scalar(beta))?
    } else {
        s.x
    };
    one(b.vv(BinaryOp::Add, c, p))
}

/// `any` (some element is non-zero) and `all` (no element is zero) as a count in int64.
fn any_all(
    b: &mut B,
    x: ValueId,
    op: ReduceOp,
    dims: Option<Vec<i64>>,
    keepdim: bool,
) -> Result<ValueId, Error> {
    let (test, want) = match op {
        ReduceOp::Any => (BinaryOp::Ne, BinaryOp::Gt),
        _ => (BinaryOp::Eq, BinaryOp::Eq),
    };
    let t = b.bin(test, Arg::Value(x), Arg::Scalar(Scalar::Int(0)))?;
    let n = b.op(
        Op::Reduce {
            op: ReduceOp::Sum,
            dims,
            keepdim,
            dtype: Some(DType::Int64),
        },
        vec![Arg::Value(t)],
    )?;
    b.bin(want, Arg::Value(n), Arg::Scalar(Scalar::Int(0)))
}

/// `diff` with its optional `prepend` and `append` operands.
fn diff(
    b: &mut B,
    s: &Site,
    n: i64,
    dim: i64,
    prepend: bool,
    append: bool,
) -> Result<ValueId, Error> {
    let pre = if prepend { s.arg(1) } else { None };
    let app = if append {
        s.arg(1 + prepend as usize)
    } else {
        None
    };
    model::diff(b, s.x, pre, app, n, dim, &s.out)
}

/// `scaled_dot_product_attention(q, k, v, mask?)`.
fn attention(
    b: &mut B,
    s: &Site,
    mask: bool,
    causal: bool,
    scale: Option<f64>,
    gqa: bool,
) -> Rewrite {
    let (Some(k), Some(v)) = (s.arg(1), s.arg(2)) else {
        return Ok(None);
    };
    let m = if mask { s.arg(3) } else { None };
    let Some(out) = s.metas.first() else {
        return Ok(None);
    };
    Ok(model::attention(b, s.x, k, v, m, causal, scale, gqa, out)?.map(|y| vec![y]))
}

/// `batch_norm` in inference form; the native form's saved statistics are zeros.
fn batch_norm(b: &mut B, s: &Site, eps: f64, weight: bool, bias: bool, native: bool) -> Rewrite {
    let mut k = 1;
    let mut next = || {
        k += 1;
        s.arg(k - 1)
    };
    let w = if weight { next() } else { None };
    let bb = if bias { next() } else { None };
    let (Some(mean), Some(var)) = (next(), next()) else {
        return Ok(None);
    };
    let y = model::batch_norm(b, s.x, w, bb, mean, var, eps, &s.out)?;
    let mut r = vec![y];
    if native {
        for m in &s.outs[1..] {
            r.push(b.op(
                Op::Full {
                    size: Some(crate::graph::shape::sizes(&m.shape)),
                    value: Scalar::Int(0),
                    dtype: Some(m.dtype),
                },
                vec![],
            )?);
        }
    }
    Ok(Some(r))
}

/// `max_pool`; its indices output, when it has one, must be unread.
fn max_pool(
    b: &mut B,
    s: &Site,
    kernel: &[i64],
    stride: &[i64],
    padding: &[i64],
    dilation: &[i64],
    with_indices: bool,
) -> Rewrite {
    let id = s.id;
    let indices = ValueId {
        node: id,
        output: 1,
    };
    // A `getitem` of the indices that nothing reads does not count.
    let dead_item = |g: &Graph, user: NodeId| {
        g.node(user)
            .is_some_and(|n| matches!(n.op, Op::GetItem { .. }))
            && g.users(user).next().is_none()
            && !g.outputs().iter().any(|o| o.node == user)
    };
    let read =
        b.g.users(id)
            .any(|(user, u)| u.output == 1 && !dead_item(b.g, user))
            || b.g.outputs().contains(&indices);
    if with_indices && read {
        return Err(Error::Unsupported {
            node: b.base.clone(),
            what: "max_pool2d_with_indices: its indices output is read, and Kiln computes the values only".into(),
        });
    }
    let y = model::max_pool(b, s.x, kernel, stride, padding, dilation, &s.out)?;
    let mut r = vec![y];
    if with_indices {
        // Unread (checked above): a placeholder of the right metadata.
        r.push(b.op(
            Op::Full {
                size: Some(s.metas[0].shape.clone()),
                value: Scalar::Int(0),
                dtype: Some(DType::Int64),
            },
            vec![],
        )?);
    }
    Ok(Some(r))
}

/// `group_norm`; the native form also gives the mean and rstd per group.
fn group_norm(
    b: &mut B,
    s: &Site,
    groups: i64,
    eps: f64,
    weight: bool,
    bias: bool,
    native: bool,
) -> Rewrite {
    let w = if weight { s.arg(1) } else { None };
    let bb = if bias {
        s.arg(1 + weight as usize)
    } else {
        None
    };
    let (y, mean, rstd) = model::group_norm(b, s.x, groups, eps, w, bb, &s.out)?;
    let mut r = vec![y];
    if native {
        // `[N, G]`, of the input's batch (which may be symbolic).
        for (v, m) in [mean, rstd].into_iter().zip(&s.metas[1..]) {
            let v = b.op(
                Op::Reshape {
                    shape: m.shape.clone(),
                    view: false,
                },
                vec![Arg::Value(v)],
            )?;
            r.push(b.cast(v, m.dtype)?);
        }
    }
    Ok(Some(r))
}

/// `slice_scatter(x, src)`.
fn slice_scatter(
    b: &mut B,
    s: &Site,
    dim: i64,
    start: Option<i64>,
    end: Option<i64>,
    step: i64,
    select: bool,
) -> Rewrite {
    let Some(src) = s.arg(1) else {
        return Ok(None);
    };
    one(layout::slice_scatter(
        b, s.x, src, dim, start, end, step, select, &s.out,
    ))
}

/// A convolution with a bias: the convolution without it (a library call), and the
/// bias added by the kernel that follows, where batch norm and activations fuse too.
fn conv_bias(
    b: &mut B,
    s: &Site,
    stride: Vec<i64>,
    padding: Vec<i64>,
    dilation: Vec<i64>,
    groups: i64,
) -> Rewrite {
    let (Some(w), Some(bias)) = (s.arg(1), s.arg(2)) else {
        return Ok(None);
    };
    let y = b.op(
        Op::Conv {
            stride,
            padding,
            dilation,
            groups,
            bias: false,
        },
        vec![Arg::Value(s.x), Arg::Value(w)],
    )?;
    let bias = model::per_channel(b, bias, s.out.shape.len())?;
    one(b.vv(BinaryOp::Add, y, bias))
}
