//! Common-subexpression elimination: two nodes with the same op, attributes and operands
//! compute the same values, so the later one is replaced by the earlier. Never merges
//! graph inputs.

use super::{replace_node, Error, Stats};
use crate::graph::{Arg, ConstData, DType, Graph, NodeId, Op, Scalar, TensorMeta, ValueId};
use std::collections::HashMap;

/// Large literal constants are not worth hashing; equal fills are still merged.
const MAX_KEYED_VALUES: usize = 64;

/// What makes two nodes compute the same values: the op with its attributes (`Op` is
/// `Eq + Hash`, floats by bit pattern, so `0.0` and `-0.0`, which differ under
/// division, stay apart), its operands, and for a constant its shape and dtype (every
/// other node's metadata follows from its op and operands).
#[derive(PartialEq, Eq, Hash)]
struct Key {
    op: Op,
    args: Vec<ArgKey>,
    constant: Option<(Vec<i64>, DType)>,
}

/// An operand in a key: a value, or a number by kind and bit pattern.
#[derive(PartialEq, Eq, Hash)]
enum ArgKey {
    Value(ValueId),
    Bool(bool),
    Int(i64),
    Float(u64),
}

/// The key of a node, or `None` for nodes CSE leaves alone (inputs, large constants).
fn key(op: &Op, args: &[Arg], outputs: &[TensorMeta]) -> Option<Key> {
    let (op, constant) = match op {
        Op::Input { .. } => return None,
        Op::Constant { data } => {
            let [meta] = outputs else { return None };
            if data.len() > MAX_KEYED_VALUES {
                return None;
            }
            // Values decoded, so that stored bytes and folded values that are the same
            // elements are the same constant.
            let data = match data {
                ConstData::Fill(x) => ConstData::Fill(*x),
                d => ConstData::Values((0..d.len()).map(|i| d.get(i)).collect()),
            };
            (
                Op::Constant { data },
                Some((meta.shape.clone(), meta.dtype)),
            )
        }
        op => (op.clone(), None),
    };
    let args = args
        .iter()
        .map(|a| match a {
            Arg::Value(v) => ArgKey::Value(*v),
            Arg::Scalar(Scalar::Bool(b)) => ArgKey::Bool(*b),
            Arg::Scalar(Scalar::Int(i)) => ArgKey::Int(*i),
            Arg::Scalar(Scalar::Float(f)) => ArgKey::Float(f.to_bits()),
        })
        .collect();
    Some(Key { op, args, constant })
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
