//! Storage sharing between the tensors of an FX graph: views alias their operand,
//! in-place ops write into theirs, and a write is carried back to every alias.

use super::super::Pt2Error;
use super::{unique, Scope};
use crate::graph::ir::{Arg, Graph, Node, ValueId};
use crate::graph::ops::{NoOpKind, Op};
use crate::graph::{At, Error};
use std::collections::{HashMap, HashSet};

/// ATen ops whose output may share its operand's storage (views, and ops that return
/// their operand unchanged when there is nothing to do).
pub(super) fn aliases_operand(op: &str) -> bool {
    matches!(
        op,
        "view"
            | "reshape"
            | "_unsafe_view"
            | "view_as"
            | "slice"
            | "select"
            | "permute"
            | "transpose"
            | "t"
            | "numpy_T"
            | "unsqueeze"
            | "squeeze"
            | "expand"
            | "expand_as"
            | "alias"
            | "detach"
            | "as_strided"
            | "diagonal"
            | "narrow"
            | "unflatten"
            | "flatten"
            | "split"
            | "split_with_sizes"
            | "chunk"
            | "unbind"
            | "dropout"
            | "contiguous"
            | "to"
            | "type_as"
    )
}

/// Storage sharing between the tensors of a training-IR graph, whose in-place ops
/// (`fill_` into a slice of a mask, `copy_` into a row) change every alias of what they
/// write. Kiln functionalises them as PyTorch's `run_decompositions()` would: the write
/// goes back up the chain of views into the tensor they view (`slice_scatter`,
/// `select_scatter`, the inverse reshape or permutation), and every other view of that
/// storage is made again from the new value when it is next read. A write back through a
/// view Kiln cannot invert (`expand`, `as_strided`, a piece of `split`) leaves the other
/// aliases stale, and reading one is refused rather than computed from the value before
/// the write.
#[derive(Default)]
pub(super) struct Aliases {
    /// tensor → the tensor whose storage it shares (absent: its own)
    pub(super) root: HashMap<String, String>,
    /// root → every tensor sharing its storage, the root first
    pub(super) members: HashMap<String, Vec<String>>,
    /// view → how it was made from the tensor it views
    pub(super) views: HashMap<String, ViewOf>,
    /// tensors whose storage a write changed after they were made, and that are made
    /// again from their base when next read
    pub(super) outdated: HashSet<String>,
    /// tensor → the node that wrote into its storage through an alias it cannot be
    /// made again from
    pub(super) stale: HashMap<String, String>,
}

/// How a view was made from the tensor whose storage it shares.
#[derive(Clone)]
pub(super) struct ViewOf {
    /// the tensor it views
    pub(super) base: String,
    /// the view op (one tensor operand), or `None` for the same tensor under another
    /// name (an in-place op's result, `alias`, `detach`)
    pub(super) op: Option<Op>,
}

/// What a write into a view does to the tensor it views.
pub(super) enum WriteBack {
    /// the view is the tensor
    Same,
    /// `op(base, view)`: the view's elements put back into the base
    Scatter(Op),
    /// `op(view)`: the view reshaped or permuted back to the base
    Undo(Op),
}

impl Aliases {
    pub(super) fn root_of(&self, t: &str) -> String {
        self.root.get(t).cloned().unwrap_or_else(|| t.to_string())
    }

    /// `out` shares the storage of `of`.
    pub(super) fn share(&mut self, out: &str, of: &str) {
        let root = self.root_of(of);
        self.root.insert(out.to_string(), root.clone());
        self.members
            .entry(root.clone())
            .or_insert_with(|| vec![root])
            .push(out.to_string());
    }

    /// Whether `t` can be made again from the root of its storage: every step from it
    /// up to the root is a recorded view.
    pub(super) fn remakeable(&self, t: &str) -> bool {
        let root = self.root_of(t);
        let mut cur = t;
        // A chain of views is acyclic (each names an earlier tensor); the bound only
        // guards against a corrupt map.
        for _ in 0..=self.root.len() {
            if cur == root {
                return true;
            }
            match self.views.get(cur) {
                Some(v) => cur = &v.base,
                None => return false,
            }
        }
        false
    }

    /// An error if `t` was overwritten through an alias it cannot be made again from.
    pub(super) fn check(&self, t: &str, reader: &str) -> Result<(), Pt2Error> {
        match self.stale.get(t) {
            Some(writer) => Err(Pt2Error::Schema(format!(
                "node `{reader}` reads `{t}` after node `{writer}` changed it in place through a view Kiln cannot write back through (only slice, select, view/reshape, squeeze/unsqueeze, flatten, permute and transpose are): save `exported.run_decompositions()` instead, which writes the change out as `slice_scatter`/`copy`"
            ))),
            None => Ok(()),
        }
    }
}

/// The view op a node's (op, operands) records, if it is one Kiln can apply again:
/// `Some(None)` for the operand itself under another name.
pub(super) fn view_step(op: &Op, args: &[Arg]) -> Option<Option<Op>> {
    let [Arg::Value(_)] = args else {
        return None;
    };
    match op {
        Op::NoOp(NoOpKind::Alias | NoOpKind::Dropout) | Op::Contiguous => Some(None),
        Op::Reshape { .. }
        | Op::Flatten { .. }
        | Op::Unsqueeze { .. }
        | Op::Squeeze { .. }
        | Op::Permute { .. }
        | Op::Transpose { .. }
        | Op::Select { .. }
        | Op::Slice { .. }
        | Op::Expand { .. } => Some(Some(op.clone())),
        _ => None,
    }
}

/// How a write into a view made by `op` reaches the tensor it views (of shape `base`,
/// where PyTorch recorded it); `None` where it cannot.
pub(super) fn write_back(op: &Option<Op>, base: Option<&[i64]>) -> Option<WriteBack> {
    let Some(op) = op else {
        return Some(WriteBack::Same);
    };
    Some(match *op {
        Op::Slice {
            dim,
            ref start,
            ref end,
            step,
        } => {
            // A write through a slice of symbolic bounds is not taken yet.
            let int = |b: &Option<crate::graph::sym::Size>| match b {
                None => Some(None),
                Some(s) => s.as_const().map(Some),
            };
            WriteBack::Scatter(Op::SliceScatter {
                dim,
                start: int(start)?,
                end: int(end)?,
                step,
                select: false,
            })
        }
        Op::Select { dim, index } => WriteBack::Scatter(Op::SliceScatter {
            dim,
            start: Some(index),
            end: Some(index.wrapping_add(1)),
            step: 1,
            select: true,
        }),
        Op::Reshape { .. } | Op::Flatten { .. } | Op::Unsqueeze { .. } | Op::Squeeze { .. } => {
            WriteBack::Undo(Op::Reshape {
                shape: crate::graph::shape::sizes(base?),
                view: false,
            })
        }
        Op::Permute { ref dims } => {
            let rank = dims.len();
            let mut inverse = vec![-1i64; rank];
            for (i, &d) in dims.iter().enumerate() {
                let d = if d < 0 { d + rank as i64 } else { d };
                let slot = inverse.get_mut(usize::try_from(d).ok()?)?;
                if *slot != -1 {
                    return None;
                }
                *slot = i as i64;
            }
            WriteBack::Undo(Op::Permute { dims: inverse })
        }
        Op::Transpose { dim0, dim1 } => WriteBack::Undo(Op::Transpose { dim0, dim1 }),
        _ => return None,
    })
}

/// The current value of tensor `t` for node `reader`: a view whose storage a write
/// changed is made again from its base.
pub(super) fn current(
    g: &mut Graph,
    scope: &mut Scope<'_>,
    t: &str,
    reader: &str,
) -> Result<ValueId, Error> {
    scope.aliases.check(t, reader)?;
    if scope.aliases.outdated.remove(t) {
        let Some(view) = scope.aliases.views.get(t).cloned() else {
            return Err(Pt2Error::Schema(format!(
                "node `{reader}` reads `{t}`, an alias whose storage changed and that has no recorded view"
            ))
            .into());
        };
        let base = current(g, scope, &view.base, reader)?;
        let value = match view.op {
            None => base,
            Some(op) => {
                let name = unique(g, &format!("{}{t}", scope.prefix));
                ValueId::first(g.add_node(Node {
                    name,
                    op,
                    args: vec![Arg::Value(base)],
                    outputs: vec![],
                    line: None,
                }))
            }
        };
        scope.values.insert(t.to_string(), value);
    }
    scope
        .values
        .get(t)
        .copied()
        .ok_or_else(|| Error::UnknownTensor {
            at: At {
                node: reader.into(),
                line: None,
            },
            name: t.into(),
        })
}

/// Node `writer` wrote `value` into tensor `t` in place, and returned it as `result`:
/// `t` and the tensors it views, up to the root of its storage, take the new elements,
/// and the storage's other aliases are made again when next read (or, past a view that
/// cannot be written back through, are stale).
pub(super) fn write_into(
    g: &mut Graph,
    scope: &mut Scope<'_>,
    t: &str,
    value: ValueId,
    writer: &str,
    result: &str,
) -> Result<(), Error> {
    let root = scope.aliases.root_of(t);
    if let Some(what) = scope.inputs.get(&root) {
        return Err(Pt2Error::InputMutation {
            node: format!("node `{writer}`"),
            what: what.clone(),
        }
        .into());
    }
    if scope.stored.contains_key(&root) && !scope.written.contains(&root) {
        scope.written.push(root);
    }
    scope.values.insert(t.to_string(), value);
    scope.aliases.outdated.remove(t);
    scope.aliases.stale.remove(t);
    let mut chain = vec![t.to_string()];
    let mut reached_root = true;
    while let Some(view) = scope
        .aliases
        .views
        .get(chain[chain.len() - 1].as_str())
        .cloned()
    {
        let shape = scope
            .metas
            .get(view.base.as_str())
            .and_then(|m| m.fixed_shape());
        let Some(back) = write_back(&view.op, shape.as_deref()) else {
            reached_root = false;
            break;
        };
        let written = scope.values[chain[chain.len() - 1].as_str()];
        let (op, args) = match back {
            WriteBack::Same => {
                scope.values.insert(view.base.clone(), written);
                scope.aliases.outdated.remove(&view.base);
                scope.aliases.stale.remove(&view.base);
                chain.push(view.base);
                continue;
            }
            WriteBack::Scatter(op) => {
                let base = current(g, scope, &view.base, writer)?;
                (op, vec![Arg::Value(base), Arg::Value(written)])
            }
            WriteBack::Undo(op) => (op, vec![Arg::Value(written)]),
        };
        let name = unique(g, &format!("{}{}", scope.prefix, view.base));
        let id = g.add_node(Node {
            name,
            op,
            args,
            outputs: vec![],
            line: None,
        });
        scope.values.insert(view.base.clone(), ValueId::first(id));
        scope.aliases.outdated.remove(&view.base);
        scope.aliases.stale.remove(&view.base);
        chain.push(view.base);
    }
    let aliases = &mut scope.aliases;
    let root = aliases.root_of(t);
    let members = aliases
        .members
        .get(&root)
        .cloned()
        .unwrap_or_else(|| vec![root]);
    for m in members {
        if m == result || chain.contains(&m) {
            continue;
        }
        if reached_root && !aliases.stale.contains_key(&m) && aliases.remakeable(&m) {
            aliases.outdated.insert(m);
        } else {
            aliases.outdated.remove(&m);
            aliases.stale.insert(m, writer.to_string());
        }
    }
    Ok(())
}
