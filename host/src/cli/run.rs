//! `host run FILE --device cpu [--inputs DIR] [--seed N] [--out DIR] [--check] [--bench N]`:
//! compiles a graph to C++ (cached), loads it and runs it in-process, and
//! optionally checks every output against the reference interpreter.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;

use super::{Cli, CliError};
use crate::graph::dtype::DType;
use crate::tensor::Tensor;
use crate::tensor_io;

/// Arguments of `host run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The graph file: kiln-graph/1 TOML or a torch.export `.pt2` archive.
    pub file: PathBuf,
    /// For a `.pt2` archive: keep parameters, buffers and constants as graph inputs
    /// (after the user inputs) instead of baking them in from the archive.
    #[arg(long)]
    pub params_as_inputs: bool,
    /// The device: one whose plugin schedules C++ kernels (`cpu`).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Folder with one raw file per input (`NAME.bin` or `inputN.bin`); random inputs when absent.
    #[arg(long, value_name = "DIR")]
    pub inputs: Option<PathBuf>,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
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

/// The largest error a dtype tolerates, relative to the output's largest magnitude.
pub fn tolerance(d: DType) -> f64 {
    match d {
        DType::Float32 => 1e-4,
        DType::Float16 | DType::BFloat16 => 1e-2,
        DType::Float64 => 1e-9,
        DType::Bool | DType::Int32 | DType::Int64 => 0.0,
    }
}

/// `(max absolute error, max error relative to the reference's largest magnitude)`.
/// NaN where the reference has NaN is a match; NaN anywhere else is infinitely wrong.
pub fn errors(got: &Tensor, want: &Tensor) -> (f64, f64) {
    let (g, w) = (got.to_vec(), want.to_vec());
    if g.len() != w.len() {
        return (f64::INFINITY, f64::INFINITY);
    }
    let scale = w
        .iter()
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    let mut abs = 0.0f64;
    for (a, b) in g.iter().zip(&w) {
        let e = if a.is_nan() && b.is_nan() || a == b {
            0.0
        } else if a.is_nan() || b.is_nan() {
            f64::INFINITY
        } else {
            (a - b).abs()
        };
        abs = abs.max(e);
    }
    let rel = if abs == 0.0 {
        0.0
    } else {
        abs / scale.max(f64::MIN_POSITIVE)
    };
    (abs, rel)
}

/// Runs `host run`.
pub fn run(cli: &Cli, args: &RunArgs) -> Result<ExitCode, CliError> {
    let registry = super::discover(cli)?;
    let plugin = registry
        .get(&args.device)
        .ok_or_else(|| registry.explain_missing(&args.device))?
        .clone();
    let spec = plugin.backend_spec()?;
    if spec.map(|s| s.scheduling) != Some(kiln_plugin_api::SchedulingKind::Cpp) {
        return Err(format!(
            "device `{}` does not schedule C++ kernels: host run executes on the cpu device; \
             for cuda/gxu/xpu use output_code.py (host compile {} --device {} -o DIR)",
            plugin.name(),
            args.file.display(),
            plugin.name()
        )
        .into());
    }
    let graph = crate::graph::load_with(
        &args.file,
        &crate::graph::LoadOptions {
            params_as_inputs: args.params_as_inputs,
        },
    )?;
    let decls: Vec<(String, crate::graph::TensorMeta)> = graph
        .inputs()
        .iter()
        .filter_map(|&id| graph.node(id))
        .filter_map(|n| Some((n.name.clone(), n.outputs.first()?.clone())))
        .collect();
    let inputs = match &args.inputs {
        Some(dir) => tensor_io::read_inputs(dir, &decls)?,
        None => {
            let metas: Vec<_> = decls.iter().map(|(_, m)| m.clone()).collect();
            tensor_io::random_inputs(&metas, args.seed)
        }
    };
    let start = Instant::now();
    let mut lowered = graph.clone();
    crate::passes::run_pipeline(&mut lowered)?;
    let scheduled = crate::schedule::schedule(&lowered)?;
    let output = crate::codegen::cpp_wrapper(&scheduled, &plugin)?;
    let generated = start.elapsed();
    let (module, built) = crate::runtime::build_and_load(&output.source, &scheduled)?;
    eprintln!(
        "compiled {} for {} in {:.1} ms ({} kernel(s); library {} {})",
        args.file.display(),
        plugin.name(),
        generated.as_secs_f64() * 1e3,
        output.kernels.len(),
        built.library.display(),
        if built.cached {
            "from the cache"
        } else {
            "built"
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
    match &args.out {
        Some(dir) => {
            for p in tensor_io::write_outputs(dir, &outs)? {
                println!("wrote {}", p.display());
            }
        }
        None if !args.check => {
            for (i, t) in outs.iter().enumerate() {
                println!("output{i}: {}", super::eval::summary(t));
            }
        }
        None => {}
    }
    if args.check {
        let want = crate::interp::evaluate(&graph, &inputs)?;
        let mut failed = 0usize;
        for (i, (g, w)) in outs.iter().zip(&want).enumerate() {
            let (abs, rel) = errors(g, w);
            let tol = tolerance(w.dtype);
            let ok = g.shape == w.shape && rel <= tol;
            failed += usize::from(!ok);
            println!(
                "output{i} {}{:?}: max abs err {abs:.3e}, max rel err {rel:.3e} (tolerance {tol:.0e}) {}",
                w.dtype,
                w.shape,
                if ok { "ok" } else { "MISMATCH" }
            );
        }
        if outs.len() != want.len() {
            return Err(format!(
                "{} outputs, the reference interpreter gives {}",
                outs.len(),
                want.len()
            )
            .into());
        }
        if failed > 0 {
            eprintln!("error: {failed} output(s) differ from the reference interpreter");
            return Ok(ExitCode::FAILURE);
        }
        println!("check: all {} output(s) match the reference", outs.len());
    }
    Ok(ExitCode::SUCCESS)
}
