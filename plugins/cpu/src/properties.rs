//! `DeviceProperties` of the host CPU, read from the OS and the instruction
//! set, in GPU terms: a logical core is a "multiprocessor", a SIMD lane of
//! `f32` is a "thread", and one SIMD register is both the "warp" and the
//! "block" a core runs at a time (so `max_threads_per_block` is the lane
//! count, not the core count: a GPU block never spans multiprocessors, and
//! the host checks `max_threads_per_multi_processor >= max_threads_per_block`).
//!
//! Nothing here can fail: an OS that will not say how many cores it has gets
//! one, and an unknown instruction set gets 128-bit vectors.

use abi_stable::std_types::ROption;
use kiln_plugin_api::{DeviceProperties, PropertiesSource};

/// C++ kernels index with `int64_t`, so no dimension may exceed its range.
pub const MAX_GRID_DIM: u64 = i64::MAX as u64;

/// Bytes in one SIMD register of the widest vector unit the host has.
pub fn simd_bytes() -> u32 {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return 64;
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            return 32;
        }
    }
    // SSE2 (every x86-64), NEON (every AArch64) and anything unknown: 128 bits.
    16
}

/// Bytes of the level-`level` data (or unified) cache of cpu 0, from Linux's
/// sysfs; `None` where the OS does not say.
pub fn cache_bytes(level: u32) -> Option<u64> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    for entry in dir.flatten() {
        let read = |name: &str| std::fs::read_to_string(entry.path().join(name)).ok();
        let Some(l) = read("level") else { continue };
        let kind = read("type").unwrap_or_default();
        if l.trim() != level.to_string() || kind.trim() == "Instruction" {
            continue;
        }
        if let Some(size) = read("size").and_then(|s| parse_cache_size(&s)) {
            return Some(size);
        }
    }
    None
}

/// sysfs's cache size, such as `32K` or `1024K` or `2M`, in bytes.
fn parse_cache_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => t.split_at(i),
        None => (t, ""),
    };
    let n: u64 = digits.parse().ok()?;
    let scale = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(scale).filter(|&b| b > 0)
}

/// Logical cores the process may run on.
pub fn logical_cores() -> u32 {
    std::thread::available_parallelism()
        .map(|n| u32::try_from(n.get()).unwrap_or(u32::MAX))
        .unwrap_or(1)
}

/// The environment variables that describe another CPU than this one, for
/// generating code ahead of time for a machine that differs from the one
/// compiling (and for tests that want the same code on every machine): the
/// cores, the SIMD register width and the L1d and L2 cache sizes. Each one
/// set replaces what this host reports.
pub const TARGET_VARS: [&str; 4] = [
    "KILN_CPU_CORES",
    "KILN_CPU_SIMD_BYTES",
    "KILN_CPU_L1D_BYTES",
    "KILN_CPU_L2_BYTES",
];

/// The CPU code is generated for: this host, or what [`TARGET_VARS`] say,
/// read through `var` (`std::env::var` in the plugin). A value that is not a
/// number, or out of range, is an error naming the variable.
pub fn target_limits(
    var: impl Fn(&str) -> Option<String>,
) -> Result<crate::heuristics::CpuLimits, String> {
    let read = |name: &str, ok: fn(u64) -> bool, what: &str| -> Result<Option<u64>, String> {
        let Some(text) = var(name) else {
            return Ok(None);
        };
        match text.trim().parse::<u64>() {
            Ok(n) if ok(n) => Ok(Some(n)),
            _ => Err(format!("{name}={text:?}: must be {what}")),
        }
    };
    let cores = read(
        TARGET_VARS[0],
        |n| (1..=1 << 20).contains(&n),
        "a core count from 1",
    )?;
    let simd = read(
        TARGET_VARS[1],
        |n| n.is_power_of_two() && (4..=256).contains(&n),
        "a power of two from 4 to 256 (bytes in one SIMD register: 16 SSE/NEON, 32 AVX2, 64 AVX-512)",
    )?;
    let l1 = read(TARGET_VARS[2], |n| n > 0, "a positive number of bytes")?;
    let l2 = read(TARGET_VARS[3], |n| n > 0, "a positive number of bytes")?;
    Ok(crate::heuristics::CpuLimits {
        cores: cores.map_or_else(logical_cores, |n| n as u32),
        simd_bytes: simd.map_or_else(simd_bytes, |n| n as u32),
        l1d_bytes: l1.or_else(|| cache_bytes(1)).unwrap_or(32 << 10),
        l2_bytes: l2.or_else(|| cache_bytes(2)).unwrap_or(512 << 10),
    })
}

/// The target CPU as device `index` (there is only one, index 0; any other
/// index is an error).
pub fn host(index: u32, limits: &crate::heuristics::CpuLimits) -> Result<DeviceProperties, String> {
    if index != 0 {
        return Err(format!(
            "cpu device {index} does not exist: there is one, cpu 0"
        ));
    }
    let cores = limits.cores.max(1);
    let lanes = (limits.simd_bytes / 4).max(1);
    Ok(DeviceProperties {
        device_type: "cpu".into(),
        index,
        multi_processor_count: cores,
        // Compute capability means nothing for a CPU.
        cc: 0,
        major: ROption::RNone,
        regs_per_multiprocessor: ROption::RNone,
        max_threads_per_multi_processor: ROption::RSome(lanes),
        max_threads_per_block: ROption::RSome(lanes),
        warp_size: ROption::RSome(lanes),
        max_grid: [MAX_GRID_DIM; 3],
        source: PropertiesSource::Queried,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_parse_like_sysfs_writes_them() {
        assert_eq!(parse_cache_size("32K\n"), Some(32 << 10));
        assert_eq!(parse_cache_size("2M"), Some(2 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("0K"), None);
        assert_eq!(parse_cache_size("12Q"), None);
        assert_eq!(parse_cache_size(""), None);
        assert_eq!(parse_cache_size("99999999999999999999K"), None);
    }

    #[test]
    fn the_target_is_this_host_unless_the_environment_says_otherwise() {
        let none = |_: &str| None;
        let here = target_limits(none).expect("the host");
        assert_eq!(here.cores, logical_cores());
        assert_eq!(here.simd_bytes, simd_bytes());
        let vars = |name: &str| match name {
            "KILN_CPU_CORES" => Some("4".to_string()),
            "KILN_CPU_SIMD_BYTES" => Some("64".to_string()),
            "KILN_CPU_L1D_BYTES" => Some("49152".to_string()),
            "KILN_CPU_L2_BYTES" => Some("2097152".to_string()),
            _ => None,
        };
        let there = target_limits(vars).expect("valid");
        assert_eq!(
            (
                there.cores,
                there.simd_bytes,
                there.l1d_bytes,
                there.l2_bytes
            ),
            (4, 64, 49152, 2 << 20)
        );
        for (name, value) in [
            ("KILN_CPU_CORES", "0"),
            ("KILN_CPU_SIMD_BYTES", "24"),
            ("KILN_CPU_SIMD_BYTES", "wide"),
            ("KILN_CPU_L2_BYTES", "-1"),
        ] {
            let err =
                target_limits(|n: &str| (n == name).then(|| value.to_string())).expect_err(value);
            assert!(err.starts_with(&format!("{name}=")), "{err}");
        }
    }

    #[test]
    fn host_properties_are_consistent() {
        let limits = target_limits(|_: &str| None).expect("the host");
        let props = host(0, &limits).expect("cpu 0");
        let lanes = props.warp_size.into_option().expect("lanes");
        assert!([4, 8, 16].contains(&lanes));
        assert!(props.multi_processor_count >= 1);
        assert_eq!(props.max_threads_per_block, ROption::RSome(lanes));
        assert_eq!(props.max_threads_per_multi_processor, ROption::RSome(lanes));
        assert_eq!(props.source, PropertiesSource::Queried);
        assert!(host(1, &limits).is_err());
    }
}
