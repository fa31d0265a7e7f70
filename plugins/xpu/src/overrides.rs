//! The text of PyTorch 2.11's `XPUDeviceOpOverrides`
//! (`torch/_inductor/codegen/xpu/device_op_overrides.py`) for Intel GPUs.
//!
//! The one-line strings are PyTorch's, character for character. The
//! `kernel_driver` is Kiln's own: PyTorch keeps `loadKernel`/`launchKernel`
//! for XPU in `sycl_runtime_wrappers.h`, while Kiln's `kernel_driver` contract
//! is that the text defines them, written here against SYCL 2020 and its
//! Level Zero interoperability API. This module only produces text; it never
//! touches a device.

use kiln_plugin_api::FixedOverrides;

/// `import_get_raw_stream_as(name)`.
pub fn import_get_raw_stream_as(name: &str) -> String {
    format!("from torch._C import _xpu_getCurrentRawStream as {name}")
}

/// `set_device(idx)`.
pub fn set_device(idx: u32) -> String {
    format!("torch.xpu.set_device({idx})")
}

/// `synchronize()`.
pub const SYNCHRONIZE: &str = "torch.xpu.synchronize()";

/// `device_guard(idx)`.
pub fn device_guard(idx: u32) -> String {
    format!("torch.xpu._DeviceGuard({idx})")
}

/// `cpp_device_guard()`.
pub const CPP_DEVICE_GUARD: &str = "at::DeviceGuard";
/// `cpp_aoti_device_guard()`.
pub const CPP_AOTI_DEVICE_GUARD: &str = "AOTIXpuGuard";
/// `cpp_stream_guard()`.
pub const CPP_STREAM_GUARD: &str = "at::xpu::XPUStreamGuard";
/// `cpp_aoti_stream_guard()`.
pub const CPP_AOTI_STREAM_GUARD: &str = "AOTIXpuStreamGuard";
/// `cpp_getStreamFromExternal()`.
pub const CPP_GET_STREAM_FROM_EXTERNAL: &str = "at::xpu::getStreamFromExternal";
/// `cpp_stream_type()`.
pub const CPP_STREAM_TYPE: &str = "sycl::queue*";
/// `aoti_get_stream()`.
pub const AOTI_GET_STREAM: &str = "aoti_torch_get_current_xpu_stream";
/// `cpp_kernel_type()`.
pub const CPP_KERNEL_TYPE: &str = "std::unique_ptr<sycl::kernel>";
/// `cpp_device_ptr()`.
pub const CPP_DEVICE_PTR: &str = "void *";

/// `kernel_header()`: SYCL and its Level Zero interoperability. (PyTorch's
/// includes `aoti_runtime/sycl_runtime_wrappers.h`, which defines its own
/// `loadKernel`/`launchKernel`; here `kernel_driver` defines them, and Kiln's
/// C++ wrapper links no PyTorch.)
pub const KERNEL_HEADER: &str = "\
#include <sycl/sycl.hpp>
#include <sycl/ext/oneapi/backend/level_zero.hpp>
#include <level_zero/ze_api.h>
";

/// The sub-group-size slot in [`KERNEL_DRIVER_TEMPLATE`].
const SUB_GROUP_SLOT: &str = "@SUB_GROUP_SIZE@";

/// `kernel_driver()` before the default sub-group size is written in.
///
/// `loadKernel` reads a SPIR-V file, builds it with Level Zero
/// (`zeModuleCreate` with `ZE_MODULE_FORMAT_IL_SPIRV`, `zeKernelCreate`) in
/// the default SYCL context of the first GPU (PyTorch's too), and hands both
/// handles to SYCL (`make_kernel_bundle`, `make_kernel`). `launchKernel`
/// submits it over an `nd_range` whose work-group is `numWarps` sub-groups,
/// Triton's `num_warps`, with the arguments set one by one.
const KERNEL_DRIVER_TEMPLATE: &str = r#"#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#define ZE_DRIVER_CHECK(EXPR)                                            \
    do {                                                                 \
        ze_result_t status = (EXPR);                                     \
        if (status != ZE_RESULT_SUCCESS) {                               \
            throw std::runtime_error(                                    \
                std::string("Level Zero error ") +                       \
                std::to_string(static_cast<long long>(status)) +         \
                std::string(" from ") + std::string(#EXPR));             \
        }                                                                \
    } while (0)

// The device Kiln's wrapper runs on: the first GPU, in its platform's
// default context, which is where PyTorch's XPU allocator allocates too, so
// that tensors from either can be passed to the other.
// kilnSetDevice picks another GPU before the first use.
static inline int &kilnXpuDeviceIndex() {
    static int index = 0;
    return index;
}

static inline sycl::queue &kilnXpuQueue() {
    static sycl::device device = [] {
        std::vector<sycl::device> gpus = sycl::device::get_devices(sycl::info::device_type::gpu);
        const int index = kilnXpuDeviceIndex();
        if (index < 0 || static_cast<size_t>(index) >= gpus.size()) {
            throw std::runtime_error(
                "no XPU device " + std::to_string(index) + " (" +
                std::to_string(gpus.size()) + " GPU(s) found)");
        }
        return gpus[static_cast<size_t>(index)];
    }();
    static sycl::queue queue{
        device.get_platform().ext_oneapi_get_default_context(), device};
    return queue;
}

static inline std::unique_ptr<sycl::kernel> loadKernel(
        std::string filePath,
        const std::string &funcName,
        uint32_t sharedMemBytes,
        const std::optional<std::string> &spirvDir = std::nullopt) {
    // Shared local memory is not a property of the module on XPU: it is
    // passed as a local_accessor when the kernel is launched.
    (void)sharedMemBytes;
    if (spirvDir) {
        std::filesystem::path dir{*spirvDir};
        std::filesystem::path file{filePath};
        filePath = (dir / file.filename()).string();
    }
    std::ifstream in(filePath, std::ios::binary);
    if (!in) {
        throw std::runtime_error("cannot open SPIR-V module " + filePath);
    }
    std::vector<uint8_t> spirv(
        (std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

    // Build in the context device memory is allocated in, so that the
    // kernel can use its pointers.
    sycl::queue &queue = kilnXpuQueue();
    sycl::device device = queue.get_device();
    sycl::context context = queue.get_context();
    auto zeDevice = sycl::get_native<sycl::backend::ext_oneapi_level_zero>(device);
    auto zeContext = sycl::get_native<sycl::backend::ext_oneapi_level_zero>(context);

    ze_module_desc_t moduleDesc = {};
    moduleDesc.stype = ZE_STRUCTURE_TYPE_MODULE_DESC;
    moduleDesc.format = ZE_MODULE_FORMAT_IL_SPIRV;
    moduleDesc.inputSize = spirv.size();
    moduleDesc.pInputModule = spirv.data();
    moduleDesc.pBuildFlags = "";
    ze_module_handle_t zeModule = nullptr;
    ZE_DRIVER_CHECK(zeModuleCreate(zeContext, zeDevice, &moduleDesc, &zeModule, nullptr));

    ze_kernel_desc_t kernelDesc = {};
    kernelDesc.stype = ZE_STRUCTURE_TYPE_KERNEL_DESC;
    kernelDesc.pKernelName = funcName.c_str();
    ze_kernel_handle_t zeKernel = nullptr;
    ZE_DRIVER_CHECK(zeKernelCreate(zeModule, &kernelDesc, &zeKernel));

    // SYCL takes ownership of both handles and releases them with the kernel.
    auto bundle = sycl::make_kernel_bundle<
        sycl::backend::ext_oneapi_level_zero, sycl::bundle_state::executable>(
        {zeModule, sycl::ext::oneapi::level_zero::ownership::transfer}, context);
    auto kernel = sycl::make_kernel<sycl::backend::ext_oneapi_level_zero>(
        {bundle, zeKernel, sycl::ext::oneapi::level_zero::ownership::transfer}, context);
    return std::make_unique<sycl::kernel>(kernel);
}

static inline void launchKernel(
        std::unique_ptr<sycl::kernel> &kernel,
        uint32_t gridX,
        uint32_t gridY,
        uint32_t gridZ,
        uint32_t numWarps,
        uint32_t sharedMemBytes,
        void* args[],
        sycl::queue* queue) {
    // A null queue is the device's default one.
    if (queue == nullptr) {
        queue = &kilnXpuQueue();
    }
    // Triton compiles for a fixed sub-group size; ask the kernel, and fall
    // back to the device's when the module does not say.
    uint32_t subGroupSize = kernel->get_info<
        sycl::info::kernel_device_specific::compile_sub_group_size>(queue->get_device());
    if (subGroupSize == 0) {
        subGroupSize = @SUB_GROUP_SIZE@;
    }
    const size_t workGroupSize = static_cast<size_t>(numWarps) * subGroupSize;
    // SYCL's last dimension is the fastest-varying one: x goes last.
    sycl::nd_range<3> range(
        sycl::range<3>(gridZ, gridY, static_cast<size_t>(gridX) * workGroupSize),
        sycl::range<3>(1, 1, workGroupSize));
    // Triton appends the shared-memory buffer as a last kernel argument.
    uint32_t numArgs = kernel->get_info<sycl::info::kernel::num_args>();
    if (sharedMemBytes > 0 && numArgs > 0) {
        numArgs -= 1;
    }
    queue->submit([&](sycl::handler &cgh) {
        for (uint32_t i = 0; i < numArgs; ++i) {
            cgh.set_arg(static_cast<int>(i), *static_cast<void**>(args[i]));
        }
        if (sharedMemBytes > 0) {
            cgh.set_arg(
                static_cast<int>(numArgs),
                sycl::local_accessor<int8_t, 1>(sycl::range<1>(sharedMemBytes), cgh));
        }
        cgh.parallel_for(range, *kernel);
    });
}

// Device memory for Kiln's C++ wrapper: its workspace, its constants, and
// the tensors `host run` moves in and out (unified shared memory).
static inline void* kilnDeviceAlloc(size_t bytes) {
    void* ptr = sycl::malloc_device(bytes > 0 ? bytes : 1, kilnXpuQueue());
    if (ptr == nullptr) {
        throw std::runtime_error(
            "XPU out of memory allocating " + std::to_string(bytes) + " bytes");
    }
    return ptr;
}

static inline void kilnDeviceFree(void* ptr) {
    if (ptr != nullptr) {
        sycl::free(ptr, kilnXpuQueue());
    }
}

static inline void kilnCopyToDevice(void* dst, const void* src, size_t bytes) {
    if (bytes > 0) {
        kilnXpuQueue().memcpy(dst, src, bytes).wait();
    }
}

static inline void kilnCopyToHost(void* dst, const void* src, size_t bytes) {
    if (bytes > 0) {
        kilnXpuQueue().memcpy(dst, src, bytes).wait();
    }
}

static inline void kilnCopyOnDevice(void* dst, const void* src, size_t bytes, sycl::queue* queue) {
    if (bytes > 0) {
        (queue != nullptr ? *queue : kilnXpuQueue()).memcpy(dst, src, bytes);
    }
}

static inline void kilnSynchronize(sycl::queue* queue) {
    (queue != nullptr ? *queue : kilnXpuQueue()).wait();
}

// The GPU the wrapper runs on, chosen before its first use (later calls
// cannot move a queue that exists).
static inline void kilnSetDevice(int index) {
    kilnXpuDeviceIndex() = index;
    (void)kilnXpuQueue();
}
"#;

/// `kernel_driver()`, with the plugin's sub-group size as the fallback for
/// kernels that do not record theirs.
pub fn kernel_driver(sub_group_size: u32) -> String {
    KERNEL_DRIVER_TEMPLATE.replace(SUB_GROUP_SLOT, &sub_group_size.to_string())
}

/// Every override that takes no arguments, as the one value the plugin
/// returns from `DevicePlugin::overrides`.
pub fn fixed(sub_group_size: u32) -> FixedOverrides {
    FixedOverrides {
        synchronize: Some(SYNCHRONIZE.into()),
        cpp_device_guard: Some(CPP_DEVICE_GUARD.into()),
        cpp_aoti_device_guard: Some(CPP_AOTI_DEVICE_GUARD.into()),
        cpp_stream_guard: Some(CPP_STREAM_GUARD.into()),
        cpp_aoti_stream_guard: Some(CPP_AOTI_STREAM_GUARD.into()),
        cpp_get_stream_from_external: Some(CPP_GET_STREAM_FROM_EXTERNAL.into()),
        kernel_header: Some(KERNEL_HEADER.into()),
        kernel_driver: Some(kernel_driver(sub_group_size)),
        cpp_stream_type: Some(CPP_STREAM_TYPE.into()),
        aoti_get_stream: Some(AOTI_GET_STREAM.into()),
        cpp_kernel_type: Some(CPP_KERNEL_TYPE.into()),
        cpp_device_ptr: Some(CPP_DEVICE_PTR.into()),
        tma_descriptor_helpers: None,
    }
}
