//! Kiln's `cuda` device plugin: NVIDIA GPUs through Triton.
//!
//! - **Overrides**: the strings of PyTorch 2.11's `CUDADeviceOpOverrides`
//!   ([`overrides`]); all seventeen are provided.
//! - **Device module**: `libcuda.so.1` is opened at run time (never linked)
//!   on the first question about devices; `is_available`, `device_count` and
//!   `device_properties` come from `cuDeviceGetCount` and
//!   `cuDeviceGetAttribute`. Without a driver the plugin still loads: no
//!   devices, and `device_properties` answers the documented defaults of an
//!   H100 SXM marked as static ([`properties`]). `shared_memory_per_block` is
//!   the driver's opt-in maximum (227 KiB on an H100, the static default), and
//!   `l2_cache_bytes` (API 1.8) its L2 size (50 MiB on an H100).
//! - **Triton target**: device 0's compute capability; float32 `tl.dot` may
//!   use TF32 (`tf32_dot`) from compute capability 8.0.
//! - **Matrix products**: 16-bit products' K and N are padded to
//!   [`MATMUL_ALIGNMENT`] bytes (`matmul_alignment`, API 1.6), where cuBLAS
//!   runs its fast kernels.
//! - **Convolutions**: float16 and bfloat16 2-D convolutions run channels-last
//!   ([`CONV_CHANNELS_LAST`], `conv_channels_last`, API 1.7), as cuDNN's fast
//!   16-bit kernels want them.
//! - **Backend**: Triton kernels, Python and C++ wrappers, the features
//!   Inductor's `TritonScheduling` reports for CUDA.
//! - **Heuristics**: Inductor's pointwise and reduction rules, fed with the
//!   properties of device 0 (see `kiln_plugin_kit::triton_heuristics`). Rows of up to
//!   [`PERSISTENT_ROW_LIMIT`] elements get a persistent reduction first; longer
//!   rows loop, with a persistent candidate for the autotuner up to
//!   [`PERSISTENT_FALLBACK_ROW_LIMIT`].

use std::sync::OnceLock;

use kiln_plugin_api::{
    BackendFeatures, BackendSpec, DevicePlugin, DeviceProperties, FixedOverrides, Grid,
    LaunchConfig, LoadContext, Manifest, PointwiseQuery, ReductionHint, ReductionQuery,
    SchedulingKind, ScratchWorkspace, TritonTarget, Wrappers,
};

pub mod driver;
pub mod overrides;
pub mod properties;
pub mod toolkit;
use kiln_plugin_kit::{triton_heuristics, TRITON_SCHEDULING_FEATURES};

use properties::Inventory;
use triton_heuristics::TritonLimits;

/// Rows up to this length are reduced in one pass, the whole row held in
/// registers. 8192 float32 elements are 32 KiB: 32 per thread of an 8-warp
/// program, well inside the 255 registers a Hopper thread may use. A fused
/// softmax or layer norm then reads its input once instead of once per
/// reduction; Inductor's 8192-wide softmax reaching copy bandwidth shows the
/// same choice.
pub const PERSISTENT_ROW_LIMIT: u64 = 8192;
/// Up to this length a persistent candidate is still offered (after the
/// looped ones) for the autotuner, as Inductor's `multi_kernel` does.
pub const PERSISTENT_FALLBACK_ROW_LIMIT: u64 = 2 * PERSISTENT_ROW_LIMIT;

/// The byte multiple each dimension of a 16-bit matrix product should be for
/// cuBLAS to run its fast tensor-core kernels: 16 bytes, 8 bfloat16 or float16
/// elements. Off it, cuBLAS falls back to kernels of 1-element alignment
/// (`..._align1`): on an H100, bfloat16 [4096, 768] x [768, 50257] takes
/// 3.35 ms, and 0.50 ms with N padded to 50264. float32 products are not
/// affected.
pub const MATMUL_ALIGNMENT: u32 = 16;

/// The dtypes whose 2-D convolutions cuDNN runs fastest on channels-last
/// (`NHWC`) tensors: its 16-bit kernels are `NHWC` ones, and convert a
/// contiguous `NCHW` operand and result around every call (ResNet-50 in
/// bfloat16 on an H100 spent 1.32 ms of 4.83 ms of GPU time in `nchwToNhwc`
/// and `nhwcToNchw`). float32 is left out: with TF32 off, Kiln's `NCHW`
/// ResNet-50 ran at 0.81 of Inductor's channels-last time.
pub const CONV_CHANNELS_LAST: [&str; 2] = ["float16", "bfloat16"];

/// The compute capability (major × 10 + minor) from which Kiln's runtime
/// launches kernels as programmatic dependents of the kernel before them
/// (Triton's `launch_pdl`, `griddepcontrol` in PTX): sm_90, Hopper.
pub const DEPENDENT_LAUNCH_CC: u32 = 90;

/// The `cuda` plugin.
#[derive(Debug, Default)]
pub struct Cuda {
    inventory: OnceLock<Inventory>,
    overrides: OnceLock<FixedOverrides>,
}

impl Cuda {
    /// The driver's answer, probed on first use.
    fn inventory(&self) -> &Inventory {
        self.inventory.get_or_init(Inventory::probe)
    }

    /// The properties heuristics are computed for: device 0, or the defaults.
    fn primary(&self) -> DeviceProperties {
        self.inventory()
            .devices
            .first()
            .map(|d| d.properties.clone())
            .unwrap_or_else(|| properties::h100_defaults(0))
    }

    fn warp_size(&self) -> u32 {
        self.primary()
            .warp_size
            .into_option()
            .unwrap_or(properties::H100_WARP_SIZE)
    }

    fn limits(&self) -> TritonLimits {
        let props = self.primary();
        let max_threads_per_block = props
            .max_threads_per_block
            .into_option()
            .unwrap_or(properties::H100_THREADS_PER_BLOCK);
        TritonLimits {
            warp_size: props
                .warp_size
                .into_option()
                .unwrap_or(properties::H100_WARP_SIZE),
            max_threads_per_block,
            // Only the block limit bounds the warps of a CUDA program.
            max_num_warps: max_threads_per_block,
            multi_processor_count: props.multi_processor_count,
            persistent_row_limit: PERSISTENT_ROW_LIMIT,
            persistent_fallback_row_limit: PERSISTENT_FALLBACK_ROW_LIMIT,
        }
    }
}

impl DevicePlugin for Cuda {
    fn manifest() -> Manifest {
        Manifest::new(
            "cuda",
            env!("CARGO_PKG_VERSION"),
            "The Kiln project",
            "NVIDIA GPUs: Triton kernels launched through the CUDA driver API",
        )
    }

    fn load(_ctx: &LoadContext) -> Result<Self, String> {
        // Nothing to read at load: the driver is probed lazily so that plugin
        // discovery never waits for `cuInit`.
        Ok(Cuda::default())
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
        // The kernel driver names the warp size, known once the driver answered.
        self.overrides
            .get_or_init(|| overrides::fixed(self.warp_size()))
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
        !self.inventory().devices.is_empty()
    }
    fn device_count(&self) -> u32 {
        u32::try_from(self.inventory().devices.len()).unwrap_or(u32::MAX)
    }
    fn device_properties(&self, index: u32) -> Result<DeviceProperties, String> {
        self.inventory().properties(index)
    }
    fn shared_memory_per_block(&self, index: u32) -> Option<u64> {
        // An index the driver does not report has no answer here either;
        // `device_properties` names the error.
        self.inventory()
            .device(index)
            .ok()
            .map(|d| d.shared_memory_per_block)
    }

    fn l2_cache_bytes(&self, index: u32) -> Option<u64> {
        self.inventory()
            .device(index)
            .ok()
            .map(|d| d.l2_cache_bytes)
    }

    fn backend_spec(&self) -> BackendSpec {
        BackendSpec {
            scheduling: SchedulingKind::Triton,
            wrappers: Wrappers::PYTHON | Wrappers::CPP,
            // `TritonScheduling.backend_features`, plus REDUCE_TO_SINGLE_ELEMENT,
            // which Inductor adds when cooperative reductions are enabled:
            // CUDA supports the grid-wide sync they need.
            features: TRITON_SCHEDULING_FEATURES | BackendFeatures::REDUCE_TO_SINGLE_ELEMENT,
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
        // sm_90 and later launch kernels as programmatic dependents (Kiln's
        // runtime, with Triton's `launch_pdl`).
        let configs = if self.primary().cc >= DEPENDENT_LAUNCH_CC {
            triton_heuristics::dependent_reduction_pass_configs
        } else {
            triton_heuristics::reduction_pass_configs
        };
        Some(configs(&self.limits(), query, hint, passes))
    }

    fn adjust_grid(&self, grid: Grid) -> Grid {
        Grid::from_array(triton_heuristics::cap_grid(
            grid.to_array(),
            self.primary().max_grid,
        ))
    }

    fn cpp_build_flags(&self) -> Option<Vec<String>> {
        Some(toolkit::build_flags(toolkit::home().as_deref()))
    }

    fn tf32_dot(&self) -> Option<bool> {
        // Tensor cores multiply TF32 from Ampere (8.0) on; the kernels compile
        // for device 0's compute capability (`triton_target`).
        Some(self.primary().cc >= properties::TF32_MIN_CC)
    }

    fn matmul_alignment(&self) -> Option<u32> {
        Some(MATMUL_ALIGNMENT)
    }

    fn conv_channels_last(&self) -> Option<Vec<String>> {
        Some(CONV_CHANNELS_LAST.iter().map(|d| d.to_string()).collect())
    }

    fn triton_target(&self) -> Option<TritonTarget> {
        // Triton's CUDA target is the compute capability of device 0 (90
        // for sm_90), as Inductor builds it from `DeviceProperties.cc`.
        let props = self.primary();
        Some(TritonTarget::new(
            "cuda",
            &props.cc.to_string(),
            self.warp_size(),
        ))
    }
}

kiln_plugin_api::export_plugin!(Cuda);

#[cfg(test)]
mod tests;
