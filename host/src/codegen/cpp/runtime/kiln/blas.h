// Kiln's cpu runtime: the BLAS library a matrix product may call instead of
// Kiln's own (see matmul.h), found with dlopen when the first product runs.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>
#ifdef _OPENMP
#include <omp.h>
#endif

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
