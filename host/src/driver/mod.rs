//! The one front door for a compile: a validated graph and a device's plugin
//! in, generated code out. `host compile`, `host run`, `host eval --device`,
//! the conformance harness, the benchmarks and the tests all come through
//! [`compile`], so that what one of them checks is exactly what another ships.
//!
//! A compile asks the plugin what it needs once ([`Target::query`]: the
//! backend spec and the override strings its wrapper needs), runs the passes,
//! schedules with the plugin's backend features, routes by the scheduling
//! kind to the kernel and wrapper generators, and returns [`Artifacts`]: the
//! generated file, what the generators report, and the debug texts of
//! TorchInductor's debug layout. It never writes a file unless asked
//! ([`Artifacts::write_to`]) and never runs generated code (that is `runtime`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kiln_plugin_api::SchedulingKind;

use crate::codegen::namer::Namer;
/// The widest attention heads whose tiles fit a program's shared memory, per
/// dtype: conformance checks a plugin's `shared_memory_per_block` with the code
/// generator's own rule, through the driver (its one door to code generation).
pub use crate::codegen::triton::attention::widest_heads;
use crate::codegen::weights::{self, Weights};
/// The C++ wrapper of a Triton device: its options, binaries and the names of
/// the driver functions it calls, for the commands and conformance that
/// build it.
pub use crate::codegen::wrapper::triton_cpp;
use crate::codegen::wrapper::{cpp as cpp_wrapper, python};
use crate::codegen::{cpp, triton, KernelError};
use crate::graph::ir::Graph;
use crate::plugins::{CallError, Override, Plugin, WrapperKind};
use crate::schedule::Scheduled;

mod target;
use target::wrapper_label;
pub use target::{capabilities, Target};

/// Why a graph could not be compiled for a device.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A pass failed.
    #[error("the passes failed")]
    Passes(#[from] crate::passes::Error),
    /// The scheduler could not lower the graph.
    #[error(transparent)]
    Schedule(#[from] crate::schedule::Error),
    /// A call into the plugin failed.
    #[error(transparent)]
    Plugin(#[from] CallError),
    /// The plugin does not support what the compile needs.
    #[error("plugin `{plugin}` ({path}): {what}")]
    Unsupported {
        /// The device.
        plugin: String,
        /// Its library.
        path: String,
        /// What.
        what: String,
    },
    /// The plugin lacks an override the chosen wrapper needs.
    #[error(
        "plugin `{plugin}` ({path}) does not provide `{method}`, which the {wrapper} wrapper needs; \
         the plugin must implement `DeviceOpOverrides::{method}` (docs/writing-a-plugin.md){}",
        match alternative {
            Some(flag) => format!(", or compile with {flag}, which this plugin supports"),
            None => String::new(),
        }
    )]
    MissingOverride {
        /// The device.
        plugin: String,
        /// Its library.
        path: String,
        /// The `DeviceOpOverrides` method.
        method: &'static str,
        /// Which wrapper.
        wrapper: &'static str,
        /// The `--wrapper` choice that would compile with this plugin, if one would.
        alternative: Option<&'static str>,
    },
    /// The plugin returned a string that cannot be pasted into generated code.
    #[error("plugin `{plugin}` ({path}) returned a malformed override: {problem}")]
    BadOverride {
        /// The device.
        plugin: String,
        /// Its library.
        path: String,
        /// What is wrong, naming the method.
        problem: String,
    },
    /// Triton kernel generation failed.
    #[error("generating Triton kernels failed")]
    TritonKernels(#[source] KernelError),
    /// C++ kernel generation failed.
    #[error("generating C++ kernels failed")]
    CppKernels(#[source] KernelError),
    /// The Python wrapper could not be written.
    #[error("writing output_code.py failed")]
    PythonWrapper(#[from] python::Error),
    /// The C++ wrapper could not be written.
    #[error("writing wrapper.cpp failed")]
    CppWrapper(#[from] cpp_wrapper::Error),
    /// The C++ wrapper of a Triton device could not be written.
    #[error("writing wrapper.cpp for Triton kernels failed")]
    TritonCppWrapper(#[from] triton_cpp::Error),
    /// A generated file could not be written.
    #[error("cannot write {path}")]
    Write {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The weights file could not be written.
    #[error(transparent)]
    Weights(#[from] crate::codegen::weights::Error),
}

/// The choices of one compile.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The wrapper to write; `None` picks the device's own: the Python
    /// wrapper for Triton kernels, the C++ wrapper for C++ kernels.
    pub wrapper: Option<WrapperKind>,
    /// Which device of the kind the wrapper runs on (`cuda:1` is index 1).
    pub device_index: u32,
    /// Triton kernel generation.
    pub triton: triton::Options,
    /// C++ kernel generation.
    pub cpp: cpp::Options,
    /// The C++ wrapper.
    pub cpp_wrapper: cpp_wrapper::Options,
    /// A Triton device's C++ wrapper captures its call into a device graph
    /// and replays it (`--cuda-graph`).
    pub device_graphs: bool,
    /// Also produce TorchInductor's debug texts ([`DebugFiles`]).
    pub debug: bool,
}

/// TorchInductor's debug texts (`host compile --debug`).
#[derive(Clone, Debug)]
pub struct DebugFiles {
    /// `graph_pre_passes.txt`.
    pub graph_pre_passes: String,
    /// `graph_post_passes.txt`.
    pub graph_post_passes: String,
    /// `ir_pre_fusion.txt`: every scheduler node as its own kernel.
    pub ir_pre_fusion: String,
    /// `ir_post_fusion.txt`: the scheduled program.
    pub ir_post_fusion: String,
    /// `graph.dot`: the graph, nodes coloured by the step computing them.
    pub graph_dot: String,
}

/// What the generators report about the code they wrote.
#[derive(Clone, Debug)]
pub enum CodeInfo {
    /// `output_code.py`: Triton kernels and the Python wrapper.
    Python {
        /// The wrapper.
        wrapper: python::Info,
        /// Every kernel's launch.
        kernels: Vec<triton::KernelInfo>,
    },
    /// `wrapper.cpp`: C++ kernels and the C++ wrapper.
    Cpp {
        /// The wrapper.
        wrapper: cpp_wrapper::Info,
        /// Every kernel's call.
        kernels: Vec<cpp::KernelInfo>,
    },
    /// `kernels.py`, Triton kernels to compile ahead of time, and the plan
    /// of the C++ wrapper that [`Artifacts::write_cpp_wrapper`] writes once
    /// they are (`crate::runtime::ahead` does both).
    TritonCpp(Box<triton_cpp::Plan>),
}

impl CodeInfo {
    /// The generated kernels' function names, in program order.
    pub fn kernel_names(&self) -> Vec<String> {
        match self {
            CodeInfo::Python { kernels, .. } => kernels.iter().map(|k| k.name.clone()).collect(),
            CodeInfo::Cpp { kernels, .. } => kernels.iter().map(|k| k.name.clone()).collect(),
            CodeInfo::TritonCpp(plan) => plan.kernels.info.iter().map(|k| k.name.clone()).collect(),
        }
    }
}

/// Time spent in each stage of a compile.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timings {
    /// The pass pipeline.
    pub passes: Duration,
    /// Lowering, fusion and memory planning.
    pub schedule: Duration,
    /// Kernels and wrapper.
    pub codegen: Duration,
}

impl Timings {
    /// All stages together.
    pub fn total(&self) -> Duration {
        self.passes + self.schedule + self.codegen
    }
}

/// Everything a compile produced.
#[derive(Clone, Debug)]
pub struct Artifacts {
    /// The device and what its plugin said.
    pub target: Target,
    /// `output_code.py` or `wrapper.cpp`.
    pub file_name: &'static str,
    /// Its text.
    pub code: String,
    /// What the generators report.
    pub info: CodeInfo,
    /// The graph after the passes.
    pub graph: Graph,
    /// The scheduled program the code implements.
    pub scheduled: Scheduled,
    /// The debug texts, when asked for.
    pub debug: Option<DebugFiles>,
    /// The large constants, written to `weights.safetensors` beside the code
    /// (none: no file).
    pub weights: Weights,
    /// Time per stage.
    pub timings: Timings,
    /// `state.json`, where the program keeps state between calls ([`state_manifest`]).
    pub state: Option<String>,
}

/// The file that lists the state a program keeps between calls.
pub const STATE_FILE: &str = "state.json";

/// `state.json`: the tensors the program keeps between calls (a KV cache), which the
/// generated code takes as its last inputs and gives back, updated, as its last outputs:
/// `{"state": [{"name", "input", "output", "shape", "dtype"}, ...]}` in input order. A
/// caller passes each one's current value and keeps the output as the next call's. `None`
/// for a program without state.
pub fn state_manifest(graph: &Graph) -> Option<String> {
    if graph.state().is_empty() {
        return None;
    }
    let rows: Vec<serde_json::Value> = graph
        .state()
        .iter()
        .map(|s| {
            let meta = graph.input_meta(s.input);
            serde_json::json!({
                "name": s.name,
                "input": s.input,
                "output": s.output,
                "shape": meta.map(|m| m.shape.clone()),
                "dtype": meta.map(|m| m.dtype.name()),
            })
        })
        .collect();
    let text = serde_json::to_string_pretty(&serde_json::json!({ "state": rows }));
    Some(text.unwrap_or_default() + "\n")
}

impl Artifacts {
    /// For a Triton device's C++ wrapper: writes `wrapper.cpp` into `dir`,
    /// where [`Artifacts::write_to`] wrote `kernels.py`, around its kernels
    /// compiled into `binaries` (by kernel name). Returns its path and what
    /// the wrapper needs. `crate::runtime::ahead::write_wrapper` is the one
    /// step that compiles the kernels and calls this.
    pub fn write_cpp_wrapper(
        &self,
        dir: &Path,
        binaries: &HashMap<String, triton_cpp::Binary>,
    ) -> Result<(PathBuf, triton_cpp::Info), Error> {
        let CodeInfo::TritonCpp(plan) = &self.info else {
            return Err(Error::TritonCppWrapper(triton_cpp::Error::Unsupported(
                "this compile has no Triton kernels for a C++ wrapper".into(),
            )));
        };
        let (code, info) = triton_cpp::write(&self.scheduled, plan, binaries)?;
        let path = dir.join("wrapper.cpp");
        std::fs::write(&path, code).map_err(|source| Error::Write {
            path: path.clone(),
            source,
        })?;
        Ok((path, info))
    }

    /// Kernels generated.
    pub fn kernel_count(&self) -> usize {
        self.scheduled.program.kernel_count()
    }

    /// Calls into the device's library (matrix products).
    pub fn extern_count(&self) -> usize {
        self.scheduled.program.steps.len() - self.kernel_count()
    }

    /// Every file, by name: the generated code, the runtime it uses (the
    /// kernels' Python runtime it imports, for a Triton device; the C++
    /// runtime's headers it includes, `kiln/*.h`, for a C++ device, and the
    /// weights reader for a Triton device's C++ wrapper with weights), then
    /// the debug texts.
    pub fn files(&self) -> Vec<(&'static str, &str)> {
        let mut files = vec![(self.file_name, self.code.as_str())];
        match self.info {
            CodeInfo::Cpp { .. } => {
                files.extend(cpp::runtime::HEADERS.map(|h| (h.path, h.text)));
            }
            CodeInfo::Python { .. } => files.push((python::RUNTIME_FILE, python::RUNTIME)),
            CodeInfo::TritonCpp(ref plan) => {
                files.push((python::RUNTIME_FILE, python::RUNTIME));
                if !plan.weights.is_empty() {
                    let header = cpp::runtime::WEIGHTS;
                    files.push((header.path, header.text));
                }
                if plan.is_dynamic() {
                    let header = cpp::runtime::SIZES;
                    files.push((header.path, header.text));
                }
            }
        }
        if let Some(state) = &self.state {
            files.push((STATE_FILE, state.as_str()));
        }
        if let Some(d) = &self.debug {
            files.extend([
                ("graph_pre_passes.txt", d.graph_pre_passes.as_str()),
                ("graph_post_passes.txt", d.graph_post_passes.as_str()),
                ("ir_pre_fusion.txt", d.ir_pre_fusion.as_str()),
                ("ir_post_fusion.txt", d.ir_post_fusion.as_str()),
                ("graph.dot", d.graph_dot.as_str()),
            ]);
        }
        files
    }

    /// Writes every file into `dir` (created if needed), the weights file
    /// last; returns their paths.
    pub fn write_to(&self, dir: &Path) -> Result<Vec<PathBuf>, Error> {
        std::fs::create_dir_all(dir).map_err(|source| Error::Write {
            path: dir.to_path_buf(),
            source,
        })?;
        let mut paths = self
            .files()
            .into_iter()
            .map(|(name, text)| {
                let path = dir.join(name);
                if let Some(parent) = path.parent().filter(|p| *p != dir) {
                    std::fs::create_dir_all(parent).map_err(|source| Error::Write {
                        path: parent.to_path_buf(),
                        source,
                    })?;
                }
                std::fs::write(&path, text).map_err(|source| Error::Write {
                    path: path.clone(),
                    source,
                })?;
                Ok(path)
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let state_path = dir.join(STATE_FILE);
        if self.state.is_none() && state_path.exists() {
            // Left by an earlier compile into the same folder.
            std::fs::remove_file(&state_path).map_err(|source| Error::Write {
                path: state_path.clone(),
                source,
            })?;
        }
        let weights_path = dir.join(weights::FILE_NAME);
        if self.weights.is_empty() {
            // A file left by an earlier compile into the same folder is not ours.
            if weights_path.exists() {
                std::fs::remove_file(&weights_path).map_err(|source| Error::Write {
                    path: weights_path.clone(),
                    source,
                })?;
            }
        } else {
            self.weights.write(&weights_path)?;
            paths.push(weights_path);
        }
        Ok(paths)
    }
}

/// Compiles a validated graph for the device of `plugin`.
pub fn compile(graph: Graph, plugin: &Plugin, options: &Options) -> Result<Artifacts, Error> {
    let target = Target::query(plugin, options)?;
    compile_for(graph, plugin, target, options)
}

/// [`compile`] for a target already asked of `plugin` (its heuristics are
/// still asked per kernel).
pub fn compile_for(
    mut graph: Graph,
    plugin: &Plugin,
    target: Target,
    options: &Options,
) -> Result<Artifacts, Error> {
    let _span =
        tracing::info_span!("compile", graph = %graph.name, device = %target.device).entered();
    // A graph made at one value of sizes that vary: its kernels take their row counts at
    // the launch.
    let varying = Options {
        triton: crate::codegen::triton::Options {
            runtime_rows: options.triton.runtime_rows || !graph.sizes().is_empty(),
            ..options.triton.clone()
        },
        ..options.clone()
    };
    let options = &varying;
    let pre_passes = options.debug.then(|| crate::graph::print::to_text(&graph));
    let state = state_manifest(&graph);
    let start = Instant::now();
    // Triton targets compute attention in one fused kernel; a C++ target
    // gets its decomposition.
    let pass_options = crate::passes::Options {
        fused_attention: target.spec.scheduling == SchedulingKind::Triton,
        grouped_mm_kernel: target.spec.scheduling == SchedulingKind::Triton,
        split_reductions_for: crate::passes::split::Device {
            units: target.parallel_units,
            program_warps: target.reduction_program_warps,
        },
        convs_in_2d: target.spec.scheduling != SchedulingKind::Triton,
        matmul_alignment: target.matmul_alignment,
        // Only ATen's convolution, which the Python wrapper calls, takes
        // channels-last operands as they are.
        conv_channels_last: if target.wrapper == WrapperKind::Python {
            target.conv_channels_last
        } else {
            Default::default()
        },
        // Triton's reductions read a decoding step's weights faster than the
        // library's products of one row.
        few_rows: if target.spec.scheduling == SchedulingKind::Triton {
            crate::passes::few_rows::TRITON_ROWS
        } else {
            0
        },
        // The Python wrapper may run the library's attention, which takes
        // additive masks.
        additive_attention_masks: target.spec.scheduling == SchedulingKind::Triton
            && target.wrapper == WrapperKind::Python,
    };
    crate::passes::run_pipeline_with(&mut graph, &pass_options)?;
    if target.spec.scheduling == SchedulingKind::Triton && target.wrapper == WrapperKind::Cpp {
        // wrapper.cpp hands back dense tensors: a strided output is copied by a kernel.
        dense_outputs(&mut graph);
    }
    let passes = start.elapsed();
    let start = Instant::now();
    let schedule_options = crate::schedule::Options {
        features: target.spec.features,
        tiling: match target.spec.scheduling {
            kiln_plugin_api::SchedulingKind::Triton => crate::schedule::Tiling::Tiles,
            _ => crate::schedule::Tiling::Rows,
        },
        // torch.addmm takes the bias; the C++ wrappers' products take none.
        bias_epilogue: target.spec.scheduling == SchedulingKind::Triton
            && target.wrapper == WrapperKind::Python,
        // ATen's convolution takes channels-last operands and answers in them.
        conv_channels_last: target.spec.scheduling == SchedulingKind::Triton
            && target.wrapper == WrapperKind::Python,
        inplace_reductions: target.spec.scheduling == SchedulingKind::Triton,
        // Fused attention is a Triton device's; its units are the plugin's.
        attention_units: if target.spec.scheduling == SchedulingKind::Triton {
            target.parallel_units
        } else {
            0
        },
        // The Python wrapper's caller keeps the state tensors a kernel writes in
        // place; a Triton device's C++ wrapper keeps them in the state's output (the
        // input copied there first unless the caller passes one buffer as both).
        state_scatter: target.spec.scheduling == SchedulingKind::Triton,
        broadcast_rows: target.spec.scheduling == SchedulingKind::Triton,
        horizontal: target.spec.scheduling == SchedulingKind::Triton,
    };
    let scheduled = crate::schedule::schedule_with(&graph, &schedule_options)?;
    refuse_dynamic(&scheduled.program, &target)?;
    let schedule = start.elapsed();
    let start = Instant::now();
    let (file_name, code, info) = generate(&scheduled, plugin, &target, options)?;
    let keys = match &info {
        CodeInfo::Python { wrapper, .. } => &wrapper.weights,
        CodeInfo::Cpp { wrapper, .. } => &wrapper.weights,
        CodeInfo::TritonCpp(plan) => &plan.weights,
    };
    let weights = Weights::from_keys(&scheduled.program, keys);
    let codegen = start.elapsed();
    let debug = match pre_passes {
        Some(graph_pre_passes) => Some(DebugFiles {
            graph_pre_passes,
            graph_post_passes: crate::graph::print::to_text(&graph),
            ir_pre_fusion: crate::schedule::pre_fusion_text(&graph, &schedule_options)?,
            ir_post_fusion: crate::schedule::print::program_text(&scheduled, &info.kernel_names()),
            graph_dot: crate::schedule::print::kernel_dot(&graph, &scheduled, &info.kernel_names()),
        }),
        None => None,
    };
    Ok(Artifacts {
        target,
        file_name,
        code,
        info,
        graph,
        scheduled,
        debug,
        weights,
        timings: Timings {
            passes,
            schedule,
            codegen,
        },
        state,
    })
}

/// Refuses a program of dynamic shapes that its target's code generator does not
/// take yet: every wrapper (a Triton device's Python and C++ wrappers, the C++ of
/// a C++-scheduled device) takes kernels, matrix products, convolutions over a
/// symbolic batch (where it has a convolution at all) and (on a Triton device)
/// attention over symbolic sizes; the `index_copy` template takes one size so far
/// (docs/dynamic-shapes.md).
fn refuse_dynamic(program: &crate::schedule::ir::Program, target: &Target) -> Result<(), Error> {
    use crate::schedule::ir::{ExternOp, Step};
    let Some((name, shape)) = crate::schedule::symbolic_buffer(program) else {
        return Ok(());
    };
    let takes_symbols = match target.spec.scheduling {
        SchedulingKind::Triton => true,
        SchedulingKind::Cpp => target.wrapper == WrapperKind::Cpp,
    };
    let template = program.steps.iter().find_map(|s| match s {
        Step::Extern(e) if matches!(e.op, ExternOp::IndexCopy { .. }) => Some(e.op.name()),
        _ => None,
    });
    let what = match (takes_symbols, template) {
        (true, None) => return Ok(()),
        (true, Some(op)) => format!(
            "symbolic sizes {shape:?}: the program calls `{op}`, which Kiln generates for \
             one size only so far; compile it at one size (--specialize)"
        ),
        (false, _) => format!(
            "symbolic sizes {shape:?}: Kiln generates code over dynamic shapes for a Triton \
             device's wrappers and a C++ device's wrapper.cpp, not for this device's {} \
             wrapper; compile it at one size (--specialize)",
            wrapper_label(target.wrapper)
        ),
    };
    Err(crate::schedule::Error::Unsupported {
        node: name.to_string(),
        what,
    }
    .into())
}

/// Makes every graph output that is a strided view (a transpose, a slice)
/// the output of a `clone` into a dense tensor instead.
fn dense_outputs(graph: &mut Graph) {
    use crate::graph::ir::{Arg, Node, TensorMeta};
    let mut outputs = graph.outputs().to_vec();
    let mut changed = false;
    for v in outputs.iter_mut() {
        let Some(meta) = graph
            .node(v.node)
            .and_then(|n| n.outputs.get(v.output as usize))
            .cloned()
        else {
            continue;
        };
        if meta.strides == crate::graph::shape::contiguous_sizes(&meta.shape)
            || meta
                .fixed()
                .is_some_and(|m| crate::graph::shape::is_dense(&m.shape, &m.strides))
        {
            continue;
        }
        let name = graph.fresh_name("dense_output");
        let node = graph.add_node(Node {
            name,
            op: crate::graph::ops::Op::Clone,
            args: vec![Arg::Value(*v)],
            outputs: vec![TensorMeta::contiguous_sizes(meta.shape.clone(), meta.dtype)],
            line: None,
        });
        *v = crate::graph::ir::ValueId { node, output: 0 };
        changed = true;
    }
    if changed {
        graph.set_outputs(outputs);
    }
}

/// `kernels.py` and the plan of `wrapper.cpp` for a Triton device's C++
/// wrapper: every name of both files reserved before any kernel or graph name.
fn generate_triton_cpp(
    scheduled: &Scheduled,
    plugin: &Plugin,
    target: &Target,
    options: &Options,
    mut namer: Namer,
) -> Result<(&'static str, String, CodeInfo), Error> {
    let strings = triton_cpp::Strings {
        header: target.string(Override::KernelHeader),
        driver: target.string(Override::KernelDriver),
        stream_type: target.string(Override::CppStreamType),
        kernel_type: target.string(Override::CppKernelType),
        device: target.device.clone(),
        origin: target.origin.clone(),
    };
    let python_strings = python::DeviceStrings {
        device: target.device.clone(),
        import_raw_stream: String::new(),
        set_device: String::new(),
        synchronize: String::new(),
        device_guard: String::new(),
        origin: target.origin.clone(),
        triton_target: target.triton_target.clone(),
    };
    // kernels.py is Python and wrapper.cpp C++: the kernels' names appear in both.
    python::reserve(&mut namer, &python_strings);
    triton_cpp::reserve(&mut namer, &strings);
    let p = &scheduled.program;
    let triton_options = triton::Options {
        library_kernels: true,
        ..options.triton.clone()
    };
    let kernels =
        triton::write(p, plugin, &triton_options, &mut namer).map_err(Error::TritonKernels)?;
    let code = python::kernels_module(
        p,
        &kernels,
        &target.device,
        &target.origin,
        target.triton_target.as_ref(),
    )?;
    let wrapper_options = triton_cpp::Options {
        device_index: options.device_index,
        graphs: options.device_graphs,
    };
    let plan = triton_cpp::plan(scheduled, kernels, strings, wrapper_options, &mut namer)?;
    Ok(("kernels.py", code, CodeInfo::TritonCpp(Box::new(plan))))
}

/// Kernels and wrapper for the target's scheduling kind, through one
/// [`Namer`] that has every writer's names reserved before any graph name.
fn generate(
    scheduled: &Scheduled,
    plugin: &Plugin,
    target: &Target,
    options: &Options,
) -> Result<(&'static str, String, CodeInfo), Error> {
    let mut namer = Namer::new();
    let ahead =
        target.wrapper == WrapperKind::Cpp && target.spec.scheduling == SchedulingKind::Triton;
    if options.device_graphs && !ahead {
        return Err(Error::TritonCppWrapper(triton_cpp::Error::Unsupported(
            format!(
                "device graphs (--cuda-graph) are captured by the C++ wrapper of a Triton device; \
             device `{}` with the {} wrapper has none",
                target.device,
                wrapper_label(target.wrapper)
            ),
        )));
    }
    match target.wrapper {
        WrapperKind::Python => {
            let strings = target.python_strings();
            python::reserve(&mut namer, &strings);
            let kernels = triton::write(&scheduled.program, plugin, &options.triton, &mut namer)
                .map_err(Error::TritonKernels)?;
            let python_options = python::Options {
                device_index: options.device_index,
            };
            let (code, wrapper) =
                python::write(scheduled, &kernels, &strings, &python_options, &mut namer)?;
            let info = CodeInfo::Python {
                wrapper,
                kernels: kernels.info,
            };
            Ok(("output_code.py", code, info))
        }
        WrapperKind::Cpp if target.spec.scheduling == SchedulingKind::Triton => {
            generate_triton_cpp(scheduled, plugin, target, options, namer)
        }
        WrapperKind::Cpp => {
            let header = target.string(Override::KernelHeader);
            cpp_wrapper::reserve(&mut namer, &header);
            let kernels = cpp::write(&scheduled.program, plugin, &options.cpp, &mut namer)
                .map_err(Error::CppKernels)?;
            let (code, wrapper) = cpp_wrapper::write(
                scheduled,
                &kernels,
                &header,
                &target.origin,
                &options.cpp_wrapper,
                &mut namer,
            )?;
            let info = CodeInfo::Cpp {
                wrapper,
                kernels: kernels.info,
            };
            Ok(("wrapper.cpp", code, info))
        }
    }
}
