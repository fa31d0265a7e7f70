//! The safe side a vendor writes against: implement [`DevicePlugin`], then
//! call [`export_plugin!`](crate::export_plugin). The generic shims here turn
//! each trait method into an `extern "C"` function that catches panics, so a
//! plugin bug becomes a [`PluginError`] in the host instead of unwinding across
//! the boundary.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use abi_stable::prefix_type::PrefixTypeTrait;
use abi_stable::std_types::{ROption, RResult, RStr, RString};

#[cfg(not(feature = "__shorter_root_for_compat_test"))]
use crate::root::{DeviceModule, Heuristics};
use crate::root::{KilnPlugin, KilnPluginRef, OpOverrides, OpOverridesRef, PResult};
use crate::types::*;

/// A device plugin, written in safe Rust.
///
/// Every override defaults to `None` ("this device does not support it"), the
/// way PyTorch's base `DeviceOpOverrides` raises `NotImplementedError`.
pub trait DevicePlugin: PluginSlot + Send + Sync + 'static {
    /// Who the plugin is. Called before [`DevicePlugin::load`].
    fn manifest() -> Manifest;

    /// Builds the plugin once, right after the host loaded it. A broken
    /// configuration is reported here, naming the file and line.
    fn load(ctx: &LoadContext) -> Result<Self, String>;

    /// `import_get_raw_stream_as(name)`.
    fn import_get_raw_stream_as(&self, _name: &str) -> Option<String> {
        None
    }
    /// `set_device(idx)`.
    fn set_device(&self, _idx: u32) -> Option<String> {
        None
    }
    /// Every override that takes no arguments, as one value: its strings
    /// are fixed once the plugin is loaded, so a plugin builds the value in
    /// [`DevicePlugin::load`] and returns it here. The default provides none.
    fn overrides(&self) -> &FixedOverrides {
        &NO_OVERRIDES
    }
    /// `synchronize()`: by default, from [`DevicePlugin::overrides`].
    fn synchronize(&self) -> Option<String> {
        self.overrides().synchronize.clone()
    }
    /// `device_guard(idx)`.
    fn device_guard(&self, _idx: u32) -> Option<String> {
        None
    }
    /// `cpp_device_guard()`: by default, from [`DevicePlugin::overrides`].
    fn cpp_device_guard(&self) -> Option<String> {
        self.overrides().cpp_device_guard.clone()
    }
    /// `cpp_aoti_device_guard()`: by default, from [`DevicePlugin::overrides`].
    fn cpp_aoti_device_guard(&self) -> Option<String> {
        self.overrides().cpp_aoti_device_guard.clone()
    }
    /// `cpp_stream_guard()`: by default, from [`DevicePlugin::overrides`].
    fn cpp_stream_guard(&self) -> Option<String> {
        self.overrides().cpp_stream_guard.clone()
    }
    /// `cpp_aoti_stream_guard()`: by default, from [`DevicePlugin::overrides`].
    fn cpp_aoti_stream_guard(&self) -> Option<String> {
        self.overrides().cpp_aoti_stream_guard.clone()
    }
    /// `cpp_getStreamFromExternal()`: by default, from [`DevicePlugin::overrides`].
    fn cpp_get_stream_from_external(&self) -> Option<String> {
        self.overrides().cpp_get_stream_from_external.clone()
    }
    /// `kernel_header()`: by default, from [`DevicePlugin::overrides`].
    fn kernel_header(&self) -> Option<String> {
        self.overrides().kernel_header.clone()
    }
    /// `kernel_driver()`: by default, from [`DevicePlugin::overrides`].
    fn kernel_driver(&self) -> Option<String> {
        self.overrides().kernel_driver.clone()
    }
    /// `cpp_stream_type()`: by default, from [`DevicePlugin::overrides`].
    fn cpp_stream_type(&self) -> Option<String> {
        self.overrides().cpp_stream_type.clone()
    }
    /// `aoti_get_stream()`: by default, from [`DevicePlugin::overrides`].
    fn aoti_get_stream(&self) -> Option<String> {
        self.overrides().aoti_get_stream.clone()
    }
    /// `cpp_kernel_type()`: by default, from [`DevicePlugin::overrides`].
    fn cpp_kernel_type(&self) -> Option<String> {
        self.overrides().cpp_kernel_type.clone()
    }
    /// `cpp_device_ptr()`: by default, from [`DevicePlugin::overrides`].
    fn cpp_device_ptr(&self) -> Option<String> {
        self.overrides().cpp_device_ptr.clone()
    }
    /// `cpp_scratch(idx, workspace, prefix)`: the statements and the variable name.
    fn cpp_scratch(
        &self,
        _idx: u32,
        _workspace: &ScratchWorkspace,
        _prefix: Option<&str>,
    ) -> Option<(Vec<String>, String)> {
        None
    }
    /// `tma_descriptor_helpers()`: by default, from [`DevicePlugin::overrides`].
    fn tma_descriptor_helpers(&self) -> Option<String> {
        self.overrides().tma_descriptor_helpers.clone()
    }

    /// Whether a device can be used now.
    fn is_available(&self) -> bool;
    /// How many devices there are.
    fn device_count(&self) -> u32;
    /// The properties of device `index`.
    fn device_properties(&self, index: u32) -> Result<DeviceProperties, String>;
    /// The scheduling kind, wrappers and features.
    fn backend_spec(&self) -> BackendSpec;
    /// Ordered candidate configs for a pointwise kernel.
    fn pointwise_configs(&self, query: &PointwiseQuery) -> Vec<LaunchConfig>;
    /// Ordered candidate configs for a reduction kernel.
    fn reduction_configs(&self, query: &ReductionQuery) -> Vec<LaunchConfig>;
    /// The grid actually launched for a wanted grid.
    fn adjust_grid(&self, grid: Grid) -> Grid {
        grid
    }
    /// The Triton target the device's kernels compile for. The default,
    /// `None`, lets the host derive it from [`DevicePlugin::device_properties`]
    /// as Inductor does (the device type, `cc` and the warp size).
    fn triton_target(&self) -> Option<TritonTarget> {
        None
    }
    /// Ordered candidate configs for a reduction, or a pointwise kernel tiled
    /// in two dims, given how it walks memory (API 1.2). The default, `None`,
    /// leaves the host to ask [`DevicePlugin::reduction_configs`].
    fn hinted_reduction_configs(
        &self,
        query: &ReductionQuery,
        hint: ReductionHint,
    ) -> Option<Vec<LaunchConfig>> {
        let _ = (query, hint);
        None
    }
    /// Ordered candidate configs for a reduction, or a pointwise kernel tiled
    /// in two dims, given how it walks memory and how many passes it makes
    /// over each row when it loops (API 1.4). The default, `None`, leaves the
    /// host to ask [`DevicePlugin::hinted_reduction_configs`].
    fn reduction_pass_configs(
        &self,
        query: &ReductionQuery,
        hint: ReductionHint,
        passes: u32,
    ) -> Option<Vec<LaunchConfig>> {
        let _ = (query, hint, passes);
        None
    }
    /// The bytes of shared memory (local memory, SLM) one program of device
    /// `index` may use, counting what a kernel must opt in to (API 1.5). The
    /// host fits the tiles of kernels whose shape is its own (flash
    /// attention) in it. The default, `None`: the host's stated default, what
    /// hosts before 1.5 assumed of every device (96 KiB). A device without
    /// shared memory (a CPU) says `None`.
    fn shared_memory_per_block(&self, index: u32) -> Option<u64> {
        let _ = index;
        None
    }
    /// The bytes of L2 cache of device `index` (API 1.8), where the device has
    /// one that every program reads and writes through (a GPU's): the host
    /// bounds what a kernel prefetches into it ahead of its loads (split
    /// attention's keys and values, on a device whose kernels launch as
    /// programmatic dependents). The default, `None`: nothing is prefetched.
    fn l2_cache_bytes(&self, index: u32) -> Option<u64> {
        let _ = index;
        None
    }
    /// Whether `tl.dot` of float32 operands may use TF32 products on the
    /// Triton target of [`DevicePlugin::triton_target`] (API 1.5): `true`
    /// where the target's matrix units multiply TF32, so that the host keeps
    /// float32's accuracy with three TF32 products (`tf32x3`); `false` where
    /// float32 products must be exact FMA products (`ieee`). The default,
    /// `None`, reads as `false`, which compiles on every target.
    fn tf32_dot(&self) -> Option<bool> {
        None
    }
    /// The byte multiple that each dimension of a 16-bit matrix product
    /// should be for the device's matrix-product library to run its fast
    /// kernels (16 on NVIDIA GPUs with cuBLAS: 8 bfloat16/float16 elements).
    /// Kiln pads a product's K and N to it (API 1.6). `None`: no padding.
    /// A value must be 0 (no padding) or a power of two from 2 to 256; any
    /// other fails the plugin's validation.
    fn matmul_alignment(&self) -> Option<u32> {
        None
    }
    /// The dtypes whose 2-D convolutions the device's convolution library runs
    /// fastest on channels-last (`NHWC`) tensors, by the host's dtype names
    /// (`"float16"`, `"bfloat16"`, ...): cuDNN's 16-bit kernels on NVIDIA
    /// GPUs, which convert contiguous `NCHW` operands to `NHWC` and back on
    /// every call. Kiln then keeps those convolutions' activations
    /// channels-last (API 1.7). `None`: none. A name the host does not know
    /// fails the plugin's validation.
    fn conv_channels_last(&self) -> Option<Vec<String>> {
        None
    }
    /// The compiler and linker flags a C++ program built on
    /// [`DevicePlugin::kernel_header`] and [`DevicePlugin::kernel_driver`]
    /// needs on this machine, found when called (API 1.3): `-I` and `-L`
    /// folders of the device's toolkit, `-l` libraries. The host passes them
    /// after the source file, when `host run` builds the C++ wrapper of a
    /// Triton device. The default, `None`: nothing beyond the compiler's
    /// defaults.
    fn cpp_build_flags(&self) -> Option<Vec<String>> {
        None
    }
}

/// The `DeviceOpOverrides` methods that take no arguments, as one value
/// ([`DevicePlugin::overrides`]). `None` in a field: the device does not
/// support that method (PyTorch's `NotImplementedError`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FixedOverrides {
    /// `synchronize()`.
    pub synchronize: Option<String>,
    /// `cpp_device_guard()`.
    pub cpp_device_guard: Option<String>,
    /// `cpp_aoti_device_guard()`.
    pub cpp_aoti_device_guard: Option<String>,
    /// `cpp_stream_guard()`.
    pub cpp_stream_guard: Option<String>,
    /// `cpp_aoti_stream_guard()`.
    pub cpp_aoti_stream_guard: Option<String>,
    /// `cpp_getStreamFromExternal()`.
    pub cpp_get_stream_from_external: Option<String>,
    /// `kernel_header()`.
    pub kernel_header: Option<String>,
    /// `kernel_driver()`.
    pub kernel_driver: Option<String>,
    /// `cpp_stream_type()`.
    pub cpp_stream_type: Option<String>,
    /// `aoti_get_stream()`.
    pub aoti_get_stream: Option<String>,
    /// `cpp_kernel_type()`.
    pub cpp_kernel_type: Option<String>,
    /// `cpp_device_ptr()`.
    pub cpp_device_ptr: Option<String>,
    /// `tma_descriptor_helpers()`.
    pub tma_descriptor_helpers: Option<String>,
}

impl FixedOverrides {
    /// No override provided.
    pub const NONE: FixedOverrides = FixedOverrides {
        synchronize: None,
        cpp_device_guard: None,
        cpp_aoti_device_guard: None,
        cpp_stream_guard: None,
        cpp_aoti_stream_guard: None,
        cpp_get_stream_from_external: None,
        kernel_header: None,
        kernel_driver: None,
        cpp_stream_type: None,
        aoti_get_stream: None,
        cpp_kernel_type: None,
        cpp_device_ptr: None,
        tma_descriptor_helpers: None,
    };
}

static NO_OVERRIDES: FixedOverrides = FixedOverrides::NONE;

/// Where the loaded plugin lives: one static per plugin type, declared by
/// [`export_plugin!`](crate::export_plugin) (Rust has no generic statics).
pub trait PluginSlot: Sized + 'static {
    /// The plugin built by `load`, or why it could not be built.
    fn slot() -> &'static OnceLock<Result<Self, String>>;
}

/// Declares the plugin's root module: the one symbol the host looks for.
///
/// The plugin crate must list `abi_stable` (the version `plugin-api` uses) among
/// its own dependencies: `abi_stable`'s export attribute names it by absolute path.
///
/// ```
/// use kiln_plugin_api::*;
///
/// /// A device with only the Python-wrapper strings and fixed heuristics.
/// pub struct Npu;
///
/// impl DevicePlugin for Npu {
///     fn manifest() -> Manifest {
///         Manifest::new("npu", "0.1.0", "Example Corp", "An example NPU")
///     }
///     fn load(_ctx: &LoadContext) -> Result<Self, String> {
///         Ok(Npu)
///     }
///     fn set_device(&self, idx: u32) -> Option<String> {
///         Some(format!("torch.npu.set_device({idx})"))
///     }
///     fn is_available(&self) -> bool {
///         false
///     }
///     fn device_count(&self) -> u32 {
///         0
///     }
///     fn device_properties(&self, index: u32) -> Result<DeviceProperties, String> {
///         Err(format!("no npu device {index} in this example"))
///     }
///     fn backend_spec(&self) -> BackendSpec {
///         BackendSpec {
///             scheduling: SchedulingKind::Triton,
///             wrappers: Wrappers::PYTHON,
///             features: BackendFeatures::empty(),
///         }
///     }
///     fn pointwise_configs(&self, _q: &PointwiseQuery) -> Vec<LaunchConfig> {
///         vec![LaunchConfig { x_block: 1024, r_block: 1, num_warps: 4, num_stages: 1 }]
///     }
///     fn reduction_configs(&self, _q: &ReductionQuery) -> Vec<LaunchConfig> {
///         vec![LaunchConfig { x_block: 1, r_block: 1024, num_warps: 8, num_stages: 1 }]
///     }
/// }
///
/// kiln_plugin_api::export_plugin!(Npu);
/// # fn main() {
/// #     let root = kiln_plugin_root_module();
/// #     assert_eq!(root.manifest()().unwrap().name.as_str(), "npu");
/// # }
/// ```
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        impl $crate::export::PluginSlot for $plugin {
            fn slot() -> &'static ::std::sync::OnceLock<
                ::core::result::Result<$plugin, ::std::string::String>,
            > {
                static SLOT: ::std::sync::OnceLock<
                    ::core::result::Result<$plugin, ::std::string::String>,
                > = ::std::sync::OnceLock::new();
                &SLOT
            }
        }

        /// The root module of this Kiln plugin.
        #[$crate::abi_stable::export_root_module]
        pub fn kiln_plugin_root_module() -> $crate::KilnPluginRef {
            $crate::export::root_module::<$plugin>()
        }
    };
}

thread_local! {
    /// Where the last panic on this thread happened, kept by the quiet hook.
    static PANIC_LOCATION: std::cell::RefCell<Option<String>> =
        const { std::cell::RefCell::new(None) };
}

/// Replaces this plugin's panic hook (the plugin's own copy of `std`, not the
/// host's) with one that prints nothing and keeps the panic's location: a
/// panic inside a call then reaches the host once, as the call's error with
/// its message and location, instead of as a message and backtrace on the
/// host's stderr followed by the same error.
fn quiet_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            let location = info
                .location()
                .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()));
            PANIC_LOCATION.with(|p| *p.borrow_mut() = location);
        }));
    });
}

/// Runs `f`, turning a panic into a [`PluginError`] naming `what`, the panic's
/// message and where it happened; nothing is printed.
pub fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T, String>) -> PResult<T> {
    quiet_panics();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(value)) => RResult::ROk(value),
        Ok(Err(message)) => RResult::RErr(PluginError::new(message)),
        Err(payload) => {
            let location = PANIC_LOCATION
                .with(|p| p.borrow_mut().take())
                .map(|l| format!(" (at {l})"))
                .unwrap_or_default();
            RResult::RErr(PluginError::new(format!(
                "plugin panicked in `{what}`: {}{location}",
                panic_message(payload.as_ref())
            )))
        }
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_string()
    }
}

/// Runs `f` on the loaded plugin, or reports why there is none.
fn with_plugin<P: DevicePlugin, T>(what: &str, f: impl FnOnce(&P) -> T) -> PResult<T> {
    guarded(what, || match P::slot().get() {
        Some(Ok(plugin)) => Ok(f(plugin)),
        Some(Err(message)) => Err(format!("plugin failed to initialise: {message}")),
        None => Err(format!("`{what}` called before `init`")),
    })
}

fn opt(value: Option<String>) -> ROption<RString> {
    value.map(RString::from).into()
}

extern "C" fn manifest<P: DevicePlugin>() -> PResult<Manifest> {
    guarded("manifest", || Ok(P::manifest()))
}

extern "C" fn init<P: DevicePlugin>(ctx: &LoadContext) -> PResult<()> {
    guarded("init", || match P::slot().get_or_init(|| P::load(ctx)) {
        Ok(_) => Ok(()),
        Err(message) => Err(message.clone()),
    })
}

macro_rules! string_shims {
    ($($name:ident),* $(,)?) => {$(
        extern "C" fn $name<P: DevicePlugin>() -> PResult<ROption<RString>> {
            with_plugin::<P, _>(stringify!($name), |p| opt(p.$name()))
        }
    )*};
}

string_shims!(
    synchronize,
    cpp_device_guard,
    cpp_aoti_device_guard,
    cpp_stream_guard,
    cpp_aoti_stream_guard,
    cpp_get_stream_from_external,
    kernel_header,
    kernel_driver,
    cpp_stream_type,
    aoti_get_stream,
    cpp_kernel_type,
    cpp_device_ptr,
    tma_descriptor_helpers,
);

extern "C" fn import_get_raw_stream_as<P: DevicePlugin>(
    name: RStr<'_>,
) -> PResult<ROption<RString>> {
    with_plugin::<P, _>("import_get_raw_stream_as", |p| {
        opt(p.import_get_raw_stream_as(name.as_str()))
    })
}

extern "C" fn set_device<P: DevicePlugin>(idx: u32) -> PResult<ROption<RString>> {
    with_plugin::<P, _>("set_device", |p| opt(p.set_device(idx)))
}

extern "C" fn device_guard<P: DevicePlugin>(idx: u32) -> PResult<ROption<RString>> {
    with_plugin::<P, _>("device_guard", |p| opt(p.device_guard(idx)))
}

extern "C" fn cpp_scratch<P: DevicePlugin>(
    idx: u32,
    workspace: &ScratchWorkspace,
    prefix: ROption<RStr<'_>>,
) -> PResult<ROption<ScratchCode>> {
    with_plugin::<P, _>("cpp_scratch", |p| {
        p.cpp_scratch(idx, workspace, prefix.map(|s| s.as_str()).into_option())
            .map(|(lines, var_name)| ScratchCode {
                lines: lines.into_iter().map(RString::from).collect(),
                var_name: var_name.into(),
            })
            .into()
    })
}

#[cfg(not(feature = "__shorter_root_for_compat_test"))]
extern "C" fn is_available<P: DevicePlugin>() -> PResult<bool> {
    with_plugin::<P, _>("is_available", |p| p.is_available())
}

#[cfg(not(feature = "__shorter_root_for_compat_test"))]
extern "C" fn device_count<P: DevicePlugin>() -> PResult<u32> {
    with_plugin::<P, _>("device_count", |p| p.device_count())
}

#[cfg(not(feature = "__shorter_root_for_compat_test"))]
extern "C" fn device_properties<P: DevicePlugin>(index: u32) -> PResult<DeviceProperties> {
    with_plugin::<P, _>("device_properties", |p| p.device_properties(index))
        .and_then(|r| r.map_err(PluginError::new).into())
}

#[cfg(not(any(
    feature = "__shorter_root_for_compat_test",
    feature = "__api_1_4_for_compat_test"
)))]
extern "C" fn shared_memory_per_block<P: DevicePlugin>(index: u32) -> PResult<ROption<u64>> {
    with_plugin::<P, _>("shared_memory_per_block", |p| {
        p.shared_memory_per_block(index).into()
    })
}

#[cfg(not(any(
    feature = "__shorter_root_for_compat_test",
    feature = "__api_1_4_for_compat_test"
)))]
extern "C" fn l2_cache_bytes<P: DevicePlugin>(index: u32) -> PResult<ROption<u64>> {
    with_plugin::<P, _>("l2_cache_bytes", |p| p.l2_cache_bytes(index).into())
}

#[cfg(not(feature = "__shorter_root_for_compat_test"))]
extern "C" fn backend_spec<P: DevicePlugin>() -> PResult<BackendSpec> {
    with_plugin::<P, _>("backend_spec", |p| p.backend_spec())
}

#[cfg(not(feature = "__shorter_root_for_compat_test"))]
extern "C" fn pointwise_configs<P: DevicePlugin>(
    query: PointwiseQuery,
) -> PResult<abi_stable::std_types::RVec<LaunchConfig>> {
    with_plugin::<P, _>("pointwise_configs", |p| p.pointwise_configs(&query).into())
}

#[cfg(not(feature = "__shorter_root_for_compat_test"))]
extern "C" fn reduction_configs<P: DevicePlugin>(
    query: ReductionQuery,
) -> PResult<abi_stable::std_types::RVec<LaunchConfig>> {
    with_plugin::<P, _>("reduction_configs", |p| p.reduction_configs(&query).into())
}

#[cfg(not(feature = "__shorter_root_for_compat_test"))]
extern "C" fn hinted_reduction_configs<P: DevicePlugin>(
    query: HintedReductionQuery,
) -> PResult<ROption<abi_stable::std_types::RVec<LaunchConfig>>> {
    with_plugin::<P, _>("hinted_reduction_configs", |p| {
        p.hinted_reduction_configs(&query.query, query.hint)
            .map(Into::into)
            .into()
    })
}

#[cfg(not(feature = "__shorter_root_for_compat_test"))]
extern "C" fn reduction_pass_configs<P: DevicePlugin>(
    query: ReductionPassQuery,
) -> PResult<ROption<abi_stable::std_types::RVec<LaunchConfig>>> {
    with_plugin::<P, _>("reduction_pass_configs", |p| {
        p.reduction_pass_configs(&query.query, query.hint, query.passes)
            .map(Into::into)
            .into()
    })
}

#[cfg(not(feature = "__shorter_root_for_compat_test"))]
extern "C" fn adjust_grid<P: DevicePlugin>(grid: Grid) -> PResult<Grid> {
    with_plugin::<P, _>("adjust_grid", |p| p.adjust_grid(grid))
}

#[cfg(not(feature = "__shorter_root_for_compat_test"))]
extern "C" fn triton_target<P: DevicePlugin>() -> PResult<ROption<TritonTarget>> {
    with_plugin::<P, _>("triton_target", |p| p.triton_target().into())
}

#[cfg(not(any(
    feature = "__shorter_root_for_compat_test",
    feature = "__api_1_4_for_compat_test"
)))]
extern "C" fn tf32_dot<P: DevicePlugin>() -> PResult<ROption<bool>> {
    with_plugin::<P, _>("tf32_dot", |p| p.tf32_dot().into())
}

#[cfg(not(any(
    feature = "__shorter_root_for_compat_test",
    feature = "__api_1_4_for_compat_test"
)))]
extern "C" fn matmul_alignment<P: DevicePlugin>() -> PResult<ROption<u32>> {
    with_plugin::<P, _>("matmul_alignment", |p| p.matmul_alignment().into())
}

#[cfg(not(any(
    feature = "__shorter_root_for_compat_test",
    feature = "__api_1_4_for_compat_test"
)))]
extern "C" fn conv_channels_last<P: DevicePlugin>(
) -> PResult<ROption<abi_stable::std_types::RVec<RString>>> {
    with_plugin::<P, _>("conv_channels_last", |p| {
        p.conv_channels_last()
            .map(|dtypes| dtypes.into_iter().map(RString::from).collect())
            .into()
    })
}

#[cfg(not(feature = "__shorter_root_for_compat_test"))]
extern "C" fn cpp_build_flags<P: DevicePlugin>(
) -> PResult<ROption<abi_stable::std_types::RVec<RString>>> {
    with_plugin::<P, _>("cpp_build_flags", |p| {
        p.cpp_build_flags()
            .map(|flags| flags.into_iter().map(RString::from).collect())
            .into()
    })
}

/// The overrides table of `P`, with every method routed through the shims.
pub fn overrides_table<P: DevicePlugin>() -> OpOverridesRef {
    OpOverrides {
        import_get_raw_stream_as: import_get_raw_stream_as::<P>,
        set_device: set_device::<P>,
        synchronize: synchronize::<P>,
        device_guard: device_guard::<P>,
        cpp_device_guard: cpp_device_guard::<P>,
        cpp_aoti_device_guard: cpp_aoti_device_guard::<P>,
        cpp_stream_guard: cpp_stream_guard::<P>,
        cpp_aoti_stream_guard: cpp_aoti_stream_guard::<P>,
        cpp_get_stream_from_external: cpp_get_stream_from_external::<P>,
        kernel_header: kernel_header::<P>,
        kernel_driver: kernel_driver::<P>,
        cpp_stream_type: cpp_stream_type::<P>,
        aoti_get_stream: aoti_get_stream::<P>,
        cpp_kernel_type: cpp_kernel_type::<P>,
        cpp_device_ptr: cpp_device_ptr::<P>,
        cpp_scratch: cpp_scratch::<P>,
        tma_descriptor_helpers: tma_descriptor_helpers::<P>,
    }
    .leak_into_prefix()
}

/// The root module of `P`. [`export_plugin!`](crate::export_plugin) calls this once.
pub fn root_module<P: DevicePlugin>() -> KilnPluginRef {
    let module = KilnPlugin {
        manifest: manifest::<P>,
        init: init::<P>,
        overrides: overrides_table::<P>(),
        #[cfg(not(feature = "__shorter_root_for_compat_test"))]
        device: DeviceModule {
            is_available: is_available::<P>,
            device_count: device_count::<P>,
            device_properties: device_properties::<P>,
            #[cfg(not(feature = "__api_1_4_for_compat_test"))]
            shared_memory_per_block: shared_memory_per_block::<P>,
            #[cfg(not(feature = "__api_1_4_for_compat_test"))]
            l2_cache_bytes: l2_cache_bytes::<P>,
        }
        .leak_into_prefix(),
        #[cfg(not(feature = "__shorter_root_for_compat_test"))]
        backend_spec: backend_spec::<P>,
        #[cfg(not(feature = "__shorter_root_for_compat_test"))]
        heuristics: Heuristics {
            pointwise_configs: pointwise_configs::<P>,
            reduction_configs: reduction_configs::<P>,
            adjust_grid: adjust_grid::<P>,
            triton_target: triton_target::<P>,
            hinted_reduction_configs: hinted_reduction_configs::<P>,
            reduction_pass_configs: reduction_pass_configs::<P>,
            #[cfg(not(feature = "__api_1_4_for_compat_test"))]
            tf32_dot: tf32_dot::<P>,
            #[cfg(not(feature = "__api_1_4_for_compat_test"))]
            matmul_alignment: matmul_alignment::<P>,
            #[cfg(not(feature = "__api_1_4_for_compat_test"))]
            conv_channels_last: conv_channels_last::<P>,
        }
        .leak_into_prefix(),
        #[cfg(not(feature = "__shorter_root_for_compat_test"))]
        cpp_build_flags: cpp_build_flags::<P>,
    };
    module.leak_into_prefix()
}
