//! `host compile FILE --device D -o DIR`: a graph to device code, in
//! TorchInductor's debug layout: `output_code.py` for a Triton device,
//! `wrapper.cpp` for a C++ device (`cpu`). The work is `driver::compile`'s;
//! this file only reads the arguments and writes the files.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, ValueEnum};

use super::{Cli, CliError, DeviceSpec, GraphFile};
use crate::driver;
use crate::plugins::WrapperKind;

/// The wrapper generators, as the command line names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WrapperArg {
    /// `output_code.py`: a Python wrapper (Triton devices).
    Python,
    /// `wrapper.cpp`: a C++ wrapper (C++ devices such as cpu).
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
    /// C++ kernels).
    #[arg(long, value_enum)]
    pub wrapper: Option<WrapperArg>,

    /// Offer every launch config the plugin proposes to triton.autotune instead of using the first.
    /// Triton benchmarks them at the first call and, from Triton 3.4 on, keeps its choice in its
    /// cache directory (TRITON_CACHE_DIR) for later processes.
    #[arg(long)]
    pub autotune: bool,

    /// Compile every Triton kernel now, in parallel, into kernels/ beside output_code.py, so
    /// that the first call loads them instead of compiling. Runs `output_code.py --precompile`
    /// with $KILN_PYTHON (default python3), which needs Triton but neither torch nor a GPU;
    /// the wrapper uses the binaries where they match the running device's Triton target.
    #[arg(long)]
    pub precompile: bool,

    /// Also write graph_pre_passes.txt, graph_post_passes.txt, ir_pre_fusion.txt,
    /// ir_post_fusion.txt and graph.dot (nodes coloured by kernel).
    #[arg(long)]
    pub debug: bool,
}

/// Runs `host compile`.
pub fn run(cli: &Cli, args: &CompileArgs) -> Result<ExitCode, CliError> {
    let plugin = super::device_plugin(cli, &args.device)?;
    let start = Instant::now();
    let graph = args.graph.load(&cli.budget()?)?;
    let mut options = driver::Options {
        wrapper: args.wrapper.map(WrapperKind::from),
        device_index: args.device.index,
        debug: args.debug,
        ..driver::Options::default()
    };
    options.triton.autotune = args.autotune;
    let artifacts = driver::compile(graph, &plugin, &options)?;
    let paths = artifacts.write_to(&args.out)?;
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
    if args.precompile {
        let code = paths
            .iter()
            .find(|p| p.file_name().is_some_and(|n| n == "output_code.py"))
            .ok_or("--precompile compiles the Triton kernels of output_code.py; this device's wrapper has none (leave --precompile out)")?;
        precompile(code)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `output_code.py --precompile`, passing its report on.
fn precompile(code: &std::path::Path) -> Result<(), CliError> {
    let python = std::env::var("KILN_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let output = std::process::Command::new(&python)
        .arg(code)
        .arg("--precompile")
        .output()
        .map_err(|e| {
            format!(
                "--precompile runs `{python} {} --precompile`, but `{python}` could not be started ({e}): \
                 install Python 3 with Triton (pip install triton) or set KILN_PYTHON",
                code.display()
            )
        })?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        let failed: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("FAILED") || l.contains("Error"))
            .collect();
        let detail = if failed.is_empty() {
            stderr.trim().to_string()
        } else {
            failed.join("\n")
        };
        return Err(format!(
            "precompiling the kernels of {} failed ({}):\n{detail}\n\
             (the wrapper still works: it compiles the kernels at their first launch)",
            code.display(),
            output.status
        )
        .into());
    }
    eprint!("precompiled: {stdout}");
    Ok(())
}
