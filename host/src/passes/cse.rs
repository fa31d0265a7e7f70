//! Common-subexpression elimination: two nodes with the same op, attributes and operands
//! compute the same values, so the later one is replaced by the earlier. Never merges
//! graph inputs.

use super::{replace_node, Error, Stats};
use crate::graph::{Arg, ConstData, Graph, NodeId, Op, Scalar, ValueId};
use std::collections::HashMap;
use std::mem::Discriminant;

/// Large literal constants are not worth hashing; equal fills are still merged.
const MAX_KEYED_VALUES: usize = 64;

/// What makes two nodes compute the same values: the op's variant, its attributes and its
/// operands, the last two flattened into words. Floats enter as their bit patterns, so
/// `0.0` and `-0.0` (which differ under division) stay apart and the key is `Eq`.
#[derive(PartialEq, Eq, Hash)]
struct Key {
    op: Discriminant<Op>,
    words: Vec<u64>,
}

/// Appends values to a key. Every variable-length part is preceded by its length and
/// every optional part by a presence word, so different attributes never flatten to the
/// same words.
struct Words(Vec<u64>);

impl Words {
    fn int(&mut self, x: i64) {
        self.0.push(x as u64);
    }
    fn float(&mut self, x: f64) {
        self.0.push(x.to_bits());
    }
    fn flag(&mut self, b: bool) {
        self.0.push(b as u64);
    }
    fn ints(&mut self, xs: &[i64]) {
        self.0.push(xs.len() as u64);
        xs.iter().for_each(|&x| self.int(x));
    }
    fn opt_ints(&mut self, xs: &Option<Vec<i64>>) {
        self.flag(xs.is_some());
        if let Some(xs) = xs {
            self.ints(xs);
        }
    }
    fn opt_int(&mut self, x: Option<i64>) {
        self.flag(x.is_some());
        self.int(x.unwrap_or(0));
    }
    fn opt_float(&mut self, x: Option<f64>) {
        self.flag(x.is_some());
        self.float(x.unwrap_or(0.0));
    }
    fn scalar(&mut self, s: Scalar) {
        match s {
            Scalar::Bool(b) => self.0.extend([0, b as u64]),
            Scalar::Int(i) => self.0.extend([1, i as u64]),
            Scalar::Float(f) => self.0.extend([2, f.to_bits()]),
        }
    }
    fn opt_scalar(&mut self, s: Option<Scalar>) {
        self.flag(s.is_some());
        if let Some(s) = s {
            self.scalar(s);
        }
    }
}

/// The key of a node, or `None` for nodes CSE leaves alone. A constant's key holds its
/// shape and dtype besides its values (every other node's metadata follows from its op
/// and operands).
fn key(op: &Op, args: &[Arg], outputs: &[crate::graph::TensorMeta]) -> Option<Key> {
    let mut w = Words(Vec::with_capacity(8));
    match op {
        Op::Input { .. } => return None,
        Op::Constant { data } => match data {
            _ if outputs.len() != 1 => return None,
            d if d.len() > MAX_KEYED_VALUES => return None,
            ConstData::Values(_) | ConstData::Bytes { .. } => {
                w.ints(&outputs[0].shape);
                w.0.push(outputs[0].dtype as u64);
                w.flag(true);
                w.0.push(data.len() as u64);
                (0..data.len()).for_each(|i| w.float(data.get(i)));
            }
            ConstData::Fill(x) => {
                w.ints(&outputs[0].shape);
                w.0.push(outputs[0].dtype as u64);
                w.flag(false);
                w.float(*x);
            }
        },
        Op::Unary(u) => w.0.push(*u as u64),
        Op::Gelu { approximate } => w.0.push(*approximate as u64),
        Op::Binary { op, alpha } => {
            w.0.push(*op as u64);
            w.opt_scalar(*alpha);
        }
        Op::Clamp { min, max } => {
            w.opt_scalar(*min);
            w.opt_scalar(*max);
        }
        Op::Cast { dtype } => w.0.push(*dtype as u64),
        Op::Reduce {
            op,
            dims,
            keepdim,
            dtype,
        } => {
            w.0.push(*op as u64);
            w.opt_ints(dims);
            w.flag(*keepdim);
            w.opt_int(dtype.map(|d| d as i64));
        }
        Op::Var {
            dims,
            correction,
            keepdim,
        } => {
            w.opt_ints(dims);
            w.float(*correction);
            w.flag(*keepdim);
        }
        Op::Softmax {
            dim,
            log,
            half_to_float,
            dtype,
        } => {
            w.int(*dim);
            w.flag(*log);
            w.flag(*half_to_float);
            w.opt_int(dtype.map(|d| d as i64));
        }
        Op::LayerNorm {
            normalized_shape,
            eps,
            weight,
            bias,
            native,
        } => {
            w.ints(normalized_shape);
            w.float(*eps);
            w.flag(*weight);
            w.flag(*bias);
            w.flag(*native);
        }
        Op::RmsNorm {
            normalized_shape,
            eps,
            weight,
        } => {
            w.ints(normalized_shape);
            w.opt_float(*eps);
            w.flag(*weight);
        }
        Op::Linear { bias } => w.flag(*bias),
        Op::Addmm { beta, alpha } => {
            w.scalar(*beta);
            w.scalar(*alpha);
        }
        Op::Reshape { shape, view } => {
            w.ints(shape);
            w.flag(*view);
        }
        Op::Permute { dims } => w.ints(dims),
        Op::Transpose { dim0, dim1 } => {
            w.int(*dim0);
            w.int(*dim1);
        }
        Op::Unsqueeze { dim } => w.int(*dim),
        Op::Squeeze { dims } => w.opt_ints(dims),
        Op::Expand { sizes } => w.ints(sizes),
        Op::Select { dim, index } => {
            w.int(*dim);
            w.int(*index);
        }
        Op::Slice {
            dim,
            start,
            end,
            step,
        } => {
            w.int(*dim);
            w.opt_int(*start);
            w.opt_int(*end);
            w.int(*step);
        }
        Op::Split { split_size, dim } => {
            w.int(*split_size);
            w.int(*dim);
        }
        Op::SplitWithSizes { sizes, dim } => {
            w.ints(sizes);
            w.int(*dim);
        }
        Op::GetItem { index } => w.int(*index),
        Op::Cat { dim } => w.int(*dim),
        Op::NoOp(kind) => w.0.push(*kind as u64),
        Op::Where
        | Op::Mm
        | Op::Bmm
        | Op::Matmul
        | Op::Contiguous
        | Op::Clone
        | Op::Copy
        | Op::TypeAs => {}
        // The attributes of these are plain data whose debug text is exact (floats print
        // round-trip, lists with their lengths): the text is the key.
        Op::Arange { .. }
        | Op::Full { .. }
        | Op::Index { .. }
        | Op::Gather { .. }
        | Op::Cumsum { .. }
        | Op::Diff { .. }
        | Op::Attention { .. }
        | Op::Conv { .. }
        | Op::BatchNorm { .. }
        | Op::MaxPool { .. }
        | Op::AdaptiveAvgPool { .. }
        | Op::AvgPool { .. }
        | Op::GroupNorm { .. }
        | Op::Pad { .. }
        | Op::Roll { .. }
        | Op::SliceScatter { .. }
        | Op::AsStrided { .. }
        | Op::Repeat { .. }
        | Op::Flatten { .. } => {
            let text = format!("{op:?}");
            w.0.push(text.len() as u64);
            w.0.extend(text.bytes().map(u64::from));
        }
    }
    // The operand count is implied by the op for most ops but not for `cat`.
    w.0.push(args.len() as u64);
    for a in args {
        match a {
            Arg::Value(v) => {
                w.flag(true);
                w.0.push(v.node.index() as u64);
                w.0.push(v.output as u64);
            }
            Arg::Scalar(s) => {
                w.flag(false);
                w.scalar(*s);
            }
        }
    }
    Some(Key {
        op: std::mem::discriminant(op),
        words: w.0,
    })
}

/// Runs CSE in one topological sweep (operands are canonical before their users).
pub fn run(g: &mut Graph) -> Result<Stats, Error> {
    let _span = tracing::info_span!("cse").entered();
    let order = super::topo_order(g, "cse")?;
    let mut seen: HashMap<Key, NodeId> = HashMap::with_capacity(order.len());
    let mut changed = 0;
    for id in order {
        let Some(node) = g.node(id) else { continue };
        let Some(key) = key(&node.op, &node.args, &node.outputs) else {
            continue;
        };
        match seen.get(&key) {
            Some(&first) => {
                let n = node.outputs.len() as u32;
                let new: Vec<ValueId> = (0..n)
                    .map(|output| ValueId {
                        node: first,
                        output,
                    })
                    .collect();
                replace_node(g, id, &new);
                changed += 1;
            }
            None => {
                seen.insert(key, id);
            }
        }
    }
    Ok(Stats { changed })
}
