//! Common-subexpression elimination: two nodes with the same op, attributes and operands
//! compute the same values, so the later one is replaced by the earlier. Never merges
//! graph inputs.
//!
//! What makes two nodes compute the same values: the op with its attributes (`Op` is
//! `Eq + Hash`, floats by bit pattern, so `0.0` and `-0.0`, which differ under
//! division, stay apart), its operands, and for a constant its shape and dtype (every
//! other node's metadata follows from its op and operands). Nodes are bucketed by the
//! hash of that and compared in place, so that no op is cloned to be a map key.

use super::{replace_node, Error, Stats};
use crate::graph::{Arg, ConstData, Graph, Node, NodeId, Op, Scalar, ValueId};
use std::collections::hash_map::{DefaultHasher, HashMap};
use std::hash::{Hash, Hasher};

/// Large literal constants are not worth hashing; equal fills are still merged.
const MAX_KEYED_VALUES: usize = 64;

/// An operand as CSE compares it: a value, or a number by kind and bit pattern.
#[derive(PartialEq, Eq, Hash)]
enum ArgKey {
    Value(ValueId),
    Bool(bool),
    Int(i64),
    Float(u64),
}

impl From<&Arg> for ArgKey {
    fn from(a: &Arg) -> ArgKey {
        match a {
            Arg::Value(v) => ArgKey::Value(*v),
            Arg::Scalar(Scalar::Bool(b)) => ArgKey::Bool(*b),
            Arg::Scalar(Scalar::Int(i)) => ArgKey::Int(*i),
            Arg::Scalar(Scalar::Float(f)) => ArgKey::Float(f.to_bits()),
        }
    }
}

/// A constant CSE keys: small enough to compare, with one output. Its elements are
/// read decoded, so that stored bytes and folded values that are the same elements are
/// the same constant.
fn keyed_constant(node: &Node) -> Option<&ConstData> {
    match &node.op {
        Op::Constant { data } if node.outputs.len() == 1 && data.len() <= MAX_KEYED_VALUES => {
            Some(data)
        }
        _ => None,
    }
}

/// The hash of what makes node `node` compute its values, or `None` for nodes CSE
/// leaves alone (inputs, large constants).
fn key_hash(node: &Node) -> Option<u64> {
    let mut h = DefaultHasher::new();
    match &node.op {
        Op::Input { .. } => return None,
        Op::Constant { .. } => {
            let data = keyed_constant(node)?;
            let meta = node.outputs.first()?;
            (&meta.shape, meta.dtype).hash(&mut h);
            match data {
                ConstData::Fill(x) => (0u8, x.to_bits()).hash(&mut h),
                d => {
                    (1u8, d.len()).hash(&mut h);
                    (0..d.len()).for_each(|i| d.get(i).to_bits().hash(&mut h));
                }
            }
        }
        op => op.hash(&mut h),
    }
    node.args.iter().for_each(|a| ArgKey::from(a).hash(&mut h));
    Some(h.finish())
}

/// Whether nodes `a` and `b` (of equal [`key_hash`]) compute the same values.
fn same(a: &Node, b: &Node) -> bool {
    let args = a.args.len() == b.args.len()
        && a.args
            .iter()
            .zip(&b.args)
            .all(|(x, y)| ArgKey::from(x) == ArgKey::from(y));
    args && match (keyed_constant(a), keyed_constant(b)) {
        (Some(x), Some(y)) => {
            let (ma, mb) = (&a.outputs[0], &b.outputs[0]);
            ma.shape == mb.shape
                && ma.dtype == mb.dtype
                && match (x, y) {
                    (ConstData::Fill(p), ConstData::Fill(q)) => p.to_bits() == q.to_bits(),
                    (ConstData::Fill(_), _) | (_, ConstData::Fill(_)) => false,
                    (p, q) => {
                        p.len() == q.len()
                            && (0..p.len()).all(|i| p.get(i).to_bits() == q.get(i).to_bits())
                    }
                }
        }
        (None, None) => !matches!(a.op, Op::Constant { .. }) && a.op == b.op,
        _ => false,
    }
}

/// Runs CSE in one topological sweep (operands are canonical before their users).
pub fn run(g: &mut Graph) -> Result<Stats, Error> {
    let _span = tracing::info_span!("cse").entered();
    let order = super::topo_order(g, "cse")?;
    // Nodes by key hash; a bucket holds more than one only on a hash collision.
    let mut seen: HashMap<u64, Vec<NodeId>> = HashMap::with_capacity(order.len());
    let mut changed = 0;
    for id in order {
        let Some(node) = g.node(id) else { continue };
        let Some(hash) = key_hash(node) else { continue };
        let bucket = seen.entry(hash).or_default();
        let first = bucket
            .iter()
            .copied()
            .find(|&f| g.node(f).is_some_and(|earlier| same(earlier, node)));
        match first {
            Some(first) => {
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
            None => bucket.push(id),
        }
    }
    Ok(Stats { changed })
}
