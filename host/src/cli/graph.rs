//! `host graph FILE [--params-as-inputs] [--after-passes] [--format text|dot|json]`: prints a graph.

use crate::graph::print;
use clap::{Args, ValueEnum};

/// Output formats of `host graph`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Format {
    /// one line per node
    Text,
    /// Graphviz
    Dot,
    /// JSON
    Json,
}

/// Arguments of `host graph`.
#[derive(Args, Debug)]
pub struct GraphArgs {
    /// The graph.
    #[command(flatten)]
    pub graph: super::GraphFile,
    /// Print the graph after the pass pipeline.
    #[arg(long)]
    pub after_passes: bool,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

/// Runs `host graph`.
pub fn run(cli: &super::Cli, a: &GraphArgs) -> Result<(), super::CliError> {
    let mut g = a.graph.load(&cli.budget()?)?;
    if a.after_passes {
        let report = crate::passes::run_pipeline(&mut g)?;
        tracing::info!("{report}");
    }
    let text = match a.format {
        Format::Text => print::to_text(&g),
        Format::Dot => print::to_dot(&g),
        Format::Json => print::to_json(&g) + "\n",
    };
    print!("{text}");
    Ok(())
}
