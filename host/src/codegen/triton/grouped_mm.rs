//! `_grouped_mm`'s Triton kernel (a mixture of experts' product, its rows sorted by
//! expert): `tl.dot` tiles of rows by columns, each tile's rows multiplied by the matrix
//! of every group they span (usually one; a tile of a decoding batch's few rows may span
//! several), the rows of other groups masked out of each product. Rows past the last
//! offset are in no group and stay zero. Both Triton wrappers launch it; operands are
//! taken as they lie (sizes and strides are arguments).

use std::collections::HashMap;
use std::fmt::Write;

use kiln_plugin_api::Grid;

use super::attention::{Attention, AttentionKernel, Target, TemplateLaunch};
use super::expr::pointer_type;
use super::index_copy::extent;
use super::Error;
use crate::codegen::heuristics::LaunchHeuristics;
use crate::codegen::namer::Namer;
use crate::graph::dtype::DType;
use crate::schedule::index::Size;
use crate::schedule::ir::{ExternOp, Program, Step, View};

/// The kernel's integer parameters, in order: the sizes, then the strides of `a`, `b`,
/// the offsets and the result. They are `constexpr`s (a kernel is of static sizes):
/// Triton then knows which strides are 1 and vectorises those loads.
const PARAMS: [&str; 11] = [
    "m", "n", "k", "sam", "sak", "sbg", "sbk", "sbn", "so", "scm", "scn",
];

/// The elements of the pointwise kernel whose warps (the plugin's, at most four) a
/// program takes: a large one's, as its tiles are.
const WARPS_QUERY: i64 = 1 << 20;

/// One step's tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Tiles {
    block_m: i64,
    block_n: i64,
    block_k: i64,
    stages: u32,
}

impl Tiles {
    /// `tl.dot` tiles (each side at least 16) for `m` rows, `n` columns and `k`
    /// contracted of `elem` bytes: 128 x 256 where the rows fill such tiles (of 16-bit
    /// operands, as Triton's own matrix product takes them on a Hopper; 64 x 64 of
    /// float32), else the rows rounded up to a power of two (at least 16) by 64 columns,
    /// and 64 of K (32 of float32), in three stages; the columns, then K, then stages,
    /// then the rows halved until they fit in `shared_memory` bytes.
    fn choose(m: i64, n: i64, k: i64, elem: i64, shared_memory: u64) -> Tiles {
        let p2 = |x: i64| (x.max(1) as u64).next_power_of_two() as i64;
        let (big_m, big_n) = if elem <= 2 { (128, 256) } else { (64, 64) };
        let mut t = Tiles {
            block_m: p2(m).clamp(16, big_m),
            block_n: p2(n).clamp(16, if m < big_m { 64 } else { big_n }),
            block_k: p2(k).clamp(16, if elem <= 2 { 64 } else { 32 }),
            stages: 3,
        };
        let budget = i64::try_from(shared_memory).unwrap_or(i64::MAX);
        let bytes = |t: &Tiles| (t.block_m + t.block_n) * t.block_k * elem * i64::from(t.stages);
        while bytes(&t) > budget {
            if t.block_n > 64 {
                t.block_n /= 2;
            } else if t.block_k > 16 {
                t.block_k /= 2;
            } else if t.stages > 1 {
                t.stages -= 1;
            } else if t.block_m > 16 {
                t.block_m /= 2;
            } else if t.block_n > 16 {
                t.block_n /= 2;
            } else {
                break;
            }
        }
        t
    }

    /// The programs along the grid's third axis, each taking every so-many of the
    /// groups a tile of rows spans: the groups a tile spans where `m` rows are spread
    /// evenly over `groups`, and one more (a decoding step's few rows span as many
    /// groups as they chose, each then a program's); a tile spanning more loops.
    fn spans(self, m: i64, groups: i64) -> i64 {
        let tiles_m = (m + self.block_m - 1) / self.block_m;
        (2 + (groups + tiles_m - 1) / tiles_m.max(1))
            .min(groups + 1)
            .max(1)
    }
}

/// The kernels and launches of every `_grouped_mm` step of `program` (static sizes),
/// the kernels added to `templates`.
pub fn write(
    program: &Program,
    heuristics: &dyn LaunchHeuristics,
    namer: &mut Namer,
    templates: &mut Attention,
) -> Result<HashMap<usize, TemplateLaunch>, Error> {
    let target = Target::of(heuristics);
    let mut launches = HashMap::new();
    let mut by_key: HashMap<String, String> = HashMap::new();
    for (i, step) in program.steps.iter().enumerate() {
        let Step::Extern(e) = step else { continue };
        let (ExternOp::GroupedMm, [a, b, offs]) = (&e.op, e.args.as_slice()) else {
            continue;
        };
        let out = program.buffer(e.out);
        let fixed = |v: &[Size]| v.iter().map(Size::as_const).collect::<Option<Vec<i64>>>();
        let (Some(ash), Some(bsh), Some(osh)) =
            (fixed(&a.shape), fixed(&b.shape), fixed(&out.shape))
        else {
            continue;
        };
        let (m, k, groups, n) = (ash[0], ash[1], bsh[0], bsh[2]);
        let c = View {
            buf: e.out,
            shape: out.shape.clone(),
            strides: out.strides.clone(),
            offset: Size::from(0),
        };
        let dtype = out.dtype;
        let tiles = Tiles::choose(m, n, k, dtype.size_bytes() as i64, target.shared_memory());
        let precision = target.precision(dtype);
        // 32-bit index arithmetic unless an offset into an operand reaches 2^31 (a group's
        // matrix is found in 64 bits whatever the width, so of `b` only the reach within
        // one group's matrix counts).
        let stride = |v: &View, d: usize| v.strides[d].hint();
        let in_group = (k - 1)
            .max(0)
            .saturating_mul(stride(b, 1).abs())
            .saturating_add((n - 1).max(0).saturating_mul(stride(b, 2).abs()));
        let wide = [a, &c].iter().any(|v| extent(v) >= i64::from(i32::MAX))
            || in_group >= i64::from(i32::MAX);
        let scalars = [
            m,
            n,
            k,
            stride(a, 0),
            stride(a, 1),
            stride(b, 0),
            stride(b, 1),
            stride(b, 2),
            stride(offs, 0),
            stride(&c, 0),
            stride(&c, 1),
        ];
        let mut constants: Vec<(&'static str, i64)> = PARAMS.iter().copied().zip(scalars).collect();
        constants.extend([
            ("WIDE", i64::from(wide)),
            ("EVEN_K", i64::from(k % tiles.block_k == 0)),
            ("G", groups),
            ("GP", (groups.max(1) as u64).next_power_of_two() as i64),
            ("BLOCK_M", tiles.block_m),
            ("BLOCK_N", tiles.block_n),
            ("BLOCK_K", tiles.block_k),
        ]);
        // The plugin's warps (at most four), twice that for the largest tiles.
        let warps = super::index_copy::warps(heuristics, "_grouped_mm", WARPS_QUERY, dtype)?;
        let num_warps = if warps >= 4 && tiles.block_m * tiles.block_n >= 128 * 256 {
            8
        } else {
            warps
        };
        let offsets: Vec<String> = [a, b, offs]
            .iter()
            .map(|v| format!("{:?}", v.offset))
            .collect();
        let key = format!("{dtype:?}{constants:?}{offsets:?}{precision:?}{num_warps}{tiles:?}");
        let kernel = templates.template(
            &mut by_key,
            key,
            namer,
            "kiln_grouped_mm",
            |out, name| kernel_text(out, name, precision),
            |name| {
                let signature: Vec<(String, String)> = vec![
                    ("A".into(), pointer_type(dtype).into()),
                    ("B".into(), pointer_type(dtype).into()),
                    ("O".into(), pointer_type(DType::Int32).into()),
                    ("C".into(), pointer_type(dtype).into()),
                ];
                // Buffers start 16-byte aligned; a view of one is where its offset is.
                let aligned = ["A", "B", "O", "C"]
                    .iter()
                    .zip([a, b, offs, &c])
                    .filter(|(_, v)| {
                        let bytes = program.buffer(v.buf).dtype.size_bytes() as i64;
                        v.offset.scale(bytes).is_ok_and(|o| o.is_multiple_of(16))
                    })
                    .map(|(p, _)| p.to_string())
                    .collect();
                Ok(AttentionKernel {
                    name,
                    signature,
                    constants: constants.clone(),
                    aligned,
                    num_warps,
                    num_stages: tiles.stages,
                })
            },
        )?;
        debug_assert_eq!(osh, [m, n]);
        let grid = heuristics
            .adjust_grid(Grid {
                x: ((m + tiles.block_m - 1) / tiles.block_m).max(1) as u64,
                y: ((n + tiles.block_n - 1) / tiles.block_n).max(1) as u64,
                z: tiles.spans(m, groups) as u64,
            })
            .map_err(|source| Error::Heuristics {
                kernel: "_grouped_mm".into(),
                source,
            })?;
        launches.insert(
            i,
            TemplateLaunch {
                kernel,
                pointers: vec![a.clone(), b.clone(), offs.clone(), c],
                scalars: Vec::new(),
                constants,
                num_warps,
                grid,
                sizes: Vec::new(),
                dynamic: None,
            },
        );
    }
    Ok(launches)
}

/// The kernel's text; `precision` is `tl.dot`'s `input_precision` (float32).
fn kernel_text(out: &mut String, name: &str, precision: Option<&str>) -> std::fmt::Result {
    let precision = precision.map_or(String::new(), |p| format!(", input_precision=\"{p}\""));
    writeln!(out, "\n\n@triton.jit")?;
    writeln!(
        out,
        "def {name}(A, B, O, C, {},\n{pad}WIDE: tl.constexpr, EVEN_K: tl.constexpr, G: tl.constexpr, GP: tl.constexpr, \
         BLOCK_M: tl.constexpr,\n{pad}BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):",
        PARAMS.map(|p| format!("{p}: tl.constexpr")).join(", "),
        pad = " ".repeat(name.len() + 5)
    )?;
    let body = r#"    # Row r of A times B[g], g the number of offsets at or below r. The rows are
    # sorted by group, so a tile of rows spans the groups from its first row's to its
    # last's; the programs along the grid's third axis take every so-many of them, each
    # storing its group's rows of the tile. Rows past the last offset (group G) are
    # stored as zeros; an empty group is skipped.
    kiln_dependent_wait()
    gi = tl.arange(0, GP)
    ends = tl.load(O + gi * so, mask=gi < G, other=2147483647)
    tiles_m = tl.cdiv(m, BLOCK_M)
    tiles_n = tl.cdiv(n, BLOCK_N)
    for tn in range(tl.program_id(1), tiles_n, tl.num_programs(1)):
        offs_n = tn * BLOCK_N + tl.arange(0, BLOCK_N)
        if WIDE:
            offs_n = offs_n.to(tl.int64)
        n_ok = offs_n < n
        for tm in range(tl.program_id(0), tiles_m, tl.num_programs(0)):
            offs_m = tm * BLOCK_M + tl.arange(0, BLOCK_M)
            if WIDE:
                offs_m = offs_m.to(tl.int64)
            m_ok = offs_m < m
            first = tm * BLOCK_M
            last = tl.minimum(first + BLOCK_M, m) - 1
            g_lo = tl.sum((ends <= first).to(tl.int32), 0)
            g_hi = tl.sum((ends <= last).to(tl.int32), 0)
            for g in range(g_lo + tl.program_id(2), g_hi + 1, tl.num_programs(2)):
                start = tl.sum(tl.where(gi == g - 1, ends, 0), 0)
                end = tl.where(g < G, tl.sum(tl.where(gi == g, ends, 0), 0), m)
                rows = m_ok & (offs_m >= start) & (offs_m < end)
                # The tail (g == G) and an empty group read nothing: no steps of K.
                k_end = tl.where((g < G) & (end > start), k, 0)
                b_at = B + g.to(tl.int64) * sbg
                acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
                for k0 in range(0, k_end, BLOCK_K):
                    kk = k0 + tl.arange(0, BLOCK_K)
                    if WIDE:
                        kk = kk.to(tl.int64)
                    a_at = A + offs_m[:, None] * sam + kk[None, :] * sak
                    b_in = b_at + kk[:, None] * sbk + offs_n[None, :] * sbn
                    if EVEN_K:
                        av = tl.load(a_at, mask=rows[:, None], other=0.0)
                        bv = tl.load(b_in, mask=n_ok[None, :], other=0.0)
                    else:
                        k_ok = kk < k
                        av = tl.load(a_at, mask=rows[:, None] & k_ok[None, :], other=0.0)
                        bv = tl.load(b_in, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
                    acc += tl.dot(av, bv{PRECISION})
                tl.store(C + offs_m[:, None] * scm + offs_n[None, :] * scn, acc.to(C.dtype.element_ty),
                         mask=rows[:, None] & n_ok[None, :])
"#;
    out.push_str(&body.replace("{PRECISION}", &precision));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_fit_the_rows_and_the_shared_memory() {
        let big = 224 * 1024;
        // A prefill's many rows of 16-bit operands: 128 x 256 tiles, three stages.
        let t = Tiles::choose(4096, 14336, 4096, 2, big);
        assert_eq!(
            (t.block_m, t.block_n, t.block_k, t.stages),
            (128, 256, 64, 3)
        );
        // Float32: 64 x 64 by 32 of K.
        let t = Tiles::choose(4096, 14336, 4096, 4, big);
        assert_eq!((t.block_m, t.block_n, t.block_k, t.stages), (64, 64, 32, 3));
        // A few rows: one tile of 16; float32 takes 32 of K.
        let t = Tiles::choose(16, 768, 2048, 4, big);
        assert_eq!((t.block_m, t.block_n, t.block_k, t.stages), (16, 64, 32, 3));
        // Little shared memory: columns, then K, then stages, then rows give way.
        let t = Tiles::choose(4096, 4096, 4096, 2, 8 * 1024);
        assert!(
            (t.block_m + t.block_n) * t.block_k * 2 * i64::from(t.stages) <= 8 * 1024,
            "{t:?}"
        );
        assert!(
            t.block_m >= 16 && t.block_n >= 16 && t.block_k >= 16,
            "{t:?}"
        );
    }

    #[test]
    fn a_few_rows_take_a_program_per_group_and_many_rows_few() {
        let big = 224 * 1024;
        // A decoding batch: one tile of rows over 8 experts, each its own program (and
        // the rows past the last offset one more).
        let t = Tiles::choose(16, 28672, 4096, 2, big);
        assert_eq!(t.spans(16, 8), 9);
        // A prefill: 64 tiles of rows over 64 experts span about two groups each.
        let t = Tiles::choose(8192, 2048, 2048, 2, big);
        assert_eq!(t.spans(8192, 64), 3);
        assert_eq!(t.spans(8192, 1), 2);
    }
}
