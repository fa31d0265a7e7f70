//! The text of PyTorch 2.11's `CUDADeviceOpOverrides`
//! (`torch/_inductor/codegen/cuda/device_op_overrides.py`).
//!
//! The one-line strings are PyTorch's, character for character. The C++
//! blocks (`kernel_driver`, `tma_descriptor_helpers`) are written against the
//! CUDA driver API with the same function names and signatures Inductor's C++
//! wrapper calls. This module only produces text; it never touches a device.

use kiln_plugin_api::{FixedOverrides, ScratchWorkspace};
use kiln_plugin_kit::driver::{self, DriverApi, ScratchScope};

/// `import_get_raw_stream_as(name)`.
pub fn import_get_raw_stream_as(name: &str) -> String {
    format!("from torch._C import _cuda_getCurrentRawStream as {name}")
}

/// `set_device(idx)`.
pub fn set_device(idx: u32) -> String {
    format!("torch.cuda.set_device({idx})")
}

/// `synchronize()`.
pub const SYNCHRONIZE: &str = "torch.cuda.synchronize()";

/// `device_guard(idx)`.
pub fn device_guard(idx: u32) -> String {
    format!("torch.cuda._DeviceGuard({idx})")
}

/// `cpp_device_guard()`.
pub const CPP_DEVICE_GUARD: &str = "at::cuda::CUDAGuard";
/// `cpp_aoti_device_guard()`.
pub const CPP_AOTI_DEVICE_GUARD: &str = "AOTICudaGuard";
/// `cpp_stream_guard()`.
pub const CPP_STREAM_GUARD: &str = "at::cuda::CUDAStreamGuard";
/// `cpp_aoti_stream_guard()`.
pub const CPP_AOTI_STREAM_GUARD: &str = "AOTICudaStreamGuard";
/// `cpp_getStreamFromExternal()`.
pub const CPP_GET_STREAM_FROM_EXTERNAL: &str = "at::cuda::getStreamFromExternal";
/// `cpp_stream_type()`.
pub const CPP_STREAM_TYPE: &str = "cudaStream_t";
/// `aoti_get_stream()`.
pub const AOTI_GET_STREAM: &str = "aoti_torch_get_current_cuda_stream";
/// `cpp_kernel_type()`.
pub const CPP_KERNEL_TYPE: &str = "CUfunction";
/// `cpp_device_ptr()`.
pub const CPP_DEVICE_PTR: &str = "CUdeviceptr";

/// `kernel_header()`: what the C++ wrapper includes for CUDA. Kiln's
/// wrapper links no PyTorch (unlike Inductor's, which includes
/// `c10/cuda/CUDAGuard.h`): the driver API, the runtime's stream type, and
/// cuBLAS for matrix products.
pub const KERNEL_HEADER: &str = "\
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cublas_v2.h>
";

/// The warp-size slot in [`KERNEL_DRIVER_TEMPLATE`].
const WARP_SIZE_SLOT: &str = "@WARP_SIZE@";

/// `kernel_driver()` before the warp size is written in. Every driver call
/// goes through `CUDA_DRIVER_CHECK`, which reports the driver's own error
/// string. The macro ends in `while (0)` with no semicolon, so that each use
/// supplies its own and the macro works as a single statement after `if`.
const KERNEL_DRIVER_TEMPLATE: &str = r#"#define CUDA_DRIVER_CHECK(EXPR)                                  \
    do {                                                         \
        CUresult code = EXPR;                                    \
        if (code != CUDA_SUCCESS) {                              \
            const char *msg = nullptr;                           \
            if (cuGetErrorString(code, &msg) != CUDA_SUCCESS ||  \
                msg == nullptr) {                                \
                msg = "unrecognised CUresult";                   \
            }                                                    \
            throw std::runtime_error(                            \
                std::string("CUDA driver error: ") +             \
                std::string(msg));                               \
        }                                                        \
    } while (0)

static inline CUfunction loadKernel(
        std::string filePath,
        const std::string &funcName,
        uint32_t sharedMemBytes,
        const std::optional<std::string> &cubinDir = std::nullopt) {
    if (cubinDir) {
        // The cubin was moved with the compiled model: look beside it.
        std::filesystem::path dir{*cubinDir};
        std::filesystem::path file{filePath};
        filePath = (dir / file.filename()).string();
    }

    CUmodule mod;
    CUfunction func;
    CUDA_DRIVER_CHECK(cuModuleLoad(&mod, filePath.c_str()));
    CUDA_DRIVER_CHECK(cuModuleGetFunction(&func, mod, funcName.c_str()));
    if (sharedMemBytes > 0) {
        // Above 48 KiB a kernel must opt in to dynamic shared memory.
        CUDA_DRIVER_CHECK(cuFuncSetAttribute(
            func,
            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            sharedMemBytes));
    }
    return func;
}

static inline void launchKernel(
        CUfunction func,
        uint32_t gridX,
        uint32_t gridY,
        uint32_t gridZ,
        uint32_t numWarps,
        uint32_t sharedMemBytes,
        void* args[],
        cudaStream_t stream) {
    // Triton's num_warps counts warps; the block is that many warps wide.
    CUDA_DRIVER_CHECK(cuLaunchKernel(
        func, gridX, gridY, gridZ,
        @WARP_SIZE@ * numWarps, 1, 1,
        sharedMemBytes, stream, args, nullptr));
}

// A kernel compiled to wait for the one before it (Triton's launch_pdl: it runs
// griddepcontrol.wait before it reads that kernel's results), launched as that
// kernel's programmatic dependent: its programs may start while the kernel before
// ends, as Triton's own launcher does on sm_90 and later. A toolkit before CUDA 12
// has no cuLaunchKernelEx: there it is launched plainly, and its wait returns at once.
static inline void launchKernelDependent(
        CUfunction func,
        uint32_t gridX,
        uint32_t gridY,
        uint32_t gridZ,
        uint32_t numWarps,
        uint32_t sharedMemBytes,
        void* args[],
        cudaStream_t stream) {
#if CUDA_VERSION >= 12000
    CUlaunchAttribute attribute[1];
    attribute[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attribute[0].value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig config;
    config.gridDimX = gridX;
    config.gridDimY = gridY;
    config.gridDimZ = gridZ;
    config.blockDimX = @WARP_SIZE@ * numWarps;
    config.blockDimY = 1;
    config.blockDimZ = 1;
    config.sharedMemBytes = sharedMemBytes;
    config.hStream = stream;
    config.attrs = attribute;
    config.numAttrs = 1;
    CUDA_DRIVER_CHECK(cuLaunchKernelEx(&config, func, args, nullptr));
#else
    launchKernel(func, gridX, gridY, gridZ, numWarps, sharedMemBytes, args, stream);
#endif
}
"#;

/// Matrix products for Kiln's C++ wrapper, through cuBLAS: row-major
/// `C = op(A) · op(B)` for `batch` matrices at fixed strides, each operand
/// read transposed where `transA`/`transB` says (its rows then run along its
/// leading dimension). A row-major product is the column-major product of the
/// transposes, so cuBLAS computes `Cᵀ = op(B)ᵀ · op(A)ᵀ` on the same memory.
/// `dtype` is 0 for float32, 1 for float16, 2 for bfloat16; every product
/// accumulates in float32, and float32 stays IEEE (no TF32), as PyTorch's
/// default. One cuBLAS handle per calling thread, on the caller's stream.
const GEMM: &str = r#"
#define KILN_CUBLAS_CHECK(EXPR)                                  \
    do {                                                         \
        cublasStatus_t status = EXPR;                            \
        if (status != CUBLAS_STATUS_SUCCESS) {                   \
            throw std::runtime_error(                            \
                std::string("cuBLAS error: ") +                  \
                std::string(cublasGetStatusString(status)));     \
        }                                                        \
    } while (0)

// The handle owns a fixed workspace, so that no product allocates while a
// stream is being captured into a CUDA graph.
static inline cublasHandle_t kilnBlasHandle() {
    static thread_local cublasHandle_t handle = nullptr;
    if (handle == nullptr) {
        KILN_CUBLAS_CHECK(cublasCreate(&handle));
        const size_t bytes = size_t(32) << 20;
        KILN_CUBLAS_CHECK(cublasSetWorkspace(handle, kilnDeviceAlloc(bytes), bytes));
    }
    return handle;
}

static inline void kilnGemm(
        int dtype,
        bool transA,
        bool transB,
        int64_t m,
        int64_t n,
        int64_t k,
        const void* a,
        int64_t lda,
        int64_t strideA,
        const void* b,
        int64_t ldb,
        int64_t strideB,
        void* c,
        int64_t ldc,
        int64_t strideC,
        int64_t batch,
        cudaStream_t stream) {
    cublasHandle_t handle = kilnBlasHandle();
    KILN_CUBLAS_CHECK(cublasSetStream(handle, stream));
    const cudaDataType_t type = dtype == 1 ? CUDA_R_16F : dtype == 2 ? CUDA_R_16BF : CUDA_R_32F;
    const float one = 1.0f;
    const float zero = 0.0f;
    KILN_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        handle,
        transB ? CUBLAS_OP_T : CUBLAS_OP_N,
        transA ? CUBLAS_OP_T : CUBLAS_OP_N,
        static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
        &one,
        b, type, static_cast<int>(ldb), static_cast<long long>(strideB),
        a, type, static_cast<int>(lda), static_cast<long long>(strideA),
        &zero,
        c, type, static_cast<int>(ldc), static_cast<long long>(strideC),
        static_cast<int>(batch),
        CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT));
}
"#;

/// A whole call of Kiln's C++ wrapper captured into a CUDA graph
/// (`--cuda-graph`): `kilnGraphBegin` starts capturing `stream` (thread-local
/// mode: other threads' work is not captured), `kilnGraphEnd` ends it and
/// returns the instantiated graph, `kilnGraphAbort` ends a capture a failure
/// interrupted without throwing, `kilnGraphLaunch` replays a graph on a
/// stream and `kilnGraphDestroy` frees one.
const GRAPHS: &str = r#"
static inline void kilnGraphBegin(cudaStream_t stream) {
    CUDA_DRIVER_CHECK(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
}

static inline void* kilnGraphEnd(cudaStream_t stream) {
    CUgraph graph = nullptr;
    CUDA_DRIVER_CHECK(cuStreamEndCapture(stream, &graph));
    CUgraphExec exec = nullptr;
    // (Not named `code`: CUDA_DRIVER_CHECK declares that name itself.)
    const CUresult instantiated = cuGraphInstantiateWithFlags(&exec, graph, 0);
    cuGraphDestroy(graph);
    CUDA_DRIVER_CHECK(instantiated);
    return static_cast<void*>(exec);
}

static inline void kilnGraphAbort(cudaStream_t stream) {
    CUgraph graph = nullptr;
    if (cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS && graph != nullptr) {
        cuGraphDestroy(graph);
    }
}

static inline void kilnGraphLaunch(void* exec, cudaStream_t stream) {
    CUDA_DRIVER_CHECK(cuGraphLaunch(static_cast<CUgraphExec>(exec), stream));
}

static inline void kilnGraphDestroy(void* exec) {
    if (exec != nullptr) {
        cuGraphExecDestroy(static_cast<CUgraphExec>(exec));
    }
}
"#;

/// `kernel_driver()`, with the warp size of the plugin's device written into
/// the block size of `cuLaunchKernel`, then the device-memory functions, the
/// cuBLAS matrix product and the CUDA-graph functions Kiln's C++ wrapper
/// calls.
pub fn kernel_driver(warp_size: u32) -> String {
    let mut text = KERNEL_DRIVER_TEMPLATE.replace(WARP_SIZE_SLOT, &warp_size.to_string());
    text.push_str(&driver::device_memory(
        &driver_api(warp_size),
        "CUDA_DRIVER_CHECK",
    ));
    text.push_str(GEMM);
    text.push_str(GRAPHS);
    text
}

/// `tma_descriptor_helpers()`: host-side builders of Hopper TMA descriptors
/// through `cuTensorMapEncodeTiled` (CUDA 12+). They use `CUDA_DRIVER_CHECK`
/// from [`kernel_driver`], which the wrapper emits first.
pub const TMA_DESCRIPTOR_HELPERS: &str = r#"#if defined(CUDA_VERSION) && CUDA_VERSION >= 12000
// TMA moves raw bytes, so only the element width matters to the descriptor.
[[maybe_unused]] static CUtensorMapDataType tmaDataType(uint32_t elementSize) {
    switch (elementSize) {
        case 1:
            return CU_TENSOR_MAP_DATA_TYPE_UINT8;
        case 2:
            return CU_TENSOR_MAP_DATA_TYPE_UINT16;
        case 4:
            return CU_TENSOR_MAP_DATA_TYPE_UINT32;
        case 8:
            return CU_TENSOR_MAP_DATA_TYPE_UINT64;
        default:
            throw std::runtime_error("TMA element size must be 1, 2, 4 or 8 bytes");
    }
}

[[maybe_unused]] static void init1DTMADescriptor(
        CUtensorMap* m,
        void* globalAddress,
        uint64_t dim,
        uint32_t blockDim,
        uint32_t elementSize) {
    uint64_t dims[1] = {dim};
    // The driver reads rank - 1 strides, none for rank 1; the array only
    // has to exist.
    uint64_t globalStrides[1] = {dim * elementSize};
    uint32_t boxDims[1] = {blockDim};
    uint32_t elementStrides[1] = {1};
    if (static_cast<uint64_t>(elementSize) * blockDim < 16) {
        // cuTensorMapEncodeTiled needs the inner box to span 16 bytes.
        throw std::runtime_error("TMA block is narrower than 16 bytes");
    }
    CUDA_DRIVER_CHECK(cuTensorMapEncodeTiled(
        m, tmaDataType(elementSize), 1, globalAddress, dims,
        globalStrides, boxDims, elementStrides,
        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
        CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
}

[[maybe_unused]] static void init2DTMADescriptor(
        CUtensorMap* m,
        void* globalAddress,
        uint64_t dim1,
        uint64_t dim0,
        uint32_t blockDim1,
        uint32_t blockDim0,
        uint32_t elementSize) {
    // The driver lists dimensions innermost first: dim0 is contiguous.
    uint64_t dims[2] = {dim0, dim1};
    // Strides of every dimension but the innermost, in bytes.
    uint64_t globalStrides[1] = {dim0 * elementSize};
    uint32_t boxDims[2] = {blockDim0, blockDim1};
    uint32_t elementStrides[2] = {1, 1};

    // Swizzle the widest pattern the inner box row allows, to avoid shared
    // memory bank conflicts; the box row may not exceed the swizzle span.
    uint32_t rowBytes = elementSize * blockDim0;
    CUtensorMapSwizzle swizzle;
    if (rowBytes >= 128) {
        swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
        boxDims[0] = 128 / elementSize;
    } else if (rowBytes >= 64) {
        swizzle = CU_TENSOR_MAP_SWIZZLE_64B;
    } else if (rowBytes >= 32) {
        swizzle = CU_TENSOR_MAP_SWIZZLE_32B;
    } else {
        throw std::runtime_error("TMA block row is narrower than 32 bytes");
    }
    CUDA_DRIVER_CHECK(cuTensorMapEncodeTiled(
        m, tmaDataType(elementSize), 2, globalAddress, dims,
        globalStrides, boxDims, elementStrides,
        CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
        CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
}
#endif
"#;

/// The CUDA driver API's names, for the plugin kit's C++ helpers. (Its
/// `kernel_driver` is this module's own: CUDA's constants do not share one
/// prefix, `CUDA_SUCCESS` beside `CU_FUNC_ATTRIBUTE_*`.)
pub fn driver_api(warp_size: u32) -> DriverApi {
    DriverApi {
        constant_prefix: "CU".into(),
        function_prefix: "cu".into(),
        error_type: "CUresult".into(),
        module_type: "CUmodule".into(),
        function_type: "CUfunction".into(),
        stream_type: CPP_STREAM_TYPE.into(),
        device_ptr_type: CPP_DEVICE_PTR.into(),
        device_type: "CUdevice".into(),
        context_type: "CUcontext".into(),
        torch_device_type: "cuda".into(),
        warp_size,
    }
}

/// `cpp_scratch(idx, workspace, prefix)`: Triton's per-program scratch space,
/// allocated as a tensor sized for the whole launch grid (the wrapper
/// defines `grid_0`, `grid_1`, `grid_2` before the launch), or a null pointer
/// when the kernel needs none.
pub fn cpp_scratch(
    idx: u32,
    workspace: &ScratchWorkspace,
    prefix: Option<&str>,
) -> (Vec<String>, String) {
    // The scratch pointer's type does not depend on the warp size.
    driver::cpp_scratch(
        &driver_api(32),
        ScratchScope::PerProgram,
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
        tma_descriptor_helpers: Some(TMA_DESCRIPTOR_HELPERS.into()),
    }
}
