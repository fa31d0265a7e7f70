//! A convolution as Kiln's own Triton kernel, for a wrapper without a library's
//! (the C++ wrapper of a Triton device; the Python wrapper calls ATen's): an implicit
//! matrix product whose rows are the output's (batch, y, x) positions and whose columns
//! are one group's output channels, summed over the group's input channels at each of
//! the kernel's taps. 1-D and 2-D convolutions whose sizes are static but for a
//! symbolic batch (read at each call), any strides, padding, dilation and groups,
//! operands as they lie (contiguous or channels-last: sizes and strides are arguments). `tl.dot` tiles where a group has 16 output channels or
//! more; elementwise products summed in float32 otherwise (a depthwise convolution).

use std::collections::HashMap;
use std::fmt::Write;

use kiln_plugin_api::Grid;

use super::attention::{Attention, AttentionKernel, Target, TemplateLaunch};
use super::expr::pointer_type;
use super::index_copy::extent;
use super::Error;
use crate::codegen::heuristics::LaunchHeuristics;
use crate::codegen::namer::Namer;
use crate::schedule::index::Size;
use crate::schedule::ir::{ExternCall, ExternOp, Program, Step, View};

/// The kernel's integer parameters, in order: the input's sizes, the output
/// channels and positions, the three operands' strides, the stride, padding and
/// dilation along each spatial dim, the channels of a group in and out, the groups.
const PARAMS: [&str; 30] = [
    "n", "c", "h", "w", "k", "oh", "ow", "sxn", "sxc", "sxh", "sxw", "swk", "swc", "swh", "swe",
    "syn", "syk", "syh", "syw", "sh", "sw", "ph", "pw", "dh", "dw", "cg", "kg", "groups", "rows",
    "tiles_m",
];

/// Where [`PARAMS`] holds the batch, the output positions and their tiles: the
/// scalars a launch over a symbolic batch reads at each call.
const BATCH: usize = 0;
const ROWS: usize = 28;
const TILES_M: usize = 29;

/// Output positions a program takes ([`Tiles::choose`]).
const BLOCK_M: i64 = 64;
/// The elements of the pointwise kernel whose warps (the plugin's, at most four) a
/// convolution's program takes: a large one's, whatever the convolution's size, as
/// its tiles are.
const WARPS_QUERY: i64 = 1 << 20;
/// The most elements of the elementwise form's `[BLOCK_M, BLOCK_K, BLOCK_N]` products.
const ELEMENTWISE_TILE: i64 = 4096;

/// One convolution's tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Tiles {
    block_m: i64,
    block_n: i64,
    block_k: i64,
    dot: bool,
}

impl Tiles {
    /// `tl.dot` tiles (each side at least 16) where a group has 16 output channels or
    /// more, its input channels padded to 16 where fewer (a network's first
    /// convolution over 3), their operands within `shared_memory` bytes of elements of
    /// `elem` bytes (fewer positions, then fewer channels a tile); else one tile of the
    /// group's output channels and up to 8 input channels a step, summed elementwise.
    fn choose(cg: i64, kg: i64, elem: i64, shared_memory: u64) -> Tiles {
        let p2 = |n: i64| (n.max(1) as u64).next_power_of_two() as i64;
        if kg >= 16 {
            let mut t = Tiles {
                block_m: BLOCK_M,
                block_n: p2(kg).clamp(16, 64),
                block_k: p2(cg).clamp(16, 32),
                dot: true,
            };
            let budget = i64::try_from(shared_memory).unwrap_or(i64::MAX);
            let bytes = |t: &Tiles| (t.block_m + t.block_n) * t.block_k * elem;
            while bytes(&t) > budget && (t.block_m > 16 || t.block_n > 16 || t.block_k > 16) {
                if t.block_m > 16 {
                    t.block_m /= 2;
                } else if t.block_n > 16 {
                    t.block_n /= 2;
                } else {
                    t.block_k /= 2;
                }
            }
            if bytes(&t) <= budget {
                return t;
            }
        }
        let (block_n, block_k) = (p2(kg).min(16), p2(cg).min(8));
        Tiles {
            block_m: (ELEMENTWISE_TILE / (block_n * block_k)).clamp(16, 128),
            block_n,
            block_k,
            dot: false,
        }
    }
}

/// The kernels and launches of every convolution step of `program` of one or two
/// spatial dims and static sizes but for the batch, the kernels added to `templates`
/// (a wrapper without a launch for a step says why).
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
        let Some(shape) = Shape::of(program, e) else {
            continue;
        };
        let dtype = program.buffer(e.out).dtype;
        let elem = dtype.size_bytes() as i64;
        let tiles = Tiles::choose(shape.cg, shape.kg, elem, target.shared_memory());
        let precision = if tiles.dot {
            target.precision(dtype)
        } else {
            None
        };
        // 32-bit index arithmetic unless an offset into an operand reaches 2^31 (at the
        // largest batch).
        let wide = shape.views.iter().any(|v| {
            extent(v).saturating_add(batch_reach(v, &shape, program)) >= i64::from(i32::MAX)
        });
        let int = if wide { "i64" } else { "i32" };
        let constants = vec![
            ("KH", shape.kh),
            ("KW", shape.kw),
            ("BLOCK_M", tiles.block_m),
            ("BLOCK_N", tiles.block_n),
            ("BLOCK_K", tiles.block_k),
            ("DOT", i64::from(tiles.dot)),
        ];
        let num_warps = super::index_copy::warps(heuristics, "convolution", WARPS_QUERY, dtype)?;
        let key = format!("{dtype:?}{constants:?}{wide}{precision:?}{num_warps}");
        let kernel = templates.template(
            &mut by_key,
            key,
            namer,
            "kiln_conv",
            |out, name| kernel_text(out, name, precision),
            |name| {
                let mut signature: Vec<(String, String)> = ["X", "W", "Y"]
                    .iter()
                    .map(|p| (p.to_string(), pointer_type(dtype).to_string()))
                    .collect();
                signature.extend(PARAMS.iter().map(|p| (p.to_string(), int.to_string())));
                Ok(AttentionKernel {
                    name,
                    signature,
                    constants: constants.clone(),
                    aligned: Vec::new(),
                    num_warps,
                    num_stages: 1,
                })
            },
        )?;
        let grid_of = |x: i64| {
            heuristics
                .adjust_grid(Grid {
                    x: x.max(1) as u64,
                    y: ((shape.kg + tiles.block_n - 1) / tiles.block_n).max(1) as u64,
                    z: shape.groups.max(1) as u64,
                })
                .map_err(|source| Error::Heuristics {
                    kernel: "convolution".into(),
                    source,
                })
        };
        let rows = shape.rows.hint();
        let tiles_m = (rows + tiles.block_m - 1) / tiles.block_m;
        let mut scalars = shape.scalars.clone();
        scalars.extend([rows, tiles_m]);
        let (sizes, dynamic) = match shape.symbolic(program, tiles.block_m)? {
            Some((sizes, programs)) => {
                // The plugin's grid for each power of two of programs up to the most.
                let most = programs.bounds(&program.symbols).1.max(1);
                let mut grids = Vec::new();
                let mut x = 1i64;
                loop {
                    grids.push(grid_of(x)?);
                    if i128::from(x) >= most {
                        break;
                    }
                    x = x.saturating_mul(2);
                }
                (sizes, Some((programs, grids)))
            }
            None => (Vec::new(), None),
        };
        launches.insert(
            i,
            TemplateLaunch {
                kernel,
                pointers: shape.views.to_vec(),
                scalars,
                constants,
                num_warps,
                grid: grid_of(tiles_m)?,
                sizes,
                dynamic,
            },
        );
    }
    Ok(launches)
}

/// Scalars a launch reads from the call's sizes, by index into [`PARAMS`].
type RuntimeScalars = Vec<(usize, Size)>;

/// A convolution step's operands as the kernel takes them: 1-D ones as 2-D of height 1.
struct Shape {
    /// The input, the weight and the output.
    views: [View; 3],
    /// [`PARAMS`] up to the groups.
    scalars: Vec<i64>,
    kh: i64,
    kw: i64,
    cg: i64,
    kg: i64,
    groups: i64,
    /// The batch, which alone may be symbolic.
    batch: Size,
    /// Output positions: batch x height x width.
    rows: Size,
}

impl Shape {
    /// `None` for a step that is no convolution of one or two spatial dims and
    /// static sizes but for the batch.
    fn of(program: &Program, e: &ExternCall) -> Option<Shape> {
        let ExternOp::Conv {
            stride,
            padding,
            dilation,
            groups,
        } = &e.op
        else {
            return None;
        };
        let [x, w] = e.args.as_slice() else {
            return None;
        };
        let out = program.buffer(e.out);
        let y = View {
            buf: e.out,
            shape: out.shape.clone(),
            strides: out.strides.clone(),
            offset: Size::from(0),
        };
        let spatial = x.shape.len().checked_sub(2)?;
        // Static but for the batch (dim 0 of the input and the output), at its hint.
        let batch = x.shape.first()?.clone();
        let fixed = |v: &View, batched: bool| -> Option<(Vec<i64>, Vec<i64>)> {
            let (first, rest) = v.shape.split_first()?;
            let first_ok = first.is_const() || (batched && *first == batch);
            if !first_ok || rest.iter().any(|d| !d.is_const()) {
                return None;
            }
            let sizes = v.shape.iter().map(Size::hint).collect();
            let strides = v
                .strides
                .iter()
                .map(Size::as_const)
                .collect::<Option<_>>()?;
            Some((sizes, strides))
        };
        let ((xs, xt), (ws, wt), (ys, yt)) = (fixed(x, true)?, fixed(w, false)?, fixed(&y, true)?);
        let lists = [stride, padding, dilation];
        if !(1..=2).contains(&spatial)
            || [&ws, &ys].iter().any(|s| s.len() != spatial + 2)
            || lists.iter().any(|l| l.len() != spatial)
            || *groups < 1
        {
            return None;
        }
        // As 2-D: a 1-D convolution's height is 1, its steps along it 0.
        let two = |v: &[i64], fill: i64| -> Vec<i64> {
            let mut v = v.to_vec();
            if spatial == 1 {
                v.insert(2, fill);
            }
            v
        };
        let pair = |l: &[i64], fill: i64| -> [i64; 2] {
            if spatial == 1 {
                [fill, l[0]]
            } else {
                [l[0], l[1]]
            }
        };
        let (xs, xt, ws, wt, ys, yt) = (
            two(&xs, 1),
            two(&xt, 0),
            two(&ws, 1),
            two(&wt, 0),
            two(&ys, 1),
            two(&yt, 0),
        );
        let [sh, sw] = pair(stride, 1);
        let [ph, pw] = pair(padding, 0);
        let [dh, dw] = pair(dilation, 1);
        let (cg, kg) = (ws[1], ws[0] / groups);
        let mut scalars = vec![xs[0], xs[1], xs[2], xs[3], ys[1], ys[2], ys[3]];
        scalars.extend(&xt);
        scalars.extend(&wt);
        scalars.extend(&yt);
        scalars.extend([sh, sw, ph, pw, dh, dw, cg, kg, *groups]);
        Some(Shape {
            views: [x.clone(), w.clone(), y],
            scalars,
            kh: ws[2],
            kw: ws[3],
            cg,
            kg,
            groups: *groups,
            rows: batch.scale(ys[2] * ys[3]).ok()?,
            batch,
        })
    }

    /// Over a symbolic batch: the scalars read at each call (the batch, the output
    /// positions and their tiles, by index into [`PARAMS`]) and the programs the tiles
    /// need; `None` over a static one.
    fn symbolic(
        &self,
        program: &Program,
        block_m: i64,
    ) -> Result<Option<(RuntimeScalars, Size)>, Error> {
        if self.batch.is_const() {
            return Ok(None);
        }
        let overflow = |e: crate::graph::sym::SymError| Error::Unsupported {
            kernel: "convolution".into(),
            what: format!("its output positions over a symbolic batch: {e}"),
        };
        let tiles = self
            .rows
            .add(&Size::from(block_m - 1))
            .and_then(|n| n.floor_div(&Size::from(block_m), &program.symbols))
            .map_err(overflow)?;
        let sizes = vec![
            (BATCH, self.batch.clone()),
            (ROWS, self.rows.clone()),
            (TILES_M, tiles.clone()),
        ];
        Ok(Some((sizes, tiles)))
    }
}

/// How much further than at its hint operand `v` reaches at the batch's largest value
/// (0 for the weight, or over a static batch).
fn batch_reach(v: &View, shape: &Shape, program: &Program) -> i64 {
    match (v.shape.first(), v.strides.first()) {
        (Some(first), Some(stride)) if *first == shape.batch && !first.is_const() => {
            let most = i64::try_from(first.bounds(&program.symbols).1).unwrap_or(i64::MAX);
            most.saturating_sub(first.hint())
                .saturating_mul(stride.hint().abs())
        }
        _ => 0,
    }
}

/// The kernel's text; `precision` is `tl.dot`'s `input_precision` (float32).
fn kernel_text(out: &mut String, name: &str, precision: Option<&str>) -> std::fmt::Result {
    let precision = precision.map_or(String::new(), |p| format!(", input_precision=\"{p}\""));
    writeln!(out, "\n\n@triton.jit")?;
    writeln!(
        out,
        "def {name}(X, W, Y, {},\n{pad}KH: tl.constexpr, KW: tl.constexpr, BLOCK_M: tl.constexpr, \
         BLOCK_N: tl.constexpr,\n{pad}BLOCK_K: tl.constexpr, DOT: tl.constexpr):",
        PARAMS.join(", "),
        pad = " ".repeat(name.len() + 5)
    )?;
    let body = r#"    # A convolution as an implicit matrix product: rows the output's (batch, y, x)
    # positions, columns a group's output channels, summed over the group's input
    # channels at each of the KH x KW taps (positions outside the input read 0).
    kiln_dependent_wait()
    tiles_n = tl.cdiv(kg, BLOCK_N)
    for g in range(tl.program_id(2), groups, tl.num_programs(2)):
        for tn in range(tl.program_id(1), tiles_n, tl.num_programs(1)):
            offs_n = tn * BLOCK_N + tl.arange(0, BLOCK_N)
            n_ok = offs_n < kg
            ko = g * kg + offs_n
            for tm in range(tl.program_id(0), tiles_m, tl.num_programs(0)):
                offs_m = tm * BLOCK_M + tl.arange(0, BLOCK_M)
                m_ok = offs_m < rows
                ox = offs_m % ow
                t = offs_m // ow
                oy = t % oh
                b = t // oh
                acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
                for ky in tl.static_range(KH):
                    iy = oy * sh - ph + ky * dh
                    for kx in tl.static_range(KW):
                        ix = ox * sw - pw + kx * dw
                        x_ok = m_ok & (iy >= 0) & (iy < h) & (ix >= 0) & (ix < w)
                        x_at = X + b * sxn + iy * sxh + ix * sxw + g * cg * sxc
                        w_at = W + ko * swk + ky * swh + kx * swe
                        for c0 in range(0, cg, BLOCK_K):
                            cc = c0 + tl.arange(0, BLOCK_K)
                            c_ok = cc < cg
                            xv = tl.load(x_at[:, None] + cc[None, :] * sxc,
                                         mask=x_ok[:, None] & c_ok[None, :], other=0.0)
                            wv = tl.load(w_at[None, :] + cc[:, None] * swc,
                                         mask=c_ok[:, None] & n_ok[None, :], other=0.0)
                            if DOT:
                                acc += tl.dot(xv, wv{PRECISION})
                            else:
                                acc += tl.sum(xv.to(tl.float32)[:, :, None] * wv.to(tl.float32)[None, :, :], 1)
                y_at = Y + b * syn + oy * syh + ox * syw
                tl.store(y_at[:, None] + ko[None, :] * syk, acc.to(Y.dtype.element_ty),
                         mask=m_ok[:, None] & n_ok[None, :])
"#;
    out.push_str(&body.replace("{PRECISION}", &precision));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_take_dot_products_where_a_group_has_sixteen_output_channels() {
        // ResNet's first convolution: 3 channels in, padded to a step of 16.
        let big = 96 * 1024;
        let t = Tiles::choose(3, 64, 4, big);
        assert_eq!((t.block_n, t.block_k, t.dot), (64, 16, true));
        let t = Tiles::choose(256, 512, 4, big);
        assert_eq!((t.block_m, t.block_n, t.block_k, t.dot), (64, 64, 32, true));
        // Depthwise: one channel a group, summed elementwise over long rows of positions.
        let t = Tiles::choose(1, 1, 4, big);
        assert_eq!((t.block_m, t.block_n, t.block_k, t.dot), (128, 1, 1, false));
        // Eight channels a group: a product of at most 4096 elements.
        let t = Tiles::choose(8, 8, 4, big);
        assert_eq!((t.block_m, t.block_n, t.block_k, t.dot), (64, 8, 8, false));
        assert!(t.block_m * t.block_n * t.block_k <= ELEMENTWISE_TILE);
        // A device of little shared memory: smaller dot tiles, then the elementwise form.
        let t = Tiles::choose(256, 512, 4, 8 * 1024);
        assert_eq!((t.block_m, t.block_n, t.block_k, t.dot), (16, 32, 32, true));
        let t = Tiles::choose(256, 512, 4, 1024);
        assert!(!t.dot && t.block_n == 16, "{t:?}");
        assert!(t.block_m * t.block_n * t.block_k <= ELEMENTWISE_TILE);
    }

    #[test]
    fn the_runtime_scalars_name_their_parameters() {
        assert_eq!(
            (PARAMS[BATCH], PARAMS[ROWS], PARAMS[TILES_M]),
            ("n", "rows", "tiles_m")
        );
    }
}
