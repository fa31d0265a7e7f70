//! `host run FILE --device cpu [--inputs DIR] [--seed N] [--out DIR] [--check] [--bench N]`:
//! compiles a graph to C++ (cached), loads it and runs it in-process, and
//! optionally checks every output against the reference interpreter.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;

use super::{Cli, CliError, DeviceSpec, GraphFile, InputArgs};
use crate::driver;

/// Arguments of `host run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The graph.
    #[command(flatten)]
    pub graph: GraphFile,
    /// The device: one whose plugin schedules C++ kernels (`cpu`).
    #[arg(long, value_name = "DEVICE", default_value = "cpu")]
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
    let plugin = super::device_plugin(cli, &args.device)?;
    // Exactly what `host compile` writes for the device: the same driver, the
    // same options.
    let options = driver::Options {
        device_index: args.device.index,
        ..driver::Options::default()
    };
    let target = driver::Target::query(&plugin, &options)?;
    if target.spec.scheduling != kiln_plugin_api::SchedulingKind::Cpp {
        return Err(format!(
            "device `{}` does not schedule C++ kernels: host run executes on the cpu device; \
             for cuda/gxu/xpu use output_code.py (host compile {} --device {} -o DIR)",
            plugin.name(),
            args.graph.file.display(),
            args.device
        )
        .into());
    }
    let budget = cli.budget()?;
    let graph = args.graph.load(&budget)?;
    let start = Instant::now();
    let artifacts = driver::compile_for(graph.clone(), &plugin, target, &options)?;
    let generated = start.elapsed();
    budget.allow_parts(
        &format!("running {}", args.graph.file.display()),
        &[
            ("inputs", args.inputs.memory_needed(&graph)),
            (
                "the compiled program",
                crate::runtime::memory_needed(&artifacts.scheduled),
            ),
            (
                "the reference interpreter",
                if args.check {
                    crate::interp::memory_needed(&graph)
                } else {
                    Some(0)
                },
            ),
        ],
    )?;
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
    let mut prepared = module.prepare(&inputs)?;
    let t = Instant::now();
    module.call(&mut prepared)?;
    let first = t.elapsed();
    let outs = module.outputs(&mut prepared);
    println!("ran in {:.3} ms", first.as_secs_f64() * 1e3);
    if let Some(n) = args.bench {
        let mut times = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            module.call(&mut prepared)?;
            times.push(t.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        if let Some(median) = times.get(times.len() / 2) {
            println!("bench: median of {n} runs {:.3} ms", median * 1e3);
        }
    }
    super::outputs::emit(
        &outs,
        &graph.output_names(),
        args.out.as_deref(),
        !args.check,
    )?;
    if args.check && !super::outputs::check(&outs, &graph, &inputs)? {
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
