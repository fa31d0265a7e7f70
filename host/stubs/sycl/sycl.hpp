// Stub of SYCL 2020 (sycl/sycl.hpp), the part Kiln's xpu driver text uses:
// declarations only. See README.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace sycl {
inline namespace _V1 {
enum class backend { ext_oneapi_level_zero, opencl };
enum class bundle_state { input, object, executable };

template <int Dims>
class range {
public:
    range(size_t d0);
    range(size_t d0, size_t d1);
    range(size_t d0, size_t d1, size_t d2);
};
template <int Dims>
class nd_range {
public:
    nd_range(range<Dims> global, range<Dims> local);
};

class context;
class platform {
public:
    context ext_oneapi_get_default_context() const;
};
namespace info {
enum class device_type { cpu, gpu, accelerator, custom, automatic, host, all };
}  // namespace info
class device {
public:
    template <typename Selector>
    explicit device(const Selector& selector);
    platform get_platform() const;
    static std::vector<device> get_devices(info::device_type type = info::device_type::all);
};
class context {};

namespace info {
namespace kernel {
struct num_args {
    using return_type = uint32_t;
};
}  // namespace kernel
namespace kernel_device_specific {
struct compile_sub_group_size {
    using return_type = uint32_t;
};
}  // namespace kernel_device_specific
}  // namespace info

class kernel {
public:
    template <typename Param>
    typename Param::return_type get_info() const;
    template <typename Param>
    typename Param::return_type get_info(const device& dev) const;
};
template <bundle_state State>
class kernel_bundle {};

class handler;
template <typename T, int Dims>
class local_accessor {
public:
    local_accessor(range<Dims> size, handler& cgh);
};
class handler {
public:
    template <typename T>
    void set_arg(int index, T&& arg);
    template <int Dims>
    void parallel_for(nd_range<Dims> range, const kernel& k);
};
class event {
public:
    void wait();
};
class queue {
public:
    queue(const context& ctx, const device& dev);
    // Defined (a lambda of local type must be): runs the command group on a
    // handler that records nothing.
    template <typename F>
    event submit(F f) {
        handler cgh;
        f(cgh);
        return event{};
    }
    event memcpy(void* dst, const void* src, size_t bytes);
    void wait();
    device get_device() const;
    context get_context() const;
};

void* malloc_device(size_t bytes, const queue& q);
void free(void* ptr, const queue& q);

template <backend B, typename T>
struct backend_input_t;
template <backend B, typename T>
struct backend_return_t;
template <backend B, typename T>
typename backend_return_t<B, T>::type get_native(const T& object);
template <backend B, bundle_state State>
kernel_bundle<State> make_kernel_bundle(
    const backend_input_t<B, kernel_bundle<State>>& input, const context& ctx);
template <backend B>
kernel make_kernel(const backend_input_t<B, kernel>& input, const context& ctx);
}  // namespace _V1
}  // namespace sycl
