//! Dead-code elimination: removes every node no graph output depends on (graph inputs
//! stay: they are the graph's signature). Iterative, never recursive.

use super::{Error, Stats};
use crate::graph::{Graph, Op};

/// Runs DCE.
pub fn run(g: &mut Graph) -> Result<Stats, Error> {
    let _span = tracing::info_span!("dce").entered();
    let mut live = vec![false; g.node_ids().map(|n| n.index() + 1).max().unwrap_or(0)];
    let mut stack: Vec<_> = g.outputs().iter().map(|v| v.node).collect();
    while let Some(n) = stack.pop() {
        if live[n.index()] {
            continue;
        }
        live[n.index()] = true;
        if let Some(node) = g.node(n) {
            stack.extend(node.args.iter().filter_map(|a| a.value()).map(|v| v.node));
        }
    }
    let dead: Vec<_> = g
        .node_ids()
        .filter(|n| {
            !live[n.index()] && !matches!(g.node(*n).map(|x| &x.op), Some(Op::Input { .. }))
        })
        .collect();
    for &n in &dead {
        g.remove_node(n);
    }
    Ok(Stats {
        changed: dead.len(),
    })
}
