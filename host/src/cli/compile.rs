//! `host compile FILE --device D -o DIR`: a graph to device code, in
//! TorchInductor's debug layout: `output_code.py` for a Triton device,
//! `wrapper.cpp` for a C++ device (`cpu`), or, with `--wrapper cpp` on a
//! Triton device, `kernels.py`, its kernels compiled into `kernels/`, and a
//! `wrapper.cpp` that loads them. The work is `driver::compile`'s and, for
//! that wrapper, `runtime::ahead::write_wrapper`'s; this file only reads the
//! arguments and reports.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, ValueEnum};

use super::{out_dir, Cli, CliError, DeviceSpec, GraphFile};
use crate::driver;
use crate::plugins::WrapperKind;
use crate::runtime::ahead;

/// The wrapper generators, as the command line names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WrapperArg {
    /// `output_code.py`: a Python wrapper (Triton devices).
    Python,
    /// `wrapper.cpp`: a C++ wrapper. On a Triton device, the kernels are compiled now (Triton's
    /// compiler, through $KILN_PYTHON) into kernels/, and wrapper.cpp loads and launches them
    /// through the plugin's kernel_driver, with no Python or PyTorch at run time.
    Cpp,
}

impl From<WrapperArg> for WrapperKind {
    fn from(w: WrapperArg) -> WrapperKind {
        match w {
            WrapperArg::Python => WrapperKind::Python,
            WrapperArg::Cpp => WrapperKind::Cpp,
        }
    }
}

/// Arguments of `host compile`.
#[derive(Debug, Args)]
pub struct CompileArgs {
    /// The graph.
    #[command(flatten)]
    pub graph: GraphFile,

    /// The device to generate code for: a device name a plugin provides (see `host list`),
    /// optionally with the index of the device of that kind the code runs on (`cuda:1`).
    #[arg(long, value_name = "DEVICE[:INDEX]")]
    pub device: DeviceSpec,

    /// The output folder, created if needed: output_code.py (or wrapper.cpp) goes there, and
    /// weights.safetensors beside it when the graph has constants of more than 64 elements (a
    /// model's weights); the code reads that file, so keep the two together.
    #[arg(short = 'o', long = "out", value_name = "DIR", default_value = "out")]
    pub out: PathBuf,

    /// The wrapper to write; by default the device's own (python for Triton kernels, cpp for
    /// C++ kernels). `cpp` on a Triton device writes kernels.py, compiles its kernels into
    /// kernels/ with $KILN_PYTHON (else target/test-python, else python3; it needs Triton with a
    /// backend for the device) and writes wrapper.cpp, which exports kiln_init(dir) and
    /// kiln_call(inputs, outputs, stream).
    #[arg(long, value_enum)]
    pub wrapper: Option<WrapperArg>,

    /// Offer every launch config the plugin proposes to triton.autotune instead of using the first.
    /// Triton benchmarks them at the first call and, from Triton 3.4 on, keeps its choice in its
    /// cache directory (TRITON_CACHE_DIR) for later processes.
    #[arg(long)]
    pub autotune: bool,

    /// With --wrapper cpp on a Triton device: the first kiln_call with a set of input/output
    /// pointers and a stream runs directly and captures its launches into a device graph (a CUDA
    /// graph on cuda); later calls with the same pointers and stream replay the graph: one launch
    /// per call instead of one per kernel. Calls on the default (null) stream, which cannot be
    /// captured, launch directly.
    /// Needs the plugin's kernel_driver to define the kilnGraph* functions (the cuda plugin does).
    #[arg(long)]
    pub cuda_graph: bool,

    /// Compile every Triton kernel now, in parallel, into kernels/ beside output_code.py, so
    /// that the first call loads them instead of compiling. Runs `output_code.py --precompile`
    /// with $KILN_PYTHON (else target/test-python, else python3), which needs Triton but neither
    /// torch nor a GPU;
    /// the wrapper uses the binaries where they match the running device's Triton target.
    #[arg(long)]
    pub precompile: bool,

    /// For a C++ device (cpu): also build wrapper.cpp, as `host run` does (the system C++
    /// compiler, KILN_CXX and KILN_CXXFLAGS; the build cache, KILN_CACHE_DIR), into kiln.so
    /// beside it: a library to load with dlopen/ctypes, whose C interface docs/cpp-wrapper.md
    /// gives (kiln_load_weights, then kiln_call).
    #[arg(long)]
    pub library: bool,

    /// Also write graph_pre_passes.txt, graph_post_passes.txt, ir_pre_fusion.txt,
    /// ir_post_fusion.txt and graph.dot (nodes coloured by kernel).
    #[arg(long)]
    pub debug: bool,
}

/// Runs `host compile`.
pub fn run(cli: &Cli, args: &CompileArgs) -> Result<ExitCode, CliError> {
    if args.autotune && args.wrapper == Some(WrapperArg::Cpp) {
        return Err(
            "--autotune benchmarks launch configs with Triton at run time, and wrapper.cpp \
                    launches kernels compiled ahead: leave --autotune out for --wrapper cpp"
                .into(),
        );
    }
    if args.cuda_graph && args.wrapper != Some(WrapperArg::Cpp) {
        return Err(
            "--cuda-graph captures the C++ wrapper's call of a Triton device: add --wrapper cpp \
             (the Python wrapper launches through Triton's launcher, which Kiln does not capture)"
                .into(),
        );
    }
    out_dir::check(&args.out, "-o/--out")?;
    let plugin = super::device_plugin(cli, &args.device)?;
    let start = Instant::now();
    let graph = args.graph.load(&cli.budget()?)?;
    let mut options = driver::Options {
        wrapper: args.wrapper.map(WrapperKind::from),
        device_index: args.device.index,
        debug: args.debug,
        device_graphs: args.cuda_graph,
        ..driver::Options::default()
    };
    options.triton.autotune = args.autotune;
    let artifacts = driver::compile(graph, &plugin, &options)?;
    if matches!(artifacts.info, driver::CodeInfo::TritonCpp(_)) {
        // The C++ wrapper loads compiled kernels: compile them now, then write it.
        let wrapper = ahead::write_wrapper(&artifacts, &args.out, &ahead::Binaries::Compile)?;
        let mut written = wrapper.files.clone();
        written.push(wrapper.path.clone());
        report(args, &artifacts, &wrapper.files, start);
        report_removed(&out_dir::remove_stale(&args.out, &written, true)?);
        if let Some(precompiled) = &wrapper.precompiled {
            eprint!("precompiled: {precompiled}");
        }
        let info = &wrapper.info;
        eprintln!(
            "wrapper: {} ({} launch(es) per call, {:.1} MB of device workspace, {:.1} MB of constants)",
            wrapper.path.display(),
            info.kernels,
            info.workspace_bytes as f64 / 1e6,
            info.constants_bytes as f64 / 1e6
        );
        return Ok(ExitCode::SUCCESS);
    }
    if args.library && !matches!(artifacts.info, driver::CodeInfo::Cpp { .. }) {
        return Err(
            "--library builds the wrapper.cpp of a C++ device (cpu); this device writes \
                    output_code.py (leave --library out, or use --wrapper cpp on a Triton device)"
                .into(),
        );
    }
    let mut paths = artifacts.write_to(&args.out)?;
    if args.library {
        paths.push(write_library(&artifacts, &args.out)?);
    }
    report(args, &artifacts, &paths, start);
    report_removed(&out_dir::remove_stale(&args.out, &paths, args.precompile)?);
    if args.precompile {
        let code = paths
            .iter()
            .find(|p| p.file_name().is_some_and(|n| n == "output_code.py"))
            .ok_or("--precompile compiles the Triton kernels of output_code.py; this device's wrapper has none (leave --precompile out)")?;
        let precompiled = ahead::precompile(code, ahead::Purpose::PythonWrapper)?;
        eprint!("precompiled: {precompiled}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `--library`: wrapper.cpp built (or found in the build cache) and copied to
/// `out/kiln.so`.
fn write_library(
    artifacts: &driver::Artifacts,
    out: &std::path::Path,
) -> Result<PathBuf, CliError> {
    let built = crate::runtime::build_library(&artifacts.code, &artifacts.scheduled)?;
    let path = out.join("kiln.so");
    let temp = out.join(".kiln.so.partial");
    std::fs::copy(&built.library, &temp)
        .and_then(|_| std::fs::rename(&temp, &path))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    eprintln!(
        "library: {} ({})",
        path.display(),
        if built.cached {
            "found in the build cache"
        } else {
            "built"
        }
    );
    Ok(path)
}

/// The files of an earlier compile that [`out_dir::remove_stale`] removed.
fn report_removed(removed: &[PathBuf]) {
    if !removed.is_empty() {
        let names: Vec<String> = removed.iter().map(|p| p.display().to_string()).collect();
        eprintln!(
            "removed what an earlier compile into the same folder wrote and this one does not: {}",
            names.join(", ")
        );
    }
}

/// What was compiled, in how long, and where it went.
fn report(args: &CompileArgs, artifacts: &driver::Artifacts, paths: &[PathBuf], start: Instant) {
    let elapsed = start.elapsed();
    eprintln!(
        "compiled {} for {} in {:.2} ms: {} kernel(s), {} extern call(s) -> {}",
        args.graph.file.display(),
        args.device,
        elapsed.as_secs_f64() * 1e3,
        artifacts.kernel_count(),
        artifacts.extern_count(),
        paths
            .first()
            .map_or_else(String::new, |p| p.display().to_string())
    );
    if !artifacts.weights.is_empty() {
        eprintln!(
            "weights: {} tensor(s), {:.1} MB -> {}",
            artifacts.weights.entries.len(),
            artifacts.weights.data_bytes() as f64 / 1e6,
            args.out.join(crate::codegen::weights::FILE_NAME).display()
        );
    }
}
