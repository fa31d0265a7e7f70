//! Launch heuristics for C++/OpenMP kernels. For the `cpp` scheduling kind a
//! [`LaunchConfig`]'s `x_block` is the parallel chunk (elements, or rows for a
//! reduction, handed to one OpenMP thread at a time) and `r_block` the vector
//! width in lanes; `num_warps` and `num_stages` are always 1.

use kiln_plugin_api::{LaunchConfig, PointwiseQuery, ReductionQuery};

/// Below this many elements per chunk, OpenMP's scheduling overhead (tens of
/// microseconds per region) outweighs the work.
pub const MIN_CHUNK_ELEMENTS: u64 = 4096;
/// The largest chunk: keeps `x_block` a `u32` power of two.
pub const MAX_CHUNK: u64 = 1 << 30;

/// What the heuristics need to know about the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuLimits {
    /// Logical cores: the number of OpenMP threads.
    pub cores: u32,
    /// Bytes in one SIMD register.
    pub simd_bytes: u32,
    /// Bytes of level-1 data cache per core.
    pub l1d_bytes: u64,
    /// Bytes of level-2 cache per core.
    pub l2_bytes: u64,
}

/// The blocked matrix product's tiles (the `KILN_MM_*` macros of the C++
/// prelude): an `mr` x `nr` register block of `vbytes`-byte vectors, `kc` of
/// the shared dimension per step, `mc` rows of `a` per shared packed panel and
/// `nc` columns of `b` per task's packed block; `vregs` vector registers of that
/// width (the convolution's register blocks fill them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulTiles {
    pub vbytes: u32,
    pub vregs: u32,
    pub mr: u32,
    pub nr: u32,
    pub mc: u32,
    pub kc: u32,
    pub nc: u32,
}

/// Columns of `b` a task packs per step: 256 keep eight 32-wide slivers (or
/// sixteen 16-wide) streaming past one sliver of `a`; 512 measured no better
/// on 2 EPYC (Zen 4) cores.
pub const MATMUL_BLOCK_COLUMNS: u32 = 256;
/// Rows of `a` in the panel all threads share per step (1024 x `kc` floats:
/// 2 MiB at `kc` 512, for the last-level cache); 1024, 2048 and 4096 measured
/// alike on 2048^2.
pub const MATMUL_PANEL_ROWS: u64 = 1024;

/// The most of the shared dimension one step takes (every step adds into the
/// whole result once, so shorter ones cost memory traffic). On two Sapphire
/// Rapids cores (48 KiB L1, 2 MiB L2), steps of 1024 against 512 over 18
/// pairs of products from 768^3 to 2048^3 and 4096 x 1024 x 1024: faster in
/// 12, slower in 5, +0.017 of torch.mm's speed in the mean, the odd
/// 1000 x 999 x 1001 0.89-0.95 against 0.85-0.87 in three runs
/// (`bench/cpu/results/2026-11-25-mm-step-xeon.txt`). Zen 4's 1 MiB L2 keeps
/// it at 512 there (longer steps measured no faster).
pub const MATMUL_MAX_STEP: u64 = 1024;

/// The step the register block's height is judged by (see [`matmul_tiles`]).
const MATMUL_TALL_STEP: u64 = 512;

/// Tiles for `f32` on this host, in the GotoBLAS/BLIS way:
/// - the register block is two vectors wide and 6 rows high (12
///   accumulators, plus two for `b` and one broadcast of `a`, fit AVX2's 16
///   vector registers), or 12 rows (24 accumulators) with 64-byte vectors
///   (AVX-512 has 32 registers) where half the L1 data cache holds a sliver
///   of 12 rows by 512 (`MATMUL_TALL_STEP`): on a Sapphire Rapids Xeon (48 KiB
///   L1) 12 rows ran 2048^2 at 222 GFLOP/s on 2 cores against 186 with 6,
///   while Zen 4 (32 KiB) measured 6 rows faster (203 against 187-196);
/// - a task's packed block of `b` (`kc` x `nc`) fills half the L2 cache, and
///   a sliver of `a` (`mr` x `kc`) at most the L1 data cache (the slivers of
///   `b` streaming past it evict it between passes whatever its size: half
///   the cache bought nothing);
/// - the shared panel of `a` is [`MATMUL_PANEL_ROWS`] rows.
pub fn matmul_tiles(limits: &CpuLimits) -> MatmulTiles {
    let lanes = limits.lanes(4);
    let tall = lanes >= 16 && limits.l1d_bytes / 2 >= 12 * MATMUL_TALL_STEP * 4;
    let (mr, nr) = (if tall { 12 } else { 6 }, 2 * lanes);
    let nc = u64::from(MATMUL_BLOCK_COLUMNS);
    let from_l2 = limits.l2_bytes / 2 / (nc * 4);
    let from_l1 = limits.l1d_bytes / (u64::from(mr) * 4);
    let kc = from_l2.min(from_l1).clamp(64, MATMUL_MAX_STEP) / 8 * 8;
    let mc = MATMUL_PANEL_ROWS / u64::from(mr) * u64::from(mr);
    MatmulTiles {
        vbytes: lanes * 4,
        vregs: vector_registers(lanes * 4),
        mr,
        nr,
        // Both are at most 1024 by construction.
        mc: u32::try_from(mc).unwrap_or(1020),
        kc: u32::try_from(kc).unwrap_or(512),
        nc: MATMUL_BLOCK_COLUMNS,
    }
}

/// The vector registers of `vbytes`-byte vectors this architecture has: x86-64
/// has 32 with AVX-512 (zmm0-31) and 16 below it; AArch64 has 32 (v0-31).
pub fn vector_registers(vbytes: u32) -> u32 {
    if cfg!(target_arch = "aarch64") || (cfg!(target_arch = "x86_64") && vbytes >= 64) {
        32
    } else {
        16
    }
}

impl CpuLimits {
    /// Lanes of an element of `element_bytes` in one SIMD register (a power
    /// of two, at least 1); an unknown width (0) counts as `f32`.
    fn lanes(&self, element_bytes: u32) -> u32 {
        let element = if element_bytes == 0 { 4 } else { element_bytes };
        let lanes = (self.simd_bytes / element).max(1);
        1 << (31 - lanes.leading_zeros())
    }
}

/// Elements a pointwise chunk is a multiple of: a whole 64-byte line of
/// 4-byte elements, so that chunks start on vector boundaries.
pub const CHUNK_GRAIN: u64 = 16;

/// Ordered candidates for a pointwise kernel: an even split of the elements
/// over the cores (at least [`MIN_CHUNK_ELEMENTS`] each, a multiple of
/// [`CHUNK_GRAIN`]), then twice and half that chunk. The split is exact, not
/// rounded to a power of two: 2^22 + 3 elements on two cores is two chunks
/// of about 2^21, not one of 2^22 and one of 3.
pub fn pointwise_configs(limits: &CpuLimits, query: &PointwiseQuery) -> Vec<LaunchConfig> {
    let numel = query.numel.max(1);
    let cores = u64::from(limits.cores.max(1));
    let even = numel
        .div_ceil(cores)
        .div_ceil(CHUNK_GRAIN)
        .saturating_mul(CHUNK_GRAIN);
    let chunk = even.clamp(MIN_CHUNK_ELEMENTS, MAX_CHUNK).min(numel);
    let lanes = limits.lanes(query.element_bytes);
    let mut chunks = vec![chunk];
    if chunk < numel && chunk * 2 <= MAX_CHUNK {
        chunks.push(chunk * 2);
    }
    if chunk / 2 >= MIN_CHUNK_ELEMENTS {
        chunks.push(chunk / 2);
    }
    chunks.into_iter().map(|c| config(c, lanes)).collect()
}

/// Ordered candidates for a reduction: rows split evenly over the cores
/// (exactly: the chunk is the rows over the cores, rounded up), the row
/// reduced `lanes` elements at a time; then half the rows per chunk.
pub fn reduction_configs(limits: &CpuLimits, query: &ReductionQuery) -> Vec<LaunchConfig> {
    let rows = query.rows.max(1);
    let cores = u64::from(limits.cores.max(1));
    let rows_per_chunk = rows.div_ceil(cores).min(MAX_CHUNK);
    let lanes = u64::from(limits.lanes(query.element_bytes)).min(next_pow2(query.row_len));
    // `lanes` is at most a u32's worth, so this cannot fail.
    let lanes = u32::try_from(lanes).unwrap_or(1);
    let mut configs = vec![config(rows_per_chunk, lanes)];
    if rows_per_chunk >= 2 {
        configs.push(config(rows_per_chunk.div_ceil(2), lanes));
    }
    configs
}

/// The smallest power of two at or above `n` (1 for 0), saturating at 2^63.
fn next_pow2(n: u64) -> u64 {
    n.max(1).checked_next_power_of_two().unwrap_or(1 << 63)
}

fn config(chunk: u64, lanes: u32) -> LaunchConfig {
    LaunchConfig {
        // Chunks are capped at MAX_CHUNK (2^30), so this cannot fail.
        x_block: u32::try_from(chunk).unwrap_or(1 << 30),
        r_block: lanes,
        num_warps: 1,
        num_stages: 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: CpuLimits = CpuLimits {
        cores: 16,
        simd_bytes: 32,
        l1d_bytes: 32 << 10,
        l2_bytes: 512 << 10,
    };

    #[test]
    fn matmul_tiles_follow_the_vector_width_and_the_caches() {
        // 512 KiB of L2: a 256-column block of b takes 256 of the shared dim.
        let t = matmul_tiles(&HOST);
        assert_eq!((t.mr, t.nr, t.kc, t.mc, t.nc), (6, 16, 256, 1020, 256));
        assert_eq!(t.vbytes, 32);
        let avx512 = CpuLimits {
            simd_bytes: 64,
            l1d_bytes: 48 << 10,
            l2_bytes: 2 << 20,
            ..HOST
        };
        let t = matmul_tiles(&avx512);
        assert_eq!((t.vbytes, t.mr, t.nr, t.kc), (64, 12, 32, 1024));
        assert_eq!(t.mc % t.mr, 0);
        // AVX-512 with a 32 KiB L1 (Zen 4): 6 rows.
        let zen4 = CpuLimits {
            l1d_bytes: 32 << 10,
            l2_bytes: 1 << 20,
            ..avx512
        };
        // Zen 4: 6 rows, and its L2 (1 MiB) keeps steps of 512.
        assert_eq!((matmul_tiles(&zen4).mr, matmul_tiles(&zen4).kc), (6, 512));
        // A small L1 limits the sliver of a: 6 x 680 floats in 16 KiB.
        let small_l1 = CpuLimits {
            l1d_bytes: 16 << 10,
            l2_bytes: 2 << 20,
            ..HOST
        };
        assert_eq!(matmul_tiles(&small_l1).kc, 680);
        // Unknown or absurd caches stay within sane bounds.
        let tiny = CpuLimits {
            simd_bytes: 16,
            l1d_bytes: 0,
            l2_bytes: 0,
            ..HOST
        };
        let t = matmul_tiles(&tiny);
        assert_eq!((t.mr, t.nr, t.kc, t.mc), (6, 8, 64, 1020));
        let huge = CpuLimits {
            l1d_bytes: u64::MAX,
            l2_bytes: u64::MAX,
            ..HOST
        };
        let t = matmul_tiles(&huge);
        assert_eq!((t.mr, t.kc, t.mc), (6, 1024, 1020));
    }

    #[test]
    fn pointwise_splits_over_cores() {
        let q = |numel| PointwiseQuery {
            numel,
            element_bytes: 4,
        };
        let c = pointwise_configs(&HOST, &q(1 << 20));
        assert_eq!((c[0].x_block, c[0].r_block), (65_536, 8));
        assert_eq!(c.len(), 3);
        // An odd size is split evenly, not rounded to a power of two first.
        let two = CpuLimits { cores: 2, ..HOST };
        let c = pointwise_configs(&two, &q((1 << 22) + 3));
        assert_eq!(c[0].x_block, (1 << 21) + 16);
        assert_eq!(u64::from(c[0].x_block) % CHUNK_GRAIN, 0);
        // Small kernels still get chunks of at least MIN_CHUNK_ELEMENTS ...
        assert_eq!(pointwise_configs(&HOST, &q(10_000))[0].x_block, 4096);
        // ... unless the whole kernel is smaller.
        assert_eq!(pointwise_configs(&HOST, &q(1))[0].x_block, 1);
        assert_eq!(pointwise_configs(&HOST, &q(u64::MAX))[0].x_block, 1 << 30);
    }

    #[test]
    fn vector_width_follows_the_element_type() {
        for (bytes, lanes) in [(1, 32), (2, 16), (4, 8), (8, 4), (0, 8), (64, 1), (3, 8)] {
            let c = pointwise_configs(
                &HOST,
                &PointwiseQuery {
                    numel: 1 << 20,
                    element_bytes: bytes,
                },
            );
            assert_eq!(c[0].r_block, lanes, "{bytes} bytes");
        }
    }

    #[test]
    fn reductions_split_rows() {
        let q = |rows, row_len| ReductionQuery {
            rows,
            row_len,
            element_bytes: 4,
        };
        let c = reduction_configs(&HOST, &q(8192, 8192));
        assert_eq!((c[0].x_block, c[0].r_block, c[0].num_warps), (512, 8, 1));
        // 4194 rows on 2 cores: 2097 each, not 4096 and 98.
        let two = CpuLimits { cores: 2, ..HOST };
        assert_eq!(reduction_configs(&two, &q(4194, 1000))[0].x_block, 2097);
        let c = reduction_configs(&HOST, &q(1, 1));
        assert_eq!((c[0].x_block, c[0].r_block), (1, 1));
        assert_eq!(c.len(), 1);
    }
}
