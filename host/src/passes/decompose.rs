//! Decompositions of the composite ops into primitives: `softmax`/`_softmax`/`log_softmax`
//! via amax/sub/exp/sum/div (or log), `layer_norm`/`native_layer_norm` and `rms_norm` via
//! mean and rsqrt, `var` via mean/sub/mul/sum/div, `gelu` (erf or tanh formula), `silu` via
//! sigmoid, `linear` into permute + mm (+ add), `addmm` into mm + add. 16-bit floats are
//! computed in float32 and cast back, as PyTorch's decompositions do. Each decomposition
//! must agree with the interpreter's direct evaluation of the composite.

mod layout;
mod model;

use super::{emit, replace_node, Error, Stats};
use crate::graph::{
    Arg, BinaryOp, DType, GeluApprox, Graph, NodeId, Op, ReduceOp, Scalar, UnaryOp, ValueId,
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
        let (ma, mb) = (self.g.meta(x).cloned()?, self.g.meta(y).cloned()?);
        if ma.rank() < 2 || mb.rank() < 2 {
            return None;
        }
        let batch =
            crate::graph::shape::broadcast(&ma.shape[..ma.rank() - 2], &mb.shape[..mb.rank() - 2])
                .ok()?;
        if batch.is_empty() {
            return None;
        }
        let whole = |m: &crate::graph::TensorMeta| {
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
                self.op(Op::Expand { sizes }, vec![Arg::Value(v)]).ok()?
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
    let order = g
        .topo_order()
        .map_err(|_| Error::Graph(crate::graph::Error::NoOutputs))?;
    let mut changed = 0;
    for id in order {
        if options.fused_attention && model::fusable_attention(g, id) {
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

fn decompose(g: &mut Graph, id: NodeId) -> Result<bool, Error> {
    let Some(node) = g.node(id) else {
        return Ok(false);
    };
    // Most nodes are primitives: test that before cloning anything.
    if !node.op.is_composite() {
        return Ok(false);
    }
    let (op, args, outs) = (node.op.clone(), node.args.clone(), node.outputs.clone());
    let Some(out) = outs.first().cloned() else {
        return Ok(false);
    };
    let x = match value(args.first()) {
        Some(x) => x,
        None => return Ok(false),
    };
    let mut b = B {
        base: node.name.clone(),
        line: node.line,
        g,
    };
    let rank = b.g.meta(x).map_or(0, |m| m.rank()) as i64;
    let trailing = |k: usize| -> Vec<i64> { (rank - k as i64..rank).collect() };
    let new: Vec<ValueId> = match op {
        Op::Matmul => {
            let Some(y) = value(args.get(1)) else {
                return Ok(false);
            };
            match b.matmul_operands(x, y) {
                Some(operands) => vec![b.op(Op::Matmul, operands)?],
                None => return Ok(false),
            }
        }
        Op::Softmax {
            dim, log, dtype, ..
        } => {
            // `dtype` casts the input first (a narrower dtype rounds it).
            let xd = match dtype {
                Some(d) => b.cast(x, d)?,
                None => x,
            };
            let xc = b.upcast(xd)?;
            let m = b.reduce(ReduceOp::Amax, xc, &[dim])?;
            let s = b.vv(BinaryOp::Sub, xc, m)?;
            let e = b.un(UnaryOp::Exp, s)?;
            let z = b.reduce(ReduceOp::Sum, e, &[dim])?;
            let y = if log {
                let lz = b.un(UnaryOp::Log, z)?;
                b.vv(BinaryOp::Sub, s, lz)?
            } else {
                b.vv(BinaryOp::Div, e, z)?
            };
            vec![b.cast(y, out.dtype)?]
        }
        Op::LayerNorm {
            normalized_shape,
            eps,
            weight,
            bias,
            native,
        } => {
            let dims = trailing(normalized_shape.len());
            let xc = b.upcast(x)?;
            let mean = b.reduce(ReduceOp::Mean, xc, &dims)?;
            let d = b.vv(BinaryOp::Sub, xc, mean)?;
            let sq = b.vv(BinaryOp::Mul, d, d)?;
            let var = b.reduce(ReduceOp::Mean, sq, &dims)?;
            let ve = b.vs(BinaryOp::Add, var, eps)?;
            let rstd = b.un(UnaryOp::Rsqrt, ve)?;
            let mut y = b.vv(BinaryOp::Mul, d, rstd)?;
            if weight {
                y = b.vv(BinaryOp::Mul, y, value(args.get(1)).unwrap_or(y))?;
            }
            if bias {
                y = b.vv(
                    BinaryOp::Add,
                    y,
                    value(args.get(1 + weight as usize)).unwrap_or(y),
                )?;
            }
            let mut r = vec![b.cast(y, out.dtype)?];
            if native {
                let stat = outs.get(1).map_or(out.dtype, |m| m.dtype);
                let k = out.shape.len().saturating_sub(normalized_shape.len());
                if out.shape[k..].contains(&0) {
                    // Rows of nothing: mean 0 and rstd NaN, as PyTorch's CUDA kernel
                    // gives (its moments start from 0; the variance is 0 / 0).
                    for v in [0.0, f64::NAN] {
                        r.push(b.op(
                            Op::Full {
                                size: Some(outs[1].shape.clone()),
                                value: Scalar::Float(v),
                                dtype: Some(stat),
                            },
                            vec![],
                        )?);
                    }
                } else {
                    r.push(b.cast(mean, stat)?);
                    r.push(b.cast(rstd, stat)?);
                }
            }
            r
        }
        Op::RmsNorm {
            normalized_shape,
            eps,
            weight,
        } => {
            let dims = trailing(normalized_shape.len());
            let eps = eps.unwrap_or(match b.dtype(x) {
                // PyTorch's default is the epsilon of the type it computes in: float32
                // for 16-bit inputs too.
                DType::Float64 => f64::EPSILON,
                _ => f32::EPSILON as f64,
            });
            let xc = b.upcast(x)?;
            let sq = b.vv(BinaryOp::Mul, xc, xc)?;
            let ms = b.reduce(ReduceOp::Mean, sq, &dims)?;
            let e = b.vs(BinaryOp::Add, ms, eps)?;
            let r = b.un(UnaryOp::Rsqrt, e)?;
            let mut y = b.vv(BinaryOp::Mul, xc, r)?;
            if weight {
                y = b.vv(BinaryOp::Mul, y, value(args.get(1)).unwrap_or(y))?;
            }
            vec![b.cast(y, out.dtype)?]
        }
        Op::Var {
            dims,
            correction,
            keepdim,
        } => {
            let xc = b.upcast(x)?;
            let all: Vec<i64> = (0..rank).collect();
            let ds = dims.clone().unwrap_or(all);
            let shape = b.g.meta(x).map(|m| m.shape.clone()).unwrap_or_default();
            let wrapped =
                crate::graph::shape::wrap_dim_set(Some(&ds), shape.len()).unwrap_or_default();
            let n: f64 = wrapped
                .iter()
                .map(|&d| shape.get(d).copied().unwrap_or(1) as f64)
                .product();
            if n == 1.0 {
                // One element: its deviation is exactly 0 (computed, a fused
                // multiply-add can leave a rounding residue that 0 / 0 turns into inf).
                let v = if 1.0 - correction > 0.0 {
                    0.0
                } else {
                    f64::NAN
                };
                let fill = b.op(
                    Op::Full {
                        size: Some(out.shape.clone()),
                        value: Scalar::Float(v),
                        dtype: Some(out.dtype),
                    },
                    vec![],
                )?;
                vec![fill]
            } else {
                // Deviations of the data shifted by its first element along the reduced
                // dims: a run of equal values then has variance exactly 0, as PyTorch's
                // Welford gives (a float32 mean of equal values need not equal them, and
                // `var > 0` must not flip), and large offsets cancel before squaring.
                let mut first = xc;
                for &d in &wrapped {
                    first = b.slice(first, d as i64, 0, 1, 1)?;
                }
                let xc = b.vv(BinaryOp::Sub, xc, first)?;
                let mean = b.reduce(ReduceOp::Mean, xc, &ds)?;
                let d = b.vv(BinaryOp::Sub, xc, mean)?;
                let sq = b.vv(BinaryOp::Mul, d, d)?;
                let s = b.op(
                    Op::Reduce {
                        op: ReduceOp::Sum,
                        dims: Some(ds),
                        keepdim,
                        dtype: None,
                    },
                    vec![Arg::Value(sq)],
                )?;
                let y = b.vs(BinaryOp::Div, s, (n - correction).max(0.0))?;
                vec![b.cast(y, out.dtype)?]
            }
        }
        Op::Gelu { approximate } => {
            let xc = b.upcast(x)?;
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
            vec![b.cast(y, out.dtype)?]
        }
        Op::Unary(UnaryOp::Silu) => {
            let s = b.un(UnaryOp::Sigmoid, x)?;
            vec![b.vv(BinaryOp::Mul, x, s)?]
        }
        Op::Linear { bias } => {
            let Some(w) = value(args.get(1)) else {
                return Ok(false);
            };
            let wt = b.op(Op::Permute { dims: vec![1, 0] }, vec![Arg::Value(w)])?;
            let in_f =
                b.g.meta(w)
                    .and_then(|m| m.shape.get(1).copied())
                    .unwrap_or(1);
            let x2 = if rank == 2 {
                x
            } else {
                b.op(
                    Op::Reshape {
                        shape: vec![-1, in_f],
                        view: false,
                    },
                    vec![Arg::Value(x)],
                )?
            };
            let mut y = b.op(Op::Mm, vec![Arg::Value(x2), Arg::Value(wt)])?;
            if rank != 2 {
                y = b.op(
                    Op::Reshape {
                        shape: out.shape.clone(),
                        view: false,
                    },
                    vec![Arg::Value(y)],
                )?;
            }
            if bias {
                let bv = value(args.get(2)).unwrap_or(y);
                y = b.vv(BinaryOp::Add, y, bv)?;
            }
            vec![y]
        }
        Op::Addmm { beta, alpha } => {
            let (Some(m1), Some(m2)) = (value(args.get(1)), value(args.get(2))) else {
                return Ok(false);
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
                vec![p]
            } else {
                let c = if beta.to_f64() != 1.0 {
                    b.bin(BinaryOp::Mul, Arg::Value(x), Arg::Scalar(beta))?
                } else {
                    x
                };
                vec![b.vv(BinaryOp::Add, c, p)?]
            }
        }
        Op::Reduce {
            op: op @ (ReduceOp::Any | ReduceOp::All),
            dims,
            keepdim,
            ..
        } => {
            // any: some element is non-zero; all: no element is zero. Counted in int64.
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
            vec![b.bin(want, Arg::Value(n), Arg::Scalar(Scalar::Int(0)))?]
        }
        Op::Cumsum { dim, .. } => vec![model::cumsum(&mut b, x, dim, &out)?],
        Op::Diff {
            n,
            dim,
            prepend,
            append,
        } => {
            let pre = if prepend { value(args.get(1)) } else { None };
            let app = if append {
                value(args.get(1 + prepend as usize))
            } else {
                None
            };
            vec![model::diff(&mut b, x, pre, app, n, dim, &out)?]
        }
        Op::Attention {
            mask,
            causal,
            scale,
            gqa,
        } => {
            let (Some(k), Some(v)) = (value(args.get(1)), value(args.get(2))) else {
                return Ok(false);
            };
            let m = if mask { value(args.get(3)) } else { None };
            vec![model::attention(
                &mut b, x, k, v, m, causal, scale, gqa, &out,
            )?]
        }
        Op::BatchNorm {
            eps,
            weight,
            bias,
            native,
        } => {
            let mut k = 1;
            let mut next = || {
                k += 1;
                value(args.get(k - 1))
            };
            let w = if weight { next() } else { None };
            let bb = if bias { next() } else { None };
            let (Some(mean), Some(var)) = (next(), next()) else {
                return Ok(false);
            };
            let y = model::batch_norm(&mut b, x, w, bb, mean, var, eps, &out)?;
            let mut r = vec![y];
            if native {
                for m in &outs[1..] {
                    r.push(b.op(
                        Op::Full {
                            size: Some(m.shape.clone()),
                            value: Scalar::Int(0),
                            dtype: Some(m.dtype),
                        },
                        vec![],
                    )?);
                }
            }
            r
        }
        Op::MaxPool {
            kernel,
            stride,
            padding,
            dilation,
            with_indices,
            ..
        } => {
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
            let y = model::max_pool(&mut b, x, &kernel, &stride, &padding, &dilation, &out)?;
            let mut r = vec![y];
            if with_indices {
                // Unread (checked above): a placeholder of the right metadata.
                r.push(b.op(
                    Op::Full {
                        size: Some(out.shape.clone()),
                        value: Scalar::Int(0),
                        dtype: Some(DType::Int64),
                    },
                    vec![],
                )?);
            }
            r
        }
        Op::AdaptiveAvgPool { output_size } => vec![model::adaptive_avg_pool(
            &mut b,
            x,
            output_size.len(),
            &out,
        )?],
        Op::AvgPool {
            kernel,
            stride,
            padding,
            count_include_pad,
            divisor_override,
            ..
        } => vec![layout::avg_pool(
            &mut b,
            x,
            &layout::Window {
                kernel: &kernel,
                stride: &stride,
                padding: &padding,
                count_include_pad,
                divisor_override,
            },
            &out,
        )?],
        Op::GroupNorm {
            groups,
            eps,
            weight,
            bias,
            native,
        } => {
            let w = if weight { value(args.get(1)) } else { None };
            let bb = if bias {
                value(args.get(1 + weight as usize))
            } else {
                None
            };
            let (y, mean, rstd) = model::group_norm(&mut b, x, groups, eps, w, bb, &out)?;
            let mut r = vec![y];
            if native {
                for (v, m) in [mean, rstd].into_iter().zip(&outs[1..]) {
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
            r
        }
        Op::Pad { pads, mode, value } => vec![layout::pad(&mut b, x, &pads, mode, value, &out)?],
        Op::Roll { shifts, dims } => vec![layout::roll(&mut b, x, &shifts, &dims, &out)?],
        Op::SliceScatter {
            dim,
            start,
            end,
            step,
            select,
        } => {
            let Some(src) = value(args.get(1)) else {
                return Ok(false);
            };
            vec![layout::slice_scatter(
                &mut b, x, src, dim, start, end, step, select, &out,
            )?]
        }
        Op::Copy => vec![layout::copy(&mut b, args.get(1), &out)?],
        Op::TypeAs => vec![layout::fresh(&mut b, x, out.dtype)?],
        Op::Repeat { repeats } => vec![layout::repeat(&mut b, x, &repeats, &out)?],
        Op::AsStrided {
            size,
            stride,
            offset,
        } => vec![layout::as_strided(&mut b, x, &size, &stride, offset, &out)?],
        Op::Conv {
            stride,
            padding,
            dilation,
            groups,
            bias: true,
        } => {
            // The convolution without its bias (a library call), and the bias added by the
            // kernel that follows, where batch norm and activations fuse too.
            let (Some(w), Some(bias)) = (value(args.get(1)), value(args.get(2))) else {
                return Ok(false);
            };
            let y = b.op(
                Op::Conv {
                    stride,
                    padding,
                    dilation,
                    groups,
                    bias: false,
                },
                vec![Arg::Value(x), Arg::Value(w)],
            )?;
            let bias = model::per_channel(&mut b, bias, out.shape.len())?;
            vec![b.vv(BinaryOp::Add, y, bias)?]
        }
        _ => return Ok(false),
    };
    replace_node(b.g, id, &new);
    Ok(true)
}
