//! `host eval FILE [--device D [--check]] [--inputs DIR] [--seed N] [--out DIR]`:
//! runs the graph on the float64 reference interpreter or, with `--device`,
//! evaluates the program Kiln schedules for that device (through the same
//! driver as `host compile`: passes, lowering, fusion and the memory plan the
//! generated code implements) in float64 on the host, no device needed.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::{Cli, CliError, DeviceSpec, GraphFile, InputArgs};
use crate::driver;

/// Arguments of `host eval`.
#[derive(Args, Debug)]
pub struct EvalArgs {
    /// The graph.
    #[command(flatten)]
    pub graph: GraphFile,
    /// Evaluate the program scheduled for this device instead of the graph itself.
    #[arg(long, value_name = "DEVICE[:INDEX]")]
    pub device: Option<DeviceSpec>,
    /// With --device: compare every output with the reference interpreter; exit non-zero
    /// when one differs.
    #[arg(long, requires = "device")]
    pub check: bool,
    /// The inputs.
    #[command(flatten)]
    pub inputs: InputArgs,
    /// Write `outputN.bin` files here instead of printing a summary.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Runs `host eval`.
pub fn run(cli: &Cli, a: &EvalArgs) -> Result<ExitCode, CliError> {
    if let Some(out) = &a.out {
        super::out_dir::check(out, "--out")?;
    }
    let budget = cli.budget()?;
    let graph = a.graph.load(&budget)?;
    let what = format!("evaluating {}", a.graph.file.display());
    let inputs_bytes = a.inputs.memory_needed(&graph);
    let (outs, inputs) = match &a.device {
        None => {
            budget.allow_parts(
                &what,
                &[
                    ("inputs", inputs_bytes),
                    (
                        "the reference interpreter",
                        crate::interp::memory_needed(&graph),
                    ),
                ],
            )?;
            let inputs = a.inputs.read(&graph)?;
            let outs = super::progress::evaluate(&what, &graph, &inputs)?;
            (outs, inputs)
        }
        Some(device) => {
            let plugin = super::device_plugin(cli, device)?;
            let options = driver::Options {
                device_index: device.index,
                ..driver::Options::default()
            };
            let artifacts = driver::compile(graph.clone(), &plugin, &options)?;
            let reference = if a.check {
                crate::interp::memory_needed(&graph)
            } else {
                Some(0)
            };
            budget.allow_parts(
                &what,
                &[
                    ("inputs", inputs_bytes),
                    (
                        "the scheduled program",
                        crate::schedule::eval::memory_needed(&artifacts.scheduled),
                    ),
                    ("the reference interpreter", reference),
                ],
            )?;
            let inputs = a.inputs.read(&graph)?;
            let activity = super::progress::Activity::start(&what, None);
            activity.update(0, 0, &format!("the program scheduled for {device}"));
            let outs = crate::schedule::eval::run(&artifacts.scheduled, &inputs)?;
            activity.finish();
            (outs, inputs)
        }
    };
    super::outputs::emit(&outs, &graph.output_names(), a.out.as_deref(), !a.check)?;
    if a.check && !super::outputs::check(&outs, &graph, &inputs)? {
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
