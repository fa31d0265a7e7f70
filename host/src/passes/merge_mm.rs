//! Matrix products that share their left operand merge into one, after the
//! concatenation of linear layers that Inductor makes of frozen weights.
//!
//! An attention's query, key and value projections (T5, BERT, ViT, Llama), or a
//! gated MLP's gate and up projections, are products of one activation by
//! several weights. Each product is one library call: about 11 µs of host time
//! on the H100 machine, which bounds a 16-bit model whose kernels take less
//! (`bench/gpu/results/2026-11-26-backend-glue-h100.txt`), and one launch under a
//! CUDA graph. One product by the weights side by side does the same work in
//! one call, at least as fast on the device.
//!
//! For each group of 2-D `mm(a, b_i)` with the same `a`, dtype and `K`, where
//! each `b_i` is a constant (or a view of one) that nothing else reads:
//! - the `b_i` become one constant `[K, ΣN]`, written here once in the layout
//!   the first of them has (a linear layer's weight is read transposed, so its
//!   rows stay rows);
//! - the product of `a` by it is sliced back to each `b_i`'s `N_i` columns, a
//!   strided view of its buffer;
//! - where every product of the group adds a constant bias over its rows (a
//!   linear layer's, directly or after one reshape that keeps the last dim), the
//!   biases become one `[ΣN]` constant added to the merged product, which the
//!   schedule folds into the library's bias epilogue, and each slice is
//!   reshaped as the bias add's result was.
//!
//! A product whose weight another node also reads (a tied embedding) stays as it
//! is: merging it would keep both copies (a bias, small, is copied). Products of
//! weights that are graph inputs (`torch.compile` without freezing) stay as they
//! are too: merging them would copy every weight on every call.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::pad_mm::{constant_source, ConstantView};
use super::{emit, Error, Stats};
use crate::graph::dtype::DType;
use crate::graph::views;
use crate::graph::{Arg, BinaryOp, ConstData, Graph, Node, NodeId, Op, TensorMeta, ValueId};

const PASS: &str = "merge_mm";

/// Merges the products of `g` that share their left operand and read constant
/// right operands.
pub fn run(g: &mut Graph) -> Result<Stats, Error> {
    let _span = tracing::info_span!("merge_mm").entered();
    // By (left operand, dtype, K, with biases): deterministic order.
    let mut groups: BTreeMap<(usize, u32, usize, i64, bool), Vec<Member>> = BTreeMap::new();
    for id in super::topo_order(g, PASS)? {
        if let Some(m) = member(g, id) {
            let key = (
                m.left.node.index(),
                m.left.output,
                m.dtype as usize,
                m.k,
                m.bias.is_some(),
            );
            groups.entry(key).or_default().push(m);
        }
    }
    let mut changed = 0;
    for group in groups.into_values().filter(|g| g.len() > 1) {
        if merge(g, &group)? {
            changed += group.len();
        }
    }
    Ok(Stats { changed })
}

/// One product of a group.
struct Member {
    left: ValueId,
    dtype: DType,
    k: i64,
    n: i64,
    right: ConstantView,
    /// The bias `[N]` (or `[1, N]`) added to the product.
    bias: Option<ConstantView>,
    /// The view between the product and its bias add (a linear layer's reshape
    /// back to the input's rank), as the add's result's shape.
    reshaped: Option<Vec<i64>>,
    /// The value the merged product's slice replaces: the product, or its bias add.
    tail: ValueId,
    /// The nodes the merge leaves without readers.
    dead: Vec<NodeId>,
}

fn member(g: &Graph, id: NodeId) -> Option<Member> {
    let node = g.node(id)?;
    let (Op::Mm, [Arg::Value(left), Arg::Value(right)]) = (&node.op, node.args.as_slice()) else {
        return None;
    };
    let out = node.outputs.first()?;
    let (lm, rm) = (g.meta(*left)?, g.meta(*right)?);
    if lm.rank() != 2 || rm.rank() != 2 || !out.dtype.is_float() {
        return None;
    }
    let mut dead = vec![id];
    dead.extend(sole_chain(g, *right)?);
    let product = ValueId::first(id);
    let mut m = Member {
        left: *left,
        dtype: out.dtype,
        k: rm.shape[0],
        n: rm.shape[1],
        right: constant_source(g, *right)?,
        bias: None,
        reshaped: None,
        tail: product,
        dead,
    };
    if let Some((bias, reshaped, tail, nodes)) = bias_add(g, product, m.n, m.dtype) {
        m.bias = Some(bias);
        m.reshaped = reshaped;
        m.tail = tail;
        m.dead.extend(nodes);
    }
    Some(m)
}

/// Where `product`'s only reader adds a constant bias of `n` elements over its
/// rows (directly, or after one reshape that keeps the last dim): the bias, the
/// reshaped shape, the sum, and the nodes that go with the product.
#[allow(clippy::type_complexity)]
fn bias_add(
    g: &Graph,
    product: ValueId,
    n: i64,
    dtype: DType,
) -> Option<(ConstantView, Option<Vec<i64>>, ValueId, Vec<NodeId>)> {
    let mut user = sole_user(g, product)?;
    let mut reshaped = None;
    let mut nodes = Vec::new();
    let node = g.node(user)?;
    if matches!(node.op, Op::Reshape { .. }) {
        let meta = node.outputs.first()?;
        if meta.shape.last() != Some(&n) {
            return None;
        }
        reshaped = Some(meta.shape.clone());
        nodes.push(user);
        user = sole_user(g, ValueId::first(user))?;
    }
    let add = g.node(user)?;
    let Op::Binary {
        op: BinaryOp::Add,
        alpha,
    } = &add.op
    else {
        return None;
    };
    if alpha.is_some_and(|a| a.to_f64() != 1.0) || add.outputs.first()?.dtype != dtype {
        return None;
    }
    let read = if reshaped.is_some() {
        ValueId::first(*nodes.last()?)
    } else {
        product
    };
    let bias = add
        .args
        .iter()
        .filter_map(Arg::value)
        .find(|v| *v != read)?;
    let bm = g.meta(bias)?;
    let over_rows =
        bm.shape.last() == Some(&n) && bm.shape[..bm.rank() - 1].iter().all(|&d| d == 1);
    if bm.dtype != dtype || bm.rank() > 2 || !over_rows || add.args.len() != 2 {
        return None;
    }
    // A bias is small: one other nodes read too (shared, or merged by `cse`) is
    // copied into the merged one, and stays.
    let source = constant_source(g, bias)?;
    nodes.push(user);
    nodes.extend(chain_to_constant(g, bias));
    Some((source, reshaped, ValueId::first(user), nodes))
}

/// The node that reads `v`, where exactly one does, once, and `v` is no graph output.
fn sole_user(g: &Graph, v: ValueId) -> Option<NodeId> {
    if g.outputs().contains(&v) {
        return None;
    }
    let mut users = g.users(v.node).filter(|(_, u)| u.output == v.output);
    let (user, _) = users.next()?;
    users.next().is_none().then_some(user)
}

/// The nodes from `v` (a constant or a view of one, as `constant_source` finds it)
/// back to the constant, where each is read only by the next (and `v` only once):
/// what merging `v` into a new constant frees.
pub(super) fn sole_chain(g: &Graph, v: ValueId) -> Option<Vec<NodeId>> {
    let nodes = chain_to_constant(g, v);
    // The views on the chain have one output each.
    let sole = |&n: &NodeId| {
        let output = if n == v.node { v.output } else { 0 };
        sole_user(g, ValueId { node: n, output }).is_some()
    };
    nodes.iter().all(sole).then_some(nodes)
}

/// The nodes from `v` back to the constant it views (each removed once unread).
fn chain_to_constant(g: &Graph, v: ValueId) -> Vec<NodeId> {
    let mut nodes = vec![v.node];
    let mut at = v.node;
    while let Some(input) = g
        .node(at)
        .filter(|n| views::describes(&n.op))
        .and_then(|n| n.args.first()?.value())
    {
        nodes.push(input.node);
        at = input.node;
    }
    nodes
}

/// Rewrites one group: the merged constant, product, bias add and slices.
/// Returns false, changing nothing, where the host cannot hold the merged constants.
fn merge(g: &mut Graph, group: &[Member]) -> Result<bool, Error> {
    let first = &group[0];
    let (k, total): (i64, i64) = (first.k, group.iter().map(|m| m.n).sum());
    let line = g.node(first.dead[0]).and_then(|n| n.line);
    let base = g
        .node(first.dead[0])
        .map_or_else(|| "mm".to_string(), |n| n.name.clone());
    // A linear layer's weight is `[N, K]` read as `[K, N]`: keep N-major rows.
    let transposed = first.right.strides == [1, first.k];
    let Some(weights) = columns(group, total, k, transposed, |m| &m.right) else {
        return Ok(false);
    };
    let biases = match first.bias {
        Some(_) => match columns(group, total, 1, false, |m| {
            m.bias.as_ref().unwrap_or(&m.right)
        }) {
            Some(b) => Some(b),
            None => return Ok(false),
        },
        None => None,
    };
    let name = format!("{}_merged", first.right.name);
    let shape = if transposed {
        vec![total, k]
    } else {
        vec![k, total]
    };
    let mut right = constant(g, &name, weights, shape, first.dtype, line);
    if transposed {
        let permute = Op::Permute { dims: vec![1, 0] };
        right = emit(g, PASS, &base, permute, vec![Arg::Value(right)], line)?;
    }
    let mut merged = emit(
        g,
        PASS,
        &base,
        Op::Mm,
        vec![Arg::Value(first.left), Arg::Value(right)],
        line,
    )?;
    if let Some(biases) = biases {
        let name = format!("{}_merged", first.bias.as_ref().map_or("bias", |b| &b.name));
        let bias = constant(g, &name, biases, vec![total], first.dtype, line);
        let add = Op::Binary {
            op: BinaryOp::Add,
            alpha: None,
        };
        merged = emit(
            g,
            PASS,
            &base,
            add,
            vec![Arg::Value(merged), Arg::Value(bias)],
            line,
        )?;
    }
    let mut start = 0;
    for m in group {
        let slice = Op::Slice {
            dim: 1,
            start: Some(start),
            end: Some(start + m.n),
            step: 1,
        };
        start += m.n;
        let mut value = emit(g, PASS, &base, slice, vec![Arg::Value(merged)], line)?;
        if let Some(shape) = &m.reshaped {
            let reshape = Op::Reshape {
                shape: shape.clone(),
                view: false,
            };
            value = emit(g, PASS, &base, reshape, vec![Arg::Value(value)], line)?;
        }
        g.replace_uses(m.tail, value);
        remove_unread(g, &m.dead);
    }
    Ok(true)
}

/// Removes each of `nodes` once nothing reads it (a reader among them first).
pub(super) fn remove_unread(g: &mut Graph, nodes: &[NodeId]) {
    let mut left: Vec<NodeId> = nodes.to_vec();
    while let Some(i) = left.iter().position(|id| g.users(*id).next().is_none()) {
        g.remove_node(left.swap_remove(i));
    }
}

/// A new constant node of `shape` holding `data`.
fn constant(
    g: &mut Graph,
    name: &str,
    data: ConstData,
    shape: Vec<i64>,
    dtype: DType,
    line: Option<u32>,
) -> ValueId {
    let name = g.fresh_name(name);
    let id = g.add_node(Node {
        name,
        op: Op::Constant { data },
        args: vec![],
        outputs: vec![TensorMeta::contiguous(shape, dtype)],
        line,
    });
    ValueId::first(id)
}

/// The group's `[rows, N_i]` operands (`rows` 1: a bias, whose view may have a
/// leading dim of 1) side by side as one `[rows, ΣN]` constant, row-major, or
/// `[ΣN, rows]` where `transposed`, in the operands' encoding where they share
/// one. `None` where the host cannot hold it.
fn columns(
    group: &[Member],
    total: i64,
    rows: i64,
    transposed: bool,
    of: impl Fn(&Member) -> &ConstantView,
) -> Option<ConstData> {
    let size = usize::try_from(rows * total).ok()?;
    // Calls `put(destination, source view, source position)` for every element.
    let visit = |put: &mut dyn FnMut(usize, &ConstantView, usize)| {
        let mut start = 0;
        for m in group {
            let v = of(m);
            for j in 0..m.n {
                for r in 0..rows {
                    let to = if transposed {
                        (start + j) * rows + r
                    } else {
                        r * total + start + j
                    };
                    let index = if v.shape.len() == 1 {
                        vec![j]
                    } else {
                        vec![r, j]
                    };
                    put(to as usize, v, v.position(&index));
                }
            }
            start += m.n;
        }
    };
    let what = || "a merged product's weights".to_string();
    let shared = match &of(&group[0]).data {
        ConstData::Bytes { dtype, .. }
            if group.iter().all(
                |m| matches!(&of(m).data, ConstData::Bytes { dtype: d, .. } if d == dtype),
            ) =>
        {
            Some(*dtype)
        }
        _ => None,
    };
    Some(match shared {
        Some(dtype) => {
            let each = dtype.size_bytes();
            let mut out = crate::memory::try_vec::<u8>(what, size.checked_mul(each)?).ok()?;
            out.resize(size * each, 0);
            visit(&mut |to, v, from| {
                if let ConstData::Bytes { bytes, .. } = &v.data {
                    if let Some(src) = bytes.get(from * each..(from + 1) * each) {
                        out[to * each..(to + 1) * each].copy_from_slice(src);
                    }
                }
            });
            ConstData::Bytes {
                dtype,
                bytes: Arc::from(out),
            }
        }
        None => {
            let mut out = crate::memory::try_vec::<f64>(what, size).ok()?;
            out.resize(size, 0.0);
            visit(&mut |to, v, from| out[to] = v.data.get(from));
            ConstData::Values(Arc::from(out))
        }
    })
}
