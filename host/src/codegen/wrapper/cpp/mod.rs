//! `wrapper.cpp` for a C++-scheduled device: the plugin's `kernel_header`,
//! `#include`s of the C++ runtime ([`runtime`]: headers written beside it in
//! `kiln/`), the kernels, and a plain C entry point
//!
//! ```c
//! extern "C" int kiln_call(const void* const* inputs, void* const* outputs);
//! ```
//!
//! `inputs[i]` points to graph input `i`, dense row-major in its dtype
//! (float16/bfloat16 as their raw 16 bits); `outputs[i]` to room for graph
//! output `i`, written dense row-major. It returns 0, 1 when memory ran out
//! (nothing is leaked), 2 when an index tensor held a value out of range, or
//! 3 when the weights were not loaded. `kiln_abi_version()`,
//! `kiln_num_inputs()` and `kiln_num_outputs()` let a loader check what it
//! opened.
//!
//! Large constants (a model's weights) are not in the library: they live in
//! `weights.safetensors` beside it ([`crate::codegen::weights`]). Before the
//! first call, a loader either calls `kiln_load_weights(path)`, which reads
//! the file and checks every tensor's dtype and size (0, or 3 with the reason
//! in `kiln_last_error()`), or hands over its own copies with
//! `kiln_set_weights(pointers)`, one dense tensor per `kiln_weight_name(i)`,
//! `i < kiln_num_weights()`, kept alive while the library is used. Neither
//! may run concurrently with a call. Intermediates
//! live in one arena laid out from the memory plan ([`layout`]): a buffer
//! that reuses a dead one takes its storage, and storage whose last user has
//! run is free for later buffers. By default the arena is kept per calling
//! thread between calls (repeated calls fault no fresh pages in), so
//! concurrent calls from different threads are safe; [`Options::keep_arena`]
//! off frees it at the end of every call instead.
//!
//! Every name from the graph goes through the [`Namer`], after [`reserve`].

pub(super) mod layout;
mod linked;
pub(super) mod sizes;

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::OnceLock;

use super::super::cpp::expr::{
    compute_type, float_text, int_text, load_conversion, storage_type, store_conversion,
};
use super::super::cpp::runtime::{self, Header};
use super::super::cpp::{self, KernelInfo};
use super::super::namer::{sanitize, word_set, Namer, WordSet};
use super::super::weights;
use crate::graph::dtype::DType;
use crate::graph::ops::ConstData;
use crate::graph::sym::Syntax;
use crate::schedule::index::{hints, size_text, Size};
use crate::schedule::ir::{BufferId, BufferKind, ExternOp, Program, Step, View};
use crate::schedule::Scheduled;
use layout::Layout;
pub use linked::linked_runtime;
use linked::{mm_load, mm_store, HEADER_BEGINS, HEADER_ENDS};

/// Bumped when the entry points change.
pub const ABI_VERSION: i32 = 2;

/// Why the wrapper could not be written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The program asks for something the C++ wrapper cannot do.
    #[error("{0}")]
    Unsupported(String),
    /// The kernels given do not match the program (a bug in Kiln).
    #[error("internal: no generated kernel computes program step {step} (please report)")]
    MissingKernel {
        /// The step.
        step: usize,
    },
    /// Writing text failed.
    #[error("formatting failed")]
    Fmt(#[from] std::fmt::Error),
}

/// Choices of the C++ wrapper.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Keep each calling thread's arena of intermediates between calls (the
    /// default: repeated calls touch no fresh memory); `false` allocates it
    /// at the start of every call and frees it at the end, so that nothing
    /// stays allocated between calls.
    pub keep_arena: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { keep_arena: true }
    }
}

/// What the wrapper needs from its caller, for loaders and reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Info {
    /// `kiln_abi_version()`.
    pub abi_version: i32,
    /// Bytes of the arena of intermediates (0: none).
    pub arena_bytes: u64,
    /// Kernels called per call.
    pub kernels: usize,
    /// The constants read from the weights file, by key, in the order of
    /// `kiln_set_weights`.
    pub weights: Vec<(String, BufferId)>,
}

/// The names `wrapper.cpp` binds or uses besides the kernels' and the
/// runtime's: the entry points and the locals of `kiln_call`.
pub const RESERVED: &[&str] = &[
    "kiln_abi_version",
    "kiln_num_inputs",
    "kiln_num_outputs",
    "kiln_call",
    "kiln_copy_out",
    "kiln_num_weights",
    "kiln_weight_name",
    "kiln_set_weights",
    "kiln_load_weights",
    "kiln_last_error",
    "kiln_weight_specs",
    "kiln_weights_ready",
    "weights",
    "found",
    "inputs",
    "outputs",
    "arena",
    "ws",
    "i",
    "shape",
    "strides",
];

/// Takes every name the file binds, and every identifier of the plugin's
/// `kernel_header` and of the runtime's headers it includes, before any name
/// from the graph is given out.
pub fn reserve(namer: &mut Namer, header: &str) {
    static WORDS: OnceLock<WordSet> = OnceLock::new();
    namer.reserve_set(word_set(
        &WORDS,
        &[cpp::RESERVED, RESERVED, sizes::RESERVED],
        &runtime::texts(),
    ));
    namer.reserve_identifiers_in(header);
}

/// One element of a constant as C++ storage text.
pub(super) fn element_text(v: f64, d: DType) -> String {
    match d {
        DType::Float16 => format!("{}u", half::f16::from_f64(v).to_bits()),
        DType::BFloat16 => format!("{}u", half::bf16::from_f64(v).to_bits()),
        DType::Bool => if v != 0.0 { "true" } else { "false" }.into(),
        DType::Int32 => format!("{}", d.round(v) as i32),
        DType::Int64 => int_text(d.round(v) as i64),
        _ => float_text(d.round(v), d),
    }
}

/// Writes `wrapper.cpp` for `scheduled` around `kernels` (generated with the
/// same `namer`, after [`reserve`]). `header` is the plugin's
/// `kernel_header`; `origin` says who generated it (for the first comment).
pub fn write(
    scheduled: &Scheduled,
    kernels: &cpp::Kernels,
    header: &str,
    origin: &str,
    options: &Options,
    namer: &mut Namer,
) -> Result<(String, Info), Error> {
    let p = &scheduled.program;
    let names: HashMap<BufferId, String> = p
        .buffers
        .ids()
        .map(|b| (b, namer.name(&format!("b_{}", p.buffer(b).name))))
        .collect();
    let by_step: HashMap<usize, &KernelInfo> = kernels.info.iter().map(|k| (k.step, k)).collect();
    if let Some(step) = (0..p.steps.len())
        .find(|i| matches!(p.steps[*i], Step::Kernel(_)) && !by_step.contains_key(i))
    {
        return Err(Error::MissingKernel { step });
    }
    let name = |b: BufferId| names.get(&b).cloned().unwrap_or_else(|| "nullptr".into());
    // Where each size symbol is read (none for a program of one size).
    let sources = super::symbol_sources(p).map_err(Error::Unsupported)?;
    let mut out = String::new();
    writeln!(
        out,
        "// Generated by Kiln ({origin}) for graph `{}`.",
        sanitize(&p.name)
    )?;
    if sources.is_empty() {
        writeln!(
            out,
            "// Entry point: extern \"C\" int kiln_call(const void* const* inputs, void* const* outputs);\n\
             // inputs/outputs: one dense row-major tensor per graph input/output; returns 0, 1 when out of memory,\n\
             // 2 when an index is out of range, 3 when the weights are not loaded (kiln_load_weights)."
        )?;
    } else {
        writeln!(
            out,
            "// Compiled for a range of sizes. Entry point:\n\
             // extern \"C\" int kiln_call_shaped(const int64_t* const* input_shapes, const void* const* inputs, void* const* outputs);\n\
             // input_shapes: each input's sizes; inputs/outputs: one dense row-major tensor per graph input/output\n\
             // (kiln_output_shapes gives the outputs' sizes). Returns 0, 1 when out of memory, 2 when an index is\n\
             // out of range, 3 when the weights are not loaded, 4 when the sizes are refused (kiln_last_error)."
        )?;
    }
    write!(
        out,
        "// Build: c++ {} {} wrapper.cpp -o kiln.so\n\
         // (`host run` uses $CXX when set, and $KILN_CXXFLAGS in place of the flags before -std.)\n\
         {HEADER_BEGINS}",
        crate::codegen::cpp::DEFAULT_FLAGS,
        crate::codegen::cpp::REQUIRED_FLAGS.join(" ")
    )?;
    out.push_str(header);
    if !header.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(HEADER_ENDS);
    let weights = weight_keys(p, &name);
    write_includes(&mut out, p, !weights.is_empty(), !sources.is_empty())?;
    out.push('\n');
    out.push_str(&kernels.source);
    write_constants(&mut out, p, &name)?;
    write_weights(&mut out, p, &weights, !sources.is_empty())?;
    writeln!(
        out,
        "\nextern \"C\" int kiln_abi_version(void) {{ return {ABI_VERSION}; }}"
    )?;
    writeln!(
        out,
        "extern \"C\" int kiln_num_inputs(void) {{ return {}; }}",
        p.inputs.len()
    )?;
    writeln!(
        out,
        "extern \"C\" int kiln_num_outputs(void) {{ return {}; }}\n",
        p.outputs.len()
    )?;
    if sources.is_empty() {
        writeln!(
            out,
            "extern \"C\" int kiln_call(const void* const* inputs, void* const* outputs) {{"
        )?;
    } else {
        sizes::write_entries(&mut out, p, &sources)?;
        writeln!(
            out,
            "extern \"C\" int kiln_call(const void* const*, void* const*) {{ return kiln_sizes_needed(); }}\n"
        )?;
        writeln!(
            out,
            "extern \"C\" int kiln_call_shaped(const int64_t* const* input_shapes, const void* const* inputs, void* const* outputs) {{"
        )?;
    }
    if !weights.is_empty() {
        writeln!(out, "    if (!kiln_weights_ready) return 3;")?;
    }
    if !sources.is_empty() {
        sizes::write_bind(&mut out, &sources)?;
    }
    let arena_bytes = body(&mut out, scheduled, &by_step, options, &name)?;
    out.push_str("}\n");
    let info = Info {
        abi_version: ABI_VERSION,
        arena_bytes,
        kernels: kernels.info.len(),
        weights,
    };
    Ok((out, info))
}

/// What the generated code itself uses of the standard library (whatever the
/// plugin's header includes).
const STANDARD_HEADERS: &[&str] = &[
    "algorithm",
    "cmath",
    "cstdint",
    "cstring",
    "limits",
    "vector",
];

/// The standard headers and the runtime's headers the file uses: the scalar
/// helpers, arena, transposes and lanes always; the matrix product and the
/// convolution for the extern calls that need them; the weights reader when
/// there are weights.
fn write_includes(out: &mut String, p: &Program, weights: bool, sizes: bool) -> std::fmt::Result {
    for h in STANDARD_HEADERS {
        writeln!(out, "#include <{h}>")?;
    }
    let externs = || {
        p.steps.iter().filter_map(|s| match s {
            Step::Extern(e) => Some(&e.op),
            Step::Kernel(_) => None,
        })
    };
    let conv = externs().any(|op| matches!(op, ExternOp::Conv { .. }));
    let mm = externs().any(|op| matches!(op, ExternOp::Mm | ExternOp::Bmm));
    let used: [(Header, bool); 9] = [
        (runtime::SCALAR, true),
        (runtime::ARENA, true),
        (runtime::TRANSPOSE, true),
        (runtime::LANES, true),
        (runtime::MATMUL, mm),
        (runtime::CONV, conv),
        (runtime::COPY_OUT, true),
        (runtime::WEIGHTS, weights),
        (runtime::SIZES, sizes),
    ];
    for (h, _) in used.iter().filter(|(_, used)| *used) {
        writeln!(out, "#include \"{}\"", h.path)?;
    }
    Ok(())
}

/// The constants read from the weights file, with their keys.
fn weight_keys(p: &Program, name: &dyn Fn(BufferId) -> String) -> Vec<(String, BufferId)> {
    p.constants_read()
        .into_iter()
        .filter(|&b| weights::in_file(p, b))
        .map(|b| (name(b), b))
        .collect()
}

/// Small constants with values, as static arrays in the library.
fn write_constants(
    out: &mut String,
    p: &Program,
    name: &dyn Fn(BufferId) -> String,
) -> std::fmt::Result {
    for (id, b) in p.buffers.iter_enumerated() {
        if let BufferKind::Constant { data } = &b.kind {
            if matches!(data, ConstData::Fill(_)) || weights::in_file(p, id) {
                continue;
            }
            let n = b.numel().max(0) as usize;
            if n == 0 {
                continue;
            }
            let items: Vec<String> = (0..n).map(|j| element_text(data.get(j), b.dtype)).collect();
            writeln!(
                out,
                "static const {} {}[{n}] = {{{}}};",
                storage_type(b.dtype),
                name(id),
                items.join(", ")
            )?;
        }
    }
    Ok(())
}

/// The weights' pointers and the entry points that set them. Every
/// program has the entry points (a loader needs no special case); one without
/// weights sets nothing.
fn write_weights(
    out: &mut String,
    p: &Program,
    weights: &[(String, BufferId)],
    sizes: bool,
) -> std::fmt::Result {
    let n = weights.len();
    writeln!(out)?;
    if n > 0 {
        writeln!(
            out,
            "// Weights: read from {} by kiln_load_weights(path), or handed over by kiln_set_weights.",
            weights::FILE_NAME
        )?;
        for (key, b) in weights {
            writeln!(
                out,
                "static const {}* {key} = nullptr;",
                storage_type(p.buffer(*b).dtype)
            )?;
        }
        writeln!(out, "static bool kiln_weights_ready = false;")?;
        writeln!(
            out,
            "static const KilnWeightSpec kiln_weight_specs[{n}] = {{"
        )?;
        for (key, b) in weights {
            let buf = p.buffer(*b);
            let bytes = buf.numel().max(0) as u64 * buf.dtype.size_bytes() as u64;
            writeln!(
                out,
                "    {{\"{key}\", \"{}\", {bytes}ull}},",
                weights::header_name(buf.dtype)
            )?;
        }
        writeln!(out, "}};")?;
    }
    writeln!(
        out,
        "extern \"C\" int kiln_num_weights(void) {{ return {n}; }}"
    )?;
    if n > 0 {
        writeln!(
            out,
            "extern \"C\" const char* kiln_weight_name(int i) {{ return i >= 0 && i < {n} ? kiln_weight_specs[i].key : nullptr; }}"
        )?;
    } else {
        writeln!(
            out,
            "extern \"C\" const char* kiln_weight_name(int) {{ return nullptr; }}"
        )?;
    }
    writeln!(
        out,
        "extern \"C\" int kiln_set_weights([[maybe_unused]] const void* const* weights) {{"
    )?;
    for (i, (key, b)) in weights.iter().enumerate() {
        writeln!(
            out,
            "    {key} = static_cast<const {}*>(weights[{i}]);",
            storage_type(p.buffer(*b).dtype)
        )?;
    }
    if n > 0 {
        writeln!(out, "    kiln_weights_ready = true;")?;
    }
    writeln!(out, "    return 0;\n}}")?;
    if n > 0 {
        writeln!(
            out,
            "extern \"C\" int kiln_load_weights(const char* path) {{\n    \
             const void* found[{n}];\n    \
             if (kiln_read_weights(path, kiln_weight_specs, {n}, found) != 0) return 3;\n    \
             return kiln_set_weights(found);\n}}"
        )?;
    } else {
        writeln!(
            out,
            "extern \"C\" int kiln_load_weights(const char*) {{ return 0; }}"
        )?;
    }
    // The weights' last failure, or this thread's refused sizes.
    let weights_error = if n > 0 { "kiln_error_text" } else { "\"\"" };
    if sizes {
        writeln!(
            out,
            "extern \"C\" const char* kiln_last_error(void) {{ return kiln_size_text[0] != 0 ? kiln_size_text : {weights_error}; }}"
        )
    } else {
        writeln!(
            out,
            "extern \"C\" const char* kiln_last_error(void) {{ return {weights_error}; }}"
        )
    }
}

/// The body of `kiln_call`; returns the arena's size.
fn body(
    out: &mut String,
    scheduled: &Scheduled,
    kernels: &HashMap<usize, &KernelInfo>,
    options: &Options,
    name: &dyn Fn(BufferId) -> String,
) -> Result<u64, Error> {
    let p = &scheduled.program;
    let mem = &scheduled.memory;
    // Constants filled with one value, and the value.
    let fills: Vec<(BufferId, f64)> = p
        .buffers
        .iter_enumerated()
        .filter_map(|(id, b)| match b.kind {
            BufferKind::Constant {
                data: ConstData::Fill(v),
            } if b.numel() > 0 => Some((id, v)),
            _ => None,
        })
        .collect();
    let fill_ids: Vec<BufferId> = fills.iter().map(|(b, _)| *b).collect();
    let layout = Layout::new(scheduled, &fill_ids);
    for (i, b) in p.inputs.iter().enumerate() {
        let ty = storage_type(p.buffer(*b).dtype);
        writeln!(
            out,
            "    [[maybe_unused]] const {ty}* {} = static_cast<const {ty}*>(inputs[{i}]);",
            name(*b)
        )?;
    }
    let arena_bytes = if layout.uses_arena() {
        layout.arena_bytes
    } else {
        0
    };
    if layout.uses_arena() {
        let total = if layout.is_symbolic() {
            layout.write_symbolic(out)?;
            "arena_bytes".to_string()
        } else {
            layout.arena_bytes.to_string()
        };
        let total_note = if layout.is_symbolic() {
            "laid out at this call's sizes".to_string()
        } else {
            format!("{total} bytes")
        };
        if options.keep_arena {
            writeln!(
                out,
                "    // Intermediates share one arena by the memory plan ({total_note}), kept per calling\n    \
                 // thread between calls so that repeated calls reuse the memory.\n    \
                 static thread_local KilnArena arena;"
            )?;
        } else {
            writeln!(
                out,
                "    // Intermediates share one arena by the memory plan ({total_note}), freed on return.\n    \
                 KilnArena arena;"
            )?;
        }
        writeln!(
            out,
            "    unsigned char* const ws = arena.get({total});\n    \
             if (ws == nullptr) return 1;"
        )?;
    }
    for &(b, v) in &fills {
        let buf = p.buffer(b);
        let ty = storage_type(buf.dtype);
        let value = element_text(v, buf.dtype);
        let n = size_text(&crate::schedule::index::product(&buf.shape), Syntax::C);
        writeln!(
            out,
            "    {ty}* {} = static_cast<{ty}*>(static_cast<void*>({}));\n    \
             for (int64_t i = 0; i < {n}; ++i) {}[i] = {value};",
            name(b),
            layout.at(b),
            name(b)
        )?;
    }
    for (i, step) in p.steps.iter().enumerate() {
        for a in mem.allocs.get(i).into_iter().flatten() {
            let ty = storage_type(p.buffer(a.buf).dtype);
            let note = match a.reuse {
                Some(old) => format!(" // reuses the storage of {}", name(old)),
                None => String::new(),
            };
            writeln!(
                out,
                "    [[maybe_unused]] {ty}* {} = static_cast<{ty}*>(static_cast<void*>({}));{note}",
                name(a.buf),
                layout.at(a.buf)
            )?;
        }
        match step {
            Step::Kernel(_) => {
                let k = kernels.get(&i).ok_or(Error::MissingKernel { step: i })?;
                let args: Vec<String> = k
                    .args
                    .iter()
                    .map(|b| name(*b))
                    .chain(k.symbols.iter().map(|s| format!("ks{}", s.0)))
                    .collect();
                writeln!(out, "    {}({});", k.name, args.join(", "))?;
            }
            Step::Extern(e) => extern_call(out, p, e, name)?,
        }
    }
    for (i, v) in p.outputs.iter().enumerate() {
        if !layout.in_place(i, v) {
            copy_out(out, p, i, v, name)?;
        }
    }
    // Status 2: an index tensor held a value outside the dim it indexes.
    writeln!(
        out,
        "    if (kiln_fault.exchange(0, std::memory_order_relaxed) != 0) return 2;"
    )?;
    writeln!(out, "    return 0;")?;
    Ok(arena_bytes)
}

/// A 1-D or 2-D convolution through the runtime's `kiln_conv2d` (contiguous operands);
/// a 1-D one is a 2-D one of height 1. The batch may be symbolic (its size read at
/// the call); every other size is static.
fn conv_call(
    out: &mut String,
    p: &Program,
    e: &crate::schedule::ir::ExternCall,
    (stride, padding, dilation, groups): (&[i64], &[i64], &[i64], i64),
    name: &dyn Fn(BufferId) -> String,
) -> Result<(), Error> {
    let [x, w] = e.args.as_slice() else {
        return Err(Error::Unsupported(
            "a convolution needs two operands".into(),
        ));
    };
    let y = p.buffer(e.out);
    let c = |s: &Size| size_text(s, Syntax::C);
    // [N, C, L] with [O, C/g, K] is [N, C, 1, L] with [O, C/g, 1, K]: the same memory.
    let (xs, ws, ys, stride, padding, dilation) = match (x.shape.len(), stride.len()) {
        (3, 1) if w.shape.len() == 3 && y.shape.len() == 3 => {
            let tall = |s: &[Size]| vec![s[0].clone(), s[1].clone(), Size::from(1), s[2].clone()];
            let pair = |v: &[i64], unit: i64| vec![unit, v.first().copied().unwrap_or(unit)];
            (
                tall(&x.shape),
                tall(&w.shape),
                tall(&y.shape),
                pair(stride, 1),
                pair(padding, 0),
                pair(dilation, 1),
            )
        }
        (4, 2) if w.shape.len() == 4 && y.shape.len() == 4 => (
            x.shape.clone(),
            w.shape.clone(),
            y.shape.clone(),
            stride.to_vec(),
            padding.to_vec(),
            dilation.to_vec(),
        ),
        _ => {
            return Err(Error::Unsupported(format!(
            "a convolution of input {:?} on the cpu device: Kiln's C++ convolution is 1-D or 2-D",
            x.shape
        )))
        }
    };
    if [&xs[1..], &ws[..], &ys[1..]]
        .iter()
        .any(|dims| dims.iter().any(|d| d.as_const().is_none()))
    {
        return Err(Error::Unsupported(format!(
            "a convolution of input {:?}: the cpu device's convolution takes a symbolic batch \
             only",
            x.shape
        )));
    }
    let d = y.dtype;
    if !d.is_float() || p.buffer(x.buf).dtype != d || p.buffer(w.buf).dtype != d {
        return Err(Error::Unsupported(
            "a convolution whose operands and result differ in dtype or are not floats".into(),
        ));
    }
    let acc = compute_type(d);
    // 16-bit operands are widened to float for the convolution and the result rounded
    // once, as PyTorch's CPU kernels accumulate them.
    let half = matches!(d, DType::Float16 | DType::BFloat16);
    let (xn, xo, wn, wo, yn) = if half {
        let numel = |s: &[Size]| c(&crate::schedule::index::product(s));
        writeln!(out, "    {{")?;
        writeln!(
            out,
            "    std::vector<float> kiln_cx({}), kiln_cw({}), kiln_cy({});",
            numel(&xs),
            numel(&ws),
            numel(&ys)
        )?;
        for (v, buf, off) in [("kiln_cx", x.buf, &x.offset), ("kiln_cw", w.buf, &w.offset)] {
            writeln!(
                out,
                "    for (size_t i = 0; i < {v}.size(); ++i) {v}[i] = {};",
                load_conversion(d, &format!("{}[{} + i]", name(buf), c(off)))
            )?;
        }
        (
            "kiln_cx.data()".to_string(),
            "0".to_string(),
            "kiln_cw.data()".to_string(),
            "0".to_string(),
            "kiln_cy.data()".to_string(),
        )
    } else {
        (
            name(x.buf),
            c(&x.offset),
            name(w.buf),
            c(&w.offset),
            name(e.out),
        )
    };
    let dims: Vec<String> = [
        &xs[0], &xs[1], &xs[2], &xs[3], &ws[0], &ws[2], &ws[3], &ys[2], &ys[3],
    ]
    .into_iter()
    .map(c)
    .collect();
    writeln!(
        out,
        "    if (kiln_conv2d<{acc}>({xn}, {xo}, {wn}, {wo}, {yn}, {}, {}, {}, {}, {}, {}, {}, {}, {})) return 1;",
        dims.join(", "),
        stride[0],
        stride[1],
        padding[0],
        padding[1],
        dilation[0],
        dilation[1],
        groups,
        c(&ws[1]),
    )?;
    if half {
        writeln!(
            out,
            "    for (size_t i = 0; i < kiln_cy.size(); ++i) {}[i] = {};",
            name(e.out),
            store_conversion(DType::Float32, d, "kiln_cy[i]")
        )?;
        writeln!(out, "    }}")?;
    }
    Ok(())
}

fn extern_call(
    out: &mut String,
    p: &Program,
    e: &crate::schedule::ir::ExternCall,
    name: &dyn Fn(BufferId) -> String,
) -> Result<(), Error> {
    let rank = match &e.op {
        ExternOp::Mm => 2,
        ExternOp::Bmm => 3,
        ExternOp::Addmm => {
            return Err(Error::Unsupported(
                "a matrix product with its bias in the library's epilogue: the cpu device's \
                 product takes no bias (the driver schedules it only for the Python wrapper)"
                    .into(),
            ))
        }
        ExternOp::Conv {
            stride,
            padding,
            dilation,
            groups,
        } => return conv_call(out, p, e, (stride, padding, dilation, *groups), name),
        ExternOp::Attention { .. } => {
            return Err(Error::Unsupported(
                "a fused attention call: the C++ wrapper takes attention decomposed \
                 (the pass pipeline decomposes it for C++ targets)"
                    .into(),
            ))
        }
        ExternOp::IndexCopy { dim, .. } => return index_copy_call(out, p, e, *dim, name),
        &ExternOp::SortRuns { descending, run } => {
            return sort_call(out, p, e, (descending, run, false), name)
        }
        &ExternOp::MergeRuns { descending, run } => {
            return sort_call(out, p, e, (descending, run, true), name)
        }
        ExternOp::GroupedMm => {
            return Err(Error::Unsupported(
                "a grouped product call: the C++ wrapper takes `_grouped_mm` decomposed \
                 (the pass pipeline decomposes it for C++ targets)"
                    .into(),
            ))
        }
    };
    let [a, b] = e.args.as_slice() else {
        return Err(Error::Unsupported(
            "an extern product needs two operands".into(),
        ));
    };
    if a.shape.len() != rank
        || b.shape.len() != rank
        || a.strides.len() != rank
        || b.strides.len() != rank
    {
        return Err(Error::Unsupported(format!(
            "`{}` operands of rank {} and {}",
            e.op.name(),
            a.shape.len(),
            b.shape.len()
        )));
    }
    let c = |s: &Size| size_text(s, Syntax::C);
    // (batch, stride) then the two matrix dims.
    let (batch, a_sb, b_sb) = if rank == 3 {
        (c(&a.shape[0]), c(&a.strides[0]), c(&b.strides[0]))
    } else {
        ("1".into(), "0".into(), "0".into())
    };
    let o = rank - 2;
    let (m, k, n) = (c(&a.shape[o]), c(&a.shape[o + 1]), c(&b.shape[o + 1]));
    let d = p.buffer(e.out).dtype;
    if d == DType::Bool {
        return Err(Error::Unsupported("a matrix product of bool".into()));
    }
    let acc = compute_type(d);
    let in_d = p.buffer(a.buf).dtype;
    if p.buffer(b.buf).dtype != in_d || in_d != d {
        return Err(Error::Unsupported(format!(
            "`{}` with operands of different dtypes",
            e.op.name()
        )));
    }
    writeln!(
        out,
        "    if (kiln_mm<{acc}>({batch}, {m}, {n}, {k}, {}, {}, {a_sb}, {}, {}, {}, {}, {b_sb}, {}, {}, {}, {}, {})) return 1;",
        name(a.buf),
        c(&a.offset),
        c(&a.strides[o]),
        c(&a.strides[o + 1]),
        name(b.buf),
        c(&b.offset),
        c(&b.strides[o]),
        c(&b.strides[o + 1]),
        name(e.out),
        mm_load(in_d),
        mm_store(d)
    )?;
    Ok(())
}

/// `index_copy` into its own result buffer: `self` copied whole, then each slice of the
/// source written at its index (an index out of range raises the fault `kiln_call`
/// reports as status 2). The cpu device writes no input in place: its C interface
/// takes them read-only.
/// A sort's step, each row the last dim of the first operand, written as the positions
/// within the row: each run of `run` elements in stable order (`sort_runs`), or with
/// `merge` each pair of the second operand's runs of `run` merged (`merge_runs`:
/// `std::inplace_merge`, stable). `order`: (descending, run, merge).
fn sort_call(
    out: &mut String,
    p: &Program,
    e: &crate::schedule::ir::ExternCall,
    order: (bool, i64, bool),
    name: &dyn Fn(BufferId) -> String,
) -> Result<(), Error> {
    let (descending, run, merge) = order;
    let (Some(x), dst) = (e.args.first(), p.buffer(e.out)) else {
        return Err(Error::Unsupported(format!(
            "`{}` of no operand",
            e.op.name()
        )));
    };
    let Some(last) = x
        .shape
        .len()
        .checked_sub(1)
        .filter(|_| x.shape == dst.shape)
    else {
        return Err(Error::Unsupported(format!(
            "`{}` of {:?} into {:?}",
            e.op.name(),
            x.shape,
            dst.shape
        )));
    };
    let c = |s: &Size| size_text(s, Syntax::C);
    let n = c(&x.shape[last]);
    let run = run.max(1);
    let runs = e.args.get(1).filter(|r| merge && r.shape == x.shape);
    if merge && runs.is_none() {
        return Err(Error::Unsupported(format!(
            "`merge_runs` of {:?} without runs of its shape",
            x.shape
        )));
    }
    let mut loops = String::new();
    let (mut base, mut obase) = (c(&x.offset), "0".to_string());
    let mut rbase = runs.map_or("0".to_string(), |r| c(&r.offset));
    for d in 0..last {
        loops += &format!("for (int64_t i{d} = 0; i{d} < {}; ++i{d}) ", c(&x.shape[d]));
        base += &format!(" + i{d} * {}", c(&x.strides[d]));
        obase += &format!(" + i{d} * {}", c(&dst.strides[d]));
        if let Some(r) = runs {
            rbase += &format!(" + i{d} * {}", c(&r.strides[d]));
        }
    }
    let element = |at: &str| {
        load_conversion(
            p.buffer(x.buf).dtype,
            &format!("{}[base + {at} * {}]", name(x.buf), c(&x.strides[last])),
        )
    };
    writeln!(out, "    {{  // {}", e.op.name())?;
    writeln!(out, "        std::vector<int64_t> kiln_order({n});")?;
    writeln!(out, "        {loops}{{")?;
    writeln!(
        out,
        "            const int64_t base = {base}, obase = {obase}, rbase = {rbase};"
    )?;
    let before = format!(
        "[&](int64_t a, int64_t b) {{ return kiln_sorts_before({}, {}, {descending}); }}",
        element("a"),
        element("b")
    );
    let step = if merge { 2 * run } else { run };
    writeln!(
        out,
        "            for (int64_t start = 0; start < {n}; start += {step}) {{"
    )?;
    writeln!(
        out,
        "                const int64_t end = std::min<int64_t>({n}, start + {step});"
    )?;
    match runs {
        Some(r) => {
            writeln!(
                out,
                "                for (int64_t j = start; j < end; ++j) kiln_order[j] = {}[rbase + j * {}];",
                name(r.buf),
                c(&r.strides[last])
            )?;
            writeln!(
                out,
                "                const int64_t mid = std::min<int64_t>(end, start + {run});"
            )?;
            writeln!(
                out,
                "                std::inplace_merge(kiln_order.begin() + start, kiln_order.begin() + mid, \
                 kiln_order.begin() + end, {before});"
            )?;
        }
        None => {
            writeln!(
                out,
                "                for (int64_t j = start; j < end; ++j) kiln_order[j] = j;"
            )?;
            writeln!(
                out,
                "                std::stable_sort(kiln_order.begin() + start, kiln_order.begin() + end, {before});"
            )?;
        }
    }
    writeln!(
        out,
        "                for (int64_t j = start; j < end; ++j) {}[obase + j * {}] = kiln_order[j];",
        name(e.out),
        c(&dst.strides[last])
    )?;
    writeln!(out, "            }}\n        }}\n    }}")?;
    Ok(())
}

fn index_copy_call(
    out: &mut String,
    p: &Program,
    e: &crate::schedule::ir::ExternCall,
    dim: usize,
    name: &dyn Fn(BufferId) -> String,
) -> Result<(), Error> {
    let [x, ix, src] = e.args.as_slice() else {
        return Err(Error::Unsupported(
            "index_copy needs self, an index and a source".into(),
        ));
    };
    let dst = p.buffer(e.out);
    let rank = dst.shape.len();
    if x.shape != dst.shape || src.shape.len() != rank || ix.shape.len() > 1 || dim >= rank {
        return Err(Error::Unsupported(format!(
            "index_copy of self {:?}, index {:?} and source {:?}",
            x.shape, ix.shape, src.shape
        )));
    }
    let c = |s: &Size| size_text(s, Syntax::C);
    // A loop per dim over `shape`, around `body` (with `i{d}` the indices; `dim` is `j`
    // where `skip` says so).
    let nest = |out: &mut String, shape: &[Size], skip: Option<usize>, body: &str| {
        let mut text = String::new();
        for (d, n) in shape.iter().enumerate() {
            if Some(d) != skip {
                text += &format!("for (int64_t i{d} = 0; i{d} < {}; ++i{d}) ", c(n));
            }
        }
        writeln!(out, "        {text}{body}")
    };
    let at = |offset: &Size, strides: &[Size], dim_as: Option<(usize, &str)>| -> String {
        let mut terms = vec![c(offset)];
        for (d, s) in strides.iter().enumerate() {
            let i = match dim_as {
                Some((k, v)) if k == d => v.to_string(),
                _ => format!("i{d}"),
            };
            terms.push(format!("{i} * {}", c(s)));
        }
        terms.join(" + ")
    };
    let o = name(e.out);
    writeln!(out, "    {{  // index_copy along dim {dim}")?;
    let copy = format!(
        "{o}[{}] = {}[{}];",
        at(&Size::from(0), &dst.strides, None),
        name(x.buf),
        at(&x.offset, &x.strides, None)
    );
    nest(out, &x.shape, None, &copy)?;
    // A 0-d index is one index.
    let (k, step) = (
        ix.shape.first().cloned().unwrap_or(Size::from(1)),
        ix.strides.first().cloned().unwrap_or(Size::from(0)),
    );
    writeln!(out, "        for (int64_t j = 0; j < {}; ++j) {{", c(&k))?;
    writeln!(
        out,
        "        const int64_t t = kiln_index_nonnegative(static_cast<int64_t>({}[{} + j * {}]), {});",
        name(ix.buf),
        c(&ix.offset),
        c(&step),
        c(&dst.shape[dim])
    )?;
    let write = format!(
        "{o}[{}] = {}[{}];",
        at(&Size::from(0), &dst.strides, Some((dim, "t"))),
        name(src.buf),
        at(&src.offset, &src.strides, Some((dim, "j")))
    );
    nest(out, &src.shape, Some(dim), &write)?;
    writeln!(out, "        }}")?;
    writeln!(out, "    }}")?;
    Ok(())
}

fn copy_out(
    out: &mut String,
    p: &Program,
    i: usize,
    v: &View,
    name: &dyn Fn(BufferId) -> String,
) -> Result<(), Error> {
    let d = p.buffer(v.buf).dtype;
    let ty = storage_type(d);
    if v.shape.iter().chain(&v.strides).any(|s| !s.is_const()) || !v.offset.is_const() {
        return copy_out_symbolic(out, i, v, ty, &name(v.buf));
    }
    let (shape, strides, offset) = (hints(&v.shape), hints(&v.strides), v.offset.hint());
    let numel: i64 = shape.iter().product();
    if numel <= 0 {
        return Ok(());
    }
    if crate::graph::shape::is_dense(&shape, &strides) {
        writeln!(
            out,
            "    std::memcpy(outputs[{i}], {} + {offset}, sizeof({ty}) * {numel});",
            name(v.buf),
        )?;
    } else {
        let list = |xs: &[i64]| {
            xs.iter()
                .map(|x| int_text(*x))
                .collect::<Vec<_>>()
                .join(", ")
        };
        writeln!(
            out,
            "    {{\n        static const int64_t shape[] = {{{}}};\n        static const int64_t strides[] = {{{}}};\n        \
             kiln_copy_out(outputs[{i}], {}, sizeof({ty}), {}, shape, strides, {});\n    }}",
            list(&shape),
            list(&strides),
            name(v.buf),
            shape.len(),
            offset
        )?;
    }
    Ok(())
}

/// [`copy_out`] of a view whose sizes are known at the call only: a copy of
/// its elements when it is dense at every size, else `kiln_copy_out` with its
/// sizes and strides at this call's.
fn copy_out_symbolic(
    out: &mut String,
    i: usize,
    v: &View,
    ty: &str,
    buf: &str,
) -> Result<(), Error> {
    let c = |s: &Size| size_text(s, Syntax::C);
    let offset = c(&v.offset);
    if layout::is_dense(&v.shape, &v.strides) {
        let numel = c(&crate::schedule::index::product(&v.shape));
        writeln!(
            out,
            "    std::memcpy(outputs[{i}], {buf} + {offset}, sizeof({ty}) * {numel});"
        )?;
        return Ok(());
    }
    let list = |xs: &[Size]| xs.iter().map(c).collect::<Vec<_>>().join(", ");
    writeln!(
        out,
        "    {{\n        const int64_t shape[] = {{{}}};\n        const int64_t strides[] = {{{}}};\n        \
         kiln_copy_out(outputs[{i}], {buf}, sizeof({ty}), {}, shape, strides, {offset});\n    }}",
        list(&v.shape),
        list(&v.strides),
        v.shape.len(),
    )?;
    Ok(())
}
