//! Kiln device plugin for the NPU: a Triton device whose kernels are launched
//! through a CUDA-like driver API (`npuModuleLoad`, `npuLaunchKernel`, ...).
//!
//! The plugin tells the Kiln host how the device is driven; the host does
//! all the compiling. Replace each `npu` name with your runtime's, the
//! numbers in `NpuLimits` with your chip's (or query them from your runtime in
//! `device_properties`), and `cargo test` checks the result against every
//! guarantee the host relies on.

use kiln_plugin_api::{
    export_plugin, BackendSpec, DevicePlugin, DeviceProperties, FixedOverrides, Grid, LaunchConfig,
    LoadContext, Manifest, PointwiseQuery, PropertiesSource, ReductionQuery, SchedulingKind,
    ScratchWorkspace, TritonTarget, Wrappers,
};
use kiln_plugin_kit::driver::{self, DriverApi, ScratchScope};
use kiln_plugin_kit::triton_heuristics::{self, TritonLimits};
use kiln_plugin_kit::TRITON_SCHEDULING_FEATURES;

/// The device's numbers. A plugin for real silicon reads them from its
/// runtime when one is present and falls back to these.
#[derive(Clone, Copy, Debug)]
pub struct NpuLimits {
    /// Compute units that run programs in parallel.
    pub compute_units: u32,
    /// Threads per warp.
    pub warp_size: u32,
    /// Threads in one program: a whole number of warps.
    pub max_threads_per_block: u32,
    /// The most programs along each grid axis.
    pub max_grid: [u64; 3],
    /// Bytes of shared memory one program may use (counting what a kernel
    /// must opt in to): the host fits its flash-attention tiles in it.
    pub shared_memory_per_block: u64,
    /// Whether the matrix units multiply TF32, so that float32 `tl.dot` may
    /// be computed as three TF32 products.
    pub tf32_dot: bool,
    /// The byte multiple each dimension of a 16-bit matrix product should be
    /// for the device's matrix-product library to run its fast kernels: the
    /// host pads products' K and N to it (0: no padding).
    pub matmul_alignment: u32,
    /// The dtypes whose 2-D convolutions the device's convolution library
    /// runs fastest channels-last (NHWC): the host keeps their activations
    /// channels-last.
    pub conv_channels_last: &'static [&'static str],
}

/// The numbers of the NPU this template describes.
pub const NPU: NpuLimits = NpuLimits {
    compute_units: 64,
    warp_size: 32,
    max_threads_per_block: 1024,
    max_grid: [2_147_483_647, 65_535, 65_535],
    shared_memory_per_block: 48 * 1024,
    tf32_dot: false,
    matmul_alignment: 32,
    conv_channels_last: &["float16", "bfloat16"],
};

/// The plugin: built once when the host loads the library.
pub struct Npu {
    limits: NpuLimits,
    overrides: FixedOverrides,
}

impl Npu {
    /// The driver API's names: `npuModuleLoad`, `npuError_t`, `NPU_SUCCESS`, ...
    fn driver_api(&self) -> DriverApi {
        DriverApi::named("npu", self.limits.warp_size)
    }

    /// What the launch heuristics need to know about the device.
    fn triton_limits(&self) -> TritonLimits {
        TritonLimits {
            warp_size: self.limits.warp_size,
            max_threads_per_block: self.limits.max_threads_per_block,
            max_num_warps: self.limits.max_threads_per_block / self.limits.warp_size,
            multi_processor_count: self.limits.compute_units,
            // Rows up to 1024 elements reduce in one pass; up to 4096 the
            // one-pass config is still offered, after the looped ones.
            persistent_row_limit: 1024,
            persistent_fallback_row_limit: 4096,
        }
    }
}

impl DevicePlugin for Npu {
    fn manifest() -> Manifest {
        // The device name follows PyTorch's PrivateUse1 rule: ^[a-z][a-z0-9_]{0,31}$.
        Manifest::new(
            "npu",
            env!("CARGO_PKG_VERSION"),
            "NPU Inc.",
            "NPU accelerators: Triton kernels launched through the npu driver API",
        )
    }

    fn load(_ctx: &LoadContext) -> Result<Self, String> {
        // `_ctx.library_path` is where this library was loaded from: a plugin
        // may read its configuration from a file beside it, and report a
        // broken one here as an error naming the file and line.
        let limits = NPU;
        let api = DriverApi::named("npu", limits.warp_size);
        // The DeviceOpOverrides strings that take no arguments, built once.
        // Each is pasted into generated code, so keep the one-line ones on one line.
        let overrides = FixedOverrides {
            synchronize: Some("torch.npu.synchronize()".into()),
            cpp_device_guard: Some("at::npu::NPUGuard".into()),
            cpp_aoti_device_guard: Some("AOTINpuGuard".into()),
            cpp_stream_guard: Some("at::npu::NPUStreamGuard".into()),
            cpp_aoti_stream_guard: Some("AOTINpuStreamGuard".into()),
            cpp_get_stream_from_external: Some("at::npu::getStreamFromExternal".into()),
            // The driver API's header; include/npu.h is a stub of it for conformance.
            kernel_header: Some("#include <npu.h>\n".into()),
            kernel_driver: Some(driver::kernel_driver(&api)),
            cpp_stream_type: Some(api.stream_type.clone()),
            aoti_get_stream: Some("aoti_torch_get_current_npu_stream".into()),
            cpp_kernel_type: Some(api.function_type.clone()),
            cpp_device_ptr: Some(api.device_ptr_type.clone()),
            ..FixedOverrides::NONE
        };
        Ok(Npu { limits, overrides })
    }

    // The DeviceOpOverrides that take arguments.
    fn import_get_raw_stream_as(&self, name: &str) -> Option<String> {
        Some(format!(
            "from torch._C import _npu_getCurrentRawStream as {name}"
        ))
    }
    fn set_device(&self, idx: u32) -> Option<String> {
        Some(format!("torch.npu.set_device({idx})"))
    }
    fn device_guard(&self, idx: u32) -> Option<String> {
        Some(format!("torch.npu._DeviceGuard({idx})"))
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
        let api = self.driver_api();
        Some(driver::cpp_scratch(
            &api,
            ScratchScope::PerProgram,
            idx,
            workspace,
            prefix,
        ))
    }

    // The device module (`torch.npu`). Ask your runtime here; this template
    // has none, so it reports no device and static properties.
    fn is_available(&self) -> bool {
        false
    }
    fn device_count(&self) -> u32 {
        0
    }
    fn device_properties(&self, index: u32) -> Result<DeviceProperties, String> {
        let l = self.limits;
        Ok(DeviceProperties {
            device_type: "npu".into(),
            index,
            multi_processor_count: l.compute_units,
            cc: 0,
            major: None.into(),
            regs_per_multiprocessor: None.into(),
            max_threads_per_multi_processor: Some(l.max_threads_per_block).into(),
            max_threads_per_block: Some(l.max_threads_per_block).into(),
            warp_size: Some(l.warp_size).into(),
            max_grid: l.max_grid,
            source: PropertiesSource::StaticDefaults,
        })
    }
    fn shared_memory_per_block(&self, _index: u32) -> Option<u64> {
        Some(self.limits.shared_memory_per_block)
    }

    // How the host generates code for the device: Triton kernels, with the
    // Python wrapper (output_code.py) or the C++ one.
    fn backend_spec(&self) -> BackendSpec {
        BackendSpec {
            scheduling: SchedulingKind::Triton,
            wrappers: Wrappers::PYTHON | Wrappers::CPP,
            features: TRITON_SCHEDULING_FEATURES,
        }
    }

    // Launch heuristics: the kit's Inductor-style rules, for this device's limits.
    fn pointwise_configs(&self, query: &PointwiseQuery) -> Vec<LaunchConfig> {
        triton_heuristics::pointwise_configs(&self.triton_limits(), query)
    }
    fn reduction_configs(&self, query: &ReductionQuery) -> Vec<LaunchConfig> {
        triton_heuristics::reduction_configs(&self.triton_limits(), query)
    }
    fn adjust_grid(&self, grid: Grid) -> Grid {
        // A grid may be rounded up (the kernel masks the extra programs) and
        // capped at exactly the max_grid reported above (the kernel loops over
        // the rest), never anything else.
        Grid::from_array(triton_heuristics::cap_grid(
            grid.to_array(),
            self.limits.max_grid,
        ))
    }

    // Triton's GPUTarget(backend, arch, warp_size) for the kernels. Name your
    // Triton backend; where it is not installed, conformance skips compiling
    // the kernels with Triton and says so.
    fn triton_target(&self) -> Option<TritonTarget> {
        Some(TritonTarget::new("npu", "npu1", self.limits.warp_size))
    }
    // Whether that target's float32 `tl.dot` may use TF32 products; without
    // TF32 units the products are exact.
    fn tf32_dot(&self) -> Option<bool> {
        Some(self.limits.tf32_dot)
    }
    // The multiple, in bytes, that 16-bit products' K and N are padded to
    // (the NPU's matrix units take 16 elements of 16 bits at a time); return
    // None where the library has no preferred multiple.
    fn matmul_alignment(&self) -> Option<u32> {
        Some(self.limits.matmul_alignment)
    }
    // The dtypes whose convolutions the NPU's library runs on NHWC tensors
    // (its 16-bit kernels); return None where every convolution is as fast
    // NCHW.
    fn conv_channels_last(&self) -> Option<Vec<String>> {
        Some(
            self.limits
                .conv_channels_last
                .iter()
                .map(|d| d.to_string())
                .collect(),
        )
    }
}

export_plugin!(Npu);
