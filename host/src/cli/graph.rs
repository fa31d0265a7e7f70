//! `host graph FILE [--params-as-inputs] [--after-passes] [--format text|dot|json]`: prints a graph.

use super::Error;
use crate::graph::print;
use clap::{Args, ValueEnum};
use std::path::PathBuf;

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
    /// The graph file: kiln-graph/1 TOML or a torch.export `.pt2` archive.
    pub file: PathBuf,
    /// For a `.pt2` archive: keep parameters, buffers and constants as graph inputs
    /// (after the user inputs) instead of baking them in from the archive.
    #[arg(long)]
    pub params_as_inputs: bool,
    /// Print the graph after the pass pipeline.
    #[arg(long)]
    pub after_passes: bool,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

/// Runs `host graph`.
pub fn run(a: &GraphArgs) -> Result<(), Error> {
    let mut g = crate::graph::load_with(
        &a.file,
        &crate::graph::LoadOptions {
            params_as_inputs: a.params_as_inputs,
        },
    )?;
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
