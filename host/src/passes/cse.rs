//! Common-subexpression elimination: two nodes with the same op, attributes and operands
//! compute the same values, so the later one is replaced by the earlier. Never merges
//! graph inputs.

use super::{replace_node, Error, Stats};
use crate::graph::{ConstData, Graph, Op, ValueId};
use std::collections::HashMap;

/// Runs CSE in one topological sweep (operands are canonical before their users).
pub fn run(g: &mut Graph) -> Result<Stats, Error> {
    let _span = tracing::info_span!("cse").entered();
    let order = g
        .topo_order()
        .map_err(|_| Error::Graph(crate::graph::Error::NoOutputs))?;
    let mut seen: HashMap<String, crate::graph::NodeId> = HashMap::new();
    let mut changed = 0;
    for id in order {
        let Some(node) = g.node(id) else { continue };
        let key = match &node.op {
            Op::Input { .. } => continue,
            // Large literal constants are not worth hashing; equal fills are merged.
            Op::Constant {
                data: ConstData::Values(v),
            } if v.len() > 64 => continue,
            // Op and operands determine the outputs, so they are the whole key.
            op => format!("{op:?}|{:?}", node.args),
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
