//! `host conformance PATH`: runs every conformance check on one plugin
//! library, each in a child process, and prints the report.
//!
//! The hidden `--child-check CHECK` flag is the child's side: it runs one
//! check in-process and prints its outcome as one line of JSON.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::{Cli, CliError};
use crate::conformance::{self, isolate::CHILD_FLAG, Options};

/// Arguments of `host conformance`.
#[derive(Debug, Args)]
pub struct ConformanceArgs {
    /// The plugin's shared library (e.g. target/debug/libkiln_gxu.so).
    #[arg(value_name = "PATH")]
    pub path: PathBuf,

    /// Seconds one check may run before it is killed and failed.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub timeout: f64,

    /// Print the report as JSON instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Also write the report as JUnit XML to FILE, for CI systems.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,

    /// Only report the checks whose names match this glob (e.g. 'overrides.*');
    /// their prerequisites still run.
    #[arg(long, value_name = "CHECK-GLOB")]
    pub only: Option<String>,

    /// A folder of C++ headers for the driver-text checks (repeatable): the header of your
    /// driver API that kernel_header includes, or a stub declaring what kernel_driver calls.
    /// Searched before Kiln's own stubs (CUDA, cuBLAS, GXU, SYCL, Level Zero).
    #[arg(long = "include", value_name = "DIR")]
    pub include: Vec<PathBuf>,

    /// Internal: run one check in this process and print its outcome as JSON.
    #[arg(long = &CHILD_FLAG[2..], value_name = "CHECK", hide = true)]
    pub child_check: Option<String>,
}

/// Runs `host conformance`.
pub fn run(_cli: &Cli, args: &ConformanceArgs) -> Result<ExitCode, CliError> {
    if let Some(check) = &args.child_check {
        let outcome = conformance::run_child(&args.path, check);
        println!("{}", serde_json::to_string(&outcome)?);
        return Ok(ExitCode::SUCCESS);
    }
    if !(args.timeout.is_finite() && args.timeout > 0.0 && args.timeout <= 86_400.0) {
        return Err(format!(
            "--timeout {} is not a number of seconds between 0 and 86400",
            args.timeout
        )
        .into());
    }
    let exe = std::env::current_exe().map_err(|e| {
        format!("cannot find the host executable to run checks in child processes: {e}")
    })?;
    let options = Options {
        exe,
        timeout: Duration::from_secs_f64(args.timeout),
        only: args.only.clone(),
        include: args
            .include
            .iter()
            .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.clone()))
            .collect(),
    };
    let report = conformance::run(&args.path, &options)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&conformance::to_json(&report))?
        );
    } else {
        print!("{}", conformance::to_table(&report));
    }
    if let Some(file) = &args.junit {
        let xml = conformance::to_junit(&report)
            .map_err(|e| format!("cannot write the JUnit report: {e}"))?;
        std::fs::write(file, xml)
            .map_err(|e| format!("cannot write the JUnit report to {}: {e}", file.display()))?;
    }
    if let Some(reason) = &report.refused {
        eprintln!(
            "error: {} is not a Kiln plugin: {reason}. See docs/writing-a-plugin.md.",
            args.path.display()
        );
    }
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
