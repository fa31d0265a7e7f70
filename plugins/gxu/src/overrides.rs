//! The text of the reference GXU integration's `GXUDeviceOpOverrides`, with
//! two bugs of its `kernel_driver` fixed: its `GXU_DRIVER_CHECK` macro ended in `while (0);`, so that every
//! use produced an empty statement (which breaks `if (...) CHECK(...); else`),
//! and the `gxuFuncSetAttribute` check lacked its semicolon. The warp size is
//! the configured one instead of a literal 32. The driver text is the plugin
//! kit's for a CUDA-like API (`kiln_plugin_kit::driver`), which is the
//! reference's shape. This module only produces text; it never touches a device.

use kiln_plugin_api::{FixedOverrides, ScratchWorkspace};
use kiln_plugin_kit::driver::{self, DriverApi, ScratchScope};

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
/// `cpp_aoti_device_guard()`: the reference's name, `Gcu` spelling included.
pub const CPP_AOTI_DEVICE_GUARD: &str = "AOTIGcuGuard";
/// `cpp_stream_guard()`.
pub const CPP_STREAM_GUARD: &str = "at::gxu::GXUStreamGuard";
/// `cpp_aoti_stream_guard()`: the reference's name, `Gcu` spelling included.
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

/// `kernel_header()`: the gxu driver API's header. (The reference's includes
/// PyTorch's `c10/gxu` guards and `ATen/gxu/EmptyTensor.h`; Kiln's C++
/// wrapper links no PyTorch, so the driver API is all it needs.)
pub const KERNEL_HEADER: &str = "#include <gxu.h>\n";

/// The gxu driver API, spelt the usual way (`gxuModuleLoad`, `gxuError_t`,
/// `GXU_SUCCESS`, ...), with the configured warp size.
pub fn driver_api(warp_size: u32) -> DriverApi {
    DriverApi::named("gxu", warp_size)
}

/// `kernel_driver()`: the reference's, written by the plugin kit for the gxu
/// driver API, with the configured warp size as `GXU_WARP_SIZE`.
pub fn kernel_driver(warp_size: u32) -> String {
    driver::kernel_driver(&driver_api(warp_size))
}

/// `cpp_scratch(idx, workspace, prefix)`, as the reference writes it: a buffer of
/// `workspace.size` elements on the current GXU device, or a null pointer
/// when the kernel needs none.
pub fn cpp_scratch(
    idx: u32,
    workspace: &ScratchWorkspace,
    prefix: Option<&str>,
) -> (Vec<String>, String) {
    // The scratch pointer's type does not depend on the warp size.
    driver::cpp_scratch(
        &driver_api(1),
        ScratchScope::PerLaunch,
        idx,
        workspace,
        prefix,
    )
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
