//! Where launch configs and grids come from: the device plugin (tests may
//! supply their own). Code generation never holds a device's numbers; both
//! kernel generators ask through [`LaunchHeuristics`].

use kiln_plugin_api::{
    DeviceProperties, Grid, HintedReductionQuery, LaunchConfig, PointwiseQuery, ReductionHint,
    ReductionPassQuery, ReductionQuery,
};

use crate::schedule::ir::{Expr, Kernel, Program};

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
    /// Candidate configs for a reduction (or tiled pointwise) kernel that walks
    /// memory as `hint` says, best first; `None` when the device does not
    /// tell hints apart (the host then asks [`Self::reduction_configs`]).
    fn hinted_reduction_configs(
        &self,
        query: ReductionQuery,
        hint: ReductionHint,
    ) -> Result<Option<Vec<LaunchConfig>>, HeuristicsError> {
        let _ = (query, hint);
        Ok(None)
    }
    /// Candidate configs for a reduction (or tiled pointwise) kernel that walks
    /// memory as `hint` says and makes `passes` passes over each row when it
    /// loops, best first; `None` when the device does not tell passes apart
    /// (the host then asks [`Self::hinted_reduction_configs`]).
    fn reduction_pass_configs(
        &self,
        query: ReductionQuery,
        hint: ReductionHint,
        passes: u32,
    ) -> Result<Option<Vec<LaunchConfig>>, HeuristicsError> {
        let _ = (query, hint, passes);
        Ok(None)
    }
    /// The properties of the device code is generated for (its first), where
    /// the plugin gives them: kernels whose shape is the host's own (flash
    /// attention) read the units that run programs.
    fn properties(&self) -> Option<DeviceProperties> {
        None
    }
    /// The shared memory one program of that device may use, in bytes, where
    /// the plugin says (API 1.5); flash attention fits its tiles in it.
    fn shared_memory_per_block(&self) -> Option<u64> {
        None
    }
    /// Whether float32 `tl.dot` may use TF32 products on the device's Triton
    /// target, where the plugin says (API 1.5).
    fn tf32_dot(&self) -> Option<bool> {
        None
    }
    /// The bytes of the device's L2 cache, where the plugin says (API 1.8):
    /// what split attention may prefetch before its wait is bounded by it.
    fn l2_cache_bytes(&self) -> Option<u64> {
        None
    }
}

/// The grid launched for `wanted` programs: the plugin's `adjust_grid`, refused where
/// it answers with an empty grid (nothing would run).
pub fn launch_grid(
    heuristics: &dyn LaunchHeuristics,
    wanted: Grid,
) -> Result<Grid, HeuristicsError> {
    let grid = heuristics.adjust_grid(wanted)?;
    if grid.x == 0 || grid.y == 0 || grid.z == 0 {
        return Err(HeuristicsError::Unusable {
            method: "adjust_grid",
            what: format!(
                "returned an empty grid for {} × {} × {} programs",
                wanted.x, wanted.y, wanted.z
            ),
        });
    }
    Ok(grid)
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

    fn hinted_reduction_configs(
        &self,
        query: ReductionQuery,
        hint: ReductionHint,
    ) -> Result<Option<Vec<LaunchConfig>>, HeuristicsError> {
        Ok(Plugin::hinted_reduction_configs(
            self,
            HintedReductionQuery { query, hint },
        )?)
    }

    fn reduction_pass_configs(
        &self,
        query: ReductionQuery,
        hint: ReductionHint,
        passes: u32,
    ) -> Result<Option<Vec<LaunchConfig>>, HeuristicsError> {
        Ok(Plugin::reduction_pass_configs(
            self,
            ReductionPassQuery {
                query,
                hint,
                passes,
            },
        )?)
    }

    fn properties(&self) -> Option<DeviceProperties> {
        // A plugin that cannot answer leaves the generic choices in place.
        self.device_properties(0).ok().flatten()
    }

    fn shared_memory_per_block(&self) -> Option<u64> {
        // As for the properties: no answer leaves the host's default.
        Plugin::shared_memory_per_block(self, 0).ok().flatten()
    }

    fn tf32_dot(&self) -> Option<bool> {
        Plugin::tf32_dot(self).ok().flatten()
    }

    fn l2_cache_bytes(&self) -> Option<u64> {
        Plugin::l2_cache_bytes(self, 0).ok().flatten()
    }
}

/// How kernel `k` (a reduction, or a pointwise kernel over rows and row
/// elements) walks memory: `Tile` when it has no reduction, else `Outer` when
/// more of the bytes it moves are contiguous across rows than along them.
pub fn reduction_hint(program: &Program, k: &Kernel) -> ReductionHint {
    if k.reductions.is_empty() {
        return ReductionHint::Tile;
    }
    let (mut along_rows, mut across_rows) = (0i64, 0i64);
    let loads = k.exprs.iter().filter_map(|(_, e, _)| match e {
        Expr::Load { buf, index, .. } => Some((*buf, index)),
        _ => None,
    });
    let stores = k.stores.iter().map(|s| (s.buf, &s.index));
    for (buf, index) in loads.chain(stores) {
        let access = k
            .space
            .access(index, program.buffer(buf).dtype.size_bytes() as i64);
        if access.unit_along_row {
            along_rows = along_rows.saturating_add(access.bytes);
        } else if access.unit_across_rows {
            across_rows = across_rows.saturating_add(access.bytes);
        }
    }
    if across_rows > along_rows {
        ReductionHint::Outer
    } else {
        ReductionHint::Inner
    }
}

/// The most elements of whole rows a persistent tile of an outer reduction
/// that reads its rows twice may hold (Inductor's persistent tile limit).
/// Such a kernel (`x - x.mean(1, keepdim=True)`) otherwise loops over each
/// row twice, and with many programs in flight the second read misses L2: on
/// the H100, for `[512, 512, 256]`, Inductor's autotuner keeps 8 rows of 512
/// per program, 229 µs against 272 µs for Kiln's mean and subtraction apart.
const REREAD_TILE_ELEMENTS: u64 = 4096;

/// Moves to the front the plugin's first candidate that holds whole rows in
/// at most [`REREAD_TILE_ELEMENTS`], for an outer reduction that reads its
/// rows again after reducing them: the kernel then reads each row once. The
/// plugin's order stands when none does.
fn prefer_whole_rows(configs: &mut Vec<LaunchConfig>, row_len: i64) {
    let fits = |c: &LaunchConfig| {
        i64::from(c.r_block) >= row_len
            && u64::from(c.x_block).saturating_mul(u64::from(c.r_block)) <= REREAD_TILE_ELEMENTS
    };
    if let Some(i) = configs.iter().position(fits) {
        let chosen = configs.remove(i);
        configs.insert(0, chosen);
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
    kernel_configs_at(program, k, heuristics, k.space.x_hint(), k.space.r_hint())
}

/// [`kernel_configs`] for kernel `k` run at `rows` rows (its elements, for a
/// pointwise kernel) of `row_len` elements: a kernel of symbolic sizes asks at
/// each bucket of the sizes it may be called with.
pub fn kernel_configs_at(
    program: &Program,
    k: &Kernel,
    heuristics: &dyn LaunchHeuristics,
    rows: i64,
    row_len: i64,
) -> Result<Vec<LaunchConfig>, HeuristicsError> {
    let element_bytes = k
        .params
        .iter()
        .map(|p| program.buffer(p.buf).dtype.size_bytes() as u32)
        .max()
        .unwrap_or(4);
    let (configs, method) = if k.is_reduction() {
        let query = ReductionQuery {
            rows: rows.max(0) as u64,
            row_len: row_len.max(0) as u64,
            element_bytes,
        };
        let hint = reduction_hint(program, k);
        let passes = k.row_passes();
        if let Some(configs) = heuristics.reduction_pass_configs(query, hint, passes)? {
            (configs, "reduction_pass_configs")
        } else {
            match heuristics.hinted_reduction_configs(query, hint)? {
                Some(mut configs) => {
                    // A plugin that cannot see the passes: the host prefers
                    // whole rows for an outer reduction that reads them again.
                    if hint == ReductionHint::Outer && passes > 1 {
                        prefer_whole_rows(&mut configs, row_len);
                    }
                    (configs, "hinted_reduction_configs")
                }
                None => (heuristics.reduction_configs(query)?, "reduction_configs"),
            }
        }
    } else {
        let query = PointwiseQuery {
            numel: rows.max(0) as u64,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn config(x_block: u32, r_block: u32) -> LaunchConfig {
        LaunchConfig {
            x_block,
            r_block,
            num_warps: 4,
            num_stages: 1,
        }
    }

    #[test]
    fn a_kernel_that_rereads_its_rows_takes_the_first_whole_row_tile_that_fits() {
        let mut configs = vec![
            config(64, 8),
            config(32, 512),
            config(8, 512),
            config(4, 512),
        ];
        prefer_whole_rows(&mut configs, 500);
        assert_eq!(
            configs,
            vec![
                config(8, 512),
                config(64, 8),
                config(32, 512),
                config(4, 512)
            ]
        );
        // None holds whole rows in 4096 elements: the plugin's order stands.
        let mut configs = vec![config(64, 8), config(8, 1024)];
        prefer_whole_rows(&mut configs, 1000);
        assert_eq!(configs, vec![config(64, 8), config(8, 1024)]);
    }
}
