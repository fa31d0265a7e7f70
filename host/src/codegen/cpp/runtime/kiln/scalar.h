// Kiln's cpu runtime: scalar helpers every generated kernel may call.
// float16/bfloat16 conversions, NaN-propagating maximum and minimum,
// branch-free float exp/tanh/erf/sigmoid that vectorise inside `omp simd`
// loops, index wrapping that records a fault instead of trapping, integer
// and floating division as PyTorch defines it, and integer powers.
#pragma once
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

// float16 / bfloat16 <-> float, round to nearest even (no external dependency).
static inline float kiln_bits_f(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline uint32_t kiln_f_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
static inline float kiln_h2f(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t man = h & 0x3ffu;
    if (exp == 0x1fu) return kiln_bits_f(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        const float v = static_cast<float>(man) * 5.9604644775390625e-8f;
        return (sign != 0) ? -v : v;
    }
    return kiln_bits_f(sign | ((exp + 112u) << 23) | (man << 13));
}
static inline uint16_t kiln_f2h(float f) {
    const uint32_t u = kiln_f_bits(f);
    const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
    if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
    if (a < 0x38800000u) {
        // Subnormal or zero: let the FPU round |f| * 2^24 to an integer (nearest even).
        const float v = kiln_bits_f(a) * 16777216.0f;
        return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(v)));
    }
    const uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}
static inline float kiln_bf2f(uint16_t h) { return kiln_bits_f(static_cast<uint32_t>(h) << 16); }
static inline uint16_t kiln_f2bf(float f) {
    const uint32_t u = kiln_f_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
    return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// maximum/minimum propagate NaN, as torch.maximum/torch.minimum do.
template <typename T> static inline T kiln_maximum(T a, T b) {
    if (a != a) return a;
    if (b != b) return b;
    return a > b ? a : b;
}
template <typename T> static inline T kiln_minimum(T a, T b) {
    if (a != a) return a;
    if (b != b) return b;
    return a < b ? a : b;
}
// exp in float: Cody-Waite reduction x = n*ln2 + r (|r| <= ln2/2), a degree-6
// polynomial for e^r (within about 1 ulp of the exact result), then 2^n applied
// in two halves so that subnormal results and overflow to infinity come out
// right. Straight-line code: selects, no calls, n read from the rounded sum's
// bits. Compilers vectorise it inside `omp simd` loops when floating-point
// operations may be speculated (-fno-trapping-math, in Kiln's default flags).
static inline float kiln_exp(float x) {
    // NaN passes through both clamps: every comparison with it is false.
    const float lo = x < -104.0f ? -104.0f : x;
    const float xc = lo > 89.0f ? 89.0f : lo;
    const float big = 12582912.0f; // 1.5 * 2^23: adding it rounds to an integer
    const float t = xc * 1.44269504088896341f + big;
    const float n = t - big;
    const float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    // n in [-150, 129] as a two's-complement integer: t's bits less big's.
    const uint32_t ni = kiln_f_bits(t) - kiln_f_bits(big);
    const uint32_t n1 = static_cast<uint32_t>(static_cast<int32_t>(ni) >> 1);
    const uint32_t n2 = ni - n1;
    return p * kiln_bits_f((n1 + 127u) << 23) * kiln_bits_f((n2 + 127u) << 23);
}
static inline double kiln_exp(double x) { return std::exp(x); }
// tanh in float, branch-free like kiln_exp: an odd polynomial below 0.625
// (where 1 - 2/(e^2x + 1) would cancel), the exp form above; both are
// computed and one is selected. exp(2|x|) overflowing gives exactly +-1.
static inline float kiln_tanh(float x) {
    const float a = std::fabs(x);
    const float big = 1.0f - 2.0f / (kiln_exp(2.0f * a) + 1.0f);
    const float z = x * x;
    const float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z
                          + 1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
    return a > 0.625f ? std::copysign(big, x) : small;
}
static inline double kiln_tanh(double x) { return std::tanh(x); }
// erf in float: the odd rational approximation x * P(x^2) / Q(x^2) on
// [-4, 4] that Eigen and XLA use (erf is +-1 in float beyond), clamped to
// [-1, 1]: within 8 ulp (an absolute error below 5e-7, worst near +-2.9),
// branch-free, NaN passes through the clamps.
static inline float kiln_erf(float x) {
    const float lo = x < -4.0f ? -4.0f : x;
    const float xc = lo > 4.0f ? 4.0f : lo;
    const float z = xc * xc;
    float p = -2.72614225801306e-10f;
    p = p * z + 2.77068142495902e-08f;
    p = p * z - 2.10102402082508e-06f;
    p = p * z - 5.69250639462346e-05f;
    p = p * z - 7.34990630326855e-04f;
    p = p * z - 2.95459980854025e-03f;
    p = p * z - 1.60960333262415e-02f;
    float q = -1.45660718464996e-05f;
    q = q * z - 2.13374055278905e-04f;
    q = q * z - 1.68282697438203e-03f;
    q = q * z - 7.37332916720468e-03f;
    q = q * z - 1.42647390514189e-02f;
    const float r = xc * (p / q);
    const float r_lo = r < -1.0f ? -1.0f : r;
    return r_lo > 1.0f ? 1.0f : r_lo;
}
static inline double kiln_erf(double x) { return std::erf(x); }
// sigmoid from e = exp(-|a|), which never overflows: 1/(1+e) for a >= 0 and
// e/(1+e) below, so that tiny results (down to subnormals) stay accurate.
static inline float kiln_sigmoid(float a) {
    const float e = kiln_exp(-std::fabs(a));
    const float s = 1.0f / (1.0f + e);
    return a >= 0.0f ? s : e * s;
}
static inline double kiln_sigmoid(double a) {
    const double e = std::exp(-std::fabs(a));
    const double s = 1.0 / (1.0 + e);
    return a >= 0.0 ? s : e * s;
}
// An index read from a tensor (index, gather): wrapped once if negative; one
// still out of range reads element 0 instead and raises the fault kiln_call reports.
static std::atomic<int> kiln_fault{0};
static inline int64_t kiln_index(int64_t i, int64_t size) {
    const int64_t w = i < 0 ? i + size : i;
    if (w < 0 || w >= size) {
        kiln_fault.store(1, std::memory_order_relaxed);
        return 0;
    }
    return w;
}
// An embedding's index: as kiln_index, but a negative one is out of range (PyTorch's
// embedding counts no index from the end).
static inline int64_t kiln_index_nonnegative(int64_t i, int64_t size) {
    if (i < 0 || i >= size) {
        kiln_fault.store(1, std::memory_order_relaxed);
        return 0;
    }
    return i;
}
// A sort's order (PyTorch's): NaN the largest, -0.0 equal to 0.0; `descending` reverses
// it. Equal elements are left to the caller's stable sort.
template <typename T> static inline bool kiln_sorts_before(T a, T b, bool descending) {
    const bool an = a != a, bn = b != b;
    if (an || bn) return descending ? (an && !bn) : (!an && bn);
    return descending ? b < a : a < b;
}
template <typename T> static inline T kiln_divtrunc(T a, T b) { return b == 0 ? T(0) : T(a / b); }
template <typename T> static inline T kiln_divfloor(T a, T b) {
    if (b == 0) return T(0);
    T q = T(a / b);
    if ((a % b != 0) && ((a < 0) != (b < 0))) q = T(q - 1);
    return q;
}
// Floating floor division as PyTorch computes it: the quotient of a minus its exact
// remainder, so that 1 // 0.1 is 9 (plain floor(1 / 0.1) gives 10).
template <typename T> static inline T kiln_divfloor_float(T a, T b) {
    if (b == 0) return a / b;
    T mod = std::fmod(a, b);
    T div = (a - mod) / b;
    if ((mod != 0) && ((b < 0) != (mod < 0))) div -= T(1);
    if (div == 0) return std::copysign(T(0), a / b);
    T floordiv = std::floor(div);
    if (div - floordiv > T(0.5)) floordiv += T(1);
    return floordiv;
}
template <typename T> static inline bool kiln_isnan(T v) { return v != v; }
// Integer power by squaring (wrapping like PyTorch's); a negative exponent, which
// PyTorch refuses for integers, gives 1/base truncated: 1, -1 or 0.
template <typename T> static inline T kiln_ipow(T base, T exp) {
    if (exp < 0) return base == 1 ? T(1) : base == -1 ? T((exp & 1) ? -1 : 1) : T(0);
    using U = typename std::make_unsigned<T>::type;
    U result = 1, b = U(base);
    while (exp > 0) {
        if (exp & 1) result = U(result * b);
        b = U(b * b);
        exp >>= 1;
    }
    return T(result);
}
