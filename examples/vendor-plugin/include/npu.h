// Stub of the NPU driver API: the CUDA-like API the example plugin's
// kernel_driver calls, declarations only. A real plugin points conformance at
// its vendor's own header instead; `host conformance --include include/` (the
// plugin kit's conformance_test! passes it) compiles kernel_driver against it.
#pragma once
#include <cstddef>
#include <cstdint>

typedef enum npuError_enum { NPU_SUCCESS = 0 } npuError_t;
typedef unsigned long long npuDevicePtr;
typedef int npuDevice;
typedef struct npuContext_st* npuContext;
typedef struct npuModule_st* npuModule;
typedef struct npuFunction_st* npuFunction;
typedef struct npuStream_st* npuStream_t;
typedef enum npuFunction_attribute_enum {
    NPU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
} npuFunction_attribute;

extern "C" {
const char* npuGetErrorString(npuError_t error);
npuError_t npuModuleLoad(npuModule* module, const char* fname);
npuError_t npuModuleGetFunction(npuFunction* hfunc, npuModule hmod, const char* name);
npuError_t npuFuncSetAttribute(npuFunction hfunc, npuFunction_attribute attrib, int value);
npuError_t npuLaunchKernel(npuFunction f, unsigned int gridDimX, unsigned int gridDimY,
                           unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                           unsigned int blockDimZ, unsigned int sharedMemBytes, npuStream_t hStream,
                           void** kernelParams, void** extra);
npuError_t npuMemAlloc(npuDevicePtr* dptr, size_t bytesize);
npuError_t npuMemFree(npuDevicePtr dptr);
npuError_t npuMemcpyHtoD(npuDevicePtr dstDevice, const void* srcHost, size_t ByteCount);
npuError_t npuMemcpyDtoH(void* dstHost, npuDevicePtr srcDevice, size_t ByteCount);
npuError_t npuMemcpyDtoDAsync(npuDevicePtr dstDevice, npuDevicePtr srcDevice, size_t ByteCount,
                              npuStream_t hStream);
npuError_t npuStreamSynchronize(npuStream_t hStream);
npuError_t npuInit(unsigned int flags);
npuError_t npuDeviceGet(npuDevice* device, int ordinal);
npuError_t npuDevicePrimaryCtxRetain(npuContext* pctx, npuDevice dev);
npuError_t npuCtxSetCurrent(npuContext ctx);
}  // extern "C"
