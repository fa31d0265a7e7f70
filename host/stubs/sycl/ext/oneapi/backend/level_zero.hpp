// Stub of SYCL's Level Zero interoperability
// (sycl/ext/oneapi/backend/level_zero.hpp): declarations only. See README.md.
#pragma once
#include <level_zero/ze_api.h>
#include <sycl/sycl.hpp>

namespace sycl {
inline namespace _V1 {
namespace ext::oneapi::level_zero {
enum class ownership { transfer, keep };
}  // namespace ext::oneapi::level_zero

template <>
struct backend_input_t<backend::ext_oneapi_level_zero,
                       kernel_bundle<bundle_state::executable>> {
    ze_module_handle_t NativeHandle;
    ext::oneapi::level_zero::ownership Ownership;
};
template <>
struct backend_input_t<backend::ext_oneapi_level_zero, kernel> {
    kernel_bundle<bundle_state::executable> KernelBundle;
    ze_kernel_handle_t NativeHandle;
    ext::oneapi::level_zero::ownership Ownership;
};
template <>
struct backend_return_t<backend::ext_oneapi_level_zero, device> {
    using type = ze_device_handle_t;
};
template <>
struct backend_return_t<backend::ext_oneapi_level_zero, context> {
    using type = ze_context_handle_t;
};
}  // namespace _V1
}  // namespace sycl
