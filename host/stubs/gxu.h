// Stub of the GXU driver API, the example vendor chip's: the CUDA-like
// API the gxu plugin's kernel_driver calls. Declarations only. See README.md.
#pragma once
#include <cstddef>
#include <cstdint>

typedef enum gxuError_enum { GXU_SUCCESS = 0 } gxuError_t;
typedef unsigned long long gxuDevicePtr;
typedef int gxuDevice;
typedef struct gxuContext_st* gxuContext;
typedef struct gxuModule_st* gxuModule;
typedef struct gxuFunction_st* gxuFunction;
typedef struct gxuStream_st* gxuStream_t;
typedef enum gxuFunction_attribute_enum {
    GXU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
} gxuFunction_attribute;

extern "C" {
const char* gxuGetErrorString(gxuError_t error);
gxuError_t gxuModuleLoad(gxuModule* module, const char* fname);
gxuError_t gxuModuleGetFunction(gxuFunction* hfunc, gxuModule hmod, const char* name);
gxuError_t gxuFuncSetAttribute(gxuFunction hfunc, gxuFunction_attribute attrib, int value);
gxuError_t gxuLaunchKernel(gxuFunction f, unsigned int gridDimX, unsigned int gridDimY,
                           unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                           unsigned int blockDimZ, unsigned int sharedMemBytes, gxuStream_t hStream,
                           void** kernelParams, void** extra);
gxuError_t gxuMemAlloc(gxuDevicePtr* dptr, size_t bytesize);
gxuError_t gxuMemFree(gxuDevicePtr dptr);
gxuError_t gxuMemcpyHtoD(gxuDevicePtr dstDevice, const void* srcHost, size_t ByteCount);
gxuError_t gxuMemcpyDtoH(void* dstHost, gxuDevicePtr srcDevice, size_t ByteCount);
gxuError_t gxuMemcpyDtoDAsync(gxuDevicePtr dstDevice, gxuDevicePtr srcDevice, size_t ByteCount,
                              gxuStream_t hStream);
gxuError_t gxuStreamSynchronize(gxuStream_t hStream);
gxuError_t gxuInit(unsigned int flags);
gxuError_t gxuDeviceGet(gxuDevice* device, int ordinal);
gxuError_t gxuDevicePrimaryCtxRetain(gxuContext* pctx, gxuDevice dev);
gxuError_t gxuCtxSetCurrent(gxuContext ctx);
}  // extern "C"
