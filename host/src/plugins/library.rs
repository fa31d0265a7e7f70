//! A loaded plugin seen through safe Rust: every call into the library goes
//! through here, turning the ABI's `RResult`/`ROption` and the prefix types'
//! missing fields into plain `Result<Option<T>, CallError>`.

use std::path::{Path, PathBuf};

use abi_stable::std_types::{ROption, RResult, RStr};
use kiln_plugin_api::{
    BackendSpec, DeviceProperties, Grid, HintedReductionQuery, KilnPluginRef, LaunchConfig,
    Manifest, PluginError, PointwiseQuery, ReductionPassQuery, ReductionQuery, ScratchCode,
    ScratchWorkspace, TritonTarget,
};

/// A call into a plugin that returned an error (or panicked inside the plugin).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plugin `{plugin}` {} in `{method}`: {message}", if *.panicked { "panicked" } else { "failed" })]
pub struct CallError {
    /// The device name of the plugin.
    pub plugin: String,
    /// The ABI method that failed.
    pub method: &'static str,
    /// The plugin's message (for a panic: the panic's message and location).
    pub message: String,
    /// Whether the plugin panicked (the export shims caught it).
    pub panicked: bool,
}

/// One of the 17 `DeviceOpOverrides` methods of PyTorch 2.11.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Override {
    /// `import_get_raw_stream_as(name)`.
    ImportGetRawStreamAs,
    /// `set_device(idx)`.
    SetDevice,
    /// `synchronize()`.
    Synchronize,
    /// `device_guard(idx)`.
    DeviceGuard,
    /// `cpp_device_guard()`.
    CppDeviceGuard,
    /// `cpp_aoti_device_guard()`.
    CppAotiDeviceGuard,
    /// `cpp_stream_guard()`.
    CppStreamGuard,
    /// `cpp_aoti_stream_guard()`.
    CppAotiStreamGuard,
    /// `cpp_getStreamFromExternal()`.
    CppGetStreamFromExternal,
    /// `kernel_header()`.
    KernelHeader,
    /// `kernel_driver()`.
    KernelDriver,
    /// `cpp_stream_type()`.
    CppStreamType,
    /// `aoti_get_stream()`.
    AotiGetStream,
    /// `cpp_kernel_type()`.
    CppKernelType,
    /// `cpp_device_ptr()`.
    CppDevicePtr,
    /// `cpp_scratch(idx, workspace, prefix)`.
    CppScratch,
    /// `tma_descriptor_helpers()`.
    TmaDescriptorHelpers,
}

impl Override {
    /// All methods, in PyTorch's declaration order.
    pub const ALL: [Override; 17] = [
        Override::ImportGetRawStreamAs,
        Override::SetDevice,
        Override::Synchronize,
        Override::DeviceGuard,
        Override::CppDeviceGuard,
        Override::CppAotiDeviceGuard,
        Override::CppStreamGuard,
        Override::CppAotiStreamGuard,
        Override::CppGetStreamFromExternal,
        Override::KernelHeader,
        Override::KernelDriver,
        Override::CppStreamType,
        Override::AotiGetStream,
        Override::CppKernelType,
        Override::CppDevicePtr,
        Override::CppScratch,
        Override::TmaDescriptorHelpers,
    ];

    /// The method's name exactly as PyTorch spells it.
    pub fn name(self) -> &'static str {
        match self {
            Override::ImportGetRawStreamAs => "import_get_raw_stream_as",
            Override::SetDevice => "set_device",
            Override::Synchronize => "synchronize",
            Override::DeviceGuard => "device_guard",
            Override::CppDeviceGuard => "cpp_device_guard",
            Override::CppAotiDeviceGuard => "cpp_aoti_device_guard",
            Override::CppStreamGuard => "cpp_stream_guard",
            Override::CppAotiStreamGuard => "cpp_aoti_stream_guard",
            Override::CppGetStreamFromExternal => "cpp_getStreamFromExternal",
            Override::KernelHeader => "kernel_header",
            Override::KernelDriver => "kernel_driver",
            Override::CppStreamType => "cpp_stream_type",
            Override::AotiGetStream => "aoti_get_stream",
            Override::CppKernelType => "cpp_kernel_type",
            Override::CppDevicePtr => "cpp_device_ptr",
            Override::CppScratch => "cpp_scratch",
            Override::TmaDescriptorHelpers => "tma_descriptor_helpers",
        }
    }

    /// Whether the returned text must fit on one line (an expression, a type,
    /// a statement); the others are blocks of C++.
    pub fn is_one_line(self) -> bool {
        !matches!(
            self,
            Override::KernelHeader
                | Override::KernelDriver
                | Override::TmaDescriptorHelpers
                | Override::CppScratch
        )
    }

    /// Whether the returned text is C++ (as opposed to Python).
    pub fn is_cpp(self) -> bool {
        !matches!(
            self,
            Override::ImportGetRawStreamAs
                | Override::SetDevice
                | Override::Synchronize
                | Override::DeviceGuard
        )
    }

    /// The method with this PyTorch name.
    pub fn from_name(name: &str) -> Option<Override> {
        Override::ALL.into_iter().find(|o| o.name() == name)
    }
}

/// The arguments used to render parameterised overrides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverrideArgs {
    /// The device index for `set_device` and `device_guard`.
    pub device_index: u32,
    /// The name bound by `import_get_raw_stream_as`.
    pub stream_name: String,
}

impl Default for OverrideArgs {
    /// Index 0 and the name Inductor's wrapper uses, `get_raw_stream`.
    fn default() -> Self {
        OverrideArgs {
            device_index: 0,
            stream_name: "get_raw_stream".to_string(),
        }
    }
}

/// A loaded, initialised plugin.
#[derive(Clone)]
pub struct Plugin {
    path: PathBuf,
    manifest: Manifest,
    version: semver::Version,
    root: KilnPluginRef,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name())
            .field("version", &self.version)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn flatten<T>(
    plugin: &str,
    method: &'static str,
    result: RResult<T, PluginError>,
) -> Result<T, CallError> {
    result.into_result().map_err(|e| {
        let message = e.message.into_string();
        // The export shims word a caught panic `plugin panicked in `METHOD`: ...`.
        let panic_prefix = format!("plugin panicked in `{method}`: ");
        match message.strip_prefix(&panic_prefix) {
            Some(rest) => CallError {
                plugin: plugin.to_string(),
                method,
                message: rest.to_string(),
                panicked: true,
            },
            None => CallError {
                plugin: plugin.to_string(),
                method,
                message,
                panicked: false,
            },
        }
    })
}

fn opt_string(value: ROption<abi_stable::std_types::RString>) -> Option<String> {
    value.into_option().map(|s| s.into_string())
}

impl Plugin {
    pub(crate) fn new(
        path: PathBuf,
        manifest: Manifest,
        version: semver::Version,
        root: KilnPluginRef,
    ) -> Plugin {
        Plugin {
            path,
            manifest,
            version,
            root,
        }
    }

    /// The device name (the PrivateUse1 backend name).
    pub fn name(&self) -> &str {
        &self.manifest.name
    }

    /// The plugin's own version.
    pub fn version(&self) -> &semver::Version {
        &self.version
    }

    /// The manifest as the plugin returned it.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Where the library was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The raw root module, for callers that need the ABI itself (conformance).
    pub fn root(&self) -> KilnPluginRef {
        self.root
    }

    fn fail<T>(
        &self,
        method: &'static str,
        result: RResult<T, PluginError>,
    ) -> Result<T, CallError> {
        flatten(self.name(), method, result)
    }

    /// Calls one override. `Ok(None)`: the device does not support it, or the
    /// plugin predates the method. `cpp_scratch` is rendered for an empty
    /// workspace with no prefix, its lines joined by newlines.
    pub fn override_text(
        &self,
        which: Override,
        args: &OverrideArgs,
    ) -> Result<Option<String>, CallError> {
        let table = self.root.overrides();
        let Some(table) = table else {
            return Ok(None);
        };
        let name = which.name();
        let result = match which {
            Override::ImportGetRawStreamAs => Some(table.import_get_raw_stream_as()(
                RStr::from_str(&args.stream_name),
            )),
            Override::SetDevice => table.set_device().map(|f| f(args.device_index)),
            Override::Synchronize => table.synchronize().map(|f| f()),
            Override::DeviceGuard => table.device_guard().map(|f| f(args.device_index)),
            Override::CppDeviceGuard => table.cpp_device_guard().map(|f| f()),
            Override::CppAotiDeviceGuard => table.cpp_aoti_device_guard().map(|f| f()),
            Override::CppStreamGuard => table.cpp_stream_guard().map(|f| f()),
            Override::CppAotiStreamGuard => table.cpp_aoti_stream_guard().map(|f| f()),
            Override::CppGetStreamFromExternal => table.cpp_get_stream_from_external().map(|f| f()),
            Override::KernelHeader => table.kernel_header().map(|f| f()),
            Override::KernelDriver => table.kernel_driver().map(|f| f()),
            Override::CppStreamType => table.cpp_stream_type().map(|f| f()),
            Override::AotiGetStream => table.aoti_get_stream().map(|f| f()),
            Override::CppKernelType => table.cpp_kernel_type().map(|f| f()),
            Override::CppDevicePtr => table.cpp_device_ptr().map(|f| f()),
            Override::TmaDescriptorHelpers => table.tma_descriptor_helpers().map(|f| f()),
            Override::CppScratch => {
                let workspace = ScratchWorkspace {
                    size: 0,
                    dtype: "cached_torch_dtype_uint8".into(),
                };
                return Ok(self
                    .cpp_scratch(args.device_index, &workspace, None)?
                    .map(|code| code.lines.join("\n")));
            }
        };
        match result {
            None => Ok(None),
            Some(r) => self.fail(name, r).map(opt_string),
        }
    }

    /// `cpp_scratch(idx, workspace, prefix)`.
    pub fn cpp_scratch(
        &self,
        idx: u32,
        workspace: &ScratchWorkspace,
        prefix: Option<&str>,
    ) -> Result<Option<ScratchCodeOwned>, CallError> {
        let Some(f) = self.root.overrides().and_then(|t| t.cpp_scratch()) else {
            return Ok(None);
        };
        let code = self.fail(
            "cpp_scratch",
            f(idx, workspace, prefix.map(RStr::from_str).into()),
        )?;
        Ok(code.into_option().map(ScratchCodeOwned::from))
    }

    /// `is_available()`; `None` when the plugin has no device module.
    pub fn is_available(&self) -> Result<Option<bool>, CallError> {
        match self.device_module().map(|m| m.is_available()) {
            None => Ok(None),
            Some(f) => self.fail("is_available", f()).map(Some),
        }
    }

    /// `device_count()`; `None` when the plugin has no device module.
    pub fn device_count(&self) -> Result<Option<u32>, CallError> {
        match self.device_module().and_then(|m| m.device_count()) {
            None => Ok(None),
            Some(f) => self.fail("device_count", f()).map(Some),
        }
    }

    /// `device_properties(index)`; `None` when the plugin has no device module.
    pub fn device_properties(&self, index: u32) -> Result<Option<DeviceProperties>, CallError> {
        match self.device_module().and_then(|m| m.device_properties()) {
            None => Ok(None),
            Some(f) => self.fail("device_properties", f(index)).map(Some),
        }
    }

    /// `shared_memory_per_block(index)`: the bytes of shared memory one
    /// program may use; `None` when the plugin does not say (it predates API
    /// 1.5, has no device module, or returns `RNone`).
    pub fn shared_memory_per_block(&self, index: u32) -> Result<Option<u64>, CallError> {
        match self
            .device_module()
            .and_then(|m| m.shared_memory_per_block())
        {
            None => Ok(None),
            Some(f) => self
                .fail("shared_memory_per_block", f(index))
                .map(ROption::into_option),
        }
    }

    /// `l2_cache_bytes(index)`: the bytes of the device's L2 cache; `None` when
    /// the plugin does not say (it predates API 1.8, has no device module, or
    /// returns `RNone`).
    pub fn l2_cache_bytes(&self, index: u32) -> Result<Option<u64>, CallError> {
        match self.device_module().and_then(|m| m.l2_cache_bytes()) {
            None => Ok(None),
            Some(f) => self
                .fail("l2_cache_bytes", f(index))
                .map(ROption::into_option),
        }
    }

    /// `tf32_dot()`: whether float32 `tl.dot` may use TF32 products; `None`
    /// when the plugin does not say (it predates API 1.5, has no heuristics,
    /// or returns `RNone`).
    pub fn tf32_dot(&self) -> Result<Option<bool>, CallError> {
        match self.root.heuristics().and_then(|h| h.tf32_dot()) {
            None => Ok(None),
            Some(f) => self.fail("tf32_dot", f()).map(ROption::into_option),
        }
    }

    /// `matmul_alignment()`: the byte multiple a 16-bit matrix product's K and
    /// N should be padded to; `None` when the plugin does not say (it predates
    /// API 1.6, has no heuristics, or returns `RNone`).
    pub fn matmul_alignment(&self) -> Result<Option<u32>, CallError> {
        match self.root.heuristics().and_then(|h| h.matmul_alignment()) {
            None => Ok(None),
            Some(f) => self.fail("matmul_alignment", f()).map(ROption::into_option),
        }
    }

    /// `conv_channels_last()`: the dtype names whose 2-D convolutions run
    /// channels-last; `None` when the plugin does not say (it predates API
    /// 1.7, has no heuristics, or returns `RNone`).
    pub fn conv_channels_last(&self) -> Result<Option<Vec<String>>, CallError> {
        match self.root.heuristics().and_then(|h| h.conv_channels_last()) {
            None => Ok(None),
            Some(f) => self.fail("conv_channels_last", f()).map(|names| {
                names
                    .into_option()
                    .map(|v| v.into_iter().map(|s| s.into_string()).collect())
            }),
        }
    }

    /// The backend spec; `None` when the plugin does not provide one.
    pub fn backend_spec(&self) -> Result<Option<BackendSpec>, CallError> {
        match self.root.backend_spec() {
            None => Ok(None),
            Some(f) => self.fail("backend_spec", f()).map(Some),
        }
    }

    /// `pointwise_configs(query)`; `None` when the plugin has no heuristics.
    pub fn pointwise_configs(
        &self,
        query: PointwiseQuery,
    ) -> Result<Option<Vec<LaunchConfig>>, CallError> {
        match self.root.heuristics().map(|h| h.pointwise_configs()) {
            None => Ok(None),
            Some(f) => self
                .fail("pointwise_configs", f(query))
                .map(|v| Some(v.into_vec())),
        }
    }

    /// `reduction_configs(query)`; `None` when the plugin has no heuristics.
    pub fn reduction_configs(
        &self,
        query: ReductionQuery,
    ) -> Result<Option<Vec<LaunchConfig>>, CallError> {
        match self.root.heuristics().and_then(|h| h.reduction_configs()) {
            None => Ok(None),
            Some(f) => self
                .fail("reduction_configs", f(query))
                .map(|v| Some(v.into_vec())),
        }
    }

    /// `hinted_reduction_configs(query)`; `None` when the plugin does not
    /// provide it (it predates API 1.2, has no heuristics, or returns `RNone`).
    pub fn hinted_reduction_configs(
        &self,
        query: HintedReductionQuery,
    ) -> Result<Option<Vec<LaunchConfig>>, CallError> {
        match self
            .root
            .heuristics()
            .and_then(|h| h.hinted_reduction_configs())
        {
            None => Ok(None),
            Some(f) => self
                .fail("hinted_reduction_configs", f(query))
                .map(|v| v.into_option().map(|v| v.into_vec())),
        }
    }

    /// `reduction_pass_configs(query)`; `None` when the plugin does not
    /// provide it (it predates API 1.4, has no heuristics, or returns `RNone`).
    pub fn reduction_pass_configs(
        &self,
        query: ReductionPassQuery,
    ) -> Result<Option<Vec<LaunchConfig>>, CallError> {
        match self
            .root
            .heuristics()
            .and_then(|h| h.reduction_pass_configs())
        {
            None => Ok(None),
            Some(f) => self
                .fail("reduction_pass_configs", f(query))
                .map(|v| v.into_option().map(|v| v.into_vec())),
        }
    }

    /// `adjust_grid(grid)`; `None` when the plugin has no heuristics.
    pub fn adjust_grid(&self, grid: Grid) -> Result<Option<Grid>, CallError> {
        match self.root.heuristics().and_then(|h| h.adjust_grid()) {
            None => Ok(None),
            Some(f) => self.fail("adjust_grid", f(grid)).map(Some),
        }
    }

    /// `triton_target()`; `None` when the plugin does not say (it predates
    /// API 1.1, has no heuristics, or returns `RNone`).
    pub fn triton_target(&self) -> Result<Option<TritonTargetOwned>, CallError> {
        match self.root.heuristics().and_then(|h| h.triton_target()) {
            None => Ok(None),
            Some(f) => self
                .fail("triton_target", f())
                .map(|t| t.into_option().map(TritonTargetOwned::from)),
        }
    }

    /// `cpp_build_flags()`; `None` when the plugin does not say (it predates
    /// API 1.3, or returns `RNone`).
    pub fn cpp_build_flags(&self) -> Result<Option<Vec<String>>, CallError> {
        match self.root.cpp_build_flags() {
            None => Ok(None),
            Some(f) => self.fail("cpp_build_flags", f()).map(|flags| {
                flags
                    .into_option()
                    .map(|v| v.into_iter().map(|s| s.into_string()).collect())
            }),
        }
    }

    fn device_module(&self) -> Option<kiln_plugin_api::DeviceModuleRef> {
        self.root.device()
    }
}

/// [`ScratchCode`] as plain Rust strings.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ScratchCodeOwned {
    /// C++ statements, one per entry.
    pub lines: Vec<String>,
    /// The variable holding the device pointer.
    pub var_name: String,
}

impl From<ScratchCode> for ScratchCodeOwned {
    fn from(code: ScratchCode) -> Self {
        ScratchCodeOwned {
            lines: code.lines.into_iter().map(|s| s.into_string()).collect(),
            var_name: code.var_name.into_string(),
        }
    }
}

/// [`TritonTarget`] as plain Rust strings: Triton's `GPUTarget(backend, arch,
/// warp_size)`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TritonTargetOwned {
    /// The Triton backend (`cuda`, `xpu`, ...).
    pub backend: String,
    /// `GPUTarget.arch` as text (an integer, a name, or a JSON object).
    pub arch: String,
    /// Threads per warp.
    pub warp_size: u32,
}

impl From<TritonTarget> for TritonTargetOwned {
    fn from(t: TritonTarget) -> Self {
        TritonTargetOwned {
            backend: t.backend.into_string(),
            arch: t.arch.into_string(),
            warp_size: t.warp_size,
        }
    }
}

impl std::fmt::Display for TritonTargetOwned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (arch {}, warp size {})",
            self.backend, self.arch, self.warp_size
        )
    }
}
