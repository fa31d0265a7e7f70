//! The storage plan of `wrapper.cpp`: every intermediate buffer gets a slot
//! in one arena, laid out from the memory plan so that buffers alive at the
//! same time never overlap and a dead buffer's room is reused; an output that
//! is one whole dense buffer is computed straight into the caller's memory.
//!
//! A program of symbolic sizes lays its arena out at each call instead
//! ([`Layout::write_symbolic`]): each slot sits above every slot alive with it
//! that was placed before it, so no two overlap at any sizes.

use std::collections::{HashMap, HashSet};

use std::fmt::Write;

use crate::graph::sym::Syntax;
use crate::schedule::index::{hints, product, size_text, Size};
use crate::schedule::ir::{BufferId, View};
use crate::schedule::Scheduled;

/// Bytes each arena slot is aligned to (a cache line, and every SIMD width).
const ARENA_ALIGN: u64 = 64;

/// Storage for one or more buffers (a buffer that reuses a dead one shares its
/// slot): `bytes`, needed from before step `first` until after step `last`;
/// at `offset` in the arena, or, for an output that is the slot's whole dense
/// buffer, in the caller's `outputs[output]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Slot {
    bytes: u64,
    first: usize,
    last: usize,
    offset: u64,
    output: Option<usize>,
}

/// Gives every arena slot an offset such that slots alive at the same time
/// never overlap, largest first, each at the lowest offset that fits (a
/// first-fit interval packing, as AOTInductor's memory planner does);
/// returns the arena's size. Slots in an output take no room.
fn place(slots: &mut [Slot]) -> u64 {
    let order = placing_order(slots);
    let mut placed: Vec<usize> = Vec::new();
    let mut total = 0;
    for i in order {
        let s = slots[i];
        let mut busy: Vec<(u64, u64)> = placed
            .iter()
            .map(|&j| slots[j])
            .filter(|o| o.first <= s.last && s.first <= o.last)
            .map(|o| (o.offset, o.offset + o.bytes))
            .collect();
        busy.sort_unstable();
        let mut offset = 0;
        for (lo, hi) in busy {
            if offset + s.bytes <= lo {
                break;
            }
            offset = offset.max(hi);
        }
        slots[i].offset = offset;
        total = total.max(offset + s.bytes);
        placed.push(i);
    }
    total
}

/// The arena's slots in the order they are placed: largest first, then the
/// earliest born.
fn placing_order(slots: &[Slot]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..slots.len())
        .filter(|&i| slots[i].output.is_none())
        .collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(slots[i].bytes), slots[i].first));
    order
}

/// For an arena laid out at each call: in placing order, each slot with the
/// slots placed before it that are alive at the same time (it sits above all
/// of them).
fn stack(slots: &[Slot]) -> Vec<(usize, Vec<usize>)> {
    let mut out: Vec<(usize, Vec<usize>)> = Vec::new();
    for i in placing_order(slots) {
        let s = slots[i];
        let below = out
            .iter()
            .map(|(j, _)| *j)
            .filter(|&j| slots[j].first <= s.last && s.first <= slots[j].last)
            .collect();
        out.push((i, below));
    }
    out
}

/// The storage plan of a program: every buffer's slot, and the arena size.
pub(in crate::codegen::wrapper) struct Layout {
    slots: Vec<Slot>,
    /// Each slot's bytes as an expression over the size symbols.
    exact: Vec<Size>,
    slot_of: HashMap<BufferId, usize>,
    /// Bytes of the arena (at the symbols' hints, for a symbolic layout).
    pub(in crate::codegen::wrapper) arena_bytes: u64,
}

impl Layout {
    /// Slots from the memory plan: filled constants live for the whole call;
    /// a fresh allocation lives until the last buffer sharing it is freed
    /// (outputs: to the end); an output that is a whole dense buffer is
    /// computed straight into the caller's memory (the first output naming
    /// a slot gets it; others copy from it).
    pub(in crate::codegen::wrapper) fn new(scheduled: &Scheduled, fills: &[BufferId]) -> Layout {
        let p = &scheduled.program;
        let mem = &scheduled.memory;
        let steps = p.steps.len();
        let round = |bytes: i64| (bytes.max(1) as u64).div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
        let slot = |b: BufferId, first: usize| Slot {
            bytes: round(p.buffer(b).bytes()),
            first,
            last: steps,
            offset: 0,
            output: None,
        };
        let mut slots: Vec<Slot> = Vec::new();
        let mut exact: Vec<Size> = Vec::new();
        let mut slot_of: HashMap<BufferId, usize> = HashMap::new();
        let bytes_of = |b: BufferId| {
            let buf = p.buffer(b);
            product(&buf.shape)
                .scale(buf.dtype.size_bytes() as i64)
                .unwrap_or_else(|_| Size::from(i64::MAX))
        };
        for b in fills {
            slot_of.insert(*b, slots.len());
            slots.push(slot(*b, 0));
            exact.push(bytes_of(*b));
        }
        // A buffer whose storage a later one takes is not its slot's last user.
        let reused: HashSet<BufferId> = mem
            .allocs
            .iter()
            .flatten()
            .filter_map(|a| a.reuse)
            .collect();
        let outputs: HashSet<BufferId> = p.outputs.iter().map(|v| v.buf).collect();
        for i in 0..steps {
            for a in mem.allocs.get(i).into_iter().flatten() {
                let shared = a.reuse.and_then(|old| slot_of.get(&old).copied());
                let s = shared.unwrap_or_else(|| {
                    slots.push(slot(a.buf, i));
                    exact.push(bytes_of(a.buf));
                    slots.len() - 1
                });
                slot_of.insert(a.buf, s);
            }
            for b in mem.frees.get(i).into_iter().flatten() {
                if !reused.contains(b) && !outputs.contains(b) {
                    if let Some(&s) = slot_of.get(b) {
                        slots[s].last = i;
                    }
                }
            }
        }
        for (i, v) in p.outputs.iter().enumerate() {
            let buf = p.buffer(v.buf);
            let whole = v.offset.as_const() == Some(0)
                && product(&v.shape) == product(&buf.shape)
                && is_dense(&v.shape, &v.strides)
                && buf.numel() > 0
                && !fills.contains(&v.buf);
            if let Some(&s) = slot_of.get(&v.buf) {
                if whole && slots[s].output.is_none() {
                    slots[s].output = Some(i);
                }
            }
        }
        let arena_bytes = if exact.iter().all(Size::is_const) {
            place(&mut slots)
        } else {
            // At the hints, as the code lays it out at each call.
            let mut top = 0;
            for (i, below) in stack(&slots) {
                let offset = below
                    .iter()
                    .map(|&j| slots[j].offset + slots[j].bytes)
                    .max()
                    .unwrap_or(0);
                slots[i].offset = offset;
                top = top.max(offset + slots[i].bytes);
            }
            top
        };
        Layout {
            slots,
            exact,
            slot_of,
            arena_bytes,
        }
    }

    /// Whether the arena is laid out at each call (some slot's size depends on
    /// the size symbols).
    pub(in crate::codegen::wrapper) fn is_symbolic(&self) -> bool {
        !self.exact.iter().all(Size::is_const)
    }

    /// For a symbolic layout: C++ statements that size every arena slot at the
    /// call's sizes (`slot<i>_bytes`, rounded up to [`ARENA_ALIGN`]), put each
    /// above the slots alive with it that were placed before it (`slot<i>`, its
    /// offset), and total them (`arena_bytes`).
    pub(in crate::codegen::wrapper) fn write_symbolic(&self, out: &mut String) -> std::fmt::Result {
        let mut tops = Vec::new();
        for (i, below) in stack(&self.slots) {
            let bytes = size_text(&self.exact[i], Syntax::C);
            let under: Vec<String> = below
                .iter()
                .map(|j| format!("slot{j} + slot{j}_bytes"))
                .collect();
            let offset = match under.as_slice() {
                [] => "0".to_string(),
                [one] => one.clone(),
                many => format!("std::max<int64_t>({{{}}})", many.join(", ")),
            };
            writeln!(
                out,
                "    const int64_t slot{i}_bytes = ({bytes} + {align}) / {ARENA_ALIGN} * {ARENA_ALIGN};\n    \
                 const int64_t slot{i} = {offset};",
                align = ARENA_ALIGN - 1,
            )?;
            tops.push(format!("slot{i} + slot{i}_bytes"));
        }
        writeln!(
            out,
            "    const int64_t arena_bytes = std::max<int64_t>({{0, {}}});",
            tops.join(", ")
        )
    }

    /// Where buffer `b` lives, as a pointer expression.
    pub(in crate::codegen::wrapper) fn at(&self, b: BufferId) -> String {
        match self.slot_of.get(&b).map(|&s| self.slots[s]) {
            Some(Slot {
                output: Some(o), ..
            }) => format!("outputs[{o}]"),
            Some(_) if self.is_symbolic() => format!("ws + slot{}", self.slot_of[&b]),
            Some(s) => format!("ws + {}", s.offset),
            None => "nullptr".into(),
        }
    }

    /// Whether graph output `i` was computed in place (needs no copy).
    pub(in crate::codegen::wrapper) fn in_place(&self, i: usize, v: &View) -> bool {
        self.slot_of
            .get(&v.buf)
            .is_some_and(|&s| self.slots[s].output == Some(i))
    }

    pub(in crate::codegen::wrapper) fn uses_arena(&self) -> bool {
        self.slots.iter().any(|s| s.output.is_none())
    }
}

/// Whether a view of `shape` and `strides` is dense row-major storage at every
/// value of the size symbols: at the integers, by their values; otherwise each
/// stride (but a dim of size 1's) is the product of the sizes after it.
pub(in crate::codegen::wrapper) fn is_dense(shape: &[Size], strides: &[Size]) -> bool {
    if shape.iter().chain(strides).all(Size::is_const) {
        return crate::graph::shape::is_dense(&hints(shape), &hints(strides));
    }
    shape.len() == strides.len()
        && (0..shape.len()).all(|d| shape[d] == 1 || strides[d] == product(&shape[d + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn slot(bytes: u64, first: usize, last: usize) -> Slot {
        Slot {
            bytes,
            first,
            last,
            offset: 0,
            output: None,
        }
    }

    #[test]
    fn storage_dead_before_a_slot_is_born_is_shared() {
        // a lives over steps 0..=1, b over 2..=3: one region serves both.
        let mut s = vec![slot(128, 0, 1), slot(64, 2, 3)];
        assert_eq!(place(&mut s), 128);
        assert_eq!((s[0].offset, s[1].offset), (0, 0));
        // Alive together (a freed after step 2, b born before it): apart.
        let mut s = vec![slot(128, 0, 2), slot(64, 2, 3)];
        assert_eq!(place(&mut s), 192);
        assert_eq!((s[0].offset, s[1].offset), (0, 128));
    }

    #[test]
    fn a_gap_between_live_slots_is_filled_first_fit() {
        // a and c are alive throughout, b dies early; d fits where b was.
        let mut s = vec![
            slot(64, 0, 9),
            slot(128, 0, 1),
            slot(64, 0, 9),
            slot(128, 2, 9),
        ];
        let total = place(&mut s);
        assert_eq!(total, 256);
        assert_eq!(s[3].offset, s[1].offset);
    }

    proptest! {
        #[test]
        fn slots_alive_together_never_overlap(
            spec in proptest::collection::vec((1u64..8, 0usize..10, 0usize..6), 1..24)
        ) {
            let mut s: Vec<Slot> = spec
                .iter()
                .map(|&(units, first, len)| slot(units * ARENA_ALIGN, first, first + len))
                .collect();
            let total = place(&mut s);
            for (i, a) in s.iter().enumerate() {
                prop_assert!(a.offset + a.bytes <= total);
                prop_assert_eq!(a.offset % ARENA_ALIGN, 0);
                for b in &s[i + 1..] {
                    let together = a.first <= b.last && b.first <= a.last;
                    let apart = a.offset + a.bytes <= b.offset || b.offset + b.bytes <= a.offset;
                    prop_assert!(!together || apart, "{:?} and {:?}", a, b);
                }
            }
            // Never more than everything side by side.
            prop_assert!(total <= s.iter().map(|a| a.bytes).sum::<u64>());
        }

        /// A layout made at each call stacks every slot above each slot alive with
        /// it that was placed before: of two slots alive together, one is always
        /// below the other, whatever their sizes at the call.
        #[test]
        fn slots_stacked_at_each_call_alive_together_are_one_above_the_other(
            spec in proptest::collection::vec((1u64..8, 0usize..10, 0usize..6), 1..24)
        ) {
            let s: Vec<Slot> = spec
                .iter()
                .map(|&(units, first, len)| slot(units * ARENA_ALIGN, first, first + len))
                .collect();
            let stacked = stack(&s);
            prop_assert_eq!(stacked.len(), s.len());
            let below = |i: usize, j: usize| {
                stacked.iter().any(|(k, under)| *k == i && under.contains(&j))
            };
            for i in 0..s.len() {
                for j in i + 1..s.len() {
                    let together = s[i].first <= s[j].last && s[j].first <= s[i].last;
                    prop_assert_eq!(together, below(i, j) || below(j, i), "{} and {}", i, j);
                }
            }
        }
    }
}
