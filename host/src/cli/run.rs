//! `host run FILE --device D [--inputs DIR] [--seed N] [--out DIR] [--check] [--bench N]`:
//! compiles a graph (cached), loads it and runs it in-process, and optionally
//! checks every output against the reference interpreter. A C++ device (`cpu`)
//! runs its `wrapper.cpp`; a Triton device (`cuda`) runs the C++ wrapper of
//! `host compile --wrapper cpp`: its kernels compiled ahead by Triton (in a
//! child process, cached by the kernels' text), the wrapper built with the
//! plugin's `cpp_build_flags`, and called with no Python in this process.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;

use super::{Cli, CliError, DeviceSpec, GraphFile, InputArgs};
use crate::driver;
use crate::runtime::ahead;

/// Arguments of `host run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The graph.
    #[command(flatten)]
    pub graph: GraphFile,
    /// The device, optionally with its index (`cuda:1`). A C++ device (`cpu`) runs its C++
    /// kernels, built with $CXX and $KILN_CXXFLAGS (default: the flags on wrapper.cpp's `// Build:`
    /// line); the cpu device's large float32/float64 matrix products call a BLAS library found
    /// when they first run ($KILN_BLAS, else MKL, and on hosts built without AVX-512 also OpenBLAS,
    /// BLIS or FlexiBLAS; KILN_BLAS=off keeps Kiln's own kernel). A Triton device (`cuda`) runs the C++ wrapper of `host compile --wrapper cpp`,
    /// built with $CXX (default c++) and the plugin's flags (for cuda: the CUDA toolkit under
    /// $CUDA_HOME, else nvcc's, else /usr/local/cuda, with cuBLAS and the driver library), plus
    /// $KILN_DEVICE_CXXFLAGS. Its kernels are compiled by Triton through $KILN_PYTHON (else
    /// target/test-python, else python3) in a child process, once per kernel text (cached in $KILN_CACHE_DIR).
    #[arg(long, value_name = "DEVICE[:INDEX]", default_value = "cpu")]
    pub device: DeviceSpec,
    /// The inputs.
    #[command(flatten)]
    pub inputs: InputArgs,
    /// Write `outputN.bin` files here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Compare every output with the reference interpreter; exit non-zero when one differs.
    #[arg(long)]
    pub check: bool,
    /// Run N more times and print the median time.
    #[arg(long, value_name = "N")]
    pub bench: Option<usize>,
}

/// Runs `host run`.
pub fn run(cli: &Cli, args: &RunArgs) -> Result<ExitCode, CliError> {
    if let Some(out) = &args.out {
        super::out_dir::check(out, "--out")?;
    }
    let plugin = super::device_plugin(cli, &args.device)?;
    // Exactly what `host compile` writes for the device: the same driver, the
    // same options.
    let options = driver::Options {
        device_index: args.device.index,
        ..driver::Options::default()
    };
    let target = driver::Target::query(&plugin, &options)?;
    if target.spec.scheduling == kiln_plugin_api::SchedulingKind::Triton {
        return run_device(cli, args, &plugin);
    }
    let budget = cli.budget()?;
    let graph = args.graph.load(&budget)?;
    let start = Instant::now();
    let artifacts = driver::compile_for(graph.clone(), &plugin, target, &options)?;
    let generated = start.elapsed();
    allow(&budget, args, &graph, "the compiled program", &artifacts)?;
    let inputs = args.inputs.read(&graph)?;
    let building = super::progress::Activity::start("building the C++ library", None);
    let start = Instant::now();
    let (module, built) =
        crate::runtime::build_and_load(&artifacts.code, &artifacts.scheduled, &artifacts.weights)?;
    let build_time = start.elapsed();
    building.finish();
    eprintln!(
        "compiled {} for {} in {:.1} ms ({} kernel(s)); library {} {}",
        args.graph.file.display(),
        args.device,
        generated.as_secs_f64() * 1e3,
        artifacts.kernel_count(),
        built.library.display(),
        if built.cached {
            "found in the cache".to_string()
        } else {
            format!("built in {:.2} s", build_time.as_secs_f64())
        }
    );
    call_and_report(args, &graph, &inputs, &module, "")
}

/// `host run` on a Triton device, through its C++ wrapper.
fn run_device(
    cli: &Cli,
    args: &RunArgs,
    plugin: &crate::plugins::Plugin,
) -> Result<ExitCode, CliError> {
    let options = driver::Options {
        wrapper: Some(crate::plugins::WrapperKind::Cpp),
        device_index: args.device.index,
        ..driver::Options::default()
    };
    let target = driver::Target::query(plugin, &options)?;
    let budget = cli.budget()?;
    let graph = args.graph.load(&budget)?;
    let start = Instant::now();
    let artifacts = driver::compile_for(graph.clone(), plugin, target, &options)?;
    let generated = start.elapsed();
    allow(
        &budget,
        args,
        &graph,
        "the inputs and outputs in host memory",
        &artifacts,
    )?;
    let inputs = args.inputs.read(&graph)?;
    let cache = crate::runtime::compile::cache_dir();
    // The folder kiln_init reads: the kernels (linked to the cache) and the
    // weights, removed once the wrapper has loaded them. The wrapper is what
    // `host compile --wrapper cpp` writes, through the same step.
    let scratch = ahead::scratch_dir(&cache, "run")?;
    let run_dir = scratch.path();
    let wrapper =
        ahead::write_wrapper(&artifacts, run_dir, &ahead::Binaries::Cached(cache.clone()))?;
    if let Some(precompiled) = &wrapper.precompiled {
        eprint!("precompiled: {precompiled}");
    }
    let source = std::fs::read_to_string(&wrapper.path)
        .map_err(|e| format!("cannot read {}: {e}", wrapper.path.display()))?;
    let flags = plugin.cpp_build_flags()?.unwrap_or_default();
    let compiler = crate::runtime::device::compiler(&flags)?;
    let building = super::progress::Activity::start("building the C++ wrapper", None);
    let start = Instant::now();
    let built = crate::runtime::compile::build(&source, &compiler, &cache).map_err(|e| {
        let hint = match &e {
            crate::runtime::compile::Error::Compile { .. } => format!(
                "\nthe wrapper is built with the {} plugin's flags ({}) and $KILN_DEVICE_CXXFLAGS: \
                 install the device's toolkit where the plugin looks for it (see its documentation) \
                 or name its include and library folders in KILN_DEVICE_CXXFLAGS (-I... -L...)",
                plugin.name(),
                if flags.is_empty() {
                    "none".to_string()
                } else {
                    flags.join(" ")
                }
            ),
            _ => String::new(),
        };
        format!("{e}{hint}")
    })?;
    let build_time = start.elapsed();
    building.finish();
    eprintln!(
        "compiled {} for {} in {:.1} ms ({} kernel(s), compiled ahead in {}); wrapper {} {}",
        args.graph.file.display(),
        args.device,
        generated.as_secs_f64() * 1e3,
        artifacts.kernel_count(),
        wrapper.kernels.display(),
        built.library.display(),
        if built.cached {
            "found in the cache".to_string()
        } else {
            format!("built in {:.2} s", build_time.as_secs_f64())
        }
    );
    let module =
        crate::runtime::device::DeviceModule::load(&built.library, &artifacts.scheduled, run_dir)?;
    call_and_report(
        args,
        &graph,
        &inputs,
        &module,
        " (inputs copied in, outputs copied out)",
    )
}

/// Refuses a run whose inputs, program and reference interpreter would not
/// fit the memory budget; `program` names what the program holds.
fn allow(
    budget: &crate::memory::Budget,
    args: &RunArgs,
    graph: &crate::graph::Graph,
    program: &str,
    artifacts: &driver::Artifacts,
) -> Result<(), CliError> {
    budget.allow_parts(
        &format!("running {}", args.graph.file.display()),
        &[
            ("inputs", args.inputs.memory_needed(graph)),
            (program, crate::runtime::memory_needed(&artifacts.scheduled)),
            (
                "the reference interpreter",
                if args.check {
                    crate::interp::memory_needed(graph)
                } else {
                    Some(0)
                },
            ),
        ],
    )?;
    Ok(())
}

/// The first call's error `e`. Where the program read an index out of range and
/// `--check` asked for the reference interpreter, the interpreter's reason too: which
/// value, of which dim, out of what size.
fn call_error(
    e: crate::runtime::Error,
    args: &RunArgs,
    graph: &crate::graph::Graph,
    inputs: &[crate::tensor::Tensor],
) -> CliError {
    if args.check && matches!(e, crate::runtime::Error::IndexOutOfRange) {
        let reference = super::progress::evaluate("finding the index out of range", graph, inputs);
        if let Err(why) = reference {
            return format!("{e}; the reference interpreter: {why}").into();
        }
    }
    e.into()
}

/// Calls `module` once (timed) and `--bench` more times, then writes the
/// outputs or checks them against the reference interpreter; `timing` says
/// what the times include.
fn call_and_report(
    args: &RunArgs,
    graph: &crate::graph::Graph,
    inputs: &[crate::tensor::Tensor],
    module: &dyn crate::runtime::Loaded,
    timing: &str,
) -> Result<ExitCode, CliError> {
    let mut prepared = module.prepare(inputs)?;
    let t = Instant::now();
    module
        .call(&mut prepared)
        .map_err(|e| call_error(e, args, graph, inputs))?;
    let first = t.elapsed();
    let outs = module.outputs(&mut prepared);
    println!("ran in {:.3} ms{timing}", first.as_secs_f64() * 1e3);
    if let Some(n) = args.bench {
        let mut times = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            module.call(&mut prepared)?;
            times.push(t.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        if let Some(median) = times.get(times.len() / 2) {
            println!("bench: median of {n} runs {:.3} ms{timing}", median * 1e3);
        }
    }
    super::outputs::emit(
        &outs,
        &graph.output_names(),
        args.out.as_deref(),
        !args.check,
    )?;
    if args.check && !super::outputs::check(&outs, graph, inputs)? {
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
