//! Launch heuristics for the Triton plugins (`cuda`, `xpu`, `gxu`), in the
//! spirit of Inductor's `torch/_inductor/runtime/triton_heuristics.py`.
//!
//! The rules are written once here and linked into each Triton plugin.
//! Everything device-specific comes in through [`TritonLimits`], which each
//! plugin builds from its own `DeviceProperties`; this module must never name
//! a device or hard-code a device's number.
//!
//! Guarantees, for every query (numel 0 and 1 included, up to `u64::MAX`):
//! at least one config; block sizes powers of two; `num_warps` a power of two
//! with `num_warps × warp_size ≤ max_threads_per_block`; the same answer for
//! the same query.

use kiln_plugin_api::{LaunchConfig, PointwiseQuery, ReductionHint, ReductionQuery};

/// Inductor's `num_elements_per_warp` default is 256 at a warp of 32: eight
/// elements per thread. Scaling by the warp size keeps eight per thread on
/// devices with wider warps.
const ELEMENTS_PER_THREAD: u64 = 8;

/// Inductor's default pointwise block for a large 1-D kernel
/// (`bs = max(256, min(numel // 128, 1024))`).
const DEFAULT_MAX_XBLOCK: u64 = 1024;
/// The smallest default pointwise block Inductor picks for a large kernel.
const DEFAULT_MIN_XBLOCK: u64 = 256;
/// Inductor divides `numel` by this to size the default pointwise block.
const NUMEL_PER_XBLOCK: u64 = 128;
/// Triton's largest `XBLOCK` (Inductor's `TRITON_MAX_BLOCK["X"]`).
const TRITON_MAX_XBLOCK: u64 = 4096;

/// Inductor keeps `xblock × rnumel ≤ 4096` for persistent reductions with
/// more than one row per program, so a program's row tile fits in registers.
const PERSISTENT_TILE_ELEMENTS: u64 = 4096;
/// The rows-per-program candidates of Inductor's `persistent_reduction`.
const PERSISTENT_X_BLOCKS: [u64; 4] = [1, 8, 32, 128];
/// The most elements a default persistent tile of rows of 33 to 255 holds. On the H100, softmax over 671088 rows of 100: 8 rows of 128 lanes
/// (4 warps) 187 µs, 32 rows (8 warps) 205 µs; Inductor's autotuner keeps 8
/// rows too.
const SHORT_ROW_TILE: u64 = 1024;
/// Inductor's contiguous looped reduction reads up to 2048 elements per step.
const LOOPED_MAX_RBLOCK: u64 = 2048;
/// Rows long enough read 8192 elements per step, with 16 warps (twice the
/// loads in flight per thread): on the H100, log_softmax over 4096 rows of
/// 50257 ran in 0.88 ms against 1.23 in Inductor's steps of 2048 with 8 warps
/// (Inductor's own kernel 1.15; `bench/gpu/row_configs.py` compares the
/// configs).
const LONG_LOOPED_RBLOCK: u64 = 8192;
/// A step longer than [`LOOPED_MAX_RBLOCK`] is taken only where it masks off
/// at most this share of the row (in percent; rows of 50257 in steps of 8192
/// mask off 14 %, and still ran 30 % faster than in steps of 2048).
const LONG_STEP_MASKED_PERCENT: u64 = 15;
/// ... and where the row is at least this many such steps long (a shorter
/// row is the persistent tile's, or a looped one's of Inductor's step).
const LONG_STEP_MIN_STEPS: u64 = 4;
/// ... and where a program may have threads enough that each loads at most
/// this many elements of the step (a one-warp program keeps Inductor's step:
/// on the H100 its softmax over rows of 8192 and 131072 ran 2 and 7 % slower
/// in steps of 1024 than of 2048).
const LONG_STEP_MAX_ELEMENTS_PER_THREAD: u64 = 16;
/// Inductor caps reduction warps at 8; a very long persistent row gets 16.
const MAX_REDUCTION_WARPS: u32 = 8;
/// The warp cap for the persistent fallback offered for long rows.
const MAX_LONG_ROW_WARPS: u32 = 16;
/// Inductor caps pointwise warps at 8.
const MAX_POINTWISE_WARPS: u32 = 8;

/// What the heuristics need to know about a device. Each plugin derives this
/// from its `DeviceProperties` (and, for `gxu`, from `gxu.toml`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TritonLimits {
    /// Threads in one warp (sub-group).
    pub warp_size: u32,
    /// Threads in one program (block, work-group).
    pub max_threads_per_block: u32,
    /// A device rule on top of `max_threads_per_block / warp_size` (the `gxu`
    /// wants exactly one warp per program).
    pub max_num_warps: u32,
    /// Units that run programs in parallel; used to keep every one busy.
    pub multi_processor_count: u32,
    /// Rows up to this length get a persistent (single-pass) reduction first.
    pub persistent_row_limit: u64,
    /// Rows longer than `persistent_row_limit` but up to this length still get
    /// a persistent candidate after the looped ones, for the autotuner.
    pub persistent_fallback_row_limit: u64,
}

impl TritonLimits {
    /// The most warps one program may have: a power of two, at least 1.
    fn warp_cap(&self) -> u32 {
        let by_threads = self.max_threads_per_block / self.warp_size.max(1);
        floor_pow2_u32(by_threads.max(1)).min(floor_pow2_u32(self.max_num_warps.max(1)))
    }

    /// Warps for `elements` handled by one program: eight elements per
    /// thread, rounded to a power of two, between 1 and `cap`.
    fn warps_for(&self, elements: u64, cap: u32) -> u32 {
        let per_warp = u64::from(self.warp_size.max(1)) * ELEMENTS_PER_THREAD;
        let wanted = (elements / per_warp).clamp(1, u64::from(cap.max(1)));
        let warps = floor_pow2_u64(wanted).min(u64::from(self.warp_cap()));
        // `wanted` is at most `cap`, a u32, so this conversion cannot fail.
        u32::try_from(warps).unwrap_or(1).max(1)
    }
}

/// Ordered pointwise candidates: the first is the default, the rest are for
/// the autotuner.
pub fn pointwise_configs(limits: &TritonLimits, query: &PointwiseQuery) -> Vec<LaunchConfig> {
    let numel = query.numel.max(1);
    let numel_p2 = next_pow2(numel);
    let default_block = floor_pow2_u64(numel / NUMEL_PER_XBLOCK)
        .clamp(DEFAULT_MIN_XBLOCK, DEFAULT_MAX_XBLOCK)
        .min(numel_p2);
    let pointwise = |block: u64| LaunchConfig {
        x_block: block_u32(block),
        r_block: 1,
        num_warps: limits.warps_for(block, MAX_POINTWISE_WARPS),
        num_stages: 1,
    };

    let mut configs = vec![pointwise(default_block)];
    // A bigger block: fewer programs, more work per thread.
    let bigger = default_block * 2;
    if bigger <= TRITON_MAX_XBLOCK && bigger <= numel_p2 {
        configs.push(pointwise(bigger));
    }
    // A smaller block: more programs for a device that is not yet full.
    if default_block >= 2 {
        configs.push(pointwise(default_block / 2));
    }
    // The default block with twice the warps, as long as every thread keeps
    // at least one element (Inductor's `num_elements_per_warp=16` variant).
    let base = pointwise(default_block);
    let more_warps = (base.num_warps * 2).min(limits.warp_cap());
    if u64::from(more_warps) * u64::from(limits.warp_size) <= default_block {
        configs.push(LaunchConfig {
            num_warps: more_warps,
            ..base
        });
    }
    dedup(configs)
}

/// Ordered reduction candidates: persistent first for short rows, looped first
/// for long ones (with a persistent candidate after them up to
/// `persistent_fallback_row_limit`).
pub fn reduction_configs(limits: &TritonLimits, query: &ReductionQuery) -> Vec<LaunchConfig> {
    let rows = query.rows.max(1);
    let row_len = query.row_len.max(1);
    let rows_p2 = next_pow2(rows);
    let row_p2 = next_pow2(row_len);

    // A persistent tile: eight elements per thread (on the H100, 4 warps for
    // rows of 1024 beat Inductor's 8 by 5 to 15 %).
    let config = |x_block: u64, r_block: u64, cap: u32| LaunchConfig {
        x_block: block_u32(x_block),
        r_block: block_u32(r_block),
        num_warps: limits.warps_for(x_block.saturating_mul(r_block), cap),
        num_stages: 1,
    };
    // A looped step: Inductor's four elements per thread, which keeps more
    // loads in flight (rows of 5000: 17 % faster than eight per thread).
    let looped = |x_block: u64, r_block: u64, cap: u32| LaunchConfig {
        num_warps: inductor_reduction_warps(limits, x_block.saturating_mul(r_block), cap),
        ..config(x_block, r_block, cap)
    };

    let mut configs = Vec::new();
    // A persistent tile of a long row that uses few of its lanes (5000 of
    // 8192) holds registers for nothing; such a row loops (an online softmax
    // reads it twice, the second time from L2).
    let lanes_used = row_len <= PERSISTENT_TILE_ELEMENTS / 4
        || row_len.saturating_mul(4) >= row_p2.saturating_mul(3);
    if row_len <= limits.persistent_row_limit && lanes_used {
        let fits: Vec<u64> = PERSISTENT_X_BLOCKS
            .iter()
            .copied()
            .filter(|&x| x == 1 || (x * row_p2 <= PERSISTENT_TILE_ELEMENTS && x <= rows_p2))
            .collect();
        // The default is the largest tile that still leaves one program per
        // multiprocessor, so that short rows do not starve the device, and, for
        // rows of 33 to 255 elements, holds at most `SHORT_ROW_TILE` of them
        // (shorter rows keep their many-row tiles: few elements per thread).
        let sms = u64::from(limits.multi_processor_count.max(1));
        let default_x = fits
            .iter()
            .copied()
            .filter(|&x| rows.div_ceil(x) >= sms)
            .filter(|&x| !(64..256).contains(&row_p2) || x * row_p2 <= SHORT_ROW_TILE)
            .max()
            .unwrap_or(1);
        configs.push(config(default_x, row_p2, MAX_REDUCTION_WARPS));
        configs.extend(fits.iter().map(|&x| config(x, row_p2, MAX_REDUCTION_WARPS)));
    } else {
        let r_block = looped_step(limits, row_len).min(row_p2);
        // Contiguous rows: one row per program, a long step along the row
        // (16 warps for a step longer than Inductor's).
        let cap = |r_block: u64| {
            if r_block > LOOPED_MAX_RBLOCK {
                MAX_LONG_ROW_WARPS
            } else {
                MAX_REDUCTION_WARPS
            }
        };
        configs.push(looped(1, r_block, cap(r_block)));
        configs.push(looped(1, r_block / 2, cap(r_block / 2)));
        if r_block > LOOPED_MAX_RBLOCK {
            configs.push(looped(1, LOOPED_MAX_RBLOCK, MAX_REDUCTION_WARPS));
        }
        // A few rows per program with a shorter step.
        configs.push(looped(8.min(rows_p2), 512.min(row_p2), MAX_REDUCTION_WARPS));
        // Inductor's "outer" shape: many rows, a short step.
        configs.push(looped(64.min(rows_p2), 8, MAX_REDUCTION_WARPS));
        if row_len <= limits.persistent_fallback_row_limit {
            configs.push(config(1, row_p2, MAX_LONG_ROW_WARPS));
        }
    }
    dedup(configs)
}

/// Inductor's outer-reduction tile (`triton_config_reduction(size_hints, 64, 8)`):
/// rows per program, and row elements per step.
const OUTER_X_BLOCK: u64 = 64;
const OUTER_R_BLOCK: u64 = 8;
/// Rows up to this length get a persistent outer reduction (Inductor's
/// `should_use_persistent_reduction` threshold for hints other than inner).
const OUTER_PERSISTENT_ROW_LIMIT: u64 = 64;
/// Rows a persistent outer tile of rows shorter than 16 holds.
const TINY_ROWS_TILE: u64 = 1024;
/// The most elements a persistent outer tile holds (rows × row elements).
const OUTER_PERSISTENT_TILE: u64 = 4096;
/// The most elements per thread of an outer tile that holds whole rows.
const WHOLE_ROW_ELEMENTS_PER_THREAD: u64 = 16;
/// Rows an outer tile that holds whole rows takes at least: eight float32
/// rows side by side fill a 32-byte memory sector.
const MIN_COALESCED_ROWS: u64 = 8;
/// Elements of an outer or tiled kernel's tile per warp (four per thread).
const TILE_ELEMENTS_PER_WARP: u64 = 128;
/// Elements of a tiled pointwise kernel's tile per warp (32 per thread).
const TILE_ELEMENTS_PER_TILED_WARP: u64 = 1024;
/// The side of a tiled pointwise kernel's default square tile (Inductor's
/// `triton_config_tiled` defaults reach 64 × 64 for large 2-D kernels).
const TILE_SIDE: u64 = 64;

/// Ordered candidates for a kernel of the given [`ReductionHint`]: `Inner` is
/// [`reduction_configs`]; `Outer` tiles many rows by a short step (a
/// persistent tile when whole rows fit); `Tile` is a square-ish tile for a
/// pointwise kernel that reads across the dim it writes along.
pub fn hinted_reduction_configs(
    limits: &TritonLimits,
    query: &ReductionQuery,
    hint: ReductionHint,
) -> Vec<LaunchConfig> {
    let rows_p2 = next_pow2(query.rows.max(1));
    let row_p2 = next_pow2(query.row_len.max(1));
    // Inductor's `triton_config_reduction`: a warp per 128 elements of the
    // tile (four per thread), at least two, at most eight.
    let config = |x_block: u64, r_block: u64| {
        let (x_block, r_block) = (x_block.min(rows_p2), r_block.min(row_p2));
        LaunchConfig {
            x_block: block_u32(x_block),
            r_block: block_u32(r_block),
            num_warps: inductor_reduction_warps(
                limits,
                x_block.saturating_mul(r_block),
                MAX_REDUCTION_WARPS,
            ),
            num_stages: 1,
        }
    };
    let sms = u64::from(limits.multi_processor_count.max(1));
    let configs = match hint {
        ReductionHint::Inner => return reduction_configs(limits, query),
        ReductionHint::Outer if row_p2 <= OUTER_PERSISTENT_ROW_LIMIT => {
            // Short rows, whole in one tile (Inductor's persistent outer
            // reduction): the most rows of 8, 32 and 128 that fit the tile.
            let fits: Vec<u64> = PERSISTENT_X_BLOCKS
                .iter()
                .copied()
                .filter(|&x| x * row_p2 <= OUTER_PERSISTENT_TILE)
                .collect();
            // Rows of a few elements (a reduction of 1 to 8): a tile of up to
            // 1024 rows, or the kernel is all launch overhead.
            let x =
                fits.last().copied().unwrap_or(1).max(
                    (OUTER_PERSISTENT_TILE / row_p2).min(TINY_ROWS_TILE) * u64::from(row_p2 < 16),
                );
            let mut configs = vec![config(x, row_p2)];
            configs.extend(fits.iter().rev().map(|&x| config(x, row_p2)));
            configs
        }
        ReductionHint::Outer => {
            // Many rows per program, a short step: every load is a run of
            // contiguous rows. Fewer rows per program when there are few.
            let mut x = OUTER_X_BLOCK;
            while x > 16 && query.rows.div_ceil(x) < sms {
                x /= 2;
            }
            let mut configs = vec![
                config(x, OUTER_R_BLOCK),
                config(x, OUTER_R_BLOCK * 2),
                config(x, OUTER_R_BLOCK * 4),
                config(x * 2, OUTER_R_BLOCK),
                config(x * 2, OUTER_R_BLOCK * 2),
                config(x / 2, OUTER_R_BLOCK * 2),
                config(x / 2, OUTER_R_BLOCK * 8),
            ];
            // Whole rows in one tile, for a kernel that reads its rows again
            // after reducing them (the host moves it first for those): as
            // many rows as `OUTER_PERSISTENT_TILE` holds, at most
            // `WHOLE_ROW_ELEMENTS_PER_THREAD` per thread, and at least
            // `MIN_COALESCED_ROWS` rows so that every load still covers a
            // 32-byte sector (a one-warp device cannot: it keeps looping).
            let threads = u64::from(limits.warp_cap()) * u64::from(limits.warp_size.max(1));
            let most =
                OUTER_PERSISTENT_TILE.min(threads.saturating_mul(WHOLE_ROW_ELEMENTS_PER_THREAD));
            if row_p2.saturating_mul(MIN_COALESCED_ROWS) <= most {
                configs.push(config(most / row_p2, row_p2));
            }
            configs
        }
        ReductionHint::Tile => {
            // A warp per 1024 elements of the tile, at least two: on the H100,
            // `x.t() + z` on 64 × 64 tiles ran alike with 4 warps and 8 at
            // 4096² and 8192², and 4 % faster with 4 at 3000².
            let tile = |x_block: u64, r_block: u64| {
                let c = config(x_block, r_block);
                let elements = u64::from(c.x_block) * u64::from(c.r_block);
                let warps = floor_pow2_u64((elements / TILE_ELEMENTS_PER_TILED_WARP).clamp(2, 8))
                    .min(u64::from(limits.warp_cap()));
                LaunchConfig {
                    num_warps: u32::try_from(warps).unwrap_or(1).max(1),
                    ..c
                }
            };
            vec![
                tile(TILE_SIDE, TILE_SIDE),
                tile(TILE_SIDE / 2, TILE_SIDE / 2),
                tile(TILE_SIDE * 2, TILE_SIDE / 2),
                tile(TILE_SIDE / 2, TILE_SIDE * 2),
            ]
        }
    };
    dedup(configs)
}

/// Inductor's persistent limit for inner reductions: rows up to this length
/// are held whole (`should_use_persistent_reduction`'s threshold).
const INNER_PERSISTENT_ROW_LIMIT: u64 = 1024;
/// The longest step of a loop along a row read in one pass.
const ONE_PASS_MAX_RBLOCK: u64 = 4096;
/// The most elements of whole rows a persistent outer tile of a kernel that
/// reads its rows again may hold (Inductor's persistent tile limit).
const REREAD_TILE_ELEMENTS: u64 = 4096;

/// Ordered candidates for a kernel that makes `passes` passes over each row
/// when it loops ([`hinted_reduction_configs`] otherwise):
/// - an inner reduction of one pass (a sum, a max, a mean and variance) over
///   rows longer than [`INNER_PERSISTENT_ROW_LIMIT`] gains nothing from
///   holding its row: it loops first, in steps of half the row (a power of
///   two) up to [`ONE_PASS_MAX_RBLOCK`], a warp per 128 elements of the step
///   up to 16, where the device's programs have threads enough (16 elements
///   of the step each at most); rows long enough for [`LONG_LOOPED_RBLOCK`]
///   keep it. On the H100 a sum over rows of 2048, 4096 and 8192 ran at 95.7,
///   96.6 and 94.5 % of copy bandwidth so (Inductor's kernel 95.9, 96.5 and
///   94.5) against 93.6, 93.9 and 92.8 % for the persistent tile, and over
///   rows of 5000 at 93.5 (Inductor 92.6; `bench/gpu/sum_forms.py`). The
///   persistent candidates stay offered to the autotuner.
/// - an outer reduction that reads its rows again (`x - x.mean(1,
///   keepdim=True)`) takes first the first candidate that holds whole rows in
///   at most [`REREAD_TILE_ELEMENTS`]: it then reads each row once, where
///   with many programs in flight its second read would miss L2 (on the H100,
///   for [512, 512, 256], 229 µs against 272).
pub fn reduction_pass_configs(
    limits: &TritonLimits,
    query: &ReductionQuery,
    hint: ReductionHint,
    passes: u32,
) -> Vec<LaunchConfig> {
    let mut configs = hinted_reduction_configs(limits, query, hint);
    let row_len = query.row_len.max(1);
    let row_p2 = next_pow2(row_len);
    match hint {
        ReductionHint::Inner if passes <= 1 && row_len > INNER_PERSISTENT_ROW_LIMIT => {
            let step = (row_p2 / 2).min(ONE_PASS_MAX_RBLOCK);
            let threads = u64::from(limits.warp_cap()) * u64::from(limits.warp_size.max(1));
            let long = looped_step(limits, row_len) == LONG_LOOPED_RBLOCK;
            if !long && threads.saturating_mul(LONG_STEP_MAX_ELEMENTS_PER_THREAD) >= step {
                let first = LaunchConfig {
                    x_block: 1,
                    r_block: block_u32(step),
                    num_warps: inductor_reduction_warps(limits, step, MAX_LONG_ROW_WARPS),
                    num_stages: 1,
                };
                configs.insert(0, first);
            }
        }
        ReductionHint::Outer if passes > 1 => {
            let whole = |c: &LaunchConfig| {
                u64::from(c.r_block) >= row_len
                    && u64::from(c.x_block).saturating_mul(u64::from(c.r_block))
                        <= REREAD_TILE_ELEMENTS
            };
            if let Some(i) = configs.iter().position(whole) {
                let chosen = configs.remove(i);
                configs.insert(0, chosen);
            }
        }
        _ => {}
    }
    dedup(configs)
}

/// The most rows per program of a one-pass inner reduction launched as a
/// programmatic dependent ([`dependent_reduction_pass_configs`]).
const DEPENDENT_MAX_X_BLOCK: u64 = 4;
/// Elements of that tile per thread (a persistent tile of 4096 in 4 warps).
const DEPENDENT_ELEMENTS_PER_THREAD: u64 = 32;
/// The longest row (a power of two) such a reduction holds whole: all of its
/// weight's loads are then issued before the wait, where a looped one issues its
/// first step's. On the H100, GPT-2 small's second MLP product (rows of 3072) so
/// took its bfloat16 decoding step from 0.245 to 0.236 ms under CUDA graphs, and a
/// chain of its products ran at 1.9-2.0 us each with whole slices against 3.1 for
/// one row a program (`bench/gpu/chain_probe.py`).
const DEPENDENT_WHOLE_ROW: u64 = 4096;
/// The most elements of such a tile.
const DEPENDENT_TILE_ELEMENTS: u64 = 16384;
/// Programs per multiprocessor from which such a launch runs in waves of one-warp
/// programs ([`ONE_WARP_ELEMENTS_PER_THREAD`]).
const WAVE_PROGRAMS_PER_UNIT: u64 = 32;
/// The most programs per multiprocessor of a grid the host launches as a
/// programmatic dependent (its `DEPENDENT_PROGRAMS_PER_UNIT`): a larger one runs as
/// a plain launch, for which one warp a program was not measured, and keeps its warps.
const DEPENDENT_LAUNCH_PROGRAMS_PER_UNIT: u64 = 128;
/// The most elements per thread of a launch of [`WAVE_PROGRAMS_PER_UNIT`] to
/// [`DEPENDENT_LAUNCH_PROGRAMS_PER_UNIT`] programs a multiprocessor that then takes
/// one warp a program. On the H100, GPT-2 small's LM head (50257 rows of 768 after
/// its layer norm: 12565 programs of 4 rows, 95 a multiprocessor, 128 elements a
/// thread in one warp) took its bfloat16 decoding step at batch 1 from 0.215 to
/// 0.212 ms under CUDA graphs (0.984 and 0.987 of its time in two runs, 0.978 and
/// 0.986 in earlier ones); two warps gained about half that, eight rows a program
/// in four or eight warps lost up to 7 us. The float32 steps took 1.003-1.009 of
/// their time, the 170 M Llama's bfloat16 ones (32000 rows of 1024 after its RMS
/// norm) 1.002-1.003, and every batch of 8 0.998-1.004: within the machine's spread
/// (`bench/gpu/decode_ab.py`; `decode_ablate.py --edit lm_x4_w1`).
const ONE_WARP_ELEMENTS_PER_THREAD: u64 = 128;
/// The most elements of a reduction that holds its rows whole so: a larger one is
/// bound by its reads, whose loop ran a few percent faster than the whole row (a sum
/// over rows of 2048 and 4096 on the H100: 95.7 and 96.6 % of copy bandwidth against
/// 93.6 and 93.9, [`reduction_pass_configs`]). A decoding step's products read at most
/// a few tens of millions.
const DEPENDENT_WHOLE_ROW_ELEMENTS: u64 = 1 << 25;

/// [`reduction_pass_configs`] for a device whose kernels are launched as
/// programmatic dependents of the kernel before them (CUDA's programmatic
/// dependent launch on sm_90 and later): such a kernel's programs start while
/// the kernel before still runs and issue their loads of weights before they
/// wait for it. An inner reduction that reads each row once (a persistent
/// tile, or one pass: a product of one row by a weight, a decoding step's
/// projections, an RMS norm taken into one) then takes up to
/// [`DEPENDENT_MAX_X_BLOCK`] rows per program first, as many as leave one
/// program per multiprocessor, in the default step along the row (a persistent
/// tile of at most [`PERSISTENT_TILE_ELEMENTS`]; a row of one pass of at most
/// [`DEPENDENT_WHOLE_ROW`] whole, in at most [`DEPENDENT_TILE_ELEMENTS`]), with
/// [`DEPENDENT_ELEMENTS_PER_THREAD`] elements per thread (one warp for a launch of
/// many waves, [`ONE_WARP_ELEMENTS_PER_THREAD`]): fewer programs to
/// start and to wait, each with more of the weight in flight. On the H100, in
/// CUDA graphs of such launches each on a weight not in L2, one row by every
/// projection of GPT-2 small and of a 170 M Llama-style model, LM heads
/// included, took 0.43–0.91 of the time of the configs before (one row per
/// program; `bench/gpu/gemv_configs.py --pdl`), and launched plainly 0.91–1.10.
pub fn dependent_reduction_pass_configs(
    limits: &TritonLimits,
    query: &ReductionQuery,
    hint: ReductionHint,
    passes: u32,
) -> Vec<LaunchConfig> {
    let mut configs = reduction_pass_configs(limits, query, hint, passes);
    let Some(&first) = configs.first() else {
        return configs;
    };
    let mut r_block = u64::from(first.r_block).max(1);
    // A row read once and no longer than DEPENDENT_WHOLE_ROW is held whole: every
    // load of the weight is issued before the wait.
    let row_p2 = next_pow2(query.row_len.max(1));
    let elements = query.rows.saturating_mul(query.row_len);
    if passes <= 1
        && r_block < query.row_len
        && row_p2 <= DEPENDENT_WHOLE_ROW
        && elements <= DEPENDENT_WHOLE_ROW_ELEMENTS
    {
        r_block = row_p2;
    }
    let persistent = r_block >= query.row_len;
    // Steps longer than Inductor's (rows of 8192 and more) keep theirs: one row
    // per program already holds as much of the row as the warps can.
    if hint != ReductionHint::Inner
        || first.x_block != 1
        || (passes > 1 && !persistent)
        || u64::from(first.r_block) > LOOPED_MAX_RBLOCK
    {
        return configs;
    }
    let rows = query.rows.max(1);
    let sms = u64::from(limits.multi_processor_count.max(1));
    let mut x = 1;
    while x * 2 <= DEPENDENT_MAX_X_BLOCK
        && rows.div_ceil(x * 2) >= sms
        && (!persistent || x * 2 * r_block <= DEPENDENT_TILE_ELEMENTS)
    {
        x *= 2;
    }
    if x == 1 && r_block == u64::from(first.r_block) {
        return configs;
    }
    let threads = x * r_block / DEPENDENT_ELEMENTS_PER_THREAD;
    let wanted =
        (threads / u64::from(limits.warp_size.max(1))).clamp(1, u64::from(MAX_REDUCTION_WARPS));
    let mut warps = floor_pow2_u64(wanted).min(u64::from(limits.warp_cap()));
    // Many waves of programs (a language model's head): one warp each, with no
    // exchange between warps in its reductions (the layer norm taken in, then the
    // product's), where its rows are whole and its tile fits one warp's registers.
    let programs = rows.div_ceil(x);
    let waves = programs >= WAVE_PROGRAMS_PER_UNIT.saturating_mul(sms)
        && programs <= DEPENDENT_LAUNCH_PROGRAMS_PER_UNIT.saturating_mul(sms);
    let one_warp = ONE_WARP_ELEMENTS_PER_THREAD.saturating_mul(u64::from(limits.warp_size.max(1)));
    if waves && persistent && x * r_block <= one_warp {
        warps = 1;
    }
    configs.insert(
        0,
        LaunchConfig {
            x_block: block_u32(x),
            r_block: block_u32(r_block),
            num_warps: u32::try_from(warps).unwrap_or(1).max(1),
            num_stages: 1,
        },
    );
    dedup(configs)
}

/// The step of a looped reduction along a row of `row_len` elements:
/// - [`LONG_LOOPED_RBLOCK`] where the row is at least [`LONG_STEP_MIN_STEPS`]
///   of them, the last step masks off at most [`LONG_STEP_MASKED_PERCENT`]
///   of it, and the device's programs have threads enough (4096 is not taken:
///   16 warps stepping by 4096 along rows of 8192 ran 10 % slower than by
///   2048, and 12 % slower than by 8192 along rows of 50257);
/// - otherwise the longest of 2048, 1024 and 512 that masks off at most 2 %
///   more lanes than the one that masks off fewest (rows of 5000 take 1024:
///   five steps over 5120 lanes, not three over 6144).
fn looped_step(limits: &TritonLimits, row_len: u64) -> u64 {
    let threads = u64::from(limits.warp_cap()) * u64::from(limits.warp_size.max(1));
    let lanes = |step: u64| row_len.div_ceil(step).saturating_mul(step);
    let long = LONG_LOOPED_RBLOCK;
    if threads.saturating_mul(LONG_STEP_MAX_ELEMENTS_PER_THREAD) >= long
        && row_len >= LONG_STEP_MIN_STEPS * long
        && (lanes(long) - row_len).saturating_mul(100)
            <= row_len.saturating_mul(LONG_STEP_MASKED_PERCENT)
    {
        return long;
    }
    let steps = [
        LOOPED_MAX_RBLOCK,
        LOOPED_MAX_RBLOCK / 2,
        LOOPED_MAX_RBLOCK / 4,
    ];
    let fewest = steps.iter().map(|&s| lanes(s)).min().unwrap_or(row_len);
    // Within 2 % of the fewest lanes, the longer step wins (fewer iterations).
    steps
        .into_iter()
        .find(|&s| lanes(s) <= fewest.saturating_add(fewest / 50))
        .unwrap_or(LOOPED_MAX_RBLOCK)
}

/// Inductor's `triton_config_reduction` warps: one per 128 elements of the
/// tile (four per thread), at least two, at most `cap` and the device's limit.
fn inductor_reduction_warps(limits: &TritonLimits, tile: u64, cap: u32) -> u32 {
    let warps = floor_pow2_u64((tile / TILE_ELEMENTS_PER_WARP).clamp(2, u64::from(cap.max(2))))
        .min(u64::from(limits.warp_cap()));
    u32::try_from(warps).unwrap_or(1).max(1)
}

/// Caps each dimension at the device's grid limit; kernels loop over the rest.
///
/// This is the one thing `adjust_grid` may do to a grid besides rounding it
/// up: a dimension above the limit becomes exactly the `max_grid` the plugin
/// reports in its properties, never less (conformance's `heuristics.grid`).
pub fn cap_grid(dims: [u64; 3], max_grid: [u64; 3]) -> [u64; 3] {
    [
        dims[0].min(max_grid[0]),
        dims[1].min(max_grid[1]),
        dims[2].min(max_grid[2]),
    ]
}

/// A grid granularity rule (the GXU's): a dimension of at most `multiple`
/// programs, or already a multiple of it, runs as asked; any other is
/// rounded up to the next multiple (50 → 96 for 48); then [`cap_grid`].
/// Give it a `max_grid` from [`max_grid_in_multiples`] so that capping keeps
/// the granularity.
pub fn round_grid_to_multiple(dims: [u64; 3], multiple: u64, max_grid: [u64; 3]) -> [u64; 3] {
    let multiple = multiple.max(1);
    let rounded = dims.map(|dim| {
        if dim <= multiple || dim.is_multiple_of(multiple) {
            dim
        } else {
            // Past u64 the cap applies anyway.
            dim.div_ceil(multiple).saturating_mul(multiple)
        }
    });
    cap_grid(rounded, max_grid)
}

/// The largest multiple of `multiple` at or below each of `limits` (a limit
/// smaller than `multiple` stays as it is): the `max_grid` to report, and to
/// cap at, for a device with a grid granularity.
pub fn max_grid_in_multiples(limits: [u64; 3], multiple: u64) -> [u64; 3] {
    let multiple = multiple.max(1);
    limits.map(|limit| {
        if multiple > limit {
            limit
        } else {
            limit / multiple * multiple
        }
    })
}

/// The smallest power of two at or above `n` (1 for 0), saturating at 2^63.
pub fn next_pow2(n: u64) -> u64 {
    n.max(1).checked_next_power_of_two().unwrap_or(1 << 63)
}

/// The largest power of two at or below `n` (1 for 0).
fn floor_pow2_u64(n: u64) -> u64 {
    if n <= 1 {
        1
    } else {
        1 << (63 - n.leading_zeros())
    }
}

fn floor_pow2_u32(n: u32) -> u32 {
    if n <= 1 {
        1
    } else {
        1 << (31 - n.leading_zeros())
    }
}

/// Blocks are at most `TRITON_MAX_XBLOCK` or a persistent row of a few
/// thousand elements, far below `u32::MAX`; the clamp only guards the type.
fn block_u32(block: u64) -> u32 {
    u32::try_from(block).unwrap_or(1 << 31).max(1)
}

/// Drops repeated configs, keeping the first of each (the order is the
/// preference order).
fn dedup(configs: Vec<LaunchConfig>) -> Vec<LaunchConfig> {
    let mut out: Vec<LaunchConfig> = Vec::with_capacity(configs.len());
    for config in configs {
        if !out.contains(&config) {
            out.push(config);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const WIDE: TritonLimits = TritonLimits {
        warp_size: 32,
        max_threads_per_block: 1024,
        max_num_warps: 32,
        multi_processor_count: 132,
        persistent_row_limit: 1024,
        persistent_fallback_row_limit: 16384,
    };

    /// The cuda plugin's persistent limits: rows of up to 8192 held whole.
    const WIDE_PERSISTENT: TritonLimits = TritonLimits {
        persistent_row_limit: 8192,
        ..WIDE
    };

    const ONE_WARP: TritonLimits = TritonLimits {
        max_num_warps: 1,
        multi_processor_count: 48,
        persistent_fallback_row_limit: 4096,
        ..WIDE
    };

    const NARROW: TritonLimits = TritonLimits {
        warp_size: 64,
        max_threads_per_block: 128,
        max_num_warps: 64,
        multi_processor_count: 1,
        persistent_row_limit: 4096,
        persistent_fallback_row_limit: 4096,
    };

    fn pw(numel: u64) -> PointwiseQuery {
        PointwiseQuery {
            numel,
            element_bytes: 4,
        }
    }

    fn red(rows: u64, row_len: u64) -> ReductionQuery {
        ReductionQuery {
            rows,
            row_len,
            element_bytes: 4,
        }
    }

    fn check_all(limits: &TritonLimits, configs: &[LaunchConfig]) {
        assert!(!configs.is_empty());
        for c in configs {
            assert!(c.x_block.is_power_of_two(), "{c:?}");
            assert!(c.r_block.is_power_of_two(), "{c:?}");
            assert!(c.num_warps.is_power_of_two(), "{c:?}");
            assert!(c.num_warps <= limits.max_num_warps, "{c:?}");
            assert!(
                u64::from(c.num_warps) * u64::from(limits.warp_size)
                    <= u64::from(limits.max_threads_per_block),
                "{c:?}"
            );
            assert_eq!(c.num_stages, 1);
        }
    }

    #[test]
    fn sweep_is_total_and_within_limits() {
        for limits in [WIDE, ONE_WARP, NARROW] {
            for shift in 0..=40 {
                for numel in [
                    (1u64 << shift).saturating_sub(1),
                    1 << shift,
                    (1 << shift) + 1,
                ] {
                    let configs = pointwise_configs(&limits, &pw(numel));
                    check_all(&limits, &configs);
                    assert_eq!(configs, pointwise_configs(&limits, &pw(numel)));
                }
            }
            check_all(&limits, &pointwise_configs(&limits, &pw(u64::MAX)));
            for rows_shift in (0..=31).step_by(3) {
                for len_shift in 0..=20 {
                    for row_len in [1u64 << len_shift, (1 << len_shift) + 3] {
                        let q = red(1 << rows_shift, row_len);
                        let configs = reduction_configs(&limits, &q);
                        check_all(&limits, &configs);
                        assert_eq!(configs, reduction_configs(&limits, &q));
                    }
                }
            }
            check_all(&limits, &reduction_configs(&limits, &red(0, 0)));
            check_all(
                &limits,
                &reduction_configs(&limits, &red(u64::MAX, u64::MAX)),
            );
        }
    }

    #[test]
    fn large_pointwise_defaults_to_inductor_block() {
        let configs = pointwise_configs(&WIDE, &pw(1 << 20));
        assert_eq!((configs[0].x_block, configs[0].num_warps), (1024, 4));
        assert!(configs.len() > 1);
        let configs = pointwise_configs(&WIDE, &pw(1 << 31));
        assert_eq!((configs[0].x_block, configs[0].num_warps), (1024, 4));
    }

    #[test]
    fn tiny_pointwise_shrinks_block_and_warps() {
        let configs = pointwise_configs(&WIDE, &pw(1));
        assert_eq!(
            configs[0],
            LaunchConfig {
                x_block: 1,
                r_block: 1,
                num_warps: 1,
                num_stages: 1
            }
        );
        let configs = pointwise_configs(&WIDE, &pw(100));
        assert_eq!((configs[0].x_block, configs[0].num_warps), (128, 1));
    }

    #[test]
    fn long_rows_loop_then_offer_persistent() {
        let configs = reduction_configs(&WIDE, &red(8192, 8192));
        assert_eq!(
            configs[0],
            LaunchConfig {
                x_block: 1,
                r_block: 2048,
                num_warps: 8,
                num_stages: 1
            }
        );
        assert!(configs.iter().any(|c| c.r_block == 8192 && c.x_block == 1));
        // Past the fallback limit no persistent candidate is offered.
        let configs = reduction_configs(&WIDE, &red(8, 1 << 20));
        assert!(configs.iter().all(|c| c.r_block <= 8192));
    }

    #[test]
    fn long_rows_that_fill_few_lanes_loop() {
        let wide = TritonLimits {
            persistent_row_limit: 8192,
            ..WIDE
        };
        assert_eq!(reduction_configs(&wide, &red(8192, 8192))[0].r_block, 8192);
        assert_eq!(reduction_configs(&wide, &red(8192, 7000))[0].r_block, 8192);
        assert_eq!(reduction_configs(&wide, &red(13421, 5000))[0].r_block, 1024);
        assert_eq!(reduction_configs(&wide, &red(13421, 600))[0].r_block, 1024);
    }

    #[test]
    fn looped_steps_waste_few_lanes() {
        assert_eq!(reduction_configs(&WIDE, &red(13421, 5000))[0].r_block, 1024);
        assert_eq!(reduction_configs(&WIDE, &red(64, 2500))[0].r_block, 512);
        // Rows of 10000 in steps of 4096 would mask off 23 %: 2048.
        assert_eq!(reduction_configs(&WIDE, &red(64, 10000))[0].r_block, 2048);
    }

    #[test]
    fn rows_read_in_one_pass_loop_and_rows_read_again_stay_whole() {
        let first = |limits: &TritonLimits, rows: u64, len: u64, hint, passes| {
            let c = reduction_pass_configs(limits, &red(rows, len), hint, passes)[0];
            (c.x_block, c.r_block, c.num_warps)
        };
        let persistent_8192 = {
            let c = reduction_configs(&WIDE_PERSISTENT, &red(2048, 8192))[0];
            (c.x_block, c.r_block, c.num_warps)
        };
        assert_eq!(persistent_8192.1, 8192, "the plugin's persistent tile");
        // One pass: half the row per step (a power of two, at most 4096), a
        // warp per 128 elements of it, at most 16.
        for (len, step, warps) in [
            (2048, 1024, 8),
            (4096, 2048, 16),
            (8192, 4096, 16),
            (5000, 4096, 16),
        ] {
            assert_eq!(
                first(&WIDE_PERSISTENT, 2048, len, ReductionHint::Inner, 1),
                (1, step, warps),
                "rows of {len}"
            );
        }
        // The persistent tile stays offered to the autotuner.
        assert!(reduction_pass_configs(
            &WIDE_PERSISTENT,
            &red(2048, 8192),
            ReductionHint::Inner,
            1
        )
        .iter()
        .any(|c| c.r_block == 8192));
        // Several passes: the plugin's persistent tile, as before.
        assert_eq!(
            first(&WIDE_PERSISTENT, 2048, 8192, ReductionHint::Inner, 3),
            persistent_8192
        );
        // Rows up to Inductor's persistent limit stay whole; rows long enough
        // for the long step keep it; a one-warp program keeps its steps.
        let whole = reduction_configs(&WIDE, &red(4096, 1024))[0];
        assert_eq!(
            first(&WIDE, 4096, 1024, ReductionHint::Inner, 1),
            (whole.x_block, whole.r_block, whole.num_warps)
        );
        assert_eq!(
            first(&WIDE, 512, 50257, ReductionHint::Inner, 1),
            (1, 8192, 16)
        );
        let one_warp = reduction_configs(&ONE_WARP, &red(2048, 8192))[0];
        assert_eq!(
            first(&ONE_WARP, 2048, 8192, ReductionHint::Inner, 1),
            (one_warp.x_block, one_warp.r_block, one_warp.num_warps)
        );
        // An outer reduction read again takes whole rows within 4096 elements.
        let (x, r, _) = first(&WIDE, 1 << 17, 512, ReductionHint::Outer, 2);
        assert!(r >= 512 && u64::from(x) * u64::from(r) <= 4096, "{x} x {r}");
        assert_eq!(
            reduction_pass_configs(&WIDE, &red(1 << 17, 512), ReductionHint::Outer, 1),
            hinted_reduction_configs(&WIDE, &red(1 << 17, 512), ReductionHint::Outer)
        );
        for hint in [
            ReductionHint::Inner,
            ReductionHint::Outer,
            ReductionHint::Tile,
        ] {
            for passes in 1..=3 {
                for (rows, len) in [(1, 1), (7, 3000), (1 << 20, 1 << 20), (3, 70000)] {
                    let configs = reduction_pass_configs(&WIDE, &red(rows, len), hint, passes);
                    check_all(&WIDE, &configs);
                    let configs = reduction_pass_configs(&ONE_WARP, &red(rows, len), hint, passes);
                    check_all(&ONE_WARP, &configs);
                }
            }
        }
    }

    #[test]
    fn dependent_one_row_products_take_four_rows_per_program() {
        let first = |limits: &TritonLimits, rows, len, passes| {
            let c = dependent_reduction_pass_configs(
                limits,
                &red(rows, len),
                ReductionHint::Inner,
                passes,
            )[0];
            (c.x_block, c.r_block, c.num_warps)
        };
        // GPT-2 small's projections: rows of 768 whole (4096 elements, four
        // warps); rows of 3072 whole too (a tile of 4 x 4096, eight warps), where
        // a plain launch steps by 2048.
        assert_eq!(first(&WIDE_PERSISTENT, 2304, 768, 1), (4, 1024, 4));
        // Its LM head: 12565 programs, 95 a multiprocessor, one warp each. Rows of
        // 2048 (more than 2^25 elements: a loop along them) keep their warps.
        assert_eq!(first(&WIDE_PERSISTENT, 50257, 768, 1), (4, 1024, 1));
        assert_eq!(first(&WIDE_PERSISTENT, 50257, 2048, 1), (4, 1024, 4));
        // 16896 rows: 4224 programs, exactly 32 a multiprocessor; 64 rows fewer, fewer.
        assert_eq!(first(&WIDE_PERSISTENT, 16896, 768, 1), (4, 1024, 1));
        assert_eq!(first(&WIDE_PERSISTENT, 16832, 768, 1), (4, 1024, 4));
        // More than 128 programs a multiprocessor: a plain launch, its warps kept.
        assert_eq!(first(&WIDE_PERSISTENT, 67584, 768, 1), (4, 1024, 1));
        assert_eq!(first(&WIDE_PERSISTENT, 67600, 768, 1), (4, 1024, 4));
        assert_eq!(first(&WIDE_PERSISTENT, 768, 3072, 1), (4, 4096, 8));
        assert_eq!(
            reduction_pass_configs(&WIDE_PERSISTENT, &red(768, 3072), ReductionHint::Inner, 1)[0]
                .r_block,
            2048
        );
        // Rows longer than 4096 keep their loop (a step of 4096 here, as a plain
        // launch's); few rows take one a program.
        assert_eq!(first(&WIDE_PERSISTENT, 4096, 5000, 1), (1, 4096, 16));
        assert_eq!(first(&WIDE_PERSISTENT, 100, 3072, 1), (1, 4096, 4));
        // A reduction of more than 2^25 elements keeps its loop.
        assert_eq!(first(&WIDE_PERSISTENT, 32768, 3072, 1), (4, 2048, 8));
        // An RMS norm taken into the product: two passes, one tile.
        assert_eq!(first(&WIDE_PERSISTENT, 8192, 1024, 2), (4, 1024, 4));
        // Fewer rows per program where four would leave multiprocessors idle.
        assert_eq!(first(&WIDE_PERSISTENT, 300, 1024, 1), (2, 1024, 2));
        assert_eq!(first(&WIDE_PERSISTENT, 200, 1024, 1), (1, 1024, 4));
        // A looped kernel of several passes reads its rows again: unchanged.
        let looped = |limits: &TritonLimits| {
            reduction_pass_configs(limits, &red(4096, 50000), ReductionHint::Inner, 2)
        };
        assert_eq!(
            dependent_reduction_pass_configs(
                &WIDE_PERSISTENT,
                &red(4096, 50000),
                ReductionHint::Inner,
                2
            ),
            looped(&WIDE_PERSISTENT)
        );
        // Outer reductions, rows already many per program, and steps longer
        // than 2048: unchanged.
        for (hint, rows, len) in [
            (ReductionHint::Outer, 4096, 768),
            (ReductionHint::Inner, 1 << 20, 64),
            (ReductionHint::Inner, 4096, 8192),
        ] {
            assert_eq!(
                dependent_reduction_pass_configs(&WIDE_PERSISTENT, &red(rows, len), hint, 1),
                reduction_pass_configs(&WIDE_PERSISTENT, &red(rows, len), hint, 1)
            );
        }
        for limits in [&WIDE, &ONE_WARP, &NARROW] {
            for (rows, len) in [(1, 1), (2304, 768), (7, 3000), (1 << 20, 1 << 20)] {
                for passes in 1..=2 {
                    let configs = dependent_reduction_pass_configs(
                        limits,
                        &red(rows, len),
                        ReductionHint::Inner,
                        passes,
                    );
                    check_all(limits, &configs);
                }
            }
        }
    }

    #[test]
    fn very_long_rows_take_long_steps_with_sixteen_warps() {
        for (rows, len) in [(4096, 50257), (1335, 50257), (512, 1 << 17)] {
            let configs = reduction_configs(&WIDE, &red(rows, len));
            assert_eq!(
                (configs[0].x_block, configs[0].r_block, configs[0].num_warps),
                (1, 8192, 16)
            );
            // Inductor's step is still offered to the autotuner.
            assert!(configs
                .iter()
                .any(|c| (c.x_block, c.r_block, c.num_warps) == (1, 2048, 8)));
        }
        // Rows of fewer than four long steps keep Inductor's step.
        let c = reduction_configs(&WIDE, &red(64, 20000))[0];
        assert_eq!((c.r_block, c.num_warps), (2048, 8));
        // A one-warp program keeps Inductor's step.
        assert_eq!(
            reduction_configs(&ONE_WARP, &red(4096, 50257))[0].r_block,
            2048
        );
        assert_eq!(
            reduction_configs(&ONE_WARP, &red(8192, 4096))[0].r_block,
            2048
        );
    }

    #[test]
    fn short_rows_are_persistent() {
        let configs = reduction_configs(&WIDE, &red(8192, 1000));
        assert_eq!(configs[0].r_block, 1024);
        assert!(configs.iter().all(|c| c.r_block == 1024));
        assert!(configs.iter().all(|c| u64::from(c.x_block) * 1024 <= 4096));
        // Many short rows: several rows per program, still one program per SM.
        let configs = reduction_configs(&WIDE, &red(1 << 20, 16));
        assert_eq!((configs[0].x_block, configs[0].r_block), (128, 16));
        // Few rows: one row per program.
        let configs = reduction_configs(&WIDE, &red(4, 16));
        assert_eq!(configs[0].x_block, 1);
        // Many rows of 100: a tile of 8 rows of 128 lanes by default, the
        // larger tiles offered after it.
        let configs = reduction_configs(&WIDE, &red(671_088, 100));
        assert_eq!((configs[0].x_block, configs[0].r_block), (8, 128));
        assert!(configs.iter().any(|c| c.x_block == 32));
    }

    #[test]
    fn one_warp_devices_get_one_warp() {
        for numel in [1, 1 << 10, 1 << 20, 1 << 31] {
            assert!(pointwise_configs(&ONE_WARP, &pw(numel))
                .iter()
                .all(|c| c.num_warps == 1));
        }
        for (rows, len) in [(1, 1), (8192, 8192), (3, 1 << 20)] {
            assert!(reduction_configs(&ONE_WARP, &red(rows, len))
                .iter()
                .all(|c| c.num_warps == 1));
        }
    }

    #[test]
    fn hinted_configs_are_total_and_within_limits() {
        for limits in [WIDE, ONE_WARP, NARROW] {
            for hint in [
                ReductionHint::Inner,
                ReductionHint::Outer,
                ReductionHint::Tile,
            ] {
                for rows_shift in (0..=31).step_by(3) {
                    for len_shift in 0..=20 {
                        for row_len in [1u64 << len_shift, (1 << len_shift) + 3] {
                            let q = red(1 << rows_shift, row_len);
                            let configs = hinted_reduction_configs(&limits, &q, hint);
                            check_all(&limits, &configs);
                            assert_eq!(configs, hinted_reduction_configs(&limits, &q, hint));
                        }
                    }
                }
                check_all(
                    &limits,
                    &hinted_reduction_configs(&limits, &red(0, 0), hint),
                );
            }
        }
    }

    #[test]
    fn outer_reductions_tile_many_rows_by_a_short_step() {
        // `x.sum(0)` of 16384 × 16384: 64 columns per program, 8 rows a step.
        let c = hinted_reduction_configs(&WIDE, &red(16384, 16384), ReductionHint::Outer)[0];
        assert_eq!((c.x_block, c.r_block), (64, 8));
        // Few columns: fewer per program, so that every SM has one.
        let c = hinted_reduction_configs(&WIDE, &red(2048, 8192), ReductionHint::Outer)[0];
        assert_eq!((c.x_block, c.r_block), (16, 8));
        // Short columns: whole, as many to a program as Inductor takes.
        let c = hinted_reduction_configs(&WIDE, &red(1 << 20, 16), ReductionHint::Outer)[0];
        assert_eq!((c.x_block, c.r_block), (128, 16));
        let c = hinted_reduction_configs(&WIDE, &red(1 << 20, 64), ReductionHint::Outer)[0];
        assert_eq!((c.x_block, c.r_block), (32, 64));
        let c = hinted_reduction_configs(&WIDE, &red(1 << 26, 1), ReductionHint::Outer)[0];
        assert_eq!((c.x_block, c.r_block, c.num_warps), (1024, 1, 8));
        // Longer ones are looped over, with a whole-row tile offered last (for
        // kernels that read their rows again): 8 rows of 512, 16 per thread.
        let configs = hinted_reduction_configs(&WIDE, &red(1 << 20, 512), ReductionHint::Outer);
        assert_eq!((configs[0].x_block, configs[0].r_block), (64, 8));
        let last = configs[configs.len() - 1];
        assert_eq!((last.x_block, last.r_block, last.num_warps), (8, 512, 8));
        // Rows too long for 8 of them in a tile, or a one-warp device: no
        // whole-row tile (fewer rows would not fill a memory sector).
        for (limits, len) in [(WIDE, 1024), (ONE_WARP, 512)] {
            let configs =
                hinted_reduction_configs(&limits, &red(1 << 20, len), ReductionHint::Outer);
            assert!(
                configs.iter().all(|c| u64::from(c.r_block) < len),
                "{configs:?}"
            );
        }
        // Inner is the unhinted answer.
        assert_eq!(
            hinted_reduction_configs(&WIDE, &red(8192, 8192), ReductionHint::Inner),
            reduction_configs(&WIDE, &red(8192, 8192))
        );
    }

    #[test]
    fn tiled_pointwise_is_square_and_fits_small_sides() {
        let c = hinted_reduction_configs(&WIDE, &red(8192, 8192), ReductionHint::Tile)[0];
        assert_eq!((c.x_block, c.r_block, c.num_warps), (64, 64, 4));
        // A tile narrowed to a short row has fewer warps, never fewer than two.
        let c = hinted_reduction_configs(&WIDE, &red(8192, 12), ReductionHint::Tile)[0];
        assert_eq!((c.x_block, c.r_block, c.num_warps), (64, 16, 2));
        let c = hinted_reduction_configs(&ONE_WARP, &red(8192, 8192), ReductionHint::Tile)[0];
        assert_eq!(c.num_warps, 1);
    }

    #[test]
    fn grid_is_capped_never_shrunk() {
        let max = [2_147_483_647, 65_535, 65_535];
        assert_eq!(cap_grid([1, 1, 1], max), [1, 1, 1]);
        assert_eq!(
            cap_grid([u64::MAX, 70_000, 3], max),
            [2_147_483_647, 65_535, 3]
        );
    }

    #[test]
    fn grids_round_up_to_the_granularity_and_cap_at_a_limit_that_keeps_it() {
        let max = max_grid_in_multiples([2_147_483_647, 65_535, 65_535], 48);
        assert_eq!(max, [2_147_483_616, 65_520, 65_520]);
        assert!(max.iter().all(|m| m % 48 == 0));
        // At most 48, or a multiple of 48, runs as asked; anything else rounds up.
        assert_eq!(round_grid_to_multiple([1, 48, 96], 48, max), [1, 48, 96]);
        assert_eq!(
            round_grid_to_multiple([50, 1000, 1], 48, max),
            [96, 1008, 1]
        );
        // Beyond the limit: exactly the (granular) limit.
        assert_eq!(
            round_grid_to_multiple([u64::MAX, 70_000, 1], 48, max),
            [max[0], max[1], 1]
        );
        // A granularity above the limit leaves the limit itself.
        assert_eq!(max_grid_in_multiples([10, 100, 1000], 64), [10, 64, 960]);
    }
}
