//! Channels-last activations through convolution graphs, after Inductor's
//! layout choice for convolutions.
//!
//! A device's convolution library may run its fast kernels only on
//! channels-last (`NHWC`) tensors: cuDNN's 16-bit kernels convert a
//! contiguous `NCHW` operand to `NHWC` and the result back on every call
//! (ResNet-50 in bfloat16 on an H100 spent 1.32 ms of 4.83 ms in those
//! conversions). The plugin states for which dtypes its convolution prefers
//! channels-last (`conv_channels_last`); for a 2-D convolution of such a dtype
//! this pass rewrites the graph so that the activations between convolutions
//! are contiguous `NHWC` tensors:
//! - the convolution's constant weight `[O, I/g, kh, kw]` is stored once as a
//!   new constant `[O, kh, kw, I/g]`, read through `permute([0, 3, 1, 2])`;
//! - a pointwise op (unary, binary with broadcasting, `where`, `clamp`, casts)
//!   of a 4-D result that reads a channels-last value is computed in `NHWC`
//!   order: its channels-last operands are read as `NHWC` values (a
//!   `permute([0, 2, 3, 1])` of a convolution's result, or the `NHWC` value a
//!   `permute([0, 3, 1, 2])` made `NCHW`: the pair cancels), its other operands
//!   through the same permute (a `[C, 1, 1]` bias becomes `[1, 1, 1, C]`; a
//!   scalar stays), and everything else reads its result back through
//!   `permute([0, 3, 1, 2])`. So is a pointwise op whose result such a
//!   convolution reads, whatever it reads (a max-pool's last maximum, over
//!   strided slices): the convolution then reads it in channels-last.
//!
//! Every permute is a view: the lowering reads a convolution's operand that
//! is dense in channels-last order as it is and plans the result
//! channels-last when an operand is (as ATen answers on cuDNN), so between
//! convolutions no copy is left. A reduction, a pooling or a graph output
//! reads the `NCHW` view, strided. Graph outputs themselves are never
//! rewritten, so they keep their layout.
//!
//! The pass runs after `const_fold`, which would fold a small permuted weight
//! back into a contiguous constant. It must only run for a target whose
//! convolution takes channels-last operands as they are (the Python
//! wrapper's ATen call); the cpu's C++ convolution takes contiguous ones.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::{emit, replace_node, Error, Stats};
use crate::graph::dtype::DType;
use crate::graph::{Arg, ConstData, Graph, Node, NodeId, Op, TensorMeta, ValueId};

const PASS: &str = "channels_last";

/// `NCHW` to `NHWC`.
const TO_NHWC: [i64; 4] = [0, 2, 3, 1];
/// `NHWC` to `NCHW`.
const TO_NCHW: [i64; 4] = [0, 3, 1, 2];

/// A set of dtypes: those whose convolutions run channels-last.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DTypes(u8);

impl DTypes {
    /// No dtype: the pass changes nothing.
    pub const NONE: DTypes = DTypes(0);

    fn bit(d: DType) -> u8 {
        let i = DType::ALL.iter().position(|&x| x == d).unwrap_or(0);
        1 << i
    }

    /// Whether `d` is in the set.
    pub fn contains(self, d: DType) -> bool {
        self.0 & Self::bit(d) != 0
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The dtypes in the set, in [`DType::ALL`]'s order.
    pub fn iter(self) -> impl Iterator<Item = DType> {
        DType::ALL.into_iter().filter(move |&d| self.contains(d))
    }
}

impl FromIterator<DType> for DTypes {
    fn from_iter<I: IntoIterator<Item = DType>>(iter: I) -> Self {
        DTypes(iter.into_iter().fold(0, |bits, d| bits | Self::bit(d)))
    }
}

/// Carries the activations of `g`'s 2-D convolutions in `dtypes`
/// channels-last (none: nothing changes).
pub fn run(g: &mut Graph, dtypes: DTypes) -> Result<Stats, Error> {
    let _span = tracing::info_span!("channels_last").entered();
    let mut changed = 0;
    if dtypes.is_empty() {
        return Ok(Stats { changed });
    }
    let order = super::topo_order(g, PASS)?;
    let mut state = State::default();
    // A pointwise value such a convolution reads is computed in NHWC order
    // even when nothing it reads is (a max-pool's last maximum): the
    // convolution then reads it as it is.
    for &id in &order {
        if let Some(node) = g.node(id).filter(|n| conv_in(g, n, dtypes)) {
            state
                .conv_inputs
                .extend(node.args.first().and_then(Arg::value));
        }
    }
    for id in order {
        let Some(node) = g.node(id) else { continue };
        if matches!(node.op, Op::Conv { .. }) {
            if !conv_in(g, node, dtypes) {
                continue;
            }
            changed += relayout_weight(g, id, &mut state)?;
            // The lowering plans the result channels-last when an operand is.
            let input = node_value(g, id, 0)?;
            let weight = node_value(g, id, 1)?;
            if state.nhwc_form(input).is_some() || is_nchw_permute(g, weight) {
                state.convs.insert(id);
            }
        } else if sinkable(g, id, &state) {
            sink(g, id, &mut state)?;
            changed += 1;
        }
    }
    Ok(Stats { changed })
}

/// What the sweep knows so far.
#[derive(Default)]
struct State {
    /// Each value computed in `NHWC` order for an `NCHW` one: its `permute`
    /// back to `NCHW` maps to it.
    nhwc: HashMap<ValueId, ValueId>,
    /// The convolutions whose result is planned channels-last.
    convs: HashSet<NodeId>,
    /// Each constant weight's channels-last replacement (a permute view).
    weights: HashMap<NodeId, ValueId>,
    /// The values the convolutions of the listed dtypes take as input.
    conv_inputs: HashSet<ValueId>,
}

impl State {
    /// `v`'s `NHWC` form where one exists without a copy: a value computed in
    /// `NHWC` order, or a channels-last convolution's result, whose `NHWC`
    /// view is dense.
    fn nhwc_form(&self, v: ValueId) -> Option<NhwcForm> {
        if let Some(&t) = self.nhwc.get(&v) {
            return Some(NhwcForm::Value(t));
        }
        // Only the pass's own permutes count: a graph's own `NCHW` permute
        // (ConvNeXt's, say) is left as the model wrote it.
        self.convs.contains(&v.node).then_some(NhwcForm::ConvResult)
    }
}

/// How a value's `NHWC` form is had.
#[derive(Clone, Copy)]
enum NhwcForm {
    /// This value already is it.
    Value(ValueId),
    /// A permute of a channels-last convolution's result (a dense view).
    ConvResult,
}

/// Whether `node` is a 2-D convolution whose input is of a dtype in `dtypes` (its
/// batch may be symbolic: the layout never reads it). Any other op of two 4-D operands
/// (an attention's batched product, a residual `add`) is not.
fn conv_in(g: &Graph, node: &Node, dtypes: DTypes) -> bool {
    if !matches!(node.op, Op::Conv { .. }) {
        return false;
    }
    let meta = |i: usize| {
        node.args
            .get(i)
            .and_then(Arg::value)
            .and_then(|v| g.meta(v))
    };
    match (meta(0), meta(1)) {
        (Some(x), Some(w)) => x.rank() == 4 && w.rank() == 4 && dtypes.contains(x.dtype),
        _ => false,
    }
}

fn is_nchw_permute(g: &Graph, v: ValueId) -> bool {
    matches!(g.node(v.node).map(|n| &n.op), Some(Op::Permute { dims }) if dims.as_slice() == TO_NCHW)
}

fn node_value(g: &Graph, id: NodeId, i: usize) -> Result<ValueId, Error> {
    g.node(id)
        .and_then(|n| n.args.get(i))
        .and_then(Arg::value)
        .ok_or_else(|| Error::Unsupported {
            node: g
                .node(id)
                .map_or_else(|| format!("#{}", id.index()), |n| n.name.clone()),
            what: format!("operand {i} of a convolution is not a tensor"),
        })
}

/// Replaces convolution `id`'s weight, when it is a constant, by a permute
/// view of the constant laid out `[O, kh, kw, I/g]` (one per constant, shared
/// by the convolutions that read it). Returns how many nodes changed.
fn relayout_weight(g: &mut Graph, id: NodeId, state: &mut State) -> Result<usize, Error> {
    let weight = node_value(g, id, 1)?;
    let view = match state.weights.get(&weight.node) {
        Some(&view) => view,
        None => {
            let Some(view) = channels_last_constant(g, weight)? else {
                return Ok(0);
            };
            state.weights.insert(weight.node, view);
            view
        }
    };
    let Some(node) = g.node(id) else {
        return Ok(0);
    };
    let mut args = node.args.clone();
    args[1] = Arg::Value(view);
    g.set_args(id, args);
    Ok(1)
}

/// `permute(c, [0, 3, 1, 2])` of a new constant `c` holding the elements of
/// the 4-D constant `w` laid out `[O, kh, kw, I]`, or `None` when `w` is no
/// constant with elements of its own.
fn channels_last_constant(g: &mut Graph, w: ValueId) -> Result<Option<ValueId>, Error> {
    let Some(node) = g.node(w.node) else {
        return Ok(None);
    };
    let (Op::Constant { data }, Some(meta)) =
        (&node.op, node.outputs.first().and_then(|m| m.fixed()))
    else {
        return Ok(None);
    };
    let &[o, i, kh, kw] = meta.shape.as_slice() else {
        return Ok(None);
    };
    let (name, line, dtype) = (node.name.clone(), node.line, meta.dtype);
    // Position in the `[O, I, kh, kw]` constant of element `n` of `[O, kh, kw, I]`.
    let from = |n: usize| -> usize {
        let n = n as i64;
        let (c, rest) = (n % i, n / i);
        let (x, rest) = (rest % kw, rest / kw);
        let (y, k) = (rest % kh, rest / kh);
        (((k * i + c) * kh + y) * kw + x) as usize
    };
    let total = usize::try_from(o * i * kh * kw).unwrap_or(0);
    let data = match data {
        ConstData::Fill(_) => return Ok(None),
        ConstData::Values(values) => {
            let out: Vec<f64> = (0..total)
                .map(|n| values.get(from(n)).copied().unwrap_or(0.0))
                .collect();
            ConstData::Values(Arc::from(out))
        }
        ConstData::Bytes { dtype, bytes } => {
            let size = dtype.size_bytes();
            let mut out = crate::memory::try_vec::<u8>(
                || format!("the channels-last copy of `{name}`"),
                total * size,
            )
            .map_err(|e| Error::Unsupported {
                node: name.clone(),
                what: e.to_string(),
            })?;
            for n in 0..total {
                let at = from(n) * size;
                out.extend_from_slice(bytes.get(at..at + size).unwrap_or(&[0; 8][..size]));
            }
            ConstData::Bytes {
                dtype: *dtype,
                bytes: Arc::from(out),
            }
        }
    };
    let constant_name = g.fresh_name(&format!("{name}_channels_last"));
    let constant = g.add_node(Node {
        name: constant_name,
        op: Op::Constant { data },
        args: vec![],
        outputs: vec![TensorMeta::contiguous(vec![o, kh, kw, i], dtype)],
        line,
    });
    let permute = Op::Permute {
        dims: TO_NCHW.to_vec(),
    };
    let args = vec![Arg::Value(ValueId::first(constant))];
    emit(g, PASS, &name, permute, args, line).map(Some)
}

/// Whether node `id` is a pointwise op of a 4-D result, no graph output, that
/// reads a value whose `NHWC` form is at hand or is a convolution's input.
fn sinkable(g: &Graph, id: NodeId, state: &State) -> bool {
    let Some(node) = g.node(id) else { return false };
    let pointwise = node.op.is_elementwise();
    let rank4 = matches!(node.outputs.as_slice(), [m] if m.rank() == 4);
    if !pointwise || !rank4 || g.outputs().iter().any(|o| o.node == id) {
        return false;
    }
    state.conv_inputs.contains(&ValueId::first(id))
        || node
            .args
            .iter()
            .filter_map(Arg::value)
            .any(|v| state.nhwc_form(v).is_some())
}

/// Computes pointwise node `id` in `NHWC` order and re-points its readers at
/// the result's `NCHW` view.
fn sink(g: &mut Graph, id: NodeId, state: &mut State) -> Result<(), Error> {
    let Some(node) = g.node(id) else {
        return Ok(());
    };
    let (op, name, line, args) = (
        node.op.clone(),
        node.name.clone(),
        node.line,
        node.args.clone(),
    );
    let mut nhwc_args = Vec::with_capacity(args.len());
    for arg in args {
        nhwc_args.push(match arg {
            Arg::Value(v) => Arg::Value(to_nhwc(g, v, state, &name, line)?),
            scalar => scalar,
        });
    }
    let y = emit(g, PASS, &name, op, nhwc_args, line)?;
    let permute = Op::Permute {
        dims: TO_NCHW.to_vec(),
    };
    let back = emit(g, PASS, &name, permute, vec![Arg::Value(y)], line)?;
    replace_node(g, id, &[back]);
    state.nhwc.insert(back, y);
    Ok(())
}

/// Operand `v` of a pointwise op computed in `NHWC` order, read in that order:
/// its `NHWC` form, itself when it is a scalar, else a permute view of it (a
/// lower rank first made 4-D with leading ones, as broadcasting reads it).
fn to_nhwc(
    g: &mut Graph,
    v: ValueId,
    state: &mut State,
    base: &str,
    line: Option<u32>,
) -> Result<ValueId, Error> {
    match state.nhwc_form(v) {
        Some(NhwcForm::Value(t)) => return Ok(t),
        Some(NhwcForm::ConvResult) => {
            let permute = Op::Permute {
                dims: TO_NHWC.to_vec(),
            };
            let t = emit(g, PASS, base, permute, vec![Arg::Value(v)], line)?;
            state.nhwc.insert(v, t);
            return Ok(t);
        }
        None => {}
    }
    let meta = g.meta(v).ok_or_else(|| Error::Unsupported {
        node: base.to_string(),
        what: "an operand has no metadata".into(),
    })?;
    if meta.rank() == 0 {
        return Ok(v);
    }
    let mut x = v;
    if meta.rank() < 4 {
        let mut shape = vec![crate::graph::sym::Size::from(1); 4 - meta.rank()];
        shape.extend_from_slice(&meta.shape);
        let reshape = Op::Reshape { shape, view: true };
        x = emit(g, PASS, base, reshape, vec![Arg::Value(x)], line)?;
    }
    let permute = Op::Permute {
        dims: TO_NHWC.to_vec(),
    };
    emit(g, PASS, base, permute, vec![Arg::Value(x)], line)
}
