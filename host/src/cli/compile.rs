//! `host compile FILE --device D -o DIR`: a graph to device code, in
//! TorchInductor's debug layout: `output_code.py` for a Triton device,
//! `wrapper.cpp` for a C++ device (`cpu`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;

use super::{Cli, CliError};
use crate::codegen::triton::Options;

/// Arguments of `host compile`.
#[derive(Debug, Args)]
pub struct CompileArgs {
    /// The graph file: kiln-graph/1 TOML or a torch.export `.pt2` archive.
    pub file: PathBuf,
    /// For a `.pt2` archive: keep parameters, buffers and constants as graph inputs
    /// (after the user inputs) instead of baking them in from the archive.
    #[arg(long)]
    pub params_as_inputs: bool,

    /// The device to generate code for: a device name a plugin provides (see `host list`).
    #[arg(long)]
    pub device: String,

    /// The output folder, created if needed: output_code.py (or wrapper.cpp) goes there.
    #[arg(short = 'o', long = "out", value_name = "DIR", default_value = "out")]
    pub out: PathBuf,

    /// Offer every launch config the plugin proposes to triton.autotune instead of using the first.
    #[arg(long)]
    pub autotune: bool,

    /// Also write graph_pre_passes.txt, graph_post_passes.txt, ir_pre_fusion.txt,
    /// ir_post_fusion.txt and graph.dot (nodes coloured by kernel).
    #[arg(long)]
    pub debug: bool,
}

fn write_file(dir: &Path, name: &str, text: &str) -> Result<(), CliError> {
    let path = dir.join(name);
    std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()).into())
}

/// Runs `host compile`.
pub fn run(cli: &Cli, args: &CompileArgs) -> Result<ExitCode, CliError> {
    let registry = super::discover(cli)?;
    let plugin = registry
        .get(&args.device)
        .ok_or_else(|| registry.explain_missing(&args.device))?
        .clone();
    let start = Instant::now();
    let mut graph = crate::graph::load_with(
        &args.file,
        &crate::graph::LoadOptions {
            params_as_inputs: args.params_as_inputs,
        },
    )?;
    let pre_passes = args.debug.then(|| crate::graph::print::to_text(&graph));
    crate::passes::run_pipeline(&mut graph)?;
    let features = plugin
        .backend_spec()?
        .map(|s| s.features)
        .unwrap_or_default();
    let scheduled = crate::schedule::schedule_with(&graph, &crate::schedule::Options { features })?;
    let options = Options {
        autotune: args.autotune,
    };
    // Route by the plugin's scheduling kind: C++ kernels and wrapper.cpp, or
    // Triton kernels and output_code.py.
    let cpp = plugin
        .backend_spec()?
        .is_some_and(|s| s.scheduling == kiln_plugin_api::SchedulingKind::Cpp);
    let (file_name, text) = if cpp {
        let output = crate::codegen::cpp_wrapper(&scheduled, &plugin)?;
        ("wrapper.cpp", output.source)
    } else {
        let output = crate::codegen::python_triton(&scheduled, &plugin, &options)?;
        ("output_code.py", output.output_code)
    };
    let elapsed = start.elapsed();
    std::fs::create_dir_all(&args.out).map_err(|e| {
        format!(
            "cannot create the output folder {}: {e}",
            args.out.display()
        )
    })?;
    write_file(&args.out, file_name, &text)?;
    if let Some(pre) = pre_passes {
        write_file(&args.out, "graph_pre_passes.txt", &pre)?;
        write_file(
            &args.out,
            "graph_post_passes.txt",
            &crate::graph::print::to_text(&graph),
        )?;
        write_file(
            &args.out,
            "ir_pre_fusion.txt",
            &crate::schedule::pre_fusion_text(&graph)?,
        )?;
        write_file(
            &args.out,
            "ir_post_fusion.txt",
            &crate::schedule::print::program_text(&scheduled),
        )?;
        write_file(&args.out, "graph.dot", &kernel_dot(&graph, &scheduled))?;
    }
    eprintln!(
        "compiled {} for {} in {:.2} ms: {} kernel(s), {} extern call(s) -> {}",
        args.file.display(),
        plugin.name(),
        elapsed.as_secs_f64() * 1e3,
        scheduled.program.kernel_count(),
        scheduled.program.steps.len() - scheduled.program.kernel_count(),
        args.out.join(file_name).display()
    );
    Ok(ExitCode::SUCCESS)
}

const COLOURS: [&str; 8] = [
    "#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5",
];

/// The graph with each node filled in the colour of the kernel computing it.
fn kernel_dot(graph: &crate::graph::ir::Graph, scheduled: &crate::schedule::Scheduled) -> String {
    let mut step_of = std::collections::HashMap::new();
    for (i, nodes) in scheduled.covers.iter().enumerate() {
        for n in nodes {
            step_of.entry(*n).or_insert(i);
        }
    }
    let mut out =
        String::from("digraph kiln {\n  node [shape=box, style=filled, fontname=\"monospace\"];\n");
    let label = |id: crate::graph::ir::NodeId| {
        graph.node(id).map_or_else(String::new, |n| {
            format!("{}\\n{}", n.name.replace(['"', '\\'], "_"), n.op.name())
        })
    };
    for id in graph.node_ids() {
        let (colour, step) = match step_of.get(&id) {
            Some(s) => (COLOURS[s % COLOURS.len()], format!("\\nstep {s}")),
            None => ("#eeeeee", String::new()),
        };
        let _ = writeln!(
            out,
            "  n{} [label=\"{}{step}\", fillcolor=\"{colour}\"];",
            id.index(),
            label(id)
        );
    }
    for id in graph.node_ids() {
        for (user, _) in graph.users(id) {
            let _ = writeln!(out, "  n{} -> n{};", id.index(), user.index());
        }
    }
    out.push_str("}\n");
    out
}
