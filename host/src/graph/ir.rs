//! The graph IR: a petgraph `StableDiGraph` of [`Node`]s behind typed ids.
//!
//! Nodes own their operands ([`Arg`]) and the metadata of the values they produce; the
//! petgraph edges mirror the operands (producer → consumer) so that traversals,
//! reachability and cycle checks come from petgraph. Every mutation goes through
//! [`Graph`]'s methods, which keep the two in step. This module must never run shape
//! inference or print anything: it is plain data plus bookkeeping.

use super::dtype::DType;
use super::ops::Op;
pub use super::ops::Scalar;
use super::shape::{contiguous_sizes, contiguous_strides, sizes, Shape};
use super::sym::{Size, Symbols};
use petgraph::stable_graph::{NodeIndex, StableDiGraph};
use petgraph::visit::EdgeRef;
use petgraph::Direction;
use std::collections::HashSet;

/// A node of the graph (stable across removals of other nodes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub NodeIndex<u32>);

impl NodeId {
    /// The index, for side tables keyed by node.
    pub fn index(self) -> usize {
        self.0.index()
    }
}

/// One output value of a node: multi-output ops (`split`, `native_layer_norm`) have
/// several, selected in the file by `getitem`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId {
    /// the producing node
    pub node: NodeId,
    /// which of its outputs
    pub output: u32,
}

impl ValueId {
    /// The first (often only) output of `node`.
    pub fn first(node: NodeId) -> ValueId {
        ValueId { node, output: 0 }
    }
}

/// An operand of a node.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg {
    /// a tensor value
    Value(ValueId),
    /// a number
    Scalar(Scalar),
}

impl Arg {
    /// The value, if this operand is a tensor.
    pub fn value(&self) -> Option<ValueId> {
        match self {
            Arg::Value(v) => Some(*v),
            Arg::Scalar(_) => None,
        }
    }
}

/// Shape, strides and dtype of a value whose sizes are all integers: what shape
/// inference's rules and the code that does not take symbolic sizes yet read
/// ([`TensorMeta::fixed`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FixedMeta {
    /// sizes, outermost first
    pub shape: Shape,
    /// strides in elements
    pub strides: Vec<i64>,
    /// element type
    pub dtype: DType,
}

impl FixedMeta {
    /// A contiguous tensor.
    pub fn contiguous(shape: Shape, dtype: DType) -> FixedMeta {
        let strides = contiguous_strides(&shape);
        FixedMeta {
            shape,
            strides,
            dtype,
        }
    }

    /// Rank.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Element count (saturating; validated shapes never saturate).
    pub fn numel(&self) -> i64 {
        self.shape
            .iter()
            .fold(1i64, |a, &d| a.saturating_mul(d.max(0)))
    }
}

impl From<FixedMeta> for TensorMeta {
    fn from(m: FixedMeta) -> TensorMeta {
        TensorMeta {
            shape: sizes(&m.shape),
            strides: sizes(&m.strides),
            dtype: m.dtype,
        }
    }
}

/// Shape, strides and dtype of a value. Sizes are [`Size`]s: integers, or expressions
/// over the graph's size symbols.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct TensorMeta {
    /// sizes, outermost first
    pub shape: Vec<Size>,
    /// strides in elements; views keep their input's strides as PyTorch does
    pub strides: Vec<Size>,
    /// element type
    pub dtype: DType,
}

impl TensorMeta {
    /// A contiguous tensor of a static shape.
    pub fn contiguous(shape: Shape, dtype: DType) -> TensorMeta {
        let strides = contiguous_strides(&shape);
        TensorMeta {
            shape: sizes(&shape),
            strides: sizes(&strides),
            dtype,
        }
    }

    /// A contiguous tensor of sizes that may be symbolic.
    pub fn contiguous_sizes(shape: Vec<Size>, dtype: DType) -> TensorMeta {
        let strides = contiguous_sizes(&shape);
        TensorMeta {
            shape,
            strides,
            dtype,
        }
    }

    /// A tensor of a static shape and strides.
    pub fn strided(shape: &[i64], strides: &[i64], dtype: DType) -> TensorMeta {
        TensorMeta {
            shape: sizes(shape),
            strides: sizes(strides),
            dtype,
        }
    }

    /// Rank.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Element count at the size symbols' hints (saturating; validated shapes never
    /// saturate): what decisions read, and exact for a static shape.
    pub fn numel(&self) -> i64 {
        self.shape
            .iter()
            .fold(1i64, |a, d| a.saturating_mul(d.hint().max(0)))
    }

    /// The metadata with integer sizes, where all are; `None` where one is symbolic
    /// (the caller refuses, or takes a general path).
    pub fn fixed(&self) -> Option<FixedMeta> {
        Some(FixedMeta {
            shape: self.fixed_shape()?,
            strides: self.fixed_strides()?,
            dtype: self.dtype,
        })
    }

    /// The sizes, where all are integers; `None` where one is symbolic (the caller
    /// refuses, or takes a general path).
    pub fn fixed_shape(&self) -> Option<Shape> {
        self.shape.iter().map(Size::as_const).collect()
    }

    /// The strides, where all are integers.
    pub fn fixed_strides(&self) -> Option<Vec<i64>> {
        self.strides.iter().map(Size::as_const).collect()
    }

    /// The sizes at the hints: what decisions read.
    pub fn hint_shape(&self) -> Shape {
        self.shape.iter().map(Size::hint).collect()
    }

    /// The strides at the hints.
    pub fn hint_strides(&self) -> Vec<i64> {
        self.strides.iter().map(Size::hint).collect()
    }

    /// Whether no size or stride is symbolic.
    pub fn is_static(&self) -> bool {
        self.shape.iter().chain(&self.strides).all(Size::is_const)
    }
}

/// One operation.
#[derive(Clone, Debug)]
pub struct Node {
    /// unique name (from the file, or made fresh by a pass)
    pub name: String,
    /// the operation with its typed attributes
    pub op: Op,
    /// operands, in ATen order
    pub args: Vec<Arg>,
    /// one entry per output value, filled by shape inference
    pub outputs: Vec<TensorMeta>,
    /// the line in the source file, for messages
    pub line: Option<u32>,
}

/// The edge weight: which operand slot of the consumer reads which output of the
/// producer.
#[derive(Clone, Copy, Debug)]
pub struct Use {
    /// operand position in the consumer
    pub operand: u32,
    /// output index of the producer
    pub output: u32,
}

/// A dataflow graph: inputs and constants are nodes too (`Op::Input`, `Op::Constant`).
#[derive(Clone, Debug, Default)]
pub struct Graph {
    /// the graph's name
    pub name: String,
    g: StableDiGraph<Node, Use>,
    inputs: Vec<NodeId>,
    outputs: Vec<ValueId>,
    names: HashSet<String>,
    fresh: u64,
    /// Nodes added or changed (operands, op or metadata) since the last
    /// [`Graph::take_modified`]; may repeat a node or name a removed one.
    modified: Vec<NodeId>,
    /// The tensors the program keeps between calls.
    state: Vec<State>,
    /// The named sizes the graph was made at ([`SizeChoice`]).
    sizes: Vec<SizeChoice>,
    /// The size symbols its metadata and size arguments read, with their ranges.
    symbols: Symbols,
}

/// A size that varies between compiles, at the value this graph was made at: a symbol of
/// an export with dynamic shapes, or a size of a graph file's `[dims]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeChoice {
    /// the symbol's or size's name
    pub name: String,
    /// the value taken
    pub value: i64,
    /// its range, inclusive
    pub lo: i64,
    /// its range, inclusive
    pub hi: i64,
}

impl SizeChoice {
    /// `batch = 8 (1..=64), seq = 128 (1..=2048)`: the sizes taken, for messages.
    pub fn describe(sizes: &[SizeChoice]) -> String {
        sizes
            .iter()
            .map(|s| format!("{} = {} ({}..={})", s.name, s.value, s.lo, s.hi))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A tensor the program keeps from one call to the next, such as a KV cache a
/// decoding step writes in place: the graph reads it as input `input` and gives
/// its value at the end of the call as output `output`, which the next call
/// reads. Before the first call it holds `init`.
#[derive(Clone, Debug)]
pub struct State {
    /// its name in the source (a buffer's or tensor constant's key)
    pub name: String,
    /// the graph input that reads it
    pub input: usize,
    /// the graph output that is its new value
    pub output: usize,
    /// its value before the first call, in the input's dtype
    pub init: crate::graph::ops::ConstData,
}

impl Graph {
    /// An empty graph.
    pub fn new(name: impl Into<String>) -> Graph {
        Graph {
            name: name.into(),
            ..Graph::default()
        }
    }

    /// Adds a node and the edges of its tensor operands. The caller guarantees the name is
    /// unique (see [`Graph::fresh_name`]) and the operands exist.
    pub fn add_node(&mut self, node: Node) -> NodeId {
        self.names.insert(node.name.clone());
        let is_input = matches!(node.op, Op::Input { .. });
        let id = NodeId(self.g.add_node(node));
        if is_input {
            self.inputs.push(id);
        }
        self.add_edges(id);
        self.modified.push(id);
        id
    }

    /// Adds the edges of `id`'s tensor operands (it has none yet).
    fn add_edges(&mut self, id: NodeId) {
        for i in 0..self.g[id.0].args.len() {
            if let Arg::Value(v) = self.g[id.0].args[i] {
                self.g.add_edge(
                    v.node.0,
                    id.0,
                    Use {
                        operand: i as u32,
                        output: v.output,
                    },
                );
            }
        }
    }

    /// Replaces a node's operands, updating the edges.
    pub fn set_args(&mut self, id: NodeId, args: Vec<Arg>) {
        let old: Vec<_> = self
            .g
            .edges_directed(id.0, Direction::Incoming)
            .map(|e| e.id())
            .collect();
        for e in old {
            self.g.remove_edge(e);
        }
        if let Some(n) = self.g.node_weight_mut(id.0) {
            n.args = args;
            self.add_edges(id);
        }
        self.modified.push(id);
    }

    /// Removes a node (its users must have been rewired first).
    pub fn remove_node(&mut self, id: NodeId) -> Option<Node> {
        let n = self.g.remove_node(id.0)?;
        self.names.remove(&n.name);
        self.inputs.retain(|&i| i != id);
        Some(n)
    }

    /// The node, if it exists.
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.g.node_weight(id.0)
    }

    /// The node, mutably; it counts as modified (see [`Graph::take_modified`]). Changing
    /// `args` here bypasses edge bookkeeping: use [`Graph::set_args`] for that.
    pub fn node_mut(&mut self, id: NodeId) -> Option<&mut Node> {
        self.modified.push(id);
        self.g.node_weight_mut(id.0)
    }

    /// Stores a node's output metadata as computed by shape inference. Unlike
    /// [`Graph::node_mut`] this does not count as a modification: it is how inference
    /// brings the graph up to date.
    pub fn set_inferred(&mut self, id: NodeId, outputs: Vec<TensorMeta>) {
        if let Some(n) = self.g.node_weight_mut(id.0) {
            n.outputs = outputs;
        }
    }

    /// The nodes added or changed through [`Graph::add_node`], [`Graph::set_args`] (which
    /// [`Graph::replace_uses`] calls) or [`Graph::node_mut`] since the last call, and
    /// forgets them. Incremental re-inference starts from these: a node absent from the
    /// list has the op and operands it had when it was last inferred.
    pub fn take_modified(&mut self) -> Vec<NodeId> {
        std::mem::take(&mut self.modified)
    }

    /// Metadata of a value, if it exists.
    pub fn meta(&self, v: ValueId) -> Option<&TensorMeta> {
        self.node(v.node)?.outputs.get(v.output as usize)
    }

    /// Value `v`'s metadata with integer sizes; `None` where it has none or a
    /// symbolic size (passes that rewrite by shape leave such a value alone).
    pub fn fixed_meta(&self, v: ValueId) -> Option<FixedMeta> {
        self.meta(v)?.fixed()
    }

    /// All node ids in an unspecified order.
    pub fn node_ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.g.node_indices().map(NodeId)
    }

    /// Number of nodes, inputs and constants included.
    pub fn node_count(&self) -> usize {
        self.g.node_count()
    }

    /// Nodes that read any output of `id`, with the use (may repeat a consumer).
    pub fn users(&self, id: NodeId) -> impl Iterator<Item = (NodeId, Use)> + '_ {
        self.g
            .edges_directed(id.0, Direction::Outgoing)
            .map(|e| (NodeId(e.target()), *e.weight()))
    }

    /// When node `id`'s value is read as indices (the ids of an `embedding`, an
    /// `index`, `gather` or `index_copy` operand), directly or through casts, views,
    /// copies and adds of non-negative numbers (a decoding step's position plus an
    /// `arange`): the size of the smallest dim it indexes, less what was added on the
    /// way. Random inputs for it are drawn in `[0, size)`, so that a model's token ids
    /// and positions are valid.
    pub fn index_bound(&self, id: NodeId) -> Option<i64> {
        let mut bound: Option<i64> = None;
        // (node, the most that was added to its value on the way)
        let mut stack = vec![(id, 0i64)];
        let mut seen = std::collections::HashSet::new();
        while let Some((n, added)) = stack.pop() {
            if !seen.insert((n, added)) {
                continue;
            }
            for (user, u) in self.users(n) {
                let Some(node) = self.node(user) else {
                    continue;
                };
                let self_shape = || {
                    node.args
                        .first()
                        .and_then(|a| a.value())
                        .and_then(|v| self.meta(v))
                        .map(TensorMeta::hint_shape)
                };
                let size = match &node.op {
                    Op::Index { indexed, .. } if u.operand >= 1 => {
                        // The k-th index tensor indexes the k-th indexed dim.
                        let k = u.operand as usize - 1;
                        let dim = indexed.iter().enumerate().filter(|(_, &b)| b).nth(k);
                        dim.and_then(|(d, _)| self_shape()?.get(d).copied())
                    }
                    Op::Gather { dim } | Op::IndexCopy { dim } if u.operand == 1 => self_shape()
                        .and_then(|s| {
                            let d = super::shape::wrap_dim(*dim, s.len()).ok()?;
                            s.get(d).copied()
                        }),
                    Op::Cast { .. } | Op::Contiguous | Op::Clone => {
                        stack.push((user, added));
                        None
                    }
                    // `copy(dst, src)` is `src`'s values.
                    Op::Copy if u.operand == 1 => {
                        stack.push((user, added));
                        None
                    }
                    Op::Binary {
                        op: super::ops::BinaryOp::Add,
                        alpha: None,
                    } => {
                        let other = node.args.get(1 - (u.operand as usize).min(1));
                        if let Some(most) = other.and_then(|a| self.most_added(a)) {
                            stack.push((user, added.saturating_add(most)));
                        }
                        None
                    }
                    op if super::views::describes(op) && u.operand == 0 => {
                        stack.push((user, added));
                        None
                    }
                    _ => None,
                };
                if let Some(s) = size.map(|s| s - added).filter(|&s| s > 0) {
                    bound = Some(bound.map_or(s, |b| b.min(s)));
                }
            }
        }
        bound
    }

    /// The largest value of an add's other operand, where it is a non-negative
    /// integer, or an `arange` of them.
    fn most_added(&self, arg: &Arg) -> Option<i64> {
        match arg {
            Arg::Scalar(Scalar::Int(k)) if *k >= 0 => Some(*k),
            Arg::Value(v) => match &self.node(v.node)?.op {
                Op::Arange {
                    start: Scalar::Int(start),
                    end: super::ops::Bound::Scalar(Scalar::Int(end)),
                    step: Scalar::Int(step),
                    ..
                } if *start >= 0 && *step > 0 && end > start => {
                    Some(start + (end - start - 1) / step * step)
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// Graph inputs in declaration order.
    pub fn inputs(&self) -> &[NodeId] {
        &self.inputs
    }

    /// Graph outputs in declaration order.
    pub fn outputs(&self) -> &[ValueId] {
        &self.outputs
    }

    /// A value's name: its node's, with `.N` for output `N` of a node that
    /// has several.
    pub fn value_name(&self, v: ValueId) -> String {
        let node = self.node(v.node);
        let name = node.map_or("?", |n| n.name.as_str());
        if node.is_some_and(|n| n.outputs.len() > 1) {
            format!("{name}.{}", v.output)
        } else {
            name.to_string()
        }
    }

    /// The names of the graph's outputs, in order.
    pub fn output_names(&self) -> Vec<String> {
        self.outputs.iter().map(|&v| self.value_name(v)).collect()
    }

    /// Sets the graph outputs.
    pub fn set_outputs(&mut self, outputs: Vec<ValueId>) {
        self.outputs = outputs;
    }

    /// The tensors the program keeps between calls ([`State`]).
    pub fn state(&self) -> &[State] {
        &self.state
    }

    /// The named sizes the graph was made at: empty for a graph of fixed sizes, else
    /// each symbol or size of the source with the value taken (its other values give
    /// other graphs of the same source).
    pub fn sizes(&self) -> &[SizeChoice] {
        &self.sizes
    }

    /// Records the named sizes the graph was made at.
    pub fn set_sizes(&mut self, sizes: Vec<SizeChoice>) {
        self.sizes = sizes;
    }

    /// The size symbols that the graph's symbolic sizes read, each with its range and
    /// hint: empty for a graph of integer sizes.
    pub fn symbols(&self) -> &Symbols {
        &self.symbols
    }

    /// Sets the size symbols (an importer that keeps an export's symbols does, before
    /// it adds the nodes that read them).
    pub fn set_symbols(&mut self, symbols: Symbols) {
        self.symbols = symbols;
    }

    /// Sets the tensors the program keeps between calls; each names one of the
    /// graph's inputs and one of its outputs.
    pub fn set_state(&mut self, state: Vec<State>) {
        self.state = state;
    }

    /// The shape and dtype of graph input `index`.
    pub fn input_meta(&self, index: usize) -> Option<&TensorMeta> {
        self.node(*self.inputs.get(index)?)?.outputs.first()
    }

    /// Turns node `id` (a constant, or any node without operands) into the graph's
    /// next input, returning its index.
    pub fn make_input(&mut self, id: NodeId) -> usize {
        let index = self.inputs.len();
        if let Some(n) = self.g.node_weight_mut(id.0) {
            n.op = Op::Input { index };
        }
        self.inputs.push(id);
        self.modified.push(id);
        index
    }

    /// Whether a name is taken.
    pub fn has_name(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    /// A name not yet used in the graph, derived from `base`.
    pub fn fresh_name(&mut self, base: &str) -> String {
        loop {
            self.fresh += 1;
            let name = format!("{base}_{}", self.fresh);
            if !self.names.contains(&name) {
                return name;
            }
        }
    }

    /// Nodes in a topological order (operands before users), or the node found on a
    /// cycle. Iterative (Kahn's algorithm), so graph depth never grows the stack; ties
    /// are broken by node index so the order is deterministic.
    pub fn topo_order(&self) -> Result<Vec<NodeId>, NodeId> {
        let bound = petgraph::visit::NodeIndexable::node_bound(&self.g);
        let mut indeg = vec![0u32; bound];
        for e in self.g.edge_indices() {
            if let Some((_, t)) = self.g.edge_endpoints(e) {
                indeg[t.index()] += 1;
            }
        }
        let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<usize>> = self
            .g
            .node_indices()
            .filter(|n| indeg[n.index()] == 0)
            .map(|n| std::cmp::Reverse(n.index()))
            .collect();
        let mut order = Vec::with_capacity(self.g.node_count());
        while let Some(std::cmp::Reverse(i)) = ready.pop() {
            let n = NodeIndex::new(i);
            order.push(NodeId(n));
            for e in self.g.edges_directed(n, Direction::Outgoing) {
                let t = e.target().index();
                indeg[t] -= 1;
                if indeg[t] == 0 {
                    ready.push(std::cmp::Reverse(t));
                }
            }
        }
        if order.len() != self.g.node_count() {
            let stuck = self
                .g
                .node_indices()
                .find(|n| indeg[n.index()] > 0)
                .map(NodeId);
            return Err(stuck.unwrap_or(NodeId(NodeIndex::new(0))));
        }
        Ok(order)
    }

    /// The underlying petgraph graph, read-only, for algorithms and printers.
    pub fn petgraph(&self) -> &StableDiGraph<Node, Use> {
        &self.g
    }

    /// Rewires every use of `from` (operands and graph outputs) to `to`.
    pub fn replace_uses(&mut self, from: ValueId, to: ValueId) {
        let users: Vec<NodeId> = self
            .users(from.node)
            .filter(|(_, u)| u.output == from.output)
            .map(|(n, _)| n)
            .collect();
        for u in users {
            if let Some(node) = self.node(u) {
                let args = node
                    .args
                    .iter()
                    .map(|a| match a {
                        Arg::Value(v) if *v == from => Arg::Value(to),
                        other => *other,
                    })
                    .collect();
                self.set_args(u, args);
            }
        }
        for o in &mut self.outputs {
            if *o == from {
                *o = to;
            }
        }
    }
}
