//! Two-dimensional tiling of pointwise kernels, Inductor's tiled pointwise
//! kernels: a kernel that reads memory contiguous along one dim and writes
//! memory contiguous along another (a transpose, a permute copy) coalesces
//! neither side when its elements are walked in one flat order. Split into
//! rows (the outer dims) and row elements (the inner dims) and launched on
//! square-ish tiles, every access steps by one element along one of the two.

use super::build::KernelBuilder;
use super::index::{consts, Index, Var};
use super::ir::{Expr, Space};
use super::lower::{Lowered, SNodeId};
use crate::graph::ir::Graph;

/// Rows and row elements a tiled kernel needs at least: below this a tile
/// is mostly masked off and the flat kernel does as well.
const MIN_SIDE: i64 = 16;

/// The space a pointwise group of `members` runs best in: `space` itself, or
/// rows × row elements when that takes at least a quarter of the bytes the
/// flat kernel moves off uncoalesced accesses.
pub fn tiled_space(graph: &Graph, low: &Lowered, members: &[SNodeId], space: Space) -> Space {
    // A symbolic space runs flat (tiles split its extent exactly).
    let Some(extents) = space.fixed() else {
        return space;
    };
    if extents.r != 1 || extents.x < MIN_SIDE * MIN_SIDE {
        return space;
    }
    let Some((flat, total)) = coalesced_bytes(graph, low, members, &space) else {
        return space;
    };
    if flat >= total {
        return space;
    }
    let Some(first) = members.first() else {
        return space;
    };
    let Some(shape) = consts(&low.snodes[*first].meta.shape) else {
        return space;
    };
    // Uncoalesced bytes a tiling must come under.
    let mut best = (total - flat - total / 4, space);
    let mut rows = 1i64;
    for &size in &shape[..shape.len().saturating_sub(1)] {
        rows *= size;
        let row_len = extents.x / rows.max(1);
        if size == 1 || rows < MIN_SIDE || row_len < MIN_SIDE {
            continue;
        }
        let tiled = Space::rows(rows, row_len);
        if let Some((bytes, all)) = coalesced_bytes(graph, low, members, &tiled) {
            if all - bytes < best.0 {
                best = (all - bytes, tiled);
            }
        }
    }
    best.1
}

/// The space a C++ pointwise group of `members` loops over best: `space`
/// itself, or rows × row elements when more of the bytes it moves are
/// accessed, inside the innermost loop, one element after another or from
/// one element throughout ([`Index::step_along`]): a broadcast operand's flat
/// index wraps (`x % n`), which compilers vectorise, if at all, with gathers;
/// split into rows of `n`, it steps by one. Among splits that do equally
/// well, the longest rows win (fewer, longer vector loops).
pub fn row_space(graph: &Graph, low: &Lowered, members: &[SNodeId], space: Space) -> Space {
    let Some(extents) = space.fixed() else {
        return space;
    };
    if extents.r != 1 || extents.x < MIN_ROW_SPLIT {
        return space;
    }
    let simd = |space: &Space, index: &Index, _: i64| {
        let inner = if space.is_reduction() { Var::R } else { Var::X };
        matches!(index.step_along(inner), Some(-1..=1))
    };
    let Some((flat, total)) = walked_bytes(graph, low, members, &space, simd) else {
        return space;
    };
    if flat >= total {
        return space;
    }
    let Some(first) = members.first() else {
        return space;
    };
    let Some(shape) = consts(&low.snodes[*first].meta.shape) else {
        return space;
    };
    let mut best = (flat, space.clone());
    let mut rows = 1i64;
    for &size in &shape[..shape.len().saturating_sub(1)] {
        rows *= size;
        let row_len = extents.x / rows.max(1);
        if size == 1 || rows < 2 || row_len < MIN_ROW {
            continue;
        }
        let split = Space::rows(rows, row_len);
        if let Some((bytes, _)) = walked_bytes(graph, low, members, &split, simd) {
            if bytes > best.0 {
                best = (bytes, split);
            }
        }
    }
    // A kernel that reads across the dim it writes along (a transpose, a
    // permute copy) steps by one inside no row loop. It runs on square tiles
    // of rows by row elements instead (the C++ writer's tiled loop), when that
    // covers at least a quarter more of its bytes, and where a tile pays:
    // - the read is of 2-, 4- or 8-byte elements, steps by one across rows
    //   and by a constant stride along them inside every aligned tile: the
    //   writer stages it through registers (`kiln_tile_transpose`), so that
    //   both sides move as vectors (2 EPYC cores: a 2048^2 transpose 12.3 ms
    //   flat, 2.1 tiled; 2 Sapphire Rapids cores: 2048^2 2.9 ms in unstaged
    //   tiles, 1.4-1.6 staged, [64, 256, 256] -> (0, 2, 1) 3.2 flat, 1.0-1.1
    //   staged; 2 EPYC cores in bfloat16: 5.6 and 5.7 ms flat, 0.55 and 0.43
    //   staged, float64 5.4 and 4.5, 2.9 and 2.8);
    // - or its stride is a page or more per element (every element a TLB miss
    //   in a flat walk): element by element inside the tile still beats that
    //   (7.5 ms for the same transpose unstaged). Shorter strides of bytes
    //   (bool) stay flat: their lines stay cached between neighbouring rows,
    //   and an unstaged tile runs element by element ([64, 256, 256] ->
    //   (0, 2, 1) in float32 before staging: 2.2 ms flat, 3.7 tiled).
    if best.0 < total {
        let tiled = tiled_space(graph, low, members, space.clone());
        if tiled.is_reduction() {
            let pays = |space: &Space, index: &Index, bytes: i64| {
                let walk = space.access(index, 1);
                let stride = (index.eval(0, 1) - index.eval(0, 0)).abs();
                let staged = matches!(bytes, 2 | 4 | 8)
                    && index.block_step(Var::X, CPP_TILE) == Some(1)
                    && index
                        .block_step(Var::R, CPP_TILE)
                        .is_some_and(|s| s.abs() > 1);
                walk.unit_across_rows && !walk.unit_along_row && (staged || stride >= PAGE_ELEMENTS)
            };
            let tile_pays =
                walked_bytes(graph, low, members, &tiled, pays).is_some_and(|(bytes, _)| bytes > 0);
            if let Some((bytes, _)) = coalesced_bytes(graph, low, members, &tiled) {
                if tile_pays && bytes >= best.0.saturating_add(total / 4) {
                    return tiled;
                }
            }
        }
    }
    best.1
}

/// Rows and row elements of the C++ writer's tiles for kernels that read
/// across the dim they write along: 32 float32 elements are two 64-byte
/// lines, so a 32 x 32 tile touches whole lines on both sides and stays in L1.
pub const CPP_TILE: i64 = 32;

/// Elements of a stride from which a flat walk lands on a new page nearly
/// every element (4 KiB of 8-byte elements, 2 KiB of 4-byte ones).
const PAGE_ELEMENTS: i64 = 512;

/// Elements a C++ row loop needs at least to be worth its own vector loop.
const MIN_ROW: i64 = 8;
/// Elements below which a C++ pointwise kernel stays one flat loop.
const MIN_ROW_SPLIT: i64 = 256;

/// Bytes the kernel of `members` in `space` moves with unit steps along the
/// rows or along the row, and all the bytes it moves; `None` when it does not
/// build in `space`.
///
/// Here an uncoalesced access whose elements lie a cache sector or more apart,
/// in a buffer larger than a multiprocessor's first-level cache, weighs the
/// sectors it moves: every element read is a sector of its own from the
/// second-level cache, however few bytes the buffer has (a transposing copy
/// of a `repeat`, DeBERTa's position keys). H200, bf16: a flat copy of
/// `[512, 768]` into eight `[12, 64, 512]` took 15 us, the tiled one 3. A
/// smaller buffer stays in the first-level cache and weighs its own bytes
/// (the rotary angles of [`walked_bytes`]).
fn coalesced_bytes(
    graph: &Graph,
    low: &Lowered,
    members: &[SNodeId],
    space: &Space,
) -> Option<(i64, i64)> {
    let coalesced = |space: &Space, index: &Index| {
        let access = space.access(index, 1);
        access.unit_along_row || access.unit_across_rows
    };
    let weight = |space: &Space, index: &Index, element_bytes: i64, own: i64| {
        let reads = space.access(index, element_bytes).bytes;
        let inner = if space.is_reduction() { (0, 1) } else { (1, 0) };
        let step = (index.eval(inner.0, inner.1) - index.eval(0, 0)).abs();
        let scattered = step.saturating_mul(element_bytes) >= SECTOR_BYTES && own > L1_BYTES;
        if coalesced(space, index) || !scattered {
            reads.min(own)
        } else {
            reads.saturating_mul(SECTOR_BYTES / element_bytes.clamp(1, SECTOR_BYTES))
        }
    };
    walked(
        graph,
        low,
        members,
        space,
        |space, index, _| coalesced(space, index),
        weight,
    )
}

/// The bytes a GPU's cache moves at least per access: one sector.
///
/// This and [`L1_BYTES`] are the host's assumption for every device that takes
/// tiled kernels (`Tiling::Tiles`): the plugin API states a device's L2 cache
/// and shared memory, not its first-level cache or sector. A device of wider
/// lines only makes scattered reads costlier than weighed here.
const SECTOR_BYTES: i64 = 32;

/// The bytes of a buffer that stay in a multiprocessor's first-level cache
/// while a kernel walks it (a part of an H100's 256 KiB, shared with the
/// other programs there).
const L1_BYTES: i64 = 64 << 10;

/// Bytes the kernel of `members` in `space` moves through accesses that
/// `good` accepts, and all the bytes it moves; `None` when it does not build
/// in `space`.
fn walked_bytes(
    graph: &Graph,
    low: &Lowered,
    members: &[SNodeId],
    space: &Space,
    good: impl Fn(&Space, &Index, i64) -> bool,
) -> Option<(i64, i64)> {
    // A broadcast operand read once per element of a larger kernel (a
    // rotary embedding's angles, `[L, E/2]` under `[B, H, L, E]`) comes from
    // memory once and from the cache after: it weighs its own bytes, not the
    // kernel's count of reads. Weighed by reads, Llama's rotary kernel was
    // tiled to coalesce its 64 KiB of angles and ran at 2.1x the flat
    // kernel's time (H200, bf16, `[8, 16, 512, 64]`: 36 us against 17).
    let own_bytes = |space: &Space, index: &Index, element_bytes: i64, own: i64| {
        space.access(index, element_bytes).bytes.min(own)
    };
    walked(graph, low, members, space, good, own_bytes)
}

/// [`walked_bytes`], each access weighing what `weight` says (given the
/// space, the index, the element's bytes and the buffer's).
fn walked(
    graph: &Graph,
    low: &Lowered,
    members: &[SNodeId],
    space: &Space,
    good: impl Fn(&Space, &Index, i64) -> bool,
    weight: impl Fn(&Space, &Index, i64, i64) -> i64,
) -> Option<(i64, i64)> {
    let mut b = KernelBuilder::new(graph, low, space.clone());
    for m in members {
        b.add(*m).ok()?;
    }
    let (mut accepted, mut total) = (0i64, 0i64);
    let loads = b.exprs.iter().filter_map(|(_, e, _)| match e {
        Expr::Load { buf, index, .. } => Some((*buf, index)),
        _ => None,
    });
    let stores = b.stores.iter().map(|(_, s)| (s.buf, &s.index));
    for (buf, index) in loads.chain(stores) {
        let buffer = &low.buffers[buf];
        let element_bytes = buffer.dtype.size_bytes() as i64;
        let bytes = weight(space, index, element_bytes, buffer.bytes());
        total = total.saturating_add(bytes);
        if good(space, index, element_bytes) {
            accepted = accepted.saturating_add(bytes);
        }
    }
    Some((accepted, total))
}
