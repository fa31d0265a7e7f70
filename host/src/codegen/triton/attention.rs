//! Flash attention: the fused Triton kernel for an `ExternOp::Attention` step
//! (`scaled_dot_product_attention` left whole by the passes for a Triton
//! target), as Inductor's SDPA template computes it: each program takes
//! `BLOCK_M` query rows of one (batch, head), walks the keys and values in
//! blocks of `BLOCK_N` with an online softmax (running max and sum, base 2),
//! and never writes the `[L, S]` scores to memory. Causal attention stops at
//! the diagonal block; a bool mask keeps where true, a floating mask is added
//! to the scores; grouped-query heads read the key/value head `h / GROUP`.
//!
//! Operands are taken as they lie in memory: every stride is an argument, so a
//! transposed head layout needs no copy, and one kernel serves every layer of a
//! model (its shapes and strides are arguments too; only the dtypes, head
//! sizes and block sizes are compile-time constants). Programs grid-stride over
//! (row block, batch × head), so any grid the plugin's `adjust_grid` launches
//! is correct. float32 keeps float32's accuracy (`allow_tf32` off, as
//! PyTorch's default): where the plugin says its target's `tl.dot` may use
//! TF32 (`tf32_dot`), each product is three TF32 products (`tf32x3`: the high
//! and low halves of both operands, the low x low term dropped, about 2^-22
//! relative), elsewhere exact FMA products (`ieee`); float16/bfloat16 multiply
//! in their dtype. All accumulate in float32.
//!
//! The tiles fit the shared memory the plugin gives one program
//! (`shared_memory_per_block`): three pipelined stages where they fit, then
//! two, then fewer keys per step, one stage, fewer query rows. This module
//! holds no device's number; where a plugin says nothing, the host's stated
//! defaults (`plugins::defaults`) stand in.

use crate::graph::sym::SymId;
use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use kiln_plugin_api::{Grid, ReductionQuery};

use super::expr::pointer_type;
use super::Error;
use crate::codegen::heuristics::LaunchHeuristics;
use crate::codegen::namer::Namer;
use crate::graph::dtype::DType;
use crate::plugins::defaults;
use crate::schedule::index::{hints, Size};
use crate::schedule::ir::{BufferId, ExternCall, ExternOp, Program, Step, View};

/// One generated attention kernel (shared by every launch with the same
/// constants).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttentionKernel {
    /// The function's name.
    pub name: String,
    /// Its runtime parameters with their Triton types, in order.
    pub signature: Vec<(String, String)>,
    /// Its `constexpr` parameters with their values, as passed at launch.
    pub constants: Vec<(&'static str, i64)>,
    /// The parameters its launches pass divisible by 16 (pointers by their
    /// address), which it is compiled to assume.
    pub aligned: Vec<String>,
    /// Warps per program.
    pub num_warps: u32,
    /// Pipelining stages.
    pub num_stages: u32,
}

/// One attention step's launch.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionLaunch {
    /// The kernel launched.
    pub kernel: String,
    /// Query, key, value, mask (the query again when there is none) and output
    /// (a `[B, H, L, Ev]` or `[N, L, Ev]` view of its buffer), as the pointer
    /// arguments.
    pub pointers: Vec<View>,
    /// The runtime scalars after the pointers (`sm_scale`, strides, sizes), as
    /// Python literals.
    pub scalars: Vec<String>,
    /// The integer scalars (`scalars[1..]`: the strides, then the sizes), as
    /// expressions over the size symbols, for a wrapper in another language.
    pub ints: Vec<Size>,
    /// Per scalar: whether it is a multiple of 16 at every value of the size
    /// symbols (a stride of `768*s1`, say), which the kernel may assume.
    pub scalars_aligned: Vec<bool>,
    /// The `constexpr` values, by name.
    pub constants: Vec<(&'static str, i64)>,
    /// Warps per program.
    pub num_warps: u32,
    /// Pipelining stages.
    pub num_stages: u32,
    /// The grid launched (after `adjust_grid`).
    pub grid: Grid,
    /// For a step of dynamic shapes: the programs its tiles need, an expression over
    /// the size symbols, and the plugin's grid per bucket of that count (as a dynamic
    /// kernel's, `kernel::grid_buckets`); `None` for one size (`grid`).
    pub dynamic: Option<(Size, Vec<Grid>)>,
    /// For a step of dynamic shapes: the launches of Kiln's kernel with the other
    /// tiles the plugin's heuristics give at sizes across the range (each with its
    /// own kernel and `dynamic`), which the runtime measures per bucket of sizes
    /// beside this one; empty otherwise.
    pub variants: Vec<AttentionLaunch>,
    /// For a step of dynamic shapes: the batch and query rows (`Z`, `L`) the tiles
    /// were planned at, each with the launch the plugin's heuristics give there (0
    /// this one, `n` `variants[n - 1]`): a wrapper that does not measure them takes
    /// the launch of the point nearest a call's sizes. Empty otherwise.
    pub planned: Vec<([i64; 2], usize)>,
    /// For a launch of dynamic shapes: the size symbols that, each a multiple of 16,
    /// make more of its strides and lengths multiples of 16 (a divisibility guard),
    /// and this launch compiled assuming them so, which a wrapper launches where a
    /// call's sizes pass the guard ([`divisible_twin`]).
    pub divisible: Option<(Vec<SymId>, Box<AttentionLaunch>)>,
    /// Where the keys are split across programs (flash-decoding): the launch that
    /// combines their partial results into the output, after this one (pointers: the
    /// scratch buffer and the output; scalars: [`COMBINE_PARAMS`]).
    pub combine: Option<TemplateLaunch>,
}

/// A launch of a template kernel whose scalars are all integers (split attention's
/// combining kernel, `index_copy`'s).
#[derive(Clone, Debug, PartialEq)]
pub struct TemplateLaunch {
    /// The kernel launched.
    pub kernel: String,
    /// The pointer arguments, as views.
    pub pointers: Vec<View>,
    /// The integer arguments after them.
    pub scalars: Vec<i64>,
    /// The `constexpr` values, by name.
    pub constants: Vec<(&'static str, i64)>,
    /// Warps per program.
    pub num_warps: u32,
    /// The grid launched (after `adjust_grid`).
    pub grid: Grid,
    /// Scalars read from the call's sizes (a symbolic batch), by index into
    /// `scalars` (whose entries there are the sizes' hints).
    pub sizes: Vec<(usize, Size)>,
    /// Over symbolic sizes: the programs the launch needs and the plugin's grid for
    /// each power of two of them (`grid` is then the hints').
    pub dynamic: Option<(Size, Vec<Grid>)>,
}

/// Every attention kernel of a program, and each attention step's launch.
#[derive(Clone, Debug, Default)]
pub struct Attention {
    /// The kernels' `@triton.jit` text.
    pub source: String,
    /// The distinct kernels, in order of first use.
    pub kernels: Vec<AttentionKernel>,
    /// The launch of each attention step, by step index.
    pub launches: HashMap<usize, AttentionLaunch>,
}

impl Attention {
    /// The template kernel `key` stands for: the one an earlier step of the same key
    /// made, else a new one, named after `prefix`, its text written by `text` and its
    /// signature and launch given by `kernel` (of its name). Kiln's kernels for extern
    /// steps (`index_copy`, convolution, `_grouped_mm`) share one per key this way.
    pub(super) fn template<K: Eq + std::hash::Hash>(
        &mut self,
        by_key: &mut HashMap<K, String>,
        key: K,
        namer: &mut Namer,
        prefix: &str,
        text: impl FnOnce(&mut String, &str) -> std::fmt::Result,
        kernel: impl FnOnce(String) -> Result<AttentionKernel, Error>,
    ) -> Result<String, Error> {
        if let Some(name) = by_key.get(&key) {
            return Ok(name.clone());
        }
        let name = namer.name(&format!("{prefix}_{}", self.kernels.len()));
        text(&mut self.source, &name)?;
        self.kernels.push(kernel(name.clone())?);
        by_key.insert(key, name.clone());
        Ok(name)
    }
}

/// The 4-D `[B, H, rows, cols]` strides of a view of rank 3 (`[N, rows, cols]`,
/// one head) or 4, with stride 0 wherever the view's size is 1 and the query's
/// is not (a broadcast).
fn strides4(v: &View, want: &[Size]) -> [Size; 4] {
    let mut shape = v.shape.clone();
    let mut strides = v.strides.clone();
    // Right-align to the wanted rank (a mask may have fewer dims).
    while shape.len() < want.len() {
        shape.insert(0, Size::from(1));
        strides.insert(0, Size::from(0));
    }
    let mut s: Vec<Size> = shape
        .iter()
        .zip(&strides)
        .zip(want)
        .map(|((have, stride), w)| {
            if *have == 1 && *w != 1 {
                Size::from(0)
            } else {
                stride.clone()
            }
        })
        .collect();
    if s.len() == 3 {
        s.insert(1, Size::from(0));
    }
    [s[0].clone(), s[1].clone(), s[2].clone(), s[3].clone()]
}

fn next_pow2_at_least_16(n: i64) -> i64 {
    (n.max(1) as u64).next_power_of_two().max(16) as i64
}

/// Generates the kernels and launches of every attention step of `program`.
pub fn write(
    program: &Program,
    heuristics: &dyn LaunchHeuristics,
    namer: &mut Namer,
) -> Result<Attention, Error> {
    let mut out = Attention::default();
    let target = Target::of(heuristics);
    // Kernel text by its key (dtypes and constants), so that equal steps share one.
    let mut by_key: HashMap<String, usize> = HashMap::new();
    for (i, step) in program.steps.iter().enumerate() {
        let Step::Extern(e) = step else { continue };
        let ExternOp::Attention {
            causal,
            scale_bits,
            mask,
            heads_inner,
            splits,
        } = &e.op
        else {
            continue;
        };
        // A step of dynamic shapes with split keys (planned for one size), or one the
        // kernel does not index (symbolic heads), takes the library's attention (the
        // Python wrapper's `dynamic_attention`).
        let symbolic = |v: &crate::schedule::ir::View| v.shape.iter().any(|s| !s.is_const());
        let dynamic = e.args.iter().any(symbolic);
        if dynamic && (*splits > 1 || Operands::of(program, e, *mask, *heads_inner).is_err()) {
            continue;
        }
        let attrs = (*causal, f64::from_bits(*scale_bits), *mask, *heads_inner);
        let splits = (*splits, early_mask(program, i).is_some());
        let mut launch = plan(program, e, attrs, splits, heuristics, target, None)?;
        // Dynamic shapes: the tiles at sizes across the range, each launch distinct.
        let mut variants: Vec<AttentionLaunch> = Vec::new();
        let mut planned = Vec::new();
        if launch.dynamic.is_some() {
            let ops = Operands::of(program, e, *mask, *heads_inner)?;
            planned.push(([ops.z, ops.l], 0));
            for at in variant_sizes(program, e, *mask, *heads_inner)? {
                let v = plan(program, e, attrs, splits, heuristics, target, Some(at))?;
                let same = |l: &AttentionLaunch| {
                    (&l.constants, l.num_warps, l.num_stages)
                        == (&v.constants, v.num_warps, v.num_stages)
                };
                let index = if same(&launch) {
                    0
                } else if let Some(n) = variants.iter().position(same) {
                    n + 1
                } else {
                    variants.push(v);
                    variants.len()
                };
                planned.push(([at[0], at[2]], index));
            }
        }
        let mut site = Site {
            out: &mut out,
            program,
            e,
            mask: *mask,
            split: splits.0 > 1,
            target,
            by_key: &mut by_key,
            namer,
        };
        for l in std::iter::once(&mut launch).chain(variants.iter_mut()) {
            if let Some((guard, mut twin)) = divisible_twin(l) {
                site.register(&mut twin)?;
                l.divisible = Some((guard, Box::new(twin)));
            }
            site.register(l)?;
        }
        launch.variants = variants;
        launch.planned = planned;
        out.launches.insert(i, launch);
    }
    Ok(out)
}

/// The mask that attention step `at` reads before its wait, to skip the keys it
/// removes (`MASK_EARLY` of [`ONE_ROW_TEXT`]): a split step of one query row's, where
/// the last step before it to write the mask is a generated kernel. That kernel never
/// lets the kernels after it start early ([`super::kernel::DEPENDENT_WAIT_WHOLE`]), so
/// it has finished when the attention starts. (An input may still be being written by
/// the work before the call, which a programmatic dependent does not wait for.)
///
/// A decoding step over a static cache reads only the keys up to its position. On the
/// H200, under CUDA graphs, transformers' bfloat16 steps over a cache of 1024 took, of
/// their time without it, at positions 100, 512 and 1000: GPT-2 small at batch 1 0.98,
/// 0.99, 1.005, at batch 8 0.89, 1.00, 1.03; the 170 M Llama at batch 1 0.99, 1.00,
/// 1.00, at batch 8 0.90, 1.00, 1.00.
fn early_mask(program: &Program, at: usize) -> Option<BufferId> {
    let Step::Extern(e) = &program.steps[at] else {
        return None;
    };
    let ExternOp::Attention {
        mask: true,
        splits,
        heads_inner,
        ..
    } = &e.op
    else {
        return None;
    };
    let symbolic = e.args.iter().any(|v| v.shape.iter().any(|s| !s.is_const()));
    let ops = Operands::of(program, e, true, *heads_inner).ok()?;
    if *splits <= 1 || ops.l != 1 || symbolic {
        return None;
    }
    let mask = ops.mask?.buf;
    let writer = program.steps[..at]
        .iter()
        .rev()
        .find(|s| s.writes().contains(&mask))?;
    matches!(writer, Step::Kernel(_)).then_some(mask)
}

/// The buffers attention steps read before their waits ([`early_mask`]): the
/// kernels that write them wait with [`super::kernel::DEPENDENT_WAIT_WHOLE`].
pub fn masks_read_early(program: &Program) -> HashSet<BufferId> {
    (0..program.steps.len())
        .filter_map(|i| early_mask(program, i))
        .collect()
}

/// Where one attention step's launches get their kernels.
struct Site<'a, 'b> {
    out: &'a mut Attention,
    program: &'a Program,
    e: &'a ExternCall,
    mask: bool,
    split: bool,
    target: Target,
    by_key: &'a mut HashMap<String, usize>,
    namer: &'b mut Namer,
}

impl Site<'_, '_> {
    /// Names `launch`'s kernel (and its combining kernel's), writing each kernel
    /// text the first time its key (dtypes, constants, alignment, warps) comes.
    fn register(&mut self, launch: &mut AttentionLaunch) -> Result<(), Error> {
        let (program, e, target) = (self.program, self.e, self.target);
        let q = &e.args[0];
        // The kernel writes the output, or, split, the partial results into the scratch.
        let o = &launch.pointers[4].buf;
        let dtype = program.buffer(q.buf).dtype;
        let mask_dtype = e
            .args
            .get(3)
            .filter(|_| self.mask)
            .map(|m| program.buffer(m.buf).dtype);
        let types: Vec<(String, String)> = signature(
            dtype,
            mask_dtype,
            program.buffer(*o).dtype,
            launch.scalars.len(),
            wide(program, launch),
        );
        let aligned = aligned_params(program, &types, launch);
        // Innermost strides of 1 become compile-time constants, as Triton's JIT
        // specializes an integer argument of 1: loads along the head dim are then
        // known contiguous and vectorise (bfloat16 heads of 64 on an H100: 154 µs
        // with runtime strides, 31.5 specialized).
        let unit: Vec<(&'static str, i64)> = scalar_params()
            .zip(&launch.scalars)
            .filter(|(name, value)| UNIT_STRIDES.contains(name) && value.as_str() == "1")
            .map(|(name, _)| (name, 1))
            .collect();
        let types: Vec<(String, String)> = types
            .into_iter()
            .filter(|(name, _)| !unit.iter().any(|(u, _)| u == name))
            .collect();
        let constants: Vec<(&'static str, i64)> =
            launch.constants.iter().copied().chain(unit).collect();
        let precision = target.precision(dtype);
        let key = format!(
            "{types:?}{constants:?}{aligned:?}{}{}{precision:?}",
            launch.num_warps, launch.num_stages
        );
        let index = match self.by_key.get(&key) {
            Some(&k) => k,
            None => {
                let name = self
                    .namer
                    .name(&format!("kiln_flash_attention_{}", self.out.kernels.len()));
                let one_row = constants.contains(&("BLOCK_M", 1));
                kernel_text(&mut self.out.source, &name, precision, self.split, one_row)?;
                self.out.kernels.push(AttentionKernel {
                    name,
                    signature: types,
                    constants,
                    aligned,
                    num_warps: launch.num_warps,
                    num_stages: launch.num_stages,
                });
                self.by_key.insert(key, self.out.kernels.len() - 1);
                self.out.kernels.len() - 1
            }
        };
        launch.kernel = self.out.kernels[index].name.clone();
        if let Some(c) = launch.combine.as_mut() {
            c.kernel = combine_kernel(self.out, program, c, self.by_key, self.namer)?;
        }
        Ok(())
    }
}

/// The kernel that combines split attention's results for `c` (one per output dtype,
/// value head and split count), written once; its name.
fn combine_kernel(
    out: &mut Attention,
    program: &Program,
    c: &TemplateLaunch,
    by_key: &mut HashMap<String, usize>,
    namer: &mut Namer,
) -> Result<String, Error> {
    let dtype = program.buffer(c.pointers[1].buf).dtype;
    let constants = c.constants.clone();
    let key = format!("combine {dtype:?}{constants:?}");
    if let Some(&k) = by_key.get(&key) {
        return Ok(out.kernels[k].name.clone());
    }
    let name = namer.name(&format!("kiln_flash_combine_{}", out.kernels.len()));
    combine_text(&mut out.source, &name)?;
    let mut signature = vec![
        ("P".to_string(), pointer_type(DType::Float32).to_string()),
        ("O".to_string(), pointer_type(dtype).to_string()),
    ];
    for p in COMBINE_PARAMS {
        signature.push((p.to_string(), "i64".to_string()));
    }
    out.kernels.push(AttentionKernel {
        name: name.clone(),
        signature,
        constants,
        aligned: vec!["P".into(), "O".into()],
        num_warps: c.num_warps,
        num_stages: 1,
    });
    by_key.insert(key, out.kernels.len() - 1);
    Ok(name)
}

/// The combining kernel's integer parameters, in order.
const COMBINE_PARAMS: [&str; 7] = ["sob", "soh", "som", "soe", "H", "L", "ROWS"];

/// The runtime parameters of `launch` divisible by 16: a pointer whose view
/// starts 16-byte aligned in its buffer (buffers themselves are), an integer
/// whose value is. `types` names the parameters: the pointers, then the scalars.
fn aligned_params(
    program: &Program,
    types: &[(String, String)],
    launch: &AttentionLaunch,
) -> Vec<String> {
    let pointers = launch.pointers.iter().map(|v| {
        let bytes = program.buffer(v.buf).dtype.size_bytes() as i64;
        v.offset.scale(bytes).is_ok_and(|o| o.is_multiple_of(16))
    });
    let scalars = launch.scalars_aligned.iter().copied();
    types
        .iter()
        .zip(pointers.chain(scalars))
        .filter(|((_, ty), aligned)| *aligned && (ty.starts_with('*') || ty.starts_with('i')))
        .map(|((name, _), _)| name.clone())
        .collect()
}

/// Whether index arithmetic needs 64 bits: an element offset of any operand
/// reaches 2^31 (at the sizes' largest values, for a step of dynamic shapes).
fn wide(program: &Program, launch: &AttentionLaunch) -> bool {
    let most = |s: &Size| {
        let (lo, hi) = s.bounds(&program.symbols);
        lo.saturating_abs().max(hi.saturating_abs())
    };
    launch.pointers.iter().any(|v| {
        let last: i128 = v
            .shape
            .iter()
            .zip(&v.strides)
            .map(|(d, s)| (most(d) - 1).max(0).saturating_mul(most(s)))
            .fold(most(&v.offset), i128::saturating_add);
        last >= i128::from(i32::MAX)
    })
}

/// The runtime parameters: five pointers, `sm_scale`, then `n_ints` integers.
fn signature(
    dtype: DType,
    mask: Option<DType>,
    out: DType,
    n_scalars: usize,
    wide: bool,
) -> Vec<(String, String)> {
    let int = if wide { "i64" } else { "i32" };
    let mut sig = vec![
        ("Q".to_string(), pointer_type(dtype).to_string()),
        ("K".to_string(), pointer_type(dtype).to_string()),
        ("V".to_string(), pointer_type(dtype).to_string()),
        (
            "M".to_string(),
            pointer_type(mask.unwrap_or(dtype)).to_string(),
        ),
        ("O".to_string(), pointer_type(out).to_string()),
        ("sm_scale".to_string(), "fp32".to_string()),
    ];
    for name in INT_PARAMS.iter().take(n_scalars.saturating_sub(1)) {
        sig.push(((*name).to_string(), int.to_string()));
    }
    sig
}

/// The integer parameters after `sm_scale`, in order.
const INT_PARAMS: [&str; 24] = [
    "sqb", "sqh", "sqm", "sqe", "skb", "skh", "skn", "ske", "svb", "svh", "svn", "sve", "smb",
    "smh", "smm", "smn", "sob", "soh", "som", "soe", "Z", "H", "L", "S",
];

/// Every scalar parameter's name, in order: `sm_scale`, then [`INT_PARAMS`].
fn scalar_params() -> impl Iterator<Item = &'static str> {
    std::iter::once("sm_scale").chain(INT_PARAMS)
}

/// The innermost strides, compiled in where they are 1.
const UNIT_STRIDES: [&str; 5] = ["sqe", "ske", "sve", "smn", "soe"];

/// Which of `launch`'s scalars `kernel` takes at run time, in order: their indexes
/// in `scalars` (0 `sm_scale`, `i` the integer `ints[i - 1]`).
pub fn runtime_scalar_indices<'a>(
    kernel: &'a AttentionKernel,
    launch: &'a AttentionLaunch,
) -> impl Iterator<Item = usize> + 'a {
    scalar_params()
        .take(launch.scalars.len())
        .enumerate()
        .filter(|(_, name)| !kernel.constants.iter().any(|(c, _)| c == name))
        .map(|(i, _)| i)
}

/// What the attention kernel's shape depends on in the target device, as its
/// plugin states it (the host's defaults in [`crate::plugins::defaults`] where
/// it does not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Target {
    /// The units that run programs in parallel (SMs); 0 when unknown.
    units: u32,
    /// Whether float32 products may be split into three TF32 products (the
    /// plugin's `tf32_dot`).
    tf32: bool,
    /// The bytes of shared memory one program may use (the plugin's
    /// `shared_memory_per_block`).
    shared_memory: u64,
    /// The bytes of the device's L2 cache (the plugin's `l2_cache_bytes`, else
    /// the host's stated default, 0).
    l2: u64,
}

impl Target {
    /// The target `heuristics` describes.
    pub(super) fn of(heuristics: &dyn LaunchHeuristics) -> Target {
        Target {
            units: heuristics
                .properties()
                .map_or(0, |p| p.multi_processor_count),
            tf32: heuristics.tf32_dot().unwrap_or(defaults::TF32_DOT),
            shared_memory: heuristics
                .shared_memory_per_block()
                .unwrap_or(defaults::SHARED_MEMORY_PER_BLOCK),
            l2: heuristics
                .l2_cache_bytes()
                .unwrap_or(defaults::L2_CACHE_BYTES),
        }
    }

    /// The bytes of shared memory one program may use.
    pub(super) fn shared_memory(self) -> u64 {
        self.shared_memory
    }

    /// `tl.dot`'s `input_precision` for operands of `dtype`: `None` keeps
    /// Triton's default (float16/bfloat16 multiply in their dtype).
    pub(super) fn precision(self, dtype: DType) -> Option<&'static str> {
        match dtype {
            DType::Float32 if self.tf32 => Some("tf32x3"),
            DType::Float32 => Some("ieee"),
            _ => None,
        }
    }
}

/// The operands of one attention step, read from the program: sizes, and the
/// 4-D strides the kernel indexes each operand with.
struct Operands<'a> {
    q: &'a View,
    k: &'a View,
    v: &'a View,
    /// The mask's view, when the step has one.
    mask: Option<&'a View>,
    /// Kiln's own contiguous output buffer, as a `[B, H, L, Ev]` (or
    /// `[N, L, Ev]`) view: the buffer itself, or its transpose where it is
    /// `[B, L, H, Ev]` (`heads_inner`).
    out: View,
    /// Batch, query heads, query rows, key rows, at the sizes' hints (what decisions
    /// read).
    z: i64,
    h: i64,
    l: i64,
    s: i64,
    /// The same four, exact (expressions over size symbols in a dynamic compile).
    sizes: [Size; 4],
    /// The head sizes of the query (and key) and of the value.
    e_q: i64,
    e_v: i64,
    /// Query heads per key/value head (grouped-query attention), else 1.
    group: i64,
    /// The strides of the query, key, value, mask and output.
    strides: [[Size; 4]; 5],
}

impl<'a> Operands<'a> {
    /// Reads the operands of `e`, refusing ranks the kernel does not index.
    fn of(
        p: &Program,
        e: &'a ExternCall,
        mask: bool,
        heads_inner: bool,
    ) -> Result<Operands<'a>, Error> {
        let (q, k, v) = match e.args.as_slice() {
            [q, k, v, ..] => (q, k, v),
            _ => return Err(unsupported("attention needs query, key and value".into())),
        };
        let rank = q.shape.len();
        if !(rank == 3 || rank == 4) || k.shape.len() != rank || v.shape.len() != rank {
            return Err(unsupported(format!(
                "fused attention of operands of rank {rank}, {} and {}",
                k.shape.len(),
                v.shape.len()
            )));
        }
        let (qh, kh, vh) = (hints(&q.shape), hints(&k.shape), hints(&v.shape));
        let (z, h) = if rank == 4 {
            (qh[0], qh[1])
        } else {
            (qh[0], 1)
        };
        let (l, e_q) = (qh[rank - 2], qh[rank - 1]);
        let (s, e_v) = (kh[rank - 2], vh[rank - 1]);
        // The head sizes and head counts are the kernel's constants: integers.
        let heads: Vec<&Size> = [&q.shape[rank - 1], &v.shape[rank - 1]]
            .into_iter()
            .chain(
                (rank == 4)
                    .then(|| [&q.shape[1], &k.shape[1]])
                    .into_iter()
                    .flatten(),
            )
            .collect();
        if heads.iter().any(|d| !d.is_const()) {
            return Err(unsupported(format!(
                "fused attention over symbolic head sizes or counts {:?}",
                q.shape
            )));
        }
        let hk = if rank == 4 { kh[1] } else { 1 };
        let group = if hk > 1 && h % hk == 0 { h / hk } else { 1 };
        let one = Size::from(1);
        let exact = [
            q.shape[0].clone(),
            if rank == 4 {
                q.shape[1].clone()
            } else {
                one.clone()
            },
            q.shape[rank - 2].clone(),
            k.shape[rank - 2].clone(),
        ];
        let mut q_full = q.shape.clone();
        let qs = strides4(q, &q_full);
        // Key/value: batch and head dims broadcast from 1 where the query's are larger,
        // except grouped heads, which the kernel indexes as h / GROUP.
        let kv_want = |t: &View| {
            let mut want = q_full.clone();
            if rank == 4 {
                want[1] = Size::from(if group > 1 { hk } else { h });
            }
            want[rank - 2] = t.shape[rank - 2].clone();
            want[rank - 1] = t.shape[rank - 1].clone();
            want
        };
        let ks = strides4(k, &kv_want(k));
        let vs = strides4(v, &kv_want(v));
        q_full[rank - 1] = exact[3].clone();
        let mask = e.args.get(3).filter(|_| mask);
        let zero = || Size::from(0);
        let ms = mask.map_or([zero(), zero(), zero(), zero()], |m| strides4(m, &q_full));
        let buffer = p.buffer(e.out);
        let (mut shape, mut strides) = (buffer.shape.clone(), buffer.strides.clone());
        if heads_inner {
            if rank != 4 || shape.len() != 4 || strides.len() != 4 {
                return Err(unsupported(format!(
                    "an attention output laid out [B, L, H, Ev] for operands of rank {rank}"
                )));
            }
            shape.swap(1, 2);
            strides.swap(1, 2);
        }
        let out = View {
            buf: e.out,
            shape,
            strides,
            offset: Size::from(0),
        };
        let os = strides4(&out, &out.shape.clone());
        Ok(Operands {
            q,
            k,
            v,
            mask,
            out,
            z,
            h,
            l,
            s,
            sizes: exact,
            e_q,
            e_v,
            group,
            strides: [qs, ks, vs, ms, os],
        })
    }
}

fn unsupported(what: String) -> Error {
    Error::Unsupported {
        kernel: "attention".into(),
        what,
    }
}

/// The kernel's block sizes and pipelining depth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tiles {
    /// Query rows per program.
    block_m: i64,
    /// Keys per step.
    block_n: i64,
    /// The query/key head size, padded to a power of two of at least 16.
    block_e: i64,
    /// The value head size, padded likewise.
    block_ev: i64,
    /// Key/value tiles in flight (`num_stages`).
    stages: i64,
}

/// The most keys a block of the one-row split kernel takes.
const ONE_ROW_BLOCK_N: i64 = 64;
/// Keys of a block of the one-row split kernel per warp. On the H100, for GPT-2
/// small's twelve heads over a cache of 1024 in bfloat16, a chain of twelve split
/// attentions and their combines took 4.0 us a layer in 32 ranges of 32 keys with one
/// warp, 4.3 in 16 ranges of 64 with one or two, and 5.7 in 16 with four; the
/// `tl.dot` form 4.7 at best (`bench/gpu/attention_chain_probe.py`).
const ONE_ROW_KEYS_PER_WARP: i64 = 32;

/// The share of the device's L2 (the plugin's `l2_cache_bytes`) that a one-row
/// split launch's keys and values may take for it to prefetch them before its wait
/// (`PREFETCH`; [`ONE_ROW_TEXT`]): a sixth. On the H100 (50 MiB), GPT-2 small's
/// decoding step at batch 1 (3 and 6 MB a layer in bfloat16 and float32) took 0.97
/// and 0.98 of its time with the prefetch; at batch 8 (24 and 48 MB, more than L2
/// holds beside the weights read meanwhile) 1.02 and 1.035. A device whose plugin
/// does not say has nothing prefetched.
const PREFETCH_L2_SHARE: u64 = 6;

/// The most keys of a one-row split program's range whose mask it loads at once
/// before its wait (`MASK_EARLY`): one load for every range of up to this many keys.
/// The wait for the kernel before hides that load's latency only where that kernel
/// still runs; after a library product, the range's keys wait for it. GPT-2 small's
/// bfloat16 step at batch 8 (4 ranges of 256 keys a head, after cuBLAS products) at
/// positions 512 and 1000 of a cache of 1024 took 1.02 and 1.05 of its time without
/// the early read with the mask read in blocks of the 64 keys its loop takes, 1.00
/// and 1.03 in one load (H200, `bench/gpu/results/2026-11-28-early-mask-h200.txt`).
const MASK_BLOCK_MAX: u64 = 1024;

/// The smallest block `tl.dot` takes along any dimension.
const MIN_BLOCK: i64 = 16;

impl Tiles {
    /// The shared memory the pipelined key and value tiles and the query tile
    /// take, in bytes, for elements of `elem` bytes.
    fn shared_bytes(self, elem: i64) -> i64 {
        (self.stages * self.block_n * (self.block_e + self.block_ev) + self.block_m * self.block_e)
            .saturating_mul(elem)
    }

    /// The tiles for heads of `e_q` and `e_v` elements of `dtype`, `rows`
    /// query rows in each of `heads` (batch × head) programs' groups, on
    /// `target`: the widest that keep the device's units busy and fit its
    /// shared memory, or an error naming both when not even the smallest fit.
    fn choose(
        target: Target,
        dtype: DType,
        (e_q, e_v): (i64, i64),
        rows: i64,
        heads: i64,
    ) -> Result<Tiles, Error> {
        let elem = dtype.size_bytes() as i64;
        let block_e = next_pow2_at_least_16(e_q);
        let block_ev = next_pow2_at_least_16(e_v);
        // Tiles of at most 256 bytes per row keep the stages in shared memory.
        let narrow = block_e * elem <= 256 && block_ev * elem <= 256;
        let block_n: i64 = if narrow { 64 } else { 32 };
        let mut block_m: i64 = if narrow { 64 } else { 32 };
        // Fewer row blocks than units leaves units idle: halve the blocks (ViT's
        // 8 x 3 heads x 197 rows, 96 programs of 64 rows on 132 SMs: 25.5 µs,
        // 168 of 32 rows: 23.0 µs on an H100).
        let row_blocks = |m: i64| ((rows + m - 1) / m).saturating_mul(heads);
        if narrow && row_blocks(block_m) < i64::from(target.units) {
            block_m = 32;
        }
        let mut tiles = Tiles {
            block_m: block_m.min(next_pow2_at_least_16(rows)),
            block_n,
            block_e,
            block_ev,
            stages: 3,
        };
        // Tensor-core products pipeline loads three deep where the tiles are narrow
        // and fit (bfloat16 causal heads of 64 on an H100: 38.5 µs with two stages,
        // 31.5 with three; float32 heads of 32 as tf32x3: 38.2 and 35.1, of 64,
        // 112 KiB in three stages: 41.8 and 40.0,
        // bench/gpu/results/2026-11-24-attention-h100.txt); FMA
        // products (`ieee`) gain nothing from a second stage and lose registers to
        // it (GPT-2's float32 heads of 64: 219 µs against 91.7 with one).
        let budget = i64::try_from(target.shared_memory).unwrap_or(i64::MAX);
        tiles.stages = match target.precision(dtype) {
            Some("ieee") => 1,
            _ if narrow && tiles.shared_bytes(elem) <= budget => 3,
            _ => 2,
        };
        tiles.fit(elem, budget)
    }

    /// One query row a program, for [`ONE_ROW_TEXT`] (a decoding step's split
    /// kernel), over blocks of the keys one of `splits` ranges of `keys` holds, at
    /// most [`ONE_ROW_BLOCK_N`].
    fn one_row(mut self, keys: i64, splits: i64) -> Tiles {
        let range = (keys + splits - 1) / splits.max(1);
        self.block_m = 1;
        self.block_n = next_pow2_at_least_16(range).min(ONE_ROW_BLOCK_N);
        self.stages = 1;
        self
    }

    /// These tiles for `keys` key rows: blocks of no more keys than there are (at
    /// least 16), and no pipelining where one block holds them all. A decoding step
    /// without a cache attends over one key: in GPT-2's float32 step, over blocks of
    /// 64 keys, Kiln's kernel measured slower than the library's 12.8 µs a layer (its
    /// attention, the mask made and padded); over blocks of 16, 4.8 µs (H100).
    fn for_keys(mut self, keys: i64) -> Tiles {
        self.block_n = self.block_n.min(next_pow2_at_least_16(keys));
        if keys <= self.block_n {
            self.stages = 1;
        }
        self
    }

    /// These tiles made small enough for `budget` bytes of shared memory:
    /// first two stages instead of three, then blocks of fewer keys (down to
    /// 16, keeping loads in flight), then one stage, then fewer query rows.
    fn fit(mut self, elem: i64, budget: i64) -> Result<Tiles, Error> {
        while self.shared_bytes(elem) > budget {
            if self.stages > 2 {
                self.stages = 2;
            } else if self.block_n > MIN_BLOCK {
                self.block_n /= 2;
            } else if self.stages > 1 {
                self.stages = 1;
            } else if self.block_m > MIN_BLOCK {
                self.block_m /= 2;
            } else {
                return Err(unsupported(format!(
                    "flash attention over heads of {} and {} elements of {elem} bytes needs \
                     {} bytes of shared memory at its smallest tiles; the device gives a \
                     program {budget} (its plugin's `shared_memory_per_block`)",
                    self.block_e,
                    self.block_ev,
                    self.shared_bytes(elem)
                )));
            }
        }
        Ok(self)
    }
}

/// For a device giving one program `shared_memory` bytes: per dtype
/// (float16, bfloat16, float32, by name), the widest head of 16, 32, 64, 128
/// and 256 elements whose flash-attention tiles the host fits in it, with the
/// most bytes those tiles take; `None` for a dtype where not even heads of 16
/// fit. Conformance reports it for the plugin's `shared_memory_per_block`.
pub fn widest_heads(shared_memory: u64, tf32: bool) -> Vec<(&'static str, Option<(i64, i64)>)> {
    let target = Target {
        units: 0,
        tf32,
        shared_memory,
        l2: 0,
    };
    [
        ("float16", DType::Float16),
        ("bfloat16", DType::BFloat16),
        ("float32", DType::Float32),
    ]
    .into_iter()
    .map(|(name, dtype)| {
        let widest = [16, 32, 64, 128, 256]
            .into_iter()
            .map_while(|e| {
                let tiles = Tiles::choose(target, dtype, (e, e), 4096, 64).ok()?;
                Some((e, tiles.shared_bytes(dtype.size_bytes() as i64)))
            })
            .last();
        (name, widest)
    })
    .collect()
}

/// The launch of one attention step (kernel name filled in by [`write`]).
///
/// `splits`: the key ranges, and whether the kernel reads its mask before its wait
/// ([`early_mask`]). `at`: the batch, heads, query and key rows the tiles and warps
/// are chosen for (a tile variant of a step of dynamic shapes), instead of the
/// sizes' hints.
fn plan(
    p: &Program,
    e: &ExternCall,
    (causal, scale, mask, heads_inner): (bool, f64, bool, bool),
    (splits, mask_early): (u32, bool),
    heuristics: &dyn LaunchHeuristics,
    target: Target,
    at: Option<[i64; 4]>,
) -> Result<AttentionLaunch, Error> {
    let mut ops = Operands::of(p, e, mask, heads_inner)?;
    if let Some([z, h, l, s]) = at {
        (ops.z, ops.h, ops.l, ops.s) = (z, h, l, s);
    }
    let dtype = p.buffer(ops.q.buf).dtype;
    let heads = ops.z.saturating_mul(ops.h);
    let mut tiles = Tiles::choose(target, dtype, (ops.e_q, ops.e_v), ops.l, heads)?.for_keys(ops.s);
    let splits = i64::from(splits.max(1));
    let one_row = splits > 1 && ops.l == 1;
    if one_row {
        tiles = tiles.one_row(ops.s, splits);
    }
    let (mut num_warps, grid) = launch_shape(&ops, dtype, tiles, splits, heuristics)?;
    if one_row {
        let wanted = (tiles.block_n / ONE_ROW_KEYS_PER_WARP).max(1);
        num_warps = num_warps.min(u32::try_from(wanted).unwrap_or(1));
    }
    let mut pointers = vec![ops.q.clone(), ops.k.clone(), ops.v.clone()];
    pointers.push(ops.mask.unwrap_or(ops.q).clone());
    let combine = match e.scratch.filter(|_| splits > 1) {
        Some(scratch) => {
            let buf = p.buffer(scratch);
            let view = View {
                buf: scratch,
                shape: buf.shape.clone(),
                strides: buf.strides.clone(),
                offset: Size::from(0),
            };
            pointers.push(view.clone());
            let rows = heads.saturating_mul(ops.l);
            let os = &ops.strides[4];
            let grid = heuristics
                .adjust_grid(Grid {
                    x: rows.max(1) as u64,
                    y: 1,
                    z: 1,
                })
                .map_err(|source| Error::Heuristics {
                    kernel: "attention".into(),
                    source,
                })?;
            Some(TemplateLaunch {
                kernel: String::new(),
                pointers: vec![view, ops.out.clone()],
                // Split keys are planned for one size: a dynamic step has none.
                scalars: vec![
                    os[0].hint(),
                    os[1].hint(),
                    os[2].hint(),
                    os[3].hint(),
                    ops.h,
                    ops.l,
                    rows,
                ],
                constants: vec![
                    ("SPLITS", splits),
                    ("EV", ops.e_v),
                    ("BLOCK_EV", next_pow2_at_least_16(ops.e_v)),
                ],
                num_warps: 1,
                grid,
                sizes: Vec::new(),
                dynamic: None,
            })
        }
        None => {
            pointers.push(ops.out.clone());
            None
        }
    };
    let mut scalars = vec![super::expr::float_text(scale)];
    let mut scalars_aligned = vec![false];
    let mut ints = Vec::new();
    for size in ops.strides.iter().flatten().chain(&ops.sizes) {
        scalars.push(size.to_string());
        scalars_aligned.push(size.is_multiple_of(16));
        ints.push(size.clone());
    }
    let mask_kind = match ops.mask {
        Some(m) if p.buffer(m.buf).dtype == DType::Bool => 1,
        Some(_) => 2,
        None => 0,
    };
    let constants = vec![
        ("GROUP", ops.group),
        ("E", ops.e_q),
        ("EV", ops.e_v),
        ("BLOCK_M", tiles.block_m),
        ("BLOCK_N", tiles.block_n),
        ("BLOCK_E", tiles.block_e),
        ("BLOCK_EV", tiles.block_ev),
        ("CAUSAL", i64::from(causal)),
        ("MASK_KIND", mask_kind),
    ];
    let mut constants = constants;
    if combine.is_some() {
        constants.push(("SPLITS", splits));
        let elem = dtype.size_bytes() as i64;
        let keys = ops
            .z
            .saturating_mul(ops.h / ops.group.max(1))
            .saturating_mul(ops.s);
        let kv_bytes = keys.saturating_mul(ops.e_q + ops.e_v).saturating_mul(elem);
        let fits = u64::try_from(kv_bytes).is_ok_and(|b| b <= target.l2 / PREFETCH_L2_SHARE);
        constants.push(("PREFETCH", i64::from(one_row && fits)));
        // Read early, the mask of a program's range comes in blocks of MASK_EARLY keys:
        // the whole range at once where it is at most MASK_BLOCK_MAX.
        let range = (ops.s + splits - 1) / splits;
        let chunk = (range + tiles.block_n - 1) / tiles.block_n * tiles.block_n;
        let early = one_row && mask && mask_early;
        let block = (chunk.max(1) as u64)
            .next_power_of_two()
            .min(MASK_BLOCK_MAX) as i64;
        constants.push(("MASK_EARLY", if early { block } else { 0 }));
    }
    let dynamic = dynamic_programs(p, &ops, tiles.block_m, splits, heuristics)?;
    Ok(AttentionLaunch {
        kernel: String::new(),
        pointers,
        scalars,
        ints,
        scalars_aligned,
        constants,
        num_warps,
        num_stages: u32::try_from(tiles.stages).unwrap_or(1),
        grid,
        dynamic,
        variants: Vec::new(),
        planned: Vec::new(),
        divisible: None,
        combine,
    })
}

/// For a launch of dynamic shapes: the same launch compiled assuming more of its
/// strides and lengths (not the batch or head counts) multiples of 16, as a static
/// compile of a length of a multiple of 16 knows them (Triton then vectorises their
/// loads and masks), and the symbols whose being multiples of 16 proves it. A symbol
/// of the batch is never guarded (a batch is seldom a multiple of 16). `None` where no
/// symbol makes any more so.
fn divisible_twin(launch: &AttentionLaunch) -> Option<(Vec<SymId>, AttentionLaunch)> {
    let n = launch.ints.len();
    if n < 4 || launch.dynamic.is_none() || launch.combine.is_some() {
        return None;
    }
    // The sizes are last: Z, H, L, S.
    let (z, h) = (n - 4, n - 3);
    let batch = launch.ints[z].symbols();
    let mut guard: Vec<SymId> = Vec::new();
    let mut aligned = launch.scalars_aligned.clone();
    for (j, size) in launch.ints.iter().enumerate() {
        if j == z || j == h || aligned.get(j + 1).copied().unwrap_or(true) {
            continue;
        }
        let Some(given) = size.multiple_of_given(16) else {
            continue;
        };
        if given.is_empty() || given.iter().any(|s| batch.contains(s)) {
            continue;
        }
        for s in given {
            if !guard.contains(&s) {
                guard.push(s);
            }
        }
        aligned[j + 1] = true;
    }
    if guard.is_empty() {
        return None;
    }
    guard.sort();
    let twin = AttentionLaunch {
        scalars_aligned: aligned,
        ..launch.clone()
    };
    Some((guard, twin))
}

/// The sizes a step of dynamic shapes chooses further tile variants at: its batch
/// at 1, 4, 16 and 64 and its query rows (and key rows, where they are the same
/// size) at each power of two from 16 to 1024, each within its range (the hints' where a size is
/// fixed). The tiles depend on the rows and on how many programs the heads give.
fn variant_sizes(
    p: &Program,
    e: &ExternCall,
    mask: bool,
    heads_inner: bool,
) -> Result<Vec<[i64; 4]>, Error> {
    let ops = Operands::of(p, e, mask, heads_inner)?;
    let [z, _, l, s] = &ops.sizes;
    let within = |size: &Size, hint: i64, points: &[i64]| -> Vec<i64> {
        if size.is_const() {
            return vec![hint];
        }
        let (lo, hi) = size.bounds(&p.symbols);
        let mut out: Vec<i64> = points
            .iter()
            .copied()
            .filter(|&n| (lo..=hi).contains(&i128::from(n)))
            .collect();
        out.push(hint);
        out
    };
    let mut at = Vec::new();
    for zv in within(z, ops.z, &[1, 4, 16, 64]) {
        for lv in within(l, ops.l, &[16, 32, 64, 128, 256, 512, 1024]) {
            let point = [zv, ops.h, lv, if s == l { lv } else { ops.s }];
            if (zv, lv) != (ops.z, ops.l) && !at.contains(&point) {
                at.push(point);
            }
        }
    }
    Ok(at)
}

/// For a step of symbolic sizes: the programs its tiles need (`ceil(L / BLOCK_M) * Z *
/// H * splits`, over the symbols) and the plugin's grid per bucket of program counts.
fn dynamic_programs(
    p: &Program,
    ops: &Operands<'_>,
    block_m: i64,
    splits: i64,
    heuristics: &dyn LaunchHeuristics,
) -> Result<Option<(Size, Vec<Grid>)>, Error> {
    if ops.sizes.iter().all(Size::is_const) {
        return Ok(None);
    }
    let overflow = |e: crate::graph::sym::SymError| unsupported(e.to_string());
    let [z, h, l, _] = &ops.sizes;
    let tiles_m = l
        .add(&Size::from(block_m - 1))
        .and_then(|n| n.floor_div(&Size::from(block_m), &p.symbols))
        .map_err(overflow)?;
    let programs = tiles_m
        .mul(z)
        .and_then(|n| n.mul(h))
        .and_then(|n| n.scale(splits))
        .map_err(overflow)?;
    let most = u64::try_from(programs.bounds(&p.symbols).1).unwrap_or(u64::MAX);
    let grids = super::kernel::grid_buckets(most.max(1), heuristics).map_err(|source| {
        Error::Heuristics {
            kernel: "attention".into(),
            source,
        }
    })?;
    Ok(Some((programs, grids)))
}

/// The warps of each program (the plugin's, for a reduction over the key
/// rows) and the grid launched (after the plugin's `adjust_grid`).
fn launch_shape(
    ops: &Operands<'_>,
    dtype: DType,
    tiles: Tiles,
    splits: i64,
    heuristics: &dyn LaunchHeuristics,
) -> Result<(u32, Grid), Error> {
    let heuristics_error = |source| Error::Heuristics {
        kernel: "attention".into(),
        source,
    };
    let rows = ops.z.saturating_mul(ops.h).saturating_mul(ops.l);
    let configs = heuristics
        .reduction_configs(ReductionQuery {
            rows: rows.max(1) as u64,
            row_len: ops.s.max(1) as u64,
            element_bytes: dtype.size_bytes() as u32,
        })
        .map_err(heuristics_error)?;
    // The plugin's warp limit (GXU: one warp); four at most, as Inductor's template.
    let num_warps = configs
        .iter()
        .map(|c| c.num_warps)
        .max()
        .unwrap_or(1)
        .clamp(1, 4);
    let num_m = (ops.l + tiles.block_m - 1) / tiles.block_m;
    let programs = num_m
        .saturating_mul(ops.z)
        .saturating_mul(ops.h)
        .saturating_mul(splits)
        .max(1) as u64;
    let grid = heuristics
        .adjust_grid(Grid {
            x: programs,
            y: 1,
            z: 1,
        })
        .map_err(heuristics_error)?;
    Ok((num_warps, grid))
}

/// The kernel's text; `precision` is `tl.dot`'s `input_precision` (see
/// [`Target::precision`]). `split`: the keys split into `SPLITS` ranges, each
/// program's partial results (values, running max and sum, per query row) written
/// to `O`, the float32 scratch, for [`combine_text`]'s kernel.
fn kernel_text(
    out: &mut String,
    name: &str,
    precision: Option<&str>,
    split: bool,
    one_row: bool,
) -> std::fmt::Result {
    let precision = precision.map_or(String::new(), |p| format!(", input_precision=\"{p}\""));
    writeln!(out, "\n\n@triton.jit")?;
    writeln!(
        out,
        "def {name}(Q, K, V, M, O, sm_scale,\n\
         {pad}sqb, sqh, sqm, sqe, skb, skh, skn, ske, svb, svh, svn, sve,\n\
         {pad}smb, smh, smm, smn, sob, soh, som, soe, Z, H, L, S,\n\
         {pad}GROUP: tl.constexpr, E: tl.constexpr, EV: tl.constexpr,\n\
         {pad}BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr,\n\
         {pad}CAUSAL: tl.constexpr, MASK_KIND: tl.constexpr{splits}):",
        pad = " ".repeat(name.len() + 5),
        splits = if split {
            ", SPLITS: tl.constexpr, PREFETCH: tl.constexpr, MASK_EARLY: tl.constexpr"
        } else {
            ""
        }
    )?;
    let body = r#"    # Flash attention: BLOCK_M query rows of one (batch, head) per program,
    # online softmax in base 2 over blocks of BLOCK_N keys.
    kiln_dependent_wait()
    LOG2E: tl.constexpr = 1.4426950408889634
    num_m = tl.cdiv(L, BLOCK_M)
    offs_n0 = tl.arange(0, BLOCK_N)
    offs_e = tl.arange(0, BLOCK_E)
    offs_ev = tl.arange(0, BLOCK_EV)
    qk_scale = sm_scale * LOG2E
{PROGRAMS}
        off_b = bh // H
        off_h = bh % H
        off_hk = off_h // GROUP
        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = offs_m < L
        q = tl.load(Q + off_b * sqb + off_h * sqh + offs_m[:, None] * sqm + offs_e[None, :] * sqe,
                    mask=row_ok[:, None] & (offs_e[None, :] < E), other=0.0)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_EV], dtype=tl.float32)
        lo = 0
        hi = S
        if CAUSAL:
            hi = tl.minimum(S, (start_m + 1) * BLOCK_M)
{RANGE}
        k_base = K + off_b * skb + off_hk * skh
        v_base = V + off_b * svb + off_hk * svh
        m_base = M + off_b * smb + off_h * smh
        for start_n in range(lo, hi, BLOCK_N):
            offs_n = start_n + offs_n0
            col_ok = offs_n < S
            k = tl.load(k_base + offs_n[None, :] * skn + offs_e[:, None] * ske,
                        mask=col_ok[None, :] & (offs_e[:, None] < E), other=0.0)
            qk = tl.dot(q, k{PRECISION}) * qk_scale
            keep = row_ok[:, None] & col_ok[None, :]
            if CAUSAL:
                keep = keep & (offs_n[None, :] <= offs_m[:, None])
            if MASK_KIND == 1:
                mk = tl.load(m_base + offs_m[:, None] * smm + offs_n[None, :] * smn,
                             mask=row_ok[:, None] & col_ok[None, :], other=0)
                keep = keep & (mk != 0)
            if MASK_KIND == 2:
                madd = tl.load(m_base + offs_m[:, None] * smm + offs_n[None, :] * smn,
                               mask=row_ok[:, None] & col_ok[None, :], other=0.0)
                qk = qk + madd.to(tl.float32) * LOG2E
            qk = tl.where(keep, qk, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            # A row with nothing kept so far has max -inf: shift by 0 instead (no NaN).
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.math.exp2(qk - m_use[:, None])
            alpha = tl.math.exp2(m_i - m_use)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(v_base + offs_n[:, None] * svn + offs_ev[None, :] * sve,
                        mask=col_ok[:, None] & (offs_ev[None, :] < EV), other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v{PRECISION})
            m_i = m_new
{STORE}"#;
    if split && one_row {
        out.push_str(ONE_ROW_TEXT);
        return Ok(());
    }
    let (programs, range, store) = if split { SPLIT_PARTS } else { WHOLE_PARTS };
    let body = body
        .replace("{PROGRAMS}", programs)
        .replace("{RANGE}", range)
        .replace("{STORE}", store);
    out.push_str(&body.replace("{PRECISION}", &precision));
    Ok(())
}

/// The split kernel's body with one query row a program (`BLOCK_M` 1; Triton's
/// `tl.dot` takes 16 rows at least): a decoding step's. The scores and the values'
/// sum are products summed along a row in float32 rather than `tl.dot`s: the keys,
/// values and mask of a block are loaded together, and nothing passes through
/// shared memory but the reductions'. Partial results as [`SPLIT_PARTS`]' store.
/// Where the mask's kernel has finished when this one starts (`MASK_EARLY`, see
/// [`early_mask`]), a program's first range is cut, before the wait, to the keys
/// its mask keeps.
const ONE_ROW_TEXT: &str = r#"    # Split flash attention for one query row a program (a decoding step): the
    # scores and the values' sum in float32, in registers.
    LOG2E: tl.constexpr = 1.4426950408889634
    offs_n0 = tl.arange(0, BLOCK_N)
    offs_e = tl.arange(0, BLOCK_E)
    offs_ev = tl.arange(0, BLOCK_EV)
    qk_scale = sm_scale * LOG2E
    chunk = tl.cdiv(tl.cdiv(S, SPLITS), BLOCK_N) * BLOCK_N
    # This program's first range, before the wait. A program past the work (a grid
    # a plugin rounded up) has none.
    pf = tl.program_id(0)
    pf_bh = (pf // SPLITS) // L
    pf_hk = (pf_bh % H) // GROUP
    pf_lo = (pf % SPLITS) * chunk
    pf_hi = tl.minimum(S, pf_lo + chunk)
    if CAUSAL:
        pf_hi = tl.minimum(pf_hi, (pf // SPLITS) % L + 1)
    pf_hi = tl.where(pf < L * Z * H * SPLITS, pf_hi, pf_lo)
    # MASK_EARLY (the mask's kernel finished before this one started; the keys
    # whose mask one load reads): the range cut to the whole blocks from its first
    # key the mask keeps to its last, so that no key or value it removes is read (a
    # decoding step's cache past the position). The blocks keep their places: the
    # sums are those of the whole range.
    if MASK_EARLY > 0:
        pf_m = M + (pf_bh // H) * smb + (pf_bh % H) * smh + ((pf // SPLITS) % L) * smm
        kept_lo = pf_hi
        kept_hi = pf_lo
        for start_n in range(pf_lo, pf_hi, MASK_EARLY):
            offs_n = start_n + tl.arange(0, MASK_EARLY)
            kept = offs_n < pf_hi
            mv = tl.load(pf_m + offs_n * smn, mask=kept, other=0, cache_modifier=".cg")
            if MASK_KIND == 1:
                kept = kept & (mv != 0)
            if MASK_KIND == 2:
                kept = kept & (mv.to(tl.float32) != float("-inf"))
            kept_lo = tl.minimum(kept_lo, tl.min(tl.where(kept, offs_n, pf_hi), 0))
            kept_hi = tl.maximum(kept_hi, tl.max(tl.where(kept, offs_n + 1, pf_lo), 0))
        pf_lo = pf_lo + (tl.maximum(kept_lo - pf_lo, 0) // BLOCK_N) * BLOCK_N
        pf_hi = tl.maximum(kept_hi, pf_lo)
    # Before the wait (where the launch's keys and values fit L2 beside the rest):
    # the range's keys and values, one address a 128-byte line, prefetched into L2,
    # where the loads after the wait find them (they see what the kernel before
    # wrote: a prefetch reads nothing into the program).
    if PREFETCH:
        K_LINE: tl.constexpr = 1024 // K.dtype.element_ty.primitive_bitwidth
        V_LINE: tl.constexpr = 1024 // V.dtype.element_ty.primitive_bitwidth
        pf_e = tl.arange(0, (BLOCK_E + K_LINE - 1) // K_LINE) * K_LINE
        pf_ev = tl.arange(0, (BLOCK_EV + V_LINE - 1) // V_LINE) * V_LINE
        for start_n in range(pf_lo, pf_hi, BLOCK_N):
            offs_n = start_n + offs_n0
            keep = offs_n < pf_hi
            kiln_prefetch_l2(K + (pf_bh // H) * skb + pf_hk * skh + offs_n[:, None] * skn + pf_e[None, :] * ske,
                             keep[:, None] & (pf_e[None, :] < E))
            kiln_prefetch_l2(V + (pf_bh // H) * svb + pf_hk * svh + offs_n[:, None] * svn + pf_ev[None, :] * sve,
                             keep[:, None] & (pf_ev[None, :] < EV))
    kiln_dependent_wait()
    for pid in range(tl.program_id(0), L * Z * H * SPLITS, tl.num_programs(0)):
        split = pid % SPLITS
        row = (pid // SPLITS) % L
        bh = (pid // SPLITS) // L
        off_b = bh // H
        off_h = bh % H
        off_hk = off_h // GROUP
        q = tl.load(Q + off_b * sqb + off_h * sqh + row * sqm + offs_e * sqe,
                    mask=offs_e < E, other=0.0).to(tl.float32) * qk_scale
        m_i = tl.max(tl.full([BLOCK_N], float("-inf"), tl.float32), 0)
        l_i = tl.sum(tl.zeros([BLOCK_N], dtype=tl.float32), 0)
        acc = tl.zeros([BLOCK_EV], dtype=tl.float32)
        lo = split * chunk
        hi = tl.minimum(S, lo + chunk)
        if CAUSAL:
            hi = tl.minimum(hi, row + 1)
        if MASK_EARLY > 0:
            if pid == pf:
                lo = pf_lo
                hi = pf_hi
        k_base = K + off_b * skb + off_hk * skh
        v_base = V + off_b * svb + off_hk * svh
        m_base = M + off_b * smb + off_h * smh + row * smm
        for start_n in range(lo, hi, BLOCK_N):
            offs_n = start_n + offs_n0
            keep = offs_n < hi
            k = tl.load(k_base + offs_n[:, None] * skn + offs_e[None, :] * ske,
                        mask=keep[:, None] & (offs_e[None, :] < E), other=0.0)
            v = tl.load(v_base + offs_n[:, None] * svn + offs_ev[None, :] * sve,
                        mask=keep[:, None] & (offs_ev[None, :] < EV), other=0.0)
            if MASK_KIND != 0:
                mv = tl.load(m_base + offs_n * smn, mask=keep, other=0)
            qk = tl.sum(k.to(tl.float32) * q[None, :], 1)
            if MASK_KIND == 1:
                keep = keep & (mv != 0)
            if MASK_KIND == 2:
                qk = qk + mv.to(tl.float32) * LOG2E
            qk = tl.where(keep, qk, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 0))
            # Nothing kept so far: max -inf, shift by 0 instead (no NaN).
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.math.exp2(qk - m_use)
            alpha = tl.math.exp2(m_i - m_use)
            l_i = l_i * alpha + tl.sum(p, 0)
            acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), 0)
            m_i = m_new
        part = ((bh * L + row) * SPLITS + split) * (EV + 2)
        tl.store(O + part + offs_ev, acc, mask=offs_ev < EV)
        tl.store(O + part + EV, m_i)
        tl.store(O + part + EV + 1, l_i)
"#;

/// The programs, the key range and the store of the kernel over all the keys.
const WHOLE_PARTS: (&str, &str, &str) = (
    r#"    for pid in range(tl.program_id(0), num_m * Z * H, tl.num_programs(0)):
        start_m = pid % num_m
        bh = pid // num_m"#,
    "",
    r#"        # A row with nothing kept (l_i = 0, acc = 0) is zeros, as PyTorch's attention
        # (its _safe_softmax) gives: any kept key adds exp2(0) = 1 to l_i.
        y = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
        tl.store(O + off_b * sob + off_h * soh + offs_m[:, None] * som + offs_ev[None, :] * soe,
                 y.to(O.dtype.element_ty), mask=row_ok[:, None] & (offs_ev[None, :] < EV))
"#,
);

/// The same for a kernel whose keys are split into `SPLITS` ranges (flash-decoding):
/// each program takes one range of whole key blocks, and writes its rows' unnormalized
/// values, running max (base 2) and sum into the scratch `O`, `EV + 2` floats a row.
const SPLIT_PARTS: (&str, &str, &str) = (
    r#"    chunk = tl.cdiv(tl.cdiv(S, SPLITS), BLOCK_N) * BLOCK_N
    for pid in range(tl.program_id(0), num_m * Z * H * SPLITS, tl.num_programs(0)):
        split = pid % SPLITS
        start_m = (pid // SPLITS) % num_m
        bh = (pid // SPLITS) // num_m"#,
    r#"        lo = split * chunk
        hi = tl.minimum(hi, lo + chunk)"#,
    r#"        part = ((bh * L + offs_m) * SPLITS + split) * (EV + 2)
        tl.store(O + part[:, None] + offs_ev[None, :], acc, mask=row_ok[:, None] & (offs_ev[None, :] < EV))
        tl.store(O + part + EV, m_i, mask=row_ok)
        tl.store(O + part + EV + 1, l_i, mask=row_ok)
"#,
);

/// The kernel that combines split attention's partial results: per query row, the
/// splits' values weighted by `2^(m_s - m)` over their sums weighted alike (a row no
/// split kept anything of is zeros, as in the kernel over all the keys).
fn combine_text(out: &mut String, name: &str) -> std::fmt::Result {
    writeln!(out, "\n\n@triton.jit")?;
    writeln!(
        out,
        "def {name}(P, O, sob, soh, som, soe, H, L, ROWS,\n{pad}SPLITS: tl.constexpr, EV: tl.constexpr, \
         BLOCK_EV: tl.constexpr):",
        pad = " ".repeat(name.len() + 5)
    )?;
    out.push_str(
        r#"    kiln_dependent_wait()
    offs_s = tl.arange(0, SPLITS)
    offs_ev = tl.arange(0, BLOCK_EV)
    for r in range(tl.program_id(0), ROWS, tl.num_programs(0)):
        part = (r * SPLITS + offs_s) * (EV + 2)
        m_s = tl.load(P + part + EV)
        l_s = tl.load(P + part + EV + 1)
        m = tl.max(m_s, 0)
        w = tl.math.exp2(m_s - tl.where(m == float("-inf"), 0.0, m))
        l_sum = tl.sum(l_s * w, 0)
        acc = tl.load(P + part[:, None] + offs_ev[None, :], mask=offs_ev[None, :] < EV, other=0.0)
        y = tl.sum(acc * w[:, None], 0) / tl.where(l_sum == 0.0, 1.0, l_sum)
        row = r % L
        bh = r // L
        tl.store(O + (bh // H) * sob + (bh % H) * soh + row * som + offs_ev * soe,
                 y.to(O.dtype.element_ty), mask=offs_ev < EV)
"#,
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use kiln_plugin_api::LaunchConfig;

    use super::*;
    use crate::codegen::heuristics::HeuristicsError;

    const KIB: u64 = 1024;

    fn target(tf32: bool, shared_memory: u64, units: u32) -> Target {
        Target {
            units,
            tf32,
            shared_memory,
            l2: 0,
        }
    }

    /// A plugin that answers none of the questions of API 1.5.
    struct Silent;

    impl LaunchHeuristics for Silent {
        fn pointwise_configs(
            &self,
            _: PointwiseQuery,
        ) -> Result<Vec<LaunchConfig>, HeuristicsError> {
            Ok(Vec::new())
        }
        fn reduction_configs(
            &self,
            _: ReductionQuery,
        ) -> Result<Vec<LaunchConfig>, HeuristicsError> {
            Ok(Vec::new())
        }
        fn adjust_grid(&self, grid: Grid) -> Result<Grid, HeuristicsError> {
            Ok(grid)
        }
    }

    use kiln_plugin_api::PointwiseQuery;

    #[test]
    fn float32_products_are_tf32x3_only_where_the_plugin_says_its_target_takes_tf32() {
        let tf32 = target(true, 96 * KIB, 108);
        assert_eq!(tf32.precision(DType::Float32), Some("tf32x3"));
        // A plugin that says no, and one that does not say (the default).
        let silent = Target::of(&Silent);
        assert_eq!(
            silent,
            target(false, defaults::SHARED_MEMORY_PER_BLOCK, 0),
            "{silent:?}"
        );
        for target in [target(false, 96 * KIB, 40), silent] {
            assert_eq!(target.precision(DType::Float32), Some("ieee"), "{target:?}");
        }
        // 16-bit operands multiply in their dtype everywhere.
        for dtype in [DType::Float16, DType::BFloat16] {
            assert_eq!(tf32.precision(dtype), None);
            assert_eq!(silent.precision(dtype), None);
        }
    }

    /// The tiles hosts before API 1.5 chose, for every device: three stages
    /// where they took at most 96 KiB, never fitted to the device.
    fn before_1_5(
        target: Target,
        dtype: DType,
        (e_q, e_v): (i64, i64),
        rows: i64,
        heads: i64,
    ) -> Tiles {
        let elem = dtype.size_bytes() as i64;
        let (block_e, block_ev) = (next_pow2_at_least_16(e_q), next_pow2_at_least_16(e_v));
        let narrow = block_e * elem <= 256 && block_ev * elem <= 256;
        let block_n: i64 = if narrow { 64 } else { 32 };
        let mut block_m: i64 = if narrow { 64 } else { 32 };
        if narrow && ((rows + block_m - 1) / block_m) * heads < i64::from(target.units) {
            block_m = 32;
        }
        let block_m = block_m.min(next_pow2_at_least_16(rows));
        let shared =
            |stages: i64| (stages * block_n * (block_e + block_ev) + block_m * block_e) * elem;
        let stages = match target.precision(dtype) {
            Some("ieee") => 1,
            _ if narrow && shared(3) <= 96 * 1024 => 3,
            _ => 2,
        };
        Tiles {
            block_m,
            block_n,
            block_e,
            block_ev,
            stages,
        }
    }

    /// One case of the sweep.
    #[derive(Clone, Copy, Debug)]
    struct Case {
        dtype: DType,
        /// The query/key and value head sizes.
        heads: (i64, i64),
        rows: i64,
        /// Batch × head programs' groups.
        groups: i64,
        tf32: bool,
        units: u32,
    }

    impl Case {
        fn on(self, shared_memory: u64) -> Target {
            target(self.tf32, shared_memory, self.units)
        }
    }

    /// Every head size and dtype, for few and many rows, on targets with and
    /// without TF32.
    fn sweep() -> Vec<Case> {
        let sizes = [16, 32, 40, 64, 80, 96, 128, 160, 256];
        let mut cases = Vec::new();
        for dtype in [DType::Float16, DType::BFloat16, DType::Float32] {
            for &e_q in &sizes {
                for e_v in [e_q, 64, 256] {
                    for (rows, groups) in [(1, 1), (100, 4), (197, 24), (512, 128), (4096, 32)] {
                        for (tf32, units) in [(true, 132), (false, 48), (true, 0)] {
                            cases.push(Case {
                                dtype,
                                heads: (e_q, e_v),
                                rows,
                                groups,
                                tf32,
                                units,
                            });
                        }
                    }
                }
            }
        }
        cases
    }

    #[test]
    fn a_device_of_48_kib_gets_tiles_that_fit_it_for_every_head_and_dtype() {
        for case in sweep() {
            let device = case.on(48 * KIB);
            let tiles = Tiles::choose(device, case.dtype, case.heads, case.rows, case.groups)
                .unwrap_or_else(|e| panic!("{case:?}: {e}"));
            let bytes = tiles.shared_bytes(case.dtype.size_bytes() as i64);
            assert!(bytes <= 48 * 1024, "{case:?}: {tiles:?} takes {bytes}");
            for block in [tiles.block_m, tiles.block_n] {
                assert!(
                    block >= MIN_BLOCK && (block as u64).is_power_of_two(),
                    "{tiles:?}"
                );
            }
            assert!(tiles.stages >= 1, "{tiles:?}");
        }
    }

    #[test]
    fn devices_of_96_and_227_kib_keep_the_tiles_of_hosts_before_1_5() {
        let mut three_stages_now = 0;
        for shared_memory in [96 * KIB, 227 * KIB] {
            for case in sweep() {
                let (device, elem) = (case.on(shared_memory), case.dtype.size_bytes() as i64);
                let then = before_1_5(device, case.dtype, case.heads, case.rows, case.groups);
                let now = Tiles::choose(device, case.dtype, case.heads, case.rows, case.groups)
                    .unwrap_or_else(|e| panic!("{case:?}: {e}"));
                let budget = shared_memory as i64;
                assert!(now.shared_bytes(elem) <= budget, "{now:?}");
                if then.shared_bytes(elem) > budget {
                    // Those tiles never fitted this device: made smaller.
                    continue;
                }
                // Where three stages take more than 96 KiB but fit the device,
                // a device that gives more pipelines deeper; nothing else moves.
                let deeper = Tiles { stages: 3, ..then };
                if now == deeper && now != then {
                    assert!(deeper.shared_bytes(elem) > 96 * 1024 && shared_memory > 96 * KIB);
                    three_stages_now += 1;
                    continue;
                }
                assert_eq!(now, then, "{shared_memory} {case:?}");
            }
        }
        // Heads of 128 16-bit or 64 float32 elements: three stages of 112 KiB.
        assert!(three_stages_now > 0);
    }

    #[test]
    fn tiles_that_cannot_fit_are_an_error_naming_the_shared_memory() {
        let tiny = target(false, 8 * KIB, 4);
        let err = Tiles::choose(tiny, DType::Float32, (256, 256), 512, 8)
            .expect_err("16 x 256 float32 tiles take 48 KiB")
            .to_string();
        assert!(
            err.contains("shared_memory_per_block") && err.contains("8192"),
            "{err}"
        );
    }
}
