//! C++ text for a device driven through a CUDA-like driver API: modules
//! loaded from a file, functions looked up by name, launches on a stream with
//! a grid and a block of threads. Many accelerators' driver APIs have this
//! shape (CUDA's `cu*`, HIP's `hip*`, the GXU's `gxu*`); describe the
//! names once in a [`DriverApi`] and the kit writes `kernel_driver` (with
//! `loadKernel` and `launchKernel`, as Inductor's C++ wrapper calls them) and
//! `cpp_scratch`.

use kiln_plugin_api::ScratchWorkspace;

/// The names of a CUDA-like driver API. Every name is pasted into C++ as
/// given: use identifiers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverApi {
    /// The prefix of the API's constants, and of the macros the kit defines:
    /// `GXU` gives `GXU_SUCCESS`, `GXU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`,
    /// `GXU_DRIVER_CHECK` and `GXU_WARP_SIZE`.
    pub constant_prefix: String,
    /// The prefix of its functions: `gxu` gives `gxuModuleLoad`,
    /// `gxuModuleGetFunction`, `gxuFuncSetAttribute`, `gxuLaunchKernel` and
    /// `gxuGetErrorString`.
    pub function_prefix: String,
    /// The status type its functions return (`gxuError_t`).
    pub error_type: String,
    /// A loaded module (`gxuModule`).
    pub module_type: String,
    /// A kernel function (`gxuFunction`).
    pub function_type: String,
    /// A stream (`gxuStream_t`).
    pub stream_type: String,
    /// A device pointer (`gxuDevicePtr`).
    pub device_ptr_type: String,
    /// A device handle, as `{f}DeviceGet` returns it (`gxuDevice`).
    pub device_type: String,
    /// A context, as `{f}DevicePrimaryCtxRetain` returns it (`gxuContext`).
    pub context_type: String,
    /// PyTorch's device type name, as in `cached_torch_device_type_gxu`.
    pub torch_device_type: String,
    /// Threads per warp: a launch has `warp_size × num_warps` threads per program.
    pub warp_size: u32,
}

impl DriverApi {
    /// The usual spelling of an API named `name` (`gxu`): constants
    /// `GXU_*`, functions `gxu*`, types `gxuError_t`, `gxuModule`,
    /// `gxuFunction`, `gxuStream_t`, `gxuDevicePtr`, `gxuDevice` and
    /// `gxuContext`, PyTorch device type
    /// `gxu`.
    pub fn named(name: &str, warp_size: u32) -> DriverApi {
        DriverApi {
            constant_prefix: name.to_ascii_uppercase(),
            function_prefix: name.to_string(),
            error_type: format!("{name}Error_t"),
            module_type: format!("{name}Module"),
            function_type: format!("{name}Function"),
            stream_type: format!("{name}Stream_t"),
            device_ptr_type: format!("{name}DevicePtr"),
            device_type: format!("{name}Device"),
            context_type: format!("{name}Context"),
            torch_device_type: name.to_string(),
            warp_size,
        }
    }
}

/// `kernel_driver()`: a `{PREFIX}_DRIVER_CHECK(expr)` macro that throws
/// `std::runtime_error` with the driver's message, `loadKernel(filePath,
/// funcName, sharedMemBytes, cubinDir)` and `launchKernel(func, gridX, gridY,
/// gridZ, numWarps, sharedMemBytes, args, stream)` launching `warp_size ×
/// numWarps` threads per program, and the [`device_memory`] functions.
pub fn kernel_driver(api: &DriverApi) -> String {
    let DriverApi {
        constant_prefix: up,
        function_prefix: f,
        error_type,
        module_type,
        function_type,
        stream_type,
        warp_size,
        ..
    } = api;
    format!(
        r#"#define {up}_DRIVER_CHECK(EXPR)                     \
    do {{                                           \
        {error_type} code = EXPR;                    \
        if (code != {up}_SUCCESS) {{                 \
            const char *msg = {f}GetErrorString(code); \
            throw std::runtime_error(              \
                std::string("{up} driver error: ") + \
                std::string(msg));                 \
        }}                                          \
    }} while (0)

static inline {function_type} loadKernel(
        std::string filePath,
        const std::string &funcName,
        uint32_t sharedMemBytes,
        const std::optional<std::string> &cubinDir = std::nullopt) {{
    if (cubinDir) {{
        std::filesystem::path p1{{*cubinDir}};
        std::filesystem::path p2{{filePath}};
        filePath = (p1 / p2.filename()).string();
    }}

    {module_type} mod;
    {function_type} func;
    {up}_DRIVER_CHECK({f}ModuleLoad(&mod, filePath.c_str()));
    {up}_DRIVER_CHECK({f}ModuleGetFunction(&func, mod, funcName.c_str()));
    if (sharedMemBytes > 0) {{
        {up}_DRIVER_CHECK({f}FuncSetAttribute(
            func,
            {up}_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            sharedMemBytes
        ));
    }}
    return func;
}}

static inline void launchKernel(
        {function_type} func,
        uint32_t gridX,
        uint32_t gridY,
        uint32_t gridZ,
        uint32_t numWarps,
        uint32_t sharedMemBytes,
        void* args[],
        {stream_type} stream) {{
    // Threads per warp, as the plugin reports it.
    const uint32_t {up}_WARP_SIZE = {warp_size};
    {up}_DRIVER_CHECK({f}LaunchKernel(
        func, gridX, gridY, gridZ,
        {up}_WARP_SIZE * numWarps, 1, 1,
        sharedMemBytes, stream, args, nullptr
    ));
}}
"#
    ) + &device_memory(api, &format!("{up}_DRIVER_CHECK"))
}

/// The device-memory functions Kiln's C++ wrapper for Triton devices calls
/// besides `loadKernel` and `launchKernel` (the wrapper owns its workspace and
/// its constants, and `host run` moves tensors in and out):
///
/// ```cpp
/// void* kilnDeviceAlloc(size_t bytes);                 // throws on failure
/// void kilnDeviceFree(void* ptr);
/// void kilnCopyToDevice(void* dst, const void* src, size_t bytes);   // synchronous
/// void kilnCopyToHost(void* dst, const void* src, size_t bytes);     // synchronous
/// void kilnCopyOnDevice(void* dst, const void* src, size_t bytes, Stream stream);
/// void kilnSynchronize(Stream stream);
/// void kilnSetDevice(int index);   // makes device `index` current on this thread
/// ```
///
/// Written here for a CUDA-like API: `{f}MemAlloc`, `{f}MemFree`,
/// `{f}MemcpyHtoD`, `{f}MemcpyDtoH`, `{f}MemcpyDtoDAsync`,
/// `{f}StreamSynchronize`, and for `kilnSetDevice` `{f}Init`, `{f}DeviceGet`,
/// `{f}DevicePrimaryCtxRetain` and `{f}CtxSetCurrent` (the device's primary
/// context, the one PyTorch uses too, so that a process sharing tensors with
/// PyTorch and one without it behave alike), each checked with the macro
/// `check` (the one
/// [`kernel_driver`] defines is `{PREFIX}_DRIVER_CHECK`). Device pointers
/// travel as `void*`, converted to and from the API's pointer type.
pub fn device_memory(api: &DriverApi, check: &str) -> String {
    let DriverApi {
        function_prefix: f,
        stream_type,
        device_ptr_type: ptr,
        device_type,
        context_type,
        ..
    } = api;
    format!(
        r#"
// Device memory for Kiln's C++ wrapper: its workspace, its constants, and
// the tensors `host run` moves in and out.
static inline void* kilnDeviceAlloc(size_t bytes) {{
    {ptr} ptr = 0;
    {check}({f}MemAlloc(&ptr, bytes > 0 ? bytes : 1));
    return (void*)(uintptr_t)ptr;
}}

static inline void kilnDeviceFree(void* ptr) {{
    if (ptr != nullptr) {{
        {check}({f}MemFree(({ptr})(uintptr_t)ptr));
    }}
}}

static inline void kilnCopyToDevice(void* dst, const void* src, size_t bytes) {{
    if (bytes > 0) {{
        {check}({f}MemcpyHtoD(({ptr})(uintptr_t)dst, src, bytes));
    }}
}}

static inline void kilnCopyToHost(void* dst, const void* src, size_t bytes) {{
    if (bytes > 0) {{
        {check}({f}MemcpyDtoH(dst, ({ptr})(uintptr_t)src, bytes));
    }}
}}

static inline void kilnCopyOnDevice(void* dst, const void* src, size_t bytes, {stream_type} stream) {{
    if (bytes > 0) {{
        {check}({f}MemcpyDtoDAsync(
            ({ptr})(uintptr_t)dst, ({ptr})(uintptr_t)src, bytes, stream));
    }}
}}

static inline void kilnSynchronize({stream_type} stream) {{
    {check}({f}StreamSynchronize(stream));
}}

// Makes device `index` current on the calling thread, in its primary context.
static inline void kilnSetDevice(int index) {{
    {check}({f}Init(0));
    {device_type} device;
    {check}({f}DeviceGet(&device, index));
    {context_type} context;
    {check}({f}DevicePrimaryCtxRetain(&context, device));
    {check}({f}CtxSetCurrent(context));
}}
"#
    )
}

/// `cpp_build_flags()` for a device toolkit installed under one folder
/// (`home`, when known): `-I{home}/include`, then for the first of
/// `{home}/lib64`, `{home}/lib` that exists `-L` and an rpath to it (so the
/// built library finds the toolkit's libraries without `LD_LIBRARY_PATH`),
/// then `-l` for each of `libraries`. Without a home, only the `-l` flags:
/// the compiler's default paths must hold the headers and libraries.
pub fn toolkit_flags(home: Option<&std::path::Path>, libraries: &[&str]) -> Vec<String> {
    let mut flags = Vec::new();
    if let Some(home) = home {
        let include = home.join("include");
        if include.is_dir() {
            flags.push(format!("-I{}", include.display()));
        }
        if let Some(lib) = ["lib64", "lib"]
            .iter()
            .map(|l| home.join(l))
            .find(|l| l.is_dir())
        {
            flags.push(format!("-L{}", lib.display()));
            flags.push(format!("-Wl,-rpath,{}", lib.display()));
        }
    }
    flags.extend(libraries.iter().map(|l| format!("-l{l}")));
    flags
}

/// How much scratch one launch allocates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScratchScope {
    /// `workspace.size` elements for the whole launch.
    PerLaunch,
    /// `workspace.size` elements for each program of the launch grid (Triton's
    /// per-program scratch; the wrapper defines `grid_0`, `grid_1` and
    /// `grid_2` before the launch).
    PerProgram,
}

/// `cpp_scratch(idx, workspace, prefix)`: C++ statements allocating the
/// kernel's scratch as an ATen tensor on the current device (through
/// AOTInductor's `aoti_torch_empty_strided`), and the variable holding its
/// device pointer (`{prefix}_scratch_{idx}`); a null pointer when the kernel
/// needs none.
pub fn cpp_scratch(
    api: &DriverApi,
    scope: ScratchScope,
    idx: u32,
    workspace: &ScratchWorkspace,
    prefix: Option<&str>,
) -> (Vec<String>, String) {
    // Python's `f"{prefix}_" if prefix else ""`: an empty prefix adds nothing.
    let prefix = match prefix {
        Some(p) if !p.is_empty() => format!("{p}_"),
        _ => String::new(),
    };
    let var = format!("{prefix}scratch_{idx}");
    let ptr = &api.device_ptr_type;
    if workspace.size == 0 {
        return (vec![format!("{ptr} {var} = 0;")], var);
    }
    let size = workspace.size;
    let elements = match scope {
        ScratchScope::PerLaunch => format!("{size}"),
        ScratchScope::PerProgram => {
            format!("static_cast<int64_t>({size}) * grid_0 * grid_1 * grid_2")
        }
    };
    let dtype = workspace.dtype.as_str();
    let device = &api.torch_device_type;
    let lines = vec![
        format!("int64_t {var}_size[] = {{{elements}}};"),
        format!("int64_t {var}_stride[] = {{1}};"),
        format!("AtenTensorHandle {var}_handle;"),
        format!(
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(1, {var}_size, {var}_stride, \
             {dtype}, cached_torch_device_type_{device}, device_idx_, &{var}_handle));"
        ),
        format!("RAIIAtenTensorHandle {var}_tensor({var}_handle);"),
        format!("{ptr} {var} = reinterpret_cast<{ptr}>({var}_tensor.data_ptr());"),
    ];
    (lines, var)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::assert_balanced;
    use kiln_plugin_api::abi_stable::std_types::RString;

    #[test]
    fn the_driver_text_uses_the_apis_names_and_the_warp_size() {
        let text = kernel_driver(&DriverApi::named("npu", 64));
        for part in [
            "#define NPU_DRIVER_CHECK(EXPR)",
            "npuError_t code = EXPR;",
            "code != NPU_SUCCESS",
            "npuGetErrorString(code)",
            "static inline npuFunction loadKernel(",
            "npuModule mod;",
            "NPU_DRIVER_CHECK(npuModuleLoad(&mod, filePath.c_str()));",
            "NPU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES",
            "static inline void launchKernel(",
            "npuStream_t stream) {",
            "const uint32_t NPU_WARP_SIZE = 64;",
            "NPU_WARP_SIZE * numWarps, 1, 1,",
            "static inline void* kilnDeviceAlloc(size_t bytes) {",
            "NPU_DRIVER_CHECK(npuMemAlloc(&ptr, bytes > 0 ? bytes : 1));",
            "NPU_DRIVER_CHECK(npuMemFree((npuDevicePtr)(uintptr_t)ptr));",
            "npuMemcpyHtoD((npuDevicePtr)(uintptr_t)dst, src, bytes)",
            "npuMemcpyDtoH(dst, (npuDevicePtr)(uintptr_t)src, bytes)",
            "static inline void kilnCopyOnDevice(void* dst, const void* src, size_t bytes, npuStream_t stream) {",
            "NPU_DRIVER_CHECK(npuStreamSynchronize(stream));",
            "static inline void kilnSetDevice(int index) {",
            "NPU_DRIVER_CHECK(npuInit(0));",
            "npuDevice device;",
            "NPU_DRIVER_CHECK(npuDeviceGet(&device, index));",
            "npuContext context;",
            "NPU_DRIVER_CHECK(npuDevicePrimaryCtxRetain(&context, device));",
            "NPU_DRIVER_CHECK(npuCtxSetCurrent(context));",
        ] {
            assert!(text.contains(part), "missing {part:?} in\n{text}");
        }
        assert_balanced("kernel_driver", &text);
        // The check macro is one statement: no `while (0);` that would leave
        // an empty statement after each use.
        assert!(text.contains("} while (0)\n"), "{text}");
    }

    #[test]
    fn toolkit_flags_name_the_include_and_library_folders_that_exist_then_the_libraries() {
        let home = std::env::temp_dir().join(format!("kiln-kit-toolkit-{}", std::process::id()));
        std::fs::create_dir_all(home.join("include")).unwrap();
        std::fs::create_dir_all(home.join("lib")).unwrap();
        let flags = toolkit_flags(Some(&home), &["npu", "npublas"]);
        let lib = home.join("lib").display().to_string();
        assert_eq!(
            flags,
            [
                format!("-I{}", home.join("include").display()),
                format!("-L{lib}"),
                format!("-Wl,-rpath,{lib}"),
                "-lnpu".to_string(),
                "-lnpublas".to_string(),
            ]
        );
        // lib64 is preferred where both exist.
        std::fs::create_dir_all(home.join("lib64")).unwrap();
        let flags = toolkit_flags(Some(&home), &[]);
        assert_eq!(flags[1], format!("-L{}", home.join("lib64").display()));
        std::fs::remove_dir_all(&home).unwrap();
        assert_eq!(toolkit_flags(None, &["npu"]), ["-lnpu"]);
        // A home that does not exist adds no folders.
        assert_eq!(toolkit_flags(Some(&home), &["npu"]), ["-lnpu"]);
    }

    #[test]
    fn scratch_is_a_null_pointer_or_a_tensor_sized_per_launch_or_per_program() {
        let api = DriverApi::named("npu", 32);
        let none = ScratchWorkspace {
            size: 0,
            dtype: RString::from("cached_torch_dtype_uint8"),
        };
        let (lines, var) = cpp_scratch(&api, ScratchScope::PerLaunch, 5, &none, Some("pfx"));
        assert_eq!(var, "pfx_scratch_5");
        assert_eq!(lines, ["npuDevicePtr pfx_scratch_5 = 0;"]);
        let some = ScratchWorkspace { size: 128, ..none };
        let (lines, var) = cpp_scratch(&api, ScratchScope::PerLaunch, 2, &some, Some(""));
        assert_eq!(var, "scratch_2");
        assert_eq!(lines[0], "int64_t scratch_2_size[] = {128};");
        for line in &lines {
            assert_balanced("cpp_scratch", line);
        }
        assert!(
            lines[3].contains("cached_torch_device_type_npu"),
            "{lines:?}"
        );
        let (lines, _) = cpp_scratch(&api, ScratchScope::PerProgram, 2, &some, None);
        assert_eq!(
            lines[0],
            "int64_t scratch_2_size[] = {static_cast<int64_t>(128) * grid_0 * grid_1 * grid_2};"
        );
    }
}
