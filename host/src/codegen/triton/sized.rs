//! The launches of a kernel of symbolic sizes, chosen per bucket of the sizes a
//! call brings.
//!
//! A static compile asks the plugin's heuristics for the config of a kernel's one
//! size. A kernel of symbolic sizes asks at every bucket its sizes may fall in
//! (each a power of two: `2^(b-1) < n <= 2^b`), and keeps each distinct config as
//! a variant, compiled as its own binary when the wrapper loads. The wrapper
//! launches, at each call, the variant and grid of the bucket of that call's
//! sizes (`kiln_runtime.SizedLaunch`), so a size far from the example's gets the
//! config a static compile of it would get. The kernel's text is one for every
//! variant: a persistent reduction keeps only configs whose block covers every
//! row length of the range.

use kiln_plugin_api::{Grid, LaunchConfig};

use crate::codegen::heuristics::{
    kernel_configs_at, launch_grid, HeuristicsError, LaunchHeuristics,
};
use crate::graph::sym::{Size, Symbols, Syntax};
use crate::schedule::ir::{Kernel, Program};

/// The highest bucket a size is placed in (`2^62`): a size past it shares that
/// bucket's launch, which the kernels' grid-stride loops keep correct.
const TOP_BUCKET: u32 = 62;

/// The largest row count, and row length, the table of a kernel plans for: a range
/// without an upper bound (`torch.export`'s `int_oo`) would otherwise ask at every
/// bucket to `2^62`. A larger size takes the table's last launch, which the
/// kernels' grid-stride and row loops keep correct.
const MOST_ROWS: i128 = 1 << 36;
const MOST_ROW_LENGTH: i128 = 1 << 31;

/// One launch config a kernel of symbolic sizes is compiled with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Variant {
    /// `XBLOCK`.
    pub x_block: u32,
    /// `RBLOCK` (reduction kernels).
    pub r_block: Option<u32>,
    /// Warps per program.
    pub num_warps: u32,
    /// Pipelining stages.
    pub num_stages: u32,
    /// Launched as the programmatic dependent of the kernel before it: where its
    /// grid is small enough, as a static compile decides
    /// ([`super::kernel::DEPENDENT_WAIT`]).
    pub dependent: bool,
}

/// The launches of one kernel of symbolic sizes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SizedLaunch {
    /// The distinct configs, at most [`MAX_VARIANTS`], that of the bucket of the
    /// most work first.
    pub variants: Vec<Variant>,
    /// The names the variants are compiled under, in order: the kernel's own for
    /// the first (set when the kernels are named).
    pub names: Vec<String>,
    /// The row bucket ([`row_key`]) of the least row count (elements, for a
    /// pointwise kernel) the table starts at.
    pub x_from: u32,
    /// The bucket of the least row length the table's rows start at (0 for a
    /// kernel without a reduction, or of one row length).
    pub r_from: u32,
    /// `table[i][j]`: for a row count in row bucket `x_from + i` and a row length
    /// in bucket `r_from + j`, the variant launched and its grid.
    pub table: Vec<Vec<(usize, Grid)>>,
    /// Its further forms, each launched where a call's sizes give the facts it was
    /// compiled under; `None` for a kernel of one form.
    pub forms: Option<Forms>,
}

/// The forms of a kernel of dynamic sizes beyond its base one: its one text compiled
/// under facts that hold at some sizes of its range, as a static compile of such a size
/// knows them, each launched where a call's sizes give its facts (a guard). Form `f` is a
/// set of facts: [`Forms::NARROW`], 32-bit indexes (the base indexes in 64 bits, which
/// the range's largest sizes need); [`Forms::ALIGNED`], the count along the kernel's
/// inner loop a multiple of 16 (Triton then vectorises its masked loads and stores).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Forms {
    /// For [`Forms::NARROW`]: the sizes (the elements the kernel indexes, each buffer's)
    /// that must each be below [`NARROW_LIMIT`]; empty where the kernel has one width.
    pub narrow: Vec<Size>,
    /// For [`Forms::ALIGNED`]: the count (`xnumel` of a pointwise kernel, `rnumel` of a
    /// reduction) and its parameter's name; `None` where it is a multiple of 16 anyway.
    pub aligned: Option<(Size, &'static str)>,
    /// `names[f - 1]`: each variant's name in form `f`, in the order of the variants;
    /// empty for a form of a fact the kernel has no use for.
    pub names: [Vec<String>; 3],
}

impl Forms {
    /// The fact of 32-bit indexes.
    pub const NARROW: usize = 1;
    /// The fact of an inner count of a multiple of 16.
    pub const ALIGNED: usize = 2;

    /// The forms beyond the base the kernel has (1 to 3), each of facts it uses.
    pub fn present(&self) -> impl Iterator<Item = usize> + '_ {
        (1..4).filter(|f| {
            (f & Self::NARROW == 0 || !self.narrow.is_empty())
                && (f & Self::ALIGNED == 0 || self.aligned.is_some())
        })
    }

    /// The form a call's sizes allow, as an expression of `syntax` over the size
    /// symbols (`ks<id>`): the sum of the facts whose guards they pass.
    pub fn test(&self, syntax: Syntax) -> String {
        let size = |s: &Size| crate::schedule::index::size_text(s, syntax);
        let python = syntax == Syntax::Python;
        let and = if python { " and " } else { " && " };
        let pick = |c: &str, bit: usize| {
            if python {
                format!("({bit} if {c} else 0)")
            } else {
                format!("({c} ? {bit} : 0)")
            }
        };
        let mut terms = Vec::new();
        if !self.narrow.is_empty() {
            let tests: Vec<String> = self
                .narrow
                .iter()
                .map(|g| format!("{} < {NARROW_LIMIT}", size(g)))
                .collect();
            terms.push(pick(&tests.join(and), Self::NARROW));
        }
        if let Some((count, _)) = &self.aligned {
            terms.push(pick(&format!("{} % 16 == 0", size(count)), Self::ALIGNED));
        }
        terms.join(" + ")
    }

    /// The names of every variant in every further form.
    pub fn all_names(&self) -> impl Iterator<Item = &String> {
        self.names.iter().flatten()
    }
}

/// The largest value a 32-bit index takes: a kernel whose sizes reach it indexes
/// in 64 bits.
pub const NARROW_LIMIT: i64 = i32::MAX as i64;

/// The bucket of a size: the least `b` with `n <= 2^b` (0 for 1 and below).
pub fn bucket(n: i128) -> u32 {
    if n <= 1 {
        return 0;
    }
    (128 - (n - 1).leading_zeros()).min(TOP_BUCKET)
}

/// The buckets a size within `bounds` may fall in, each with the size the
/// heuristics are asked at: the bucket's top, within the bounds.
fn buckets(bounds: (i128, i128)) -> Vec<(u32, i64)> {
    let (lo, hi) = (bounds.0.max(1), bounds.1.max(1));
    (bucket(lo)..=bucket(hi))
        .map(|b| {
            let top = (1i128 << b).clamp(lo, hi);
            (b, i64::try_from(top).unwrap_or(i64::MAX))
        })
        .collect()
}

/// Row-count buckets per power of two: a row count's bucket is finer than a row
/// length's, since the grid follows it (a grid for the power of two above would
/// launch up to twice the programs: on the H200, GPT-2's GELU over 16 x 512 x 3072
/// took 11 % longer so).
pub const ROW_STEPS: u32 = 8;

/// The row bucket of a row count: `8 b + s`, `b` its [`bucket`] and `s` the three
/// bits of `n - 1` after its leading one (its own low bits below 16), as the
/// runtime computes it (`kiln_runtime.SizedLaunch.row_key`).
pub fn row_key(n: i128) -> u32 {
    let m = (n.max(1) - 1) as u128;
    let b = (128 - m.leading_zeros()).min(TOP_BUCKET);
    let s = if b > 4 { (m >> (b - 4)) & 7 } else { m & 7 };
    b * ROW_STEPS + s as u32
}

/// The largest row count of row bucket `key`; `None` for a key no count has.
fn row_key_top(key: u32) -> Option<i128> {
    let (b, s) = (key / ROW_STEPS, i128::from(key % ROW_STEPS));
    if b > 4 {
        return Some((9 + s) << (b - 4));
    }
    let m = if b == 4 { 8 + s } else { s };
    (128 - (m as u128).leading_zeros() == b).then_some(m + 1)
}

/// The row buckets a count within `bounds` may fall in, from the least one's to the
/// greatest's, each with the count the heuristics are asked at: its top, within the
/// bounds (a key no count has, never looked up, takes the one before it's).
fn row_keys(bounds: (i128, i128)) -> Vec<(u32, i64)> {
    let (lo, hi) = (bounds.0.max(1), bounds.1.max(1));
    let mut last = lo;
    (row_key(lo)..=row_key(hi))
        .map(|key| {
            last = row_key_top(key).map_or(last, |top| top.clamp(lo, hi));
            (key, i64::try_from(last).unwrap_or(i64::MAX))
        })
        .collect()
}

/// The most variants a kernel is compiled in. Where the plugin's configs differ
/// at more buckets than this, the buckets of the most work keep theirs, and every
/// other bucket takes the variant of the nearest bucket that kept one: a call of
/// little work is bound by its launch, whatever its config.
pub const MAX_VARIANTS: usize = 4;

/// The launches of kernel `k` (of symbolic row count or length) per bucket of its
/// sizes. A `persistent` reduction takes at each bucket the plugin's first config
/// whose block covers `r_most`, the longest row, and `fallback` (the config its
/// text was decided by) where none does. A bucket whose grid has at most
/// `dependent_programs` programs launches as a programmatic dependent.
pub fn plan(
    program: &Program,
    k: &Kernel,
    heuristics: &dyn LaunchHeuristics,
    fallback: &LaunchConfig,
    persistent: bool,
    dependent_programs: u64,
) -> Result<SizedLaunch, HeuristicsError> {
    let symbols: &Symbols = &program.symbols;
    let reduction = k.is_reduction();
    let r_most = k.space.r.bounds(symbols).1;
    let most = |(lo, hi): (i128, i128), cap: i128| (lo.min(cap), hi.min(cap));
    let rows = row_keys(most(k.space.x.bounds(symbols), MOST_ROWS));
    let lengths = if reduction && !k.space.r.is_const() {
        buckets(most(k.space.r.bounds(symbols), MOST_ROW_LENGTH))
    } else {
        vec![(0, k.space.r_hint())]
    };
    // The plugin's config at each bucket, with its grid.
    let mut wanted: Vec<Vec<(Variant, Grid)>> = Vec::with_capacity(rows.len());
    for &(_, x) in &rows {
        let mut row = Vec::with_capacity(lengths.len());
        for &(_, r) in &lengths {
            let configs = kernel_configs_at(program, k, heuristics, x, r)?;
            let fits = |c: &&LaunchConfig| !persistent || i128::from(c.r_block) >= r_most;
            let config = configs.iter().find(fits).unwrap_or(fallback);
            let g = grid(x, config.x_block, heuristics)?;
            let dependent = g.x * g.y * g.z <= dependent_programs;
            row.push((variant_of(config, reduction, dependent), g));
        }
        wanted.push(row);
    }
    let work = |i: usize, j: usize| i128::from(rows[i].1) * i128::from(lengths[j].1.max(1));
    let configs: Vec<Vec<Variant>> = wanted
        .iter()
        .map(|row| row.iter().map(|(v, _)| *v).collect())
        .collect();
    let (variants, chosen) = keep_variants(&configs, work, ROW_STEPS as usize);
    // A bucket that takes another's variant launches that variant's grid.
    let mut table = Vec::with_capacity(rows.len());
    for ((&(_, x), picks), own) in rows.iter().zip(&chosen).zip(&wanted) {
        let row: Result<Vec<(usize, Grid)>, HeuristicsError> = picks
            .iter()
            .zip(own)
            .map(|(&n, &(v, g))| {
                if variants[n] == v {
                    Ok((n, g))
                } else {
                    Ok((n, grid(x, variants[n].x_block, heuristics)?))
                }
            })
            .collect();
        table.push(row?);
    }
    Ok(SizedLaunch {
        variants,
        names: Vec::new(),
        x_from: rows.first().map_or(0, |r| r.0),
        r_from: lengths.first().map_or(0, |r| r.0),
        table,
        forms: None,
    })
}

/// The variants kept of the configs `wanted` per bucket (at most [`MAX_VARIANTS`],
/// those of the buckets of the most `work` first), and the variant each bucket
/// takes: its own where kept, else that of the nearest bucket whose own was kept
/// (`row_steps` row buckets to a power of two, as one row-length bucket).
fn keep_variants(
    wanted: &[Vec<Variant>],
    work: impl Fn(usize, usize) -> i128,
    row_steps: usize,
) -> (Vec<Variant>, Vec<Vec<usize>>) {
    let mut cells: Vec<(usize, usize)> = (0..wanted.len())
        .flat_map(|i| (0..wanted[i].len()).map(move |j| (i, j)))
        .collect();
    cells.sort_by_key(|&(i, j)| (std::cmp::Reverse(work(i, j)), std::cmp::Reverse(i)));
    let mut variants: Vec<Variant> = Vec::new();
    let mut anchors: Vec<(usize, usize, usize)> = Vec::new();
    for &(i, j) in &cells {
        let v = wanted[i][j];
        if !variants.contains(&v) && variants.len() < MAX_VARIANTS {
            variants.push(v);
            anchors.push((i, j, variants.len() - 1));
        }
    }
    let chosen = wanted
        .iter()
        .enumerate()
        .map(|(i, row)| {
            row.iter()
                .enumerate()
                .map(|(j, v)| match variants.iter().position(|k| k == v) {
                    Some(n) => n,
                    None => {
                        // Anchors come in order of work: the first nearest has the most.
                        let distance = |&&(ai, aj, _): &&(usize, usize, usize)| {
                            ai.abs_diff(i) + aj.abs_diff(j) * row_steps
                        };
                        anchors.iter().min_by_key(distance).map_or(0, |a| a.2)
                    }
                })
                .collect()
        })
        .collect();
    (variants, chosen)
}

/// The variant of a plugin's config, its numbers at least 1.
fn variant_of(c: &LaunchConfig, reduction: bool, dependent: bool) -> Variant {
    Variant {
        x_block: c.x_block.max(1),
        r_block: reduction.then_some(c.r_block.max(1)),
        num_warps: c.num_warps.max(1),
        num_stages: c.num_stages.max(1),
        dependent,
    }
}

/// The plugin's grid for up to `rows` rows of `x_block` each (the kernels'
/// grid-stride loops take any grid).
fn grid(
    rows: i64,
    x_block: u32,
    heuristics: &dyn LaunchHeuristics,
) -> Result<Grid, HeuristicsError> {
    let programs = (rows.max(1) as u64).div_ceil(u64::from(x_block.max(1)));
    launch_grid(heuristics, Grid::new(programs, 1, 1))
}

#[cfg(test)]
mod tests {
    use super::{bucket, buckets, keep_variants, row_key, row_keys, Variant, MAX_VARIANTS};

    fn v(x_block: u32) -> Variant {
        Variant {
            x_block,
            r_block: None,
            num_warps: 4,
            num_stages: 1,
            dependent: false,
        }
    }

    #[test]
    fn the_buckets_of_most_work_keep_their_configs_and_the_rest_take_the_nearest() {
        // One row of buckets, the work doubling along it; the plugin's block grows
        // with the work up to 1024.
        let blocks = [4, 8, 16, 32, 64, 128, 256, 512, 1024, 1024];
        let wanted = vec![blocks.iter().map(|&b| v(b)).collect::<Vec<_>>()];
        let (variants, chosen) = keep_variants(&wanted, |_, j| 1 << j, 1);
        assert_eq!(variants.len(), MAX_VARIANTS);
        assert_eq!(variants, vec![v(1024), v(512), v(256), v(128)]);
        // The small buckets take the smallest kept block, the nearest.
        assert_eq!(chosen, vec![vec![3, 3, 3, 3, 3, 3, 2, 1, 0, 0]]);
        // Few distinct configs: each bucket keeps its own.
        let wanted = vec![vec![v(1), v(2)], vec![v(2), v(2)]];
        let (variants, chosen) = keep_variants(&wanted, |i, j| (i * 2 + j) as i128, 1);
        assert_eq!(variants, vec![v(2), v(1)]);
        assert_eq!(chosen, vec![vec![1, 0], vec![0, 0]]);
    }

    #[test]
    fn a_size_falls_in_the_bucket_of_the_power_of_two_that_covers_it() {
        let got: Vec<u32> = [0, 1, 2, 3, 4, 5, 1024, 1025].map(bucket).to_vec();
        assert_eq!(got, vec![0, 0, 1, 2, 2, 3, 10, 11]);
        assert_eq!(bucket(i128::from(i64::MAX)), 62);
        // Each bucket is asked at its top, within the range.
        assert_eq!(buckets((3, 20)), vec![(2, 4), (3, 8), (4, 16), (5, 20)]);
        assert_eq!(buckets((1, 1)), vec![(0, 1)]);
        assert_eq!(buckets((0, 2)), vec![(0, 1), (1, 2)]);
    }

    #[test]
    fn a_row_count_falls_in_an_eighth_of_its_power_of_two() {
        // Below 17 each count is its own bucket; above, eight to a power of two.
        let keys: Vec<u32> = [
            1, 2, 3, 4, 16, 17, 18, 19, 20, 32, 33, 1024, 1025, 1152, 1153,
        ]
        .map(row_key)
        .to_vec();
        assert_eq!(
            keys,
            vec![0, 9, 18, 19, 39, 40, 40, 41, 41, 47, 48, 87, 88, 88, 89]
        );
        // Each is asked at its top, within the range; a key no count has takes the
        // top before it.
        assert_eq!(
            row_keys((3, 20)),
            vec![
                (18, 3),
                (19, 4),
                (20, 4),
                (21, 4),
                (22, 4),
                (23, 4),
                (24, 4),
                (25, 4),
                (26, 4),
                (27, 4),
                (28, 5),
                (29, 6),
                (30, 7),
                (31, 8),
                (32, 9),
                (33, 10),
                (34, 11),
                (35, 12),
                (36, 13),
                (37, 14),
                (38, 15),
                (39, 16),
                (40, 18),
                (41, 20),
            ]
        );
        // Every count's key is the one whose top covers it, and the key before's does not.
        for n in 1..5000i128 {
            let key = row_key(n);
            let top = super::row_key_top(key).unwrap();
            assert!(n <= top, "{n}: {key} {top}");
            let below = (0..key).rev().find_map(super::row_key_top).unwrap_or(0);
            assert!(below < n, "{n}: {key} {below}");
        }
    }
}
