//! The root module and the tables it points to: prefix types, so that a later
//! minor version can append fields without breaking plugins built earlier.
//!
//! Every field after a table's `#[sabi(last_prefix_field)]` is read through an
//! accessor that returns `Option`: `None` when the plugin was built against an
//! older, shorter table. The host treats that exactly like a method that
//! returns `ROption::RNone`: "this device does not provide it".

use abi_stable::library::RootModule;
use abi_stable::sabi_types::VersionStrings;
#[cfg(not(feature = "__shorter_root_for_compat_test"))]
use abi_stable::std_types::RVec;
use abi_stable::std_types::{ROption, RResult, RStr, RString};
use abi_stable::{declare_root_module_statics, package_version_strings, StableAbi};

#[cfg(not(feature = "__shorter_root_for_compat_test"))]
use crate::types::{
    BackendSpec, DeviceProperties, Grid, HintedReductionQuery, LaunchConfig, PointwiseQuery,
    ReductionPassQuery, ReductionQuery, TritonTarget,
};
use crate::types::{LoadContext, Manifest, PluginError, ScratchCode, ScratchWorkspace};

/// The result of every call into a plugin.
pub type PResult<T> = RResult<T, PluginError>;

/// The root module every Kiln plugin exports.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = KilnPluginRef)))]
#[sabi(missing_field(option))]
pub struct KilnPlugin {
    /// Who the plugin is. Callable before `init`.
    pub manifest: extern "C" fn() -> PResult<Manifest>,
    /// Called once by the host right after loading; a plugin reads its
    /// configuration here and reports a broken one as an error.
    #[sabi(last_prefix_field)]
    pub init: extern "C" fn(&LoadContext) -> PResult<()>,
    /// Inductor's `DeviceOpOverrides`.
    pub overrides: OpOverridesRef,
    /// The device module (`torch.<device>` in PyTorch).
    #[cfg(not(feature = "__shorter_root_for_compat_test"))]
    pub device: DeviceModuleRef,
    /// How the host generates code for the device.
    #[cfg(not(feature = "__shorter_root_for_compat_test"))]
    pub backend_spec: extern "C" fn() -> PResult<BackendSpec>,
    /// Launch heuristics.
    #[cfg(not(feature = "__shorter_root_for_compat_test"))]
    pub heuristics: HeuristicsRef,
    /// The compiler and linker flags a C++ program built on this plugin's
    /// `kernel_header` and `kernel_driver` needs on this machine (API 1.3):
    /// include and library folders, the libraries to link (`-lcuda`). `RNone`,
    /// or a plugin built before 1.3: none beyond the C++ compiler's defaults.
    #[cfg(not(feature = "__shorter_root_for_compat_test"))]
    pub cpp_build_flags: extern "C" fn() -> PResult<ROption<RVec<RString>>>,
}

impl RootModule for KilnPluginRef {
    declare_root_module_statics! {KilnPluginRef}
    const BASE_NAME: &'static str = "kiln_plugin";
    const NAME: &'static str = "kiln_plugin";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

/// Inductor's `DeviceOpOverrides`, one entry per method of PyTorch 2.11.
///
/// Each returns `RNone` where the device does not support the method (PyTorch's
/// `NotImplementedError`).
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = OpOverridesRef)))]
#[sabi(missing_field(option))]
pub struct OpOverrides {
    /// `import_get_raw_stream_as(name)`: a Python import binding the raw-stream getter to `name`.
    #[sabi(last_prefix_field)]
    pub import_get_raw_stream_as: extern "C" fn(RStr<'_>) -> PResult<ROption<RString>>,
    /// `set_device(idx)`: Python that makes device `idx` current.
    pub set_device: extern "C" fn(u32) -> PResult<ROption<RString>>,
    /// `synchronize()`: Python that waits for the device.
    pub synchronize: extern "C" fn() -> PResult<ROption<RString>>,
    /// `device_guard(idx)`: a Python context manager expression for device `idx`.
    pub device_guard: extern "C" fn(u32) -> PResult<ROption<RString>>,
    /// `cpp_device_guard()`: the C++ device guard class.
    pub cpp_device_guard: extern "C" fn() -> PResult<ROption<RString>>,
    /// `cpp_aoti_device_guard()`: the AOTInductor device guard class.
    pub cpp_aoti_device_guard: extern "C" fn() -> PResult<ROption<RString>>,
    /// `cpp_stream_guard()`: the C++ stream guard class.
    pub cpp_stream_guard: extern "C" fn() -> PResult<ROption<RString>>,
    /// `cpp_aoti_stream_guard()`: the AOTInductor stream guard class.
    pub cpp_aoti_stream_guard: extern "C" fn() -> PResult<ROption<RString>>,
    /// `cpp_getStreamFromExternal()`: the C++ function wrapping an external stream.
    pub cpp_get_stream_from_external: extern "C" fn() -> PResult<ROption<RString>>,
    /// `kernel_header()`: the C++ includes generated wrappers need.
    pub kernel_header: extern "C" fn() -> PResult<ROption<RString>>,
    /// `kernel_driver()`: C++ defining `loadKernel` and `launchKernel`.
    pub kernel_driver: extern "C" fn() -> PResult<ROption<RString>>,
    /// `cpp_stream_type()`: the C++ stream type.
    pub cpp_stream_type: extern "C" fn() -> PResult<ROption<RString>>,
    /// `aoti_get_stream()`: the AOTInductor function returning the current stream.
    pub aoti_get_stream: extern "C" fn() -> PResult<ROption<RString>>,
    /// `cpp_kernel_type()`: the C++ type of a loaded kernel.
    pub cpp_kernel_type: extern "C" fn() -> PResult<ROption<RString>>,
    /// `cpp_device_ptr()`: the C++ type of a device pointer.
    pub cpp_device_ptr: extern "C" fn() -> PResult<ROption<RString>>,
    /// `cpp_scratch(idx, workspace, prefix)`: C++ allocating Triton's scratch space.
    pub cpp_scratch:
        extern "C" fn(u32, &ScratchWorkspace, ROption<RStr<'_>>) -> PResult<ROption<ScratchCode>>,
    /// `tma_descriptor_helpers()`: C++ helpers for TMA descriptors.
    pub tma_descriptor_helpers: extern "C" fn() -> PResult<ROption<RString>>,
}

/// The device module: what `torch.<device>` answers in PyTorch.
#[cfg(not(feature = "__shorter_root_for_compat_test"))]
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = DeviceModuleRef)))]
#[sabi(missing_field(option))]
pub struct DeviceModule {
    /// Whether a device can be used now.
    #[sabi(last_prefix_field)]
    pub is_available: extern "C" fn() -> PResult<bool>,
    /// How many devices there are (0 when none is present).
    pub device_count: extern "C" fn() -> PResult<u32>,
    /// The properties of device `index`.
    pub device_properties: extern "C" fn(u32) -> PResult<DeviceProperties>,
    /// The bytes of shared memory (local memory, SLM) one program of device
    /// `index` may use, counting what a kernel must opt in to (API 1.5): the
    /// host sizes the tiles of kernels whose shape is its own (flash
    /// attention) to fit it. `RNone`, or a plugin built before 1.5: the host's
    /// stated default (`kiln-host`'s `plugins::defaults`).
    #[cfg(not(feature = "__api_1_4_for_compat_test"))]
    pub shared_memory_per_block: extern "C" fn(u32) -> PResult<ROption<u64>>,
    /// The bytes of L2 cache of device `index` (API 1.8): the host bounds what a
    /// kernel prefetches into it ahead of its loads. `RNone`, or a plugin built
    /// before 1.8: the host prefetches nothing.
    #[cfg(not(feature = "__api_1_4_for_compat_test"))]
    pub l2_cache_bytes: extern "C" fn(u32) -> PResult<ROption<u64>>,
}

/// Launch heuristics: the host never hard-codes a device's numbers.
#[cfg(not(feature = "__shorter_root_for_compat_test"))]
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = HeuristicsRef)))]
#[sabi(missing_field(option))]
pub struct Heuristics {
    /// Ordered candidate configs for a pointwise kernel; the first is the default.
    #[sabi(last_prefix_field)]
    pub pointwise_configs: extern "C" fn(PointwiseQuery) -> PResult<RVec<LaunchConfig>>,
    /// Ordered candidate configs for a reduction kernel; the first is the default.
    pub reduction_configs: extern "C" fn(ReductionQuery) -> PResult<RVec<LaunchConfig>>,
    /// The grid actually launched for a wanted grid; kernels loop over the rest.
    pub adjust_grid: extern "C" fn(Grid) -> PResult<Grid>,
    /// The Triton target the device's kernels compile for (API 1.1). `RNone`,
    /// or a plugin built before 1.1: the host derives it from
    /// `device_properties` as Inductor does (type, cc, warp size).
    pub triton_target: extern "C" fn() -> PResult<ROption<TritonTarget>>,
    /// Ordered candidate configs for a reduction (or tiled pointwise) kernel
    /// given how it walks memory (API 1.2). `RNone`, or a plugin built before
    /// 1.2: the host asks `reduction_configs` (a `Tile` kernel then runs with
    /// the reduction configs of its shape).
    pub hinted_reduction_configs:
        extern "C" fn(HintedReductionQuery) -> PResult<ROption<RVec<LaunchConfig>>>,
    /// Ordered candidate configs for a reduction (or tiled pointwise) kernel
    /// given how it walks memory and how many passes it makes over each row
    /// (API 1.4). `RNone`, or a plugin built before 1.4: the host asks
    /// `hinted_reduction_configs`.
    pub reduction_pass_configs:
        extern "C" fn(ReductionPassQuery) -> PResult<ROption<RVec<LaunchConfig>>>,
    /// Whether `tl.dot` of float32 operands may use TF32 products on the
    /// Triton target the device's kernels compile for (API 1.5): `true` where
    /// its matrix units multiply TF32, so that the host can keep float32's
    /// accuracy with three TF32 products (`tf32x3`); `false` where float32
    /// products must be exact FMA products (`ieee`). `RNone`, or a plugin
    /// built before 1.5: `false`, which compiles on every target.
    #[cfg(not(feature = "__api_1_4_for_compat_test"))]
    pub tf32_dot: extern "C" fn() -> PResult<ROption<bool>>,
    /// The byte multiple that each dimension of a 16-bit matrix product
    /// should be for the device's matrix-product library to run its fast
    /// kernels (API 1.6): 16 on NVIDIA GPUs with cuBLAS, 8 bfloat16/float16
    /// elements. The host pads a product's K and N to it. `RNone`, or a
    /// plugin built before 1.6: no padding.
    #[cfg(not(feature = "__api_1_4_for_compat_test"))]
    pub matmul_alignment: extern "C" fn() -> PResult<ROption<u32>>,
    /// The dtypes whose 2-D convolutions the device's convolution library runs
    /// fastest on channels-last (`NHWC`) tensors, by the host's dtype names
    /// (API 1.7): `float16` and `bfloat16` on NVIDIA GPUs with cuDNN. The host
    /// keeps those convolutions' activations channels-last. `RNone`, or a
    /// plugin built before 1.7: none.
    #[cfg(not(feature = "__api_1_4_for_compat_test"))]
    pub conv_channels_last: extern "C" fn() -> PResult<ROption<RVec<RString>>>,
}
