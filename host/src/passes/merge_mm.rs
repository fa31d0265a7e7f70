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
//! is: merging it would keep both copies (a bias, small, is copied).
//!
//! Float32 weights that are graph inputs (`torch.compile` without freezing hands
//! a module's parameters over so), each read as it is or transposed, merge
//! through a concatenation made on every call, as do their biases. That copy is
//! taken only where it moves no more bytes than the merged product reads and
//! writes (`M·(K + ΣN) ≥ K·ΣN` for `M` rows): a float32 product of that many
//! rows spends far longer on arithmetic than the copy on memory, and one library
//! call for the group keeps the device's units fuller than several narrower ones.
//! On the H100 (`bench/gpu/results/2026-11-26-auto-graphs-h100.txt`), ViT-B/16 at
//! batch 8 through `torch.compile` went from 8.85 to 8.48 ms a call under CUDA
//! graphs (its three products of 768 columns one of 2304), BERT-base from 19.19
//! to 18.81. In 16 bits the tensor cores make the product's arithmetic as short
//! as the copy: the Llama-style model's gate and up projections took 2.48 ms
//! apart and 2.60 merged, so 16-bit inputs stay apart. A decoding step's few rows
//! keep their products apart too, where the copy would double the weights'
//! traffic.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::pad_mm::{constant_source, ConstantView};
use super::{emit, Error, Stats};
use crate::graph::dtype::DType;
use crate::graph::sym::Size;
use crate::graph::views;
use crate::graph::{Arg, BinaryOp, ConstData, Graph, Node, NodeId, Op, TensorMeta, ValueId};

const PASS: &str = "merge_mm";

/// Merges the products of `g` that share their left operand and read constant
/// right operands.
pub fn run(g: &mut Graph) -> Result<Stats, Error> {
    let _span = tracing::info_span!("merge_mm").entered();
    // By (left operand, dtype, K, with biases, the operands' kind): deterministic order.
    type Key = (usize, u32, usize, i64, bool, Option<bool>);
    let mut groups: BTreeMap<Key, Vec<Member>> = BTreeMap::new();
    for id in super::topo_order(g, PASS)? {
        if let Some(m) = member(g, id) {
            let key = (
                m.left.node.index(),
                m.left.output,
                m.dtype as usize,
                m.k,
                m.bias.is_some(),
                m.right.input_transposed(),
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

/// A product's right operand or bias: a constant (or a view of one), or a graph
/// input read as it is or transposed (`[N, K]` read as `[K, N]`).
enum Operand {
    Constant(ConstantView),
    Input { value: ValueId, transposed: bool },
}

impl Operand {
    /// For an input, whether it is read transposed; `None` for a constant.
    fn input_transposed(&self) -> Option<bool> {
        match self {
            Operand::Constant(_) => None,
            Operand::Input { transposed, .. } => Some(*transposed),
        }
    }
}

/// One product of a group.
struct Member {
    left: ValueId,
    dtype: DType,
    k: i64,
    n: i64,
    right: Operand,
    /// The bias `[N]` (or `[1, N]`) added to the product.
    bias: Option<Operand>,
    /// The view between the product and its bias add (a linear layer's reshape
    /// back to the input's rank), as the add's result's shape.
    reshaped: Option<Vec<Size>>,
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
    // The activation's rows may be symbolic (a dynamic batch and sequence).
    let (lm, rm) = (g.meta(*left)?, g.fixed_meta(*right)?);
    if lm.rank() != 2 || rm.rank() != 2 || !out.dtype.is_float() {
        return None;
    }
    let mut dead = vec![id];
    let right = match constant_source(g, *right) {
        Some(view) => {
            dead.extend(sole_chain(g, *right)?);
            Operand::Constant(view)
        }
        None => {
            let (value, transposed, views) = input_source(g, *right)?;
            dead.extend(views);
            Operand::Input { value, transposed }
        }
    };
    let product = ValueId::first(id);
    let mut m = Member {
        left: *left,
        dtype: out.dtype,
        k: rm.shape[0],
        n: rm.shape[1],
        right,
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

/// `v` as a graph input of rank 2 read as it is (`[K, N]`, row-major) or
/// transposed (a permute of an `[N, K]` input that only the product reads):
/// the input, whether transposed, and the view between.
fn input_source(g: &Graph, v: ValueId) -> Option<(ValueId, bool, Vec<NodeId>)> {
    let row_major = |v: ValueId| {
        let node = g.node(v.node)?;
        let meta = g.fixed_meta(v)?;
        (matches!(node.op, Op::Input { .. })
            && meta.rank() == 2
            && crate::graph::shape::is_dense(&meta.shape, &meta.strides))
        .then_some(v)
    };
    if let Some(input) = row_major(v) {
        return Some((input, false, vec![]));
    }
    let node = g.node(v.node)?;
    let (Op::Permute { dims }, [Arg::Value(input)]) = (&node.op, node.args.as_slice()) else {
        return None;
    };
    if dims != &[1, 0] || sole_user(g, v).is_none() {
        return None;
    }
    Some((row_major(*input)?, true, vec![v.node]))
}

/// Where `product`'s only reader adds a bias of `n` elements over its rows
/// (directly, or after one reshape that keeps the last dim), a constant or an
/// input of `[n]`: the bias, the reshaped shape, the sum, and the nodes that go
/// with the product.
#[allow(clippy::type_complexity)]
fn bias_add(
    g: &Graph,
    product: ValueId,
    n: i64,
    dtype: DType,
) -> Option<(Operand, Option<Vec<Size>>, ValueId, Vec<NodeId>)> {
    let mut user = sole_user(g, product)?;
    let mut reshaped = None;
    let mut nodes = Vec::new();
    let node = g.node(user)?;
    if matches!(node.op, Op::Reshape { .. }) {
        let meta = node.outputs.first()?;
        if meta.shape.last().is_none_or(|d| *d != n) {
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
    let bm = g.fixed_meta(bias)?;
    let over_rows =
        bm.shape.last() == Some(&n) && bm.shape[..bm.rank() - 1].iter().all(|&d| d == 1);
    if bm.dtype != dtype || bm.rank() > 2 || !over_rows || add.args.len() != 2 {
        return None;
    }
    // A bias is small: one other nodes read too (shared, or merged by `cse`) is
    // copied into the merged one, and stays.
    nodes.push(user);
    let source = match constant_source(g, bias) {
        Some(view) => {
            nodes.extend(chain_to_constant(g, bias));
            Operand::Constant(view)
        }
        None if matches!(g.node(bias.node)?.op, Op::Input { .. }) && bm.rank() == 1 => {
            Operand::Input {
                value: bias,
                transposed: false,
            }
        }
        None => return None,
    };
    Some((source, reshaped, ValueId::first(user), nodes))
}

/// The node that reads `v`, where exactly one does, once, and `v` is no graph output.
pub(super) fn sole_user(g: &Graph, v: ValueId) -> Option<NodeId> {
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

/// Rewrites one group: the merged weights (and biases), product, bias add and
/// slices. Returns false, changing nothing, where the group does not merge: the
/// host cannot hold the merged constants, or inputs would be copied for too few
/// rows.
fn merge(g: &mut Graph, group: &[Member]) -> Result<bool, Error> {
    let first = &group[0];
    let (k, total): (i64, i64) = (first.k, group.iter().map(|m| m.n).sum());
    let line = g.node(first.dead[0]).and_then(|n| n.line);
    let base = g
        .node(first.dead[0])
        .map_or_else(|| "mm".to_string(), |n| n.name.clone());
    let operands = match first.right {
        Operand::Constant(_) => merged_constants(g, group, (k, total), &base, line)?,
        Operand::Input { transposed, .. } => {
            // Decided at the rows' hint.
            let rows = g.meta(first.left).map_or(0, |m| m.shape[0].hint());
            let copied_once = rows.saturating_mul(k + total) >= k.saturating_mul(total);
            if copied_once && first.dtype == DType::Float32 {
                merged_inputs(g, group, transposed, &base, line)?
            } else {
                None
            }
        }
    };
    let Some((right, bias)) = operands else {
        return Ok(false);
    };
    let mut merged = emit(
        g,
        PASS,
        &base,
        Op::Mm,
        vec![Arg::Value(first.left), Arg::Value(right)],
        line,
    )?;
    if let Some(bias) = bias {
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
            start: Some(crate::graph::sym::Size::from(start)),
            end: Some(crate::graph::sym::Size::from(start + m.n)),
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

/// The constant view of each of the group's operands `of` gives, where all are
/// constants.
fn constant_views<'a>(
    group: &'a [Member],
    of: impl Fn(&'a Member) -> Option<&'a Operand>,
) -> Option<Vec<&'a ConstantView>> {
    group
        .iter()
        .map(|m| match of(m)? {
            Operand::Constant(view) => Some(view),
            Operand::Input { .. } => None,
        })
        .collect()
}

/// The `[K, ΣN]` merged weight of a group of constant weights, a new constant
/// written here (read through a permute where the first weight is a linear
/// layer's `[N, K]`, whose rows stay rows), and the `[ΣN]` merged bias. `None`
/// where the host cannot hold them, or a bias is not a constant.
fn merged_constants(
    g: &mut Graph,
    group: &[Member],
    (k, total): (i64, i64),
    base: &str,
    line: Option<u32>,
) -> Result<Option<(ValueId, Option<ValueId>)>, Error> {
    let first = &group[0];
    let Some(rights) = constant_views(group, |m| Some(&m.right)) else {
        return Ok(None);
    };
    let transposed = rights[0].strides == [1, first.k];
    let Some(weights) = columns(&rights, total, k, transposed) else {
        return Ok(None);
    };
    let biases = match first.bias {
        Some(_) => {
            let Some(views) = constant_views(group, |m| m.bias.as_ref()) else {
                return Ok(None);
            };
            match columns(&views, total, 1, false) {
                Some(b) => Some((b, views[0].name.clone())),
                None => return Ok(None),
            }
        }
        None => None,
    };
    let name = format!("{}_merged", rights[0].name);
    let shape = if transposed {
        vec![total, k]
    } else {
        vec![k, total]
    };
    let mut right = constant(g, &name, weights, shape, first.dtype, line);
    if transposed {
        let permute = Op::Permute { dims: vec![1, 0] };
        right = emit(g, PASS, base, permute, vec![Arg::Value(right)], line)?;
    }
    let bias = biases.map(|(data, name)| {
        constant(
            g,
            &format!("{name}_merged"),
            data,
            vec![total],
            first.dtype,
            line,
        )
    });
    Ok(Some((right, bias)))
}

/// The `[K, ΣN]` merged weight of a group of input weights, their concatenation
/// on every call (`[N_i, K]` inputs concatenated along their rows and read
/// transposed, or `[K, N_i]` inputs along their columns), and the `[ΣN]`
/// concatenation of their biases where those are inputs too. `None` where the
/// biases are of mixed kinds.
fn merged_inputs(
    g: &mut Graph,
    group: &[Member],
    transposed: bool,
    base: &str,
    line: Option<u32>,
) -> Result<Option<(ValueId, Option<ValueId>)>, Error> {
    let input = |o: Option<&Operand>| match o {
        Some(Operand::Input { value, .. }) => Some(Arg::Value(*value)),
        _ => None,
    };
    let Some(weights) = group
        .iter()
        .map(|m| input(Some(&m.right)))
        .collect::<Option<Vec<Arg>>>()
    else {
        return Ok(None);
    };
    let biases = match group[0].bias {
        Some(_) => match group
            .iter()
            .map(|m| input(m.bias.as_ref()))
            .collect::<Option<Vec<Arg>>>()
        {
            Some(biases) => Some(biases),
            None => return Ok(None),
        },
        None => None,
    };
    let dim = if transposed { 0 } else { 1 };
    let mut right = emit(g, PASS, base, Op::Cat { dim }, weights, line)?;
    if transposed {
        let permute = Op::Permute { dims: vec![1, 0] };
        right = emit(g, PASS, base, permute, vec![Arg::Value(right)], line)?;
    }
    let bias = match biases {
        Some(biases) => Some(emit(g, PASS, base, Op::Cat { dim: 0 }, biases, line)?),
        None => None,
    };
    Ok(Some((right, bias)))
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

/// The `[rows, N_i]` constant views `parts` (`rows` 1: biases, whose views may
/// have a leading dim of 1) side by side as one `[rows, ΣN]` constant,
/// row-major, or `[ΣN, rows]` where `transposed`, in the parts' encoding where
/// they share one. `None` where the host cannot hold it.
fn columns(parts: &[&ConstantView], total: i64, rows: i64, transposed: bool) -> Option<ConstData> {
    let size = usize::try_from(rows * total).ok()?;
    // Calls `put(destination, source view, source position)` for every element.
    let visit = |put: &mut dyn FnMut(usize, &ConstantView, usize)| {
        let mut start = 0;
        for v in parts {
            let n = v.shape.last().copied().unwrap_or(1);
            for j in 0..n {
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
            start += n;
        }
    };
    let what = || "a merged product's weights".to_string();
    let shared = match &parts.first()?.data {
        ConstData::Bytes { dtype, .. }
            if parts
                .iter()
                .all(|v| matches!(&v.data, ConstData::Bytes { dtype: d, .. } if d == dtype)) =>
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
