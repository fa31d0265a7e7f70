//! A fully valid baseline device for the deliberately broken test plugins.
//!
//! Every fixture implements [`Device`], overriding exactly one method with its
//! fault, and calls [`export_device!`]; everything else is this baseline, which
//! passes every conformance check. That way each fixture differs from a
//! passing plugin in exactly one way, and a test can assert that exactly the
//! check named for the fault fails.
//!
//! The baseline is a Triton-scheduled device with both wrappers, a warp of 32,
//! blocks of up to 1024 threads and Inductor-like heuristics.

use kiln_plugin_api::abi_stable::std_types::ROption::{RNone, RSome};
use kiln_plugin_api::{
    BackendFeatures, BackendSpec, DeviceProperties, Grid, LaunchConfig, Manifest, PointwiseQuery,
    PropertiesSource, ReductionQuery, SchedulingKind, ScratchWorkspace, TritonTarget, Wrappers,
};

/// Warp size of the baseline device.
pub const WARP_SIZE: u32 = 32;
/// The baseline device's shared memory per program, in bytes: 48 KiB.
pub const SHARED_MEMORY_PER_BLOCK: u64 = 48 * 1024;
/// The baseline device's L2 cache, in bytes: 4 MiB.
pub const L2_CACHE_BYTES: u64 = 4 * 1024 * 1024;
/// The byte multiple the baseline device's 16-bit products' K and N are
/// padded to: 16, as the cuda plugin states (its kernels compile for sm_90).
pub const MATMUL_ALIGNMENT: u32 = 16;
/// The dtypes whose 2-D convolutions the baseline device runs channels-last:
/// float16 and bfloat16, as the cuda plugin states.
pub const CONV_CHANNELS_LAST: [&str; 2] = ["float16", "bfloat16"];
/// Threads per block of the baseline device.
pub const MAX_THREADS_PER_BLOCK: u32 = 1024;
/// Grid limit of the baseline device.
pub const MAX_GRID: [u64; 3] = [(1 << 31) - 1, 65_535, 65_535];

/// The manifest of a baseline device called `name`.
pub fn manifest(name: &str) -> Manifest {
    Manifest::new(
        name,
        "0.1.0",
        "Kiln tests",
        "a deliberately broken test plugin (kiln tests/broken)",
    )
}

/// The properties of device `index` of a baseline device called `name`.
pub fn properties(name: &str, index: u32) -> DeviceProperties {
    DeviceProperties {
        device_type: name.into(),
        index,
        multi_processor_count: 48,
        cc: 0,
        major: RNone,
        regs_per_multiprocessor: RSome(65_536),
        max_threads_per_multi_processor: RSome(2048),
        max_threads_per_block: RSome(MAX_THREADS_PER_BLOCK),
        warp_size: RSome(WARP_SIZE),
        max_grid: MAX_GRID,
        source: PropertiesSource::StaticDefaults,
    }
}

fn pow2_at_most(n: u64, cap: u32) -> u32 {
    let rounded = n.max(1).checked_next_power_of_two().unwrap_or(u64::MAX);
    u32::try_from(rounded.min(u64::from(cap))).unwrap_or(cap)
}

/// Baseline pointwise configs: one block of up to 1024 elements, 4 warps.
pub fn pointwise_configs(query: &PointwiseQuery) -> Vec<LaunchConfig> {
    let block = pow2_at_most(query.numel, 1024);
    vec![
        LaunchConfig {
            x_block: block,
            r_block: 1,
            num_warps: 4,
            num_stages: 1,
        },
        LaunchConfig {
            x_block: block.min(256),
            r_block: 1,
            num_warps: 2,
            num_stages: 1,
        },
    ]
}

/// Baseline reduction configs: persistent up to 2048 elements per row.
pub fn reduction_configs(query: &ReductionQuery) -> Vec<LaunchConfig> {
    vec![LaunchConfig {
        x_block: pow2_at_most(query.rows, 8),
        r_block: pow2_at_most(query.row_len, 2048),
        num_warps: 8,
        num_stages: 1,
    }]
}

/// Baseline grid: as wanted, capped at [`MAX_GRID`].
pub fn adjust_grid(grid: Grid) -> Grid {
    let dims = grid.to_array();
    Grid::new(
        dims[0].clamp(1, MAX_GRID[0]),
        dims[1].clamp(1, MAX_GRID[1]),
        dims[2].clamp(1, MAX_GRID[2]),
    )
}

/// The baseline's C++ kernel driver, defining `loadKernel` and `launchKernel`.
pub const KERNEL_DRIVER: &str = r#"#define BASE_CHECK(EXPR)                                   \
    do {                                                   \
        baseError_t code = EXPR;                           \
        if (code != BASE_SUCCESS) {                        \
            throw std::runtime_error("base error: ()");    \
        }                                                  \
    } while (0)

static inline baseFunction loadKernel(std::string path, const std::string &name,
                                      uint32_t sharedMemBytes) {
    baseModule mod;
    baseFunction func;
    (void)sharedMemBytes;
    BASE_CHECK(baseModuleLoad(&mod, path.c_str()));
    BASE_CHECK(baseModuleGetFunction(&func, mod, name.c_str())); // '}' in a comment
    return func;
}

static inline void launchKernel(baseFunction func, uint32_t gridX, uint32_t gridY,
                                uint32_t gridZ, uint32_t numWarps, uint32_t sharedMemBytes,
                                void *args[], baseStream_t stream) {
    BASE_CHECK(baseLaunchKernel(func, gridX, gridY, gridZ, 32 * numWarps, 1, 1,
                                sharedMemBytes, stream, args, nullptr));
}

static inline void* kilnDeviceAlloc(size_t bytes) {
    baseDevicePtr ptr = 0;
    BASE_CHECK(baseMemAlloc(&ptr, bytes > 0 ? bytes : 1));
    return (void*)(uintptr_t)ptr;
}

static inline void kilnDeviceFree(void* ptr) {
    if (ptr != nullptr) BASE_CHECK(baseMemFree((baseDevicePtr)(uintptr_t)ptr));
}

static inline void kilnCopyToDevice(void* dst, const void* src, size_t bytes) {
    BASE_CHECK(baseMemcpyHtoD((baseDevicePtr)(uintptr_t)dst, src, bytes));
}

static inline void kilnCopyToHost(void* dst, const void* src, size_t bytes) {
    BASE_CHECK(baseMemcpyDtoH(dst, (baseDevicePtr)(uintptr_t)src, bytes));
}

static inline void kilnCopyOnDevice(void* dst, const void* src, size_t bytes, baseStream_t stream) {
    BASE_CHECK(baseMemcpyDtoDAsync((baseDevicePtr)(uintptr_t)dst, (baseDevicePtr)(uintptr_t)src,
                                   bytes, stream));
}

static inline void kilnSynchronize(baseStream_t stream) {
    BASE_CHECK(baseStreamSynchronize(stream));
}

static inline void kilnSetDevice(int index) {
    BASE_CHECK(baseSetDevice(index));
}
"#;

/// A baseline device. Implement it with one method overridden by the fault,
/// then call [`export_device!`].
pub trait Device: Default + Send + Sync + 'static {
    /// The device name.
    const NAME: &'static str;

    /// The manifest.
    fn manifest() -> Manifest {
        manifest(Self::NAME)
    }
    /// `import_get_raw_stream_as(name)`.
    fn import_get_raw_stream_as(&self, name: &str) -> Option<String> {
        Some(format!(
            "from torch._C import _{}_getCurrentRawStream as {name}",
            Self::NAME
        ))
    }
    /// `set_device(idx)`.
    fn set_device(&self, idx: u32) -> Option<String> {
        Some(format!("torch.{}.set_device({idx})", Self::NAME))
    }
    /// `synchronize()`.
    fn synchronize(&self) -> Option<String> {
        Some(format!("torch.{}.synchronize()", Self::NAME))
    }
    /// `device_guard(idx)`.
    fn device_guard(&self, idx: u32) -> Option<String> {
        Some(format!("torch.{}._DeviceGuard({idx})", Self::NAME))
    }
    /// `cpp_device_guard()`.
    fn cpp_device_guard(&self) -> Option<String> {
        Some("at::base::BaseGuard".to_string())
    }
    /// `cpp_aoti_device_guard()`.
    fn cpp_aoti_device_guard(&self) -> Option<String> {
        Some("AOTIBaseGuard".to_string())
    }
    /// `cpp_stream_guard()`.
    fn cpp_stream_guard(&self) -> Option<String> {
        Some("at::base::BaseStreamGuard".to_string())
    }
    /// `cpp_aoti_stream_guard()`.
    fn cpp_aoti_stream_guard(&self) -> Option<String> {
        Some("AOTIBaseStreamGuard".to_string())
    }
    /// `cpp_getStreamFromExternal()`.
    fn cpp_get_stream_from_external(&self) -> Option<String> {
        Some("at::base::getStreamFromExternal".to_string())
    }
    /// `kernel_header()`.
    fn kernel_header(&self) -> Option<String> {
        // Declared by include/base.h, the stub header the conformance tests pass with --include.
        Some("#include <base.h>\n".to_string())
    }
    /// `kernel_driver()`.
    fn kernel_driver(&self) -> Option<String> {
        Some(KERNEL_DRIVER.to_string())
    }
    /// `cpp_stream_type()`.
    fn cpp_stream_type(&self) -> Option<String> {
        Some("baseStream_t".to_string())
    }
    /// `aoti_get_stream()`.
    fn aoti_get_stream(&self) -> Option<String> {
        Some("aoti_torch_get_current_base_stream".to_string())
    }
    /// `cpp_kernel_type()`.
    fn cpp_kernel_type(&self) -> Option<String> {
        Some("baseFunction".to_string())
    }
    /// `cpp_device_ptr()`.
    fn cpp_device_ptr(&self) -> Option<String> {
        Some("baseDevicePtr".to_string())
    }
    /// `cpp_scratch(idx, workspace, prefix)`.
    fn cpp_scratch(
        &self,
        idx: u32,
        workspace: &ScratchWorkspace,
        prefix: Option<&str>,
    ) -> Option<(Vec<String>, String)> {
        let prefix = prefix.map(|p| format!("{p}_")).unwrap_or_default();
        let var = format!("{prefix}scratch_{idx}");
        if workspace.size == 0 {
            return Some((vec![format!("baseDevicePtr {var} = 0;")], var));
        }
        Some((
            vec![
                format!("int64_t {var}_size[] = {{{}}};", workspace.size),
                format!("int64_t {var}_stride[] = {{1}};"),
                format!("AtenTensorHandle {var}_handle;"),
                format!(
                    "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(1, {var}_size, {var}_stride, {}, \
                     cached_torch_device_type_base, device_idx_, &{var}_handle));",
                    workspace.dtype.as_str()
                ),
                format!("RAIIAtenTensorHandle {var}_tensor({var}_handle);"),
                format!("baseDevicePtr {var} = reinterpret_cast<baseDevicePtr>({var}_tensor.data_ptr());"),
            ],
            var,
        ))
    }
    /// `tma_descriptor_helpers()`: not supported.
    fn tma_descriptor_helpers(&self) -> Option<String> {
        None
    }
    /// Whether a device can be used now: never, it is a test device.
    fn is_available(&self) -> bool {
        false
    }
    /// How many devices there are.
    fn device_count(&self) -> u32 {
        0
    }
    /// The properties of device `index`.
    fn device_properties(&self, index: u32) -> Result<DeviceProperties, String> {
        Ok(properties(Self::NAME, index))
    }
    /// Triton kernels, both wrappers, a few features.
    fn backend_spec(&self) -> BackendSpec {
        BackendSpec {
            scheduling: SchedulingKind::Triton,
            wrappers: Wrappers::PYTHON | Wrappers::CPP,
            features: BackendFeatures::FOREACH | BackendFeatures::INPLACE_BUFFERS,
        }
    }
    /// Pointwise configs.
    fn pointwise_configs(&self, query: &PointwiseQuery) -> Vec<LaunchConfig> {
        pointwise_configs(query)
    }
    /// Reduction configs.
    fn reduction_configs(&self, query: &ReductionQuery) -> Vec<LaunchConfig> {
        reduction_configs(query)
    }
    /// The grid launched.
    fn adjust_grid(&self, grid: Grid) -> Grid {
        adjust_grid(grid)
    }
    /// The Triton target: a test device has no Triton backend of its own,
    /// so its kernels are checked with Triton's CUDA backend for sm_90.
    fn triton_target(&self) -> Option<TritonTarget> {
        Some(TritonTarget::new("cuda", "90", WARP_SIZE))
    }
    /// Shared memory per program: 48 KiB, a small device's, so that the
    /// host's flash-attention tiles are fitted to it.
    fn shared_memory_per_block(&self, _index: u32) -> Option<u64> {
        Some(SHARED_MEMORY_PER_BLOCK)
    }
    /// L2 cache: 4 MiB.
    fn l2_cache_bytes(&self, _index: u32) -> Option<u64> {
        Some(L2_CACHE_BYTES)
    }
    /// Float32 products: exact (no TF32 units).
    fn tf32_dot(&self) -> Option<bool> {
        Some(false)
    }
    /// 16-bit products' K and N padded to [`MATMUL_ALIGNMENT`] bytes.
    fn matmul_alignment(&self) -> Option<u32> {
        Some(MATMUL_ALIGNMENT)
    }
    /// Convolutions of [`CONV_CHANNELS_LAST`] run channels-last.
    fn conv_channels_last(&self) -> Option<Vec<String>> {
        Some(CONV_CHANNELS_LAST.iter().map(|d| d.to_string()).collect())
    }
}

/// Implements `kiln_plugin_api::DevicePlugin` for a [`Device`] by delegating
/// every method to it, and exports the plugin's root module. The calling
/// crate must depend on `kiln-plugin-api` and `abi_stable` itself.
#[macro_export]
macro_rules! export_device {
    ($ty:ty) => {
        impl ::kiln_plugin_api::DevicePlugin for $ty {
            fn manifest() -> ::kiln_plugin_api::Manifest {
                <$ty as $crate::Device>::manifest()
            }
            fn load(_ctx: &::kiln_plugin_api::LoadContext) -> ::core::result::Result<Self, String> {
                Ok(<$ty as ::core::default::Default>::default())
            }
            fn import_get_raw_stream_as(&self, name: &str) -> Option<String> {
                $crate::Device::import_get_raw_stream_as(self, name)
            }
            fn set_device(&self, idx: u32) -> Option<String> {
                $crate::Device::set_device(self, idx)
            }
            fn synchronize(&self) -> Option<String> {
                $crate::Device::synchronize(self)
            }
            fn device_guard(&self, idx: u32) -> Option<String> {
                $crate::Device::device_guard(self, idx)
            }
            fn cpp_device_guard(&self) -> Option<String> {
                $crate::Device::cpp_device_guard(self)
            }
            fn cpp_aoti_device_guard(&self) -> Option<String> {
                $crate::Device::cpp_aoti_device_guard(self)
            }
            fn cpp_stream_guard(&self) -> Option<String> {
                $crate::Device::cpp_stream_guard(self)
            }
            fn cpp_aoti_stream_guard(&self) -> Option<String> {
                $crate::Device::cpp_aoti_stream_guard(self)
            }
            fn cpp_get_stream_from_external(&self) -> Option<String> {
                $crate::Device::cpp_get_stream_from_external(self)
            }
            fn kernel_header(&self) -> Option<String> {
                $crate::Device::kernel_header(self)
            }
            fn kernel_driver(&self) -> Option<String> {
                $crate::Device::kernel_driver(self)
            }
            fn cpp_stream_type(&self) -> Option<String> {
                $crate::Device::cpp_stream_type(self)
            }
            fn aoti_get_stream(&self) -> Option<String> {
                $crate::Device::aoti_get_stream(self)
            }
            fn cpp_kernel_type(&self) -> Option<String> {
                $crate::Device::cpp_kernel_type(self)
            }
            fn cpp_device_ptr(&self) -> Option<String> {
                $crate::Device::cpp_device_ptr(self)
            }
            fn cpp_scratch(
                &self,
                idx: u32,
                workspace: &::kiln_plugin_api::ScratchWorkspace,
                prefix: Option<&str>,
            ) -> Option<(Vec<String>, String)> {
                $crate::Device::cpp_scratch(self, idx, workspace, prefix)
            }
            fn tma_descriptor_helpers(&self) -> Option<String> {
                $crate::Device::tma_descriptor_helpers(self)
            }
            fn is_available(&self) -> bool {
                $crate::Device::is_available(self)
            }
            fn device_count(&self) -> u32 {
                $crate::Device::device_count(self)
            }
            fn device_properties(
                &self,
                index: u32,
            ) -> ::core::result::Result<::kiln_plugin_api::DeviceProperties, String> {
                $crate::Device::device_properties(self, index)
            }
            fn backend_spec(&self) -> ::kiln_plugin_api::BackendSpec {
                $crate::Device::backend_spec(self)
            }
            fn pointwise_configs(
                &self,
                query: &::kiln_plugin_api::PointwiseQuery,
            ) -> Vec<::kiln_plugin_api::LaunchConfig> {
                $crate::Device::pointwise_configs(self, query)
            }
            fn reduction_configs(
                &self,
                query: &::kiln_plugin_api::ReductionQuery,
            ) -> Vec<::kiln_plugin_api::LaunchConfig> {
                $crate::Device::reduction_configs(self, query)
            }
            fn adjust_grid(&self, grid: ::kiln_plugin_api::Grid) -> ::kiln_plugin_api::Grid {
                $crate::Device::adjust_grid(self, grid)
            }
            fn triton_target(&self) -> Option<::kiln_plugin_api::TritonTarget> {
                $crate::Device::triton_target(self)
            }
            fn shared_memory_per_block(&self, index: u32) -> Option<u64> {
                $crate::Device::shared_memory_per_block(self, index)
            }
            fn l2_cache_bytes(&self, index: u32) -> Option<u64> {
                $crate::Device::l2_cache_bytes(self, index)
            }
            fn tf32_dot(&self) -> Option<bool> {
                $crate::Device::tf32_dot(self)
            }
            fn matmul_alignment(&self) -> Option<u32> {
                $crate::Device::matmul_alignment(self)
            }
            fn conv_channels_last(&self) -> Option<Vec<String>> {
                $crate::Device::conv_channels_last(self)
            }
        }

        ::kiln_plugin_api::export_plugin!($ty);
    };
}
