//! The state a program keeps between calls: the parameters, buffers and tensor
//! constants its nodes write into (`index_copy_` into a KV cache, `add_` on a
//! position counter) or that the signature gives a new value (`buffer_mutation`).

use super::{current, Scope};
use crate::graph::front::pt2::Pt2Error;
use crate::graph::ir::{Graph, State, ValueId};
use crate::graph::ops::Op;
use crate::graph::Error;
use std::collections::HashMap;

/// Each tensor the program keeps, in the order the archive lists them, with the value
/// that is its new content at the end of a call: its placeholder becomes a graph input
/// (after the others) holding the archive's value before the first call, and the value
/// the graph output at `first_output` and on. `placeholders` are the inputs' nodes
/// before any write.
pub(super) fn kept(
    g: &mut Graph,
    scope: &mut Scope<'_>,
    order: &[super::InputSpec],
    placeholders: &HashMap<String, ValueId>,
    mutations: &[(String, String)],
    first_output: usize,
) -> Result<Vec<(State, ValueId)>, Error> {
    let mut state = vec![];
    for spec in order {
        let super::InputSpec::Stored {
            placeholder, key, ..
        } = spec
        else {
            continue;
        };
        let new = match mutations.iter().find(|(k, _)| k == key) {
            Some((_, t)) => Some(current(
                g,
                scope,
                t,
                "the graph signature's mutation output",
            )?),
            None if scope.written.contains(placeholder) => {
                Some(current(g, scope, placeholder, "the graph's end")?)
            }
            None => None,
        };
        let Some(new) = new else { continue };
        let constant =
            placeholders
                .get(placeholder.as_str())
                .and_then(|v| match &g.node(v.node)?.op {
                    Op::Constant { data } => Some((v.node, data.clone())),
                    _ => None,
                });
        let Some((id, init)) = constant else {
            return Err(Pt2Error::Schema(format!(
                "`{placeholder}` ({key}) is written in place but is not one of the archive's tensors"
            ))
            .into());
        };
        let input = g.make_input(id);
        let output = first_output + state.len();
        state.push((
            State {
                name: key.clone(),
                input,
                output,
                init,
            },
            new,
        ));
    }
    Ok(state)
}
