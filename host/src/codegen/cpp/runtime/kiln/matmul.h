// Kiln's cpu runtime: the blocked matrix product (kiln_mm, kiln_mm_into).
// `out[b, i, j] = sum_k a[b, i, k] * b[b, k, j]`
// over strided operands (any strides), written contiguously, in the
// GotoBLAS/BLIS arrangement (BLIS's operands swapped: here the result's rows
// are contiguous, so the vectors run along `b`'s columns):
//
// - panels of at most `KILN_MM_MC` rows of `a` are packed once for a chunk
//   of steps of `KILN_MM_KC` of the shared dimension (32 MiB at most, all
//   steps where that holds them: one phase between barriers), shared by
//   every thread (they live in the last-level cache), in slivers
//   `KILN_MM_MR` rows high;
// - each task owns a block of the result (a panel's rows, or part of them,
//   by at most `KILN_MM_NC` columns: narrower where that gives each thread
//   `KILN_MM_TASKS_PER_THREAD` tasks) and runs every step of the chunk on it, so that
//   the block stays in its core's L2 cache between steps: per step it packs
//   `KILN_MM_KC` by `KILN_MM_NC` of `b` for itself (also in L2) in slivers
//   `KILN_MM_NR` columns wide, zero-padded, and runs each sliver of its rows
//   of `a` (held in L1) against all of them;
// - the micro-kernel keeps an `MR` x `NR` block of accumulators in
//   registers, in vectors of `KILN_MM_VBYTES` bytes along the columns, and
//   adds it into the result (or, for a result stored narrower than it is
//   summed, into float partial sums converted after the last step).
//
// Many small products (a batch of attention heads) run one whole product per
// thread instead. The tile sizes are the device's numbers, and only the
// device's: the plugin's `kernel_header` defines every `KILN_MM_*` macro for
// its SIMD width and caches, and this header refuses to build without them.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "arena.h"
#include "blas.h"
#include "scalar.h"

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

// The loads and stores a generated product passes to `kiln_mm`: one type per
// storage format. Each lambda is a type of its own, so a lambda per call made
// the compiler build the whole packed product again for every product of a
// file (about 0.7 s each at -O3); with these, a file builds it once per dtype.
template <typename T>
struct KilnLoad {
    T operator()(const T* p, int64_t i) const { return p[i]; }
};
struct KilnLoadF16 {
    float operator()(const uint16_t* p, int64_t i) const { return kiln_h2f(p[i]); }
};
struct KilnLoadBF16 {
    float operator()(const uint16_t* p, int64_t i) const { return kiln_bf2f(p[i]); }
};
template <typename T>
struct KilnStore {
    void operator()(T* p, int64_t i, T v) const { p[i] = v; }
};
struct KilnStoreF16 {
    void operator()(uint16_t* p, int64_t i, float v) const { p[i] = kiln_f2h(v); }
};
struct KilnStoreBF16 {
    void operator()(uint16_t* p, int64_t i, float v) const { p[i] = kiln_f2bf(v); }
};

// `kiln_mm` is `static` unless `KILN_MM_LINKED` is defined: then it has
// external linkage, hidden outside the library, so that `host run` can
// compile the products of a dtype once into an object of its cache and link
// it into every library that calls them (`KILN_MM_LINKED_F32` and the like
// below), instead of compiling them into each generated file again.
#ifdef KILN_MM_LINKED
#define KILN_MM_LINKAGE __attribute__((visibility("hidden")))
#else
#define KILN_MM_LINKAGE static
#endif

// The product into a contiguous `out` [batch, M, N].
template <typename Acc, typename T, typename Load, typename Store>
KILN_MM_LINKAGE int kiln_mm(int64_t batch, int64_t M, int64_t N, int64_t K,
                   const T* a, int64_t a_off, int64_t a_sb, int64_t a_sm, int64_t a_sk,
                   const T* b, int64_t b_off, int64_t b_sb, int64_t b_sk, int64_t b_sn,
                   T* out, Load load, Store store) {
    return kiln_mm_into<Acc>(batch, M, N, K, a, a_off, a_sb, a_sm, a_sk, b, b_off, b_sb, b_sk, b_sn, out, N,
                             load, store);
}

// One instantiation of `kiln_mm`: `template KILN_MM_INSTANCE(...);` compiles
// it (the runtime object), `extern template KILN_MM_INSTANCE(...);` tells a
// generated file that it is linked in.
#define KILN_MM_INSTANCE(Acc, T, Load, Store)                                                                 \
    int kiln_mm<Acc, T, Load, Store>(int64_t, int64_t, int64_t, int64_t, const T*, int64_t, int64_t, int64_t,   \
                                     int64_t, const T*, int64_t, int64_t, int64_t, int64_t, T*, Load, Store)
#ifdef KILN_MM_LINKED_F32
extern template KILN_MM_INSTANCE(float, float, KilnLoad<float>, KilnStore<float>);
#endif
#ifdef KILN_MM_LINKED_F64
extern template KILN_MM_INSTANCE(double, double, KilnLoad<double>, KilnStore<double>);
#endif
#ifdef KILN_MM_LINKED_F16
extern template KILN_MM_INSTANCE(float, uint16_t, KilnLoadF16, KilnStoreF16);
#endif
#ifdef KILN_MM_LINKED_BF16
extern template KILN_MM_INSTANCE(float, uint16_t, KilnLoadBF16, KilnStoreBF16);
#endif
