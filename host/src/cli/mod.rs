//! The command line: argument parsing and the reports printed to the user.
//! Every subcommand lives in its own file; this module only dispatches and
//! turns errors into a message with its whole source chain and an exit code.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::memory::Budget;
use crate::tensor::Tensor;

mod compile;
mod conformance;
mod eval;
mod graph;
mod inspect;
mod list;
mod out_dir;
mod outputs;
mod progress;
mod run;

/// Kiln: a graph compiler whose device backends are drop-in plugins.
#[derive(Debug, Parser)]
#[command(
    name = "host",
    version,
    about = "Kiln: a graph compiler whose device backends are drop-in plugins",
    long_about = "Kiln compiles tensor graphs into TorchInductor-style code for any device that has a plugin.\n\n\
        Plugins are shared libraries found, in this order, in each --plugins DIR, in the folders of \
        KILN_PLUGIN_PATH (':'-separated), and in the host executable's folder and its plugins/ subfolder. \
        The first plugin to claim a device name wins."
)]
pub struct Cli {
    /// Search this folder (or load this library) for plugins before the default places; repeatable.
    #[arg(long = "plugins", value_name = "DIR", global = true)]
    pub plugins: Vec<PathBuf>,

    /// More log output on stderr (-v info, -vv debug); RUST_LOG overrides it.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,

    /// The most memory the host's own tensor work may take (e.g. 8G, 512M): what reading a
    /// .pt2 archive decompresses, and the inputs, reference interpreter and buffers of eval and
    /// run. Work that needs more is refused, with the figures, before anything is allocated.
    /// Default: KILN_MAX_MEMORY, else the memory the machine has available.
    #[arg(long, value_name = "SIZE", global = true, value_parser = crate::memory::parse_size)]
    pub max_memory: Option<u64>,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List every device plugin found, and every library that was rejected or shadowed.
    List(list::ListArgs),
    /// Show everything one plugin provides: override strings, properties, features, heuristics.
    Inspect(inspect::InspectArgs),
    /// Compile a graph for a device: output_code.py (Triton devices) or wrapper.cpp (C++ devices such as cpu).
    Compile(compile::CompileArgs),
    /// Compile a graph, run it on a device (cpu by default; a Triton device such as cuda through its
    /// C++ wrapper), and optionally check the outputs against the reference interpreter.
    Run(run::RunArgs),
    /// Print a graph (text, Graphviz DOT or JSON), optionally after the passes.
    Graph(graph::GraphArgs),
    /// Run a graph on the float64 reference interpreter, or, with --device, evaluate the program
    /// Kiln schedules for that device (lowered, fused, memory-planned) in float64.
    Eval(eval::EvalArgs),
    /// Check a plugin library against every conformance guarantee, each check in a child process.
    Conformance(conformance::ConformanceArgs),
}

/// Errors of the graph commands, each wrapping its layer's error.
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

/// The graph file every graph command takes.
#[derive(Debug, Args)]
pub struct GraphFile {
    /// The graph file: kiln-graph/1 TOML or a torch.export `.pt2` archive.
    pub file: PathBuf,
    /// For a `.pt2` archive: keep parameters, buffers and constants as graph inputs
    /// (after the user inputs) instead of baking them in from the archive.
    #[arg(long)]
    pub params_as_inputs: bool,
    /// For a `.pt2` export with dynamic shapes (`dynamic_shapes=`), or a graph file with
    /// named sizes (`[dims]`): compile at this value of the named symbol or size
    /// (`s27=128`, `batch=8`), within its range; repeatable. Without `--dynamic`, each
    /// is taken at the example's size (a graph file's `example`, else its `min`)
    /// except where this says otherwise, and the compile says which values it took.
    #[arg(long, value_name = "SYMBOL=VALUE", value_parser = symbol_value)]
    pub specialize: Vec<(String, i64)>,
    /// For a `.pt2` export with dynamic shapes: keep its size symbols, so that one
    /// compile serves every size in their ranges. The program reads each size from
    /// its inputs at every call and refuses one outside its range. Taken by a Triton
    /// device's wrappers (`output_code.py`; `wrapper.cpp`'s `kiln_call_shaped`) and
    /// the cpu device's `wrapper.cpp` (`kiln_call_shaped`), for programs of kernels,
    /// matrix products and attention; elsewhere (convolutions, `index_copy`) the
    /// compile says what takes one size only. `host run` runs it at the example's
    /// sizes.
    ///
    /// `--dynamic INPUT:DIM=LO..HI` (after FILE; repeatable) makes that dim of a graph or
    /// archive of static shapes a size from LO to HI (`input_ids:1=1..2048`;
    /// `input_ids:1,attention_mask:1=1..2048` for dims of one size). The graph is inferred
    /// again over it; a node whose arguments fix that size (a static export's `view`)
    /// refuses, naming itself.
    #[arg(
        long,
        conflicts_with = "specialize",
        num_args = 0..=1,
        action = clap::ArgAction::Append,
        value_name = "INPUT:DIM=LO..HI"
    )]
    pub dynamic: Option<Vec<crate::graph::front::dynamic_dims::DynamicDim>>,
}

/// `s27=128` as a symbol and its value.
fn symbol_value(text: &str) -> Result<(String, i64), String> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}`: expected SYMBOL=VALUE, as s27=128"))?;
    let value = value
        .trim()
        .parse()
        .map_err(|_| format!("`{text}`: `{value}` is not an integer"))?;
    Ok((name.trim().to_string(), value))
}

impl GraphFile {
    /// Reads and validates the graph; a `.pt2` archive may decompress to at
    /// most `budget`.
    pub fn load(&self, budget: &Budget) -> Result<crate::graph::Graph, crate::graph::Error> {
        crate::graph::load_with(
            &self.file,
            &crate::graph::LoadOptions {
                params_as_inputs: self.params_as_inputs,
                archive: crate::graph::front::pt2::Limits {
                    budget: *budget,
                    ..Default::default()
                },
                specialize: self.specialize.clone(),
                dynamic: self.dynamic.is_some(),
                dynamic_dims: self.dynamic.clone().unwrap_or_default(),
            },
        )
    }
}

impl Cli {
    /// The memory budget of this run: `--max-memory`, else `KILN_MAX_MEMORY`,
    /// else the least of the limits the operating system puts on this process.
    pub(crate) fn budget(&self) -> Result<Budget, CliError> {
        Ok(Budget::new(self.max_memory)?)
    }
}

/// Where the inputs of `host eval` and `host run` come from.
#[derive(Debug, Args)]
pub struct InputArgs {
    /// Folder with one raw file for every input (`NAME.bin` or `inputN.bin`); without it,
    /// the inputs are random.
    #[arg(long, value_name = "DIR")]
    pub inputs: Option<PathBuf>,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

impl InputArgs {
    /// The bytes [`InputArgs::read`] holds for `graph`'s inputs: each as
    /// float64, plus the largest file's raw bytes while it is decoded.
    pub fn memory_needed(&self, graph: &crate::graph::Graph) -> Option<u64> {
        let metas: Vec<&crate::graph::TensorMeta> = graph
            .inputs()
            .iter()
            .filter_map(|&id| graph.node(id)?.outputs.first())
            .collect();
        let tensors =
            crate::memory::total(metas.iter().map(|m| crate::memory::elements(m.numel(), 8)));
        let raw = match self.inputs {
            Some(_) => metas
                .iter()
                .map(|m| crate::memory::elements(m.numel(), m.dtype.size_bytes() as u64))
                .try_fold(0u64, |most, b| Some(most.max(b?))),
            None => Some(0),
        };
        crate::memory::total([tensors, raw])
    }

    /// The graph's inputs: read from the folder, or random from the seed; the state
    /// the program keeps ([`crate::graph::State`]) as it is before the first call.
    pub fn read(&self, graph: &crate::graph::Graph) -> Result<Vec<Tensor>, Error> {
        let mut inputs = self.read_callers(graph)?;
        // The front end gives the state the last inputs, in order.
        for s in graph.state() {
            let Some(meta) = graph.input_meta(s.input) else {
                continue;
            };
            let n = meta.numel().max(0) as usize;
            let values = (0..n).map(|i| s.init.get(i)).collect();
            inputs.push(Tensor::new(meta.hint_shape(), meta.dtype, values));
        }
        Ok(inputs)
    }

    /// The inputs the caller passes (all but the state, which comes last).
    fn read_callers(&self, graph: &crate::graph::Graph) -> Result<Vec<Tensor>, Error> {
        let callers = graph.inputs().len().saturating_sub(graph.state().len());
        let decls: Vec<(String, crate::graph::TensorMeta)> = graph.inputs()[..callers]
            .iter()
            .filter_map(|&id| graph.node(id))
            .filter_map(|n| Some((n.name.clone(), n.outputs.first()?.clone())))
            .collect();
        Ok(match &self.inputs {
            Some(dir) => crate::tensor_io::read_inputs(dir, &decls)?,
            None => {
                let metas: Vec<_> = decls.into_iter().map(|(_, m)| m).collect();
                let bounds: Vec<Option<i64>> = graph.inputs()[..callers]
                    .iter()
                    .map(|&id| graph.index_bound(id))
                    .collect();
                crate::tensor_io::random_inputs_bounded(&metas, &bounds, self.seed)?
            }
        })
    }
}

/// A device as the command line names it: `cuda`, or `cuda:1` for device 1
/// of its kind, as PyTorch spells devices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceSpec {
    /// The device name a plugin provides.
    pub name: String,
    /// Which device of that kind.
    pub index: u32,
}

impl std::str::FromStr for DeviceSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<DeviceSpec, String> {
        let (name, index) = match text.split_once(':') {
            None => (text, 0),
            Some((name, index)) => match index.parse::<u32>() {
                Ok(i) => (name, i),
                Err(_) => {
                    return Err(format!(
                        "`{index}` is not a device index: write DEVICE or DEVICE:INDEX, e.g. cuda:1"
                    ))
                }
            },
        };
        if name.is_empty() {
            return Err(
                "the device name is empty: write DEVICE or DEVICE:INDEX, e.g. cuda:1".into(),
            );
        }
        Ok(DeviceSpec {
            name: name.to_string(),
            index,
        })
    }
}

impl std::fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.index {
            0 => write!(f, "{}", self.name),
            i => write!(f, "{}:{i}", self.name),
        }
    }
}

/// The plugin providing `device`, from the plugins `cli` discovers.
pub(crate) fn device_plugin(
    cli: &Cli,
    device: &DeviceSpec,
) -> Result<std::sync::Arc<crate::plugins::Plugin>, CliError> {
    let registry = discover(cli)?;
    let plugin = registry
        .get(&device.name)
        .ok_or_else(|| registry.explain_missing(&device.name))?;
    Ok(std::sync::Arc::clone(plugin))
}

/// An error that ends a command, printed with its source chain.
pub type CliError = Box<dyn std::error::Error + Send + Sync>;

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let result = match &cli.command {
        Command::List(args) => list::run(&cli, args),
        Command::Inspect(args) => inspect::run(&cli, args),
        Command::Graph(args) => graph::run(&cli, args).map(|()| ExitCode::SUCCESS),
        Command::Eval(args) => eval::run(&cli, args),
        Command::Conformance(args) => conformance::run(&cli, args),
        Command::Compile(args) => compile::run(&cli, args),
        Command::Run(args) => run::run(&cli, args),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {}", crate::diag::report(error.as_ref()));
            ExitCode::FAILURE
        }
    }
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only on a terminal, never into pipes or CI logs.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .without_time()
        .try_init();
}

/// Discovers plugins for the `--plugins` folders given on the command line.
/// A search-path entry that cannot be read (a missing folder, a link loop) is
/// a warning, never an error: a command that does not need it goes on, and
/// one whose device it would have provided fails naming it.
pub(crate) fn discover(cli: &Cli) -> Result<crate::plugins::Registry, CliError> {
    let registry = crate::plugins::discover_default(&cli.plugins);
    for problem in &registry.search_problems {
        tracing::warn!("plugin folder {problem}; not searched");
    }
    Ok(registry)
}
