//! The reference interpreter: evaluates any validated graph in float64 on the CPU,
//! rounding each node's results to its dtype where PyTorch would. It is the ground truth
//! for every test, so it favours obvious correctness over speed (but stays linear in the
//! number of elements per op).
//!
//! It must never panic on a validated graph, and never depend on passes: it evaluates
//! composites directly, which is what lets tests check the decompositions against it.
//! Kernels allocate their results and intermediates through [`room`] and [`filled`]
//! (and copy operands through [`elements`] and [`dense`]), so an allocation beyond what
//! the process has, which the up-front [`memory_needed`] may not have foreseen, is a
//! refusal ([`OpError::OutOfMemory`]) and never an abort.

pub(crate) mod kernels;
pub(crate) mod layout;
pub(crate) mod model;
mod reduce;
pub(crate) use reduce::matmul_raw;
mod views;

use crate::graph::sym::SymId;
use crate::graph::{Arg, ConstData, FixedMeta, Graph, NodeId, Op, TensorMeta};
use crate::tensor::walk::{Walk, CHUNK};
/// The interpreter's values.
pub use crate::tensor::Tensor;
use rayon::prelude::*;
use std::collections::HashMap;

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
    /// The process could not allocate a result.
    #[error(transparent)]
    OutOfMemory(#[from] crate::memory::OutOfMemory),
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

/// Why one op could not be evaluated: something about its operands, or
/// storage for its results or intermediates that the process could not
/// allocate (beyond what [`memory_needed`] counted).
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    /// An operand or argument the op cannot take.
    #[error("{0}")]
    Invalid(String),
    /// An allocation failed.
    #[error(transparent)]
    OutOfMemory(#[from] crate::memory::OutOfMemory),
}

impl From<String> for OpError {
    fn from(message: String) -> OpError {
        OpError::Invalid(message)
    }
}

impl From<&str> for OpError {
    fn from(message: &str) -> OpError {
        OpError::Invalid(message.into())
    }
}

/// Empty storage with room for `len` elements, or the refusal (never an
/// abort): every kernel's results and intermediates are allocated here.
pub(crate) fn room(len: usize) -> Result<Vec<f64>, crate::memory::OutOfMemory> {
    crate::memory::try_vec(|| format!("an intermediate of {len} elements"), len)
}

/// Storage of `len` elements, each `value`, or the refusal.
pub(crate) fn filled(len: usize, value: f64) -> Result<Vec<f64>, crate::memory::OutOfMemory> {
    let mut v = room(len)?;
    v.resize(len, value);
    Ok(v)
}

/// The elements `values` yields (`len` of them at most), in fallibly
/// allocated storage.
pub(crate) fn collect(
    len: usize,
    values: impl Iterator<Item = f64>,
) -> Result<Vec<f64>, crate::memory::OutOfMemory> {
    let mut v = room(len)?;
    v.extend(values.take(len));
    Ok(v)
}

/// `t`'s elements in row-major order, copied into fallibly allocated storage.
pub(crate) fn elements(t: &Tensor) -> Result<Vec<f64>, crate::memory::OutOfMemory> {
    t.try_to_vec(|| format!("a copy of {} elements", t.numel()))
}

/// `t` made contiguous (itself when it is), the copy allocated fallibly.
pub(crate) fn dense(t: &Tensor) -> Result<Tensor, crate::memory::OutOfMemory> {
    t.try_contiguous(|| format!("a copy of {} elements", t.numel()))
}

/// Where an evaluation stands, for a progress display: called before each
/// node that computes something (inputs, constants and views are free).
#[derive(Clone, Copy, Debug)]
pub struct Progress<'a> {
    /// Nodes evaluated so far.
    pub done: usize,
    /// Nodes in all.
    pub total: usize,
    /// The node about to be evaluated.
    pub node: &'a str,
    /// Its op's name.
    pub op: &'a str,
}

/// The value of each size symbol that an input's dim is, read from `inputs` (a graph's
/// symbolic sizes are bound by its inputs, as a compiled program's are).
fn bind_sizes(g: &Graph, inputs: &[Tensor]) -> Result<HashMap<SymId, i64>, Error> {
    let mut sizes = HashMap::new();
    for (&id, t) in g.inputs().iter().zip(inputs) {
        let Some(node) = g.node(id) else { continue };
        let Some(m) = node.outputs.first() else {
            continue;
        };
        for (d, size) in m.shape.iter().enumerate() {
            let (Some(s), Some(&value)) = (size.as_symbol(), t.shape.get(d)) else {
                continue;
            };
            if let Some(&bound) = sizes.get(&s) {
                if bound != value {
                    return Err(Error::Node {
                        node: node.name.clone(),
                        message: format!(
                            "dim {d} is {value}, but the size it shares ({size}) is {bound} \
                             in an input before it"
                        ),
                    });
                }
            }
            sizes.insert(s, value);
        }
    }
    Ok(sizes)
}

/// `op` with its symbolic size arguments at the bound sizes (the op itself where it
/// has none).
fn at_call<'a>(
    op: &'a Op,
    sizes: &HashMap<SymId, i64>,
) -> Result<std::borrow::Cow<'a, Op>, String> {
    if op.symbolic_sizes().is_empty() {
        return Ok(std::borrow::Cow::Borrowed(op));
    }
    let unbound = std::cell::Cell::new(None);
    let value = |s: SymId| {
        sizes.get(&s).copied().unwrap_or_else(|| {
            unbound.set(Some(s));
            0
        })
    };
    let bound = op.at_sizes(&value).map_err(|e| e.to_string())?;
    match unbound.get() {
        Some(s) => Err(format!(
            "its sizes {:?} read ks{}, which no input's dim gives",
            op.symbolic_sizes(),
            s.0
        )),
        None => Ok(std::borrow::Cow::Owned(bound)),
    }
}

/// `m` at the bound sizes.
fn at_sizes(m: &TensorMeta, sizes: &HashMap<SymId, i64>) -> Result<FixedMeta, String> {
    if let Some(f) = m.fixed() {
        return Ok(f);
    }
    let unbound = std::cell::Cell::new(None);
    let value = |s: SymId| {
        sizes.get(&s).copied().unwrap_or_else(|| {
            unbound.set(Some(s));
            0
        })
    };
    let eval = |v: &[crate::graph::sym::Size]| -> Result<Vec<i64>, String> {
        v.iter()
            .map(|d| d.eval(&value).map_err(|e| format!("size {d}: {e}")))
            .collect()
    };
    let (shape, strides) = (eval(&m.shape)?, eval(&m.strides)?);
    if let Some(s) = unbound.get() {
        return Err(format!(
            "sizes {:?} read ks{}, which no input's dim gives",
            m.shape, s.0
        ));
    }
    Ok(FixedMeta {
        shape,
        strides,
        dtype: m.dtype,
    })
}

/// Evaluates `g` on `inputs` (in the graph's input order) and returns its outputs.
pub fn evaluate(g: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, Error> {
    evaluate_with(g, inputs, &mut |_| {})
}

/// [`evaluate`], telling `progress` about each node before evaluating it.
/// Each value is dropped after its last use, so memory holds only what later
/// nodes still read (see [`memory_needed`]).
pub fn evaluate_with(
    g: &Graph,
    inputs: &[Tensor],
    progress: &mut dyn FnMut(Progress),
) -> Result<Vec<Tensor>, Error> {
    if inputs.len() != g.inputs().len() {
        return Err(Error::InputCount {
            expected: g.inputs().len(),
            found: inputs.len(),
        });
    }
    let order = g
        .topo_order()
        .map_err(|n| crate::graph::Error::Cycle(at(g, n)))?;
    let sizes = bind_sizes(g, inputs)?;
    let last_use = last_uses(g, &order);
    let mut env: Vec<Option<Vec<Tensor>>> =
        vec![None; order.iter().map(|n| n.index() + 1).max().unwrap_or(0)];
    for (step, &id) in order.iter().enumerate() {
        let Some(node) = g.node(id) else { continue };
        let fail = |message: String| Error::Node {
            node: node.name.clone(),
            message,
        };
        // Each size at the inputs' binding of its symbols.
        let metas = node
            .outputs
            .iter()
            .map(|m| at_sizes(m, &sizes).map_err(&fail))
            .collect::<Result<Vec<_>, _>>()?;
        let outs = match &node.op {
            Op::Input { index } => {
                let t = inputs
                    .get(*index)
                    .ok_or_else(|| fail("missing input".into()))?;
                let m = metas.first().ok_or_else(|| fail("no metadata".into()))?;
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
                let m = metas.first().ok_or_else(|| fail("no metadata".into()))?;
                vec![constant(m, data).map_err(|mut refused| {
                    refused.what = format!("constant `{}` ({})", node.name, refused.what);
                    refused
                })?]
            }
            op => {
                if !crate::graph::views::describes(op) {
                    progress(Progress {
                        done: step,
                        total: order.len(),
                        node: &node.name,
                        op: op.name(),
                    });
                }
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
                let op = at_call(op, &sizes).map_err(&fail)?;
                eval_op(&op, &args, &metas).map_err(|e| match e {
                    OpError::Invalid(message) => fail(message),
                    OpError::OutOfMemory(mut refused) => {
                        refused.what = format!("node `{}` ({})", node.name, refused.what);
                        Error::OutOfMemory(refused)
                    }
                })?
            }
        };
        env[id.index()] = Some(outs);
        let operands = node.args.iter().filter_map(|a| match a {
            Arg::Value(v) => Some(v.node),
            Arg::Scalar(_) => None,
        });
        for done in operands.chain([id]) {
            if last_use.get(done.index()) == Some(&Some(step)) {
                env[done.index()] = None;
            }
        }
    }
    g.outputs()
        .iter()
        .map(|v| {
            env.get(v.node.index())
                .and_then(|o| o.as_ref())
                .and_then(|o| o.get(v.output as usize))
                .ok_or_else(|| Error::Node {
                    node: format!("#{}", v.node.index()),
                    message: "output not computed".into(),
                })?
                .try_contiguous(|| format!("copying output #{}", v.node.index()))
                .map_err(Error::from)
        })
        .collect()
}

/// For each node (by index), the step of `order` after which nothing reads
/// its values any more (its own step when nothing does), or `None` for the
/// graph's outputs, which live to the end.
fn last_uses(g: &Graph, order: &[NodeId]) -> Vec<Option<usize>> {
    let mut last = vec![None; order.iter().map(|n| n.index() + 1).max().unwrap_or(0)];
    for (step, &id) in order.iter().enumerate() {
        last[id.index()] = Some(step);
        for a in g.node(id).map_or(&[][..], |n| &n.args) {
            if let Arg::Value(v) = a {
                if let Some(l) = last.get_mut(v.node.index()) {
                    *l = Some(step);
                }
            }
        }
    }
    for v in g.outputs() {
        if let Some(l) = last.get_mut(v.node.index()) {
            *l = None;
        }
    }
    last
}

/// Bytes of float64 storage for `count` elements; `None` past 64 bits.
fn f64_bytes(count: i64) -> Option<u64> {
    crate::memory::elements(count, std::mem::size_of::<f64>() as u64)
}

/// The most memory [`evaluate`] of `g` holds at once, in bytes, beyond the
/// inputs the caller holds: the values still to be read at each node, the
/// node's results and its scratch, the largest over the graph, plus the
/// copies of the outputs it returns. `None` when the figure does not fit in
/// 64 bits (or the graph is not valid). An upper bound: a reshape is counted
/// as a copy although it often is a view.
pub fn memory_needed(g: &Graph) -> Option<u64> {
    let order = g.topo_order().ok()?;
    let last_use = last_uses(g, &order);
    let size = |id: NodeId| -> Option<u64> {
        let node = g.node(id)?;
        crate::memory::total(node.outputs.iter().map(|m| f64_bytes(m.numel())))
    };
    // What a node allocates: its results (nothing for a view), and the
    // scratch its kernel needs while it runs.
    let cost = |id: NodeId| -> Option<(u64, u64)> {
        let node = g.node(id)?;
        let reads = || {
            crate::memory::total(node.args.iter().map(|a| {
                match a {
                    Arg::Value(v) => crate::memory::total(
                        g.node(v.node)
                            .and_then(|n| n.outputs.get(v.output as usize))
                            .map(|m| f64_bytes(m.numel())),
                    ),
                    Arg::Scalar(_) => Some(0),
                }
            }))
        };
        Some(match &node.op {
            Op::Input { .. } => (0, 0),
            Op::Constant {
                data: ConstData::Fill(_),
            } => (8, 0),
            op if crate::graph::views::copies(op) || matches!(op, Op::Reshape { .. }) => {
                (size(id)?, 0)
            }
            op if crate::graph::views::describes(op) => (0, 0),
            // Contiguous copies of the operands.
            Op::Cat { .. } | Op::LayerNorm { .. } | Op::RmsNorm { .. } => (size(id)?, reads()?),
            // The unrounded product beside the result.
            Op::Linear { bias: true } | Op::Addmm { .. } => (size(id)?, size(id)?),
            // The means beside the result.
            Op::Var { .. } => (size(id)?, size(id)?),
            _ => (size(id)?, 0),
        })
    };
    // A view shares its operand's storage: bytes belong to the node that
    // made the storage and are freed when it and every view of it are dead.
    let (mut live, mut peak) = (0u64, 0u64);
    let mut owner: Vec<usize> = (0..last_use.len()).collect();
    let mut bytes = vec![0u64; last_use.len()];
    let mut refs = vec![0usize; last_use.len()];
    for (step, &id) in order.iter().enumerate() {
        let node = g.node(id)?;
        let operands: Vec<usize> = node
            .args
            .iter()
            .filter_map(|a| match a {
                Arg::Value(v) => Some(v.node.index()),
                Arg::Scalar(_) => None,
            })
            .collect();
        let (made, scratch) = cost(id)?;
        peak = peak.max(live.checked_add(made)?.checked_add(scratch)?);
        live = live.checked_add(made)?;
        let shares = made == 0
            && crate::graph::views::describes(&node.op)
            && !matches!(node.op, Op::Input { .. } | Op::Constant { .. });
        let own = match operands.first() {
            Some(&base) if shares => owner[base],
            _ => id.index(),
        };
        owner[id.index()] = own;
        bytes[own] = bytes[own].max(made);
        refs[own] += 1;
        let mut operands = operands;
        operands.sort_unstable();
        operands.dedup();
        for done in operands.into_iter().chain([id.index()]) {
            if last_use.get(done) == Some(&Some(step)) {
                let o = owner[done];
                refs[o] = refs[o].saturating_sub(1);
                if refs[o] == 0 {
                    live -= std::mem::take(&mut bytes[o]);
                }
            }
        }
    }
    // An output that is a view is returned as a contiguous copy.
    let outputs = crate::memory::total(g.outputs().iter().map(|v| {
        let node = g.node(v.node)?;
        let is_view =
            crate::graph::views::describes(&node.op) && !crate::graph::views::copies(&node.op);
        match node.outputs.get(v.output as usize) {
            Some(m) if is_view => f64_bytes(m.numel()),
            _ => Some(0),
        }
    }))?;
    Some(peak.max(live.checked_add(outputs)?))
}

fn at(g: &Graph, n: NodeId) -> crate::graph::At {
    crate::graph::At {
        node: g.node(n).map_or("?".into(), |x| x.name.clone()),
        line: g.node(n).and_then(|x| x.line),
    }
}

/// The tensor a constant node holds, or the refusal when the process cannot
/// allocate its float64 values.
pub fn constant(m: &FixedMeta, data: &ConstData) -> Result<Tensor, crate::memory::OutOfMemory> {
    let n = m.numel().max(0) as usize;
    Ok(match data {
        // A fill is one stored element read through zero strides.
        ConstData::Fill(x) => Tensor {
            dtype: m.dtype,
            shape: m.shape.clone(),
            strides: vec![0; m.shape.len()],
            offset: 0,
            data: std::sync::Arc::new(vec![m.dtype.round(*x)]),
        },
        ConstData::Bytes { dtype, bytes } => {
            // Decoded a chunk at a time into storage allocated once.
            let mut values = room(n)?;
            for part in bytes.chunks(CHUNK * dtype.size_bytes()) {
                let left = n - values.len();
                values.extend(dtype.decode_le(part).into_iter().take(left));
            }
            values.resize(n, 0.0);
            Tensor::new(m.shape.clone(), m.dtype, values)
        }
        ConstData::Values(_) => Tensor::new(
            m.shape.clone(),
            m.dtype,
            collect(n, (0..n).map(|i| data.get(i)))?,
        ),
    })
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
pub fn eval_op(op: &Op, args: &[Val], outs: &[FixedMeta]) -> Result<Vec<Tensor>, OpError> {
    let out = outs.first().ok_or("node has no output metadata")?;
    if let Some(r) = views::eval_view(op, args, outs)? {
        return Ok(r);
    }
    if let Some(r) = model::eval(op, args, outs) {
        return r;
    }
    if let Some(r) = layout::eval(op, args, out) {
        return r.map(|t| vec![t]);
    }
    kernels::eval(op, args, out, outs)
}

/// Applies `f` elementwise over the broadcast of `args` into `out`'s shape,
/// rounding each result to `out`'s dtype. At most four operands are tensors
/// (no op of the IR maps more).
pub(crate) fn map_n(
    args: &[Val],
    out: &FixedMeta,
    f: impl Fn(&[f64]) -> f64 + Sync,
) -> Result<Tensor, OpError> {
    let tensors: Vec<(usize, &Tensor)> = args
        .iter()
        .enumerate()
        .filter_map(|(i, a)| match a {
            Val::Tensor(t) => Some((i, *t)),
            Val::Scalar(_) => None,
        })
        .collect();
    let too_many = || {
        format!(
            "{} tensor operands, at most 4 are mapped together",
            tensors.len()
        )
    };
    Ok(match tensors.len() {
        0 => map_k::<0>(args, [], out, &f)?,
        1 => map_k::<1>(
            args,
            tensors.clone().try_into().map_err(|_| too_many())?,
            out,
            &f,
        )?,
        2 => map_k::<2>(
            args,
            tensors.clone().try_into().map_err(|_| too_many())?,
            out,
            &f,
        )?,
        3 => map_k::<3>(
            args,
            tensors.clone().try_into().map_err(|_| too_many())?,
            out,
            &f,
        )?,
        4 => map_k::<4>(
            args,
            tensors.clone().try_into().map_err(|_| too_many())?,
            out,
            &f,
        )?,
        _ => return Err(too_many().into()),
    })
}

/// [`map_n`] over exactly `K` tensor operands, `(argument slot, tensor)`.
fn map_k<const K: usize>(
    args: &[Val],
    tensors: [(usize, &Tensor); K],
    out: &FixedMeta,
    f: &(impl Fn(&[f64]) -> f64 + Sync),
) -> Result<Tensor, crate::memory::OutOfMemory> {
    let strides = tensors.map(|(_, t)| t.broadcast_strides(&out.shape));
    let operands = std::array::from_fn(|k| (strides[k].as_slice(), tensors[k].1.offset));
    let walk = Walk::<K>::new(&out.shape, operands);
    // The arguments with scalars in place; each chunk fills in the tensors'.
    let template: Vec<f64> = args
        .iter()
        .map(|a| match a {
            Val::Scalar(s) => s.to_f64(),
            Val::Tensor(_) => f64::NAN,
        })
        .collect();
    let data = tensors.map(|(_, t)| t.data.as_slice());
    let slots = tensors.map(|(slot, _)| slot);
    let dtype = out.dtype;
    let mut vals = filled(walk.len(), 0.0)?;
    vals.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(c, chunk)| {
            let mut xs = template.clone();
            let first = c * CHUNK;
            walk.run(first..first + chunk.len(), |j, pos| {
                for k in 0..K {
                    xs[slots[k]] = data[k].get(pos[k] as usize).copied().unwrap_or(f64::NAN);
                }
                chunk[j - first] = dtype.round(f(&xs));
            });
        });
    Ok(Tensor::from_rounded(out.shape.clone(), dtype, vals))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(nodes: &str, outputs: &str) -> Graph {
        let text = format!(
            "format = \"kiln-graph/1\"\nname = \"g\"\noutputs = [{outputs}]\n\n\
             [[inputs]]\nname = \"x\"\nshape = [10, 100]\ndtype = \"float32\"\n\n{nodes}"
        );
        crate::graph::parse_toml(&text).expect("graph")
    }

    fn node(name: &str, op: &str, args: &str) -> String {
        format!("[[nodes]]\nname = \"{name}\"\nop = \"{op}\"\nargs = [{args}]\n\n")
    }

    /// One [10, 100] value in float64.
    const VALUE: u64 = 8000;

    #[test]
    fn memory_needed_counts_only_the_values_still_to_be_read() {
        // A chain holds two values at a time, however long it is.
        let chain = [
            node("a", "relu", "\"x\""),
            node("b", "relu", "\"a\""),
            node("c", "relu", "\"b\""),
            node("d", "relu", "\"c\""),
        ]
        .concat();
        assert_eq!(memory_needed(&graph(&chain, "\"d\"")), Some(2 * VALUE));
        // A value read again at the end stays alive all along.
        let kept = [
            node("a", "relu", "\"x\""),
            node("b", "relu", "\"a\""),
            node("c", "relu", "\"b\""),
            node("d", "add", "\"c\", \"a\""),
        ]
        .concat();
        assert_eq!(memory_needed(&graph(&kept, "\"d\"")), Some(3 * VALUE));
    }

    #[test]
    fn memory_needed_keeps_storage_alive_while_a_view_of_it_is() {
        // `a` is last read by the view, but the view reads a's storage.
        let viewed = [
            node("a", "relu", "\"x\""),
            node("v", "transpose", "\"a\", 0, 1"),
            node("b", "relu", "\"v\""),
            node("c", "relu", "\"b\""),
        ]
        .concat();
        assert_eq!(memory_needed(&graph(&viewed, "\"c\"")), Some(2 * VALUE));
        // An output that is a view is returned as a contiguous copy.
        let out_view = [
            node("a", "relu", "\"x\""),
            node("v", "transpose", "\"a\", 0, 1"),
        ]
        .concat();
        assert_eq!(memory_needed(&graph(&out_view, "\"v\"")), Some(2 * VALUE));
    }

    #[test]
    fn an_intermediate_the_process_cannot_allocate_is_a_refusal_naming_the_node() {
        // A small input broadcast to 2^48 elements: 2 PiB of float64, beyond
        // any address space, so the kernel's allocation fails wherever it runs.
        let text = "format = \"kiln-graph/1\"\nname = \"g\"\noutputs = [\"y\"]\n\n\
                    [[inputs]]\nname = \"x\"\nshape = [1, 1]\ndtype = \"float32\"\n\n\
                    [[nodes]]\nname = \"big\"\nop = \"expand\"\n\
                    args = [\"x\", [16777216, 16777216]]\n\n\
                    [[nodes]]\nname = \"y\"\nop = \"add\"\nargs = [\"big\", 1.0]\n";
        let g = crate::graph::parse_toml(text).expect("graph");
        let x = Tensor::new(vec![1, 1], crate::graph::DType::Float32, vec![2.0]);
        match evaluate(&g, &[x]) {
            Err(Error::OutOfMemory(refused)) => {
                assert_eq!(refused.bytes, 1 << 51);
                let text = refused.to_string();
                assert!(
                    text.starts_with(
                        "node `y` (an intermediate of 281474976710656 elements) needs 2048.0 TiB"
                    ),
                    "{text}"
                );
                assert!(text.contains("could not allocate"), "{text}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        // A constant's values are allocated the same way.
        let huge = FixedMeta::contiguous(vec![1 << 24, 1 << 24], crate::graph::DType::Float32);
        let values = ConstData::Values(vec![1.0].into());
        let refused = constant(&huge, &values).expect_err("2 PiB");
        assert_eq!(refused.bytes, 1 << 51);
        let small = FixedMeta::contiguous(vec![2], crate::graph::DType::Float32);
        let bytes = ConstData::Bytes {
            dtype: crate::graph::DType::Float32,
            bytes: [1.5f32, -2.0]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
        };
        assert_eq!(
            constant(&small, &bytes).expect("two").to_vec(),
            vec![1.5, -2.0]
        );
        assert!(matches!(room(3), Ok(v) if v.capacity() == 3));
        assert_eq!(filled(2, 1.5).expect("two"), vec![1.5, 1.5]);
        assert_eq!(
            collect(2, [1.0, 2.0, 3.0].into_iter()).expect("two"),
            vec![1.0, 2.0]
        );
    }

    #[test]
    fn evaluation_drops_values_after_their_last_read_and_still_returns_every_output() {
        let g = graph(
            &[
                node("a", "relu", "\"x\""),
                node("v", "transpose", "\"a\", 0, 1"),
                node("b", "neg", "\"v\""),
                node("c", "add", "\"b\", 1.0"),
            ]
            .concat(),
            "\"c\", \"v\"",
        );
        let values = (0..1000).map(|i| (i % 37) as f64 - 18.0).collect();
        let x = vec![Tensor::new(
            vec![10, 100],
            crate::graph::DType::Float32,
            values,
        )];
        let outs = evaluate(&g, &x).expect("evaluate");
        assert_eq!(outs[0].shape, vec![100, 10]);
        assert_eq!(outs[1].shape, vec![100, 10]);
        assert_eq!(outs[0].at(&[3, 2]), 1.0 - x[0].at(&[2, 3]).max(0.0));
        assert_eq!(outs[1].at(&[3, 2]), x[0].at(&[2, 3]).max(0.0));
    }
}
