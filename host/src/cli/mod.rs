//! The `host` command line (clap derive). This file only declares the commands and
//! dispatches; each command lives in its own file. It must never hold compiler logic.

mod eval;
mod graph;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// Kiln: a graph compiler whose device backends are drop-in plugins.
#[derive(Parser, Debug)]
#[command(name = "host", version, about)]
pub struct Cli {
    /// Extra plugin folders, searched first, in the order given.
    #[arg(long = "plugins", value_name = "DIR", global = true)]
    pub plugins: Vec<PathBuf>,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print a graph (text, Graphviz DOT or JSON), optionally after the passes.
    Graph(graph::GraphArgs),
    /// Run a graph on the reference interpreter.
    Eval(eval::EvalArgs),
}

/// Errors of the command line, each wrapping its layer's error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Import or validation failed.
    #[error(transparent)]
    Graph(#[from] crate::graph::Error),
    /// A pass failed.
    #[error("the passes failed")]
    Passes(#[from] crate::passes::Error),
    /// The interpreter failed.
    #[error("evaluation failed")]
    Interp(#[from] crate::interp::Error),
    /// A tensor file could not be read or written.
    #[error("tensor file error")]
    TensorIo(#[from] crate::tensor_io::Error),
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Graph(a) => graph::run(&a),
        Command::Eval(a) => eval::run(&a),
    }
}

/// The binary's entry point: parses arguments (clap exits 2 on usage errors), runs the
/// command, and prints an error with its whole source chain (exit 1).
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("KILN_LOG"))
        .with_writer(std::io::stderr)
        .try_init();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", report(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error and its sources, one `caused by` line each.
pub fn report(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(&format!("\n  caused by: {c}"));
        cur = c.source();
    }
    s
}
