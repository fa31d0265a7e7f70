// Stub of the baseline test device's driver API: the declarations its
// kernel_driver calls, for `host conformance --include` (declarations only).
#pragma once
#include <cstddef>
#include <cstdint>

typedef enum baseError_enum { BASE_SUCCESS = 0 } baseError_t;
typedef unsigned long long baseDevicePtr;
typedef struct baseModule_st* baseModule;
typedef struct baseFunction_st* baseFunction;
typedef struct baseStream_st* baseStream_t;

extern "C" {
baseError_t baseModuleLoad(baseModule* module, const char* fname);
baseError_t baseModuleGetFunction(baseFunction* hfunc, baseModule hmod, const char* name);
baseError_t baseLaunchKernel(baseFunction f, unsigned int gridDimX, unsigned int gridDimY,
                             unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                             unsigned int blockDimZ, unsigned int sharedMemBytes,
                             baseStream_t hStream, void** kernelParams, void** extra);
baseError_t baseMemAlloc(baseDevicePtr* dptr, size_t bytesize);
baseError_t baseMemFree(baseDevicePtr dptr);
baseError_t baseMemcpyHtoD(baseDevicePtr dstDevice, const void* srcHost, size_t ByteCount);
baseError_t baseMemcpyDtoH(void* dstHost, baseDevicePtr srcDevice, size_t ByteCount);
baseError_t baseMemcpyDtoDAsync(baseDevicePtr dstDevice, baseDevicePtr srcDevice,
                                size_t ByteCount, baseStream_t hStream);
baseError_t baseStreamSynchronize(baseStream_t hStream);
baseError_t baseSetDevice(int index);
}  // extern "C"
