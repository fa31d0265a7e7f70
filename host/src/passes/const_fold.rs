//! Constant folding: a node whose operands are all constants is evaluated with the
//! reference interpreter and becomes a constant. Single-output nodes only, and only results
//! a kernel would rather read than compute:
//! - any result of at most [`MAX_FOLD_ELEMENTS`] elements;
//! - a larger one, up to [`MAX_COSTLY_FOLD_ELEMENTS`], where a costly op (a logarithm, a
//!   division, a power) made it from factories and small constants. DeBERTa's and T5's
//!   relative-position buckets are such: a log per element, otherwise recomputed for every
//!   (batch, head) pair that reads them.
//!
//! A large value made by cheap ops alone (an `arange` compared with itself into a causal mask)
//! stays in the graph: its kernel computes it from indices, which is cheaper than reading it.

use super::{Error, Stats};
use crate::graph::{Arg, ConstData, Graph, NodeId, Op, TensorMeta};
use crate::interp::{constant, eval_op, Tensor, Val};
use std::collections::HashMap;
use std::sync::Arc;

/// The largest result folded.
pub const MAX_FOLD_ELEMENTS: i64 = 4096;

/// The largest result folded where a costly op made it (see the module's notes).
pub const MAX_COSTLY_FOLD_ELEMENTS: i64 = 1 << 20;

/// The most elements held at once for large values whose users are still to come (the
/// cheap steps between the factories and a costly op, and folded tables).
const MAX_HELD_ELEMENTS: i64 = 1 << 22;

/// A large value computed during the sweep: a folded costly one, or a cheap one held for
/// the costly op that may follow it.
struct Held {
    value: Tensor,
    costly: bool,
    /// the operand uses of it not yet seen
    users: usize,
}

/// Runs constant folding in one topological sweep (folded nodes feed later folds).
pub fn run(g: &mut Graph) -> Result<Stats, Error> {
    let _span = tracing::info_span!("const_fold").entered();
    let order = super::topo_order(g, "const_fold")?;
    let mut changed = 0;
    let mut held: HashMap<NodeId, Held> = HashMap::new();
    let mut held_elements = 0;
    for id in order {
        let Some(node) = g.node(id) else { continue };
        // `full` of any size is one number.
        if let (Op::Full { value, .. }, [meta]) = (&node.op, node.outputs.as_slice()) {
            let meta = meta.clone();
            let x = meta.dtype.round(value.to_f64());
            if let Some(n) = g.node_mut(id) {
                n.op = Op::Constant {
                    data: ConstData::Fill(x),
                };
                n.outputs = vec![meta];
            }
            g.set_args(id, vec![]);
            changed += 1;
            continue;
        }
        let operands: Vec<NodeId> = node
            .args
            .iter()
            .filter_map(|a| a.value())
            .map(|v| v.node)
            .collect();
        let result = evaluate(g, id, &held);
        // A held value is dropped once its last user has been seen.
        for operand in operands {
            if let Some(h) = held.get_mut(&operand) {
                h.users = h.users.saturating_sub(1);
                if h.users == 0 {
                    held_elements -= h.value.shape.iter().product::<i64>();
                    held.remove(&operand);
                }
            }
        }
        let Some((t, costly)) = result else {
            continue;
        };
        let numel = t.shape.iter().product::<i64>();
        // A large view or copy of a folded value is left to read that value in place.
        let moves = g.node(id).is_some_and(|n| {
            n.op.is_view() || matches!(n.op, Op::Repeat { .. } | Op::Clone | Op::Contiguous)
        });
        if numel <= MAX_FOLD_ELEMENTS || (costly && !moves) {
            replace_with_constant(g, id, &t);
            changed += 1;
        }
        let users = g.users(id).count();
        if numel > MAX_FOLD_ELEMENTS && users > 0 && held_elements + numel <= MAX_HELD_ELEMENTS {
            held_elements += numel;
            held.insert(
                id,
                Held {
                    value: t,
                    costly,
                    users,
                },
            );
        }
    }
    Ok(Stats { changed })
}

/// The value of node `id` where every operand is a small constant or a held value, and
/// whether a costly op went into it; `None` where it is not a fold candidate.
fn evaluate(g: &Graph, id: NodeId, held: &HashMap<NodeId, Held>) -> Option<(Tensor, bool)> {
    let node = g.node(id)?;
    if matches!(node.op, Op::Input { .. } | Op::Constant { .. })
        || node.outputs.len() != 1
        || node
            .outputs
            .iter()
            .any(|m| m.numel() > MAX_COSTLY_FOLD_ELEMENTS)
    {
        return None;
    }
    // A product's work grows faster than its operands: over a held value (up to 2^20
    // elements) it could hold up a compile, so only small constants go into one.
    let product = node.op.is_product();
    let mut owned = Vec::new();
    let mut operand_costly = false;
    for a in &node.args {
        let Arg::Value(v) = a else { continue };
        if let Some(h) = held.get(&v.node) {
            if product {
                return None;
            }
            operand_costly |= h.costly;
            continue;
        }
        match g.node(v.node).map(|p| (&p.op, p.outputs.first())) {
            // A constant that cannot be allocated is not folded.
            Some((Op::Constant { data }, Some(m))) if m.numel() <= MAX_FOLD_ELEMENTS => {
                owned.push((v.node, constant(&m.fixed()?, data).ok()?));
            }
            _ => return None,
        }
    }
    // Factories (`full`, `arange`) have no operands and fold too.
    let factory = matches!(node.op, Op::Full { .. } | Op::Arange { .. });
    if node.args.iter().all(|a| matches!(a, Arg::Scalar(_))) && !factory {
        return None;
    }
    let vals: Vec<Val> = node
        .args
        .iter()
        .map(|a| match a {
            Arg::Value(v) => match held.get(&v.node) {
                Some(h) => Some(Val::Tensor(&h.value)),
                None => owned
                    .iter()
                    .find(|(n, _)| *n == v.node)
                    .map(|(_, t)| Val::Tensor(t)),
            },
            Arg::Scalar(s) => Some(Val::Scalar(*s)),
        })
        .collect::<Option<_>>()?;
    let outs = node
        .outputs
        .iter()
        .map(TensorMeta::fixed)
        .collect::<Option<Vec<_>>>()?;
    // A fold the interpreter cannot do is simply not done.
    let t = eval_op(&node.op, &vals, &outs).ok()?.into_iter().next()?;
    Some((t, operand_costly || node.op.costs_more_than_a_read()))
}

/// Makes node `id` the constant `t`.
fn replace_with_constant(g: &mut Graph, id: NodeId, t: &Tensor) {
    let meta = TensorMeta::contiguous(t.shape.clone(), t.dtype);
    let data = ConstData::Values(Arc::from(t.to_vec()));
    // A folded view (a transposed weight) becomes a contiguous constant: its users,
    // which read its strides (an `expand` too large to fold), are inferred again.
    if g.node(id).and_then(|n| n.outputs.first()) != Some(&meta) {
        let users: Vec<_> = g.users(id).map(|(u, _)| u).collect();
        for u in users {
            g.node_mut(u);
        }
    }
    if let Some(n) = g.node_mut(id) {
        n.op = Op::Constant { data };
        n.outputs = vec![meta];
    }
    g.set_args(id, vec![]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{parse_toml, UnaryOp};

    /// `scores` plus a table made from `arange(n)` alone: `costly` adds a logarithm
    /// of the relative positions (T5's and DeBERTa's buckets), otherwise the
    /// table is `rel <= 0` (a causal mask), made of cheap ops only.
    fn graph(n: i64, costly: bool) -> Graph {
        let table = if costly {
            "[[nodes]]\nname = \"a\"\nop = \"abs\"\nargs = [\"rel\"]\n\n\
             [[nodes]]\nname = \"f\"\nop = \"to\"\nargs = [\"a\"]\nattrs = { dtype = \"float32\" }\n\n\
             [[nodes]]\nname = \"l\"\nop = \"log1p\"\nargs = [\"f\"]\n\n\
             [[nodes]]\nname = \"table\"\nop = \"ceil\"\nargs = [\"l\"]\n"
        } else {
            "[[nodes]]\nname = \"table\"\nop = \"le\"\nargs = [\"rel\", 0]\n"
        };
        let text = format!(
            "format = \"kiln-graph/1\"\nname = \"t\"\noutputs = [\"y\"]\n\n\
             [[inputs]]\nname = \"scores\"\nshape = [2, {n}, {n}]\ndtype = \"float32\"\n\n\
             [[nodes]]\nname = \"ids\"\nop = \"arange\"\nargs = [{n}]\n\n\
             [[nodes]]\nname = \"q\"\nop = \"unsqueeze\"\nargs = [\"ids\", 1]\n\n\
             [[nodes]]\nname = \"k\"\nop = \"unsqueeze\"\nargs = [\"ids\", 0]\n\n\
             [[nodes]]\nname = \"rel\"\nop = \"sub\"\nargs = [\"q\", \"k\"]\n\n\
             {table}\n\
             [[nodes]]\nname = \"wide\"\nop = \"expand\"\nargs = [\"table\", [2, {n}, {n}]]\n\n\
             [[nodes]]\nname = \"y\"\nop = \"add\"\nargs = [\"scores\", \"wide\"]\n"
        );
        parse_toml(&text).expect("the test graph parses")
    }

    fn op_of<'g>(g: &'g Graph, name: &str) -> &'g Op {
        let id = g
            .node_ids()
            .find(|&id| g.node(id).is_some_and(|n| n.name == name))
            .expect("the test graph has the node");
        &g.node(id).expect("a node").op
    }

    #[test]
    fn a_large_table_a_logarithm_made_from_factories_is_folded_and_its_expand_stays_a_view() {
        let mut g = graph(96, true);
        run(&mut g).expect("the pass runs");
        match op_of(&g, "table") {
            Op::Constant {
                data: ConstData::Values(v),
            } => {
                assert_eq!(v.len(), 96 * 96);
                // |rel| = 95 at the table's corner: ceil(log1p(95)) = 5.
                assert_eq!(v[95], (95f64).ln_1p().ceil());
            }
            op => panic!("the table is not folded: {op:?}"),
        }
        // The cheap steps before the logarithm are not made constants of their own,
        // and the expand reads the table in place.
        assert!(matches!(op_of(&g, "rel"), Op::Binary { .. }));
        assert!(matches!(op_of(&g, "wide"), Op::Expand { .. }));
    }

    #[test]
    fn a_large_table_of_cheap_ops_is_left_to_its_kernel_and_a_small_one_is_folded() {
        let mut g = graph(96, false);
        run(&mut g).expect("the pass runs");
        assert!(matches!(op_of(&g, "table"), Op::Binary { .. }));
        let mut g = graph(64, false);
        run(&mut g).expect("the pass runs");
        assert!(matches!(op_of(&g, "table"), Op::Constant { .. }));
    }

    /// DeBERTa's layers each shift and bucket the one table of relative positions: more
    /// large values in all than the pass holds at once, each needed only until its
    /// user has been seen.
    #[test]
    fn held_values_are_let_go_after_their_last_user_so_every_layer_s_table_folds() {
        let n = 512;
        let layers = 2 * MAX_HELD_ELEMENTS / (n * n);
        let mut text = format!(
            "format = \"kiln-graph/1\"\nname = \"t\"\noutputs = [\"y{}\"]\n\n\
             [[inputs]]\nname = \"x\"\nshape = [{n}, {n}]\ndtype = \"float32\"\n\n\
             [[nodes]]\nname = \"ids\"\nop = \"arange\"\nargs = [{n}]\n\n\
             [[nodes]]\nname = \"q\"\nop = \"unsqueeze\"\nargs = [\"ids\", 1]\n\n\
             [[nodes]]\nname = \"k\"\nop = \"unsqueeze\"\nargs = [\"ids\", 0]\n\n\
             [[nodes]]\nname = \"rel\"\nop = \"sub\"\nargs = [\"q\", \"k\"]\n\n\
             [[nodes]]\nname = \"f\"\nop = \"to\"\nargs = [\"rel\"]\nattrs = {{ dtype = \"float32\" }}\n\n",
            layers - 1
        );
        let mut last = "x".to_string();
        for i in 0..layers {
            text.push_str(&format!(
                "[[nodes]]\nname = \"s{i}\"\nop = \"add\"\nargs = [\"f\", {i}.5]\n\n\
                 [[nodes]]\nname = \"a{i}\"\nop = \"abs\"\nargs = [\"s{i}\"]\n\n\
                 [[nodes]]\nname = \"l{i}\"\nop = \"log1p\"\nargs = [\"a{i}\"]\n\n\
                 [[nodes]]\nname = \"y{i}\"\nop = \"add\"\nargs = [\"{last}\", \"l{i}\"]\n\n"
            ));
            last = format!("y{i}");
        }
        let mut g = parse_toml(&text).expect("the test graph parses");
        run(&mut g).expect("the pass runs");
        for i in 0..layers {
            let op = op_of(&g, &format!("l{i}"));
            assert!(matches!(op, Op::Constant { .. }), "layer {i}: {op:?}");
        }
    }

    #[test]
    fn a_product_of_large_held_values_is_not_evaluated() {
        let text = "format = \"kiln-graph/1\"\nname = \"t\"\noutputs = [\"y\"]\n\n\
             [[inputs]]\nname = \"x\"\nshape = [96, 96]\ndtype = \"float32\"\n\n\
             [[nodes]]\nname = \"ids\"\nop = \"arange\"\nargs = [9216]\n\n\
             [[nodes]]\nname = \"f\"\nop = \"to\"\nargs = [\"ids\"]\nattrs = { dtype = \"float32\" }\n\n\
             [[nodes]]\nname = \"m\"\nop = \"reshape\"\nargs = [\"f\", [96, 96]]\n\n\
             [[nodes]]\nname = \"p\"\nop = \"mm\"\nargs = [\"m\", \"m\"]\n\n\
             [[nodes]]\nname = \"l\"\nop = \"log1p\"\nargs = [\"p\"]\n\n\
             [[nodes]]\nname = \"y\"\nop = \"add\"\nargs = [\"x\", \"l\"]\n";
        let mut g = parse_toml(text).expect("the test graph parses");
        run(&mut g).expect("the pass runs");
        assert!(matches!(op_of(&g, "p"), Op::Mm), "{:?}", op_of(&g, "p"));
        assert!(matches!(op_of(&g, "l"), Op::Unary(UnaryOp::Log1p)));
    }

    #[test]
    fn a_costly_table_past_the_fold_limit_is_left_to_its_kernel() {
        let mut g = graph(1025, true);
        const { assert!(1025 * 1025 > MAX_COSTLY_FOLD_ELEMENTS) };
        run(&mut g).expect("the pass runs");
        assert!(matches!(op_of(&g, "table"), Op::Unary(UnaryOp::Ceil)));
    }
}
