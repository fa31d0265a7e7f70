//! `DeviceProperties` of CUDA devices: queried through the driver when one is
//! present, else the documented defaults of an H100 SXM.
//!
//! The probe runs once, on the first question about devices (not at load, so
//! that discovering plugins never pays for `cuInit`). Any failure, from a
//! missing `libcuda.so.1` to one attribute the driver refuses, falls back to
//! [`h100_defaults`] marked [`PropertiesSource::StaticDefaults`]; it is never
//! an error and never a panic.

use abi_stable::std_types::ROption;
use kiln_plugin_api::{DeviceProperties, PropertiesSource};

use crate::driver::{Attribute, Driver};

/// H100 SXM5: 132 streaming multiprocessors.
pub const H100_SM_COUNT: u32 = 132;
/// H100: compute capability 9.0.
pub const H100_CC_MAJOR: u32 = 9;
/// H100: compute capability 9.0.
pub const H100_CC_MINOR: u32 = 0;
/// Every CUDA architecture since Kepler: 64 K 32-bit registers per SM.
pub const H100_REGS_PER_SM: u32 = 65_536;
/// H100: 2048 resident threads per SM.
pub const H100_THREADS_PER_SM: u32 = 2048;
/// Every CUDA architecture since Fermi: 1024 threads per block.
pub const H100_THREADS_PER_BLOCK: u32 = 1024;
/// NVIDIA's warp size.
pub const H100_WARP_SIZE: u32 = 32;
/// `cudaDeviceProp::maxGridSize` since compute capability 3.0.
pub const H100_MAX_GRID: [u64; 3] = [2_147_483_647, 65_535, 65_535];
/// H100: 227 KiB of shared memory per block with opt-in
/// (`sharedMemPerBlockOptin`), of the 228 KiB of an SM.
pub const H100_SHARED_MEMORY_PER_BLOCK: u64 = 227 * 1024;
/// H100 SXM: 50 MiB of L2 cache (`l2CacheSize`).
pub const H100_L2_CACHE_BYTES: u64 = 50 * 1024 * 1024;
/// Compute capability (as PyTorch encodes it) from which tensor cores
/// multiply TF32 (Ampere, 8.0).
pub const TF32_MIN_CC: u32 = 80;

/// The properties the plugin reports for device `index` when no driver
/// answered: an H100 SXM, marked as static defaults.
pub fn h100_defaults(index: u32) -> DeviceProperties {
    DeviceProperties {
        device_type: "cuda".into(),
        index,
        multi_processor_count: H100_SM_COUNT,
        cc: H100_CC_MAJOR * 10 + H100_CC_MINOR,
        major: ROption::RSome(H100_CC_MAJOR),
        regs_per_multiprocessor: ROption::RSome(H100_REGS_PER_SM),
        max_threads_per_multi_processor: ROption::RSome(H100_THREADS_PER_SM),
        max_threads_per_block: ROption::RSome(H100_THREADS_PER_BLOCK),
        warp_size: ROption::RSome(H100_WARP_SIZE),
        max_grid: H100_MAX_GRID,
        source: PropertiesSource::StaticDefaults,
    }
}

/// Builds device `index`'s properties from an attribute reader (the driver,
/// or a fake one in tests). Every value must be positive, and the warp size a
/// power of two no larger than a block; anything else is an error, because a
/// driver answering nonsense is no better than no driver.
pub fn from_attributes(
    index: u32,
    mut read: impl FnMut(Attribute) -> Result<i32, String>,
) -> Result<DeviceProperties, String> {
    let positive = |attribute: Attribute, value: i32| -> Result<u32, String> {
        u32::try_from(value)
            .ok()
            .filter(|&v| v > 0)
            .ok_or_else(|| format!("device {index}: {attribute:?} is {value}"))
    };
    let mut read_positive = |attribute: Attribute| positive(attribute, read(attribute)?);

    let major = read_positive(Attribute::ComputeCapabilityMajor)?;
    let warp_size = read_positive(Attribute::WarpSize)?;
    let max_threads_per_block = read_positive(Attribute::MaxThreadsPerBlock)?;
    let multi_processor_count = read_positive(Attribute::MultiprocessorCount)?;
    let regs = read_positive(Attribute::MaxRegistersPerMultiprocessor)?;
    let threads_per_sm = read_positive(Attribute::MaxThreadsPerMultiprocessor)?;
    let max_grid = [
        u64::from(read_positive(Attribute::MaxGridDimX)?),
        u64::from(read_positive(Attribute::MaxGridDimY)?),
        u64::from(read_positive(Attribute::MaxGridDimZ)?),
    ];
    // The minor version is legitimately 0 (sm_90), so it is not "positive".
    let minor_raw = read(Attribute::ComputeCapabilityMinor)?;
    let minor = u32::try_from(minor_raw)
        .ok()
        .filter(|&m| m < 10)
        .ok_or_else(|| format!("device {index}: compute capability minor is {minor_raw}"))?;
    if !warp_size.is_power_of_two() || warp_size > max_threads_per_block {
        return Err(format!(
            "device {index}: warp size {warp_size} does not fit a block of {max_threads_per_block}"
        ));
    }
    Ok(DeviceProperties {
        device_type: "cuda".into(),
        index,
        multi_processor_count,
        cc: major.saturating_mul(10).saturating_add(minor),
        major: ROption::RSome(major),
        regs_per_multiprocessor: ROption::RSome(regs),
        max_threads_per_multi_processor: ROption::RSome(threads_per_sm),
        max_threads_per_block: ROption::RSome(max_threads_per_block),
        warp_size: ROption::RSome(warp_size),
        max_grid,
        source: PropertiesSource::Queried,
    })
}

/// The shared memory one block of device `index` may use with opt-in, in
/// bytes, from an attribute reader (the driver, or a fake one in tests); a
/// value that is not positive is an error.
pub fn shared_memory_from_attributes(
    index: u32,
    read: impl FnMut(Attribute) -> Result<i32, String>,
) -> Result<u64, String> {
    positive(index, Attribute::MaxSharedMemoryPerBlockOptin, read)
}

/// `attribute` of device `index`, in bytes, from an attribute reader; a value
/// that is not positive is an error.
fn positive(
    index: u32,
    attribute: Attribute,
    mut read: impl FnMut(Attribute) -> Result<i32, String>,
) -> Result<u64, String> {
    let value = read(attribute)?;
    u64::try_from(value)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| format!("device {index}: {attribute:?} is {value}"))
}

/// One device as the driver described it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    /// Its properties.
    pub properties: DeviceProperties,
    /// The shared memory one block may use with opt-in, in bytes.
    pub shared_memory_per_block: u64,
    /// Its L2 cache, in bytes.
    pub l2_cache_bytes: u64,
}

impl Device {
    /// Device `index` of the static defaults: an H100 SXM.
    pub fn h100_defaults(index: u32) -> Device {
        Device {
            properties: h100_defaults(index),
            shared_memory_per_block: H100_SHARED_MEMORY_PER_BLOCK,
            l2_cache_bytes: H100_L2_CACHE_BYTES,
        }
    }

    /// Device `index` read through `read`; the static defaults when any
    /// attribute fails or is nonsense.
    fn read(index: u32, mut read: impl FnMut(Attribute) -> Result<i32, String>) -> Device {
        let properties = from_attributes(index, &mut read);
        let shared = shared_memory_from_attributes(index, &mut read);
        let l2 = positive(index, Attribute::L2CacheSize, &mut read);
        match (properties, shared, l2) {
            (Ok(properties), Ok(shared_memory_per_block), Ok(l2_cache_bytes)) => Device {
                properties,
                shared_memory_per_block,
                l2_cache_bytes,
            },
            _ => Device::h100_defaults(index),
        }
    }
}

/// What the driver said, once.
#[derive(Debug)]
pub struct Inventory {
    /// One entry per device the driver reports; empty without a driver.
    pub devices: Vec<Device>,
    /// Why there is no driver, when there is none (kept for diagnostics).
    pub driver_error: Option<String>,
    // Kept so that `libcuda` stays loaded for the life of the plugin.
    _driver: Option<Driver>,
}

impl Inventory {
    /// An inventory of `devices`, as a driver would report them (for tests).
    #[cfg(test)]
    pub(crate) fn of(devices: Vec<Device>) -> Inventory {
        Inventory {
            devices,
            driver_error: None,
            _driver: None,
        }
    }

    /// Opens the driver and reads every device's properties.
    pub fn probe() -> Inventory {
        match Driver::open() {
            Err(why) => Inventory {
                devices: Vec::new(),
                driver_error: Some(why),
                _driver: None,
            },
            Ok(driver) => match driver.device_count() {
                Err(why) => Inventory {
                    devices: Vec::new(),
                    driver_error: Some(why),
                    _driver: Some(driver),
                },
                Ok(count) => Inventory {
                    devices: (0..count)
                        .map(|i| Device::read(i, |a| driver.attribute(i, a)))
                        .collect(),
                    driver_error: None,
                    _driver: Some(driver),
                },
            },
        }
    }

    /// The properties of device `index`. Without a driver every index gets
    /// the static defaults, so code can be generated for CUDA on a machine
    /// without a GPU; with a driver, an index it does not report is an error.
    pub fn properties(&self, index: u32) -> Result<DeviceProperties, String> {
        self.device(index).map(|d| d.properties)
    }

    /// Device `index`, as [`Inventory::properties`] answers for it.
    pub fn device(&self, index: u32) -> Result<Device, String> {
        if self.devices.is_empty() {
            return Ok(Device::h100_defaults(index));
        }
        usize::try_from(index)
            .ok()
            .and_then(|i| self.devices.get(i))
            .cloned()
            .ok_or_else(|| {
                format!(
                    "CUDA device {index} does not exist: the driver reports {} device(s)",
                    self.devices.len()
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_h100(attribute: Attribute) -> Result<i32, String> {
        Ok(match attribute {
            Attribute::MaxThreadsPerBlock => 1024,
            Attribute::MaxGridDimX => 2_147_483_647,
            Attribute::MaxGridDimY | Attribute::MaxGridDimZ => 65_535,
            Attribute::WarpSize => 32,
            Attribute::MultiprocessorCount => 132,
            Attribute::MaxThreadsPerMultiprocessor => 2048,
            Attribute::ComputeCapabilityMajor => 9,
            Attribute::ComputeCapabilityMinor => 0,
            Attribute::MaxRegistersPerMultiprocessor => 65_536,
            Attribute::MaxSharedMemoryPerBlockOptin => 232_448,
            Attribute::L2CacheSize => 52_428_800,
        })
    }

    #[test]
    fn shared_memory_is_read_from_the_driver_and_defaults_to_an_h100s() {
        let h100 = Device::read(0, fake_h100);
        assert_eq!(h100.properties.source, PropertiesSource::Queried);
        assert_eq!(
            h100.shared_memory_per_block,
            Device::h100_defaults(0).shared_memory_per_block
        );
        // An 8.6 part opts in to 99 KiB.
        let ga102 = Device::read(0, |a| match a {
            Attribute::MaxSharedMemoryPerBlockOptin => Ok(101_376),
            other => fake_h100(other),
        });
        assert_eq!(ga102.shared_memory_per_block, 101_376);
        assert_eq!(h100.l2_cache_bytes, Device::h100_defaults(0).l2_cache_bytes);
        // An 8.6 part's 6 MiB of L2.
        let l2 = Device::read(0, |a| match a {
            Attribute::L2CacheSize => Ok(6 << 20),
            other => fake_h100(other),
        });
        assert_eq!(l2.l2_cache_bytes, 6 << 20);
        // A driver that refuses the attribute, or answers nonsense: the defaults.
        for attribute in [
            Attribute::MaxSharedMemoryPerBlockOptin,
            Attribute::L2CacheSize,
        ] {
            for answer in [Err("CUresult 1".to_string()), Ok(0), Ok(-4)] {
                let device = Device::read(2, |a| {
                    if a == attribute {
                        answer.clone()
                    } else {
                        fake_h100(a)
                    }
                });
                assert_eq!(device, Device::h100_defaults(2));
            }
        }
    }

    #[test]
    fn queried_values_match_defaults_for_an_h100() {
        let queried = from_attributes(0, fake_h100).expect("fake driver answers");
        assert_eq!(queried.source, PropertiesSource::Queried);
        let defaults = h100_defaults(0);
        assert_eq!(
            DeviceProperties {
                source: PropertiesSource::StaticDefaults,
                ..queried
            },
            defaults
        );
        assert_eq!(defaults.cc, 90);
    }

    #[test]
    fn cc_is_major_times_ten_plus_minor() {
        let props = from_attributes(1, |a| match a {
            Attribute::ComputeCapabilityMajor => Ok(8),
            Attribute::ComputeCapabilityMinor => Ok(6),
            other => fake_h100(other),
        })
        .expect("fake driver answers");
        assert_eq!(
            (props.cc, props.major, props.index),
            (86, ROption::RSome(8), 1)
        );
    }

    #[test]
    fn nonsense_and_failures_are_errors() {
        let failing = from_attributes(0, |a| match a {
            Attribute::WarpSize => Err("CUresult 101".to_string()),
            other => fake_h100(other),
        });
        assert!(failing.is_err());
        let negative = from_attributes(0, |a| match a {
            Attribute::MultiprocessorCount => Ok(-1),
            other => fake_h100(other),
        });
        assert!(negative.unwrap_err().contains("MultiprocessorCount"));
        let odd_warp = from_attributes(0, |a| match a {
            Attribute::WarpSize => Ok(48),
            other => fake_h100(other),
        });
        assert!(odd_warp.is_err());
    }

    #[test]
    fn without_devices_every_index_gets_defaults() {
        let empty = Inventory {
            devices: Vec::new(),
            driver_error: Some("no driver".into()),
            _driver: None,
        };
        assert_eq!(empty.properties(3), Ok(h100_defaults(3)));
        let one = Inventory {
            devices: vec![Device::h100_defaults(0)],
            driver_error: None,
            _driver: None,
        };
        assert!(one.properties(0).is_ok());
        assert!(one.properties(1).unwrap_err().contains("1 device(s)"));
    }
}
