//! `wrapper.cpp` for a Triton device: AOTInductor's role, without PyTorch.
//! The kernels are compiled ahead of time (`kernels.py --precompile`, into
//! `kernels/`), and the wrapper loads them with the plugin's `loadKernel`,
//! launches them with its `launchKernel` on the caller's stream, and calls
//! the plugin's `kilnGemm` for matrix products. The plugin's `kernel_header`
//! and `kernel_driver` are pasted in unchanged, after the standard headers.
//!
//! ```c
//! int kiln_init(const char* dir);   // the folder `host compile` wrote
//! int kiln_call(const void* const* inputs, void* const* outputs, void* stream);
//! int kiln_run_host(const void* const* inputs, void* const* outputs);
//! void kiln_release(void);
//! int kiln_device_graphs(void);  // 1: kiln_call replays a captured graph (--cuda-graph)
//! const char* kiln_last_error(void);
//! int kiln_input_rank(int i);  long long kiln_input_size(int i, int d);
//! const char* kiln_input_dtype(int i);  // and kiln_output_*: what to allocate
//! ```
//!
//! `kiln_init` loads every kernel from `dir/kernels`, reads the weights from
//! `dir/weights.safetensors`, and puts every constant (weights, small
//! literals, fills) in one device block; it also allocates the workspace, one
//! device arena for the intermediates laid out from the memory plan (the C++
//! wrapper's [`Layout`]). `kiln_call` takes device pointers, one dense
//! row-major tensor per graph input and output, 16-byte aligned (the kernels
//! are compiled to assume it), and launches everything on `stream` (the
//! driver's stream type; null for its default stream). Calls share the
//! workspace: one at a time. `kiln_run_host` takes host memory instead,
//! copies it in and out around a call on the default stream, and waits: what
//! `host run` uses. Return codes: 0, 3 when `kiln_init` has not succeeded,
//! 4 for a pointer that is not 16-byte aligned, 5 for a driver error; the
//! reason of any failure is in `kiln_last_error()`.
//!
//! Beyond `loadKernel` and `launchKernel`, the wrapper calls the device-memory
//! functions of the driver text (`kilnDeviceAlloc`, `kilnDeviceFree`,
//! `kilnCopyToDevice`, `kilnCopyToHost`, `kilnCopyOnDevice`,
//! `kilnSynchronize`: `kiln_plugin_kit::driver::device_memory` writes them for
//! a CUDA-like API) and, for matrix products, `kilnGemm`.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write;

use super::super::cpp::runtime;
use super::cpp::element_text;
use super::cpp::layout::Layout;
use crate::codegen::cpp::expr::storage_type;
use crate::codegen::namer::sanitize;
use crate::codegen::triton::attention::{runtime_scalars, AttentionLaunch};
use crate::codegen::triton::{self, KernelInfo};
use crate::codegen::weights;
use crate::graph::dtype::DType;
use crate::graph::ops::ConstData;
use crate::graph::shape::is_dense;
use crate::plugins::cpp_text::defines_function;
use crate::schedule::ir::{BufferId, BufferKind, ExternCall, ExternOp, Program, Step, View};
use crate::schedule::Scheduled;

/// Bumped when the entry points change (the cpu device's `wrapper.cpp` is
/// version 2, with another `kiln_call`).
pub const ABI_VERSION: i32 = 3;

/// The device-memory functions the wrapper calls, which the plugin's
/// `kernel_driver` must define besides `loadKernel` and `launchKernel`.
pub const MEMORY_FUNCTIONS: [&str; 7] = [
    "kilnDeviceAlloc",
    "kilnDeviceFree",
    "kilnCopyToDevice",
    "kilnCopyToHost",
    "kilnCopyOnDevice",
    "kilnSynchronize",
    "kilnSetDevice",
];

/// The functions a wrapper that captures its call into a device graph
/// (`--cuda-graph`) calls, which the plugin's `kernel_driver` must then
/// define (the cuda plugin's does).
pub const GRAPH_FUNCTIONS: [&str; 5] = [
    "kilnGraphBegin",
    "kilnGraphEnd",
    "kilnGraphAbort",
    "kilnGraphLaunch",
    "kilnGraphDestroy",
];

/// How the wrapper runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// The device `kiln_init` makes current (`cuda:1` is 1).
    pub device_index: u32,
    /// Capture the whole call into a device graph the first time it sees a
    /// set of pointers and a stream, and replay it while they stay the same
    /// (`--cuda-graph`).
    pub graphs: bool,
}

/// The matrix product the wrapper calls for `mm`/`bmm`, where the plugin's
/// `kernel_driver` defines it.
pub const GEMM_FUNCTION: &str = "kilnGemm";

/// Bytes each constant is aligned to in the constants block.
const CONSTANT_ALIGN: u64 = 64;

/// Why the wrapper could not be written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The program or the plugin asks for something this wrapper cannot do.
    #[error("{0}")]
    Unsupported(String),
    /// A kernel has no compiled binary.
    #[error("kernel `{kernel}` has no compiled binary in kernels/ (run `python kernels.py --precompile` there, or compile again)")]
    MissingBinary {
        /// The kernel.
        kernel: String,
    },
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

/// A kernel compiled ahead of time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binary {
    /// Its file, relative to the output folder, `/`-separated.
    pub path: String,
    /// The function's name in it.
    pub function: String,
    /// Dynamic shared memory it launches with, in bytes.
    pub shared: u32,
}

/// The plugin's strings the wrapper is built from.
#[derive(Clone, Debug)]
pub struct Strings {
    /// `kernel_header()`.
    pub header: String,
    /// `kernel_driver()`.
    pub driver: String,
    /// `cpp_stream_type()`.
    pub stream_type: String,
    /// `cpp_kernel_type()`.
    pub kernel_type: String,
    /// The device's name.
    pub device: String,
    /// Who generated it, for the first comment (`cuda 0.1.0`).
    pub origin: String,
}

/// What the wrapper needs, for loaders and reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Info {
    /// `kiln_abi_version()`.
    pub abi_version: i32,
    /// Device bytes of the workspace of intermediates.
    pub workspace_bytes: u64,
    /// Device bytes of the constants block.
    pub constants_bytes: u64,
    /// Kernel launches per call.
    pub kernels: usize,
}

/// The kernels a program launches, each once, in order of first use: the
/// binaries `kiln_init` loads.
pub fn kernel_names(kernels: &triton::Kernels) -> Vec<String> {
    let mut seen = BTreeSet::new();
    kernels
        .info
        .iter()
        .map(|k| k.name.clone())
        .chain(kernels.attention.kernels.iter().map(|k| k.name.clone()))
        .filter(|n| seen.insert(n.clone()))
        .collect()
}

/// What the wrapper can do without the binaries: refuses programs it cannot
/// run (autotuned kernels, convolutions, matrix products the plugin has no
/// `kilnGemm` for or whose operands no BLAS reads, strided outputs) before
/// anything is compiled.
pub fn check(
    scheduled: &Scheduled,
    kernels: &triton::Kernels,
    strings: &Strings,
    options: &Options,
) -> Result<(), Error> {
    if options.graphs {
        if let Some(function) = GRAPH_FUNCTIONS
            .into_iter()
            .find(|f| !defines_function(&strings.driver, f))
        {
            return Err(Error::Unsupported(format!(
                "--cuda-graph captures the call with the plugin's graph functions, and the {}                  plugin's kernel_driver does not define `{function}`; leave --cuda-graph out",
                strings.device
            )));
        }
    }
    for function in ["loadKernel", "launchKernel"]
        .into_iter()
        .chain(MEMORY_FUNCTIONS)
    {
        if !defines_function(&strings.driver, function) {
            return Err(Error::Unsupported(format!(
                "the {} plugin's kernel_driver does not define `{function}`, which Kiln's C++ wrapper \
                 calls (kiln_plugin_kit::driver::device_memory writes the device-memory functions for a \
                 CUDA-like API); use the Python wrapper",
                strings.device
            )));
        }
    }
    if let Some(k) = kernels.info.iter().find(|k| k.candidates.len() > 1) {
        return Err(Error::Unsupported(format!(
            "kernel `{}` is autotuned, which needs Triton at run time: leave --autotune out for --wrapper cpp",
            k.name
        )));
    }
    let p = &scheduled.program;
    for (i, step) in p.steps.iter().enumerate() {
        if let Step::Extern(e) = step {
            match &e.op {
                ExternOp::Mm | ExternOp::Bmm => {
                    if !defines_function(&strings.driver, GEMM_FUNCTION) {
                        return Err(Error::Unsupported(format!(
                            "a matrix product (`{}`): the {} plugin's kernel_driver defines no \
                             `{GEMM_FUNCTION}` for the C++ wrapper; use the Python wrapper",
                            e.op.name(),
                            strings.device
                        )));
                    }
                    gemm(p, e)?;
                }
                ExternOp::Conv { .. } => {
                    return Err(Error::Unsupported(
                        "a convolution: Kiln's C++ wrapper for Triton devices has no convolution \
                         yet; use the Python wrapper (output_code.py)"
                            .into(),
                    ))
                }
                ExternOp::Attention { .. } => {
                    if !kernels.attention.launches.contains_key(&i) {
                        return Err(Error::Unsupported(
                            "an attention step without a fused kernel".into(),
                        ));
                    }
                }
            }
        }
    }
    for (i, v) in p.outputs.iter().enumerate() {
        if !is_dense(&v.shape, &v.strides) {
            return Err(Error::Unsupported(format!(
                "output {i} is a strided view (sizes {:?}, strides {:?}) of another tensor: Kiln's \
                 C++ wrapper for Triton devices returns dense tensors only (make it contiguous in \
                 the graph, or use the Python wrapper)",
                v.shape, v.strides
            )));
        }
    }
    Ok(())
}

/// A matrix product as BLAS sees it: row-major `C = op(A) · op(B)`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Gemm {
    dtype: u8,
    batch: i64,
    m: i64,
    n: i64,
    k: i64,
    a: (bool, i64, i64),
    b: (bool, i64, i64),
    c: (i64, i64),
}

/// One operand, `rows × cols` with strides `(s_rows, s_cols)`, as BLAS reads
/// it: `(transposed, leading dimension)`, or `None` when neither dim is
/// unit-stride (or rows would overlap).
fn blas_operand(rows: i64, cols: i64, s_rows: i64, s_cols: i64) -> Option<(bool, i64)> {
    let fits = |ld: i64, inner: i64| ld >= inner.max(1) && ld <= i64::from(i32::MAX);
    if cols == 1 || s_cols == 1 {
        let ld = if rows == 1 { cols.max(1) } else { s_rows };
        if fits(ld, cols) {
            return Some((false, ld));
        }
    }
    if rows == 1 || s_rows == 1 {
        let ld = if cols == 1 { rows.max(1) } else { s_cols };
        if fits(ld, rows) {
            return Some((true, ld));
        }
    }
    None
}

fn gemm(p: &Program, e: &ExternCall) -> Result<Gemm, Error> {
    let [a, b] = e.args.as_slice() else {
        return Err(Error::Unsupported(
            "a matrix product needs two operands".into(),
        ));
    };
    let rank = if matches!(e.op, ExternOp::Bmm) { 3 } else { 2 };
    if a.shape.len() != rank || b.shape.len() != rank {
        return Err(Error::Unsupported(format!(
            "`{}` of operands of rank {} and {}",
            e.op.name(),
            a.shape.len(),
            b.shape.len()
        )));
    }
    let out = p.buffer(e.out);
    let d = out.dtype;
    let dtype = match d {
        DType::Float32 => 0,
        DType::Float16 => 1,
        DType::BFloat16 => 2,
        other => {
            return Err(Error::Unsupported(format!(
                "a matrix product of {}: the C++ wrapper's kilnGemm takes float32, float16 and bfloat16",
                other.name()
            )))
        }
    };
    if p.buffer(a.buf).dtype != d || p.buffer(b.buf).dtype != d {
        return Err(Error::Unsupported(format!(
            "`{}` with operands of different dtypes",
            e.op.name()
        )));
    }
    let o = rank - 2;
    let (m, k, n) = (a.shape[o], a.shape[o + 1], b.shape[o + 1]);
    let batch = if rank == 3 { a.shape[0] } else { 1 };
    if !is_dense(&out.shape, &out.strides) {
        return Err(Error::Unsupported(format!(
            "`{}` into a strided buffer",
            e.op.name()
        )));
    }
    let operand = |v: &View, rows: i64, cols: i64, what: &str| {
        blas_operand(rows, cols, v.strides[o], v.strides[o + 1])
            .map(|(t, ld)| (t, ld, if rank == 3 { v.strides[0] } else { 0 }))
            .ok_or_else(|| {
                Error::Unsupported(format!(
                    "`{}` whose {what} operand (sizes {:?}, strides {:?}) has no unit-stride dim, \
                     which BLAS needs; use the Python wrapper",
                    e.op.name(),
                    v.shape,
                    v.strides
                ))
            })
    };
    let too_big = [m, n, k, batch].iter().any(|&x| x > i64::from(i32::MAX));
    if too_big {
        return Err(Error::Unsupported(format!(
            "`{}` with a dim over 2^31 - 1",
            e.op.name()
        )));
    }
    Ok(Gemm {
        dtype,
        batch,
        m,
        n,
        k,
        a: operand(a, m, k, "first")?,
        b: operand(b, k, n, "second")?,
        c: (n.max(1), m * n),
    })
}

/// The binaries `kernels.py --precompile` wrote into `dir/kernels` for
/// `kernels` (by name), from its `manifest.json` and each kernel's Triton
/// metadata (`NAME.json`: the function's name and its shared memory).
pub fn read_binaries(
    dir: &std::path::Path,
    kernels: &[String],
) -> Result<HashMap<String, Binary>, String> {
    let folder = dir.join("kernels");
    let manifest_path = folder.join("manifest.json");
    let text = std::fs::read_to_string(&manifest_path).map_err(|e| {
        format!(
            "cannot read {}: {e} (it is written by `python kernels.py --precompile`)",
            manifest_path.display()
        )
    })?;
    let manifest: HashMap<String, String> = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a kernel manifest: {e}", manifest_path.display()))?;
    let mut binaries = HashMap::new();
    for name in kernels {
        let key = manifest.get(name).ok_or_else(|| {
            format!(
                "kernel `{name}` was not compiled ({} does not list it)",
                manifest_path.display()
            )
        })?;
        if key.contains(['/', '\\']) || key.starts_with('.') {
            return Err(format!(
                "{} names the folder {key:?} for `{name}`, outside kernels/",
                manifest_path.display()
            ));
        }
        let meta_path = folder.join(key).join(format!("{name}.json"));
        let meta: serde_json::Value = std::fs::read_to_string(&meta_path)
            .map_err(|e| format!("cannot read {}: {e}", meta_path.display()))
            .and_then(|t| {
                serde_json::from_str(&t)
                    .map_err(|e| format!("{} is not Triton metadata: {e}", meta_path.display()))
            })?;
        let field = |f: &str| meta.get(f).and_then(serde_json::Value::as_u64);
        let shared = field("shared")
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| format!("{} gives no shared-memory size", meta_path.display()))?;
        if field("global_scratch_size").unwrap_or(0) > 0 {
            return Err(format!(
                "kernel `{name}` needs Triton's global scratch memory, which Kiln's C++ wrapper does not allocate"
            ));
        }
        let function = meta
            .get("name")
            .and_then(serde_json::Value::as_str)
            .unwrap_or(name)
            .to_string();
        let binary = std::fs::read_dir(folder.join(key))
            .map_err(|e| format!("cannot list {}: {e}", folder.join(key).display()))?
            .filter_map(|entry| entry.ok())
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .find(|file| file.starts_with(&format!("{name}.")) && !file.ends_with(".json"))
            .ok_or_else(|| {
                format!(
                    "{} holds no binary of `{name}` beside its metadata",
                    folder.join(key).display()
                )
            })?;
        binaries.insert(
            name.clone(),
            Binary {
                path: format!("kernels/{key}/{binary}"),
                function,
                shared,
            },
        );
    }
    Ok(binaries)
}

/// A C++ string literal of `text`.
fn c_str(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '?' => out.push_str("\\?"),
            c if c.is_ascii() && !c.is_ascii_control() => out.push(c),
            c => {
                let mut bytes = [0u8; 4];
                for b in c.encode_utf8(&mut bytes).bytes() {
                    out.push_str(&format!("\\{b:03o}"));
                }
            }
        }
    }
    out.push('"');
    out
}

/// The C++ type of a Triton scalar signature type.
fn scalar_type(triton: &str) -> Result<&'static str, Error> {
    Ok(match triton {
        "i32" => "int32_t",
        "i64" => "int64_t",
        "fp32" => "float",
        "fp64" => "double",
        "i1" => "bool",
        other => {
            return Err(Error::Unsupported(format!(
                "a kernel scalar of Triton type {other}"
            )))
        }
    })
}

/// A Python literal of a scalar (an attention launch's) as C++.
fn scalar_value(text: &str, ty: &str) -> Result<String, Error> {
    let bad = || Error::Unsupported(format!("a kernel scalar `{text}`"));
    match ty {
        "float" | "double" => {
            let v: f64 = match text {
                "float('inf')" | "math.inf" => f64::INFINITY,
                "float('-inf')" | "-math.inf" => f64::NEG_INFINITY,
                t => t.parse().map_err(|_| bad())?,
            };
            Ok(if v.is_infinite() {
                format!(
                    "{}std::numeric_limits<{ty}>::infinity()",
                    if v < 0.0 { "-" } else { "" }
                )
            } else {
                format!("static_cast<{ty}>({v:e})")
            })
        }
        "bool" => Ok(match text {
            "True" | "1" => "true".into(),
            "False" | "0" => "false".into(),
            _ => return Err(bad()),
        }),
        _ => {
            let v: i64 = text.parse().map_err(|_| bad())?;
            Ok(format!("static_cast<{ty}>({v}LL)"))
        }
    }
}

/// The constants block: every constant a step reads or an output returns,
/// at its offset.
fn constant_offsets(p: &Program) -> (Vec<(BufferId, u64)>, u64) {
    let mut total = 0u64;
    let mut placed = Vec::new();
    for b in p.constants_read() {
        let bytes = p.buffer(b).bytes().max(0) as u64;
        if bytes == 0 {
            continue;
        }
        placed.push((b, total));
        total += bytes.div_ceil(CONSTANT_ALIGN) * CONSTANT_ALIGN;
    }
    (placed, total)
}

/// Writes `wrapper.cpp` for `scheduled` around `kernels`, compiled into
/// `binaries` (by kernel name); `names` names every buffer (C++
/// identifiers, distinct from every name of the plugin's strings).
pub fn write(
    scheduled: &Scheduled,
    kernels: &triton::Kernels,
    binaries: &HashMap<String, Binary>,
    strings: &Strings,
    names: &HashMap<BufferId, String>,
    options: &Options,
) -> Result<(String, Info), Error> {
    check(scheduled, kernels, strings, options)?;
    let p = &scheduled.program;
    let by_step: HashMap<usize, &KernelInfo> = kernels.info.iter().map(|k| (k.step, k)).collect();
    if let Some(step) = (0..p.steps.len())
        .find(|i| matches!(p.steps[*i], Step::Kernel(_)) && !by_step.contains_key(i))
    {
        return Err(Error::MissingKernel { step });
    }
    let loaded = kernel_names(kernels);
    let handles: HashMap<&str, String> = loaded
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), format!("kiln_kernel_{i}")))
        .collect();
    for name in &loaded {
        if !binaries.contains_key(name) {
            return Err(Error::MissingBinary {
                kernel: name.clone(),
            });
        }
    }
    let name = |b: BufferId| names.get(&b).cloned().unwrap_or_else(|| "nullptr".into());
    let (constants, constants_bytes) = constant_offsets(p);
    let weights: Vec<(String, BufferId)> = constants
        .iter()
        .filter(|(b, _)| weights::in_file(p, *b))
        .map(|(b, _)| (name(*b), *b))
        .collect();
    let layout = Layout::new(scheduled, &[]);
    let workspace_bytes = if layout.uses_arena() {
        layout.arena_bytes
    } else {
        0
    };

    let mut out = String::new();
    writeln!(
        out,
        "// Generated by Kiln ({}) for graph `{}`, device `{}`: Triton kernels from kernels/,\n\
         // launched through the plugin's kernel_driver. Entry points:\n\
         //   int kiln_init(const char* dir);  // the folder host compile wrote\n\
         //   int kiln_call(const void* const* inputs, void* const* outputs, void* stream);\n\
         //   int kiln_run_host(const void* const* inputs, void* const* outputs);\n\
         // inputs/outputs: device pointers (host memory for kiln_run_host), one dense row-major\n\
         // tensor per graph input/output, 16-byte aligned. Returns 0; 3 when kiln_init has not\n\
         // succeeded, 4 for a misaligned pointer, 5 for a driver error (kiln_last_error()).",
        strings.origin,
        sanitize(&p.name),
        strings.device
    )?;
    writeln!(
        out,
        "// Build: c++ -O2 -std=c++17 -shared -fPIC wrapper.cpp FLAGS -o kiln.so, FLAGS being the \
         {} plugin's cpp_build_flags\n\
         // (its toolkit's folders and libraries); `host run --device {}` builds and runs it so.",
        strings.device, strings.device
    )?;
    out.push_str(STD_HEADERS);
    out.push_str(&strings.header);
    if !strings.header.ends_with('\n') {
        out.push('\n');
    }
    out.push('\n');
    out.push_str(&strings.driver);
    if !strings.driver.ends_with('\n') {
        out.push('\n');
    }
    if !weights.is_empty() {
        out.push_str(runtime::WEIGHTS.body());
    } else {
        out.push_str(ERROR_TEXT);
    }
    writeln!(out)?;
    writeln!(out, "static unsigned char* kiln_constants = nullptr;")?;
    writeln!(out, "static unsigned char* kiln_workspace = nullptr;")?;
    writeln!(out, "static bool kiln_ready = false;")?;
    if options.graphs {
        writeln!(
            out,
            "// The captured call, and the pointers and stream it was captured with.
             static void* kiln_graph = nullptr;
             static std::array<const void*, {}> kiln_graph_key{{}};",
            p.inputs.len() + p.outputs.len() + 1
        )?;
    }
    for name in &loaded {
        writeln!(
            out,
            "static {} {}; // {name}",
            strings.kernel_type,
            handles[name.as_str()]
        )?;
    }
    write_literals(&mut out, p, &constants, &name)?;
    if !weights.is_empty() {
        writeln!(
            out,
            "static const KilnWeightSpec kiln_weight_specs[{}] = {{",
            weights.len()
        )?;
        for (key, b) in &weights {
            let buf = p.buffer(*b);
            writeln!(
                out,
                "    {{{}, \"{}\", {}ull}},",
                c_str(key),
                weights::header_name(buf.dtype),
                buf.bytes().max(0)
            )?;
        }
        writeln!(out, "}};")?;
    }
    let fail = "std::snprintf(kiln_error_text, sizeof kiln_error_text, \"%s\", e.what());";
    writeln!(
        out,
        "\nextern \"C\" int kiln_abi_version(void) {{ return {ABI_VERSION}; }}\n\
         extern \"C\" int kiln_num_inputs(void) {{ return {}; }}\n\
         extern \"C\" int kiln_num_outputs(void) {{ return {}; }}\n\
         extern \"C\" uint64_t kiln_workspace_bytes(void) {{ return {workspace_bytes}ull; }}\n\
         // 1 when kiln_call replays a captured device graph (--cuda-graph).\n\
         extern \"C\" int kiln_device_graphs(void) {{ return {}; }}\n\
         extern \"C\" const char* kiln_last_error(void) {{ return kiln_error_text; }}",
        p.inputs.len(),
        p.outputs.len(),
        i32::from(options.graphs)
    )?;
    writeln!(
        out,
        "\n// Frees the constants and the workspace (the kernels stay loaded).\n\
         extern \"C\" void kiln_release(void) {{\n    \
         kiln_ready = false;\n    \
         try {{\n        \
         {}\
         kilnDeviceFree(kiln_constants);\n        \
         kilnDeviceFree(kiln_workspace);\n    \
         }} catch (const std::exception&) {{\n    \
         }}\n    \
         kiln_constants = nullptr;\n    \
         kiln_workspace = nullptr;\n\
         }}",
        if options.graphs {
            "kilnGraphDestroy(kiln_graph);\n        kiln_graph = nullptr;\n        "
        } else {
            ""
        }
    )?;
    // kiln_init
    writeln!(
        out,
        "\n// Loads the kernels and the weights from `dir`, and allocates the workspace.\n\
         extern \"C\" int kiln_init(const char* dir) {{\n    \
         kiln_release();\n    \
         const std::string base = dir != nullptr && *dir != '\\0' ? std::string(dir) + \"/\" : std::string();\n    \
         try {{\n        \
         kilnSetDevice({});",
        options.device_index
    )?;
    for n in &loaded {
        let bin = &binaries[n];
        writeln!(
            out,
            "        {} = loadKernel(base + {}, {}, {}u);",
            handles[n.as_str()],
            c_str(&bin.path),
            c_str(&bin.function),
            bin.shared
        )?;
    }
    writeln!(
        out,
        "        kiln_constants = static_cast<unsigned char*>(kilnDeviceAlloc({constants_bytes}ull));"
    )?;
    if !weights.is_empty() {
        writeln!(
            out,
            "        const void* found[{}];\n        \
             const std::string path = base + {};\n        \
             if (kiln_read_weights(path.c_str(), kiln_weight_specs, {}, found) != 0) {{\n            \
             kiln_release();\n            \
             return 3;\n        \
             }}",
            weights.len(),
            c_str(weights::FILE_NAME),
            weights.len()
        )?;
    }
    let weight_index: HashMap<BufferId, usize> = weights
        .iter()
        .enumerate()
        .map(|(i, (_, b))| (*b, i))
        .collect();
    for &(b, offset) in &constants {
        let buf = p.buffer(b);
        let bytes = buf.bytes().max(0);
        match &buf.kind {
            BufferKind::Constant {
                data: ConstData::Fill(v),
            } => {
                writeln!(
                    out,
                    "        {{\n            \
                     const std::vector<{ty}> fill({n}, {value});\n            \
                     kilnCopyToDevice(kiln_constants + {offset}, fill.data(), {bytes});\n        \
                     }}",
                    ty = storage_type(buf.dtype),
                    n = buf.numel(),
                    value = element_text(*v, buf.dtype),
                )?;
            }
            _ => {
                let source = match weight_index.get(&b) {
                    Some(i) => format!("found[{i}]"),
                    None => name(b),
                };
                writeln!(
                    out,
                    "        kilnCopyToDevice(kiln_constants + {offset}, {source}, {bytes});"
                )?;
            }
        }
    }
    if !weights.is_empty() {
        writeln!(
            out,
            "        std::free(kiln_weights_file);\n        kiln_weights_file = nullptr;"
        )?;
    }
    writeln!(
        out,
        "        kiln_workspace = static_cast<unsigned char*>(kilnDeviceAlloc({workspace_bytes}ull));\n    \
         }} catch (const std::exception& e) {{\n        \
         {fail}\n        \
         kiln_release();\n        \
         return 5;\n    \
         }}\n    \
         kiln_ready = true;\n    \
         return 0;\n\
         }}"
    )?;
    // kiln_call
    writeln!(
        out,
        "\n// Runs the graph on `stream`: device pointers, one dense tensor per input and output.\n\
         {}(const void* const* inputs, void* const* outputs, void* stream_handle) {{\n    \
         if (!kiln_ready) {{\n        \
         std::snprintf(kiln_error_text, sizeof kiln_error_text, \"%s\", \"kiln_init has not succeeded\");\n        \
         return 3;\n    \
         }}",
        if options.graphs {
            "static int kiln_launch"
        } else {
            "extern \"C\" int kiln_call"
        }
    )?;
    for (what, count) in [("inputs", p.inputs.len()), ("outputs", p.outputs.len())] {
        if count > 0 {
            writeln!(
                out,
                "    for (int i = 0; i < {count}; ++i) {{\n        \
                 if (reinterpret_cast<uintptr_t>({what}[i]) % 16 != 0) {{\n            \
                 std::snprintf(kiln_error_text, sizeof kiln_error_text,\n                          \
                 \"{what}[%d] is not 16-byte aligned, which the kernels assume\", i);\n            \
                 return 4;\n        \
                 }}\n    \
                 }}"
            )?;
        }
    }
    writeln!(
        out,
        "    try {{\n        \
         // The driver's stream type, from the caller's handle (null: the default stream).\n        \
         {st} stream = ({st})stream_handle;\n        \
         [[maybe_unused]] unsigned char* const ws = kiln_workspace;\n        \
         // Triton's scratch parameters (global, profile): none of Kiln's kernels use them.\n        \
         [[maybe_unused]] void* kiln_scratch = nullptr;",
        st = strings.stream_type
    )?;
    for (i, b) in p.inputs.iter().enumerate() {
        writeln!(
            out,
            "        [[maybe_unused]] void* {} = const_cast<void*>(inputs[{i}]);",
            name(*b)
        )?;
    }
    for &(b, offset) in &constants {
        writeln!(
            out,
            "        [[maybe_unused]] void* {} = kiln_constants + {offset};",
            name(b)
        )?;
    }
    let mut declared: BTreeSet<BufferId> = p.inputs.iter().copied().collect();
    declared.extend(constants.iter().map(|(b, _)| *b));
    for step_allocs in &scheduled.memory.allocs {
        for a in step_allocs {
            if declared.insert(a.buf) {
                writeln!(
                    out,
                    "        [[maybe_unused]] void* {} = {};",
                    name(a.buf),
                    layout.at(a.buf)
                )?;
            }
        }
    }
    let mut launches = 0;
    for (i, step) in p.steps.iter().enumerate() {
        match step {
            Step::Kernel(_) => {
                let k = by_step.get(&i).ok_or(Error::MissingKernel { step: i })?;
                launch(&mut out, k, &handles, binaries, &name)?;
                launches += 1;
            }
            Step::Extern(e) => match kernels.attention.launches.get(&i) {
                Some(l) => {
                    attention_launch(&mut out, p, l, kernels, &handles, binaries, &name)?;
                    launches += 1;
                }
                None => {
                    let g = gemm(p, e)?;
                    gemm_call(&mut out, p, e, &g, &name)?;
                }
            },
        }
    }
    for (i, v) in p.outputs.iter().enumerate() {
        if layout.in_place(i, v) {
            continue;
        }
        let bytes =
            v.shape.iter().product::<i64>().max(0) * p.buffer(v.buf).dtype.size_bytes() as i64;
        if bytes > 0 {
            writeln!(
                out,
                "        kilnCopyOnDevice(outputs[{i}], {}, {bytes}, stream);",
                pointer(p, v, &name)
            )?;
        }
    }
    writeln!(
        out,
        "    }} catch (const std::exception& e) {{\n        \
         {fail}\n        \
         return 5;\n    \
         }}\n    \
         return 0;\n\
         }}"
    )?;
    if options.graphs {
        write_graph_call(
            &mut out,
            p.inputs.len(),
            p.outputs.len(),
            &strings.stream_type,
        )?;
    }
    write_run_host(&mut out, p, &strings.stream_type)?;
    write_signature(&mut out, p)?;
    let info = Info {
        abi_version: ABI_VERSION,
        workspace_bytes,
        constants_bytes,
        kernels: launches,
    };
    Ok((out, info))
}

/// A view as a device pointer expression (its buffer from the view's offset).
fn pointer(p: &Program, v: &View, name: &dyn Fn(BufferId) -> String) -> String {
    if v.offset == 0 {
        name(v.buf)
    } else {
        let bytes = v.offset * p.buffer(v.buf).dtype.size_bytes() as i64;
        format!(
            "static_cast<void*>(static_cast<unsigned char*>({}) + {bytes})",
            name(v.buf)
        )
    }
}

/// Constants small enough to live in the code, as static arrays that
/// `kiln_init` copies to the device.
fn write_literals(
    out: &mut String,
    p: &Program,
    constants: &[(BufferId, u64)],
    name: &dyn Fn(BufferId) -> String,
) -> std::fmt::Result {
    for &(b, _) in constants {
        let buf = p.buffer(b);
        let BufferKind::Constant { data } = &buf.kind else {
            continue;
        };
        if matches!(data, ConstData::Fill(_)) || weights::in_file(p, b) {
            continue;
        }
        let n = buf.numel().max(0) as usize;
        let items: Vec<String> = (0..n)
            .map(|j| element_text(data.get(j), buf.dtype))
            .collect();
        writeln!(
            out,
            "static const {} {}[{n}] = {{{}}};",
            storage_type(buf.dtype),
            name(b),
            items.join(", ")
        )?;
    }
    Ok(())
}

/// One kernel launch: its pointers, `xnumel` (and `rnumel`), and the scratch
/// parameters Triton appends, on the kernel's grid.
fn launch(
    out: &mut String,
    k: &KernelInfo,
    handles: &HashMap<&str, String>,
    binaries: &HashMap<String, Binary>,
    name: &dyn Fn(BufferId) -> String,
) -> std::fmt::Result {
    let index = if k.int64_index { "int64_t" } else { "int32_t" };
    let mut args: Vec<String> = k.args.iter().map(|b| format!("&{}", name(*b))).collect();
    writeln!(out, "        {{ // {}", k.name)?;
    writeln!(out, "            {index} xnumel = {};", k.xnumel)?;
    args.push("&xnumel".into());
    if let Some(r) = k.rnumel {
        writeln!(out, "            {index} rnumel = {r};")?;
        args.push("&rnumel".into());
    }
    args.extend(["&kiln_scratch".to_string(), "&kiln_scratch".to_string()]);
    let g = &k.launch.grid;
    writeln!(
        out,
        "            void* args[] = {{{}}};\n            \
         launchKernel({}, {}u, {}u, {}u, {}u, {}u, args, stream);\n        \
         }}",
        args.join(", "),
        handles[k.name.as_str()],
        g.x,
        g.y,
        g.z,
        k.launch.num_warps,
        binaries[&k.name].shared
    )
}

/// A fused attention kernel's launch: view pointers, then its runtime scalars.
fn attention_launch(
    out: &mut String,
    p: &Program,
    l: &AttentionLaunch,
    kernels: &triton::Kernels,
    handles: &HashMap<&str, String>,
    binaries: &HashMap<String, Binary>,
    name: &dyn Fn(BufferId) -> String,
) -> Result<(), Error> {
    let kernel = kernels
        .attention
        .kernels
        .iter()
        .find(|k| k.name == l.kernel)
        .ok_or_else(|| Error::Unsupported(format!("attention kernel `{}` not found", l.kernel)))?;
    let scalar_types = kernel.signature.get(l.pointers.len()..).unwrap_or(&[]);
    // The strides compiled into the kernel are not passed.
    let scalars = runtime_scalars(kernel, l);
    if scalar_types.len() != scalars.len() {
        return Err(Error::Unsupported(format!(
            "attention kernel `{}`: {} scalars for {} parameters",
            l.kernel,
            scalars.len(),
            scalar_types.len()
        )));
    }
    writeln!(out, "        {{ // {}", l.kernel)?;
    let mut args = Vec::new();
    for (i, v) in l.pointers.iter().enumerate() {
        writeln!(out, "            void* p{i} = {};", pointer(p, v, name))?;
        args.push(format!("&p{i}"));
    }
    for (i, (value, (_, ty))) in scalars.into_iter().zip(scalar_types).enumerate() {
        let c = scalar_type(ty)?;
        writeln!(out, "            {c} s{i} = {};", scalar_value(value, c)?)?;
        args.push(format!("&s{i}"));
    }
    args.extend(["&kiln_scratch".to_string(), "&kiln_scratch".to_string()]);
    writeln!(
        out,
        "            void* args[] = {{{}}};\n            \
         launchKernel({}, {}u, {}u, {}u, {}u, {}u, args, stream);\n        \
         }}",
        args.join(", "),
        handles[l.kernel.as_str()],
        l.grid.x,
        l.grid.y,
        l.grid.z,
        l.num_warps,
        binaries[&l.kernel].shared
    )?;
    Ok(())
}

/// A matrix product through the plugin's `kilnGemm`.
fn gemm_call(
    out: &mut String,
    p: &Program,
    e: &ExternCall,
    g: &Gemm,
    name: &dyn Fn(BufferId) -> String,
) -> std::fmt::Result {
    if g.m == 0 || g.n == 0 || g.batch == 0 {
        return Ok(());
    }
    let [a, b] = e.args.as_slice() else {
        return Ok(());
    };
    let out_view = View {
        buf: e.out,
        shape: p.buffer(e.out).shape.clone(),
        strides: p.buffer(e.out).strides.clone(),
        offset: 0,
    };
    writeln!(
        out,
        "        kilnGemm({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, stream); // {}",
        g.dtype,
        g.a.0,
        g.b.0,
        g.m,
        g.n,
        g.k,
        pointer(p, a, name),
        g.a.1,
        g.a.2,
        pointer(p, b, name),
        g.b.1,
        g.b.2,
        pointer(p, &out_view, name),
        g.c.0,
        g.c.1,
        g.batch,
        e.op.name()
    )
}

/// `kiln_call` of a wrapper built with `--cuda-graph`: the first call with a
/// set of pointers and a stream runs the launches (`kiln_launch`) directly,
/// so that whatever they create lazily (a BLAS handle, its workspace) exists
/// before any capture, then captures them into a device graph without running
/// it; later calls with the same pointers and stream replay the graph. New
/// pointers replace the graph. The default stream (null) cannot be captured:
/// calls on it launch directly.
fn write_graph_call(
    out: &mut String,
    inputs: usize,
    outputs: usize,
    stream_type: &str,
) -> std::fmt::Result {
    writeln!(
        out,
        "\n// Runs the graph on `stream`: directly the first time these pointers and this stream are\n\
         // seen (then captured into a device graph), as that graph while they stay the same.\n\
         extern \"C\" int kiln_call(const void* const* inputs, void* const* outputs, void* stream_handle) {{\n    \
         if (stream_handle == nullptr) {{\n        \
         return kiln_launch(inputs, outputs, stream_handle);\n    \
         }}\n    \
         std::array<const void*, {key}> key{{}};\n    \
         for (int i = 0; i < {inputs}; ++i) key[i] = inputs[i];\n    \
         for (int i = 0; i < {outputs}; ++i) key[{inputs} + i] = outputs[i];\n    \
         key[{last}] = stream_handle;\n    \
         {stream_type} stream = ({stream_type})stream_handle;\n    \
         try {{\n        \
         if (kiln_graph != nullptr && key == kiln_graph_key) {{\n            \
         kilnGraphLaunch(kiln_graph, stream);\n            \
         return 0;\n        \
         }}\n        \
         kilnGraphDestroy(kiln_graph);\n        \
         kiln_graph = nullptr;\n        \
         // New pointers: run directly, which also sets up what a launch creates lazily\n        \
         // (a BLAS handle and its workspace) outside the capture, then capture for next time.\n        \
         int status = kiln_launch(inputs, outputs, stream_handle);\n        \
         if (status != 0) {{\n            \
         return status;\n        \
         }}\n        \
         kilnGraphBegin(stream);\n        \
         status = kiln_launch(inputs, outputs, stream_handle);\n        \
         if (status != 0) {{\n            \
         kilnGraphAbort(stream);\n            \
         return status;\n        \
         }}\n        \
         kiln_graph = kilnGraphEnd(stream);\n        \
         kiln_graph_key = key;\n    \
         }} catch (const std::exception& e) {{\n        \
         std::snprintf(kiln_error_text, sizeof kiln_error_text, \"%s\", e.what());\n        \
         return 5;\n    \
         }}\n    \
         return 0;\n\
         }}",
        key = inputs + outputs + 1,
        last = inputs + outputs,
    )
}

/// `kiln_run_host`: host memory in and out around one call on the default stream.
fn write_run_host(out: &mut String, p: &Program, stream_type: &str) -> std::fmt::Result {
    let bytes =
        |shape: &[i64], d: DType| shape.iter().product::<i64>().max(0) * d.size_bytes() as i64;
    let list = |xs: Vec<i64>| {
        if xs.is_empty() {
            "0".to_string()
        } else {
            xs.iter()
                .map(|x| format!("{x}ull"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let ins: Vec<i64> = p
        .inputs
        .iter()
        .map(|b| bytes(&p.buffer(*b).shape, p.buffer(*b).dtype))
        .collect();
    let outs: Vec<i64> = p
        .outputs
        .iter()
        .map(|v| bytes(&v.shape, p.buffer(v.buf).dtype))
        .collect();
    writeln!(
        out,
        "\n// Host memory in and out: copies the inputs to the device, calls on the default stream,\n\
         // waits, and copies the outputs back (what `host run` uses).\n\
         extern \"C\" int kiln_run_host(const void* const* inputs, void* const* outputs) {{\n    \
         static const uint64_t in_bytes[] = {{{}}};\n    \
         static const uint64_t out_bytes[] = {{{}}};\n    \
         std::vector<void*> din({}, nullptr), dout({}, nullptr);\n    \
         int status = 0;\n    \
         try {{\n        \
         for (size_t i = 0; i < din.size(); ++i) {{\n            \
         din[i] = kilnDeviceAlloc(in_bytes[i]);\n            \
         kilnCopyToDevice(din[i], inputs[i], in_bytes[i]);\n        \
         }}\n        \
         for (size_t i = 0; i < dout.size(); ++i) dout[i] = kilnDeviceAlloc(out_bytes[i]);\n        \
         status = kiln_call(din.data(), dout.data(), nullptr);\n        \
         if (status == 0) {{\n            \
         kilnSynchronize(({stream_type})nullptr);\n            \
         for (size_t i = 0; i < dout.size(); ++i) kilnCopyToHost(outputs[i], dout[i], out_bytes[i]);\n        \
         }}\n    \
         }} catch (const std::exception& e) {{\n        \
         std::snprintf(kiln_error_text, sizeof kiln_error_text, \"%s\", e.what());\n        \
         status = 5;\n    \
         }}\n    \
         try {{\n        \
         for (void* d : din) kilnDeviceFree(d);\n        \
         for (void* d : dout) kilnDeviceFree(d);\n    \
         }} catch (const std::exception&) {{\n    \
         }}\n    \
         return status;\n\
         }}",
        list(ins),
        list(outs),
        p.inputs.len(),
        p.outputs.len()
    )
}

/// `kiln_input_rank(i)`, `kiln_input_size(i, d)`, `kiln_input_dtype(i)` and
/// the same for outputs: what a loader allocates (dtype names as PyTorch's,
/// `float32`; -1 or null out of range).
fn write_signature(out: &mut String, p: &Program) -> std::fmt::Result {
    let inputs: Vec<(Vec<i64>, DType)> = p
        .inputs
        .iter()
        .map(|b| (p.buffer(*b).shape.clone(), p.buffer(*b).dtype))
        .collect();
    let outputs: Vec<(Vec<i64>, DType)> = p
        .outputs
        .iter()
        .map(|v| (v.shape.clone(), p.buffer(v.buf).dtype))
        .collect();
    for (what, tensors) in [("input", inputs), ("output", outputs)] {
        let ranks: Vec<String> = tensors.iter().map(|(s, _)| s.len().to_string()).collect();
        let sizes: Vec<String> = tensors
            .iter()
            .flat_map(|(s, _)| s.iter().map(|x| format!("{x}LL")))
            .collect();
        let starts: Vec<String> = tensors
            .iter()
            .scan(0usize, |at, (s, _)| {
                let here = *at;
                *at += s.len();
                Some(here.to_string())
            })
            .collect();
        let dtypes: Vec<String> = tensors
            .iter()
            .map(|(_, d)| format!("\"{}\"", d.name()))
            .collect();
        let n = tensors.len();
        let or_zero = |v: Vec<String>| {
            if v.is_empty() {
                "0".to_string()
            } else {
                v.join(", ")
            }
        };
        writeln!(
            out,
            "\nstatic const int kiln_{what}_ranks[] = {{{}}};\n\
             static const int kiln_{what}_starts[] = {{{}}};\n\
             static const long long kiln_{what}_sizes[] = {{{}}};\n\
             static const char* const kiln_{what}_dtypes[] = {{{}}};\n\
             extern \"C\" int kiln_{what}_rank(int i) {{ return i >= 0 && i < {n} ? kiln_{what}_ranks[i] : -1; }}\n\
             extern \"C\" long long kiln_{what}_size(int i, int d) {{\n    \
             return i >= 0 && i < {n} && d >= 0 && d < kiln_{what}_ranks[i] ? kiln_{what}_sizes[kiln_{what}_starts[i] + d] : -1;\n\
             }}\n\
             extern \"C\" const char* kiln_{what}_dtype(int i) {{ return i >= 0 && i < {n} ? kiln_{what}_dtypes[i] : nullptr; }}",
            or_zero(ranks),
            or_zero(starts),
            or_zero(sizes),
            if dtypes.is_empty() { "nullptr".to_string() } else { dtypes.join(", ") },
        )?;
    }
    Ok(())
}

/// What every driver text may rely on: included before the plugin's header.
/// The standard headers every wrapper starts with, before the plugin's text.
pub const STD_HEADERS: &str = "\
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

";

/// The error text, where the weights reader (which defines it) is not pasted.
const ERROR_TEXT: &str = "\nstatic char kiln_error_text[768] = \"\";\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operands_are_read_by_blas_as_stored() {
        // Row-major 4×3, contiguous: as is, ld 3.
        assert_eq!(blas_operand(4, 3, 3, 1), Some((false, 3)));
        // The transpose of a contiguous 3×4: read transposed, ld 4.
        assert_eq!(blas_operand(4, 3, 1, 4), Some((true, 4)));
        // A row of a wider matrix (ld beyond the cols) is fine.
        assert_eq!(blas_operand(4, 3, 8, 1), Some((false, 8)));
        // One row: any row stride; one col: any col stride.
        assert_eq!(blas_operand(1, 5, 0, 1), Some((false, 5)));
        assert_eq!(blas_operand(5, 1, 1, 0), Some((false, 1)));
        // No unit stride, or rows that overlap: not for BLAS.
        assert_eq!(blas_operand(4, 3, 6, 2), None);
        assert_eq!(blas_operand(4, 3, 2, 1), None);
        assert_eq!(blas_operand(4, 3, 0, 1), None);
    }

    #[test]
    fn scalars_are_typed_cpp_literals() {
        assert_eq!(
            scalar_value("0.125", "float").unwrap(),
            "static_cast<float>(1.25e-1)"
        );
        assert_eq!(
            scalar_value("float('-inf')", "float").unwrap(),
            "-std::numeric_limits<float>::infinity()"
        );
        assert_eq!(
            scalar_value("-7", "int64_t").unwrap(),
            "static_cast<int64_t>(-7LL)"
        );
        assert!(scalar_value("x + 1", "int32_t").is_err());
    }

    #[test]
    fn strings_are_escaped() {
        assert_eq!(c_str("kernels/a-1/k.cubin"), "\"kernels/a-1/k.cubin\"");
        assert_eq!(c_str("a\"b\\c??/"), "\"a\\\"b\\\\c\\?\\?/\"");
        assert_eq!(c_str("é\n"), "\"\\303\\251\\012\"");
    }
}
