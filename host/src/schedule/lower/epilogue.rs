//! A matrix product's bias in the library's epilogue.
//!
//! `linear` and `addmm` decompose into a product and an add of a bias broadcast
//! over the product's rows. Where the wrapper's product takes a bias
//! (`torch.addmm`, cuBLASLt's bias epilogue on CUDA, as Inductor calls it), the
//! add becomes part of the product's call: no kernel reads the product to add
//! the bias, and a sum that must be in memory (an attention's query, key and
//! value; a graph output) costs no pass of its own. The sum is rounded once,
//! as eager's `linear` rounds it.
//!
//! Only when the sum must be in memory anyway; a sum that kernels read gets its
//! bias added in them for free. On an H100 (cuBLAS, TF32 off;
//! `bench/gpu/results/2026-11-26-bias-epilogue-h100.txt`) the 16-bit
//! tensor-core epilogue adds 0-16 % to the product, less than a separate pass
//! over its result. In float32 cuBLASLt's epilogue is free for some shapes and
//! picks kernels up to 1.5x slower for others, so the Python wrapper chooses
//! per signature at its first call between it and the plain product followed by
//! the add (`kiln_runtime.BiasEpilogue`). Float16, bfloat16 and float32 only.

use super::{contiguous_view, meta_of, node_of, Def, Lowered, SKind};
use crate::graph::dtype::DType;
use crate::graph::ir::{Arg, Graph, NodeId, ValueId};
use crate::graph::ops::{BinaryOp, Op};
use crate::graph::views;
use crate::schedule::index::{self, Size};
use crate::schedule::ir::{ExternOp, View};
use crate::schedule::Error;

/// Folds node `id`, when it is `product + bias` (either order) of a 2-D `mm`
/// whose only reader it is (directly or through one view that keeps the
/// product's element order) and a bias of the product's dtype broadcast over its
/// rows, into the product's scheduler node as `addmm`. Returns whether it did.
pub(super) fn fold_bias(graph: &Graph, low: &mut Lowered, id: NodeId) -> Result<bool, Error> {
    let node = node_of(graph, id)?;
    let Op::Binary {
        op: BinaryOp::Add,
        alpha,
    } = &node.op
    else {
        return Ok(false);
    };
    if alpha.is_some_and(|a| a.to_f64() != 1.0) {
        return Ok(false);
    }
    let (Some(x), Some(y)) = (
        node.args.first().and_then(Arg::value),
        node.args.get(1).and_then(Arg::value),
    ) else {
        return Ok(false);
    };
    let sum = ValueId::first(id);
    for (product, bias) in [(x, y), (y, x)] {
        if let Some(plan) = plan(graph, low, sum, product, bias)? {
            apply(graph, low, sum, plan)?;
            return Ok(true);
        }
    }
    Ok(false)
}

/// What folding one add changes.
struct Plan {
    /// The product's scheduler node.
    snode: super::SNodeId,
    /// The values the fold leaves without a reader (the product, a view of it).
    consumed: Vec<ValueId>,
    /// The bias as a `[N]` view, where it is in memory.
    bias: Option<View>,
    /// The bias and its rank. A bias kernels compute (a concatenation of layers'
    /// biases, `merge_mm`'s of biases given as inputs) is computed into memory
    /// first: `N` elements, against the `M × N` a separate add would read.
    value: (ValueId, usize),
}

fn plan(
    graph: &Graph,
    low: &Lowered,
    sum: ValueId,
    product: ValueId,
    bias: ValueId,
) -> Result<Option<Plan>, Error> {
    let out = meta_of(graph, sum)?;
    let (pm, bm) = (meta_of(graph, product)?, meta_of(graph, bias)?);
    if !matches!(out.dtype, DType::Float16 | DType::BFloat16 | DType::Float32)
        || pm.dtype != out.dtype
        || bm.dtype != out.dtype
        || !needs_memory(graph, sum)
    {
        return Ok(None);
    }
    // The product: an `mm` node's value, or one view of it whose elements are the
    // product's in order (a `reshape` back to the batch dims).
    let mut consumed = vec![product];
    let mut mm_value = product;
    if !matches!(low.defs.get(&product), Some(Def::Node(_))) {
        let pnode = node_of(graph, product.node)?;
        if !views::describes(&pnode.op) {
            return Ok(None);
        }
        let Some(source) = pnode.args.first().and_then(Arg::value) else {
            return Ok(None);
        };
        mm_value = source;
        consumed.push(source);
    }
    let Some(&Def::Node(snode)) = low.defs.get(&mm_value) else {
        return Ok(None);
    };
    let s = &low.snodes[snode];
    let SKind::Extern {
        op: ExternOp::Mm, ..
    } = &s.kind
    else {
        return Ok(None);
    };
    let n = s.meta.shape.last().cloned().unwrap_or_default();
    // The sum reads the product's buffer in its own order, and nothing else reads it.
    let dense = contiguous_view(s.buf, &out.shape);
    if low.as_view(graph, product, true).as_ref() != Some(&dense)
        || out.shape.last() != Some(&n)
        || index::product(&out.shape) != index::product(&s.meta.shape)
        || !only_reader(graph, product, sum.node)
        || (mm_value != product && !only_reader(graph, mm_value, product.node))
    {
        return Ok(None);
    }
    // The bias: `[N]`, or ones before it, in memory.
    let rank = bm.shape.len();
    if rank == 0 || bm.shape[rank - 1] != n || bm.shape[..rank - 1].iter().any(|d| *d != 1) {
        return Ok(None);
    }
    // (Never the product's own buffer: `add(p, p)` of a one-row product.)
    let view = low.as_view(graph, bias, true);
    // A bias computed from the product would read it a second time, which the
    // product's single reader above rules out.
    if view.as_ref().is_some_and(|v| v.buf == s.buf) {
        return Ok(None);
    }
    Ok(Some(Plan {
        snode,
        consumed,
        bias: view.map(|v| as_bias(&v, rank, n.clone())),
        value: (bias, rank),
    }))
}

/// Whether `value` must be in memory whatever its bias costs: it is a graph
/// output, or an extern call (a product, an attention, a convolution) reads it,
/// directly or through views.
fn needs_memory(graph: &Graph, value: ValueId) -> bool {
    let mut stack = vec![value];
    let mut seen = std::collections::HashSet::new();
    while let Some(v) = stack.pop() {
        if !seen.insert(v) {
            continue;
        }
        if graph.outputs().contains(&v) {
            return true;
        }
        for (user, u) in graph.users(v.node) {
            if u.output != v.output {
                continue;
            }
            let Some(node) = graph.node(user) else {
                continue;
            };
            match &node.op {
                Op::Mm | Op::Bmm | Op::Matmul | Op::Attention { .. } | Op::Conv { .. } => {
                    return true
                }
                op if views::describes(op) && !views::copies(op) => {
                    let outputs = node.outputs.len() as u32;
                    stack.extend((0..outputs).map(|output| ValueId { node: user, output }));
                }
                _ => {}
            }
        }
    }
    false
}

/// Whether `value` is no graph output and `reader` its only reader.
fn only_reader(graph: &Graph, value: ValueId, reader: NodeId) -> bool {
    !graph.outputs().contains(&value)
        && graph
            .users(value.node)
            .all(|(user, u)| user == reader || u.output != value.output)
        && graph.users(value.node).any(|(user, _)| user == reader)
}

/// A bias of `rank` dims (`[N]`, or ones before it) in memory as a `[N]` view.
fn as_bias(view: &View, rank: usize, n: Size) -> View {
    View {
        buf: view.buf,
        shape: vec![n],
        strides: vec![view.strides[rank - 1].clone()],
        offset: view.offset.clone(),
    }
}

fn apply(graph: &Graph, low: &mut Lowered, sum: ValueId, plan: Plan) -> Result<(), Error> {
    let out_shape = meta_of(graph, sum)?.shape;
    let n = out_shape.last().cloned().unwrap_or_default();
    let bias = match plan.bias {
        Some(bias) => bias,
        None => as_bias(&low.realize_view(graph, plan.value.0)?, plan.value.1, n),
    };
    let s = &mut low.snodes[plan.snode];
    let SKind::Extern { op, args } = &mut s.kind else {
        return Err(Error::Internal("a product's node changed kind".into()));
    };
    *op = ExternOp::Addmm;
    args.insert(0, bias);
    s.value = sum;
    s.op_name = "addmm";
    let view = contiguous_view(s.buf, &out_shape);
    for v in plan.consumed {
        low.defs.remove(&v);
    }
    let def = if out_shape == low.snodes[plan.snode].meta.shape {
        Def::Node(plan.snode)
    } else {
        Def::Strided(view)
    };
    low.defs.insert(sum, def);
    Ok(())
}
