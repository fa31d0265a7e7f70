// Kiln's cpu runtime: kiln_copy_out, which gathers a strided view into
// dense row-major memory (an output that is a view of a buffer).
#pragma once
#include <cstdint>
#include <cstring>

[[maybe_unused]] static void kiln_copy_out(void* dst, const void* src, int64_t elem, int ndim,
                          const int64_t* shape, const int64_t* strides, int64_t offset) {
    int64_t numel = 1;
    for (int d = 0; d < ndim; ++d) numel *= shape[d];
    unsigned char* out = static_cast<unsigned char*>(dst);
    const unsigned char* in = static_cast<const unsigned char*>(src);
    for (int64_t i = 0; i < numel; ++i) {
        int64_t rem = i;
        int64_t off = offset;
        for (int d = ndim - 1; d >= 0; --d) {
            off += (rem % shape[d]) * strides[d];
            rem /= shape[d];
        }
        std::memcpy(out + i * elem, in + off * elem, static_cast<size_t>(elem));
    }
}
