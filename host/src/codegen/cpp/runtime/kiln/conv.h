// Kiln's cpu runtime: 2-D convolutions (kiln_conv2d), direct or through
// the matrix product.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "arena.h"
#include "matmul.h"

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
