//! The C++ written once at the top of every generated `wrapper.cpp`, after the
//! plugin's `kernel_header`: half-precision conversions, NaN-propagating
//! maximum and minimum, integer division that never traps, and the blocked
//! matrix product that extern `mm`/`bmm` calls run.
//!
//! Plain text: no names from input files ever reach it.

/// Helpers every kernel may call.
pub const HELPERS: &str = r#"
// What the prelude itself uses, whatever the plugin's header includes.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <tuple>
#include <type_traits>
#include <vector>
#if defined(__AVX__)
#include <immintrin.h>
#endif
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
// An index read from a tensor (embedding, index, gather): wrapped once if negative; one
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

// Scratch of at least this many bytes is rounded up to whole 2 MiB pages and,
// on Linux, asked to be backed by transparent huge pages (madvise): a matrix
// product's packed blocks are then physically contiguous, so they map evenly
// onto the cache's sets and need few TLB entries. On two Sapphire Rapids
// cores (THP in madvise mode) Kiln's 2048^3 and 1024x4096x1024 products ran
// 0.84-0.88 of torch.mm's speed so, against 0.78-0.86 without, faster in 5
// of 6 pairs. The cost: a thread's packed block of b (512 KiB on that machine)
// takes a whole 2 MiB page. -DKILN_ARENA_HUGE_PAGES=0 keeps 64-byte-aligned
// 4 KiB pages.
#ifndef KILN_ARENA_HUGE_PAGES
#define KILN_ARENA_HUGE_PAGES 1
#endif
#if KILN_ARENA_HUGE_PAGES && defined(__linux__)
#include <sys/mman.h>
#endif
constexpr size_t kKilnHugePage = size_t(2) << 20;
constexpr size_t kKilnHugeScratch = size_t(256) << 10;

#if defined(__AVX512F__)
// GCC's AVX-512 intrinsics start from an undefined vector that -Wall reports
// as maybe used uninitialized once inlined (GCC bug 105593): not so here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// d[c * ldd + r] = s[r * lds + c] for a 16 x 16 block of floats: sixteen
// rows in, sixteen columns out, in 64 shuffles (pairs unpacked, then 4-row
// groups shuffled within each 128-bit lane, then the lanes exchanged twice).
static inline void kiln_transpose_16x16(const float* s, int64_t lds, float* d, int64_t ldd) {
    __m512 r[16], t[16], u[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(s + i * lds);
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    // u[4 * g + e], 128-bit lane l: rows 4g .. 4g + 3 of column 4l + e.
    for (int g = 0; g < 4; ++g) {
        u[4 * g] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
        u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
        u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
        u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
    }
    for (int e = 0; e < 4; ++e) {
        const __m512 v0 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0x88), v1 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0xDD);
        const __m512 w0 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0x88);
        const __m512 w1 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0xDD);
        _mm512_storeu_ps(d + e * ldd, _mm512_shuffle_f32x4(v0, w0, 0x88));
        _mm512_storeu_ps(d + (4 + e) * ldd, _mm512_shuffle_f32x4(v1, w1, 0x88));
        _mm512_storeu_ps(d + (8 + e) * ldd, _mm512_shuffle_f32x4(v0, w0, 0xDD));
        _mm512_storeu_ps(d + (12 + e) * ldd, _mm512_shuffle_f32x4(v1, w1, 0xDD));
    }
}
// d[c * ldd + r] = s[r * lds + c] for an 8 x 8 block of doubles (pairs
// unpacked, then 128-bit lanes exchanged twice).
static inline void kiln_transpose_8x8_pd(const double* s, int64_t lds, double* d, int64_t ldd) {
    __m512d r[8], t[8], u[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm512_loadu_pd(s + i * lds);
    // t[2i] (t[2i + 1]), lane l: rows 2i, 2i + 1 of column 2l (2l + 1).
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm512_unpacklo_pd(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_pd(r[i], r[i + 1]);
    }
    // u[4h + 2p + q]: rows 4h .. 4h + 3 (two lanes each) of columns
    // p * 2 + q and p * 2 + q + 4 (from t's lanes 0, 2 and 1, 3).
    for (int h = 0; h < 2; ++h)
        for (int q = 0; q < 2; ++q) {
            u[4 * h + q] = _mm512_shuffle_f64x2(t[4 * h + q], t[4 * h + 2 + q], 0x88);
            u[4 * h + 2 + q] = _mm512_shuffle_f64x2(t[4 * h + q], t[4 * h + 2 + q], 0xDD);
        }
    for (int q = 0; q < 2; ++q) {
        _mm512_storeu_pd(d + q * ldd, _mm512_shuffle_f64x2(u[q], u[4 + q], 0x88));
        _mm512_storeu_pd(d + (4 + q) * ldd, _mm512_shuffle_f64x2(u[q], u[4 + q], 0xDD));
        _mm512_storeu_pd(d + (2 + q) * ldd, _mm512_shuffle_f64x2(u[2 + q], u[6 + q], 0x88));
        _mm512_storeu_pd(d + (6 + q) * ldd, _mm512_shuffle_f64x2(u[2 + q], u[6 + q], 0xDD));
    }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#elif defined(__AVX__)
// d[c * ldd + r] = s[r * lds + c] for a 4 x 4 block of doubles.
static inline void kiln_transpose_4x4_pd(const double* s, int64_t lds, double* d, int64_t ldd) {
    const __m256d a0 = _mm256_loadu_pd(s), a1 = _mm256_loadu_pd(s + lds);
    const __m256d a2 = _mm256_loadu_pd(s + 2 * lds), a3 = _mm256_loadu_pd(s + 3 * lds);
    const __m256d t0 = _mm256_unpacklo_pd(a0, a1), t1 = _mm256_unpackhi_pd(a0, a1);
    const __m256d t2 = _mm256_unpacklo_pd(a2, a3), t3 = _mm256_unpackhi_pd(a2, a3);
    _mm256_storeu_pd(d, _mm256_permute2f128_pd(t0, t2, 0x20));
    _mm256_storeu_pd(d + ldd, _mm256_permute2f128_pd(t1, t3, 0x20));
    _mm256_storeu_pd(d + 2 * ldd, _mm256_permute2f128_pd(t0, t2, 0x31));
    _mm256_storeu_pd(d + 3 * ldd, _mm256_permute2f128_pd(t1, t3, 0x31));
}
// d[c * ldd + r] = s[r * lds + c] for an 8 x 8 block of floats (unpack,
// shuffle, swap halves).
static inline void kiln_transpose_8x8(const float* s, int64_t lds, float* d, int64_t ldd) {
    const __m256 t0 = _mm256_loadu_ps(s), t1 = _mm256_loadu_ps(s + lds);
    const __m256 t2 = _mm256_loadu_ps(s + 2 * lds), t3 = _mm256_loadu_ps(s + 3 * lds);
    const __m256 t4 = _mm256_loadu_ps(s + 4 * lds), t5 = _mm256_loadu_ps(s + 5 * lds);
    const __m256 t6 = _mm256_loadu_ps(s + 6 * lds), t7 = _mm256_loadu_ps(s + 7 * lds);
    const __m256 u0 = _mm256_unpacklo_ps(t0, t1), u1 = _mm256_unpackhi_ps(t0, t1);
    const __m256 u2 = _mm256_unpacklo_ps(t2, t3), u3 = _mm256_unpackhi_ps(t2, t3);
    const __m256 u4 = _mm256_unpacklo_ps(t4, t5), u5 = _mm256_unpackhi_ps(t4, t5);
    const __m256 u6 = _mm256_unpacklo_ps(t6, t7), u7 = _mm256_unpackhi_ps(t6, t7);
    const __m256 v0 = _mm256_shuffle_ps(u0, u2, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 v1 = _mm256_shuffle_ps(u0, u2, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 v2 = _mm256_shuffle_ps(u1, u3, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 v3 = _mm256_shuffle_ps(u1, u3, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 v4 = _mm256_shuffle_ps(u4, u6, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 v5 = _mm256_shuffle_ps(u4, u6, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 v6 = _mm256_shuffle_ps(u5, u7, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 v7 = _mm256_shuffle_ps(u5, u7, _MM_SHUFFLE(3, 2, 3, 2));
    _mm256_storeu_ps(d, _mm256_permute2f128_ps(v0, v4, 0x20));
    _mm256_storeu_ps(d + ldd, _mm256_permute2f128_ps(v1, v5, 0x20));
    _mm256_storeu_ps(d + 2 * ldd, _mm256_permute2f128_ps(v2, v6, 0x20));
    _mm256_storeu_ps(d + 3 * ldd, _mm256_permute2f128_ps(v3, v7, 0x20));
    _mm256_storeu_ps(d + 4 * ldd, _mm256_permute2f128_ps(v0, v4, 0x31));
    _mm256_storeu_ps(d + 5 * ldd, _mm256_permute2f128_ps(v1, v5, 0x31));
    _mm256_storeu_ps(d + 6 * ldd, _mm256_permute2f128_ps(v2, v6, 0x31));
    _mm256_storeu_ps(d + 7 * ldd, _mm256_permute2f128_ps(v3, v7, 0x31));
}
#endif
#if defined(__AVX2__)
// d[c * ldd + r] = s[r * lds + c] for a 16 x 16 block of 2-byte elements:
// rows paired (16-bit units), then pairs of pairs (32-bit), then fours (64-bit)
// within each 128-bit lane, then the lanes of rows 0-7 and 8-15 joined.
static inline void kiln_transpose_16x16_u16(const uint16_t* s, int64_t lds, uint16_t* d, int64_t ldd) {
    __m256i a[16], b[16], c[16], e[16];
    for (int i = 0; i < 16; ++i) a[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i * lds));
    // b[2i] (b[2i + 1]), lane l: rows 2i, 2i + 1 of columns 8l .. 8l + 3 (8l + 4 .. 8l + 7).
    for (int i = 0; i < 16; i += 2) {
        b[i] = _mm256_unpacklo_epi16(a[i], a[i + 1]);
        b[i + 1] = _mm256_unpackhi_epi16(a[i], a[i + 1]);
    }
    // c[4g + j], lane l: rows 4g .. 4g + 3 of columns 8l + 2j and 8l + 2j + 1.
    for (int g = 0; g < 4; ++g) {
        c[4 * g] = _mm256_unpacklo_epi32(b[4 * g], b[4 * g + 2]);
        c[4 * g + 1] = _mm256_unpackhi_epi32(b[4 * g], b[4 * g + 2]);
        c[4 * g + 2] = _mm256_unpacklo_epi32(b[4 * g + 1], b[4 * g + 3]);
        c[4 * g + 3] = _mm256_unpackhi_epi32(b[4 * g + 1], b[4 * g + 3]);
    }
    // e[8h + k], lane l: rows 8h .. 8h + 7 of column 8l + k.
    for (int h = 0; h < 2; ++h)
        for (int j = 0; j < 4; ++j) {
            e[8 * h + 2 * j] = _mm256_unpacklo_epi64(c[8 * h + j], c[8 * h + 4 + j]);
            e[8 * h + 2 * j + 1] = _mm256_unpackhi_epi64(c[8 * h + j], c[8 * h + 4 + j]);
        }
    for (int k = 0; k < 8; ++k) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + k * ldd), _mm256_permute2x128_si256(e[k], e[8 + k], 0x20));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + (8 + k) * ldd),
                            _mm256_permute2x128_si256(e[k], e[8 + k], 0x31));
    }
}
#endif

// The block transposes this target has for elements of N bytes: the side of
// a block (0: none) and the move of one.
template <int N>
struct KilnBlockTranspose {
    static constexpr int64_t side = 0;
    static void move(const void*, int64_t, void*, int64_t) {}
};
#if defined(__AVX512F__)
template <>
struct KilnBlockTranspose<4> {
    static constexpr int64_t side = 16;
    static void move(const void* s, int64_t lds, void* d, int64_t ldd) {
        kiln_transpose_16x16(static_cast<const float*>(s), lds, static_cast<float*>(d), ldd);
    }
};
template <>
struct KilnBlockTranspose<8> {
    static constexpr int64_t side = 8;
    static void move(const void* s, int64_t lds, void* d, int64_t ldd) {
        kiln_transpose_8x8_pd(static_cast<const double*>(s), lds, static_cast<double*>(d), ldd);
    }
};
#elif defined(__AVX__)
template <>
struct KilnBlockTranspose<4> {
    static constexpr int64_t side = 8;
    static void move(const void* s, int64_t lds, void* d, int64_t ldd) {
        kiln_transpose_8x8(static_cast<const float*>(s), lds, static_cast<float*>(d), ldd);
    }
};
template <>
struct KilnBlockTranspose<8> {
    static constexpr int64_t side = 4;
    static void move(const void* s, int64_t lds, void* d, int64_t ldd) {
        kiln_transpose_4x4_pd(static_cast<const double*>(s), lds, static_cast<double*>(d), ldd);
    }
};
#endif
#if defined(__AVX2__)
template <>
struct KilnBlockTranspose<2> {
    static constexpr int64_t side = 16;
    static void move(const void* s, int64_t lds, void* d, int64_t ldd) {
        kiln_transpose_16x16_u16(static_cast<const uint16_t*>(s), lds, static_cast<uint16_t*>(d), ldd);
    }
};
#endif

// Fetches the `bytes` from `p` towards L1 for writing (a hint: no fault
// whatever the address).
static inline void kiln_prefetch_write(const void* p, int64_t bytes) {
    const char* c = static_cast<const char*>(p);
    for (int64_t l = 0; l < bytes; l += 64) __builtin_prefetch(c + l, 1, 3);
    __builtin_prefetch(c + bytes - 1, 1, 3);
}

// One tile of a transposing copy, staged through registers: dst[c * 32 + r]
// = src[r * lds + c] for r < rows and c < cols (each at most 32), elements of
// 2, 4 or 8 bytes. Whole blocks of one vector a side move as vectors
// (KilnBlockTranspose: 4-byte elements 16 x 16 with AVX-512, 8 x 8 with AVX;
// 8-byte 8 x 8 and 4 x 4; 2-byte 16 x 16 with AVX2: each source line read
// once, whole, and the tile written in whole vectors); the edges, and every
// element on other targets, one at a time. Compilers vectorise no loop that
// reads across the dim it writes along: without the staging a tile moves one
// gathered element at a time, re-reading lines the tile's rows (a page
// apart, one cache set) have evicted.
template <typename T>
static inline void kiln_tile_transpose(const T* __restrict__ src, int64_t lds, T* __restrict__ dst, int64_t rows,
                                       int64_t cols) {
    static_assert(sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8,
                  "kiln_tile_transpose moves 2-, 4- or 8-byte elements");
    using Block = KilnBlockTranspose<int(sizeof(T))>;
    int64_t whole_rows = 0, whole_cols = 0;
    if constexpr (Block::side > 0) {
        constexpr int64_t B = Block::side;
        whole_rows = rows / B * B, whole_cols = cols / B * B;
        for (int64_t r0 = 0; r0 < whole_rows; r0 += B)
            for (int64_t c0 = 0; c0 < whole_cols; c0 += B) Block::move(src + r0 * lds + c0, lds, dst + c0 * 32 + r0, 32);
    }
    for (int64_t r = 0; r < whole_rows; ++r)
        for (int64_t c = whole_cols; c < cols; ++c) dst[c * 32 + r] = src[r * lds + c];
    for (int64_t r = whole_rows; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) dst[c * 32 + r] = src[r * lds + c];
}

// Scratch memory grown on demand, 64-byte aligned, kept between calls and
// freed with its owner (`static thread_local` ones: when the thread exits).
struct KilnArena {
    void* p = nullptr;
    size_t bytes = 0;
    KilnArena() = default;
    KilnArena(const KilnArena&) = delete;
    KilnArena& operator=(const KilnArena&) = delete;
    ~KilnArena() { std::free(p); }
    // At least `want` bytes, or nullptr when memory ran out.
    unsigned char* get(size_t want) {
        want = (want + 63) / 64 * 64;
        if (bytes < want) {
            std::free(p);
#if KILN_ARENA_HUGE_PAGES && defined(__linux__) && defined(MADV_HUGEPAGE)
            if (want >= kKilnHugeScratch) {
                const size_t whole = (want + kKilnHugePage - 1) / kKilnHugePage * kKilnHugePage;
                p = std::aligned_alloc(kKilnHugePage, whole);
                // Only advice: memory without huge pages works the same.
                if (p != nullptr) (void)madvise(p, whole, MADV_HUGEPAGE);
                bytes = p != nullptr ? whole : 0;
                return static_cast<unsigned char*>(p);
            }
#endif
            p = std::aligned_alloc(64, want);
            bytes = p != nullptr ? want : 0;
        }
        return static_cast<unsigned char*>(p);
    }
};

// A vector of L partial results of a row reduction, one per lane, that the
// compiler keeps in registers across a row loop (an array it keeps in memory:
// each step would wait on the last one's store). Each step takes the lanes'
// new values from an array the step's `omp simd` loop wrote; a float max or
// min also notes, per lane, whether it saw a NaN (KilnNans). After the row,
// `kiln_lanes_store` hands them to the pairwise combination. GCC and clang:
// their vector extensions; elsewhere plain arrays.
#if defined(__GNUC__) || defined(__clang__)
template <typename T, int L>
struct KilnLanes {
    typedef T V __attribute__((vector_size(sizeof(T) * L)));
    V v;
};
template <typename T, int L>
struct KilnNans {
    typedef typename KilnLanes<T, L>::V V;
    typedef decltype(V{} != V{}) M;
    M m;
};
// (Vectors pass by reference only: returned by value, they would change the
// ABI with the machine's vector width, which GCC warns of.)
template <typename T, int L>
static inline void kiln_lanes_load(typename KilnLanes<T, L>::V& t, const T* p) {
    std::memcpy(&t, p, sizeof(t));
}
template <typename T, int L>
static inline void kiln_lanes_fill(KilnLanes<T, L>& a, T x) {
    for (int l = 0; l < L; ++l) a.v[l] = x;
}
template <typename T, int L>
static inline void kiln_nans_none(KilnNans<T, L>& n) {
    n.m = typename KilnNans<T, L>::M{};
}
template <typename T, int L>
static inline void kiln_lanes_sum(KilnLanes<T, L>& a, const T* p) {
    typename KilnLanes<T, L>::V t;
    kiln_lanes_load<T, L>(t, p);
    a.v += t;
}
template <typename T, int L>
static inline void kiln_lanes_max(KilnLanes<T, L>& a, const T* p) {
    typename KilnLanes<T, L>::V t;
    kiln_lanes_load<T, L>(t, p);
    a.v = t > a.v ? t : a.v;
}
template <typename T, int L>
static inline void kiln_lanes_min(KilnLanes<T, L>& a, const T* p) {
    typename KilnLanes<T, L>::V t;
    kiln_lanes_load<T, L>(t, p);
    a.v = t < a.v ? t : a.v;
}
template <typename T, int L>
static inline void kiln_lanes_nans(KilnNans<T, L>& n, const T* p) {
    typename KilnLanes<T, L>::V t;
    kiln_lanes_load<T, L>(t, p);
    n.m |= t != t;
}
template <typename T, int L>
static inline void kiln_lanes_store(T* p, const KilnLanes<T, L>& a) { std::memcpy(p, &a.v, sizeof(a.v)); }
template <typename T, int L>
static inline void kiln_nans_store(int* p, const KilnNans<T, L>& n) {
    for (int l = 0; l < L; ++l) p[l] = n.m[l] != 0;
}
#else
template <typename T, int L>
struct KilnLanes {
    T v[L];
};
template <typename T, int L>
struct KilnNans {
    int m[L];
};
template <typename T, int L>
static inline void kiln_lanes_fill(KilnLanes<T, L>& a, T x) {
    for (int l = 0; l < L; ++l) a.v[l] = x;
}
template <typename T, int L>
static inline void kiln_nans_none(KilnNans<T, L>& n) {
    for (int l = 0; l < L; ++l) n.m[l] = 0;
}
template <typename T, int L>
static inline void kiln_lanes_sum(KilnLanes<T, L>& a, const T* p) { for (int l = 0; l < L; ++l) a.v[l] += p[l]; }
template <typename T, int L>
static inline void kiln_lanes_max(KilnLanes<T, L>& a, const T* p) {
    for (int l = 0; l < L; ++l) a.v[l] = p[l] > a.v[l] ? p[l] : a.v[l];
}
template <typename T, int L>
static inline void kiln_lanes_min(KilnLanes<T, L>& a, const T* p) {
    for (int l = 0; l < L; ++l) a.v[l] = p[l] < a.v[l] ? p[l] : a.v[l];
}
template <typename T, int L>
static inline void kiln_lanes_nans(KilnNans<T, L>& n, const T* p) {
    for (int l = 0; l < L; ++l) n.m[l] |= p[l] != p[l];
}
template <typename T, int L>
static inline void kiln_lanes_store(T* p, const KilnLanes<T, L>& a) { for (int l = 0; l < L; ++l) p[l] = a.v[l]; }
template <typename T, int L>
static inline void kiln_nans_store(int* p, const KilnNans<T, L>& n) { for (int l = 0; l < L; ++l) p[l] = n.m[l]; }
#endif

"#;

/// The blocked matrix product. `out[b, i, j] = sum_k a[b, i, k] * b[b, k, j]`
/// over strided operands (any strides), written contiguously, in the
/// GotoBLAS/BLIS arrangement (BLIS's operands swapped: here the result's rows
/// are contiguous, so the vectors run along `b`'s columns):
///
/// - panels of at most `KILN_MM_MC` rows of `a` are packed once for a chunk
///   of steps of `KILN_MM_KC` of the shared dimension (32 MiB at most, all
///   steps where that holds them: one phase between barriers), shared by
///   every thread (they live in the last-level cache), in slivers
///   `KILN_MM_MR` rows high;
/// - each task owns a block of the result (a panel's rows, or part of them,
///   by at most `KILN_MM_NC` columns: narrower where that gives each thread
///   `KILN_MM_TASKS_PER_THREAD` tasks) and runs every step of the chunk on it, so that
///   the block stays in its core's L2 cache between steps: per step it packs
///   `KILN_MM_KC` by `KILN_MM_NC` of `b` for itself (also in L2) in slivers
///   `KILN_MM_NR` columns wide, zero-padded, and runs each sliver of its rows
///   of `a` (held in L1) against all of them;
/// - the micro-kernel keeps an `MR` x `NR` block of accumulators in
///   registers, in vectors of `KILN_MM_VBYTES` bytes along the columns, and
///   adds it into the result (or, for a result stored narrower than it is
///   summed, into float partial sums converted after the last step).
///
/// Many small products (a batch of attention heads) run one whole product per
/// thread instead. The tile sizes are the device's numbers, and only the
/// device's: the plugin's `kernel_header` defines every `KILN_MM_*` macro for
/// its SIMD width and caches, and the prelude refuses to build without them.
pub const MATMUL: &str = r#"
// Rows of b the packing of b fetches ahead of the row it copies: each row it
// reads is a short run in a page of its own, which the hardware prefetchers
// do not follow in time. On two Sapphire Rapids cores, 2048^2 and
// 1024x4096x1024 ran at 0.90 and 0.82 of torch.mm's speed against 0.80 and
// 0.81 without (and, with a packed through tiles too, at 0.93 and 0.89
// against 0.92 and 0.87 on another machine instance); 8 rows ahead was no
// better, sliver by sliver or (later) row by row across a block. 0 turns it
// off.
#ifndef KILN_MM_PACK_AHEAD
#define KILN_MM_PACK_AHEAD 4
#endif
// Tasks per thread each shared panel's work is cut into, by narrowing the
// blocks of b's columns (never below two slivers): a thread that a noisy
// neighbour slows leaves the others at most one small task to wait for at
// the panel's barrier, and packing b costs no more (each column block is
// still packed once per panel and step). On two Sapphire Rapids cores, 8
// with the even chunks and the 32 MiB phases below ran 2048^2,
// 1024x4096x1024, 1000x999x1001 and 1024^3 at 0.90 of torch.mm's speed in the
// mean of five runs against 0.86 with 256-column blocks, 8 MiB and uneven
// chunks (faster in 19 of 20 pairs); 8 tasks against 1 alone: 0.83-0.84
// against 0.82-0.83 (five runs; within the machine's noise).
#ifndef KILN_MM_TASKS_PER_THREAD
#define KILN_MM_TASKS_PER_THREAD 8
#endif
// Whether a panel of a takes more rows where the tasks' blocks of b's columns
// are narrower than KILN_MM_NC (see kiln_mm_into): b is packed once per
// panel, and 1024 rows made two panels of 516. On two Sapphire Rapids cores,
// over two runs of 1024^3, 2048^3 and 1024x4096x1024 and one of
// 4096x1024x1024 and 1536^3, against panels of at most
// KILN_MM_MC rows: 1024^3 0.90 and 0.82 of torch.mm's speed against 0.82 and
// 0.83, the others within -0.01..+0.02 (mean +0.015). 0 keeps KILN_MM_MC.
#ifndef KILN_MM_PANEL_SCALE
#define KILN_MM_PANEL_SCALE 1
#endif
#if !defined(KILN_MM_MR) || !defined(KILN_MM_NR) || !defined(KILN_MM_MC) || !defined(KILN_MM_KC) \
    || !defined(KILN_MM_NC) || !defined(KILN_MM_VBYTES)
#error "the device plugin's kernel_header must define the matrix-product tiles KILN_MM_MR, KILN_MM_NR, KILN_MM_MC, KILN_MM_KC, KILN_MM_NC and KILN_MM_VBYTES"
#endif

// Whether the micro-kernel fetches another sliver of a (`ahead`) towards L2
// as it goes, one prefetch per step of k: the first pass over a sliver fetches
// the next one, which otherwise comes from the last-level cache (the shared
// panel) in runs the hardware prefetchers restart at every 4 KiB. On two
// Sapphire Rapids cores, over 17 pairs of 2048^3, 1024x4096x1024,
// 1000x999x1001 and 1024^3 products: 0.92 of torch.mm's speed against 0.89
// without (faster in 13, slower in 3; the long shared dimension 0.84-0.95
// against 0.82-0.94). 0 turns it off.
#ifndef KILN_MM_PREFETCH_A
#define KILN_MM_PREFETCH_A 1
#endif
// One R x NR block of the result: c (row stride ldc) = ap (the first R rows
// of an MR-row sliver of a, k-major) * bp (an NR-column sliver of b,
// k-major), plus what c holds unless this is the first step of the shared
// dimension; c's first `rows` x `cols` only. R is MR, or MR / 2 for a last
// sliver of half as many rows or fewer (a product of 16 rows in slivers of 12
// computes 18, not 24). `ahead`: an MR-row sliver of a, `kc` long, fetched
// towards L2 meanwhile (`ap` itself when there is none to fetch).
template <typename Acc, int R = KILN_MM_MR>
static inline void kiln_mm_micro(int64_t kc, const Acc* __restrict__ ap, const Acc* __restrict__ bp,
                                 Acc* __restrict__ c, int64_t ldc, bool first, int64_t rows, int64_t cols,
                                 const Acc* ahead) {
    (void)ahead;
    Acc acc[R][KILN_MM_NR];
#if KILN_MM_VBYTES > 0 && (defined(__GNUC__) || defined(__clang__))
    // Explicit vectors of the plugin's width (GCC/clang vector extensions):
    // compilers that would otherwise pick narrower vectors than the machine
    // has (GCC prefers 256 bits on AVX-512 parts) use all of it.
    typedef Acc V __attribute__((vector_size(KILN_MM_VBYTES)));
    constexpr int L = static_cast<int>(KILN_MM_VBYTES / sizeof(Acc));
    if constexpr (L >= 1 && KILN_MM_NR % L == 0) {
        constexpr int NV = KILN_MM_NR / L;
        V vacc[R][NV];
        for (int i = 0; i < R; ++i)
            for (int v = 0; v < NV; ++v) vacc[i][v] = V{};
        // The partial sums this block adds to, fetched towards L2 while it
        // multiplies (their rows are far apart: the hardware prefetchers miss
        // them; +10 % on a Sapphire Rapids Xeon).
        if (!first)
            for (int i = 0; i < R; ++i)
                for (int l = 0; l < KILN_MM_NR * int(sizeof(Acc)); l += 64)
                    __builtin_prefetch(reinterpret_cast<const char*>(c + i * ldc) + l, 1, 2);
        for (int64_t k = 0; k < kc; ++k) {
#if KILN_MM_PREFETCH_A
            __builtin_prefetch(reinterpret_cast<const char*>(ahead + k * KILN_MM_MR), 0, 2);
#endif
            V bv[NV];
            for (int v = 0; v < NV; ++v) std::memcpy(&bv[v], bp + k * KILN_MM_NR + v * L, sizeof(V));
            for (int i = 0; i < R; ++i) {
                const Acc av = ap[k * KILN_MM_MR + i];
                for (int v = 0; v < NV; ++v) vacc[i][v] += av * bv[v];
            }
        }
        // A whole block moves as whole vectors, straight from the registers.
        if (rows == R && cols == KILN_MM_NR) {
            for (int i = 0; i < R; ++i)
                for (int v = 0; v < NV; ++v) {
                    if (!first) {
                        V cv;
                        std::memcpy(&cv, c + i * ldc + v * L, sizeof(V));
                        vacc[i][v] += cv;
                    }
                    std::memcpy(c + i * ldc + v * L, &vacc[i][v], sizeof(V));
                }
            return;
        }
        for (int i = 0; i < R; ++i)
            for (int v = 0; v < NV; ++v) std::memcpy(&acc[i][v * L], &vacc[i][v], sizeof(V));
    } else
#endif
    {
        for (int i = 0; i < R; ++i)
            for (int j = 0; j < KILN_MM_NR; ++j) acc[i][j] = Acc(0);
        for (int64_t k = 0; k < kc; ++k) {
            const Acc* av = ap + k * KILN_MM_MR;
            const Acc* bv = bp + k * KILN_MM_NR;
            for (int i = 0; i < R; ++i) {
#pragma omp simd
                for (int j = 0; j < KILN_MM_NR; ++j) acc[i][j] += av[i] * bv[j];
            }
        }
    }
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) c[i * ldc + j] = first ? acc[i][j] : c[i * ldc + j] + acc[i][j];
}

// Packs one sliver of b whose rows are not contiguous: `cols` (at most NR)
// columns from `base`, k-major, zero-padded to NR. Columns contiguous (b a
// transposed view, as in `linear`): transposed through NR x 8 tiles, so that
// both the reads and the writes run along memory; otherwise each column down k.
template <typename Acc, typename T, typename Load>
static inline void kiln_mm_pack_b(Acc* dst, const T* b, int64_t base, int64_t b_sk, int64_t b_sn,
                                  int64_t kc, int64_t cols, Load load) {
    int64_t k0 = 0;
    if (b_sk == 1 && cols == KILN_MM_NR) {
        constexpr int64_t KB = 8;
        for (; k0 + KB <= kc; k0 += KB) {
            Acc tile[KILN_MM_NR][KB];
            for (int64_t j = 0; j < KILN_MM_NR; ++j)
                for (int64_t kk = 0; kk < KB; ++kk) tile[j][kk] = load(b, base + j * b_sn + k0 + kk);
            for (int64_t kk = 0; kk < KB; ++kk)
                for (int64_t j = 0; j < KILN_MM_NR; ++j) dst[(k0 + kk) * KILN_MM_NR + j] = tile[j][kk];
        }
    }
    for (int64_t j = 0; j < KILN_MM_NR; ++j)
        for (int64_t k = k0; k < kc; ++k)
            dst[k * KILN_MM_NR + j] = j < cols ? load(b, base + j * b_sn + k * b_sk) : Acc(0);
}

// Packs a task's block of b (`kc` x `nc` from `base`) into NR-column slivers,
// the last zero-padded to NR. Rows of b contiguous: row by row across every
// sliver, so that each read is one run of `nc` elements (several cache lines
// fetched together, `KILN_MM_PACK_AHEAD` rows ahead) rather than NR elements
// per pass over all the rows (on Zen 4, 10 GB/s against 7; a ragged last
// sliver, read down its columns, took 28 % of a 100x300x50 product on one
// thread); otherwise sliver by sliver.
template <typename Acc, typename T, typename Load>
static inline void kiln_mm_pack_b_block(Acc* bp, const T* b, int64_t base, int64_t b_sk, int64_t b_sn, int64_t kc,
                                        int64_t nc, Load load) {
    constexpr int64_t NR = KILN_MM_NR;
    if (b_sn == 1) {
        const int64_t whole = nc / NR, tail = nc - whole * NR;
        const int64_t bytes = nc * int64_t(sizeof(T));
        for (int64_t k = 0; k < kc; ++k) {
#if KILN_MM_PACK_AHEAD > 0
            if (k + KILN_MM_PACK_AHEAD < kc) {
                const char* row = reinterpret_cast<const char*>(b + base + (k + KILN_MM_PACK_AHEAD) * b_sk);
                for (int64_t l = 0; l < bytes; l += 64) __builtin_prefetch(row + l, 0, 3);
                __builtin_prefetch(row + bytes - 1, 0, 3);
            }
#endif
            const int64_t r = base + k * b_sk;
            for (int64_t s = 0; s < whole; ++s) {
#pragma omp simd
                for (int64_t j = 0; j < NR; ++j) bp[s * NR * kc + k * NR + j] = load(b, r + s * NR + j);
            }
            if (tail > 0) {
                Acc* dst = bp + whole * NR * kc + k * NR;
                for (int64_t j = 0; j < tail; ++j) dst[j] = load(b, r + whole * NR + j);
                for (int64_t j = tail; j < NR; ++j) dst[j] = Acc(0);
            }
        }
        return;
    }
    for (int64_t s = 0; s * NR < nc; ++s)
        kiln_mm_pack_b<Acc>(bp + s * NR * kc, b, base + s * NR * b_sn, b_sk, b_sn, kc, std::min<int64_t>(NR, nc - s * NR),
                            load);
}

// Packs one sliver of a: `rows` (at most MR) rows from `base`, k-major,
// zero-padded to MR; row by row, or across rows when a's columns are
// contiguous (a transposed view).
template <typename Acc, typename T, typename Load>
static inline void kiln_mm_pack_a(Acc* dst, const T* a, int64_t base, int64_t a_sm, int64_t a_sk,
                                  int64_t kc, int64_t rows, Load load) {
    if (a_sm == 1 && rows == KILN_MM_MR) {
        for (int64_t k = 0; k < kc; ++k)
            for (int64_t i = 0; i < KILN_MM_MR; ++i) dst[k * KILN_MM_MR + i] = load(a, base + k * a_sk + i);
        return;
    }
    int64_t k0 = 0;
    if (a_sk == 1 && rows == KILN_MM_MR) {
        // Rows contiguous: through MR x 16 tiles, read along the rows and
        // written along the sliver, instead of one scattered store per
        // element. On the Sapphire Rapids Xeon this halved the packing's
        // share of a 1024x4096x1024 product (5-7 % to 3 %); on Zen 4 a
        // sliver packs at 8-9 GB/s against 4.5.
        constexpr int64_t KB = 16;
        for (; k0 + KB <= kc; k0 += KB) {
            Acc tile[KILN_MM_MR][KB];
            for (int64_t i = 0; i < KILN_MM_MR; ++i)
                for (int64_t kk = 0; kk < KB; ++kk) tile[i][kk] = load(a, base + i * a_sm + k0 + kk);
            for (int64_t kk = 0; kk < KB; ++kk)
                for (int64_t i = 0; i < KILN_MM_MR; ++i) dst[(k0 + kk) * KILN_MM_MR + i] = tile[i][kk];
        }
    }
    for (int64_t i = 0; i < KILN_MM_MR; ++i)
        for (int64_t k = k0; k < kc; ++k)
            dst[k * KILN_MM_MR + i] = i < rows ? load(a, base + i * a_sm + k * a_sk) : Acc(0);
}

// Threads a product may use: none but the caller's inside a parallel region
// (a convolution's tasks each run their own product).
static inline int64_t kiln_mm_threads() {
#ifdef _OPENMP
    return omp_in_parallel() ? 1 : omp_get_max_threads();
#else
    return 1;
#endif
}

// A product with a few rows (a decode step's one token): packing b would copy
// all of it for a few rows of work, so b is streamed once instead, its columns
// split over the threads. Rows of b contiguous (b_sn == 1): each k adds a[i, k]
// times a row piece of b into a block of accumulators; columns contiguous
// (b_sk == 1, a transposed weight as in `linear`): each result is one dot
// product down k.
constexpr int64_t kKilnMmFewRows = 4;
template <typename Acc, typename T, typename Load, typename Store>
static void kiln_mm_few_rows(int64_t batch, int64_t M, int64_t N, int64_t K,
                             const T* a, int64_t a_off, int64_t a_sb, int64_t a_sm, int64_t a_sk,
                             const T* b, int64_t b_off, int64_t b_sb, int64_t b_sk, int64_t b_sn,
                             T* out, int64_t ldo, Load load, Store store) {
    constexpr int64_t JB = 256;
    const int64_t threads = kiln_mm_threads();
    // Column blocks of at most JB, at least one per thread where N allows.
    const int64_t jb = std::max<int64_t>(16, std::min<int64_t>(JB, ((N + threads - 1) / threads + 15) / 16 * 16));
    const int64_t blocks = (N + jb - 1) / jb;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t bi = 0; bi < batch; ++bi) {
        for (int64_t blk = 0; blk < blocks; ++blk) {
            const int64_t j0 = blk * jb;
            const int64_t jn = std::min<int64_t>(jb, N - j0);
            for (int64_t i = 0; i < M; ++i) {
                const int64_t ao = a_off + bi * a_sb + i * a_sm;
                const int64_t bo = b_off + bi * b_sb + j0 * b_sn;
                const int64_t oo = (bi * M + i) * ldo + j0;
                if (b_sn == 1) {
                    Acc acc[JB];
                    for (int64_t j = 0; j < jn; ++j) acc[j] = Acc(0);
                    for (int64_t k = 0; k < K; ++k) {
                        const Acc av = load(a, ao + k * a_sk);
                        const int64_t row = bo + k * b_sk;
#pragma omp simd
                        for (int64_t j = 0; j < jn; ++j) acc[j] += av * load(b, row + j);
                    }
                    for (int64_t j = 0; j < jn; ++j) store(out, oo + j, acc[j]);
                } else {
                    for (int64_t j = 0; j < jn; ++j) {
                        const int64_t col = bo + j * b_sn;
                        Acc sum = Acc(0);
                        if (a_sk == 1) {
                            // Both operands contiguous: plain vector loads, no gather.
#pragma omp simd reduction(+ : sum)
                            for (int64_t k = 0; k < K; ++k) sum += load(a, ao + k) * load(b, col + k);
                        } else {
#pragma omp simd reduction(+ : sum)
                            for (int64_t k = 0; k < K; ++k) sum += load(a, ao + k * a_sk) * load(b, col + k);
                        }
                        store(out, oo + j, sum);
                    }
                }
            }
        }
    }
}

// The float partial sums of one panel of a result stored narrower than its
// accumulation type: converted into `out` after the last step.
constexpr int64_t kKilnMmSumsBytes = int64_t(32) << 20;
// The most bytes of a's packed panels in one phase of the product, all steps
// of a chunk of the shared dimension together (shared by every thread from the
// last-level cache).
#ifndef KILN_MM_PANEL_BYTES
#define KILN_MM_PANEL_BYTES (int64_t(32) << 20)
#endif
constexpr int64_t kKilnMmPanelBytes = KILN_MM_PANEL_BYTES;

// One task of one step of the shared dimension (k0 .. k0 + kc): b's columns
// [j0, j0 + nc) packed into `bp`, then slivers [is0, is1) of the packed panel
// `ap` (rows m0 .. m0 + mp of batch entry bi) against each of b's slivers,
// added into `sums` (row stride ld; `out` itself when T is Acc); after the
// last step, sums of a narrower T converted into `out` (row stride ldo).
template <typename Acc, typename T, typename Load, typename Store>
static inline void kiln_mm_task(int64_t bi, int64_t M, int64_t ldo, int64_t m0, int64_t mp, int64_t k0,
                                int64_t kc, bool last, int64_t j0, int64_t nc, int64_t is0, int64_t is1,
                                const Acc* ap, Acc* bp, Acc* sums, int64_t ld, const T* b, int64_t b_off,
                                int64_t b_sb, int64_t b_sk, int64_t b_sn, T* out, Load load, Store store) {
    constexpr int64_t MR = KILN_MM_MR, NR = KILN_MM_NR;
    const int64_t slivers = (nc + NR - 1) / NR;
    kiln_mm_pack_b_block<Acc>(bp, b, b_off + bi * b_sb + k0 * b_sk + j0 * b_sn, b_sk, b_sn, kc, nc, load);
    // One sliver of a stays in L1 while b's slivers stream past from L2.
    for (int64_t is = is0; is < is1; ++is) {
        const int64_t rows = std::min<int64_t>(MR, mp - is * MR);
        for (int64_t s = 0; s < slivers; ++s) {
            Acc* c = sums + is * MR * ld + j0 + s * NR;
            const int64_t cols = std::min<int64_t>(NR, nc - s * NR);
            // The first pass over a sliver of a also fetches the next one
            // towards L2 (the later passes fetch their own, from L1).
            const Acc* ahead = ap + (s == 0 && is + 1 < is1 ? is + 1 : is) * MR * kc;
            if constexpr (MR >= 4) {
                if (rows <= MR / 2) {
                    kiln_mm_micro<Acc, int(MR / 2)>(kc, ap + is * MR * kc, bp + s * NR * kc, c, ld, k0 == 0, rows,
                                                    cols, ahead);
                    continue;
                }
            }
            kiln_mm_micro<Acc>(kc, ap + is * MR * kc, bp + s * NR * kc, c, ld, k0 == 0, rows, cols, ahead);
        }
    }
    if constexpr (!std::is_same<T, Acc>::value) {
        if (last) {
            const int64_t r1 = std::min<int64_t>(is1 * MR, mp);
            for (int64_t r = is0 * MR; r < r1; ++r)
                for (int64_t j = j0; j < j0 + nc; ++j) store(out, (bi * M + m0 + r) * ldo + j, sums[r * ld + j]);
        }
    } else {
        (void)M, (void)m0, (void)last, (void)out, (void)store;
    }
}

// A BLAS library's cblas_sgemm / cblas_dgemm, for the float32 and float64
// products where the device plugin allows it (its kernel_header defines
// KILN_MM_BLAS 1) and one is found when the first product runs:
// `$KILN_BLAS` (a library, or several separated by ':', loaded with dlopen),
// else the first of KILN_MM_BLAS_LIBRARIES (the plugin's choice, or the
// list below) that loads and exports cblas_sgemm.
// KILN_BLAS=off (or 0, or empty) keeps Kiln's own product. A KILN_BLAS that
// names nothing loadable is reported once on stderr, and Kiln's own product
// runs. The library's threads are set to Kiln's (OpenBLAS, MKL, BLIS).
#ifndef KILN_MM_BLAS
#define KILN_MM_BLAS 0
#endif
// Products of fewer multiply-adds (M x N x K) than this stay Kiln's own: on
// two Sapphire Rapids cores, with the system's OpenBLAS, 256^3 and 384^3 ran
// alike either way (0.73-0.75 and 0.85-0.86 of torch.mm's speed), 512^3
// faster through the library (0.91-0.97 against 0.87-0.88, two runs on a
// machine whose timings move by 10 % between processes).
#ifndef KILN_MM_BLAS_MIN
#define KILN_MM_BLAS_MIN (int64_t(1) << 27)
#endif
#if KILN_MM_BLAS
#include <dlfcn.h>
#include <climits>
#include <cstdio>
typedef void (*KilnSgemm)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*,
                          int);
typedef void (*KilnDgemm)(int, int, int, int, int, int, double, const double*, int, const double*, int, double,
                          double*, int);
struct KilnBlas {
    KilnSgemm sgemm = nullptr;
    KilnDgemm dgemm = nullptr;
};
// By default MKL's single dynamic library, OpenBLAS, BLIS, FlexiBLAS (which
// forwards to the system's chosen BLAS); a plugin's header may name fewer
// (the cpu plugin's, on hosts where its own kernel measures at or above
// OpenBLAS). Not libblas.so.3: that may be the unoptimised reference BLAS.
#ifndef KILN_MM_BLAS_LIBRARIES
#define KILN_MM_BLAS_LIBRARIES \
    "libmkl_rt.so.2:libmkl_rt.so:libopenblas.so.0:libopenblas.so:libblis.so.4:libblis.so:libflexiblas.so.3"
#endif
static const char* const kKilnBlasLibraries = KILN_MM_BLAS_LIBRARIES;
// Whether `gemm` (a cblas_?gemm) computes a small product exactly right, with
// either operand transposed, leading dimensions wider than the operands and
// a result full of NaN beforehand (beta 0 must not read it). A library that
// does not (one built for 64-bit integers under the usual names, say) is not
// used: a wrong call would be a wrong answer or a crash.
template <typename T, typename Gemm>
static bool kiln_blas_probe(Gemm gemm) {
    constexpr int M = 3, N = 4, K = 2, LDA = 3, LDB = 5, LDC = 6;
    constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
    T a[M * LDA], at[K * (M + 1)], b[K * LDB], bt[N * (K + 1)], want[M * N];
    for (int i = 0; i < M; ++i)
        for (int k = 0; k < K; ++k) a[i * LDA + k] = at[k * (M + 1) + i] = T(1 + i + 2 * k);
    for (int k = 0; k < K; ++k)
        for (int j = 0; j < N; ++j) b[k * LDB + j] = bt[j * (K + 1) + k] = T(j - 3 * k);
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            T sum = T(0);
            for (int k = 0; k < K; ++k) sum += a[i * LDA + k] * b[k * LDB + j];
            want[i * N + j] = sum;
        }
    for (int trans = 0; trans < 2; ++trans) {
        T c[M * LDC];
        for (T& v : c) v = std::numeric_limits<T>::quiet_NaN();
        if (trans == 0)
            gemm(kRowMajor, kNoTrans, kNoTrans, M, N, K, T(1), a, LDA, b, LDB, T(0), c, LDC);
        else
            gemm(kRowMajor, kTrans, kTrans, M, N, K, T(1), at, M + 1, bt, K + 1, T(0), c, LDC);
        for (int i = 0; i < M; ++i)
            for (int j = 0; j < N; ++j)
                if (!(c[i * LDC + j] == want[i * N + j])) return false;
    }
    return true;
}

static KilnBlas kiln_blas_open() {
    KilnBlas blas;
    const char* env = std::getenv("KILN_BLAS");
    if (env != nullptr && (env[0] == '\0' || std::strcmp(env, "off") == 0 || std::strcmp(env, "0") == 0))
        return blas;
    const char* list = env != nullptr ? env : kKilnBlasLibraries;
    char lib[4096];
    for (const char* p = list; *p != '\0';) {
        const char* end = std::strchr(p, ':');
        const size_t n = end != nullptr ? size_t(end - p) : std::strlen(p);
        const char* next = end != nullptr ? end + 1 : p + n;
        if (n == 0 || n >= sizeof(lib)) {
            p = next;
            continue;
        }
        std::memcpy(lib, p, n);
        lib[n] = '\0';
        p = next;
        void* handle = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (handle == nullptr) continue;
        void* sgemm = dlsym(handle, "cblas_sgemm");
        if (sgemm == nullptr) {
            dlclose(handle);
            continue;
        }
        if (!kiln_blas_probe<float>(reinterpret_cast<KilnSgemm>(sgemm))) {
            std::fprintf(stderr,
                         "kiln: %s computed a test matrix product wrongly (a library built for 64-bit integers?); "
                         "it is not used (set KILN_BLAS to another BLAS library, or to off)\n",
                         lib);
            dlclose(handle);
            continue;
        }
        blas.sgemm = reinterpret_cast<KilnSgemm>(sgemm);
        blas.dgemm = reinterpret_cast<KilnDgemm>(dlsym(handle, "cblas_dgemm"));
        if (blas.dgemm != nullptr && !kiln_blas_probe<double>(blas.dgemm)) blas.dgemm = nullptr;
#ifdef _OPENMP
        const int threads = omp_get_max_threads();
#else
        const int threads = 1;
#endif
        if (void* f = dlsym(handle, "openblas_set_num_threads"))
            reinterpret_cast<void (*)(int)>(f)(threads);
        else if (void* f = dlsym(handle, "MKL_Set_Num_Threads"))
            reinterpret_cast<void (*)(int)>(f)(threads);
        else if (void* f = dlsym(handle, "bli_thread_set_num_threads"))
            reinterpret_cast<void (*)(int64_t)>(f)(threads);
        return blas;
    }
    if (env != nullptr)
        std::fprintf(stderr,
                     "kiln: KILN_BLAS=%s: no library there loads and exports cblas_sgemm; the matrix products run "
                     "Kiln's own kernel (set KILN_BLAS to a BLAS library such as libopenblas.so.0, or to off)\n",
                     env);
    return blas;
}
static const KilnBlas& kiln_blas() {
    static const KilnBlas blas = kiln_blas_open();
    return blas;
}

// The product by the BLAS library, when one is loaded, T is its type, the
// product is large enough, this is not a thread of a parallel region (a
// convolution's task), and each operand has a unit stride along one of its
// two dims with the other stride spanning it (what cblas's leading
// dimensions can say). Returns whether it ran.
template <typename T>
static bool kiln_mm_blas(int64_t batch, int64_t M, int64_t N, int64_t K, const T* a, int64_t a_off, int64_t a_sb,
                         int64_t a_sm, int64_t a_sk, const T* b, int64_t b_off, int64_t b_sb, int64_t b_sk,
                         int64_t b_sn, T* out, int64_t ldo) {
    constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
    if (double(M) * double(N) * double(K) < double(KILN_MM_BLAS_MIN)) return false;
#ifdef _OPENMP
    if (omp_in_parallel()) return false;
#endif
    const KilnBlas& blas = kiln_blas();
    if constexpr (std::is_same<T, float>::value) {
        if (blas.sgemm == nullptr) return false;
    } else {
        if (blas.dgemm == nullptr) return false;
    }
    // Each operand: not transposed (unit stride along its second dim), or
    // transposed (along its first), with the leading dimension.
    auto layout = [](int64_t rows, int64_t cols, int64_t s_row, int64_t s_col, int& trans, int64_t& ld) {
        if (s_col == 1 && s_row >= std::max<int64_t>(cols, 1)) {
            trans = kNoTrans, ld = s_row;
            return true;
        }
        if (s_row == 1 && s_col >= std::max<int64_t>(rows, 1)) {
            trans = kTrans, ld = s_col;
            return true;
        }
        return false;
    };
    int ta = 0, tb = 0;
    int64_t lda = 0, ldb = 0;
    if (!layout(M, K, a_sm, a_sk, ta, lda) || !layout(K, N, b_sk, b_sn, tb, ldb) || ldo < N) return false;
    for (int64_t v : {M, N, K, lda, ldb, ldo})
        if (v > INT_MAX) return false;
    for (int64_t bi = 0; bi < batch; ++bi) {
        const T* ab = a + a_off + bi * a_sb;
        const T* bb = b + b_off + bi * b_sb;
        T* cb = out + bi * M * ldo;
        if constexpr (std::is_same<T, float>::value)
            blas.sgemm(kRowMajor, ta, tb, int(M), int(N), int(K), 1.0f, ab, int(lda), bb, int(ldb), 0.0f, cb, int(ldo));
        else
            blas.dgemm(kRowMajor, ta, tb, int(M), int(N), int(K), 1.0, ab, int(lda), bb, int(ldb), 0.0, cb, int(ldo));
    }
    return true;
}
#endif

// The product into `out` with rows `ldo` apart (batch entries M rows apart).
// Load: converts one stored element to the accumulation type; Store: writes
// one accumulated element (when T is Acc, a plain write: the micro-kernel then
// adds into `out` itself). Returns 0, or 1 when scratch memory ran out.
template <typename Acc, typename T, typename Load, typename Store>
static int kiln_mm_into(int64_t batch, int64_t M, int64_t N, int64_t K,
                        const T* a, int64_t a_off, int64_t a_sb, int64_t a_sm, int64_t a_sk,
                        const T* b, int64_t b_off, int64_t b_sb, int64_t b_sk, int64_t b_sn,
                        T* out, int64_t ldo, Load load, Store store) {
    if (batch <= 0 || M <= 0 || N <= 0) return 0;
    if (K <= 0) {
        // An empty sum: zeros.
        for (int64_t r = 0; r < batch * M; ++r)
            for (int64_t j = 0; j < N; ++j) store(out, r * ldo + j, Acc(0));
        return 0;
    }
    if (M <= kKilnMmFewRows && (b_sn == 1 || b_sk == 1)) {
        kiln_mm_few_rows<Acc>(batch, M, N, K, a, a_off, a_sb, a_sm, a_sk, b, b_off, b_sb, b_sk, b_sn,
                              out, ldo, load, store);
        return 0;
    }
#if KILN_MM_BLAS
    if constexpr (std::is_same<T, Acc>::value && (std::is_same<T, float>::value || std::is_same<T, double>::value)) {
        // Many small products (attention's heads) stay Kiln's: one whole
        // product per thread (below).
        const bool many_small = kiln_mm_threads() > 1 && batch >= kiln_mm_threads() &&
                                double(M) * double(N) * double(K) <= double(1 << 24);
        if (!many_small && kiln_mm_blas<T>(batch, M, N, K, a, a_off, a_sb, a_sm, a_sk, b, b_off, b_sb, b_sk, b_sn,
                                           out, ldo))
            return 0;
    }
#endif
    constexpr bool plain = std::is_same<T, Acc>::value;
    constexpr int64_t MR = KILN_MM_MR, NR = KILN_MM_NR, KC = KILN_MM_KC;
    // Whole slivers.
    constexpr int64_t MC = (KILN_MM_MC + MR - 1) / MR * MR;
    constexpr int64_t NC = (KILN_MM_NC + NR - 1) / NR * NR;
    const int64_t threads = kiln_mm_threads();
    // Many small products (attention's heads): each thread does whole
    // products (below).
    const bool many_small =
        threads > 1 && batch >= threads && double(M) * double(N) * double(K) <= double(1 << 24);
    // Otherwise the tasks are blocks of b's columns: NC wide, narrower where
    // that gives each thread KILN_MM_TASKS_PER_THREAD.
    const int64_t wanted = KILN_MM_TASKS_PER_THREAD * threads;
    const int64_t nb = !many_small && threads > 1
                           ? std::min<int64_t>(NC, std::max<int64_t>(2 * NR, ((N + wanted - 1) / wanted + NR - 1) / NR * NR))
                           : NC;
    // Panels of at most MC rows by NC columns of a task's block of the result
    // (which stays in L2 across steps): as many more rows as keep that block
    // the same size where the blocks are narrower (KILN_MM_PANEL_SCALE), so
    // that b is packed for fewer panels; fewer where a narrower result's
    // float sums would outgrow their budget. All of one size: a short last
    // panel would repack b for a few rows.
    const int64_t rows = KILN_MM_PANEL_SCALE ? std::max<int64_t>(MC, MC * NC / nb / MR * MR) : MC;
    const int64_t most =
        plain ? rows
              : std::max<int64_t>(MR, std::min<int64_t>(MC, kKilnMmSumsBytes / (int64_t(sizeof(Acc)) * N) / MR * MR));
    const int64_t passes = (M + most - 1) / most;
    const int64_t MP = ((M + passes - 1) / passes + MR - 1) / MR * MR;
    const int64_t blocks = (N + NC - 1) / NC;
    // Steps of the shared dimension of at most KC, all of one size (a short
    // last step would pass over the whole result for a few products).
    const int64_t ksteps = (K + KC - 1) / KC;
    const int64_t KS = ((K + ksteps - 1) / ksteps + 7) / 8 * 8;
    // The steps of batch entries [b0, b1): every panel of rows, and in it every
    // step of the shared dimension, visited in order by `step(bi, m0, mp, k0, kc)`.
    auto steps = [&](int64_t b0, int64_t b1, auto&& step) {
        for (int64_t bi = b0; bi < b1; ++bi)
            for (int64_t m0 = 0; m0 < M; m0 += MP)
                for (int64_t k0 = 0; k0 < K; k0 += KS)
                    step(bi, m0, std::min<int64_t>(MP, M - m0), k0, std::min<int64_t>(KS, K - k0));
    };
    auto pack_panel = [&](Acc* ap, int64_t bi, int64_t m0, int64_t mp, int64_t k0, int64_t kc, int64_t is) {
        kiln_mm_pack_a<Acc>(ap + is * MR * kc, a, a_off + bi * a_sb + (m0 + is * MR) * a_sm + k0 * a_sk, a_sm, a_sk,
                            kc, std::min<int64_t>(MR, mp - is * MR), load);
    };
    auto sums_of = [&](Acc* scratch, int64_t bi, int64_t m0) -> Acc* {
        if constexpr (plain) {
            (void)scratch;
            return out + (bi * M + m0) * ldo;
        } else {
            (void)bi, (void)m0;
            return scratch;
        }
    };
    // The partial sums' row stride: the result's, or the scratch panel's.
    const int64_t ld = plain ? ldo : N;
    int failed = 0;
    if (many_small) {
        // Each thread does whole products, with no barrier between steps.
#pragma omp parallel reduction(| : failed)
        {
            static thread_local KilnArena a_arena, b_arena, c_arena;
            Acc* ap = reinterpret_cast<Acc*>(a_arena.get(sizeof(Acc) * MP * KS));
            Acc* bp = reinterpret_cast<Acc*>(b_arena.get(sizeof(Acc) * KS * NC));
            Acc* scratch = plain ? nullptr : reinterpret_cast<Acc*>(c_arena.get(sizeof(Acc) * MP * N));
            const bool ok = ap != nullptr && bp != nullptr && (plain || scratch != nullptr);
            if (!ok) failed = 1;
#pragma omp for schedule(dynamic, 1)
            for (int64_t entry = 0; entry < batch; ++entry) {
                if (!ok) continue;
                steps(entry, entry + 1, [&](int64_t bi, int64_t m0, int64_t mp, int64_t k0, int64_t kc) {
                    const int64_t slivers = (mp + MR - 1) / MR;
                    for (int64_t is = 0; is < slivers; ++is) pack_panel(ap, bi, m0, mp, k0, kc, is);
                    for (int64_t blk = 0; blk < blocks; ++blk)
                        kiln_mm_task<Acc>(bi, M, ldo, m0, mp, k0, kc, k0 + kc == K, blk * NC,
                                          std::min<int64_t>(NC, N - blk * NC), 0, slivers, ap, bp,
                                          sums_of(scratch, bi, m0), ld, b, b_off, b_sb, b_sk, b_sn, out, load, store);
                });
            }
        }
        return failed;
    }
    // Every thread on each phase: a's panels of rows packed once for a chunk
    // of steps of the shared dimension and shared (they live in the
    // last-level cache); the tasks are b's column blocks of each panel, and
    // each runs every step of the chunk on its block of the result (at most
    // MC x NC), which stays in its core's L2 cache from one step to the next
    // where the cache holds it and the packed block of b together, instead
    // of passing through the last-level cache once per step.
    // A phase is as many panels and steps as keep the packed panels within
    // kKilnMmPanelBytes: whole panels where one holds every step (a group of
    // them per phase: fewer barriers), else chunks of steps, all of one size
    // (8 steps in chunks of 4 and 4, not 7 and 1: a short last chunk would be
    // a phase of its own with too little work to share).
    const int64_t panels = (M + MP - 1) / MP;
    const int64_t panel_bytes = int64_t(sizeof(Acc)) * MP * KS * ksteps;
    const int64_t group =
        plain && panel_bytes <= kKilnMmPanelBytes ? std::min<int64_t>(panels, kKilnMmPanelBytes / panel_bytes) : 1;
    const int64_t most_steps = std::max<int64_t>(1, kKilnMmPanelBytes / (int64_t(sizeof(Acc)) * MP * KS));
    const int64_t chunks = (ksteps + most_steps - 1) / most_steps;
    const int64_t chunk_steps = (ksteps + chunks - 1) / chunks;
    const int64_t chunk_len = std::min(K, chunk_steps * KS);
    static thread_local KilnArena a_arena, c_arena;
    Acc* ap = reinterpret_cast<Acc*>(a_arena.get(sizeof(Acc) * group * MP * chunk_len));
    Acc* scratch = plain ? nullptr : reinterpret_cast<Acc*>(c_arena.get(sizeof(Acc) * MP * N));
    if (ap == nullptr || (!plain && scratch == nullptr)) return 1;
    // The tasks: blocks of b's columns (nb wide), split over rows where a
    // phase still has fewer than two per thread.
    const int64_t nblocks = (N + nb - 1) / nb;
    const int64_t parts =
        std::max<int64_t>(1, std::min<int64_t>(MP / MR, (2 * threads + nblocks * group - 1) / (nblocks * group)));
    // Panel g: its first row, its rows and its slivers.
    auto panel = [&](int64_t g) {
        const int64_t m0 = g * MP, mp = std::min<int64_t>(MP, M - m0);
        return std::make_tuple(m0, mp, (mp + MR - 1) / MR);
    };
#pragma omp parallel reduction(| : failed) if (threads > 1)
    {
        static thread_local KilnArena b_arena;
        Acc* bp = reinterpret_cast<Acc*>(b_arena.get(sizeof(Acc) * KS * NC));
        const bool ok = bp != nullptr;
        if (!ok) failed = 1;
        // Every thread meets every work-sharing loop (their bounds are
        // shared); one without scratch skips its tasks, and the call fails.
        for (int64_t bi = 0; bi < batch; ++bi)
            for (int64_t g0 = 0; g0 < panels; g0 += group)
                for (int64_t c0 = 0; c0 < K; c0 += chunk_len) {
                    const int64_t g1 = std::min(panels, g0 + group);
                    const int64_t c1 = std::min<int64_t>(K, c0 + chunk_len);
                    // Step s of the chunk of panel g is packed at
                    // ap + (g - g0) * MP * chunk_len + (k0 - c0) * slivers * MR.
                    const int64_t nsteps = (c1 - c0 + KS - 1) / KS;
#pragma omp for schedule(static) collapse(3)
                    for (int64_t g = g0; g < g1; ++g)
                        for (int64_t st = 0; st < nsteps; ++st)
                            for (int64_t is = 0; is < MP / MR; ++is) {
                                const auto [m0, mp, slivers] = panel(g);
                                if (is >= slivers) continue;
                                const int64_t k0 = c0 + st * KS;
                                pack_panel(ap + (g - g0) * MP * chunk_len + (k0 - c0) * slivers * MR, bi, m0, mp, k0,
                                           std::min<int64_t>(KS, K - k0), is);
                            }
#pragma omp for schedule(dynamic, 1)
                    for (int64_t task = 0; task < (g1 - g0) * nblocks * parts; ++task) {
                        if (!ok) continue;
                        const int64_t g = g0 + task / (nblocks * parts);
                        const int64_t blk = task / parts % nblocks, part = task % parts;
                        const auto [m0, mp, slivers] = panel(g);
                        for (int64_t k0 = c0; k0 < c1; k0 += KS)
                            kiln_mm_task<Acc>(bi, M, ldo, m0, mp, k0, std::min<int64_t>(KS, K - k0),
                                              k0 + KS >= K, blk * nb, std::min<int64_t>(nb, N - blk * nb),
                                              slivers * part / parts, slivers * (part + 1) / parts,
                                              ap + (g - g0) * MP * chunk_len + (k0 - c0) * slivers * MR, bp,
                                              sums_of(scratch, bi, m0), ld, b, b_off, b_sb, b_sk, b_sn, out, load,
                                              store);
                    }
                }
    }
    return failed;
}

// The product into a contiguous `out` [batch, M, N].
template <typename Acc, typename T, typename Load, typename Store>
static int kiln_mm(int64_t batch, int64_t M, int64_t N, int64_t K,
                   const T* a, int64_t a_off, int64_t a_sb, int64_t a_sm, int64_t a_sk,
                   const T* b, int64_t b_off, int64_t b_sb, int64_t b_sk, int64_t b_sn,
                   T* out, Load load, Store store) {
    return kiln_mm_into<Acc>(batch, M, N, K, a, a_off, a_sb, a_sm, a_sk, b, b_off, b_sb, b_sk, b_sn, out, N,
                             load, store);
}

// A 2-D convolution (no bias) of contiguous x [n, c, h, wd] with w [o, cg, kh, kw]
// into y [n, o, oh, ow]. Returns 0, or 1 when scratch memory ran out.
//
// Where every output sums at least kKilnConvGemmDepth products and a group has from
// kKilnConvGemmChannels to two vectors' worth of output channels: directly, the channels
// in vector lanes (kiln_conv_lanes). With more channels, as im2col and the packed
// matrix product: per image and group, the
// input patches the outputs see laid out as a [cg * kh * kw, oh * ow] matrix, in
// chunks of whole output rows, multiplied by the group's [og, cg * kh * kw] weights
// straight into the result's rows. Where there are chunks enough for every thread
// (two each, or more) of at least KILN_CONV_TASK_POSITIONS positions (256) within
// KILN_CONV_TASK_BYTES (about a packed block of b: half the L2 cache), each thread
// takes whole chunks, its patches staying in its own cache and its product run alone;
// otherwise the threads share each chunk (up to KILN_CONV_COL_BYTES), the patches and
// then the product. Otherwise (depthwise, a kernel of few taps) directly: each
// output plane accumulates, per input channel and kernel tap, a strided row of the
// input (an `omp simd` loop over the output columns that tap sees).
constexpr int64_t kKilnConvGemmDepth = 16;
constexpr int64_t kKilnConvGemmChannels = 4;
#ifndef KILN_CONV_COL_BYTES
#define KILN_CONV_COL_BYTES (int64_t(32) << 20)
#endif
constexpr int64_t kKilnConvColBytes = KILN_CONV_COL_BYTES;
#ifndef KILN_CONV_TASK_BYTES
#define KILN_CONV_TASK_BYTES (int64_t(KILN_MM_KC) * KILN_MM_NC * 4)
#endif
constexpr int64_t kKilnConvTaskBytes = KILN_CONV_TASK_BYTES;
#ifndef KILN_CONV_TASK_POSITIONS
#define KILN_CONV_TASK_POSITIONS 256
#endif
constexpr int64_t kKilnConvTaskPositions = KILN_CONV_TASK_POSITIONS;

// A convolution's geometry: input [n, c, h, wd], o output channels in groups of og
// over cg input channels each, a kh x kw kernel, output oh x ow, strides, padding,
// dilation.
struct KilnConv {
    int64_t n, c, h, wd, o, og, cg, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw;
};

// Rows [r0, r1) of the patch matrix of image b, group g, output rows [i0, i1):
// row r is input channel r / (kh * kw) and tap (r / kw % kh, r % kw); column q
// the output position i0 * ow + q. Taps outside the padded input read 0.
template <typename T>
static void kiln_conv_patches(T* __restrict__ col, const T* __restrict__ x, const KilnConv& s, int64_t b,
                              int64_t g, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {
    const int64_t pc = (i1 - i0) * s.ow, ow = s.ow;
    for (int64_t r = r0; r < r1; ++r) {
        const int64_t cc = r / (s.kh * s.kw), a = (r / s.kw) % s.kh, e = r % s.kw;
        const T* in = x + (b * s.c + g * s.cg + cc) * s.h * s.wd;
        // Output columns j read input column j * sw - lo, inside [j0, j1).
        const int64_t lo = s.pw - e * s.dw;
        const int64_t hi = s.wd - 1 + s.pw - e * s.dw;
        const int64_t j0 = std::min<int64_t>(ow, lo <= 0 ? 0 : (lo + s.sw - 1) / s.sw);
        const int64_t j1 = std::max<int64_t>(j0, hi < 0 ? 0 : std::min(ow, hi / s.sw + 1));
        for (int64_t i = i0; i < i1; ++i) {
            T* d = col + (r - r0) * pc + (i - i0) * ow;
            const int64_t yy = i * s.sh - s.ph + a * s.dh;
            if (yy < 0 || yy >= s.h) {
                for (int64_t j = 0; j < ow; ++j) d[j] = T(0);
                continue;
            }
            const T* row = in + yy * s.wd - lo;
            for (int64_t j = 0; j < j0; ++j) d[j] = T(0);
            if (s.sw == 1) {
#pragma omp simd
                for (int64_t j = j0; j < j1; ++j) d[j] = row[j];
            } else if (s.sw == 2) {
                // A constant stride: vectorised with shuffles.
#pragma omp simd
                for (int64_t j = j0; j < j1; ++j) d[j] = row[2 * j];
            } else {
                for (int64_t j = j0; j < j1; ++j) d[j] = row[j * s.sw];
            }
            for (int64_t j = j1; j < ow; ++j) d[j] = T(0);
        }
    }
}

// Output channels in vector lanes: a direct convolution for groups of few output
// channels (at most two vectors' worth), where the patch matrix of im2col would be read
// only og times per element. Each task is one output row of one image and group; a
// register block of P output columns x NV vectors of channels accumulates, per input
// channel and kernel tap, the tap's weights for every channel (one vector load per
// vector) times each column's input element (a broadcast): every input element loaded
// feeds all og channels. The input is read through a zero-padded copy where there is
// padding; the weights are first laid out [group][cg][kh][kw][NV * L], zero past og.
// Returns 0, or 1 when scratch memory ran out. Float and double only (16-bit
// convolutions reach it widened to float).
#ifndef KILN_MM_VREGS
// The plugin's count of vector registers of KILN_MM_VBYTES bytes; 16 where it gives none.
#define KILN_MM_VREGS 16
#endif
#ifndef KILN_CONV_LANE_CHANNELS
// The most output channels per group that kiln_conv_lanes takes: two float vectors.
#define KILN_CONV_LANE_CHANNELS (2 * KILN_MM_VBYTES / 4)
#endif
#if KILN_MM_VBYTES > 0 && (defined(__GNUC__) || defined(__clang__))
#define KILN_CONV_LANES 1
// One register block of kiln_conv_lanes: P output columns x NV vectors of channels,
// from the input at `in` (the block's first column, first channel, first tap row),
// written as lanes[P][NV * L]. Its accumulators are indexed by constants only, so that
// they stay in registers.
template <typename T, int NV, int P>
static inline void kiln_conv_lanes_block(const T* __restrict__ in, const T* __restrict__ wk, const KilnConv& s,
                                         int64_t hp, int64_t wp, T* __restrict__ lanes) {
    typedef T V __attribute__((vector_size(KILN_MM_VBYTES)));
    constexpr int L = static_cast<int>(KILN_MM_VBYTES / sizeof(T));
    V acc[P][NV];
#pragma GCC unroll 32
    for (int p = 0; p < P; ++p)
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) acc[p][v] = V{};
    const int64_t sw = s.sw;
    for (int64_t cc = 0; cc < s.cg; ++cc) {
        for (int64_t a = 0; a < s.kh; ++a) {
            const T* row = in + (cc * hp + a * s.dh) * wp;
            for (int64_t e = 0; e < s.kw; ++e, wk += NV * L) {
                V wv[NV];
#pragma GCC unroll 2
                for (int v = 0; v < NV; ++v) std::memcpy(&wv[v], wk + v * L, sizeof(V));
                const T* x = row + e * s.dw;
#pragma GCC unroll 32
                for (int p = 0; p < P; ++p) {
                    const T xv = x[p * sw];
#pragma GCC unroll 2
                    for (int v = 0; v < NV; ++v) acc[p][v] += xv * wv[v];
                }
            }
        }
    }
#pragma GCC unroll 32
    for (int p = 0; p < P; ++p)
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) std::memcpy(lanes + p * NV * L + v * L, &acc[p][v], sizeof(V));
}

// One output row (image b, group g, row i) of kiln_conv_lanes.
template <typename T, int NV>
static void kiln_conv_lanes_row(const T* __restrict__ xp, const T* __restrict__ wt, T* __restrict__ y,
                                const KilnConv& s, int64_t hp, int64_t wp, int64_t b, int64_t g, int64_t i) {
    constexpr int L = static_cast<int>(KILN_MM_VBYTES / sizeof(T));
    // The accumulators fill the vector registers but for the weights and one spare.
    constexpr int kRegs = KILN_MM_VREGS;
    constexpr int P = (kRegs - NV - 2) / NV;
    const int64_t plane = s.oh * s.ow;
    const int64_t taps = s.cg * s.kh * s.kw;
    const T* wg = wt + g * taps * NV * L;
    const T* first = xp + ((b * s.c + g * s.cg) * hp + i * s.sh) * wp;
    alignas(64) T lanes[P * NV * L];
    for (int64_t jb = 0; jb < s.ow; jb += P) {
        // A last block of fewer than P columns is a whole block ending at the row's end
        // (its first columns computed twice, to the same values). Only a row narrower
        // than P runs a partial block, with its sums in memory.
        const int64_t j0 = jb + P <= s.ow || s.ow < P ? jb : s.ow - P;
        const int64_t pn = std::min<int64_t>(P, s.ow - j0);
        if (pn == P) {
            kiln_conv_lanes_block<T, NV, P>(first + j0 * s.sw, wg, s, hp, wp, lanes);
        } else {
            for (int64_t q = 0; q < P * NV * L; ++q) lanes[q] = T(0);
            const T* wk = wg;
            for (int64_t cc = 0; cc < s.cg; ++cc)
                for (int64_t a = 0; a < s.kh; ++a)
                    for (int64_t e = 0; e < s.kw; ++e, wk += NV * L) {
                        const T* x = first + (cc * hp + a * s.dh) * wp + j0 * s.sw + e * s.dw;
                        for (int64_t p = 0; p < pn; ++p)
#pragma omp simd
                            for (int64_t l = 0; l < NV * L; ++l) lanes[p * NV * L + l] += x[p * s.sw] * wk[l];
                    }
        }
        // Lanes to channel planes.
        T* out = y + (b * s.o + g * s.og) * plane + i * s.ow + j0;
        for (int64_t oc = 0; oc < s.og; ++oc)
            for (int64_t p = 0; p < pn; ++p) out[oc * plane + p] = lanes[p * NV * L + oc];
    }
}

template <typename T>
static int kiln_conv_lanes(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, const KilnConv& s) {
    constexpr int64_t L = KILN_MM_VBYTES / sizeof(T);
    const int64_t nv = (s.og + L - 1) / L;
    const int64_t taps = s.cg * s.kh * s.kw;
    const int64_t groups = s.o / s.og;
    static thread_local KilnArena w_arena, x_arena;
    T* wt = reinterpret_cast<T*>(w_arena.get(sizeof(T) * groups * taps * nv * L));
    if (wt == nullptr) return 1;
    for (int64_t g = 0; g < groups; ++g)
        for (int64_t t = 0; t < taps; ++t)
            for (int64_t l = 0; l < nv * L; ++l)
                wt[(g * taps + t) * nv * L + l] = l < s.og ? w[(g * s.og + l) * taps + t] : T(0);
    const int64_t hp = s.h + 2 * s.ph, wp = s.wd + 2 * s.pw;
    const T* xp = x;
    if (s.ph > 0 || s.pw > 0) {
        T* pad = reinterpret_cast<T*>(x_arena.get(sizeof(T) * s.n * s.c * hp * wp));
        if (pad == nullptr) return 1;
#pragma omp parallel for collapse(2) schedule(static)
        for (int64_t pl = 0; pl < s.n * s.c; ++pl)
            for (int64_t r = 0; r < hp; ++r) {
                T* d = pad + (pl * hp + r) * wp;
                const int64_t yy = r - s.ph;
                if (yy < 0 || yy >= s.h) {
                    for (int64_t q = 0; q < wp; ++q) d[q] = T(0);
                    continue;
                }
                const T* src = x + (pl * s.h + yy) * s.wd;
                for (int64_t q = 0; q < s.pw; ++q) d[q] = T(0);
                for (int64_t q = 0; q < s.wd; ++q) d[s.pw + q] = src[q];
                for (int64_t q = s.pw + s.wd; q < wp; ++q) d[q] = T(0);
            }
        xp = pad;
    }
    const int64_t rows = s.n * groups * s.oh;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < rows; ++t) {
        const int64_t b = t / (groups * s.oh), g = t / s.oh % groups, i = t % s.oh;
        if (nv == 1)
            kiln_conv_lanes_row<T, 1>(xp, wt, y, s, hp, wp, b, g, i);
        else
            kiln_conv_lanes_row<T, 2>(xp, wt, y, s, hp, wp, b, g, i);
    }
    return 0;
}
#else
#define KILN_CONV_LANES 0
#endif

template <typename T>
static int kiln_conv2d(const T* __restrict__ x, int64_t xo, const T* __restrict__ w, int64_t wo,
                       T* __restrict__ y, int64_t n, int64_t c, int64_t h, int64_t wd, int64_t o,
                       int64_t kh, int64_t kw, int64_t oh, int64_t ow, int64_t sh, int64_t sw,
                       int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups,
                       int64_t cg) {
    x += xo;
    w += wo;
    const int64_t og = o / groups;
    const int64_t depth = cg * kh * kw;
    const int64_t plane = oh * ow;
#if KILN_CONV_LANES
    // A group of at most two vectors of output channels: direct, channels in lanes,
    // unless the padded copy of the input would be large.
    if (depth >= kKilnConvGemmDepth && og >= kKilnConvGemmChannels && plane > 0 &&
        og <= std::min<int64_t>(KILN_CONV_LANE_CHANNELS, 2 * int64_t(KILN_MM_VBYTES / sizeof(T))) &&
        ((ph == 0 && pw == 0) ||
         n * c * (h + 2 * ph) * (wd + 2 * pw) * int64_t(sizeof(T)) <= kKilnConvColBytes)) {
        const KilnConv s{n, c, h, wd, o, og, cg, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw};
        return kiln_conv_lanes(x, w, y, s);
    }
#endif
    if (depth >= kKilnConvGemmDepth && og >= kKilnConvGemmChannels && plane > 0) {
        const KilnConv s{n, c, h, wd, o, og, cg, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw};
        auto load = [](const T* p, int64_t i) { return p[i]; };
        auto store = [](T* p, int64_t i, T v) { p[i] = v; };
        // Whole output rows per chunk.
        auto rows_within = [&](int64_t bytes) {
            return std::max<int64_t>(1, bytes / int64_t(sizeof(T)) / (depth * ow));
        };
        const int64_t threads = kiln_mm_threads();
        const int64_t task_rows = std::min<int64_t>(
            oh, std::max<int64_t>((kKilnConvTaskPositions + ow - 1) / ow, rows_within(kKilnConvTaskBytes)));
        const int64_t chunks = (oh + task_rows - 1) / task_rows;
        const int64_t tasks = n * groups * chunks;
        if (threads > 1 && tasks >= 2 * threads) {
            int failed = 0;
#pragma omp parallel reduction(| : failed)
            {
                static thread_local KilnArena col_arena;
                T* col = reinterpret_cast<T*>(col_arena.get(sizeof(T) * depth * task_rows * ow));
                const bool ok = col != nullptr;
                if (!ok) failed = 1;
#pragma omp for schedule(dynamic, 1)
                for (int64_t t = 0; t < tasks; ++t) {
                    if (!ok) continue;
                    const int64_t b = t / (groups * chunks), g = t / chunks % groups;
                    const int64_t i0 = t % chunks * task_rows, i1 = std::min<int64_t>(oh, i0 + task_rows);
                    const int64_t pc = (i1 - i0) * ow;
                    kiln_conv_patches(col, x, s, b, g, 0, depth, i0, i1);
                    // Inside the parallel region the product runs on this thread alone.
                    failed |= kiln_mm_into<T>(1, og, pc, depth, w, g * og * depth, 0, depth, 1, col, 0, 0, pc, 1,
                                              y + (b * o + g * og) * plane + i0 * ow, plane, load, store);
                }
            }
            return failed;
        }
        const int64_t chunk_rows = std::min<int64_t>(oh, rows_within(kKilnConvColBytes));
        static thread_local KilnArena col_arena;
        T* col = reinterpret_cast<T*>(col_arena.get(sizeof(T) * depth * chunk_rows * ow));
        if (col == nullptr) return 1;
        for (int64_t b = 0; b < n; ++b) {
            for (int64_t g = 0; g < groups; ++g) {
                for (int64_t i0 = 0; i0 < oh; i0 += chunk_rows) {
                    const int64_t i1 = std::min<int64_t>(oh, i0 + chunk_rows);
                    const int64_t pc = (i1 - i0) * ow;
#pragma omp parallel for schedule(static)
                    for (int64_t r = 0; r < depth; ++r) kiln_conv_patches(col + r * pc, x, s, b, g, r, r + 1, i0, i1);
                    if (kiln_mm_into<T>(1, og, pc, depth, w, g * og * depth, 0, depth, 1, col, 0, 0, pc, 1,
                                        y + (b * o + g * og) * plane + i0 * ow, plane, load, store))
                        return 1;
                }
            }
        }
        return 0;
    }
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < n; ++b) {
        for (int64_t oc = 0; oc < o; ++oc) {
            const int64_t g = oc / og;
            T* out = y + (b * o + oc) * oh * ow;
            for (int64_t i = 0; i < oh * ow; ++i) out[i] = T(0);
            for (int64_t cc = 0; cc < cg; ++cc) {
                const T* in = x + (b * c + g * cg + cc) * h * wd;
                const T* wk = w + (oc * cg + cc) * kh * kw;
                for (int64_t a = 0; a < kh; ++a) {
                    for (int64_t e = 0; e < kw; ++e) {
                        const T wv = wk[a * kw + e];
                        const int64_t lo = pw - e * dw;
                        const int64_t hi = wd - 1 + pw - e * dw;
                        const int64_t j0 = lo <= 0 ? 0 : (lo + sw - 1) / sw;
                        const int64_t j1 = hi < 0 ? 0 : std::min(ow, hi / sw + 1);
                        for (int64_t i = 0; i < oh; ++i) {
                            const int64_t yy = i * sh - ph + a * dh;
                            if (yy < 0 || yy >= h) continue;
                            const T* row = in + yy * wd;
                            T* orow = out + i * ow;
#pragma omp simd
                            for (int64_t j = j0; j < j1; ++j) orow[j] += wv * row[j * sw - lo];
                        }
                    }
                }
            }
        }
    }
    return 0;
}
"#;
