//! Where launch configs and grids come from: the device plugin (tests may
//! supply their own). Code generation never holds a device's numbers; both
//! kernel generators ask through [`LaunchHeuristics`].

use kiln_plugin_api::{Grid, LaunchConfig, PointwiseQuery, ReductionQuery};

use crate::schedule::ir::{Kernel, Program};

use crate::plugins::{CallError, Plugin};

/// Why the heuristics gave no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeuristicsError {
    /// The plugin has no such heuristic (it predates it, or left it out).
    #[error("plugin `{plugin}` provides no `{method}`")]
    NotProvided {
        /// The device.
        plugin: String,
        /// The heuristic.
        method: &'static str,
    },
    /// The call into the plugin failed.
    #[error(transparent)]
    Call(#[from] CallError),
    /// The answer cannot be used.
    #[error("`{method}` {what}")]
    Unusable {
        /// The heuristic.
        method: &'static str,
        /// What is wrong with its answer.
        what: String,
    },
}

/// Launch configs and grids for the kernels of one device.
pub trait LaunchHeuristics {
    /// Candidate configs for a pointwise kernel, best first.
    fn pointwise_configs(
        &self,
        query: PointwiseQuery,
    ) -> Result<Vec<LaunchConfig>, HeuristicsError>;
    /// Candidate configs for a reduction kernel, best first.
    fn reduction_configs(
        &self,
        query: ReductionQuery,
    ) -> Result<Vec<LaunchConfig>, HeuristicsError>;
    /// The grid launched for a wanted grid.
    fn adjust_grid(&self, grid: Grid) -> Result<Grid, HeuristicsError>;
}

fn provided<T>(
    plugin: &Plugin,
    method: &'static str,
    answer: Result<Option<T>, CallError>,
) -> Result<T, HeuristicsError> {
    answer?.ok_or_else(|| HeuristicsError::NotProvided {
        plugin: plugin.name().to_string(),
        method,
    })
}

impl LaunchHeuristics for Plugin {
    fn pointwise_configs(
        &self,
        query: PointwiseQuery,
    ) -> Result<Vec<LaunchConfig>, HeuristicsError> {
        provided(
            self,
            "pointwise_configs",
            Plugin::pointwise_configs(self, query),
        )
    }

    fn reduction_configs(
        &self,
        query: ReductionQuery,
    ) -> Result<Vec<LaunchConfig>, HeuristicsError> {
        provided(
            self,
            "reduction_configs",
            Plugin::reduction_configs(self, query),
        )
    }

    fn adjust_grid(&self, grid: Grid) -> Result<Grid, HeuristicsError> {
        provided(self, "adjust_grid", Plugin::adjust_grid(self, grid))
    }
}

/// The configs the heuristics propose for kernel `k` of `program`, best
/// first: a reduction query for a kernel that reduces, else a pointwise one,
/// sized by the widest element the kernel touches. Never empty.
pub fn kernel_configs(
    program: &Program,
    k: &Kernel,
    heuristics: &dyn LaunchHeuristics,
) -> Result<Vec<LaunchConfig>, HeuristicsError> {
    let element_bytes = k
        .params
        .iter()
        .map(|p| program.buffer(p.buf).dtype.size_bytes() as u32)
        .max()
        .unwrap_or(4);
    let (configs, method) = if k.is_reduction() {
        let query = ReductionQuery {
            rows: k.space.x.max(0) as u64,
            row_len: k.space.r.max(0) as u64,
            element_bytes,
        };
        (heuristics.reduction_configs(query)?, "reduction_configs")
    } else {
        let query = PointwiseQuery {
            numel: k.space.x.max(0) as u64,
            element_bytes,
        };
        (heuristics.pointwise_configs(query)?, "pointwise_configs")
    };
    if configs.is_empty() {
        return Err(HeuristicsError::Unusable {
            method,
            what: "returned no launch config".into(),
        });
    }
    Ok(configs)
}
