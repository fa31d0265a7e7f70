//! Assertions for a plugin's own unit tests (feature `testing`): the rules
//! `host conformance` enforces, checked directly on the plugin's Rust value,
//! so a unit test fails at the line that broke one.

use kiln_plugin_api::{DevicePlugin, Grid, LaunchConfig, PointwiseQuery, ReductionQuery};

/// Asserts that `text` has balanced `{}`, `()` and `[]`, never closing more
/// than it opened, ignoring the contents of C++ string and char literals and
/// of `//` comments.
pub fn assert_balanced(what: &str, text: &str) {
    let mut stack = Vec::new();
    for (line_no, line) in text.lines().enumerate() {
        let mut chars = line.chars().peekable();
        let mut quote: Option<char> = None;
        while let Some(c) = chars.next() {
            if let Some(q) = quote {
                if c == '\\' {
                    chars.next();
                } else if c == q {
                    quote = None;
                }
                continue;
            }
            match c {
                '"' | '\'' => quote = Some(c),
                '/' if chars.peek() == Some(&'/') => break,
                '{' | '(' | '[' => stack.push(c),
                '}' | ')' | ']' => {
                    let open = match c {
                        '}' => '{',
                        ')' => '(',
                        _ => '[',
                    };
                    assert_eq!(
                        stack.pop(),
                        Some(open),
                        "{what}: unbalanced `{c}` on line {}: {line}",
                        line_no + 1
                    );
                }
                _ => {}
            }
        }
    }
    assert!(stack.is_empty(), "{what}: unclosed {stack:?}");
}

/// Asserts that `text` is one non-empty line without control characters.
pub fn assert_one_line(what: &str, text: &str) {
    assert!(!text.trim().is_empty(), "{what} is empty");
    assert!(
        !text.chars().any(char::is_control),
        "{what} has a control character: {text:?}"
    );
}

/// Asserts every one-line override the plugin provides is one line and that
/// the parameterised ones use their parameter.
pub fn assert_one_line_overrides<P: DevicePlugin>(plugin: &P) {
    let fixed = [
        ("synchronize", plugin.synchronize()),
        ("cpp_device_guard", plugin.cpp_device_guard()),
        ("cpp_aoti_device_guard", plugin.cpp_aoti_device_guard()),
        ("cpp_stream_guard", plugin.cpp_stream_guard()),
        ("cpp_aoti_stream_guard", plugin.cpp_aoti_stream_guard()),
        (
            "cpp_getStreamFromExternal",
            plugin.cpp_get_stream_from_external(),
        ),
        ("cpp_stream_type", plugin.cpp_stream_type()),
        ("aoti_get_stream", plugin.aoti_get_stream()),
        ("cpp_kernel_type", plugin.cpp_kernel_type()),
        ("cpp_device_ptr", plugin.cpp_device_ptr()),
    ];
    for (what, text) in fixed {
        if let Some(text) = text {
            assert_one_line(what, &text);
        }
    }
    if let Some(text) = plugin.import_get_raw_stream_as("s7") {
        assert_one_line("import_get_raw_stream_as", &text);
        assert!(text.contains("s7"), "{text}");
    }
    for idx in [0, 3, 12] {
        for (what, text) in [
            ("set_device", plugin.set_device(idx)),
            ("device_guard", plugin.device_guard(idx)),
        ] {
            if let Some(text) = text {
                assert_one_line(what, &text);
                assert!(text.contains(&idx.to_string()), "{what}({idx}): {text}");
            }
        }
    }
}

/// Asserts device 0's properties are in the range the host checks at load:
/// named after the device, a power-of-two warp dividing the block, a block no
/// larger than a multiprocessor holds, no zero grid dimension.
pub fn assert_properties_in_range<P: DevicePlugin>(plugin: &P) {
    let props = plugin.device_properties(0).expect("device 0 properties");
    assert_eq!(props.device_type.as_str(), P::manifest().name.as_str());
    assert_eq!(props.index, 0);
    assert!(props.multi_processor_count > 0);
    let warp = props.warp_size.into_option().expect("warp size");
    let block = props.max_threads_per_block.into_option().expect("block");
    assert!(
        warp.is_power_of_two() && block.is_multiple_of(warp),
        "{props:?}"
    );
    if let Some(per_mp) = props.max_threads_per_multi_processor.into_option() {
        assert!(per_mp >= block, "{props:?}");
    }
    assert!(!props.max_grid.contains(&0), "{props:?}");
}

/// Asserts the heuristics answer every query of the sweep with at least one
/// config, warps within the block, and deterministically; block sizes powers
/// of two for a Triton device (a C++ device's `x_block` is a parallel chunk,
/// any size).
pub fn assert_heuristics_sweep<P: DevicePlugin>(plugin: &P) {
    // Limits are only meaningful against sane properties.
    assert_properties_in_range(plugin);
    let props = plugin.device_properties(0).expect("device 0 properties");
    let warp = u64::from(props.warp_size.into_option().expect("warp size"));
    let max_threads = u64::from(props.max_threads_per_block.into_option().expect("block"));
    let triton = plugin.backend_spec().scheduling == kiln_plugin_api::SchedulingKind::Triton;
    let check = |configs: &[LaunchConfig], what: &str| {
        assert!(!configs.is_empty(), "{what}: no config");
        for c in configs {
            assert!(c.x_block >= 1, "{what}: {c:?}");
            if triton {
                assert!(c.x_block.is_power_of_two(), "{what}: {c:?}");
            }
            assert!(c.r_block.is_power_of_two(), "{what}: {c:?}");
            assert!(c.num_warps >= 1 && c.num_stages >= 1, "{what}: {c:?}");
            assert!(
                u64::from(c.num_warps) * warp <= max_threads,
                "{what}: {c:?} exceeds {max_threads} threads"
            );
        }
    };
    for numel in [
        0,
        1,
        2,
        3,
        100,
        1 << 10,
        1 << 20,
        1_000_003,
        1 << 31,
        u64::MAX,
    ] {
        for element_bytes in [1, 2, 4, 8] {
            let q = PointwiseQuery {
                numel,
                element_bytes,
            };
            let configs = plugin.pointwise_configs(&q);
            check(&configs, &format!("pointwise {numel}"));
            assert_eq!(configs, plugin.pointwise_configs(&q));
        }
    }
    for rows in [1, 2, 7, 8192, 1 << 20, 1 << 31] {
        for shift in 0..=20 {
            let q = ReductionQuery {
                rows,
                row_len: 1 << shift,
                element_bytes: 4,
            };
            let configs = plugin.reduction_configs(&q);
            check(&configs, &format!("reduction {rows}x{}", 1u64 << shift));
            assert_eq!(configs, plugin.reduction_configs(&q));
        }
    }
}

/// Asserts `adjust_grid` only ever grows a dimension or caps it at the
/// device's grid limit.
pub fn assert_grid_never_shrinks<P: DevicePlugin>(plugin: &P) {
    let max_grid = plugin.device_properties(0).expect("properties").max_grid;
    for n in [
        0,
        1,
        2,
        47,
        48,
        49,
        50,
        1000,
        65_535,
        65_536,
        1 << 31,
        u64::MAX,
    ] {
        let wanted = Grid::new(n, n, n);
        let got = plugin.adjust_grid(wanted).to_array();
        for (dim, &have) in got.iter().enumerate() {
            assert!(
                have >= n || have == max_grid[dim],
                "dim {dim}: wanted {n}, got {have}"
            );
            assert!(
                have <= max_grid[dim],
                "dim {dim}: {have} > {}",
                max_grid[dim]
            );
        }
    }
}
