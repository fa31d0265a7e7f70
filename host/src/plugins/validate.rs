//! Load-time validation of what a plugin returns, and the single-value checks
//! that `host conformance` reuses check by check.
//!
//! The load-time pass is deliberately cheap (a handful of calls): conformance
//! runs the exhaustive sweeps.

use kiln_plugin_api::{
    DeviceProperties, Grid, LaunchConfig, PointwiseQuery, ReductionQuery, SchedulingKind,
};

use super::library::{Override, OverrideArgs, Plugin, TritonTargetOwned};

/// Why `text` is not an acceptable one-line string, if it is not.
pub fn one_line_problem(text: &str) -> Option<String> {
    if text.trim().is_empty() {
        return Some("is empty".to_string());
    }
    text.chars().find(|c| c.is_control()).map(|c| {
        format!(
            "must be one line but contains the control character U+{:04X}",
            c as u32
        )
    })
}

/// Why the text an override returned is malformed, if it is.
pub fn override_text_problem(which: Override, text: &str) -> Option<String> {
    if which.is_one_line() {
        return one_line_problem(text).map(|p| format!("`{}` {p}", which.name()));
    }
    if text.trim().is_empty() {
        return Some(format!("`{}` is empty", which.name()));
    }
    text.chars()
        .find(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
        .map(|c| {
            format!(
                "`{}` contains the control character U+{:04X}",
                which.name(),
                c as u32
            )
        })
}

/// Problems with a device's properties (empty when they are in range): the
/// union of the four groups below, which `host conformance` reports as
/// separate checks.
pub fn properties_problems(props: &DeviceProperties, device: &str, index: u32) -> Vec<String> {
    let mut problems = properties_identity_problems(props, device, index);
    problems.extend(properties_range_problems(props));
    problems.extend(warp_size_problems(props));
    problems.extend(threads_per_block_problems(props));
    problems
}

/// Whether the properties name the device and index they were asked for.
pub fn properties_identity_problems(
    props: &DeviceProperties,
    device: &str,
    index: u32,
) -> Vec<String> {
    let mut problems = Vec::new();
    if props.device_type.as_str() != device {
        problems.push(format!(
            "device_properties: type is {:?}, expected the device name {device:?}",
            props.device_type.as_str()
        ));
    }
    if props.index != index {
        problems.push(format!(
            "device_properties({index}): index is {}",
            props.index
        ));
    }
    problems
}

/// Counts and limits that must be positive and consistent with each other
/// (everything but the warp size and its relation to the block size).
pub fn properties_range_problems(props: &DeviceProperties) -> Vec<String> {
    let mut problems = Vec::new();
    if props.multi_processor_count == 0 {
        problems.push("device_properties: multi_processor_count is 0".to_string());
    }
    if let Some(t) = props.max_threads_per_block.into_option() {
        if t == 0 {
            problems.push("device_properties: max_threads_per_block is 0".to_string());
        }
        if let Some(sm) = props.max_threads_per_multi_processor.into_option() {
            if sm < t {
                problems.push(format!(
                    "device_properties: max_threads_per_multi_processor {sm} is below max_threads_per_block {t}"
                ));
            }
        }
    }
    if props.max_grid.contains(&0) {
        problems.push(format!(
            "device_properties: max_grid {:?} has a zero dimension",
            props.max_grid
        ));
    }
    problems
}

/// Whether `warp_size`, when given, is a power of two.
pub fn warp_size_problems(props: &DeviceProperties) -> Vec<String> {
    match props.warp_size.into_option() {
        Some(w) if w == 0 || !w.is_power_of_two() => vec![format!(
            "device_properties: warp_size {w} is not a power of two"
        )],
        _ => Vec::new(),
    }
}

/// Whether `max_threads_per_block` is a whole number of warps. A zero or
/// missing warp size is [`warp_size_problems`]' business, not this one's.
pub fn threads_per_block_problems(props: &DeviceProperties) -> Vec<String> {
    let warp = props.warp_size.into_option().filter(|w| *w > 0);
    match (props.max_threads_per_block.into_option(), warp) {
        (Some(t), Some(w)) if t > 0 && t % w != 0 => vec![format!(
            "device_properties: max_threads_per_block {t} is not a multiple of warp_size {w}"
        )],
        _ => Vec::new(),
    }
}

/// Problems with a list of launch configs for a device with these properties:
/// the union of [`config_shape_problems`] and [`config_thread_problems`].
pub fn configs_problems(
    what: &str,
    configs: &[LaunchConfig],
    props: &DeviceProperties,
    scheduling: SchedulingKind,
) -> Vec<String> {
    let mut problems = config_shape_problems(what, configs, scheduling);
    problems.extend(config_thread_problems(what, configs, props));
    problems
}

/// Problems with the configs themselves: at least one config, block sizes
/// powers of two, at least one warp and one stage. A C++ device's `x_block`
/// is a parallel chunk (any positive size); a Triton device's is a block.
pub fn config_shape_problems(
    what: &str,
    configs: &[LaunchConfig],
    scheduling: SchedulingKind,
) -> Vec<String> {
    if configs.is_empty() {
        return vec![format!("{what}: returned no config")];
    }
    let mut problems = Vec::new();
    for (i, c) in configs.iter().enumerate() {
        if scheduling == SchedulingKind::Cpp && c.x_block == 0 {
            problems.push(format!("{what}: config {i} has x_block 0"));
        }
        for (field, value) in [("x_block", c.x_block), ("r_block", c.r_block)] {
            if field == "x_block" && scheduling == SchedulingKind::Cpp {
                continue;
            }
            if value == 0 || !value.is_power_of_two() {
                problems.push(format!(
                    "{what}: config {i} has {field} {value}, not a power of two"
                ));
            }
        }
        if c.num_warps == 0 {
            problems.push(format!("{what}: config {i} has num_warps 0"));
        }
        if c.num_stages == 0 {
            problems.push(format!("{what}: config {i} has num_stages 0"));
        }
    }
    problems
}

/// Configs whose `num_warps × warp_size` exceeds `max_threads_per_block`.
pub fn config_thread_problems(
    what: &str,
    configs: &[LaunchConfig],
    props: &DeviceProperties,
) -> Vec<String> {
    let warp = props.warp_size.into_option().unwrap_or(1).max(1);
    let Some(max) = props.max_threads_per_block.into_option() else {
        return Vec::new();
    };
    configs
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let threads = u64::from(c.num_warps) * u64::from(warp);
            (threads > u64::from(max)).then(|| {
                format!(
                    "{what}: config {i} needs num_warps {} x warp_size {warp} = {threads} threads, \
                     over max_threads_per_block {max}",
                    c.num_warps
                )
            })
        })
        .collect()
}

/// Why `got = adjust_grid(wanted)` is wrong, if it is: a dimension may only
/// grow, except that it is capped at `max_grid` (kernels loop over the rest).
pub fn grid_problem(wanted: Grid, got: Grid, max_grid: [u64; 3]) -> Option<String> {
    for (axis, ((w, g), max)) in ["x", "y", "z"].iter().zip(
        wanted
            .to_array()
            .into_iter()
            .zip(got.to_array())
            .zip(max_grid),
    ) {
        if g > max {
            return Some(format!(
                "adjust_grid({:?}) gave {axis} = {g}, over the max_grid {max} the plugin reports: \
                 a grid may never exceed max_grid",
                wanted.to_array()
            ));
        }
        if w > max && g < max {
            return Some(format!(
                "adjust_grid({:?}) gave {axis} = {g} for a request above max_grid: a grid beyond \
                 the limit must be capped at exactly the max_grid the plugin reports ({max}), \
                 where the kernel loops over the rest, never below it",
                wanted.to_array()
            ));
        }
        if g < w.min(max) || (g == 0 && w > 0) {
            return Some(format!(
                "adjust_grid({:?}) shrank {axis} from {w} to {g}: a grid may be rounded up, \
                 never down (the programs it drops would be work left undone)",
                wanted.to_array()
            ));
        }
    }
    None
}

/// Why a plugin's Triton target is unusable, if it is.
pub fn triton_target_problem(target: &TritonTargetOwned) -> Option<String> {
    if !kiln_plugin_api::is_valid_device_name(&target.backend) {
        return Some(format!(
            "triton_target's backend {:?} does not match ^[a-z][a-z0-9_]{{0,31}}$",
            target.backend
        ));
    }
    if let Some(problem) = one_line_problem(&target.arch) {
        return Some(format!("triton_target's arch {problem}"));
    }
    if !target.warp_size.is_power_of_two() {
        return Some(format!(
            "triton_target's warp_size {} is not a power of two",
            target.warp_size
        ));
    }
    None
}

/// The byte multiples `matmul_alignment` may give besides 0 (no padding):
/// powers of two from 2 (a 16-bit element) to 256.
pub const MATMUL_ALIGNMENT_RANGE: std::ops::RangeInclusive<u32> = 2..=256;

/// Why a plugin's `matmul_alignment` is unusable, if it is: it must be 0 or a
/// power of two in [`MATMUL_ALIGNMENT_RANGE`], since the host pads a 16-bit
/// product's K and N to a whole number of it.
pub fn matmul_alignment_problem(bytes: u32) -> Option<String> {
    if bytes == 0 || (bytes.is_power_of_two() && MATMUL_ALIGNMENT_RANGE.contains(&bytes)) {
        return None;
    }
    Some(format!(
        "matmul_alignment is {bytes}: it must be 0 (no padding) or a power of two from {} to {} \
         bytes (a multiple of whole 16-bit elements, such as 16 for 8 of them); return None \
         where the device's matrix-product library has no preferred multiple",
        MATMUL_ALIGNMENT_RANGE.start(),
        MATMUL_ALIGNMENT_RANGE.end()
    ))
}

/// The dtypes `conv_channels_last` may name: the floating ones, which are all
/// a convolution computes in.
pub const CONV_CHANNELS_LAST_DTYPES: [&str; 4] = ["float16", "bfloat16", "float32", "float64"];

/// Why a plugin's `conv_channels_last` is unusable, if it is: every name must
/// be one of [`CONV_CHANNELS_LAST_DTYPES`], spelled as the host spells it.
pub fn conv_channels_last_problem(names: &[String]) -> Option<String> {
    let bad: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| !CONV_CHANNELS_LAST_DTYPES.contains(n))
        .collect();
    if bad.is_empty() {
        return None;
    }
    Some(format!(
        "conv_channels_last names {bad:?}: each name must be one of {} (the floating dtypes, \
         spelled as Kiln's graph format spells them); return None where no dtype's \
         convolution is faster channels-last",
        CONV_CHANNELS_LAST_DTYPES.join(", ")
    ))
}

/// Grid extents that probe a device's `adjust_grid` around its own numbers:
/// one program, each side of its processor count, each side of twice that,
/// and a few waves more, so that a rule keyed to the device's width (GXU's
/// multiples of 48) is seen at work wherever that width is.
pub fn grid_probes(props: &DeviceProperties) -> Vec<u64> {
    let units = u64::from(props.multi_processor_count.max(1));
    let mut probes = vec![
        1,
        units.saturating_sub(1),
        units,
        units.saturating_add(1),
        units.saturating_mul(2).saturating_sub(1),
        units.saturating_mul(2).saturating_add(1),
        units.saturating_mul(20).saturating_add(3),
    ];
    probes.retain(|&p| p >= 1);
    probes.sort_unstable();
    probes.dedup();
    probes
}

/// The queries the load-time validation asks.
const POINTWISE_PROBES: [u64; 3] = [1, 1 << 10, 1 << 20];
const REDUCTION_PROBES: [(u64, u64); 3] = [(1, 1), (1024, 100), (8192, 8192)];

/// Load-time validation: every provided override well formed, properties of
/// device 0 in range, heuristics answering a few probes sensibly.
pub fn validate(plugin: &Plugin) -> Vec<String> {
    let mut problems = Vec::new();
    let args = OverrideArgs::default();
    for which in Override::ALL {
        match plugin.override_text(which, &args) {
            Ok(Some(text)) => problems.extend(override_text_problem(which, &text)),
            Ok(None) => {}
            Err(e) => problems.push(e.to_string()),
        }
    }
    let props = match plugin.device_properties(0) {
        Ok(Some(props)) => {
            problems.extend(properties_problems(&props, plugin.name(), 0));
            Some(props)
        }
        Ok(None) => None,
        Err(e) => {
            problems.push(e.to_string());
            None
        }
    };
    let scheduling = match plugin.backend_spec() {
        Ok(Some(spec)) => spec.scheduling,
        Ok(None) => SchedulingKind::Triton,
        Err(e) => {
            problems.push(e.to_string());
            SchedulingKind::Triton
        }
    };
    match plugin.triton_target() {
        Ok(Some(target)) => problems.extend(triton_target_problem(&target)),
        Ok(None) => {}
        Err(e) => problems.push(e.to_string()),
    }
    match plugin.matmul_alignment() {
        Ok(Some(bytes)) => problems.extend(matmul_alignment_problem(bytes)),
        Ok(None) => {}
        Err(e) => problems.push(e.to_string()),
    }
    match plugin.conv_channels_last() {
        Ok(Some(names)) => problems.extend(conv_channels_last_problem(&names)),
        Ok(None) => {}
        Err(e) => problems.push(e.to_string()),
    }
    let Some(props) = props else {
        return problems;
    };
    for numel in POINTWISE_PROBES {
        let query = PointwiseQuery {
            numel,
            element_bytes: 4,
        };
        match plugin.pointwise_configs(query) {
            Ok(Some(configs)) => problems.extend(configs_problems(
                &format!("pointwise_configs(numel={numel})"),
                &configs,
                &props,
                scheduling,
            )),
            Ok(None) => break,
            Err(e) => problems.push(e.to_string()),
        }
    }
    for (rows, row_len) in REDUCTION_PROBES {
        let query = ReductionQuery {
            rows,
            row_len,
            element_bytes: 4,
        };
        match plugin.reduction_configs(query) {
            Ok(Some(configs)) => problems.extend(configs_problems(
                &format!("reduction_configs(rows={rows}, row_len={row_len})"),
                &configs,
                &props,
                scheduling,
            )),
            Ok(None) => break,
            Err(e) => problems.push(e.to_string()),
        }
    }
    let wanted = Grid::new(50, 1, 1);
    match plugin.adjust_grid(wanted) {
        Ok(Some(got)) => problems.extend(grid_problem(wanted, got, props.max_grid)),
        Ok(None) => {}
        Err(e) => problems.push(e.to_string()),
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use abi_stable::std_types::ROption::{RNone, RSome};
    use kiln_plugin_api::PropertiesSource;

    fn props() -> DeviceProperties {
        DeviceProperties {
            device_type: "gxu".into(),
            index: 0,
            multi_processor_count: 48,
            cc: 0,
            major: RNone,
            regs_per_multiprocessor: RNone,
            max_threads_per_multi_processor: RSome(2048),
            max_threads_per_block: RSome(1024),
            warp_size: RSome(32),
            max_grid: [1 << 31, 65535, 65535],
            source: PropertiesSource::StaticDefaults,
        }
    }

    #[test]
    fn one_line_overrides_reject_newlines_and_empty_text() {
        assert!(override_text_problem(Override::SetDevice, "torch.gxu.set_device(0)").is_none());
        let newline = override_text_problem(Override::SetDevice, "torch.x(0)\nimport os").unwrap();
        assert!(newline.contains("U+000A"), "{newline}");
        let empty = override_text_problem(Override::CppDeviceGuard, " ").unwrap();
        assert!(empty.contains("empty"), "{empty}");
        assert!(override_text_problem(Override::KernelDriver, "int a;\nint b;\n").is_none());
    }

    #[test]
    fn properties_in_range_pass_and_zero_warp_fails() {
        assert!(properties_problems(&props(), "gxu", 0).is_empty());
        let mut bad = props();
        bad.warp_size = RSome(0);
        let problems = properties_problems(&bad, "gxu", 0);
        assert!(
            problems.iter().any(|p| p.contains("warp_size 0")),
            "{problems:?}"
        );
        let mut wrong_name = props();
        wrong_name.device_type = "cuda".into();
        assert_eq!(properties_problems(&wrong_name, "gxu", 0).len(), 1);
    }

    #[test]
    fn configs_over_the_thread_limit_fail() {
        let ok = LaunchConfig {
            x_block: 1024,
            r_block: 1,
            num_warps: 32,
            num_stages: 1,
        };
        assert!(configs_problems("q", &[ok], &props(), SchedulingKind::Triton).is_empty());
        let too_many = LaunchConfig {
            num_warps: 64,
            ..ok
        };
        let problems = configs_problems("q", &[too_many], &props(), SchedulingKind::Triton);
        assert!(problems[0].contains("2048 threads"), "{problems:?}");
        assert!(
            configs_problems("q", &[], &props(), SchedulingKind::Triton)[0].contains("no config")
        );
        let not_pow2 = LaunchConfig {
            x_block: 1000,
            ..ok
        };
        assert!(
            configs_problems("q", &[not_pow2], &props(), SchedulingKind::Triton)[0]
                .contains("power of two")
        );
    }

    #[test]
    fn matmul_alignment_is_zero_or_a_power_of_two_from_2_to_256() {
        for good in [0, 2, 4, 16, 128, 256] {
            assert_eq!(matmul_alignment_problem(good), None, "{good}");
        }
        for bad in [1, 3, 12, 48, 512, u32::MAX] {
            let problem = matmul_alignment_problem(bad).unwrap_or_default();
            assert!(
                problem.contains(&format!("matmul_alignment is {bad}:"))
                    && problem.contains("power of two from 2 to 256"),
                "{bad}: {problem}"
            );
        }
    }

    #[test]
    fn conv_channels_last_names_only_floating_dtypes() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        for good in [
            &[][..],
            &["float16", "bfloat16"],
            &["float32"],
            &["float64"],
        ] {
            assert_eq!(conv_channels_last_problem(&names(good)), None, "{good:?}");
        }
        for bad in [&["half"][..], &["float16", "int64"], &["Float16"], &[""]] {
            let problem = conv_channels_last_problem(&names(bad)).unwrap_or_default();
            assert!(
                problem.starts_with("conv_channels_last names [")
                    && problem.contains("float16, bfloat16, float32, float64"),
                "{bad:?}: {problem}"
            );
        }
    }

    #[test]
    fn grids_may_grow_or_be_capped_but_never_shrink() {
        let max = [1 << 31, 65535, 65535];
        assert!(grid_problem(Grid::new(50, 1, 1), Grid::new(96, 1, 1), max).is_none());
        assert!(grid_problem(Grid::new(1, 70000, 1), Grid::new(1, 65535, 1), max).is_none());
        assert!(grid_problem(Grid::new(50, 1, 1), Grid::new(48, 1, 1), max)
            .unwrap()
            .contains("shrank x from 50 to 48"));
        assert!(
            grid_problem(Grid::new(1, 1, 1), Grid::new(1, 70000, 1), max)
                .unwrap()
                .contains("over the max_grid 65535")
        );
        // Above the limit, the rule broken is the cap: exactly max_grid.
        let capped_low = grid_problem(
            Grid::new(1 << 31 | 1, 1, 1),
            Grid::new((1 << 31) - 64, 1, 1),
            max,
        )
        .unwrap();
        assert!(
            capped_low
                .contains("must be capped at exactly the max_grid the plugin reports (2147483648)"),
            "{capped_low}"
        );
    }
}
