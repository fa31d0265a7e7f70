// Stub of oneAPI Level Zero (level_zero/ze_api.h): declarations only. See README.md.
#pragma once
#include <cstddef>
#include <cstdint>

typedef enum _ze_result_t { ZE_RESULT_SUCCESS = 0 } ze_result_t;
typedef enum _ze_structure_type_t {
    ZE_STRUCTURE_TYPE_MODULE_DESC = 0x1b,
    ZE_STRUCTURE_TYPE_KERNEL_DESC = 0x1d
} ze_structure_type_t;
typedef enum _ze_module_format_t { ZE_MODULE_FORMAT_IL_SPIRV = 0 } ze_module_format_t;
typedef struct _ze_context_handle_t* ze_context_handle_t;
typedef struct _ze_device_handle_t* ze_device_handle_t;
typedef struct _ze_module_handle_t* ze_module_handle_t;
typedef struct _ze_kernel_handle_t* ze_kernel_handle_t;
typedef struct _ze_module_build_log_handle_t* ze_module_build_log_handle_t;
typedef struct _ze_module_constants_t ze_module_constants_t;
typedef uint32_t ze_module_flags_t;
typedef uint32_t ze_kernel_flags_t;

typedef struct _ze_module_desc_t {
    ze_structure_type_t stype;
    const void* pNext;
    ze_module_format_t format;
    size_t inputSize;
    const uint8_t* pInputModule;
    const char* pBuildFlags;
    const ze_module_constants_t* pConstants;
} ze_module_desc_t;

typedef struct _ze_kernel_desc_t {
    ze_structure_type_t stype;
    const void* pNext;
    ze_kernel_flags_t flags;
    const char* pKernelName;
} ze_kernel_desc_t;

extern "C" {
ze_result_t zeModuleCreate(ze_context_handle_t hContext, ze_device_handle_t hDevice,
                           const ze_module_desc_t* desc, ze_module_handle_t* phModule,
                           ze_module_build_log_handle_t* phBuildLog);
ze_result_t zeKernelCreate(ze_module_handle_t hModule, const ze_kernel_desc_t* desc,
                           ze_kernel_handle_t* phKernel);
}  // extern "C"
