//! State written where it is computed: a program's state (a tensor it keeps
//! between calls, `Graph::state`) whose new value a kernel computes is stored by
//! that kernel into the state input itself, so that the wrapper need not copy it
//! back after the call.
//!
//! transformers' static caches keep a position counter per layer beside the
//! keys and values: a decoding step of GPT-2 small returns twelve new counters.
//! Under CUDA graphs each copy back was a graph node of its own (about 1 µs
//! each, `memcpy32_post` in a profile), twelve per step; stored by the kernel
//! that computes them, they cost nothing.

use super::index::{Index, Size, Var};
use super::ir::{BufferId, BufferKind, Cond, Expr, Kernel, Program, Step, Store, View};
use crate::graph::ir::State;

/// Makes every kernel that computes the whole of a state's new value also store
/// it into the state's input, which the state's output then is, where that is
/// safe: no step after that kernel reads or writes the input (every read of the
/// old value finished before it), the kernel reads it only where it stores it,
/// and no other output views the input. A buffer that then has no reader left
/// is no longer stored.
pub(super) fn write_state_in_place(program: &mut Program, state: &[State]) {
    let mut redirected = Vec::new();
    for s in state {
        let (Some(&input), Some(out)) =
            (program.inputs.get(s.input), program.outputs.get(s.output))
        else {
            continue;
        };
        let (old, new) = (program.buffer(input), program.buffer(out.buf));
        let whole = out.offset.as_const() == Some(0)
            && out.shape == new.shape
            && out.strides == new.strides;
        let same = (&old.shape, &old.strides, old.dtype) == (&new.shape, &new.strides, new.dtype);
        if out.buf == input || !whole || !same || !matches!(new.kind, BufferKind::Computed) {
            continue;
        }
        let (new_buf, shape, strides) = (out.buf, old.shape.clone(), old.strides.clone());
        let numel = old.numel();
        let writers: Vec<usize> = (0..program.steps.len())
            .filter(|i| program.steps[*i].writes().contains(&new_buf))
            .collect();
        let [at] = writers[..] else { continue };
        let touched_later = program.steps[at + 1..]
            .iter()
            .any(|st| st.reads().contains(&input) || st.writes().contains(&input));
        let viewed = program.outputs.iter().any(|v| v.buf == input);
        let Step::Kernel(k) = &program.steps[at] else {
            continue;
        };
        let stores: Vec<&Store> = k.stores.iter().filter(|st| st.buf == new_buf).collect();
        if touched_later
            || viewed
            || k.writes().contains(&input)
            || !reads_old_in_place(k, input, numel, &stores)
            || stores.iter().any(|st| !st.indirect.is_empty())
        {
            continue;
        }
        let copies: Vec<Store> = stores
            .into_iter()
            .map(|st| Store {
                buf: input,
                ..st.clone()
            })
            .collect();
        let mut all = k.stores.clone();
        all.extend(copies);
        program.steps[at] = Step::Kernel(rebuilt(k, all));
        redirected.push(new_buf);
        program.outputs[s.output] = View {
            buf: input,
            shape,
            strides,
            offset: Size::from(0),
        };
    }
    for buf in redirected {
        let read = program.outputs.iter().any(|v| v.buf == buf)
            || program.steps.iter().any(|st| st.reads().contains(&buf));
        if read {
            continue;
        }
        for step in &mut program.steps {
            if let Step::Kernel(k) = step {
                if k.writes().contains(&buf) {
                    let kept = k
                        .stores
                        .iter()
                        .filter(|st| st.buf != buf)
                        .cloned()
                        .collect();
                    *k = rebuilt(k, kept);
                }
            }
        }
    }
}

/// Whether kernel `k` reads the old value of `input` (of `numel` elements) only
/// where `stores` put the new one (a counter's `+ 1`), if at all: a pointwise
/// kernel whose places under the stores' guards are one per element then reads
/// each element before the same program stores over it.
fn reads_old_in_place(k: &Kernel, input: BufferId, numel: i64, stores: &[&Store]) -> bool {
    let reads = k
        .exprs
        .iter()
        .any(|(_, e, _)| matches!(e, Expr::Load { buf, .. } if *buf == input));
    if !reads {
        return true;
    }
    let Some(first) = stores.first() else {
        return false;
    };
    !k.is_reduction()
        && places(k, &first.guards) == Some(numel)
        && k.exprs.iter().all(|(_, e, _)| match e {
            Expr::Load {
                buf,
                index,
                guards,
                indirect,
            } if *buf == input => {
                indirect.is_empty()
                    && stores
                        .iter()
                        .all(|st| st.index == *index && st.guards == *guards)
            }
            _ => true,
        })
}

/// How many places of `k`'s space `guards` leave: all of them, or those below a
/// part's bound (`0 <= x < n`, [`super::horizontal`]); `None` for other guards.
fn places(k: &Kernel, guards: &[Cond]) -> Option<i64> {
    match guards {
        [] => k.space.x.as_const(),
        [g] if g.index == Index::var(Var::X) && g.lo.as_const() == Some(0) => {
            Some(g.hi.as_const()?.min(k.space.x.as_const()?))
        }
        _ => None,
    }
}

/// `k` with these stores (and the parameter list they make).
fn rebuilt(k: &Kernel, stores: Vec<Store>) -> Kernel {
    Kernel::new(
        k.ops.clone(),
        k.space.clone(),
        k.exprs.clone(),
        k.reductions.clone(),
        stores,
    )
}
