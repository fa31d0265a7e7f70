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
//! PyTorch's default): on a device with TF32 tensor cores (compute capability
//! 8.0 or later) each product is three TF32 products (`tf32x3`: the high and
//! low halves of both operands, the low x low term dropped, about 2^-22
//! relative), elsewhere exact FMA products (`ieee`); float16/bfloat16 multiply
//! in their dtype. All accumulate in float32.

use std::collections::HashMap;
use std::fmt::Write;

use kiln_plugin_api::{DeviceProperties, Grid, ReductionQuery};

use super::expr::pointer_type;
use super::Error;
use crate::codegen::heuristics::LaunchHeuristics;
use crate::codegen::namer::Namer;
use crate::graph::dtype::DType;
use crate::schedule::ir::{ExternCall, ExternOp, Program, Step, View};

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
    /// Query, key, value, mask (the query again when there is none) and output,
    /// as the pointer arguments.
    pub pointers: Vec<View>,
    /// The runtime scalars after the pointers (`sm_scale`, strides, sizes), as
    /// Python literals.
    pub scalars: Vec<String>,
    /// The `constexpr` values, by name.
    pub constants: Vec<(&'static str, i64)>,
    /// Warps per program.
    pub num_warps: u32,
    /// Pipelining stages.
    pub num_stages: u32,
    /// The grid launched (after `adjust_grid`).
    pub grid: Grid,
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

/// The 4-D `[B, H, rows, cols]` strides of a view of rank 3 (`[N, rows, cols]`,
/// one head) or 4, with stride 0 wherever the view's size is 1 and the query's
/// is not (a broadcast).
fn strides4(v: &View, want: &[i64]) -> [i64; 4] {
    let mut shape = v.shape.clone();
    let mut strides = v.strides.clone();
    // Right-align to the wanted rank (a mask may have fewer dims).
    while shape.len() < want.len() {
        shape.insert(0, 1);
        strides.insert(0, 0);
    }
    let mut s: Vec<i64> = shape
        .iter()
        .zip(&strides)
        .zip(want)
        .map(|((&have, &stride), &w)| if have == 1 && w != 1 { 0 } else { stride })
        .collect();
    if s.len() == 3 {
        s.insert(1, 0);
    }
    [s[0], s[1], s[2], s[3]]
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
    let target = Target::of(heuristics.properties());
    // Kernel text by its key (dtypes and constants), so that equal steps share one.
    let mut by_key: HashMap<String, usize> = HashMap::new();
    for (i, step) in program.steps.iter().enumerate() {
        let Step::Extern(e) = step else { continue };
        let ExternOp::Attention {
            causal,
            scale_bits,
            mask,
        } = &e.op
        else {
            continue;
        };
        let launch = plan(
            program,
            e,
            *causal,
            f64::from_bits(*scale_bits),
            *mask,
            heuristics,
            target,
        )?;
        let (q, o) = (&e.args[0], &e.out);
        let dtype = program.buffer(q.buf).dtype;
        let mask_dtype = e
            .args
            .get(3)
            .filter(|_| *mask)
            .map(|m| program.buffer(m.buf).dtype);
        let types: Vec<(String, String)> = signature(
            dtype,
            mask_dtype,
            program.buffer(*o).dtype,
            launch.scalars.len(),
            wide(&launch),
        );
        let aligned = aligned_params(program, &types, &launch);
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
        let index = match by_key.get(&key) {
            Some(&k) => k,
            None => {
                let name = namer.name(&format!("kiln_flash_attention_{}", out.kernels.len()));
                kernel_text(&mut out.source, &name, precision)?;
                out.kernels.push(AttentionKernel {
                    name,
                    signature: types,
                    constants,
                    aligned,
                    num_warps: launch.num_warps,
                    num_stages: launch.num_stages,
                });
                by_key.insert(key, out.kernels.len() - 1);
                out.kernels.len() - 1
            }
        };
        let mut launch = launch;
        launch.kernel = out.kernels[index].name.clone();
        out.launches.insert(i, launch);
    }
    Ok(out)
}

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
        v.offset.saturating_mul(bytes) % 16 == 0
    });
    let scalars = launch
        .scalars
        .iter()
        .map(|s| s.parse::<i64>().is_ok_and(|n| n % 16 == 0));
    types
        .iter()
        .zip(pointers.chain(scalars))
        .filter(|((_, ty), aligned)| *aligned && (ty.starts_with('*') || ty.starts_with('i')))
        .map(|((name, _), _)| name.clone())
        .collect()
}

/// Whether index arithmetic needs 64 bits: an element offset of any operand
/// reaches 2^31.
fn wide(launch: &AttentionLaunch) -> bool {
    launch.pointers.iter().any(|v| {
        let last: i64 = v
            .shape
            .iter()
            .zip(&v.strides)
            .map(|(&d, &s)| (d - 1).max(0).saturating_mul(s.abs()))
            .fold(v.offset, i64::saturating_add);
        last >= i64::from(i32::MAX)
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

/// The values of the scalars `kernel` takes at run time, in order: `launch`'s
/// scalars less those compiled into the kernel as constants.
pub fn runtime_scalars<'a>(kernel: &AttentionKernel, launch: &'a AttentionLaunch) -> Vec<&'a str> {
    scalar_params()
        .zip(&launch.scalars)
        .filter(|(name, _)| !kernel.constants.iter().any(|(c, _)| c == name))
        .map(|(_, value)| value.as_str())
        .collect()
}

/// What the attention kernel's shape depends on in the target device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Target {
    /// The units that run programs in parallel (SMs); 0 when unknown.
    units: u32,
    /// Whether the device multiplies TF32 on tensor cores (NVIDIA compute
    /// capability 8.0 and later), so that float32 products can be split into
    /// three TF32 products.
    tf32: bool,
}

/// Shared memory the pipelined key/value tiles (and the query tile) may take:
/// what every device with tensor cores gives one program (NVIDIA's 8.6 and 8.9
/// parts give 99 KiB; the H100 228).
const SHARED_BUDGET: i64 = 96 * 1024;

/// Compute capability (as PyTorch encodes it) from which TF32 tensor cores exist.
const TF32_MIN_CC: u32 = 80;

impl Target {
    fn of(properties: Option<DeviceProperties>) -> Target {
        properties.map_or(
            Target {
                units: 0,
                tf32: false,
            },
            |p| Target {
                units: p.multi_processor_count,
                tf32: p.cc >= TF32_MIN_CC,
            },
        )
    }

    /// `tl.dot`'s `input_precision` for operands of `dtype`: `None` keeps
    /// Triton's default (float16/bfloat16 multiply in their dtype).
    fn precision(self, dtype: DType) -> Option<&'static str> {
        match dtype {
            DType::Float32 if self.tf32 => Some("tf32x3"),
            DType::Float32 => Some("ieee"),
            _ => None,
        }
    }
}

/// The launch of one attention step (kernel name filled in by [`write`]).
fn plan(
    p: &Program,
    e: &ExternCall,
    causal: bool,
    scale: f64,
    mask: bool,
    heuristics: &dyn LaunchHeuristics,
    target: Target,
) -> Result<AttentionLaunch, Error> {
    let unsupported = |what: String| Error::Unsupported {
        kernel: "attention".into(),
        what,
    };
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
    let (z, h) = if rank == 4 {
        (q.shape[0], q.shape[1])
    } else {
        (q.shape[0], 1)
    };
    let (l, e_q) = (q.shape[rank - 2], q.shape[rank - 1]);
    let (s, e_v) = (k.shape[rank - 2], v.shape[rank - 1]);
    let hk = if rank == 4 { k.shape[1] } else { 1 };
    let group = if hk > 1 && h % hk == 0 { h / hk } else { 1 };
    let mut q_full = q.shape.clone();
    let qs = strides4(q, &q_full);
    // Key/value: batch and head dims broadcast from 1 where the query's are larger,
    // except grouped heads, which the kernel indexes as h / GROUP.
    let kv_want = |t: &View| {
        let mut want = q_full.clone();
        if rank == 4 {
            want[1] = if group > 1 { hk } else { h };
        }
        want[rank - 2] = t.shape[rank - 2];
        want[rank - 1] = t.shape[rank - 1];
        want
    };
    let ks = strides4(k, &kv_want(k));
    let vs = strides4(v, &kv_want(v));
    q_full[rank - 1] = s;
    let ms = match (mask, e.args.get(3)) {
        (true, Some(m)) => strides4(m, &q_full),
        _ => [0; 4],
    };
    let out = p.buffer(e.out);
    let out_view = View {
        buf: e.out,
        shape: out.shape.clone(),
        strides: out.strides.clone(),
        offset: 0,
    };
    let os = strides4(&out_view, &out.shape);
    let dtype = p.buffer(q.buf).dtype;
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
    let row_blocks = |m: i64| ((l + m - 1) / m).saturating_mul(z).saturating_mul(h);
    if narrow && row_blocks(block_m) < i64::from(target.units) {
        block_m = 32;
    }
    let block_m = block_m.min(next_pow2_at_least_16(l));
    // Tensor-core products pipeline loads three deep where the tiles are narrow
    // and fit (bfloat16 causal heads of 64 on an H100: 38.5 µs with two stages,
    // 31.5 with three; float32 heads of 32 as tf32x3: 38.2 and 35.1); FMA
    // products (`ieee`) gain nothing from a second stage and lose registers to
    // it (GPT-2's float32 heads of 64: 219 µs against 91.7 with one).
    let shared = |stages: i64| {
        (stages * block_n * (block_e + block_ev) + block_m * block_e).saturating_mul(elem)
    };
    let num_stages = match target.precision(dtype) {
        Some("ieee") => 1,
        _ if narrow && shared(3) <= SHARED_BUDGET => 3,
        _ => 2,
    };
    let rows = z.saturating_mul(h).saturating_mul(l);
    let configs = heuristics
        .reduction_configs(ReductionQuery {
            rows: rows.max(1) as u64,
            row_len: s.max(1) as u64,
            element_bytes: dtype.size_bytes() as u32,
        })
        .map_err(|source| Error::Heuristics {
            kernel: "attention".into(),
            source,
        })?;
    // The plugin's warp limit (GXU: one warp); four at most, as Inductor's template.
    let num_warps = configs
        .iter()
        .map(|c| c.num_warps)
        .max()
        .unwrap_or(1)
        .clamp(1, 4);
    let num_m = (l + block_m - 1) / block_m;
    let programs = num_m.saturating_mul(z).saturating_mul(h).max(1) as u64;
    let grid = heuristics
        .adjust_grid(Grid {
            x: programs,
            y: 1,
            z: 1,
        })
        .map_err(|source| Error::Heuristics {
            kernel: "attention".into(),
            source,
        })?;
    let mut pointers = vec![q.clone(), k.clone(), v.clone()];
    pointers.push(match (mask, e.args.get(3)) {
        (true, Some(m)) => m.clone(),
        _ => q.clone(),
    });
    pointers.push(out_view);
    let mut scalars = vec![super::expr::float_text(scale)];
    for st in [qs, ks, vs, ms, os] {
        scalars.extend(st.iter().map(i64::to_string));
    }
    scalars.extend([z, h, l, s].iter().map(i64::to_string));
    let mask_kind = match (mask, e.args.get(3)) {
        (true, Some(m)) if p.buffer(m.buf).dtype == DType::Bool => 1,
        (true, Some(_)) => 2,
        _ => 0,
    };
    let constants = vec![
        ("GROUP", group),
        ("E", e_q),
        ("EV", e_v),
        ("BLOCK_M", block_m),
        ("BLOCK_N", block_n),
        ("BLOCK_E", block_e),
        ("BLOCK_EV", block_ev),
        ("CAUSAL", i64::from(causal)),
        ("MASK_KIND", mask_kind),
    ];
    Ok(AttentionLaunch {
        kernel: String::new(),
        pointers,
        scalars,
        constants,
        num_warps,
        num_stages,
        grid,
    })
}

/// The kernel's text; `precision` is `tl.dot`'s `input_precision` (see
/// [`Target::precision`]).
fn kernel_text(out: &mut String, name: &str, precision: Option<&str>) -> std::fmt::Result {
    let precision = precision.map_or(String::new(), |p| format!(", input_precision=\"{p}\""));
    writeln!(out, "\n\n@triton.jit")?;
    writeln!(
        out,
        "def {name}(Q, K, V, M, O, sm_scale,\n\
         {pad}sqb, sqh, sqm, sqe, skb, skh, skn, ske, svb, svh, svn, sve,\n\
         {pad}smb, smh, smm, smn, sob, soh, som, soe, Z, H, L, S,\n\
         {pad}GROUP: tl.constexpr, E: tl.constexpr, EV: tl.constexpr,\n\
         {pad}BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr,\n\
         {pad}CAUSAL: tl.constexpr, MASK_KIND: tl.constexpr):",
        pad = " ".repeat(name.len() + 5)
    )?;
    let body = r#"    # Flash attention: BLOCK_M query rows of one (batch, head) per program,
    # online softmax in base 2 over blocks of BLOCK_N keys.
    LOG2E: tl.constexpr = 1.4426950408889634
    num_m = tl.cdiv(L, BLOCK_M)
    total = num_m * Z * H
    offs_n0 = tl.arange(0, BLOCK_N)
    offs_e = tl.arange(0, BLOCK_E)
    offs_ev = tl.arange(0, BLOCK_EV)
    qk_scale = sm_scale * LOG2E
    for pid in range(tl.program_id(0), total, tl.num_programs(0)):
        start_m = pid % num_m
        bh = pid // num_m
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
        hi = S
        if CAUSAL:
            hi = tl.minimum(S, (start_m + 1) * BLOCK_M)
        k_base = K + off_b * skb + off_hk * skh
        v_base = V + off_b * svb + off_hk * svh
        m_base = M + off_b * smb + off_h * smh
        for start_n in range(0, hi, BLOCK_N):
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
        # A row with nothing kept is 0 / 0 = NaN, as PyTorch's softmax of all -inf.
        y = acc / l_i[:, None]
        tl.store(O + off_b * sob + off_h * soh + offs_m[:, None] * som + offs_ev[None, :] * soe,
                 y.to(O.dtype.element_ty), mask=row_ok[:, None] & (offs_ev[None, :] < EV))
"#;
    out.push_str(&body.replace("{PRECISION}", &precision));
    Ok(())
}

#[cfg(test)]
mod tests {
    use kiln_plugin_api::abi_stable::std_types::{RNone, RString};
    use kiln_plugin_api::PropertiesSource;

    use super::*;

    fn properties(cc: u32, units: u32) -> DeviceProperties {
        DeviceProperties {
            device_type: RString::from("cuda"),
            index: 0,
            multi_processor_count: units,
            cc,
            major: RNone,
            regs_per_multiprocessor: RNone,
            max_threads_per_multi_processor: RNone,
            max_threads_per_block: RNone,
            warp_size: RNone,
            max_grid: [1 << 31, 65535, 65535],
            source: PropertiesSource::StaticDefaults,
        }
    }

    #[test]
    fn float32_products_are_tf32x3_only_where_tensor_cores_take_tf32() {
        let ampere = Target::of(Some(properties(80, 108)));
        assert_eq!(ampere.units, 108);
        assert_eq!(ampere.precision(DType::Float32), Some("tf32x3"));
        // Turing (7.5) has no TF32; a vendor's device says 0; no properties at all.
        for target in [
            Target::of(Some(properties(75, 40))),
            Target::of(Some(properties(0, 48))),
            Target::of(None),
        ] {
            assert_eq!(target.precision(DType::Float32), Some("ieee"), "{target:?}");
        }
        // 16-bit operands multiply in their dtype everywhere.
        for dtype in [DType::Float16, DType::BFloat16] {
            assert_eq!(ampere.precision(dtype), None);
            assert_eq!(Target::of(None).precision(dtype), None);
        }
    }
}
