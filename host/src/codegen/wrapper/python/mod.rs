//! `output_code.py`: the Triton kernels and a Python wrapper in Inductor's
//! layout: imports, the kernels, `call(args)` with size and stride asserts,
//! the device guard, the raw stream, buffers from `empty_strided_device` and
//! views from `reinterpret_tensor` (Inductor's C++ fast paths where torch has
//! them),
//! launches, early `del`s, `benchmark_compiled_module()` and a `__main__`.
//!
//! Every device-specific line comes from the plugin's `DeviceOpOverrides`
//! strings ([`DeviceStrings`]); every name from the graph goes through the
//! [`Namer`], after [`reserve`] has taken every name this file binds.
//!
//! The kernels' runtime (`KernelSet`, the compile workers, `--precompile`,
//! the checks `call` makes, the reader of the weights file) is not
//! generated: it is the Python module `kiln_runtime.py` of this folder
//! ([`RUNTIME`]), written beside the generated file as [`RUNTIME_FILE`] and
//! loaded by its path ([`RUNTIME_LOADER`]).

mod call;

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::OnceLock;

use super::super::namer::{sanitize, word_set, Namer, WordSet};
use super::super::triton::expr::float_text;
use super::super::triton::{self, KernelInfo};
use super::super::weights;
use crate::graph::dtype::DType;
use crate::graph::ops::ConstData;
use crate::plugins::TritonTargetOwned;
use crate::schedule::ir::{BufferId, BufferKind, ExternOp, Program, Step};
use crate::schedule::Scheduled;

/// The plugin strings the Python wrapper is built from, rendered for the
/// device index of [`Options`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceStrings {
    /// The device name (`torch.device(name, index)`), checked by the plugin loader.
    pub device: String,
    /// `import_get_raw_stream_as("get_raw_stream")`.
    pub import_raw_stream: String,
    /// `set_device(index)`.
    pub set_device: String,
    /// `synchronize()`.
    pub synchronize: String,
    /// `device_guard(index)`.
    pub device_guard: String,
    /// Who generated it, for the header comment (`gxu 0.1.0`).
    pub origin: String,
    /// The Triton target the kernels are generated for, written as
    /// `TRITON_TARGET` so that tools compile them for it.
    pub triton_target: Option<TritonTargetOwned>,
}

impl DeviceStrings {
    /// The strings pasted into the file as code.
    fn code(&self) -> [&str; 4] {
        [
            &self.import_raw_stream,
            &self.set_device,
            &self.synchronize,
            &self.device_guard,
        ]
    }
}

/// Choices of the Python wrapper.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// The device the wrapper runs on (`torch.device(name, index)`); the
    /// [`DeviceStrings`] must be rendered for the same index.
    pub device_index: u32,
}

/// Why the wrapper could not be written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kernels given do not match the program (a bug in Kiln).
    #[error("internal: no generated kernel computes program step {step} (please report)")]
    MissingKernel {
        /// The step.
        step: usize,
    },
    /// The program's sizes cannot be known from a call's inputs.
    #[error("dynamic shapes: {0}")]
    Symbols(String),
    /// Writing text failed.
    #[error("formatting failed")]
    Fmt(#[from] std::fmt::Error),
}

/// What the wrapper binds, for callers and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Info {
    /// The identifier each graph input is bound to in `call`, in input order.
    pub inputs: Vec<String>,
    /// Kernels launched per call.
    pub kernels: usize,
    /// The constants read from the weights file, by key.
    pub weights: Vec<(String, BufferId)>,
}

/// The names `output_code.py` binds or uses besides the kernels': imports,
/// module-level definitions, and the locals of its functions.
pub const RESERVED: &[&str] = &[
    "torch",
    "DEVICE",
    "INPUT_NAMES",
    "INPUT_SIZES",
    "INPUT_STRIDES",
    "SIZE_SYMBOLS",
    "input_layouts",
    "KERNEL_GRIDS",
    "KERNEL_LAUNCHES",
    "grid_of",
    "size_bucket",
    "dynamic_attention",
    "ALIGNED_INPUTS",
    "check_inputs",
    "aligned",
    "check",
    "KERNEL_META",
    "TRITON_TARGET",
    "KERNELS",
    "kiln_runtime",
    "_kiln_runtime",
    "align_inputs",
    "in_layout",
    "ATTENTION",
    "_kiln_synchronize",
    call::OUT_PARAM,
    call::PER_CALL,
    "_GUARDS",
    "empty_strided_device",
    "reinterpret_tensor",
    "_CONSTANTS",
    "_constants",
    "WEIGHTS_FILE",
    "call",
    "args",
    "stream0",
    "meta",
    "make_inputs",
    "benchmark_compiled_module",
    "gen",
    "seed",
    "inputs",
    "times",
    "repeat",
    "ms",
    "do_bench",
    "tensor",
    "size",
    "stride",
    "name",
];

/// Takes every name the file binds, and every identifier of the plugin's
/// strings, before any name from the graph is given out.
pub fn reserve(namer: &mut Namer, strings: &DeviceStrings) {
    static WORDS: OnceLock<WordSet> = OnceLock::new();
    namer.reserve_set(word_set(&WORDS, &[triton::RESERVED, RESERVED], &[]));
    for code in strings.code() {
        namer.reserve_identifiers_in(code);
    }
}

/// `torch.float32`-style names.
pub fn torch_dtype(d: DType) -> &'static str {
    match d {
        DType::Bool => "torch.bool",
        DType::Int32 => "torch.int32",
        DType::Int64 => "torch.int64",
        DType::Float16 => "torch.float16",
        DType::BFloat16 => "torch.bfloat16",
        DType::Float32 => "torch.float32",
        DType::Float64 => "torch.float64",
    }
}

/// A Python tuple of integers or sizes (a symbolic size as `ks<id>`, the name the
/// wrapper binds it to).
fn tuple<T: std::fmt::Display>(values: &[T]) -> String {
    match values {
        [] => "()".to_string(),
        [one] => format!("({one},)"),
        many => format!(
            "({})",
            many.iter().map(T::to_string).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// Writes `output_code.py` for `scheduled` around `kernels` (generated with
/// the same `namer`, after [`reserve`]).
pub fn write(
    scheduled: &Scheduled,
    kernels: &triton::Kernels,
    strings: &DeviceStrings,
    options: &Options,
    namer: &mut Namer,
) -> Result<(String, Info), Error> {
    let p = &scheduled.program;
    // The size symbols' names (`ks<id>`, as kernels take them) are `call`'s locals.
    for (id, _) in p.symbols.iter() {
        namer.reserve(&format!("ks{}", id.0));
    }
    let sources = super::symbol_sources(p).map_err(Error::Symbols)?;
    let names = buffer_names(p, namer);
    let mut by_step: HashMap<usize, &KernelInfo> = HashMap::new();
    for k in &kernels.info {
        by_step.insert(k.step, k);
    }
    if let Some(step) = (0..p.steps.len())
        .find(|i| matches!(p.steps[*i], Step::Kernel(_)) && !by_step.contains_key(i))
    {
        return Err(Error::MissingKernel { step });
    }
    let mut out = String::new();
    header(&mut out, p, strings)?;
    out.push_str(&kernels.source);
    writeln!(out)?;
    writeln!(out)?;
    write_target(&mut out, strings.triton_target.as_ref())?;
    write_meta(&mut out, &kernels.info, &kernels.attention.kernels)?;
    writeln!(out)?;
    writeln!(out)?;
    out.push_str(RUNTIME_LOADER);
    let aligned = call::aligned_inputs(
        p,
        &kernels.info,
        &kernels.attention.launches,
        &kernels.templates,
    );
    let convs = p
        .steps
        .iter()
        .any(|s| matches!(s, Step::Extern(e) if matches!(e.op, ExternOp::Conv { .. })));
    torch_part(&mut out, strings, options, !aligned.is_empty(), convs)?;
    write_grids(&mut out, &kernels.info, &kernels.attention.launches)?;
    let dynamic_attention = p.steps.iter().enumerate().any(|(i, s)| {
        matches!(s, Step::Extern(e) if matches!(e.op, ExternOp::Attention { .. }))
            && !kernels.attention.launches.contains_key(&i)
    });
    if dynamic_attention {
        writeln!(
            out,
            "# Attention steps Kiln's kernel does not take (split keys over dynamic shapes): the library's.\n\
             dynamic_attention = kiln_runtime.dynamic_attention(torch.nn.functional.scaled_dot_product_attention)"
        )?;
    }
    let signatures = call::attention_signatures(p, &kernels.attention.launches);
    let biases = call::bias_signatures(p);
    if !signatures.rows.is_empty() || biases.count > 0 {
        write_synchronize(&mut out, strings)?;
    }
    write_attention(&mut out, &signatures.rows)?;
    write_biases(&mut out, biases.count)?;
    let weights = write_constants(&mut out, p, &names)?;
    let grid_keys = call::attention_grids(&kernels.attention.launches).of;
    let writer = call::CallWriter {
        scheduled,
        names: &names,
        kernels: &by_step,
        attention: &kernels.attention.launches,
        templates: &kernels.templates,
        signatures: &signatures.of_step,
        biases: &biases.of_step,
        strings,
        aligned: &aligned,
        sources: &sources,
        per_call: Default::default(),
        grid_keys: &grid_keys,
    };
    writer.write(&mut out)?;
    write_benchmark(&mut out, p, strings)?;
    let info = Info {
        inputs: p.inputs.iter().map(|b| names[b].clone()).collect(),
        kernels: kernels.info.len(),
        weights,
    };
    Ok((out, info))
}

/// `kernels.py` for the C++ wrapper of a Triton device: the kernels, their
/// `KERNEL_META` and `TRITON_TARGET`, and the loading of the kernels'
/// runtime ([`RUNTIME_FILE`], written beside it), whose `--precompile`
/// compiles them into `kernels/` (nothing here needs torch).
pub fn kernels_module(
    p: &Program,
    kernels: &triton::Kernels,
    device: &str,
    origin: &str,
    target: Option<&TritonTargetOwned>,
) -> Result<String, Error> {
    let mut out = String::new();
    writeln!(
        out,
        "# kernels.py generated by Kiln {} for device `{device}` (plugin {origin}), for wrapper.cpp.",
        env!("CARGO_PKG_VERSION"),
    )?;
    writeln!(
        out,
        "# Graph `{}`: {} kernel(s). `python kernels.py --precompile` compiles them into kernels/.",
        sanitize(&p.name),
        p.kernel_count(),
    )?;
    writeln!(out, "import triton")?;
    writeln!(out, "import triton.language as tl")?;
    writeln!(out, "from triton.language.extra import libdevice")?;
    writeln!(out)?;
    writeln!(out)?;
    out.push_str(&kernels.source);
    writeln!(out)?;
    writeln!(out)?;
    write_target(&mut out, target)?;
    write_meta(&mut out, &kernels.info, &kernels.attention.kernels)?;
    writeln!(out)?;
    writeln!(out)?;
    out.push_str(RUNTIME_LOADER);
    Ok(out)
}

/// Every buffer's identifier: an input by its own name, a constant as
/// `const_NAME`, a computed buffer as `buf_NAME`.
fn buffer_names(p: &Program, namer: &mut Namer) -> HashMap<BufferId, String> {
    p.buffers
        .iter_enumerated()
        .map(|(id, b)| {
            let stem = match b.kind {
                BufferKind::Input { .. } => b.name.clone(),
                BufferKind::Constant { .. } => format!("const_{}", b.name),
                BufferKind::Computed => format!("buf_{}", b.name),
            };
            (id, namer.name(&stem))
        })
        .collect()
}

/// The comment lines and the kernels' imports.
fn header(out: &mut String, p: &Program, strings: &DeviceStrings) -> std::fmt::Result {
    writeln!(
        out,
        "# output_code.py generated by Kiln {} for device `{}` (plugin {}).",
        env!("CARGO_PKG_VERSION"),
        strings.device,
        strings.origin
    )?;
    writeln!(
        out,
        "# Graph `{}`: {} kernel(s), {} step(s).",
        sanitize(&p.name),
        p.kernel_count(),
        p.steps.len()
    )?;
    // The kernels and their compilation need Triton only: compile workers and
    // `--precompile` run this file on machines without torch.
    writeln!(out, "import triton")?;
    writeln!(out, "import triton.language as tl")?;
    writeln!(out, "from triton.language.extra import libdevice")?;
    writeln!(out)?;
    writeln!(out)
}

/// The kernels' runtime: `KernelSet`, compiling the kernels ahead of their
/// launches in worker processes, and `--precompile`. A Python module kept as
/// a Python file (`kiln_runtime.py` of this folder), written beside every
/// generated file as [`RUNTIME_FILE`].
pub const RUNTIME: &str = include_str!("kiln_runtime.py");

/// The name of [`RUNTIME`]'s file beside `output_code.py` or `kernels.py`.
pub const RUNTIME_FILE: &str = "kiln_runtime.py";

/// How a generated file gets [`RUNTIME`]: by the path of the file beside it,
/// so that it is found from any working folder without touching `sys.path`,
/// and under a module name of its own per path, so that two generated
/// folders loaded in one process (from different Kiln builds, say) each keep
/// their own runtime. Run as a script, the file serves `--precompile` and the
/// compile workers here, before the wrapper imports torch.
pub const RUNTIME_LOADER: &str = r#"def _kiln_runtime():
    # kiln_runtime.py, which `host compile` writes beside this file: KernelSet,
    # compiling the kernels ahead of their launches, and --precompile.
    import importlib.util
    import os
    import sys

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kiln_runtime.py")
    name = "kiln_runtime:" + path
    if name not in sys.modules:
        if not os.path.isfile(path):
            raise ImportError(f"Kiln: {path} is missing; `host compile` writes it beside "
                              f"{os.path.basename(__file__)}: keep the files together, or compile again")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


kiln_runtime = _kiln_runtime()
if __name__ == "__main__":
    kiln_runtime.run_tool(globals())
"#;

/// The wrapper's imports and module-level definitions, after the loading of
/// the kernels' runtime: everything from here on needs torch.
fn torch_part(
    out: &mut String,
    strings: &DeviceStrings,
    options: &Options,
    align: bool,
    convs: bool,
) -> std::fmt::Result {
    writeln!(out)?;
    writeln!(out)?;
    writeln!(out, "# The wrapper: everything from here on needs torch.")?;
    writeln!(out, "import torch")?;
    writeln!(out, "{}", strings.import_raw_stream)?;
    writeln!(out)?;
    writeln!(
        out,
        "DEVICE = torch.device(\"{}\", {})",
        strings.device, options.device_index
    )?;
    writeln!(out, "KERNELS = kiln_runtime.KernelSet(globals())")?;
    out.push_str(FAST_PATHS);
    // The copies `call` makes are the runtime's, bound here so that `call`
    // reads them as globals.
    if align {
        writeln!(out, "align_inputs = kiln_runtime.align_inputs")?;
    }
    if convs {
        writeln!(out, "in_layout = kiln_runtime.in_layout")?;
    }
    Ok(())
}

/// `KERNEL_LAUNCHES`: for each kernel of symbolic sizes, its variant and grid per
/// bucket of the call's sizes (`kiln_runtime.SizedLaunch`); and `KERNEL_GRIDS`: for
/// each attention step of dynamic shapes, the plugin's grid per bucket of program
/// counts (`kiln_runtime.grid_of` picks one at each launch).
fn write_grids(
    out: &mut String,
    kernels: &[KernelInfo],
    attention: &HashMap<usize, triton::attention::AttentionLaunch>,
) -> std::fmt::Result {
    write_sized(out, kernels)?;
    let row = |grids: &[kiln_plugin_api::Grid]| {
        let grids: Vec<String> = grids.iter().map(grid_literal).collect();
        format!("    {},", tuple(&grids))
    };
    // The attention steps of dynamic shapes' distinct tables.
    let tables = call::attention_grids(attention).tables;
    if tables.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "# Grids of the attention steps of dynamic shapes (tile variants a model's layers\n\
         # share), each the plugin's grid per bucket of program counts."
    )?;
    writeln!(out, "KERNEL_GRIDS = (")?;
    for grids in tables {
        writeln!(out, "{}", row(grids))?;
    }
    writeln!(out, ")")?;
    writeln!(out, "grid_of = kiln_runtime.grid_of")?;
    // Attention chooses its side per bucket of the call's sizes.
    writeln!(out, "size_bucket = kiln_runtime.size_bucket")
}

/// `KERNEL_LAUNCHES` (see [`write_grids`]); nothing where no kernel has symbolic sizes.
fn write_sized(out: &mut String, kernels: &[KernelInfo]) -> std::fmt::Result {
    let mut written = std::collections::HashSet::new();
    let mut rows = Vec::new();
    for k in kernels {
        let Some(s) = &k.sized else { continue };
        // Identical kernels share one function and its launches: one entry.
        if !written.insert(k.name.as_str()) {
            continue;
        }
        // Each variant's constexprs in form `f` (`sized::Forms`): a kernel with 32-bit
        // forms takes its width too.
        let narrowing = s.forms.as_ref().is_some_and(|f| !f.narrow.is_empty());
        let variants_of = |names: &[String], f: usize| -> Vec<String> {
            s.variants
                .iter()
                .zip(names)
                .map(|(v, name)| {
                    let mut constants = vec![v.x_block.to_string()];
                    constants.extend(v.r_block.map(|r| r.to_string()));
                    if narrowing {
                        let index64 = f & triton::sized::Forms::NARROW == 0;
                        constants.push(i32::from(index64).to_string());
                    }
                    format!("(\"{name}\", {})", tuple(&constants))
                })
                .collect()
        };
        let variants = variants_of(&s.names, 0);
        let narrow = match &s.forms {
            Some(forms) => {
                let each: Vec<String> = (1..4)
                    .map(|f| tuple(&variants_of(&forms.names[f - 1], f)))
                    .collect();
                format!(", forms={}", tuple(&each))
            }
            None => String::new(),
        };
        let table: Vec<String> = s
            .table
            .iter()
            .map(|row| {
                let cells: Vec<String> = row
                    .iter()
                    .map(|(n, g)| format!("({n}, {})", grid_literal(g)))
                    .collect();
                tuple(&cells)
            })
            .collect();
        // One line per row bucket.
        rows.push(format!(
            "    \"{}\": kiln_runtime.SizedLaunch(KERNELS, {}, {}, {}, (\n{}    ){narrow}),",
            k.name,
            tuple(&variants),
            s.x_from,
            s.r_from,
            table
                .iter()
                .map(|row| format!("        {row},\n"))
                .collect::<String>()
        ));
    }
    if rows.is_empty() {
        return Ok(());
    }
    out.push_str(
        "# The kernels of dynamic sizes: their variants (each compiled with the plugin's config for\n\
         # some sizes), and, one line per bucket of the row count (an eighth of a power of two, from\n\
         # the first number given) and per bucket of the row length (2**(b-1) < n <= 2**b, from the\n\
         # second), the variant launched and its grid (kiln_runtime.SizedLaunch).\n",
    );
    writeln!(out, "KERNEL_LAUNCHES = {{")?;
    for r in rows {
        writeln!(out, "{r}")?;
    }
    writeln!(out, "}}")
}

/// A grid as a Python tuple.
fn grid_literal(g: &kiln_plugin_api::Grid) -> String {
    format!("({}, {}, {})", g.x, g.y, g.z)
}

/// `_kiln_synchronize()`, the plugin's device synchronization, which the
/// runtime's first-call choices time between.
fn write_synchronize(out: &mut String, strings: &DeviceStrings) -> std::fmt::Result {
    writeln!(out)?;
    writeln!(out)?;
    writeln!(out, "def _kiln_synchronize():")?;
    writeln!(out, "    {}", strings.synchronize)
}

/// `BIASES`, the runtime's choice for each of the program's `count` float32
/// product-with-bias signatures between the library's bias epilogue
/// (`torch.addmm`) and the plain product followed by an add, measured on each
/// one's first call; nothing where there is none.
fn write_biases(out: &mut String, count: usize) -> std::fmt::Result {
    if count == 0 {
        return Ok(());
    }
    writeln!(out)?;
    writeln!(out)?;
    out.push_str(
        "# Each float32 product with a bias runs torch.addmm (the library's bias epilogue) or torch.mm\n\
         # and an add, whichever its signature's first call measures faster\n\
         # (kiln_runtime.BiasEpilogue; KILN_BIAS=epilogue|add|measure).\n",
    );
    writeln!(
        out,
        "BIASES = kiln_runtime.BiasEpilogue(torch.addmm, torch.mm, _kiln_synchronize, getattr(torch, DEVICE.type, None), {count})"
    )
}

/// `ATTENTION`, the runtime's choice between Kiln's attention kernel and the
/// library's (`torch.nn.functional.scaled_dot_product_attention`) for each of
/// the program's attention signatures (`rows`), measured on each one's first
/// call; nothing where the program has no attention step. torch's pieces are
/// handed over (the runtime never imports torch): the library's function, the
/// allocator, the plugin's `synchronize()` and the device module's capture
/// check, where it has one.
fn write_attention(out: &mut String, rows: &[String]) -> std::fmt::Result {
    if rows.is_empty() {
        return Ok(());
    }
    writeln!(out)?;
    writeln!(out)?;
    out.push_str(
        "# Each attention signature (its buffer's size, stride and dtype, whether causal, its scale,\n\
         # whether the buffer is [B, L, H, Ev], the [B, H, L, Ev] result transposed)\n\
         # runs Kiln's kernel or the library's scaled_dot_product_attention, whichever its first call\n\
         # measures faster (kiln_runtime.Attention; KILN_ATTENTION=kiln|library|measure).\n",
    );
    writeln!(out, "ATTENTION = kiln_runtime.Attention(")?;
    writeln!(
        out,
        "    torch.nn.functional.scaled_dot_product_attention, empty_strided_device, _kiln_synchronize,"
    )?;
    writeln!(out, "    getattr(torch, DEVICE.type, None), [")?;
    for row in rows {
        writeln!(out, "        {row},")?;
    }
    writeln!(out, "    ])")
}

/// The allocations and views `call` makes per step, through the C++ functions
/// Inductor's wrappers call (a few microseconds less a call than the Python
/// `torch.empty_strided`/`torch.as_strided`, which launch-bound models make
/// dozens of times) where this torch has them, else torch's own functions.
/// `empty_strided_device` allocates on the current device (`call` sets it);
/// `reinterpret_tensor`'s offset counts from its base's.
const FAST_PATHS: &str = r#"# A fresh buffer on the current device and a view of a buffer, through the C++
# functions Inductor's wrappers call where this torch has them.
_GUARDS = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
empty_strided_device = getattr(_GUARDS, "_empty_strided_" + DEVICE.type, None) or (
    lambda size, stride, dtype: torch.empty_strided(size, stride, device=DEVICE, dtype=dtype))
reinterpret_tensor = getattr(_GUARDS, "_reinterpret_tensor", None) or (
    lambda base, size, stride, offset: base.as_strided(size, stride, base.storage_offset() + offset))
"#;

/// The constants some step or output reads, in buffer order.
fn constant_buffers(p: &Program) -> Vec<BufferId> {
    p.constants_read()
}

/// `_constants()`: the program's constants, created on the device once,
/// the large ones read from the weights file. Returns the keys of those.
fn write_constants(
    out: &mut String,
    p: &Program,
    names: &HashMap<BufferId, String>,
) -> Result<Vec<(String, BufferId)>, std::fmt::Error> {
    let constants = constant_buffers(p);
    if constants.is_empty() {
        return Ok(vec![]);
    }
    let weights: Vec<(String, BufferId)> = constants
        .iter()
        .filter(|&&b| weights::in_file(p, b))
        .map(|&b| (names[&b].clone(), b))
        .collect();
    if !weights.is_empty() {
        writeln!(out)?;
        writeln!(out)?;
        writeln!(out, "WEIGHTS_FILE = {}", py_str(weights::FILE_NAME))?;
    }
    writeln!(out)?;
    writeln!(out)?;
    writeln!(out, "_CONSTANTS = None")?;
    writeln!(out)?;
    writeln!(out)?;
    writeln!(out, "def _constants():")?;
    writeln!(out, "    # Created once, on the device, on first use.")?;
    writeln!(out, "    global _CONSTANTS")?;
    writeln!(out, "    if _CONSTANTS is None:")?;
    if !weights.is_empty() {
        // The runtime reads the file beside this one, with torch's
        // `frombuffer` and the device handed over (it never imports torch).
        writeln!(
            out,
            "        weights = kiln_runtime.load_weights(__file__, WEIGHTS_FILE, torch.frombuffer, DEVICE, {{"
        )?;
        for (key, b) in &weights {
            let buf = p.buffer(*b);
            writeln!(
                out,
                "            {}: ({}, {}, {}),",
                py_str(key),
                py_str(&weights::header_name(buf.dtype)),
                torch_dtype(buf.dtype),
                tuple(&buf.shape)
            )?;
        }
        writeln!(out, "        }})")?;
    }
    writeln!(out, "        _CONSTANTS = (")?;
    for b in constants {
        let buf = p.buffer(b);
        let BufferKind::Constant { data } = &buf.kind else {
            continue;
        };
        let dtype = torch_dtype(buf.dtype);
        let text = match data {
            _ if weights::in_file(p, b) => format!("weights[{}]", py_str(&names[&b])),
            ConstData::Fill(v) => format!(
                "torch.full({}, {}, dtype={dtype}, device=DEVICE)",
                tuple(&buf.shape),
                float_text(*v)
            ),
            data => {
                let n = buf.numel().max(0) as usize;
                let list: Vec<String> = (0..n).map(|i| float_text(data.get(i))).collect();
                format!(
                    "torch.tensor([{}], dtype={dtype}).reshape({}).to(DEVICE)",
                    list.join(", "),
                    tuple(&buf.shape)
                )
            }
        };
        writeln!(out, "            {text},  # {}", names[&b])?;
    }
    writeln!(out, "        )")?;
    writeln!(out, "    return _CONSTANTS")?;
    Ok(weights)
}

/// A Python string literal of `text`, escaped (and ASCII-only), so that no
/// text from outside Kiln can end the literal or the line.
fn py_str(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_ascii() && !c.is_ascii_control() => out.push(c),
            c if u32::from(c) > 0xFFFF => out.push_str(&format!("\\U{:08x}", u32::from(c))),
            c => out.push_str(&format!("\\u{:04x}", u32::from(c))),
        }
    }
    out.push('"');
    out
}

/// `TRITON_TARGET`: Triton's `GPUTarget` fields the kernels are generated for.
fn write_target(out: &mut String, target: Option<&TritonTargetOwned>) -> std::fmt::Result {
    writeln!(
        out,
        "# The Triton target (GPUTarget) the kernels are generated for, from the device plugin."
    )?;
    match target {
        Some(t) => writeln!(
            out,
            "TRITON_TARGET = {{\"backend\": {}, \"arch\": {}, \"warp_size\": {}}}",
            py_str(&t.backend),
            py_str(&t.arch),
            t.warp_size
        ),
        None => writeln!(out, "TRITON_TARGET = None"),
    }
}

/// `KERNEL_META`: every kernel's signature and launch, as literals, so that
/// the kernels can be compiled ahead of time without running the wrapper.
fn write_meta(
    out: &mut String,
    kernels: &[KernelInfo],
    attention: &[triton::attention::AttentionKernel],
) -> std::fmt::Result {
    writeln!(
        out,
        "# Signatures and launch configs, for compiling the kernels ahead of time"
    )?;
    writeln!(
        out,
        "# (kiln_runtime.KernelSet; tools/check_triton.py) without running the wrapper."
    )?;
    writeln!(out, "KERNEL_META = {{")?;
    let mut written = std::collections::HashSet::new();
    for info in kernels {
        // Identical kernels share one function: one entry.
        if !written.insert(info.name.as_str()) {
            continue;
        }
        let signature = |index: &str| {
            let mut sig: Vec<String> = info
                .arg_names
                .iter()
                .zip(&info.arg_types)
                .map(|(n, t)| format!("\"{n}\": \"{t}\""))
                .collect();
            sig.push(format!("\"xnumel\": \"{index}\""));
            if info.rnumel.is_some() {
                sig.push(format!("\"rnumel\": \"{index}\""));
            }
            for (s, t) in &info.sizes {
                sig.push(format!("\"ks{}\": \"{t}\"", s.0));
            }
            sig
        };
        let wide = signature(if info.int64_index { "i64" } else { "i32" });
        let narrow = signature("i32");
        let forms = info.sized.as_ref().and_then(|s| s.forms.as_ref());
        let narrowing = forms.is_some_and(|f| !f.narrow.is_empty());
        // A kernel of symbolic sizes compiles its function with its first variant's
        // config, and each further variant under its own name.
        let l = match &info.sized {
            Some(s) => s.variants[0],
            None => {
                let l = &info.launch;
                triton::sized::Variant {
                    x_block: l.x_block,
                    r_block: l.r_block,
                    num_warps: l.num_warps,
                    num_stages: l.num_stages,
                    dependent: info.dependent,
                }
            }
        };
        // One entry per compiled binary: a variant names the function it compiles, in
        // form `f` (`sized::Forms`): 32-bit indexes (`INDEX64` 0, the counts `i32`), its
        // inner count known a multiple of 16.
        let mut entry = |name: &str,
                         function: Option<&str>,
                         v: &triton::sized::Variant,
                         f: usize| {
            let mut constants = vec![format!("\"XBLOCK\": {}", v.x_block)];
            constants.extend(v.r_block.map(|r| format!("\"RBLOCK\": {r}")));
            let narrowed = f & triton::sized::Forms::NARROW != 0;
            if narrowing {
                constants.push(format!("\"INDEX64\": {}", i32::from(!narrowed)));
            }
            let sig = if narrowed { &narrow } else { &wide };
            let mut aligned = info.aligned.clone();
            if let (true, Some((_, param))) = (
                f & triton::sized::Forms::ALIGNED != 0,
                forms.and_then(|f| f.aligned.as_ref()),
            ) {
                aligned.push((*param).to_string());
            }
            let function = function.map_or(String::new(), |f| format!("\"function\": \"{f}\", "));
            writeln!(
                out,
                "    \"{name}\": {{{function}\"signature\": {{{}}}, \"constants\": {{{}}}, \"aligned\": {}, \"num_warps\": {}, \"num_stages\": {}, \"autotuned\": {}, \"dependent\": {}}},",
                sig.join(", "),
                constants.join(", "),
                name_list(&aligned),
                v.num_warps,
                v.num_stages,
                py_bool(function.is_empty() && info.candidates.len() > 1),
                py_bool(v.dependent)
            )
        };
        entry(&info.name, None, &l, 0)?;
        if let Some(s) = &info.sized {
            for (v, name) in s.variants.iter().zip(&s.names).skip(1) {
                entry(name, Some(&info.name), v, 0)?;
            }
            for f in forms.iter().flat_map(|f| f.present()) {
                let names = forms.map_or(&[][..], |forms| &forms.names[f - 1][..]);
                for (v, name) in s.variants.iter().zip(names) {
                    entry(name, Some(&info.name), v, f)?;
                }
            }
        }
    }
    for k in attention {
        let sig: Vec<String> = k
            .signature
            .iter()
            .map(|(n, t)| format!("\"{n}\": \"{t}\""))
            .collect();
        let constants: Vec<String> = k
            .constants
            .iter()
            .map(|(n, v)| format!("\"{n}\": {v}"))
            .collect();
        writeln!(
            out,
            "    \"{}\": {{\"signature\": {{{}}}, \"constants\": {{{}}}, \"aligned\": {}, \"num_warps\": {}, \"num_stages\": {}, \"autotuned\": False, \"dependent\": True}},",
            k.name,
            sig.join(", "),
            constants.join(", "),
            name_list(&k.aligned),
            k.num_warps,
            k.num_stages,
        )?;
    }
    writeln!(out, "}}")?;
    Ok(())
}

/// A Python bool literal.
fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

/// A Python list of parameter names (Kiln's own identifiers).
fn name_list(names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| py_str(n)).collect();
    format!("[{}]", quoted.join(", "))
}

/// `make_inputs`, `benchmark_compiled_module` and the `__main__` that runs it.
fn write_benchmark(out: &mut String, p: &Program, strings: &DeviceStrings) -> std::fmt::Result {
    writeln!(out)?;
    writeln!(out)?;
    writeln!(out, "def make_inputs(seed=0):")?;
    writeln!(
        out,
        "    \"\"\"Random inputs of the graph's shapes and dtypes, on the device.\"\"\""
    )?;
    writeln!(out, "    gen = torch.Generator().manual_seed(seed)")?;
    writeln!(out, "    return [")?;
    for b in &p.inputs {
        let buf = p.buffer(*b);
        // Dynamic sizes at the example's (the symbols' hints).
        let shape = tuple(&crate::schedule::index::hints(&buf.shape));
        let text = match buf.dtype {
            DType::Bool => format!("(torch.rand({shape}, generator=gen) < 0.5)"),
            DType::Int32 | DType::Int64 => {
                // Indices (token ids) are drawn valid: in [0, the dim they index).
                let (lo, hi) = match buf.kind {
                    BufferKind::Input {
                        index_bound: Some(b),
                        ..
                    } if b > 0 => (0, b),
                    _ => (-8, 8),
                };
                format!(
                    "torch.randint({lo}, {hi}, {shape}, generator=gen, dtype={})",
                    torch_dtype(buf.dtype)
                )
            }
            d => format!(
                "torch.randn({shape}, generator=gen, dtype={})",
                torch_dtype(d)
            ),
        };
        writeln!(out, "        {text}.to(DEVICE),")?;
    }
    writeln!(out, "    ]")?;
    writeln!(out)?;
    writeln!(out)?;
    out.push_str(&BENCHMARK.replace("{synchronize}", &strings.synchronize));
    Ok(())
}

/// `benchmark_compiled_module` and the `__main__`; `{synchronize}` is the
/// plugin's `synchronize()`.
const BENCHMARK: &str = r#"def benchmark_compiled_module(times=10, repeat=10):
    """Median time of `call` in milliseconds (triton.testing.do_bench)."""
    from triton.testing import do_bench
    inputs = make_inputs()
    call(list(inputs))
    {synchronize}
    ms = do_bench(lambda: call(list(inputs)), warmup=times, rep=repeat * times)
    print(f"{ms:.6f} ms")
    return ms


if __name__ == "__main__":
    benchmark_compiled_module()
"#;

#[cfg(test)]
mod tests {
    use super::{py_str, RESERVED, RUNTIME, RUNTIME_FILE, RUNTIME_LOADER};

    #[test]
    fn the_loader_s_module_level_names_are_reserved_and_it_loads_the_runtime_s_file() {
        // Every module-level line binds a name with `def` or `=`, or is the `if`.
        for line in RUNTIME_LOADER.lines() {
            if line.is_empty() || line.starts_with([' ', '#']) || line.starts_with("if ") {
                continue;
            }
            let rest = line.strip_prefix("def ").unwrap_or(line);
            let name = rest
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .next()
                .unwrap_or_default();
            assert!(RESERVED.contains(&name), "`{name}` is not reserved: {line}");
        }
        assert!(RUNTIME_LOADER.contains(&format!("\"{RUNTIME_FILE}\"")));
        for name in ["class KernelSet:", "def run_tool(scope):"] {
            assert!(RUNTIME.contains(name), "the runtime has no `{name}`");
        }
    }

    #[test]
    fn string_literals_are_escaped_and_ascii() {
        assert_eq!(py_str("90"), "\"90\"");
        assert_eq!(py_str(r#"{"a": "b\c"}"#), r#""{\"a\": \"b\\c\"}""#);
        assert_eq!(py_str("é\n😀"), r#""\u00e9\u000a\U0001f600""#);
    }
}
