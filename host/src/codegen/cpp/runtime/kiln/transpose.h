// Kiln's cpu runtime: transposing copies staged through registers
// (kiln_tile_transpose), with whole blocks moved by the instruction set's
// shuffles where the target has them (AVX-512, AVX, AVX2), and a write
// prefetch.
#pragma once
#include <cstdint>
#if defined(__AVX__)
#include <immintrin.h>
#endif

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
