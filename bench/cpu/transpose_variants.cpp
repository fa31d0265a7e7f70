// Ways of writing a transposing copy on the cpu device, timed on their own: for choosing
// how the C++ kernels move a tile whose reads run across the rows they write along
// (`x.t().contiguous()`, `x.permute(0, 2, 1).contiguous()`).
//
//   g++ -O3 -march=native -fopenmp -std=c++17 bench/cpu/transpose_variants.cpp -o tv
//   OMP_NUM_THREADS=2 taskset -c 2,3 ./tv [BATCH ROWS COLS ...]
//
// out[b][x][r] = in[b][r][x] for in [BATCH, ROWS, COLS] (so out is [BATCH, COLS, ROWS]).
// Variants (each checked against a plain loop, then timed in rounds that take turns):
//   gather32   Kiln's kernel before: 32 x 32 tiles, an `omp simd` loop along the output
//              row reading the source with a stride (a gather per vector)
//   stage8_32  a 32 x 32 local tile filled by 8 x 8 AVX transposes, then read along rows
//   stage16_32 a 32 x 32 local tile filled by 16 x 16 AVX-512 transposes
//   stage16    per 16 x 16 block: an AVX-512 transpose into a 1 KiB local tile, read at once
//   direct16   per 16 x 16 block: an AVX-512 transpose stored straight into the output
//   strip16    tiles of 16 x 16 (Inductor-CPU's): one AVX-512 transpose into a 1 KiB local
//              tile, read along rows; strip8 the same with 8 x 8 tiles and AVX
//   ...pf      the same, each tile first prefetching the next tile's source lines
//   ...w       each tile first prefetching the next tile's output lines for writing (...pfw: both)
//   ...nt      the output written with non-temporal (streaming) stores where aligned
#include <immintrin.h>
#include <stdint.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static constexpr int64_t T = 32;

static void reference(const float* in, float* out, int64_t B, int64_t R, int64_t C) {
    for (int64_t b = 0; b < B; ++b)
        for (int64_t x = 0; x < C; ++x)
            for (int64_t r = 0; r < R; ++r) out[(b * C + x) * R + r] = in[(b * R + r) * C + x];
}

static void gather32(const float* __restrict__ in, float* __restrict__ out, int64_t B, int64_t R, int64_t C) {
#pragma omp parallel for collapse(3) schedule(static)
    for (int64_t b = 0; b < B; ++b)
        for (int64_t xb = 0; xb < C; xb += T)
            for (int64_t rb = 0; rb < R; rb += T) {
                const int64_t xe = std::min(xb + T, C), re = std::min(rb + T, R);
                for (int64_t x = xb; x < xe; ++x) {
#pragma omp simd
                    for (int64_t r = rb; r < re; ++r) out[(b * C + x) * R + r] = in[(b * R + r) * C + x];
                }
            }
}

// dst[c * ldd + r] = src[r * lds + c], 8 x 8, AVX.
static inline void tr8(const float* s, int64_t lds, float* d, int64_t ldd) {
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

#ifdef __AVX512F__
// dst[c * ldd + r] = src[r * lds + c], 16 x 16, AVX-512.
static inline void tr16(const float* s, int64_t lds, float* d, int64_t ldd) {
    __m512 r[16], t[16], u[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(s + i * lds);
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    // u[4g + e], 128-bit lane l: rows 4g .. 4g+3 of column 4l + e.
    for (int g = 0; g < 4; ++g) {
        u[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
        u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
        u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
        u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
    }
    for (int e = 0; e < 4; ++e) {
        const __m512 v0 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0x88), v1 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0xDD);
        const __m512 w0 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0x88);
        const __m512 w1 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0xDD);
        _mm512_storeu_ps(d + e * ldd, _mm512_shuffle_f32x4(v0, w0, 0x88));
        _mm512_storeu_ps(d + (8 + e) * ldd, _mm512_shuffle_f32x4(v0, w0, 0xDD));
        _mm512_storeu_ps(d + (4 + e) * ldd, _mm512_shuffle_f32x4(v1, w1, 0x88));
        _mm512_storeu_ps(d + (12 + e) * ldd, _mm512_shuffle_f32x4(v1, w1, 0xDD));
    }
}
#endif

template <int V, int TS, bool PerBlock, int64_t TT = T, bool Prefetch = false, bool PrefetchOut = false,
          bool Stream = false>
static void staged(const float* __restrict__ in, float* __restrict__ out, int64_t B, int64_t R, int64_t C) {
#pragma omp parallel for collapse(3) schedule(static)
    for (int64_t b = 0; b < B; ++b)
        for (int64_t xb = 0; xb < C; xb += TT)
            for (int64_t rb = 0; rb < R; rb += TT) {
                const int64_t xe = std::min(xb + TT, C), re = std::min(rb + TT, R);
                const float* src = in + b * R * C;
                float* dst = out + b * C * R;
                if constexpr (Prefetch) {
                    // The next tile's source lines (the next block of rows, same columns).
                    for (int64_t i = 0; i < TT; ++i) {
                        const float* p = src + (rb + TT + i) * C + xb;
                        __builtin_prefetch(p, 0, 3);
                        if (TT * 4 > 64) __builtin_prefetch(p + 16, 0, 3);
                    }
                }
                if constexpr (PrefetchOut) {
                    // The next tile's output lines (the same rows, the next block of columns), for writing.
                    for (int64_t i = 0; i < TT; ++i) {
                        float* p = dst + (xb + i) * R + rb + TT;
                        __builtin_prefetch(p, 1, 3);
                        if (TT * 4 > 64) __builtin_prefetch(p + 16, 1, 3);
                    }
                }
                if (xe - xb < TT || re - rb < TT) {
                    for (int64_t x = xb; x < xe; ++x)
                        for (int64_t r = rb; r < re; ++r) dst[x * R + r] = src[r * C + x];
                    continue;
                }
                if constexpr (PerBlock) {
                    for (int64_t x0 = xb; x0 < xe; x0 += V)
                        for (int64_t r0 = rb; r0 < re; r0 += V) {
                            alignas(64) float tile[V * V];
                            if constexpr (V == 16) {
#ifdef __AVX512F__
                                tr16(src + r0 * C + x0, C, tile, V);
#endif
                            } else {
                                tr8(src + r0 * C + x0, C, tile, V);
                            }
                            for (int64_t x = 0; x < V; ++x) {
#pragma omp simd
                                for (int64_t r = 0; r < V; ++r) dst[(x0 + x) * R + r0 + r] = tile[x * V + r];
                            }
                        }
                } else {
                    alignas(64) float tile[TS * TS];
                    for (int64_t r0 = 0; r0 < TS; r0 += V)
                        for (int64_t x0 = 0; x0 < TS; x0 += V) {
                            if constexpr (V == 16) {
#ifdef __AVX512F__
                                tr16(src + (rb + r0) * C + xb + x0, C, tile + x0 * TS + r0, TS);
#endif
                            } else {
                                tr8(src + (rb + r0) * C + xb + x0, C, tile + x0 * TS + r0, TS);
                            }
                        }
#ifdef __AVX512F__
                    if constexpr (Stream) {
                        if (((R * 4) % 64) == 0 && (reinterpret_cast<uintptr_t>(dst) % 64) == 0) {
                            for (int64_t x = 0; x < TS; ++x)
                                for (int64_t r = 0; r < TS; r += 16)
                                    _mm512_stream_ps(dst + (xb + x) * R + rb + r, _mm512_load_ps(tile + x * TS + r));
                            continue;
                        }
                    }
#endif
                    for (int64_t x = 0; x < TS; ++x) {
#pragma omp simd
                        for (int64_t r = 0; r < TS; ++r) dst[(xb + x) * R + rb + r] = tile[x * TS + r];
                    }
                }
            }
}

#ifdef __AVX512F__
static void direct16(const float* __restrict__ in, float* __restrict__ out, int64_t B, int64_t R, int64_t C) {
#pragma omp parallel for collapse(3) schedule(static)
    for (int64_t b = 0; b < B; ++b)
        for (int64_t xb = 0; xb < C; xb += T)
            for (int64_t rb = 0; rb < R; rb += T) {
                const int64_t xe = std::min(xb + T, C), re = std::min(rb + T, R);
                const float* src = in + b * R * C;
                float* dst = out + b * C * R;
                if (xe - xb < T || re - rb < T) {
                    for (int64_t x = xb; x < xe; ++x)
                        for (int64_t r = rb; r < re; ++r) dst[x * R + r] = src[r * C + x];
                    continue;
                }
                for (int64_t x0 = xb; x0 < xe; x0 += 16)
                    for (int64_t r0 = rb; r0 < re; r0 += 16) tr16(src + r0 * C + x0, C, dst + x0 * R + r0, R);
            }
}
#endif

struct AlignedFloats {
    float* p;
    int64_t n;
    explicit AlignedFloats(int64_t count)
        : p(static_cast<float*>(std::aligned_alloc(64, (sizeof(float) * count + 63) / 64 * 64))), n(count) {}
    ~AlignedFloats() { std::free(p); }
    float* data() { return p; }
    float* begin() { return p; }
    float* end() { return p + n; }
    float& operator[](int64_t i) { return p[i]; }
};

typedef void (*Fn)(const float*, float*, int64_t, int64_t, int64_t);

int main(int argc, char** argv) {
    std::vector<int64_t> dims = {1, 2048, 2048, 64, 256, 256, 1, 2000, 3000, 16, 768, 197};
    if (argc > 1) {
        dims.clear();
        for (int i = 1; i < argc; ++i) dims.push_back(std::atoll(argv[i]));
    }
    struct Variant {
        const char* name;
        Fn fn;
    };
    std::vector<Variant> variants = {{"gather32", gather32}, {"stage8_32", staged<8, 32, false>},
                                     {"stage8", staged<8, 32, true>}, {"strip8", staged<8, 8, false, 8>},
                                     {"stage8_32pf", staged<8, 32, false, 32, true>}};
#ifdef __AVX512F__
    variants.push_back({"stage16_32", staged<16, 32, false>});
    variants.push_back({"stage16", staged<16, 32, true>});
    variants.push_back({"direct16", direct16});
    variants.push_back({"strip16", staged<16, 16, false, 16>});
    variants.push_back({"stage16_32pf", staged<16, 32, false, 32, true>});
    variants.push_back({"strip16pf", staged<16, 16, false, 16, true>});
    variants.push_back({"stage16_32pfw", staged<16, 32, false, 32, true, true>});
    variants.push_back({"stage16_32w", staged<16, 32, false, 32, false, true>});
    variants.push_back({"stage16_32nt", staged<16, 32, false, 32, false, false, true>});
#endif
    std::printf("# %d thread(s); each variant's median over 9 rounds of 5 calls, the variants taking turns\n",
                omp_get_max_threads());
    for (size_t s = 0; s + 2 < dims.size(); s += 3) {
        const int64_t B = dims[s], R = dims[s + 1], C = dims[s + 2], n = B * R * C;
        // 64-byte aligned, as Kiln's and PyTorch's buffers are.
        AlignedFloats in(n), want(n), got(n);
        for (int64_t i = 0; i < n; ++i) in[i] = float(i % 1000003) * 0.5f;
        reference(in.data(), want.data(), B, R, C);
        std::vector<bool> ok(variants.size());
        for (size_t v = 0; v < variants.size(); ++v) {
            std::fill(got.begin(), got.end(), -1.0f);
            variants[v].fn(in.data(), got.data(), B, R, C);
            ok[v] = std::memcmp(got.data(), want.data(), sizeof(float) * n) == 0;
        }
        std::vector<std::vector<double>> ms(variants.size());
        for (int round = 0; round < 9; ++round)
            for (size_t i = 0; i < variants.size(); ++i) {
                const size_t v = (i + round) % variants.size();
                for (int rep = 0; rep < 5; ++rep) {
                    const auto t0 = std::chrono::steady_clock::now();
                    variants[v].fn(in.data(), got.data(), B, R, C);
                    ms[v].push_back(
                        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
                }
            }
        for (size_t v = 0; v < variants.size(); ++v) {
            std::sort(ms[v].begin(), ms[v].end());
            const double med = ms[v][ms[v].size() / 2];
            std::printf("%lldx%lldx%lld %-13s %8.3f ms %6.1f GB/s %s\n", (long long)B, (long long)R, (long long)C,
                        variants[v].name, med, 2.0 * 4 * n / med * 1e-6, ok[v] ? "ok" : "WRONG");
        }
    }
}
