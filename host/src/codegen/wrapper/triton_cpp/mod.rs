//! `wrapper.cpp` for a Triton device: AOTInductor's role, without PyTorch.
//! The kernels are compiled ahead of time (`kernels.py --precompile`, into
//! `kernels/`, which `crate::runtime::ahead` runs), and the wrapper loads them
//! with the plugin's `loadKernel`, launches them with its `launchKernel` on
//! the caller's stream, and calls the plugin's `kilnGemm` for matrix
//! products. The plugin's `kernel_header` and `kernel_driver` are pasted in
//! unchanged, after the standard headers.
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
//! wrapper's `Layout`). `kiln_call` takes device pointers, one dense
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
//!
//! The wrapper is written in two steps, because the kernels must be compiled
//! in between: [`plan`] (at compile time: refuses what the wrapper cannot
//! run, names every buffer through the [`Namer`] after [`reserve`]), then
//! [`write`] (once the binaries exist). The writer is split by concern:
//! [`check`] (what the wrapper refuses), `init` (the file's head,
//! `kiln_init`), `call` (`kiln_call` and the launches), `host` (host-memory
//! entry and the signature functions) and `text` (C++ literals).

mod call;
mod check;
mod host;
mod init;
mod text;

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write;
use std::sync::OnceLock;

use super::cpp::layout::Layout;
use super::cpp::sizes;
use super::{symbol_sources, SymbolSource};
use crate::codegen::cpp::runtime;
use crate::codegen::namer::{word_set, Namer, WordSet};
use crate::codegen::triton::{self, KernelInfo};
use crate::codegen::weights;
use crate::schedule::ir::{BufferId, Program, Step};
use crate::schedule::Scheduled;

pub use check::check;
pub use text::STD_HEADERS;

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

/// The matrix product the wrapper calls for `mm`/`bmm`, where the plugin's
/// `kernel_driver` defines it.
pub const GEMM_FUNCTION: &str = "kilnGemm";

/// The launch the wrapper calls, where the plugin's `kernel_driver` defines it,
/// for a kernel compiled to wait for the kernel before it ([`Binary::dependent`]):
/// `launchKernel`'s parameters, launching the kernel as a programmatic dependent
/// of the work before it on the stream (CUDA's programmatic stream
/// serialization), so that its programs start while that kernel ends. Other
/// kernels, and every kernel of a driver without it, go through `launchKernel`.
pub const DEPENDENT_LAUNCH_FUNCTION: &str = "launchKernelDependent";

/// Every name `wrapper.cpp` binds or uses besides the buffers' and what the
/// plugin's strings and the weights reader bring: its statics, entry points
/// and locals, and the standard names it calls. A graph name never becomes
/// one of them.
pub const RESERVED: &[&str] = &[
    // Statics and entry points.
    "kiln_constants",
    "kiln_workspace",
    "kiln_ready",
    "kiln_graph",
    "kiln_graph_key",
    "kiln_weight_specs",
    "kiln_error_text",
    "kiln_abi_version",
    "kiln_num_inputs",
    "kiln_num_outputs",
    "kiln_workspace_bytes",
    "kiln_device_graphs",
    "kiln_last_error",
    "kiln_release",
    "kiln_init",
    "kiln_call",
    "kiln_launch",
    "kiln_run_host",
    "kiln_input_ranks",
    "kiln_input_starts",
    "kiln_input_sizes",
    "kiln_input_dtypes",
    "kiln_input_rank",
    "kiln_input_size",
    "kiln_input_dtype",
    "kiln_output_ranks",
    "kiln_output_starts",
    "kiln_output_sizes",
    "kiln_output_dtypes",
    "kiln_output_rank",
    "kiln_output_size",
    "kiln_output_dtype",
    "kiln_run_host_shaped",
    "kiln_workspace_size",
    "kiln_workspace_at",
    "KilnSizedCell",
    "kiln_bit_length",
    "kiln_sized_cell",
    "kiln_nearest_tiles",
    // Locals and parameters.
    "dir",
    "base",
    "path",
    "found",
    "fill",
    "inputs",
    "outputs",
    "stream_handle",
    "stream",
    "ws",
    "kiln_scratch",
    "xnumel",
    "rnumel",
    "args",
    "e",
    "i",
    "d",
    "key",
    "status",
    "in_bytes",
    "out_bytes",
    "din",
    "dout",
    "cell",
    "form",
    "args32",
    "xnumel32",
    "rnumel32",
    "out_shapes",
    "out_ranks",
    "tiles",
    // What it calls or names from the driver text and the standard library.
    "loadKernel",
    "launchKernel",
    "launchKernelDependent",
    "kilnGemm",
    "kilnDeviceAlloc",
    "kilnDeviceFree",
    "kilnCopyToDevice",
    "kilnCopyToHost",
    "kilnCopyOnDevice",
    "kilnSynchronize",
    "kilnSetDevice",
    "kilnGraphBegin",
    "kilnGraphEnd",
    "kilnGraphAbort",
    "kilnGraphLaunch",
    "kilnGraphDestroy",
    "kiln_read_weights",
    "kiln_weights_file",
    "KilnWeightSpec",
    "std",
    "array",
    "vector",
    "string",
    "exception",
    "numeric_limits",
    "infinity",
    "snprintf",
    "free",
    "what",
    "data",
    "size",
    "c_str",
    "maybe_unused",
    "uint64_t",
    "uintptr_t",
    "int32_t",
    "int64_t",
    "uint16_t",
    "uint8_t",
    "size_t",
];

/// Takes every name `wrapper.cpp` binds ([`RESERVED`]), and every identifier
/// of the text it pastes (the standard headers, the weights reader, the
/// plugin's `kernel_header` and `kernel_driver`), before any name from the
/// graph is given out.
pub fn reserve(namer: &mut Namer, strings: &Strings) {
    static WORDS: OnceLock<WordSet> = OnceLock::new();
    namer.reserve_set(word_set(
        &WORDS,
        &[RESERVED, sizes::RESERVED],
        &[
            STD_HEADERS,
            runtime::WEIGHTS.text,
            runtime::SIZES.text,
            text::ERROR_TEXT,
        ],
    ));
    namer.reserve_identifiers_in(&strings.header);
    namer.reserve_identifiers_in(&strings.driver);
    namer.reserve_identifiers_in(&strings.stream_type);
    namer.reserve_identifiers_in(&strings.kernel_type);
}

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
    /// A buffer of the program has no name in the plan (a bug in Kiln: the
    /// plan was made for another program).
    #[error("internal: buffer `{buffer}` (#{id}) has no C++ name in the wrapper's plan; the plan was made for another program (please report)")]
    UnnamedBuffer {
        /// The buffer's name in the program.
        buffer: String,
        /// Its id.
        id: u32,
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
    /// It was compiled to wait for the kernel before it (Triton's `launch_pdl`): it
    /// may be launched as that kernel's programmatic dependent
    /// ([`DEPENDENT_LAUNCH_FUNCTION`]).
    pub dependent: bool,
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
        .flat_map(|k| match &k.sized {
            Some(sized) => sized
                .names
                .iter()
                .chain(sized.forms.iter().flat_map(|f| f.all_names()))
                .cloned()
                .collect(),
            None => vec![k.name.clone()],
        })
        .chain(kernels.attention.kernels.iter().map(|k| k.name.clone()))
        .filter(|n| seen.insert(n.clone()))
        .collect()
}

/// The wrapper of one compile before its kernels are compiled: the kernels,
/// the plugin's strings, and every name the file gives out.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The kernels and their launches.
    pub kernels: triton::Kernels,
    /// The plugin's strings.
    pub strings: Strings,
    /// How the wrapper runs.
    pub options: Options,
    /// The constants read from the weights file, by key (their C++ names),
    /// in the order of the constants block.
    pub weights: Vec<(String, BufferId)>,
    /// Every buffer's C++ identifier.
    names: HashMap<BufferId, String>,
    /// Each loaded kernel's handle, by kernel name, in order of first use.
    handles: Vec<(String, String)>,
    /// Where each size symbol is read from the inputs: empty for a program of one
    /// size; otherwise the wrapper takes each call's sizes (`kiln_call_shaped`).
    sources: Vec<SymbolSource>,
}

impl Plan {
    /// The kernels `kiln_init` loads, in order: the binaries to compile.
    pub fn kernel_names(&self) -> Vec<String> {
        self.handles.iter().map(|(k, _)| k.clone()).collect()
    }

    /// The kernels `kiln_init` loads, each with the function it compiles: its
    /// own, or, for a variant of a kernel of dynamic sizes, the kernel's (its
    /// binary's files take that name).
    pub fn kernel_files(&self) -> Vec<(String, String)> {
        let function = |name: &str| {
            self.kernels
                .info
                .iter()
                .find(|k| {
                    k.sized.as_ref().is_some_and(|s| {
                        s.names
                            .iter()
                            .chain(s.forms.iter().flat_map(|f| f.all_names()))
                            .any(|n| n == name)
                    })
                })
                .map_or_else(|| name.to_string(), |k| k.name.clone())
        };
        self.handles
            .iter()
            .map(|(k, _)| (k.clone(), function(k)))
            .collect()
    }

    /// Whether the wrapper serves a range of sizes (`kiln_call_shaped`).
    pub fn is_dynamic(&self) -> bool {
        !self.sources.is_empty()
    }

    /// Every buffer's identifier.
    pub fn buffer_names(&self) -> impl Iterator<Item = &str> {
        self.names.values().map(String::as_str)
    }

    /// Buffer `b`'s identifier, or an error naming it.
    fn name<'a>(&'a self, p: &Program, b: BufferId) -> Result<&'a str, Error> {
        self.names
            .get(&b)
            .map(String::as_str)
            .ok_or_else(|| Error::UnnamedBuffer {
                buffer: p
                    .buffers
                    .get(b)
                    .map_or_else(String::new, |buf| buf.name.clone()),
                id: b.0,
            })
    }

    /// Kernel `kernel`'s handle.
    fn handle(&self, kernel: &str) -> Result<&str, Error> {
        self.handles
            .iter()
            .find(|(k, _)| k == kernel)
            .map(|(_, h)| h.as_str())
            .ok_or_else(|| Error::MissingBinary {
                kernel: kernel.to_string(),
            })
    }
}

/// Plans the wrapper of `scheduled` around `kernels` (written with `namer`,
/// which [`reserve`] prepared before any kernel or graph name): refuses what
/// the wrapper cannot run ([`check`]), then names the kernel handles, the
/// launch blocks' locals and every buffer.
pub fn plan(
    scheduled: &Scheduled,
    kernels: triton::Kernels,
    strings: Strings,
    options: Options,
    namer: &mut Namer,
) -> Result<Plan, Error> {
    check(scheduled, &kernels, &strings, &options)?;
    let p = &scheduled.program;
    let sources = symbol_sources(p).map_err(Error::Unsupported)?;
    let handles = kernel_names(&kernels)
        .into_iter()
        .enumerate()
        .map(|(i, k)| {
            let handle = namer.name(&format!("kiln_kernel_{i}"));
            (k, handle)
        })
        .collect();
    // The locals of a launch's block: `p0`, `s0`, ... (pointers and scalars of an
    // attention, index_copy, convolution or grouped product launch, the size arguments
    // of a kernel).
    let locals = kernels
        .attention
        .launches
        .values()
        .map(|l| l.pointers.len().max(l.scalars.len()))
        .chain(kernels.info.iter().map(|k| k.sizes.len()))
        .chain(
            kernels
                .index_copies
                .values()
                .chain(kernels.convs.values())
                .chain(kernels.templates.values())
                .map(|l| l.pointers.len().max(l.scalars.len())),
        )
        .max()
        .unwrap_or(0);
    for i in 0..locals {
        namer.reserve(&format!("p{i}"));
        namer.reserve(&format!("s{i}"));
    }
    // Buffers take a `b_` prefix: the headers the driver text includes
    // define macros (`EOF`, `NULL`, a toolkit's own) that no namer can list,
    // and none of them starts so.
    let names: HashMap<BufferId, String> = p
        .buffers
        .ids()
        .map(|b| (b, namer.name(&format!("b_{}", p.buffer(b).name))))
        .collect();
    let weights = constant_offsets(p)
        .0
        .into_iter()
        .filter(|&(b, _)| weights::in_file(p, b))
        .map(|(b, _)| (names[&b].clone(), b))
        .collect();
    Ok(Plan {
        kernels,
        strings,
        options,
        weights,
        names,
        handles,
        sources,
    })
}

/// Bytes each constant is aligned to in the constants block.
const CONSTANT_ALIGN: u64 = 64;

/// The constants block: every constant a step reads or an output returns,
/// at its offset, and its size.
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

/// What every part of the writer reads: the program, the plan, the
/// binaries, and where each buffer lives.
struct Writer<'a> {
    out: String,
    scheduled: &'a Scheduled,
    p: &'a Program,
    plan: &'a Plan,
    binaries: &'a HashMap<String, Binary>,
    /// Each step's kernel.
    by_step: HashMap<usize, &'a KernelInfo>,
    /// The constants block.
    constants: Vec<(BufferId, u64)>,
    constants_bytes: u64,
    /// The workspace of intermediates.
    layout: Layout,
    workspace_bytes: u64,
    /// The driver defines [`DEPENDENT_LAUNCH_FUNCTION`].
    dependent_launch: bool,
}

impl<'a> Writer<'a> {
    /// Buffer `b`'s identifier.
    fn name(&self, b: BufferId) -> Result<&'a str, Error> {
        self.plan.name(self.p, b)
    }

    /// The binary of kernel `kernel`.
    fn binary(&self, kernel: &str) -> Result<&'a Binary, Error> {
        self.binaries
            .get(kernel)
            .ok_or_else(|| Error::MissingBinary {
                kernel: kernel.to_string(),
            })
    }
}

/// Writes `wrapper.cpp` for `scheduled`, as `plan` (made for it) says, around
/// its kernels compiled into `binaries` (by kernel name). Returns the text and
/// what the wrapper needs.
pub fn write(
    scheduled: &Scheduled,
    plan: &Plan,
    binaries: &HashMap<String, Binary>,
) -> Result<(String, Info), Error> {
    check(scheduled, &plan.kernels, &plan.strings, &plan.options)?;
    let p = &scheduled.program;
    let by_step: HashMap<usize, &KernelInfo> =
        plan.kernels.info.iter().map(|k| (k.step, k)).collect();
    if let Some(step) = (0..p.steps.len())
        .find(|i| matches!(p.steps[*i], Step::Kernel(_)) && !by_step.contains_key(i))
    {
        return Err(Error::MissingKernel { step });
    }
    for (kernel, _) in &plan.handles {
        if !binaries.contains_key(kernel) {
            return Err(Error::MissingBinary {
                kernel: kernel.clone(),
            });
        }
    }
    let (constants, constants_bytes) = constant_offsets(p);
    let layout = Layout::new(scheduled, &[]);
    let workspace_bytes = if layout.uses_arena() {
        layout.arena_bytes
    } else {
        0
    };
    let mut w = Writer {
        out: String::new(),
        scheduled,
        p,
        plan,
        binaries,
        by_step,
        constants,
        constants_bytes,
        layout,
        workspace_bytes,
        dependent_launch: crate::plugins::cpp_text::defines_function(
            &plan.strings.driver,
            DEPENDENT_LAUNCH_FUNCTION,
        ),
    };
    w.head()?;
    w.statics()?;
    w.init()?;
    if plan.is_dynamic() {
        sizes::write_entries(&mut w.out, p, &plan.sources)?;
        writeln!(
            w.out,
            "extern \"C\" int kiln_call(const void* const*, void* const*, void*) {{ return kiln_sizes_needed(); }}"
        )?;
    }
    let launches = w.call()?;
    if plan.options.graphs {
        w.graph_call()?;
    }
    w.run_host()?;
    w.signature()?;
    let info = Info {
        abi_version: ABI_VERSION,
        workspace_bytes,
        constants_bytes,
        kernels: launches,
    };
    Ok((w.out, info))
}
