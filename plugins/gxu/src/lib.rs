//! Kiln's `gxu` device plugin: the GXU, an example vendor accelerator that
//! PyTorch knows as a PrivateUse1 device, programmed through Triton GXU and
//! the `gxu*` driver API, as its reference TorchInductor integration
//! (`GXUDeviceOpOverrides`, `GXUTritonScheduling`) describes it.
//!
//! - **Overrides**: the reference integration's `GXUDeviceOpOverrides`, all
//!   seventeen ([`overrides`]; `tma_descriptor_helpers` is `None`: it has none).
//! - **Device module**: the GXU runtime (`libgxu_runtime.so`) is not
//!   something Kiln can query, so `is_available` is false, `device_count` is
//!   0, and `device_properties` answers static defaults (see
//!   [`Gxu::properties`]).
//! - **Heuristics**: every config has `num_warps = 1`;
//!   `adjust_grid` keeps a dimension of at most `grid_multiple` (48) programs
//!   or a multiple of it, and rounds any other up to the next multiple
//!   (50 → 96, 1000 → 1008), capped at the grid limit.
//!
//! # `gxu.toml`
//! A vendor tunes the plugin without rebuilding it by putting a `gxu.toml`
//! in the folder of the plugin's shared library (`libkiln_gxu.so`). The file is
//! optional and so is every key:
//!
//! ```toml
//! # Threads per warp: a power of two. Written into `kernel_driver` as
//! # GXU_WARP_SIZE, and used by the heuristics. Default 32.
//! warp_size = 32
//! # Grids of more programs than this are rounded up to a multiple of it;
//! # also reported as multi_processor_count. Above 0. Default 48.
//! grid_multiple = 48
//! # Threads in one program: a positive multiple of warp_size. Default 1024.
//! max_threads_per_block = 1024
//! # Bytes of shared memory one program may use (plugin API 1.5); the host
//! # fits its flash-attention tiles in it. At least 4096. Default 98304.
//! shared_memory_per_block = 98304
//! # The byte multiple 16-bit matrix products' K and N are padded to (plugin
//! # API 1.6), where the device's matrix-product library runs its fast
//! # kernels: 0 (no padding) or a power of two from 2 to 256. Default 16
//! # (8 bfloat16 elements: the bundled plugin stands in on an NVIDIA GPU).
//! matmul_alignment = 16
//! # The dtypes whose 2-D convolutions run channels-last (plugin API 1.7),
//! # where the device's convolution library has fast NHWC kernels: any of
//! # "float16", "bfloat16", "float32", "float64". Default float16 and
//! # bfloat16 (the bundled plugin stands in on an NVIDIA GPU with cuDNN).
//! conv_channels_last = ["float16", "bfloat16"]
//! # The Triton target the kernels compile for: Triton's GPUTarget(backend,
//! # arch, warp_size). Defaults "cuda" and "90": the bundled plugin stands in
//! # for GXU hardware and is checked with upstream Triton's CUDA backend; set
//! # "gxu" and your architecture when Triton GXU is installed.
//! triton_backend = "cuda"
//! triton_arch = "90"
//! ```
//!
//! Any other key, a value of the wrong type or range, or malformed TOML makes
//! loading fail with `PATH: line L, column C: what is wrong`.

use abi_stable::std_types::ROption;
use kiln_plugin_api::{
    BackendSpec, DevicePlugin, DeviceProperties, FixedOverrides, Grid, LaunchConfig, LoadContext,
    Manifest, PointwiseQuery, PropertiesSource, ReductionHint, ReductionQuery, SchedulingKind,
    ScratchWorkspace, TritonTarget, Wrappers,
};

pub mod config;
pub mod overrides;
use kiln_plugin_kit::{triton_heuristics, TRITON_SCHEDULING_FEATURES};

pub use config::GxuConfig;
use triton_heuristics::TritonLimits;

/// Inductor's `triton_config` grid limit (`maxGridSize`), which the reference
/// integration quotes; the real limit is then the largest multiple of
/// `grid_multiple` at or below it, so that capping keeps the GXU's grid
/// granularity.
pub const TRITON_MAX_GRID: [u64; 3] = [2_147_483_647, 65_535, 65_535];

/// With one warp per program, a persistent row of 1024 elements already
/// means 32 elements per thread; longer rows loop.
pub const PERSISTENT_ROW_LIMIT: u64 = 1024;
/// The longest row still offered as a persistent candidate (128 elements per
/// thread at a warp of 32).
pub const PERSISTENT_FALLBACK_ROW_LIMIT: u64 = 4 * PERSISTENT_ROW_LIMIT;

/// The `gxu` plugin.
#[derive(Debug)]
pub struct Gxu {
    config: GxuConfig,
    max_grid: [u64; 3],
    overrides: FixedOverrides,
}

impl Gxu {
    /// A plugin running with `config`.
    pub fn with_config(config: GxuConfig) -> Gxu {
        // The largest multiple of the granularity within Triton's limit; a
        // granularity above the limit leaves the limit itself.
        let max_grid = triton_heuristics::max_grid_in_multiples(
            TRITON_MAX_GRID,
            u64::from(config.grid_multiple),
        );
        let overrides = overrides::fixed(config.warp_size);
        Gxu {
            config,
            max_grid,
            overrides,
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &GxuConfig {
        &self.config
    }

    /// The static properties of GXU device `index`. The seed gives no
    /// numbers, so these follow from its heuristics: `grid_multiple` (48)
    /// cores, one program per core per wave, which is why grids are sized in
    /// multiples of 48; `warp_size` and `max_threads_per_block` as configured;
    /// one resident block per core; no compute capability (`cc` 0, `major`
    /// and `regs_per_multiprocessor` unknown).
    pub fn properties(&self, index: u32) -> DeviceProperties {
        DeviceProperties {
            device_type: "gxu".into(),
            index,
            multi_processor_count: self.config.grid_multiple,
            cc: 0,
            major: ROption::RNone,
            regs_per_multiprocessor: ROption::RNone,
            max_threads_per_multi_processor: ROption::RSome(self.config.max_threads_per_block),
            max_threads_per_block: ROption::RSome(self.config.max_threads_per_block),
            warp_size: ROption::RSome(self.config.warp_size),
            max_grid: self.max_grid,
            source: PropertiesSource::StaticDefaults,
        }
    }

    fn limits(&self) -> TritonLimits {
        TritonLimits {
            warp_size: self.config.warp_size,
            max_threads_per_block: self.config.max_threads_per_block,
            // The reference integration's `OPTIMAL_NUM_WARPS`: the GXU runs one warp per program.
            max_num_warps: 1,
            multi_processor_count: self.config.grid_multiple,
            persistent_row_limit: PERSISTENT_ROW_LIMIT,
            persistent_fallback_row_limit: PERSISTENT_FALLBACK_ROW_LIMIT,
        }
    }
}

impl DevicePlugin for Gxu {
    fn manifest() -> Manifest {
        Manifest::new(
            "gxu",
            env!("CARGO_PKG_VERSION"),
            "The Kiln project",
            "GXU accelerators: Triton GXU kernels launched through the gxu driver API",
        )
    }

    fn load(ctx: &LoadContext) -> Result<Self, String> {
        GxuConfig::load_beside(ctx.library_path.as_str()).map(Gxu::with_config)
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
    fn cpp_scratch(
        &self,
        idx: u32,
        workspace: &ScratchWorkspace,
        prefix: Option<&str>,
    ) -> Option<(Vec<String>, String)> {
        Some(overrides::cpp_scratch(idx, workspace, prefix))
    }

    fn is_available(&self) -> bool {
        false
    }
    fn device_count(&self) -> u32 {
        0
    }
    fn device_properties(&self, index: u32) -> Result<DeviceProperties, String> {
        Ok(self.properties(index))
    }
    fn shared_memory_per_block(&self, _index: u32) -> Option<u64> {
        Some(self.config.shared_memory_per_block)
    }

    fn backend_spec(&self) -> BackendSpec {
        BackendSpec {
            scheduling: SchedulingKind::Triton,
            wrappers: Wrappers::PYTHON | Wrappers::CPP,
            // The reference integration's `GXUTritonScheduling.backend_features`:
            // Inductor's Triton set.
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
        // The GXU's rule: at most `grid_multiple` programs, or a multiple of
        // it; `max_grid` is itself a multiple, so capping keeps the granularity.
        Grid::from_array(triton_heuristics::round_grid_to_multiple(
            grid.to_array(),
            u64::from(self.config.grid_multiple),
            self.max_grid,
        ))
    }

    fn cpp_build_flags(&self) -> Option<Vec<String>> {
        // The GXU runtime, under $GXU_HOME when set (include/gxu.h, lib/libgxu.so).
        let home = std::env::var_os("GXU_HOME")
            .filter(|h| !h.is_empty())
            .map(std::path::PathBuf::from);
        Some(kiln_plugin_kit::driver::toolkit_flags(
            home.as_deref(),
            &["gxu"],
        ))
    }

    fn tf32_dot(&self) -> Option<bool> {
        // The seed's GXU has no TF32 units: float32 products are exact.
        Some(false)
    }

    fn matmul_alignment(&self) -> Option<u32> {
        Some(self.config.matmul_alignment)
    }

    fn conv_channels_last(&self) -> Option<Vec<String>> {
        Some(self.config.conv_channels_last.clone())
    }

    fn triton_target(&self) -> Option<TritonTarget> {
        Some(TritonTarget::new(
            &self.config.triton_backend,
            &self.config.triton_arch,
            self.config.warp_size,
        ))
    }
}

kiln_plugin_api::export_plugin!(Gxu);

#[cfg(test)]
mod tests;
