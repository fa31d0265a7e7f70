//! View canonicalisation: `transpose` becomes `permute`, and chains of views collapse into
//! one view of the chain's source (reshape-like views into one `reshape`, permutes into one
//! composed `permute`, expands into one `expand`). Rewrites nodes in place; the dead middle
//! of a chain is left for DCE. Never changes values.

use super::{Error, Stats};
use crate::graph::shape::wrap_dims;
use crate::graph::{Arg, Graph, Op};

fn reshape_like(op: &Op) -> bool {
    matches!(
        op,
        Op::Reshape { .. } | Op::Squeeze { .. } | Op::Unsqueeze { .. }
    )
}

/// Runs view canonicalisation in one topological sweep, so a chain of any length
/// collapses (each view already points at the chain's source when its user is visited).
pub fn run(g: &mut Graph) -> Result<Stats, Error> {
    let _span = tracing::info_span!("views").entered();
    let order = super::topo_order(g, "views")?;
    let mut changed = 0;
    for id in order {
        let Some(node) = g.node(id) else { continue };
        let Some(out) = node.outputs.first().and_then(|m| m.fixed()) else {
            continue;
        };
        if let Op::Transpose { dim0, dim1 } = node.op {
            let rank = out.rank();
            if let Ok(ds) = wrap_dims(Some(&[dim0, dim1]), rank) {
                let mut perm: Vec<i64> = (0..rank as i64).collect();
                if let [a, b] = ds[..] {
                    perm.swap(a, b);
                }
                if let Some(n) = g.node_mut(id) {
                    n.op = Op::Permute { dims: perm };
                }
                changed += 1;
            }
        }
        let Some(node) = g.node(id) else { continue };
        let [Arg::Value(src)] = node.args[..] else {
            continue;
        };
        let Some(producer) = g.node(src.node) else {
            continue;
        };
        let [Arg::Value(source)] = producer.args[..] else {
            continue;
        };
        let out_shape = crate::graph::shape::sizes(&out.shape);
        let rewrite = match (&producer.op, &node.op) {
            (p, v) if reshape_like(p) && reshape_like(v) => Some(Op::Reshape {
                shape: out_shape,
                view: false,
            }),
            (Op::Permute { dims: inner }, Op::Permute { dims: outer }) => {
                let rank = out.rank();
                match (wrap_dims(Some(inner), rank), wrap_dims(Some(outer), rank)) {
                    (Ok(i), Ok(o)) if i.len() == rank && o.len() == rank => Some(Op::Permute {
                        dims: o.iter().map(|&k| i[k] as i64).collect(),
                    }),
                    _ => None,
                }
            }
            (Op::Expand { .. }, Op::Expand { .. }) => Some(Op::Expand { sizes: out_shape }),
            _ => None,
        };
        if let Some(op) = rewrite {
            if let Some(n) = g.node_mut(id) {
                n.op = op;
            }
            g.set_args(id, vec![Arg::Value(source)]);
            changed += 1;
        }
    }
    Ok(Stats { changed })
}
