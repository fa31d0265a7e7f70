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

/// `f32` lanes in one SIMD register: 16 with AVX-512F, 8 with AVX2, else 4.
pub fn simd_lanes_f32() -> u32 {
    simd_bytes() / 4
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

/// The host CPU as device `index` (there is only one, index 0; any other
/// index is an error).
pub fn host(index: u32) -> Result<DeviceProperties, String> {
    if index != 0 {
        return Err(format!(
            "cpu device {index} does not exist: there is one, cpu 0"
        ));
    }
    let cores = logical_cores();
    let lanes = simd_lanes_f32();
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
    fn host_properties_are_consistent() {
        let props = host(0).expect("cpu 0");
        let lanes = props.warp_size.into_option().expect("lanes");
        assert!([4, 8, 16].contains(&lanes));
        assert!(props.multi_processor_count >= 1);
        assert_eq!(props.max_threads_per_block, ROption::RSome(lanes));
        assert_eq!(props.max_threads_per_multi_processor, ROption::RSome(lanes));
        assert_eq!(props.source, PropertiesSource::Queried);
        assert!(host(1).is_err());
    }
}
