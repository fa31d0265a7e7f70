//! Lowering: every graph value becomes a definition the kernels can read.
//!
//! - Inputs and constants are buffers; views of a buffer stay strided views
//!   (no copy); one-element constants become literals.
//! - Pointwise ops are *inline*: a kernel that reads them recomputes them from
//!   their operands, so chains of pointwise ops fuse by construction.
//! - Reductions and matrix products are scheduler nodes ([`SNode`]); so is a
//!   pointwise value that must exist in memory (a graph output, an operand of a
//!   matrix product that is no strided view, or an inline chain grown too deep),
//!   and one that the realization rule ([`REALIZE_READS_THRESHOLD`],
//!   [`REALIZE_ACC_READS_THRESHOLD`]) computes once rather than have every
//!   reader recompute it.
//!
//! Lowering decides *what* is computed; `fuse.rs` decides which scheduler nodes
//! share a kernel.

mod epilogue;
mod matmul;

use std::collections::HashMap;

use super::ids::{entity_id, IdVec};
use super::index::{contiguous_sizes, hints, sizes, Size};
use super::ir::{BufferId, ExternOp, ReduceKind, View};
use super::Error;
use crate::graph::dtype::DType;
use crate::graph::ir::{Arg, FixedMeta, Graph, NodeId, TensorMeta, ValueId};
use crate::graph::ops::{Bound, ConstData, Op, ReduceOp, Scalar};
use crate::graph::shape::{contiguous_strides, wrap_dim_set};
use crate::graph::sym::Symbols;
use crate::graph::views;

/// The deepest inline chain before a value is computed into memory instead:
/// bounds both the size of one kernel's expression and the recursion of the
/// code that builds it.
pub const MAX_INLINE_DEPTH: u32 = 24;

/// A pointwise value read by more than one node (through views) is computed
/// into memory once its expression reads more than this many distinct buffers.
///
/// Inline, every kernel that reads the value re-reads all `b` of those
/// buffers; in memory, the kernel that computes it reads them once and writes
/// the value, and every other reader loads one buffer. With two readers in
/// different kernels that is `2b` accesses against `b + 2`: even at `b = 2`
/// and a saving from `b = 3` on, and the saving compounds along a chain, where
/// an inline value makes the next one's expression read its buffers too. The
/// residual stream of a transformer is that chain: `h = h_prev + branch`,
/// read by a norm's reductions and by the next residual add, which land in
/// different kernels (a matrix product runs between them); left inline, it
/// makes the k-th norm re-read every earlier branch. Readers in one kernel
/// share their loads and `fuse.rs` puts the value's node in the first
/// reader's kernel, whose store is dropped when no other kernel reads it, so
/// realizing a value whose readers all fuse costs nothing.
///
/// Inductor's `realize_reads_threshold` (4) is the same rule, counting a
/// value's reads per index rather than per buffer. It is lower here because
/// Kiln adds a linear layer's bias in a kernel rather than in the matrix
/// product: `h_prev + mm + bias` reads three buffers, so with 2 the running
/// sum is stored every layer, by the norm kernel that first computes it (as
/// Inductor's fused norm kernels do), and a sum of two buffers every other.
pub const REALIZE_READS_THRESHOLD: usize = 2;

/// Any pointwise value whose expression reads more than this many distinct
/// buffers is computed into memory, however many nodes read it: Inductor's
/// `realize_acc_reads_threshold`. It bounds what one kernel loads when many
/// branches, each with few reads, converge on one value (a wide sum or `cat`).
pub const REALIZE_ACC_READS_THRESHOLD: usize = 8;

/// A scheduler node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SNodeId(pub u32);
entity_id!(SNodeId);

/// How a value is read.
#[derive(Clone, Debug, PartialEq)]
pub enum Def {
    /// A strided view of a buffer.
    Strided(View),
    /// Recomputed from its node's operands wherever it is read.
    Inline {
        /// The node computing it.
        node: NodeId,
        /// Which output of the node.
        output: u32,
        /// Inline chain depth below it.
        depth: u32,
    },
    /// A one-element constant, folded into expressions.
    Literal {
        /// The value.
        value: f64,
    },
    /// The value of a scheduler node.
    Node(SNodeId),
}

/// What a scheduler node computes.
#[derive(Clone, Debug, PartialEq)]
pub enum SKind {
    /// The inline value `value`, computed into memory.
    Pointwise {
        /// The value (its definition is inline).
        value: ValueId,
    },
    /// A reduction of `input` over `dims`.
    Reduction {
        /// The value reduced.
        input: ValueId,
        /// What it computes.
        kind: ReduceKind,
        /// Reduced dims of `input`, sorted.
        dims: Vec<usize>,
        /// Divide the sum by this (a mean).
        divisor: Option<i64>,
    },
    /// `index_copy` into state, in place: the kernel stores `source` (an inline
    /// value, iterated over its own shape) into `target`, the state's whole buffer,
    /// at `index[i]` along `dim` (the node's buffer is `target`'s, which its value
    /// is a view of).
    Scatter {
        /// The values copied.
        source: ValueId,
        /// Where along `dim` each of `source`'s slices goes (1-D integers).
        index: ValueId,
        /// The dim of `target` indexed.
        dim: usize,
        /// The state input's buffer, whole.
        target: View,
    },
    /// A matrix product in the device's library.
    Extern {
        /// Which product.
        op: ExternOp,
        /// Its operands.
        args: Vec<View>,
    },
}

/// A scheduler node: something computed into a buffer by a kernel or a call.
#[derive(Clone, Debug, PartialEq)]
pub struct SNode {
    /// What it computes.
    pub kind: SKind,
    /// The graph value it defines.
    pub value: ValueId,
    /// Its output shape (the reduction result with `keepdim` as the graph has it);
    /// sizes may be symbolic.
    pub meta: TensorMeta,
    /// The (contiguous) buffer it writes when its value is needed in memory.
    pub buf: BufferId,
    /// A short op name for kernel names.
    pub op_name: &'static str,
}

/// The result of lowering.
#[derive(Debug, Default)]
pub struct Lowered {
    /// How each graph value is read.
    pub defs: HashMap<ValueId, Def>,
    /// Scheduler nodes, in a topological order.
    pub snodes: IdVec<SNodeId, SNode>,
    /// Buffers: graph inputs and constants first, then one per scheduler node.
    pub buffers: IdVec<BufferId, super::ir::Buffer>,
    /// The graph's input buffers, in order.
    pub inputs: Vec<BufferId>,
    /// The graph's outputs.
    pub outputs: Vec<View>,
    /// The view of its indexed operand that each indexing node (`index`, `gather`)
    /// reads through its index values: always in memory.
    pub sources: HashMap<NodeId, View>,
    /// The distinct buffers each inline value's expression reads, sorted (the
    /// realization rule's measure).
    inline_reads: HashMap<ValueId, Vec<BufferId>>,
    /// A product's bias add may become the product's epilogue
    /// (`Options::bias_epilogue`).
    bias_epilogue: bool,
    /// A convolution takes channels-last operands as they are and answers in
    /// channels-last (`Options::conv_channels_last`).
    conv_channels_last: bool,
    /// An `index_copy` into state may write it in place (`Options::state_scatter`).
    state_scatter: bool,
}

fn contiguous_view(buf: BufferId, shape: &[Size]) -> View {
    View {
        buf,
        shape: shape.to_vec(),
        strides: contiguous_sizes(shape),
        offset: Size::from(0),
    }
}

impl Lowered {
    fn add_buffer(
        &mut self,
        name: &str,
        meta: &TensorMeta,
        kind: super::ir::BufferKind,
    ) -> BufferId {
        self.buffers.push(super::ir::Buffer {
            name: name.to_string(),
            dtype: meta.dtype,
            shape: meta.shape.clone(),
            strides: contiguous_sizes(&meta.shape),
            kind,
        })
    }

    fn add_snode(
        &mut self,
        graph: &Graph,
        value: ValueId,
        kind: SKind,
        op_name: &'static str,
    ) -> Result<SNodeId, Error> {
        let meta = meta_of(graph, value)?.clone();
        let name = node_of(graph, value.node)?.name.clone();
        let buf = self.add_buffer(&name, &meta, super::ir::BufferKind::Computed);
        let id = self.snodes.push(SNode {
            kind,
            value,
            meta,
            buf,
            op_name,
        });
        self.defs.insert(value, Def::Node(id));
        Ok(id)
    }

    /// The value as a strided view of a buffer, if it is one. With
    /// `through_nodes`, a scheduler node's value counts too (its buffer is
    /// contiguous); without, only inputs, constants and extern results do, so
    /// that views of a node in the same kernel stay index maps over its value.
    pub fn as_view(&self, graph: &Graph, value: ValueId, through_nodes: bool) -> Option<View> {
        match self.defs.get(&value)? {
            Def::Strided(v) => Some(v.clone()),
            Def::Node(n) if through_nodes => {
                let s = &self.snodes[*n];
                Some(contiguous_view(s.buf, &s.meta.shape))
            }
            Def::Node(_) => None,
            Def::Inline { node, output, .. } => {
                let node = graph.node(*node)?;
                if !views::describes(&node.op) {
                    return None;
                }
                let src = node.args.first()?.value()?;
                let base = self.as_view(graph, src, through_nodes)?;
                let view = view_of_view(&node.op, &base, *output, graph.symbols())?;
                // The graph's metadata and the view agree on a validated graph.
                (Some(&view.shape) == node.outputs.get(*output as usize).map(|m| &m.shape))
                    .then_some(view)
            }
            Def::Literal { .. } => None,
        }
    }

    /// The value as a strided view, computing it into memory first if needed.
    fn realize_view(&mut self, graph: &Graph, value: ValueId) -> Result<View, Error> {
        if let Some(v) = self.as_view(graph, value, true) {
            return Ok(v);
        }
        let id = self.add_snode(graph, value, SKind::Pointwise { value }, "copy")?;
        let s = &self.snodes[id];
        Ok(contiguous_view(s.buf, &s.meta.shape))
    }
}

/// The strided view output `output` of view op `op` makes of `base`, if
/// strides can express it (`graph::views` describes every view once).
fn view_of_view(op: &Op, base: &View, output: u32, symbols: &Symbols) -> Option<View> {
    let map = views::view_map(op, &base.shape, output, symbols).ok()?;
    let (strides, offset) = map.restride(&base.strides, &base.offset)?;
    Some(View {
        buf: base.buf,
        shape: map.out_shape,
        strides,
        offset,
    })
}

fn node_of(graph: &Graph, id: NodeId) -> Result<&crate::graph::ir::Node, Error> {
    graph
        .node(id)
        .ok_or_else(|| Error::Internal(format!("node {id:?} vanished during lowering")))
}

/// Value `v`'s metadata (sizes that may be symbolic).
fn meta_of(graph: &Graph, v: ValueId) -> Result<TensorMeta, Error> {
    graph
        .meta(v)
        .cloned()
        .ok_or_else(|| Error::Internal(format!("value {v:?} has no metadata")))
}

/// Value `v`'s metadata where its sizes are integers; a lowering rule that takes
/// only those refuses a symbolic value by name (`node`), with what to do.
fn fixed_meta_of(graph: &Graph, node: NodeId, v: ValueId) -> Result<FixedMeta, Error> {
    let meta = meta_of(graph, v)?;
    meta.fixed().ok_or_else(|| Error::Unsupported {
        node: graph
            .node(node)
            .map_or_else(String::new, |n| n.name.clone()),
        what: format!(
            "`{}` over symbolic sizes {:?} is not scheduled yet; compile at one size \
             (--specialize)",
            graph.node(node).map_or("?", |n| n.op.name()),
            meta.shape
        ),
    })
}

fn first_value(graph: &Graph, id: NodeId, i: usize) -> Result<ValueId, Error> {
    let node = node_of(graph, id)?;
    node.args
        .get(i)
        .and_then(Arg::value)
        .ok_or_else(|| Error::Unsupported {
            node: node.name.clone(),
            what: format!("`{}` without a tensor operand {i}", node.op.name()),
        })
}

/// The graph's output values.
type Outputs = std::collections::HashSet<ValueId>;

/// Lowers a validated graph (after the passes): every node in topological order,
/// then the graph's outputs as views.
pub fn lower(graph: &Graph) -> Result<Lowered, Error> {
    lower_with(graph, &super::Options::default())
}

/// [`lower`] for a device: bias adds of products folded into the products
/// (`ExternOp::Addmm`) where `options.bias_epilogue`, convolutions in
/// channels-last where `options.conv_channels_last`.
pub fn lower_with(graph: &Graph, options: &super::Options) -> Result<Lowered, Error> {
    let mut low = Lowered {
        bias_epilogue: options.bias_epilogue,
        conv_channels_last: options.conv_channels_last,
        state_scatter: options.state_scatter,
        ..Lowered::default()
    };
    let outputs: Outputs = graph.outputs().iter().copied().collect();
    let order = graph
        .topo_order()
        .map_err(|n| Error::Internal(format!("cycle at node {n:?}")))?;
    for id in order {
        lower_node(graph, &mut low, &outputs, id)?;
    }
    for &out in graph.outputs() {
        let view = match low.as_view(graph, out, true) {
            Some(v) => v,
            None => {
                let id = low.add_snode(graph, out, SKind::Pointwise { value: out }, "pointwise")?;
                let s = &low.snodes[id];
                contiguous_view(s.buf, &s.meta.shape)
            }
        };
        low.outputs.push(view);
    }
    Ok(low)
}

/// Lowers node `id`, whose operands are lowered: one rule per kind of op.
fn lower_node(
    graph: &Graph,
    low: &mut Lowered,
    outputs: &Outputs,
    id: NodeId,
) -> Result<(), Error> {
    let node = node_of(graph, id)?;
    let v0 = ValueId::first(id);
    match &node.op {
        Op::Input { index } => lower_input(graph, low, id, *index),
        Op::Constant { data } => lower_constant(graph, low, outputs, id, data),
        Op::Reduce { op, dims, .. } => lower_reduce(graph, low, id, *op, dims.as_deref()),
        Op::Mm | Op::Bmm | Op::Matmul => matmul::lower_matmul(graph, low, id),
        Op::Conv {
            stride,
            padding,
            dilation,
            groups,
            bias: false,
        } => {
            let op = ExternOp::Conv {
                stride: stride.clone(),
                padding: padding.clone(),
                dilation: dilation.clone(),
                groups: *groups,
            };
            lower_conv(graph, low, id, op)
        }
        Op::Attention {
            mask,
            causal,
            scale,
            ..
        } => lower_attention(graph, low, outputs, id, (*mask, *causal, *scale)),
        Op::Full { value, .. } => {
            let value = meta_of(graph, v0)?.dtype.round(value.to_f64());
            low.defs.insert(v0, Def::Literal { value });
            literal_output(graph, low, outputs, v0)
        }
        Op::Arange { .. } => lower_arange(graph, low, id),
        Op::IndexCopy { dim } => lower_index_copy(graph, low, id, *dim),
        Op::GroupedMm => lower_extern(graph, low, id, ExternOp::GroupedMm),
        Op::SortRuns { descending, run } => {
            let op = ExternOp::SortRuns {
                descending: *descending,
                run: *run,
            };
            lower_extern(graph, low, id, op)
        }
        Op::MergeRuns { descending, run } => {
            let op = ExternOp::MergeRuns {
                descending: *descending,
                run: *run,
            };
            lower_extern(graph, low, id, op)
        }
        _ if low.bias_epilogue && epilogue::fold_bias(graph, low, id)? => Ok(()),
        op if op.reads_inline() => lower_inline(graph, low, outputs, id),
        other => Err(Error::Unsupported {
            node: node.name.clone(),
            what: format!(
                "`{}` must be decomposed by the passes before scheduling",
                other.name()
            ),
        }),
    }
}

/// Graph input `index`: a buffer, read as a contiguous view.
fn lower_input(graph: &Graph, low: &mut Lowered, id: NodeId, index: usize) -> Result<(), Error> {
    let node = node_of(graph, id)?;
    let v0 = ValueId::first(id);
    let meta = meta_of(graph, v0)?.clone();
    let buf = low.add_buffer(
        &node.name,
        &meta,
        super::ir::BufferKind::Input {
            index,
            index_bound: graph.index_bound(id),
        },
    );
    if low.inputs.len() <= index {
        low.inputs.resize(index + 1, buf);
    }
    low.inputs[index] = buf;
    low.defs
        .insert(v0, Def::Strided(contiguous_view(buf, &meta.shape)));
    Ok(())
}

/// A constant: a literal when it has one value, else a buffer of the program.
fn lower_constant(
    graph: &Graph,
    low: &mut Lowered,
    outputs: &Outputs,
    id: NodeId,
    data: &ConstData,
) -> Result<(), Error> {
    let node = node_of(graph, id)?;
    let v0 = ValueId::first(id);
    let meta = meta_of(graph, v0)?.clone();
    match data.single() {
        Some(value) => {
            low.defs.insert(v0, Def::Literal { value });
            literal_output(graph, low, outputs, v0)?;
        }
        None => constant_buffer(low, &node.name, v0, &meta, data.clone()),
    }
    Ok(())
}

/// A reduction: a scheduler node (a mean is a sum with a divisor).
fn lower_reduce(
    graph: &Graph,
    low: &mut Lowered,
    id: NodeId,
    op: ReduceOp,
    dims: Option<&[i64]>,
) -> Result<(), Error> {
    let node = node_of(graph, id)?;
    let input = first_value(graph, id, 0)?;
    let in_meta = meta_of(graph, input)?;
    let dims = wrap_dim_set(dims, in_meta.rank()).map_err(|e| Error::Unsupported {
        node: node.name.clone(),
        what: e.to_string(),
    })?;
    let (kind, divisor) = match op {
        ReduceOp::Sum => (ReduceKind::Sum, None),
        ReduceOp::Mean => {
            let reduced: Vec<Size> = dims.iter().map(|&d| in_meta.shape[d].clone()).collect();
            let count =
                super::index::product(&reduced)
                    .as_const()
                    .ok_or_else(|| Error::Unsupported {
                        node: node.name.clone(),
                        what: format!(
                            "a mean over symbolic sizes {reduced:?} is not scheduled yet; compile \
                         at one size (--specialize)"
                        ),
                    })?;
            (ReduceKind::Sum, Some(count))
        }
        ReduceOp::Amax => (ReduceKind::Max, None),
        ReduceOp::Amin => (ReduceKind::Min, None),
        // `decompose` rewrites these as counts.
        ReduceOp::Any | ReduceOp::All => {
            return Err(Error::Unsupported {
                node: node.name.clone(),
                what: "any/all reach lowering only undecomposed".into(),
            })
        }
    };
    let name = match op {
        ReduceOp::Sum => "sum",
        ReduceOp::Mean => "mean",
        ReduceOp::Amax => "amax",
        ReduceOp::Amin => "amin",
        ReduceOp::Any => "any",
        ReduceOp::All => "all",
    };
    for value in broadcast_into_rows(graph, low, input, &dims) {
        low.realize_view(graph, value)?;
    }
    let kind = SKind::Reduction {
        input,
        kind,
        dims,
        divisor,
    };
    low.add_snode(graph, ValueId::first(id), kind, name)?;
    Ok(())
}

/// The inline operands of a reduction's elementwise input that are broadcast
/// across the reduction's rows (`unsqueeze`d at a dim it keeps) and compute
/// something: inline, each would be computed again for every row (a product of
/// one row, `few_rows`, recomputing a layer norm or a gelu for each of its
/// thousands of output columns). In memory each is computed once, where its
/// producer's kernel can store it.
fn broadcast_into_rows(
    graph: &Graph,
    low: &Lowered,
    input: ValueId,
    dims: &[usize],
) -> Vec<ValueId> {
    let Some(node) = graph.node(input.node) else {
        return vec![];
    };
    if !matches!(node.op, Op::Binary { .. })
        || !matches!(low.defs.get(&input), Some(Def::Inline { .. }))
    {
        return vec![];
    }
    let rank = node.outputs.first().map_or(0, |m| m.rank());
    node.args
        .iter()
        .filter_map(Arg::value)
        .filter_map(|operand| {
            let view = graph.node(operand.node)?;
            let Op::Unsqueeze { dim } = view.op else {
                return None;
            };
            let dim = crate::graph::shape::wrap_dim(dim, rank).ok()?;
            let source = view.args.first()?.value()?;
            (!dims.contains(&dim) && computes(graph, low, source)).then_some(source)
        })
        .collect()
}

/// Whether inline `value`'s expression does arithmetic, not only loads, views and casts.
fn computes(graph: &Graph, low: &Lowered, value: ValueId) -> bool {
    let mut stack = vec![value];
    let mut seen = std::collections::HashSet::new();
    while let Some(v) = stack.pop() {
        if !seen.insert(v) || !matches!(low.defs.get(&v), Some(Def::Inline { .. })) {
            continue;
        }
        let Some(node) = graph.node(v.node) else {
            continue;
        };
        if !views::describes(&node.op) && !matches!(node.op, Op::Cast { .. }) {
            return true;
        }
        stack.extend(node.args.iter().filter_map(Arg::value));
    }
    false
}

/// A convolution without bias: an extern call on contiguous operands, what every
/// library's convolution takes (a strided one is copied first).
///
/// Where the target's convolution takes channels-last operands
/// (`conv_channels_last`: ATen's), an operand dense in channels-last order is
/// taken as it is too, and the result is planned in channels-last when either
/// operand is, as ATen answers on cuDNN (`cudnn_conv_suggest_memory_format`),
/// so that the wrapper binds the library's result without a copy.
fn lower_conv(graph: &Graph, low: &mut Lowered, id: NodeId, op: ExternOp) -> Result<(), Error> {
    // A library's convolution takes any batch; shape inference takes no other
    // symbolic size for it.
    let meta = meta_of(graph, ValueId::first(id))?;
    if meta.shape.iter().skip(1).any(|d| d.as_const().is_none()) {
        // Refused, naming the node and its sizes.
        fixed_meta_of(graph, id, ValueId::first(id))?;
    }
    let mut args = vec![];
    let mut channels_last = false;
    for i in 0..2 {
        let value = first_value(graph, id, i)?;
        let view = if low.conv_channels_last {
            realize_under_views(graph, low, value)?
        } else {
            low.realize_view(graph, value)?
        };
        let last =
            low.conv_channels_last && is_channels_last(&hints(&view.shape), &hints(&view.strides));
        channels_last |= last;
        let dense = last || view.strides == contiguous_sizes(&view.shape);
        args.push(if dense {
            view
        } else {
            let sid = low.add_snode(graph, value, SKind::Pointwise { value }, "copy")?;
            let s = &low.snodes[sid];
            contiguous_view(s.buf, &s.meta.shape)
        });
    }
    let kind = SKind::Extern { op, args };
    let v0 = ValueId::first(id);
    let sid = low.add_snode(graph, v0, kind, "convolution")?;
    if channels_last {
        let s = &low.snodes[sid];
        // Channels-last strides never read the batch, which alone may be symbolic.
        let (buf, shape) = (s.buf, s.meta.shape.clone());
        let strides = sizes(&channels_last_strides(&hints(&shape)));
        low.buffers[buf].strides = strides.clone();
        // Readers see the buffer through its strides, as they see an input's.
        let view = View {
            buf,
            shape,
            strides,
            offset: Size::from(0),
        };
        low.defs.insert(v0, Def::Strided(view));
    }
    Ok(())
}

/// `index_copy`: a kernel writing the source's slices into the state it updates in
/// place, where it may ([`scatter_target`]); else an extern call on views of `self`,
/// the index and the source (the scheduler decides after planning memory whether it
/// writes `self` in place).
/// An op of Kiln's own kernels as an extern call on its operands as they lie (the
/// kernels take any strides): `_grouped_mm(a, b, offs)` kept whole
/// (`passes::Options::grouped_mm_kernel`), and the two steps of a sort.
fn lower_extern(graph: &Graph, low: &mut Lowered, id: NodeId, op: ExternOp) -> Result<(), Error> {
    let operands = node_of(graph, id)?.args.len();
    let mut args = vec![];
    for i in 0..operands {
        let value = first_value(graph, id, i)?;
        args.push(low.realize_view(graph, value)?);
    }
    let name = op.name();
    low.add_snode(graph, ValueId::first(id), SKind::Extern { op, args }, name)?;
    Ok(())
}

fn lower_index_copy(graph: &Graph, low: &mut Lowered, id: NodeId, dim: i64) -> Result<(), Error> {
    let rank = meta_of(graph, ValueId::first(id))?.rank();
    let dim = crate::graph::shape::wrap_dim(dim, rank).map_err(|e| Error::Unsupported {
        node: node_of(graph, id).map_or_else(|_| "?".into(), |n| n.name.clone()),
        what: format!("index_copy: {e}"),
    })?;
    if let Some(target) = scatter_target(graph, low, id) {
        let (index, source) = (first_value(graph, id, 1)?, first_value(graph, id, 2)?);
        let v0 = ValueId::first(id);
        let meta = meta_of(graph, source)?.clone();
        low.snodes.push(SNode {
            kind: SKind::Scatter {
                source,
                index,
                dim,
                target: target.clone(),
            },
            value: v0,
            meta,
            buf: target.buf,
            op_name: "index_copy",
        });
        low.defs.insert(v0, Def::Strided(target));
        return Ok(());
    }
    let mut args = vec![];
    for i in 0..3 {
        let value = first_value(graph, id, i)?;
        args.push(low.realize_view(graph, value)?);
    }
    let op = ExternOp::IndexCopy {
        dim,
        in_place: false,
    };
    low.add_snode(
        graph,
        ValueId::first(id),
        SKind::Extern { op, args },
        "index_copy",
    )?;
    Ok(())
}

/// The whole buffer of the state input an `index_copy` node may write in place: with
/// `Options::state_scatter`, where its `self` is a graph input the program keeps as
/// state, read by nothing else (the old value is dead once written) and not an
/// output itself, and the source has `self`'s dtype and rank and the index at most one
/// dim (a 0-d source of a 1-d `self` stays an extern call).
fn scatter_target(graph: &Graph, low: &Lowered, id: NodeId) -> Option<View> {
    if !low.state_scatter {
        return None;
    }
    let node = graph.node(id)?;
    let x = node.args.first()?.value()?;
    let Op::Input { index } = graph.node(x.node)?.op else {
        return None;
    };
    let only_reader = graph
        .users(x.node)
        .all(|(user, u)| user == id && u.operand == 0);
    let source = node.args.get(2)?.value()?;
    let keeps = graph.state().iter().any(|s| s.input == index);
    if !keeps
        || !only_reader
        || graph.outputs().contains(&x)
        || graph.meta(source)?.dtype != graph.meta(x)?.dtype
        || graph.meta(source)?.rank() != graph.meta(x)?.rank()
        || graph.meta(node.args.get(1)?.value()?)?.rank() > 1
    {
        return None;
    }
    match low.defs.get(&x)? {
        Def::Strided(view)
            if view.offset.as_const() == Some(0) && view.shape == low.buffers[view.buf].shape =>
        {
            Some(view.clone())
        }
        _ => None,
    }
}

/// `value` as a strided view, where it is the `NCHW` permute of an `NHWC` value
/// that must be computed into memory first: that value computed (in its own
/// order), and the permute taken of its buffer. The `NCHW` permute of an `NHWC` pointwise
/// result (the `channels_last` pass's) is then a channels-last view of it, not
/// a copy in `NCHW`. (Other views are computed into memory as they are: their
/// source computed whole would not be dense in either layout, and cost a copy
/// more.)
fn realize_under_views(graph: &Graph, low: &mut Lowered, value: ValueId) -> Result<View, Error> {
    if let Some(v) = low.as_view(graph, value, true) {
        return Ok(v);
    }
    let node = node_of(graph, value.node)?;
    if matches!(&node.op, Op::Permute { dims } if dims.as_slice() == [0, 3, 1, 2]) {
        if let Some(source) = node.args.first().and_then(Arg::value) {
            let base = low.realize_view(graph, source)?;
            if let Some(v) = view_of_view(&node.op, &base, value.output, graph.symbols()) {
                return Ok(v);
            }
        }
    }
    low.realize_view(graph, value)
}

/// The strides of a dense `[N, C, H, W]` tensor laid out channels-last
/// (`[N, H, W, C]` in memory): `(H*W*C, 1, W*C, C)`.
fn channels_last_strides(shape: &[i64]) -> Vec<i64> {
    match *shape {
        [_, c, h, w] => vec![h * w * c, 1, w * c, c],
        _ => contiguous_strides(shape),
    }
}

/// Whether a view of `shape` with `strides` is what ATen calls channels-last
/// (`suggest_memory_format`): the dense channels-last strides, and PyTorch's
/// `is_channels_last_strides_2d`, which calls the cases where a dim of one
/// element leaves both readings open (an `[N, 1, 1, 1]` tensor) contiguous.
fn is_channels_last(shape: &[i64], strides: &[i64]) -> bool {
    if shape.len() != 4 || strides != channels_last_strides(shape).as_slice() || strides[1] == 0 {
        return false;
    }
    let mut min = 0;
    for d in [1, 3, 2, 0] {
        if shape[d] == 0 || strides[d] < min || (d == 0 && min == strides[1]) {
            return false;
        }
        min = strides[d];
        if shape[d] > 1 {
            min *= shape[d];
        }
    }
    true
}

/// Attention left whole by the passes for a fused kernel: an extern call on its
/// operands as they lie in memory (the kernel takes any strides).
fn lower_attention(
    graph: &Graph,
    low: &mut Lowered,
    outputs: &Outputs,
    id: NodeId,
    (mask, causal, scale): (bool, bool, Option<f64>),
) -> Result<(), Error> {
    let count = 3 + usize::from(mask);
    let mut args = vec![];
    for i in 0..count {
        let value = first_value(graph, id, i)?;
        args.push(low.realize_view(graph, value)?);
    }
    let q = meta_of(graph, first_value(graph, id, 0)?)?;
    let e = match q.shape.last().map(Size::as_const) {
        Some(Some(e)) => e,
        None => 1,
        Some(None) => {
            return Err(Error::Unsupported {
                node: node_of(graph, id)?.name.clone(),
                what: format!("attention over a symbolic head size {:?}", q.shape),
            })
        }
    };
    let scale = scale.unwrap_or(1.0 / (e.max(1) as f64).sqrt());
    let v0 = ValueId::first(id);
    let meta = meta_of(graph, v0)?.clone();
    let heads_inner =
        meta.shape.len() == 4 && !outputs.contains(&v0) && read_transposed(graph, id, 1, 2);
    let op = ExternOp::Attention {
        causal,
        scale_bits: scale.to_bits(),
        mask,
        heads_inner,
        splits: 1,
    };
    if !heads_inner {
        low.add_snode(graph, v0, SKind::Extern { op, args }, "attention")?;
        return Ok(());
    }
    // Read only through `transpose(1, 2)` (a model's heads going back into its
    // rows): computed `[B, L, H, Ev]`, so that the transpose, and the reshape
    // to `[B, L, H * Ev]` after it, are views, where a `[B, H, L, Ev]` buffer
    // takes a copy kernel before the output projection; the library's flash
    // and cuDNN kernels write this layout too. The graph's value is a view of it.
    let [b, h, l, ev] = [0, 1, 2, 3].map(|d| meta.shape[d].clone());
    let stored_shape = vec![b, l, h, ev];
    let stored = TensorMeta::contiguous_sizes(stored_shape.clone(), meta.dtype);
    let name = node_of(graph, id)?.name.clone();
    let buf = low.add_buffer(&name, &stored, super::ir::BufferKind::Computed);
    low.snodes.push(SNode {
        kind: SKind::Extern { op, args },
        value: v0,
        meta: stored,
        buf,
        op_name: "attention",
    });
    let s = contiguous_sizes(&stored_shape);
    low.defs.insert(
        v0,
        Def::Strided(View {
            buf,
            shape: meta.shape,
            strides: vec![s[0].clone(), s[2].clone(), s[1].clone(), s[3].clone()],
            offset: Size::from(0),
        }),
    );
    Ok(())
}

/// Whether every reader of node `id`'s value swaps its dims `d0` and `d1`
/// (a `transpose`, or a `permute` that moves nothing else), and it has one.
fn read_transposed(graph: &Graph, id: NodeId, d0: usize, d1: usize) -> bool {
    let Some(rank) = graph.meta(ValueId::first(id)).map(|m| m.shape.len()) else {
        return false;
    };
    let swaps = |user: NodeId| {
        let Some(node) = graph.node(user) else {
            return false;
        };
        let wrap = |d: i64| crate::graph::shape::wrap_dim(d, rank).ok();
        match &node.op {
            Op::Transpose { dim0, dim1 } => {
                let pair = (wrap(*dim0), wrap(*dim1));
                pair == (Some(d0), Some(d1)) || pair == (Some(d1), Some(d0))
            }
            Op::Permute { dims } => dims.iter().enumerate().all(|(i, &d)| {
                let want = if i == d0 {
                    d1
                } else if i == d1 {
                    d0
                } else {
                    i
                };
                wrap(d) == Some(want)
            }),
            _ => false,
        }
    };
    let mut users = graph.users(id).peekable();
    users.peek().is_some() && users.all(|(user, _)| swaps(user))
}

/// The most elements an `arange` of a symbolic length is stored for: its values at
/// the longest length its range allows, of which each call reads a prefix.
const MAX_ARANGE: i128 = 1 << 20;

/// `arange`: a constant of the program (const_fold folds the small ones earlier). One
/// of a symbolic length is the prefix of the constant at its longest (positions
/// `0..seq` of a sequence of any length up to the range's end).
fn lower_arange(graph: &Graph, low: &mut Lowered, id: NodeId) -> Result<(), Error> {
    let node = node_of(graph, id)?;
    let v0 = ValueId::first(id);
    let meta = meta_of(graph, v0)?;
    let (op, fixed) = match meta.fixed() {
        Some(fixed) => (node.op.clone(), fixed),
        None => longest_arange(graph, id, &meta)?,
    };
    let t = crate::interp::eval_op(&op, &[], std::slice::from_ref(&fixed)).map_err(|what| {
        Error::Unsupported {
            node: node.name.clone(),
            what: what.to_string(),
        }
    })?;
    let values = t.first().map(|t| t.to_vec()).unwrap_or_default();
    let stored = TensorMeta::contiguous(fixed.shape, fixed.dtype);
    let kind = super::ir::BufferKind::Constant {
        data: ConstData::Values(values.into()),
    };
    let buf = low.add_buffer(&node.name, &stored, kind);
    low.defs
        .insert(v0, Def::Strided(contiguous_view(buf, &meta.shape)));
    Ok(())
}

/// An `arange` of the symbolic length `meta` gives, at its longest: the op with its
/// end at the symbols' largest values, and that length's metadata.
fn longest_arange(graph: &Graph, id: NodeId, meta: &TensorMeta) -> Result<(Op, FixedMeta), Error> {
    let node = node_of(graph, id)?;
    let refuse = |what: String| Error::Unsupported {
        node: node.name.clone(),
        what,
    };
    let (
        Op::Arange {
            start,
            end: Bound::Size(end),
            step,
            dtype,
        },
        [len],
    ) = (&node.op, meta.shape.as_slice())
    else {
        return Err(refuse(format!(
            "an arange of symbolic sizes {:?}",
            meta.shape
        )));
    };
    let symbols = graph.symbols();
    let (most_end, most_len) = (end.bounds(symbols).1, len.bounds(symbols).1);
    if most_len > MAX_ARANGE || most_end > i128::from(i64::MAX) {
        return Err(refuse(format!(
            "an arange of symbolic length {len} (up to {most_len}) is stored at its longest, \
             at most {MAX_ARANGE} elements; give its size a smaller range, or compile at one \
             size (--specialize)"
        )));
    }
    let op = Op::Arange {
        start: *start,
        end: Bound::Scalar(Scalar::Int(most_end as i64)),
        step: *step,
        dtype: *dtype,
    };
    Ok((op, FixedMeta::contiguous(vec![most_len as i64], meta.dtype)))
}

/// Value `v` as a constant buffer of the program holding `data`, read as a
/// contiguous view.
fn constant_buffer(low: &mut Lowered, name: &str, v: ValueId, meta: &TensorMeta, data: ConstData) {
    let kind = super::ir::BufferKind::Constant { data };
    let buf = low.add_buffer(name, meta, kind);
    low.defs
        .insert(v, Def::Strided(contiguous_view(buf, &meta.shape)));
}

/// A pointwise op or a view: each output inline, a strided view where it is one, or
/// computed into memory where it must be (a graph output, a chain grown too deep)
/// or where the realization rule finds it cheaper ([`worth_realizing`]).
fn lower_inline(
    graph: &Graph,
    low: &mut Lowered,
    outputs: &Outputs,
    id: NodeId,
) -> Result<(), Error> {
    let node = node_of(graph, id)?;
    let op = &node.op;
    if matches!(op, Op::Index { .. } | Op::Gather { .. }) {
        // The indexed operand is read at data-dependent positions: it must
        // be in memory. The node itself is inline, like any pointwise op.
        let src = first_value(graph, id, 0)?;
        let view = low.realize_view(graph, src)?;
        low.sources.insert(id, view);
    }
    let reads = buffers_read(graph, low, id)?;
    for (output, _) in node.outputs.iter().enumerate() {
        let value = ValueId {
            node: id,
            output: output as u32,
        };
        let depth = 1 + node
            .args
            .iter()
            .filter_map(Arg::value)
            .map(|a| match low.defs.get(&a) {
                Some(Def::Inline { depth, .. }) => *depth,
                _ => 0,
            })
            .max()
            .unwrap_or(0);
        low.defs.insert(
            value,
            Def::Inline {
                node: id,
                output: output as u32,
                depth,
            },
        );
        if views::copies(op) && outputs.contains(&value) {
            // A `contiguous`/`clone` the passes kept gives the caller a
            // fresh dense tensor, never a view of its operand.
            low.add_snode(graph, value, SKind::Pointwise { value }, "copy")?;
        } else if let Some(v) = low.as_view(graph, value, false) {
            low.defs.insert(value, Def::Strided(v));
        } else if depth > MAX_INLINE_DEPTH
            || (outputs.contains(&value) && low.as_view(graph, value, true).is_none())
            || worth_realizing(graph, value, reads.len())
        {
            // Computed into memory here, in topological order, so that
            // every later reader (a reduction of a graph output, say)
            // comes after the kernel that writes it.
            low.add_snode(graph, value, SKind::Pointwise { value }, "pointwise")?;
        } else {
            low.inline_reads.insert(value, reads.clone());
        }
    }
    Ok(())
}

/// The distinct buffers that node `id`'s outputs read when inline, sorted: its
/// operands' buffers, through inline operands to theirs, and the operand an
/// `index` or `gather` takes values from.
fn buffers_read(graph: &Graph, low: &Lowered, id: NodeId) -> Result<Vec<BufferId>, Error> {
    let node = node_of(graph, id)?;
    let mut reads: Vec<BufferId> = low.sources.get(&id).map(|v| v.buf).into_iter().collect();
    for a in node.args.iter().filter_map(Arg::value) {
        match low.defs.get(&a) {
            Some(Def::Strided(view)) => reads.push(view.buf),
            Some(Def::Node(n)) => reads.push(low.snodes[*n].buf),
            Some(Def::Inline { .. }) => {
                reads.extend(low.inline_reads.get(&a).into_iter().flatten().copied());
            }
            Some(Def::Literal { .. }) | None => {}
        }
    }
    reads.sort();
    reads.dedup();
    Ok(reads)
}

/// The realization rule: whether an inline value whose expression reads
/// `reads` distinct buffers is better computed into memory once
/// ([`REALIZE_ACC_READS_THRESHOLD`], [`REALIZE_READS_THRESHOLD`]).
fn worth_realizing(graph: &Graph, value: ValueId, reads: usize) -> bool {
    reads > REALIZE_ACC_READS_THRESHOLD
        || (reads > REALIZE_READS_THRESHOLD && readers(graph, value) > 1)
}

/// How many distinct nodes read `value`, directly or through views (a view
/// is not a reader: what reads the view reads the value).
fn readers(graph: &Graph, value: ValueId) -> usize {
    let mut found = std::collections::HashSet::new();
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        if !seen.insert(v) {
            continue;
        }
        for (user, use_) in graph.users(v.node) {
            if use_.output != v.output {
                continue;
            }
            match graph.node(user) {
                Some(n) if views::describes(&n.op) => {
                    stack.extend((0..n.outputs.len()).map(|o| ValueId {
                        node: user,
                        output: o as u32,
                    }));
                }
                Some(_) => {
                    found.insert(user);
                }
                None => {}
            }
        }
    }
    found.len()
}

/// A number the graph returns is written to memory where it is defined, so that every
/// reader after it (an index, a reduction) comes after the kernel that stores it.
fn literal_output(
    graph: &Graph,
    low: &mut Lowered,
    outputs: &Outputs,
    value: ValueId,
) -> Result<(), Error> {
    if outputs.contains(&value) {
        low.add_snode(graph, value, SKind::Pointwise { value }, "pointwise")?;
    }
    Ok(())
}

/// The dtype a pointwise node computes in: float16 and bfloat16 in float32.
pub fn compute_dtype(d: DType) -> DType {
    if d.is_low_precision() {
        DType::Float32
    } else {
        d
    }
}
