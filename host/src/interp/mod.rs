//! The reference interpreter: evaluates any validated graph in float64 on the CPU,
//! rounding each node's results to its dtype where PyTorch would. It is the ground truth
//! for every test, so it favours obvious correctness over speed (but stays linear in the
//! number of elements per op).
//!
//! It must never panic on a validated graph, and never depend on passes: it evaluates
//! composites directly, which is what lets tests check the decompositions against it.

pub(crate) mod kernels;
mod reduce;
mod views;

use crate::graph::shape::for_each_index;
use crate::graph::{Arg, ConstData, Graph, NodeId, Op, TensorMeta};
use crate::tensor::Tensor;

/// Interpreter errors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The wrong number of inputs was given.
    #[error("the graph has {expected} inputs, {found} given")]
    InputCount {
        /// inputs the graph declares
        expected: usize,
        /// inputs given
        found: usize,
    },
    /// An input tensor does not match its declaration.
    #[error("input `{name}` must be {expected_dtype}{expected:?}, found {found_dtype}{found:?}")]
    InputMismatch {
        /// the input
        name: String,
        /// declared shape
        expected: Vec<i64>,
        /// declared dtype
        expected_dtype: crate::graph::DType,
        /// given shape
        found: Vec<i64>,
        /// given dtype
        found_dtype: crate::graph::DType,
    },
    /// The graph is not valid (a cycle, a dangling operand).
    #[error("graph is not valid")]
    Graph(#[from] crate::graph::Error),
    /// A node could not be evaluated.
    #[error("node `{node}`: {message}")]
    Node {
        /// the node
        node: String,
        /// why
        message: String,
    },
}

/// Evaluates `g` on `inputs` (in the graph's input order) and returns its outputs.
pub fn evaluate(g: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, Error> {
    if inputs.len() != g.inputs().len() {
        return Err(Error::InputCount {
            expected: g.inputs().len(),
            found: inputs.len(),
        });
    }
    let order = g
        .topo_order()
        .map_err(|n| crate::graph::Error::Cycle(at(g, n)))?;
    let mut env: Vec<Option<Vec<Tensor>>> =
        vec![None; order.iter().map(|n| n.index() + 1).max().unwrap_or(0)];
    for id in order {
        let Some(node) = g.node(id) else { continue };
        let fail = |message: String| Error::Node {
            node: node.name.clone(),
            message,
        };
        let outs = match &node.op {
            Op::Input { index } => {
                let t = inputs
                    .get(*index)
                    .ok_or_else(|| fail("missing input".into()))?;
                let m = node
                    .outputs
                    .first()
                    .ok_or_else(|| fail("no metadata".into()))?;
                if t.shape != m.shape || t.dtype != m.dtype {
                    return Err(Error::InputMismatch {
                        name: node.name.clone(),
                        expected: m.shape.clone(),
                        expected_dtype: m.dtype,
                        found: t.shape.clone(),
                        found_dtype: t.dtype,
                    });
                }
                vec![t.clone()]
            }
            Op::Constant { data } => {
                let m = node
                    .outputs
                    .first()
                    .ok_or_else(|| fail("no metadata".into()))?;
                vec![constant(m, data)]
            }
            op => {
                let mut args = Vec::with_capacity(node.args.len());
                for a in &node.args {
                    args.push(match a {
                        Arg::Scalar(s) => Val::Scalar(*s),
                        Arg::Value(v) => Val::Tensor(
                            env.get(v.node.index())
                                .and_then(|o| o.as_ref())
                                .and_then(|o| o.get(v.output as usize))
                                .ok_or_else(|| fail(format!("operand {v:?} was not computed")))?,
                        ),
                    });
                }
                eval_op(op, &args, &node.outputs).map_err(fail)?
            }
        };
        env[id.index()] = Some(outs);
    }
    g.outputs()
        .iter()
        .map(|v| {
            env.get(v.node.index())
                .and_then(|o| o.as_ref())
                .and_then(|o| o.get(v.output as usize))
                .map(|t| t.contiguous())
                .ok_or_else(|| Error::Node {
                    node: format!("#{}", v.node.index()),
                    message: "output not computed".into(),
                })
        })
        .collect()
}

fn at(g: &Graph, n: NodeId) -> crate::graph::At {
    crate::graph::At {
        node: g.node(n).map_or("?".into(), |x| x.name.clone()),
        line: g.node(n).and_then(|x| x.line),
    }
}

/// The tensor a constant node holds.
pub fn constant(m: &TensorMeta, data: &ConstData) -> Tensor {
    let n = m.numel().max(0) as usize;
    match data {
        // A fill is one stored element read through zero strides.
        ConstData::Fill(x) => Tensor {
            dtype: m.dtype,
            shape: m.shape.clone(),
            strides: vec![0; m.shape.len()],
            offset: 0,
            data: std::sync::Arc::new(vec![m.dtype.round(*x)]),
        },
        ConstData::Values(_) => Tensor::new(
            m.shape.clone(),
            m.dtype,
            (0..n).map(|i| data.get(i)).collect(),
        ),
    }
}

/// An evaluated operand.
#[derive(Clone, Copy, Debug)]
pub enum Val<'a> {
    /// a tensor
    Tensor(&'a Tensor),
    /// a number
    Scalar(crate::graph::Scalar),
}

/// Evaluates one op on evaluated operands; `outs` is the node's output metadata.
pub fn eval_op(op: &Op, args: &[Val], outs: &[TensorMeta]) -> Result<Vec<Tensor>, String> {
    let out = outs.first().ok_or("node has no output metadata")?;
    if let Some(r) = views::eval_view(op, args, outs)? {
        return Ok(r);
    }
    kernels::eval(op, args, out, outs)
}

/// Applies `f` elementwise over the broadcast of `args` into `out`'s shape.
pub(crate) fn map_n(args: &[Val], out: &TensorMeta, f: impl Fn(&[f64]) -> f64) -> Tensor {
    let strides: Vec<Option<Vec<i64>>> = args
        .iter()
        .map(|a| match a {
            Val::Tensor(t) => Some(t.broadcast_strides(&out.shape)),
            Val::Scalar(_) => None,
        })
        .collect();
    let mut vals = Vec::with_capacity(out.numel() as usize);
    let mut xs = vec![0.0; args.len()];
    for_each_index(&out.shape, |idx| {
        for (k, a) in args.iter().enumerate() {
            xs[k] = match (a, &strides[k]) {
                (Val::Tensor(t), Some(st)) => {
                    let p = t.offset + idx.iter().zip(st).map(|(i, s)| i * s).sum::<i64>();
                    t.data.get(p as usize).copied().unwrap_or(f64::NAN)
                }
                (Val::Scalar(s), _) => s.to_f64(),
                _ => f64::NAN,
            };
        }
        vals.push(f(&xs));
    });
    if out.shape.is_empty() && vals.is_empty() {
        vals.push(f(&xs));
    }
    Tensor::new(out.shape.clone(), out.dtype, vals)
}
