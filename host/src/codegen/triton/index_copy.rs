//! `index_copy`'s Triton kernel (a KV cache's update): one program per block of the
//! source's elements, each written at its index along the copied dim. The wrappers
//! write into the cache itself where the scheduler made the copy in place (state the
//! program keeps), else into the result after copying `self` there. Operands of up to
//! four dims are taken as they lie (sizes and strides are arguments).

use std::collections::HashMap;
use std::fmt::Write;

use kiln_plugin_api::{Grid, PointwiseQuery};

use super::attention::{Attention, AttentionKernel, TemplateLaunch};
use super::expr::pointer_type;
use super::Error;
use crate::codegen::heuristics::LaunchHeuristics;
use crate::codegen::namer::Namer;
use crate::graph::dtype::DType;
use crate::schedule::index::{hints, Size};
use crate::schedule::ir::{ExternOp, Program, Step, View};

/// Elements one program copies per step: few, so that even a decoding step's one row
/// of a cache spreads over several programs.
const BLOCK: i64 = 256;

/// One `index_copy` step's launch: pointers the result (the cache itself where in
/// place), the index and the source; scalars the source's 4 sizes and strides, the
/// result's 4 strides, the index's stride, the size of the copied dim and the source's
/// elements ([`PARAMS`]); constants `DIM` and `BLOCK`.
pub type IndexCopyLaunch = TemplateLaunch;

/// The kernel's integer parameters, in order.
const PARAMS: [&str; 15] = [
    "n0", "n1", "n2", "n3", "s0", "s1", "s2", "s3", "d0", "d1", "d2", "d3", "si", "size", "numel",
];

/// The kernels and launches of every `index_copy` step of `program` of at most four
/// dims, the kernels added to `templates` (a wrapper without a launch for a step of
/// more dims says so).
pub fn write(
    program: &Program,
    heuristics: &dyn LaunchHeuristics,
    namer: &mut Namer,
    templates: &mut Attention,
) -> Result<HashMap<usize, IndexCopyLaunch>, Error> {
    let mut launches = HashMap::new();
    let mut by_key: HashMap<(DType, i64, bool), String> = HashMap::new();
    for (i, step) in program.steps.iter().enumerate() {
        let Step::Extern(e) = step else { continue };
        let (ExternOp::IndexCopy { dim, in_place }, [x, index, source]) =
            (&e.op, e.args.as_slice())
        else {
            continue;
        };
        let rank = source.shape.len();
        if rank > 4 || index.shape.len() > 1 {
            continue;
        }
        let pad = 4 - rank;
        let four = |v: &[Size], fill: i64| -> Vec<i64> {
            std::iter::repeat_n(fill, pad)
                .chain(v.iter().map(Size::hint))
                .collect()
        };
        let out = program.buffer(e.out);
        let dst = if *in_place {
            x.clone()
        } else {
            View {
                buf: e.out,
                shape: out.shape.clone(),
                strides: out.strides.clone(),
                offset: Size::from(0),
            }
        };
        let dim4 = (*dim + pad) as i64;
        let numel: i64 = hints(&source.shape).iter().product();
        let mut scalars = four(&source.shape, 1);
        scalars.extend(four(&source.strides, 0));
        scalars.extend(four(&dst.strides, 0));
        scalars.push(index.strides.first().map_or(0, Size::hint));
        scalars.extend([dst.shape[*dim].hint(), numel]);
        let dtype = out.dtype;
        // 32-bit index arithmetic (64-bit division costs a GPU tens of instructions)
        // unless an offset into an operand reaches 2^31.
        let wide = [&dst, index, source]
            .iter()
            .any(|v| extent(v) >= i64::from(i32::MAX));
        let int = if wide { "i64" } else { "i32" };
        let kernel = templates.template(
            &mut by_key,
            (dtype, dim4, wide),
            namer,
            "kiln_index_copy",
            kernel_text,
            |name| {
                let mut signature = vec![
                    ("D".to_string(), pointer_type(dtype).to_string()),
                    ("I".to_string(), pointer_type(DType::Int64).to_string()),
                    ("S".to_string(), pointer_type(dtype).to_string()),
                ];
                signature.extend(PARAMS.iter().map(|p| (p.to_string(), int.to_string())));
                Ok(AttentionKernel {
                    name,
                    signature,
                    constants: vec![("DIM", dim4), ("BLOCK", BLOCK)],
                    aligned: Vec::new(),
                    num_warps: warps(heuristics, "index_copy", numel, dtype)?,
                    num_stages: 1,
                })
            },
        )?;
        let num_warps = templates
            .kernels
            .iter()
            .find(|k| k.name == kernel)
            .map_or(1, |k| k.num_warps);
        let grid = heuristics
            .adjust_grid(Grid {
                x: ((numel + BLOCK - 1) / BLOCK).max(1) as u64,
                y: 1,
                z: 1,
            })
            .map_err(|source| Error::Heuristics {
                kernel: "index_copy".into(),
                source,
            })?;
        launches.insert(
            i,
            IndexCopyLaunch {
                kernel,
                pointers: vec![dst, index.clone(), source.clone()],
                scalars,
                constants: vec![("DIM", dim4), ("BLOCK", BLOCK)],
                num_warps,
                grid,
                sizes: Vec::new(),
                dynamic: None,
            },
        );
    }
    Ok(launches)
}

/// One past the largest element offset `v` reaches.
pub(super) fn extent(v: &View) -> i64 {
    v.shape
        .iter()
        .zip(&v.strides)
        .map(|(d, s)| (d.hint() - 1).max(0).saturating_mul(s.hint().abs()))
        .fold(v.offset.hint().saturating_add(1), i64::saturating_add)
}

/// The plugin's warps for template `kernel` over `numel` elements (its first config for a
/// pointwise kernel of so many), at most four.
pub(super) fn warps(
    heuristics: &dyn LaunchHeuristics,
    kernel: &str,
    numel: i64,
    dtype: DType,
) -> Result<u32, Error> {
    let configs = heuristics
        .pointwise_configs(PointwiseQuery {
            numel: numel.max(1) as u64,
            element_bytes: dtype.size_bytes() as u32,
        })
        .map_err(|source| Error::Heuristics {
            kernel: kernel.into(),
            source,
        })?;
    Ok(configs.first().map_or(1, |c| c.num_warps).clamp(1, 4))
}

/// The kernel's text: each source element `(i0, i1, i2, i3)` goes to the result at the
/// same position but `index[i_DIM]` along `DIM`; an index outside `[0, size)` writes
/// nothing.
fn kernel_text(out: &mut String, name: &str) -> std::fmt::Result {
    writeln!(out, "\n\n@triton.jit")?;
    writeln!(
        out,
        "def {name}(D, I, S, {}, DIM: tl.constexpr, BLOCK: tl.constexpr):",
        PARAMS.join(", ")
    )?;
    out.push_str(
        r#"    kiln_dependent_wait()
    for start in range(tl.program_id(0) * BLOCK, numel, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        ok = offs < numel
        i3 = offs % n3
        r = offs // n3
        i2 = r % n2
        r = r // n2
        i1 = r % n1
        i0 = r // n1
        x = tl.load(S + i0 * s0 + i1 * s1 + i2 * s2 + i3 * s3, mask=ok)
        if DIM == 0:
            j = i0
            dd = d0
        elif DIM == 1:
            j = i1
            dd = d1
        elif DIM == 2:
            j = i2
            dd = d2
        else:
            j = i3
            dd = d3
        t = tl.load(I + j * si, mask=ok, other=-1)
        ok = ok & (t >= 0) & (t < size)
        tl.store(D + i0 * d0 + i1 * d1 + i2 * d2 + i3 * d3 + (t - j) * dd, x, mask=ok)
"#,
    );
    Ok(())
}
