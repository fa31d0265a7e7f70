//! The text of the seed's `GXUDeviceOpOverrides` (section 4.4 of
//! `000_f7b8a4b42cd5d5fa.txt`), with two bugs of the seed's `kernel_driver`
//! fixed: its `GXU_DRIVER_CHECK` macro ended in `while (0);`, so that every
//! use produced an empty statement (which breaks `if (...) CHECK(...); else`),
//! and the `gxuFuncSetAttribute` check lacked its semicolon. The warp size is
//! the configured one instead of a literal 32. This module only produces
//! text; it never touches a device.

use kiln_plugin_api::{FixedOverrides, ScratchWorkspace};

/// `import_get_raw_stream_as(name)`.
pub fn import_get_raw_stream_as(name: &str) -> String {
    format!("from torch._C import _gxu_getCurrentRawStream as {name}")
}

/// `set_device(idx)`.
pub fn set_device(idx: u32) -> String {
    format!("torch.gxu.set_device({idx})")
}

/// `synchronize()`.
pub const SYNCHRONIZE: &str = "torch.gxu.synchronize()";

/// `device_guard(idx)`.
pub fn device_guard(idx: u32) -> String {
    format!("torch.gxu._DeviceGuard({idx})")
}

/// `cpp_device_guard()`.
pub const CPP_DEVICE_GUARD: &str = "at::gxu::GXUGuard";
/// `cpp_aoti_device_guard()`: the seed's name, `Gcu` spelling included.
pub const CPP_AOTI_DEVICE_GUARD: &str = "AOTIGcuGuard";
/// `cpp_stream_guard()`.
pub const CPP_STREAM_GUARD: &str = "at::gxu::GXUStreamGuard";
/// `cpp_aoti_stream_guard()`: the seed's name, `Gcu` spelling included.
pub const CPP_AOTI_STREAM_GUARD: &str = "AOTIGcuStreamGuard";
/// `cpp_getStreamFromExternal()`.
pub const CPP_GET_STREAM_FROM_EXTERNAL: &str = "at::gxu::getStreamFromExternal";
/// `cpp_stream_type()`.
pub const CPP_STREAM_TYPE: &str = "gxuStream_t";
/// `aoti_get_stream()`.
pub const AOTI_GET_STREAM: &str = "aoti_torch_get_current_gxu_stream";
/// `cpp_kernel_type()`.
pub const CPP_KERNEL_TYPE: &str = "gxuFunction";
/// `cpp_device_ptr()`.
pub const CPP_DEVICE_PTR: &str = "gxuDevicePtr";

/// `kernel_header()`.
pub const KERNEL_HEADER: &str = "\
#include <c10/gxu/GXUGuard.h>
#include <c10/gxu/GXUStream.h>
#include <ATen/gxu/EmptyTensor.h>
";

/// The warp-size slot in [`KERNEL_DRIVER_TEMPLATE`].
const WARP_SIZE_SLOT: &str = "@GXU_WARP_SIZE@";

/// `kernel_driver()` before the warp size is written in.
const KERNEL_DRIVER_TEMPLATE: &str = r#"#define GXU_DRIVER_CHECK(EXPR)                     \
    do {                                           \
        gxuError_t code = EXPR;                    \
        if (code != GXU_SUCCESS) {                 \
            const char *msg = gxuGetErrorString(code); \
            throw std::runtime_error(              \
                std::string("GXU driver error: ") + \
                std::string(msg));                 \
        }                                          \
    } while (0)

static inline gxuFunction loadKernel(
        std::string filePath,
        const std::string &funcName,
        uint32_t sharedMemBytes,
        const std::optional<std::string> &cubinDir = std::nullopt) {
    if (cubinDir) {
        std::filesystem::path p1{*cubinDir};
        std::filesystem::path p2{filePath};
        filePath = (p1 / p2.filename()).string();
    }

    gxuModule mod;
    gxuFunction func;
    GXU_DRIVER_CHECK(gxuModuleLoad(&mod, filePath.c_str()));
    GXU_DRIVER_CHECK(gxuModuleGetFunction(&func, mod, funcName.c_str()));
    if (sharedMemBytes > 0) {
        GXU_DRIVER_CHECK(gxuFuncSetAttribute(
            func,
            GXU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            sharedMemBytes
        ));
    }
    return func;
}

static inline void launchKernel(
        gxuFunction func,
        uint32_t gridX,
        uint32_t gridY,
        uint32_t gridZ,
        uint32_t numWarps,
        uint32_t sharedMemBytes,
        void* args[],
        gxuStream_t stream) {
    // The GXU warp size, as configured for this plugin (gxu.toml).
    const uint32_t GXU_WARP_SIZE = @GXU_WARP_SIZE@;
    GXU_DRIVER_CHECK(gxuLaunchKernel(
        func, gridX, gridY, gridZ,
        GXU_WARP_SIZE * numWarps, 1, 1,
        sharedMemBytes, stream, args, nullptr
    ));
}
"#;

/// `kernel_driver()`, with the configured warp size as `GXU_WARP_SIZE`.
pub fn kernel_driver(warp_size: u32) -> String {
    KERNEL_DRIVER_TEMPLATE.replace(WARP_SIZE_SLOT, &warp_size.to_string())
}

/// `cpp_scratch(idx, workspace, prefix)`, as the seed writes it: a buffer of
/// `workspace.size` elements on the current GXU device, or a null pointer
/// when the kernel needs none.
pub fn cpp_scratch(
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
    if workspace.size == 0 {
        return (vec![format!("gxuDevicePtr {var} = 0;")], var);
    }
    let size = workspace.size;
    let dtype = workspace.dtype.as_str();
    let lines = vec![
        format!("int64_t {var}_size[] = {{{size}}};"),
        format!("int64_t {var}_stride[] = {{1}};"),
        format!("AtenTensorHandle {var}_handle;"),
        format!(
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(1, {var}_size, {var}_stride, \
             {dtype}, cached_torch_device_type_gxu, device_idx_, &{var}_handle));"
        ),
        format!("RAIIAtenTensorHandle {var}_tensor({var}_handle);"),
        format!("gxuDevicePtr {var} = reinterpret_cast<gxuDevicePtr>({var}_tensor.data_ptr());"),
    ];
    (lines, var)
}

/// Every override that takes no arguments, as the one value the plugin
/// returns from `DevicePlugin::overrides`.
pub fn fixed(warp_size: u32) -> FixedOverrides {
    FixedOverrides {
        synchronize: Some(SYNCHRONIZE.into()),
        cpp_device_guard: Some(CPP_DEVICE_GUARD.into()),
        cpp_aoti_device_guard: Some(CPP_AOTI_DEVICE_GUARD.into()),
        cpp_stream_guard: Some(CPP_STREAM_GUARD.into()),
        cpp_aoti_stream_guard: Some(CPP_AOTI_STREAM_GUARD.into()),
        cpp_get_stream_from_external: Some(CPP_GET_STREAM_FROM_EXTERNAL.into()),
        kernel_header: Some(KERNEL_HEADER.into()),
        kernel_driver: Some(kernel_driver(warp_size)),
        cpp_stream_type: Some(CPP_STREAM_TYPE.into()),
        aoti_get_stream: Some(AOTI_GET_STREAM.into()),
        cpp_kernel_type: Some(CPP_KERNEL_TYPE.into()),
        cpp_device_ptr: Some(CPP_DEVICE_PTR.into()),
        tma_descriptor_helpers: None,
    }
}
