//! The `heuristics.*` checks: the plugin's launch heuristics asked over a
//! sweep of sizes. Runs in the child process only; the rules for a single
//! answer come from `plugins::validate`.

use kiln_plugin_api::{
    DeviceProperties, Grid, HintedReductionQuery, LaunchConfig, PointwiseQuery, ReductionHint,
    ReductionPassQuery, ReductionQuery,
};

use super::{device_properties, Outcome};
use crate::plugins::validate::{
    config_shape_problems, config_thread_problems, conv_channels_last_problem, grid_probes,
    grid_problem, matmul_alignment_problem, triton_target_problem,
};
use crate::plugins::{CallError, Plugin};

/// Sizes that are not powers of two, to catch rounding mistakes.
const ODD_SIZES: [u64; 6] = [3, 7, 1000, 12_345, 50_257, 1_000_003];
/// Widths of the element types the host generates kernels for.
const ELEMENT_BYTES: [u32; 4] = [1, 2, 4, 8];

/// Element counts 1 to 2^31 by powers of two, and some odd sizes.
fn pointwise_sizes() -> Vec<u64> {
    let mut sizes: Vec<u64> = (0..=31).map(|p| 1u64 << p).collect();
    sizes.extend(ODD_SIZES);
    sizes.push((1 << 31) - 1);
    sizes
}

/// Row counts and row lengths 1 to 2^20 by powers of two, and some odd sizes.
fn reduction_sizes() -> Vec<u64> {
    let mut sizes: Vec<u64> = (0..=20).map(|p| 1u64 << p).collect();
    sizes.extend(&ODD_SIZES[..5]);
    sizes
}

/// Grid extents along one axis: 1 to 2^32, the device's own numbers
/// ([`grid_probes`]: around its processor count), and each axis' limit and
/// one past it.
fn grid_extents(props: &DeviceProperties) -> Vec<u64> {
    let mut extents: Vec<u64> = (0..=32).map(|p| 1u64 << p).collect();
    extents.extend(grid_probes(props));
    extents.extend(props.max_grid);
    extents.extend(props.max_grid.iter().map(|m| m.saturating_add(1)));
    extents
}

fn pointwise_queries() -> impl Iterator<Item = PointwiseQuery> {
    pointwise_sizes().into_iter().flat_map(|numel| {
        ELEMENT_BYTES.map(|element_bytes| PointwiseQuery {
            numel,
            element_bytes,
        })
    })
}

fn reduction_queries() -> impl Iterator<Item = ReductionQuery> {
    let sizes = reduction_sizes();
    let lens = sizes.clone();
    sizes.into_iter().flat_map(move |rows| {
        lens.clone().into_iter().map(move |row_len| ReductionQuery {
            rows,
            row_len,
            element_bytes: 4,
        })
    })
}

fn grids(props: &DeviceProperties) -> Vec<Grid> {
    let mut grids = Vec::new();
    for axis in 0..3 {
        for extent in grid_extents(props) {
            let mut dims = [1u64; 3];
            dims[axis] = extent;
            grids.push(Grid::from_array(dims));
        }
    }
    // Every axis at once, off the device's width.
    let probes = grid_probes(props);
    for &x in &probes {
        grids.push(Grid::new(x, 3, 2));
    }
    grids.push(Grid::new(1000, 1000, 7));
    grids
}

/// What one sweep found: configs per query, or the reason to stop.
enum Sweep<T> {
    Answers(Vec<(String, T)>),
    NotProvided,
    Failed(CallError),
}

fn sweep<Q: Copy, T>(
    queries: impl Iterator<Item = Q>,
    label: impl Fn(Q) -> String,
    mut ask: impl FnMut(Q) -> Result<Option<T>, CallError>,
) -> Sweep<T> {
    let mut answers = Vec::new();
    for q in queries {
        match ask(q) {
            Ok(Some(answer)) => answers.push((label(q), answer)),
            Ok(None) => return Sweep::NotProvided,
            Err(e) => return Sweep::Failed(e),
        }
    }
    Sweep::Answers(answers)
}

fn pointwise(plugin: &Plugin) -> Sweep<Vec<LaunchConfig>> {
    sweep(
        pointwise_queries(),
        |q| {
            format!(
                "pointwise_configs(numel={}, element_bytes={})",
                q.numel, q.element_bytes
            )
        },
        |q| plugin.pointwise_configs(q),
    )
}

fn reduction(plugin: &Plugin) -> Sweep<Vec<LaunchConfig>> {
    sweep(
        reduction_queries(),
        |q| format!("reduction_configs(rows={}, row_len={})", q.rows, q.row_len),
        |q| plugin.reduction_configs(q),
    )
}

/// `hinted_reduction_configs` (API 1.2) over the reduction queries, for every
/// hint; `NotProvided` when the plugin does not tell hints apart.
fn hinted(plugin: &Plugin) -> Sweep<Vec<LaunchConfig>> {
    let hints = [
        ReductionHint::Inner,
        ReductionHint::Outer,
        ReductionHint::Tile,
    ];
    sweep(
        reduction_queries()
            .flat_map(move |query| hints.map(|hint| HintedReductionQuery { query, hint })),
        |q| {
            format!(
                "hinted_reduction_configs(rows={}, row_len={}, hint={:?})",
                q.query.rows, q.query.row_len, q.hint
            )
        },
        |q| plugin.hinted_reduction_configs(q),
    )
}

/// `reduction_pass_configs` (API 1.4) over the reduction queries, for every
/// hint and for one, two and three passes; `NotProvided` when the plugin does
/// not tell passes apart.
fn passes(plugin: &Plugin) -> Sweep<Vec<LaunchConfig>> {
    let hints = [
        ReductionHint::Inner,
        ReductionHint::Outer,
        ReductionHint::Tile,
    ];
    sweep(
        reduction_queries().flat_map(move |query| {
            hints.into_iter().flat_map(move |hint| {
                (1..=3).map(move |passes| ReductionPassQuery {
                    query,
                    hint,
                    passes,
                })
            })
        }),
        |q| {
            format!(
                "reduction_pass_configs(rows={}, row_len={}, hint={:?}, passes={})",
                q.query.rows, q.query.row_len, q.hint, q.passes
            )
        },
        |q| plugin.reduction_pass_configs(q),
    )
}

/// The reduction sweep, then the hinted and the passes ones where the plugin
/// provides them.
fn reduction_and_hinted(
    plugin: &Plugin,
    problems_of: impl Fn(&str, &[LaunchConfig]) -> Vec<String>,
) -> Outcome {
    let plain = configs_check(reduction(plugin), &problems_of);
    if plain.status != super::Status::Pass {
        return plain;
    }
    let hinted = match hinted(plugin) {
        Sweep::NotProvided => plain,
        answers => configs_check(answers, &problems_of),
    };
    if hinted.status != super::Status::Pass {
        return hinted;
    }
    match passes(plugin) {
        Sweep::NotProvided => hinted,
        answers => configs_check(answers, &problems_of),
    }
}

fn adjusted(plugin: &Plugin, props: &DeviceProperties) -> Sweep<(Grid, Grid)> {
    sweep(
        grids(props).into_iter(),
        |g| format!("adjust_grid({:?})", g.to_array()),
        |g| plugin.adjust_grid(g).map(|got| got.map(|got| (g, got))),
    )
}

/// Runs `heuristics.<what>`.
pub fn check(plugin: &Plugin, what: &str) -> Outcome {
    let props = match device_properties(plugin) {
        Ok(p) => p,
        Err(outcome) => return outcome,
    };
    // A C++ device's x_block is a parallel chunk, not a Triton block.
    let scheduling = match plugin.backend_spec() {
        Ok(Some(spec)) => spec.scheduling,
        _ => kiln_plugin_api::SchedulingKind::Triton,
    };
    match what {
        "pointwise_sweep" => configs_check(pointwise(plugin), |label, configs| {
            config_shape_problems(label, configs, scheduling)
        }),
        "reduction_sweep" => reduction_and_hinted(plugin, |label, configs| {
            config_shape_problems(label, configs, scheduling)
        }),
        "thread_limit" => {
            let pointwise = configs_check(pointwise(plugin), |label, configs| {
                config_thread_problems(label, configs, &props)
            });
            if pointwise.status != super::Status::Pass {
                return pointwise;
            }
            reduction_and_hinted(plugin, |label, configs| {
                config_thread_problems(label, configs, &props)
            })
        }
        "grid" => match adjusted(plugin, &props) {
            Sweep::Answers(answers) => {
                let problems = answers
                    .iter()
                    .filter_map(|(_, (wanted, got))| grid_problem(*wanted, *got, props.max_grid))
                    .collect();
                Outcome::from_problems(problems, format!("{} grids", answers.len()))
            }
            Sweep::NotProvided => Outcome::skip("not supported: the plugin has no adjust_grid"),
            Sweep::Failed(e) => Outcome::fail(e.to_string()),
        },
        "deterministic" => deterministic(plugin, &props),
        "triton_target" => match plugin.triton_target() {
            Ok(Some(target)) => match triton_target_problem(&target) {
                Some(problem) => Outcome::fail(problem),
                None => Outcome::pass(target.to_string()),
            },
            Ok(None) => Outcome::skip(
                "not provided: a Triton device's target is derived from its properties (type, cc, warp_size)",
            ),
            Err(e) => Outcome::fail(e.to_string()),
        },
        "matmul_alignment" => matmul_alignment(plugin),
        "conv_channels_last" => conv_channels_last(plugin),
        other => Outcome::fail(format!("there is no check named \"heuristics.{other}\"")),
    }
}

/// `heuristics.matmul_alignment`: the byte multiple, where the plugin states
/// one, is one the host can pad to. A plugin that states none passes (the
/// host pads nothing for it), so that the examples' compile, which needs this
/// check, still runs.
fn matmul_alignment(plugin: &Plugin) -> Outcome {
    match plugin.matmul_alignment() {
        Ok(Some(bytes)) => match matmul_alignment_problem(bytes) {
            Some(problem) => Outcome::fail(problem),
            None if bytes == 0 => Outcome::pass("0: no matrix product is padded"),
            None => Outcome::pass(format!(
                "{bytes} bytes: 16-bit products' K and N are padded to {} elements",
                bytes / 2
            )),
        },
        Ok(None) => Outcome::pass(format!(
            "not stated: the host's default of {} (no matrix product is padded)",
            crate::plugins::defaults::MATMUL_ALIGNMENT
        )),
        Err(e) => Outcome::fail(e.to_string()),
    }
}

/// `heuristics.conv_channels_last`: the dtypes, where the plugin states them,
/// are floating dtypes by the host's names. A plugin that states none passes
/// (no convolution changes layout for it).
fn conv_channels_last(plugin: &Plugin) -> Outcome {
    match plugin.conv_channels_last() {
        Ok(Some(names)) => match conv_channels_last_problem(&names) {
            Some(problem) => Outcome::fail(problem),
            None if names.is_empty() => Outcome::pass("none: every convolution stays NCHW"),
            None => Outcome::pass(format!(
                "{}: those convolutions run channels-last",
                names.join(", ")
            )),
        },
        Ok(None) => {
            Outcome::pass("not stated: the host's default, none (every convolution stays NCHW)")
        }
        Err(e) => Outcome::fail(e.to_string()),
    }
}

fn configs_check(
    sweep: Sweep<Vec<LaunchConfig>>,
    problems_of: impl Fn(&str, &[LaunchConfig]) -> Vec<String>,
) -> Outcome {
    match sweep {
        Sweep::Answers(answers) => {
            let problems = answers
                .iter()
                .flat_map(|(label, configs)| problems_of(label, configs))
                .collect();
            Outcome::from_problems(problems, format!("{} queries", answers.len()))
        }
        Sweep::NotProvided => Outcome::skip("not supported: the plugin has no heuristics"),
        Sweep::Failed(e) => Outcome::fail(e.to_string()),
    }
}

/// Asks every sweep twice and compares the answers.
fn deterministic(plugin: &Plugin, props: &DeviceProperties) -> Outcome {
    fn differ<T: PartialEq + std::fmt::Debug>(
        first: Sweep<T>,
        second: Sweep<T>,
    ) -> Result<Option<String>, Outcome> {
        match (first, second) {
            (Sweep::Answers(a), Sweep::Answers(b)) => Ok(a
                .iter()
                .zip(&b)
                .find(|(x, y)| x.1 != y.1)
                .map(|(x, y)| format!("{} gave {:?}, then {:?}", x.0, x.1, y.1))),
            (Sweep::Failed(e), _) | (_, Sweep::Failed(e)) => Err(Outcome::fail(e.to_string())),
            (Sweep::NotProvided, Sweep::NotProvided) => Ok(None),
            _ => Ok(Some(
                "a query was answered once and not the next time".to_string(),
            )),
        }
    }
    let mut problems = Vec::new();
    let results = [
        differ(pointwise(plugin), pointwise(plugin)),
        differ(reduction(plugin), reduction(plugin)),
        differ(hinted(plugin), hinted(plugin)),
        differ(passes(plugin), passes(plugin)),
        differ(adjusted(plugin, props), adjusted(plugin, props)),
    ];
    for result in results {
        match result {
            Ok(problem) => problems.extend(problem),
            Err(outcome) => return outcome,
        }
    }
    Outcome::from_problems(problems, "every query answered the same twice")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_cover_the_promised_ranges() {
        let p = pointwise_sizes();
        assert!(p.contains(&1) && p.contains(&(1 << 31)) && p.contains(&1000));
        let r = reduction_sizes();
        assert!(r.contains(&1) && r.contains(&(1 << 20)));
        assert_eq!(reduction_queries().count(), r.len() * r.len());
        let props = DeviceProperties {
            device_type: "test".into(),
            index: 0,
            multi_processor_count: 48,
            cc: 0,
            major: abi_stable::std_types::ROption::RNone,
            regs_per_multiprocessor: abi_stable::std_types::ROption::RNone,
            max_threads_per_multi_processor: abi_stable::std_types::ROption::RNone,
            max_threads_per_block: abi_stable::std_types::ROption::RNone,
            warp_size: abi_stable::std_types::ROption::RNone,
            max_grid: [100, 10, 10],
            source: kiln_plugin_api::PropertiesSource::StaticDefaults,
        };
        let all = grids(&props);
        assert!(all.contains(&Grid::new(1, 11, 1)));
        // Around the device's width: 47, 48, 49, 95, 97 for 48 units.
        for x in [47, 48, 49, 95, 97] {
            assert!(all.contains(&Grid::new(x, 1, 1)), "{x}");
        }
    }
}
