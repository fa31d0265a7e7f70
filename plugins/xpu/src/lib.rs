//! Kiln's `xpu` device plugin: Intel GPUs (Data Center GPU Max) through
//! Triton's Intel backend, SYCL and Level Zero.
//!
//! - **Overrides**: the strings of PyTorch 2.11's `XPUDeviceOpOverrides`
//!   ([`overrides`]). `cpp_scratch` and `tma_descriptor_helpers` are `None`:
//!   PyTorch's XPU overrides have neither.
//! - **Device module**: there is no portable way to ask Level Zero about
//!   devices from here without linking `libze_loader` and a SYCL runtime, so
//!   the plugin reports no devices (`is_available` false, `device_count` 0)
//!   and static properties of a Max 1550 stack ([`properties`]).
//! - **Heuristics**: Inductor's rules (see `kiln_plugin_kit::triton_heuristics`) for
//!   a sub-group of 32 work-items and work-groups of up to 1024, so at most
//!   32 sub-groups (`num_warps`) per program.

use abi_stable::std_types::ROption;
use kiln_plugin_api::{
    BackendSpec, DevicePlugin, DeviceProperties, FixedOverrides, Grid, LaunchConfig, LoadContext,
    Manifest, PointwiseQuery, PropertiesSource, ReductionHint, ReductionQuery, SchedulingKind,
    TritonTarget, Wrappers,
};

pub mod overrides;
use kiln_plugin_kit::{triton_heuristics, TRITON_SCHEDULING_FEATURES};

use triton_heuristics::TritonLimits;

/// Xe-cores of one Max 1550 stack. PyTorch reports `gpu_subslice_count` (an
/// Xe-core is a subslice) as `multi_processor_count` for XPU. The card has
/// two stacks of 64; Level Zero's default `ZE_FLAT_DEVICE_HIERARCHY=FLAT`
/// exposes each stack as its own device, so one device has 64.
pub const MAX_1550_XE_CORES: u32 = 64;
/// Work-items resident on one Xe-core: 8 vector engines × 8 hardware threads
/// × SIMD32.
pub const MAX_1550_THREADS_PER_XE_CORE: u32 = 2048;
/// 32-bit registers of one Xe-core: 64 hardware threads × 128 GRFs × 64 bytes.
pub const MAX_1550_REGS_PER_XE_CORE: u32 = 131_072;
/// `sycl::info::device::max_work_group_size`.
pub const MAX_1550_WORK_GROUP_SIZE: u32 = 1024;
/// The sub-group size Triton's Intel backend compiles for by default (the
/// device also supports 16); PyTorch reports the largest as `warp_size`.
pub const MAX_1550_SUB_GROUP_SIZE: u32 = 32;
/// Level Zero reports up to 2^32 - 1 work-groups per dimension, but Triton
/// computes program ids in 32-bit signed arithmetic and Inductor's
/// `triton_config` limits y and z to 65535 on every GPU; the plugin keeps to
/// the same bounds.
pub const MAX_1550_MAX_GRID: [u64; 3] = [2_147_483_647, 65_535, 65_535];

/// Shared local memory one work-group may use
/// (`sycl::info::device::local_mem_size`): 128 KiB per Xe-core.
pub const MAX_1550_SHARED_LOCAL_MEMORY: u64 = 128 * 1024;

/// Persistent reductions for rows of up to 1024 elements, as Inductor's
/// `ReductionHint.INNER` threshold.
pub const PERSISTENT_ROW_LIMIT: u64 = 1024;
/// A persistent candidate is still offered up to sixteen times that (what
/// Inductor's `multi_kernel` allows).
pub const PERSISTENT_FALLBACK_ROW_LIMIT: u64 = 16 * PERSISTENT_ROW_LIMIT;

/// The static properties of XPU device `index`: one stack of an Intel Data
/// Center GPU Max 1550, as PyTorch's `DeviceProperties.create` would report
/// it. `cc` is 0 (Intel GPUs have no compute capability; PyTorch passes an
/// architecture id there that Kiln has no use for).
pub fn properties(index: u32) -> DeviceProperties {
    DeviceProperties {
        device_type: "xpu".into(),
        index,
        multi_processor_count: MAX_1550_XE_CORES,
        cc: 0,
        major: ROption::RNone,
        regs_per_multiprocessor: ROption::RSome(MAX_1550_REGS_PER_XE_CORE),
        max_threads_per_multi_processor: ROption::RSome(MAX_1550_THREADS_PER_XE_CORE),
        max_threads_per_block: ROption::RSome(MAX_1550_WORK_GROUP_SIZE),
        warp_size: ROption::RSome(MAX_1550_SUB_GROUP_SIZE),
        max_grid: MAX_1550_MAX_GRID,
        source: PropertiesSource::StaticDefaults,
    }
}

/// The `xpu` plugin.
#[derive(Debug)]
pub struct Xpu {
    overrides: FixedOverrides,
}

impl Xpu {
    fn limits(&self) -> TritonLimits {
        TritonLimits {
            warp_size: MAX_1550_SUB_GROUP_SIZE,
            max_threads_per_block: MAX_1550_WORK_GROUP_SIZE,
            // Only the work-group size bounds the sub-groups of a program.
            max_num_warps: MAX_1550_WORK_GROUP_SIZE,
            multi_processor_count: MAX_1550_XE_CORES,
            persistent_row_limit: PERSISTENT_ROW_LIMIT,
            persistent_fallback_row_limit: PERSISTENT_FALLBACK_ROW_LIMIT,
        }
    }
}

impl DevicePlugin for Xpu {
    fn manifest() -> Manifest {
        Manifest::new(
            "xpu",
            env!("CARGO_PKG_VERSION"),
            "The Kiln project",
            "Intel GPUs: Triton kernels as SPIR-V, launched through SYCL and Level Zero",
        )
    }

    fn load(_ctx: &LoadContext) -> Result<Self, String> {
        Ok(Xpu {
            overrides: overrides::fixed(MAX_1550_SUB_GROUP_SIZE),
        })
    }

    fn import_get_raw_stream_as(&self, name: &str) -> Option<String> {
        Some(overrides::import_get_raw_stream_as(name))
    }
    fn set_device(&self, idx: u32) -> Option<String> {
        Some(overrides::set_device(idx))
    }
    fn device_guard(&self, idx: u32) -> Option<String> {
        Some(overrides::device_guard(idx))
    }
    fn overrides(&self) -> &FixedOverrides {
        &self.overrides
    }

    fn is_available(&self) -> bool {
        false
    }
    fn device_count(&self) -> u32 {
        0
    }
    fn device_properties(&self, index: u32) -> Result<DeviceProperties, String> {
        Ok(properties(index))
    }
    fn shared_memory_per_block(&self, _index: u32) -> Option<u64> {
        Some(MAX_1550_SHARED_LOCAL_MEMORY)
    }

    fn backend_spec(&self) -> BackendSpec {
        BackendSpec {
            scheduling: SchedulingKind::Triton,
            wrappers: Wrappers::PYTHON | Wrappers::CPP,
            // `TritonScheduling.backend_features`. REDUCE_TO_SINGLE_ELEMENT is
            // left out: Inductor adds it only for cooperative reductions,
            // whose grid-wide barrier it exercises on CUDA only.
            features: TRITON_SCHEDULING_FEATURES,
        }
    }

    fn pointwise_configs(&self, query: &PointwiseQuery) -> Vec<LaunchConfig> {
        triton_heuristics::pointwise_configs(&self.limits(), query)
    }

    fn reduction_configs(&self, query: &ReductionQuery) -> Vec<LaunchConfig> {
        triton_heuristics::reduction_configs(&self.limits(), query)
    }

    fn hinted_reduction_configs(
        &self,
        query: &ReductionQuery,
        hint: ReductionHint,
    ) -> Option<Vec<LaunchConfig>> {
        Some(triton_heuristics::hinted_reduction_configs(
            &self.limits(),
            query,
            hint,
        ))
    }

    fn reduction_pass_configs(
        &self,
        query: &ReductionQuery,
        hint: ReductionHint,
        passes: u32,
    ) -> Option<Vec<LaunchConfig>> {
        Some(triton_heuristics::reduction_pass_configs(
            &self.limits(),
            query,
            hint,
            passes,
        ))
    }

    fn adjust_grid(&self, grid: Grid) -> Grid {
        Grid::from_array(triton_heuristics::cap_grid(
            grid.to_array(),
            MAX_1550_MAX_GRID,
        ))
    }

    fn cpp_build_flags(&self) -> Option<Vec<String>> {
        // SYCL needs a SYCL compiler (CXX=icpx); Level Zero is its own library.
        Some(vec!["-fsycl".to_string(), "-lze_loader".to_string()])
    }

    fn tf32_dot(&self) -> Option<bool> {
        // The Max 1550's matrix engines multiply TF32, but Kiln has not checked
        // three-TF32 products (`tf32x3`) on Triton's Intel backend: float32
        // products stay exact, as before the question was asked.
        Some(false)
    }

    fn matmul_alignment(&self) -> Option<u32> {
        // No padding: Kiln has not measured how oneDNN's (or Triton's Intel
        // backend's) 16-bit products on a Max 1550 depend on a dimension's
        // multiple, and padding costs a copy of each activation operand.
        None
    }

    fn conv_channels_last(&self) -> Option<Vec<String>> {
        // None: Kiln has not measured oneDNN's convolutions on a Max 1550 in
        // either layout, and the pass moves every activation between them.
        None
    }

    fn triton_target(&self) -> Option<TritonTarget> {
        Some(TritonTarget::new(
            "xpu",
            &triton_arch(),
            MAX_1550_SUB_GROUP_SIZE,
        ))
    }
}

/// Triton's Intel backend takes `GPUTarget.arch` as a dict of device
/// properties (its `parse_target` reads these keys); these are one Max 1550
/// stack's, as [`properties`] reports them.
pub fn triton_arch() -> String {
    format!(
        "{{\"name\": \"Intel(R) Data Center GPU Max 1550\", \"gpu_subslice_count\": {MAX_1550_XE_CORES}, \
         \"max_work_group_size\": {MAX_1550_WORK_GROUP_SIZE}, \"max_num_sub_groups\": {}, \
         \"sub_group_sizes\": [16, {MAX_1550_SUB_GROUP_SIZE}], \"has_fp64\": true}}",
        MAX_1550_WORK_GROUP_SIZE / 16
    )
}

kiln_plugin_api::export_plugin!(Xpu);

#[cfg(test)]
mod tests;
