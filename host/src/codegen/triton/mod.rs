//! Triton code generation: one plain `@triton.jit` function per fused kernel.
//!
//! Every kernel loops over its rows with a grid-stride loop, so that it stays
//! correct whatever grid the plugin's `adjust_grid` launches (GXU rounds up to
//! a multiple of 48; CUDA caps `y` and `z`). Launch configs come from the
//! plugin's heuristics; the first is used, and with `autotune` all of them are
//! offered to `triton.autotune`. float16 and bfloat16 are loaded and computed
//! in float32.

pub mod expr;
mod kernel;

use kiln_plugin_api::{Grid, LaunchConfig, PointwiseQuery, ReductionQuery};

pub use kernel::{write_kernel, HELPERS};

use crate::schedule::ir::{BufferId, Kernel, Program};

/// Where launch configs and grids come from: the device plugin (tests may
/// supply their own). Code generation never holds a device's numbers.
pub trait LaunchHeuristics {
    /// Candidate configs for a pointwise kernel, best first.
    fn pointwise_configs(&self, query: PointwiseQuery) -> Result<Vec<LaunchConfig>, String>;
    /// Candidate configs for a reduction kernel, best first.
    fn reduction_configs(&self, query: ReductionQuery) -> Result<Vec<LaunchConfig>, String>;
    /// The grid launched for a wanted grid.
    fn adjust_grid(&self, grid: Grid) -> Result<Grid, String>;
}

impl LaunchHeuristics for crate::plugins::Plugin {
    fn pointwise_configs(&self, query: PointwiseQuery) -> Result<Vec<LaunchConfig>, String> {
        match crate::plugins::Plugin::pointwise_configs(self, query) {
            Ok(Some(c)) => Ok(c),
            Ok(None) => Err(format!(
                "plugin `{}` provides no `pointwise_configs`",
                self.name()
            )),
            Err(e) => Err(e.to_string()),
        }
    }

    fn reduction_configs(&self, query: ReductionQuery) -> Result<Vec<LaunchConfig>, String> {
        match crate::plugins::Plugin::reduction_configs(self, query) {
            Ok(Some(c)) => Ok(c),
            Ok(None) => Err(format!(
                "plugin `{}` provides no `reduction_configs`",
                self.name()
            )),
            Err(e) => Err(e.to_string()),
        }
    }

    fn adjust_grid(&self, grid: Grid) -> Result<Grid, String> {
        match crate::plugins::Plugin::adjust_grid(self, grid) {
            Ok(Some(g)) => Ok(g),
            Ok(None) => Err(format!(
                "plugin `{}` provides no `adjust_grid`",
                self.name()
            )),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// Options of the Triton generator.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Offer every candidate config to `triton.autotune`.
    pub autotune: bool,
}

/// Why a kernel could not be generated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The plugin's heuristics failed or returned nothing usable.
    #[error("launch heuristics: {0}")]
    Heuristics(String),
    /// An operation this generator cannot express.
    #[error("kernel `{kernel}`: {what}")]
    Unsupported {
        /// The kernel.
        kernel: String,
        /// What.
        what: String,
    },
    /// Writing text failed.
    #[error("formatting failed")]
    Fmt(#[from] std::fmt::Error),
}

/// One launch config as the wrapper passes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// `XBLOCK`.
    pub x_block: u32,
    /// `RBLOCK` (reduction kernels).
    pub r_block: Option<u32>,
    /// Warps per program.
    pub num_warps: u32,
    /// Pipelining stages.
    pub num_stages: u32,
    /// The grid launched (after `adjust_grid`).
    pub grid: Grid,
}

/// What the wrapper needs to launch a kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelInfo {
    /// The kernel's function name.
    pub name: String,
    /// Buffers passed as pointer arguments, in order.
    pub args: Vec<BufferId>,
    /// Parameter names of those pointers.
    pub arg_names: Vec<String>,
    /// Triton signature types of those pointers (`*fp32`, ...).
    pub arg_types: Vec<&'static str>,
    /// `xnumel`.
    pub xnumel: i64,
    /// `rnumel`, for reduction kernels.
    pub rnumel: Option<i64>,
    /// Whether index arithmetic needs 64 bits.
    pub int64_index: bool,
    /// The config launched (the first candidate).
    pub launch: Launch,
    /// Every candidate, when autotuning.
    pub candidates: Vec<Launch>,
}

/// A kernel's source and launch information.
#[derive(Clone, Debug)]
pub struct GeneratedKernel {
    /// `@triton.jit` source text.
    pub source: String,
    /// Launch information.
    pub info: KernelInfo,
}

/// Generates every kernel of a program; `names` turns kernel name stems into
/// unique identifiers.
pub fn write_kernels(
    program: &Program,
    heuristics: &dyn LaunchHeuristics,
    options: &Options,
    namer: &mut crate::codegen::namer::Namer,
) -> Result<Vec<GeneratedKernel>, Error> {
    let mut out = Vec::new();
    for step in &program.steps {
        if let crate::schedule::Step::Kernel(k) = step {
            let stem = kernel_stem(k, out.len());
            let name = namer.name(&stem);
            out.push(write_kernel(program, k, &name, heuristics, options)?);
        }
    }
    Ok(out)
}

/// `kiln_poi_fused_add_relu_0`-style names, like Inductor's.
fn kernel_stem(k: &Kernel, n: usize) -> String {
    let kind = if !k.space.is_reduction() {
        "poi"
    } else {
        "red"
    };
    let mut ops: Vec<&str> = Vec::new();
    for op in &k.ops {
        if !ops.contains(op) {
            ops.push(op);
        }
    }
    ops.truncate(6);
    format!("kiln_{kind}_fused_{}_{n}", ops.join("_"))
}
