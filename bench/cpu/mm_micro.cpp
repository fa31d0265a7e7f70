// Where the cores' matrix-product time goes: the cpu device's micro-kernel timed alone at
// each level of the memory it reads from, against the cores' multiply-add peak, on every
// OpenMP thread at once (each with its own buffers: what the cores can do side by side,
// with nothing shared), then the whole product. For telling a slow micro-kernel from slow
// feeding and from a poor sharing of the work (on a machine without hardware counters).
// Built by bench/cpu/mm_micro.sh against a wrapper.cpp that `host compile`
// writes for this machine (so the plugin's own tiles):
//
//   g++ -O3 -march=native -fopenmp -std=c++17 -DKILN_WRAPPER='"wrapper.cpp"' mm_micro.cpp
//   OMP_NUM_THREADS=2 taskset -c 2,3 ./a.out
//
// Rows (GFLOP/s of all threads together, the best of five runs, and a share of the peak row):
//   peak        24 chains of 64-byte multiply-adds in registers, on every thread
//   l1 KC       kiln_mm_micro with a sliver of a and of b of KC, both in L1
//   l2b KC NB   one sliver of a against the NB / NR slivers of a packed KC x NB block of b
//               (b from L2, a from L1 as far as the b stream leaves it there)
//   task KC NB  kiln_mm_task as the product runs it: b's block packed from a row-major
//               matrix, then every sliver of a packed panel of MC rows against it, the
//               result block (row stride 2048) in L2 as far as it fits
//   mm N        kiln_mm_into of one N x N x N product over all the threads (Kiln's sharing)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

#include KILN_WRAPPER

#include <omp.h>

using Clock = std::chrono::steady_clock;

// A 64-byte aligned buffer of floats (as the product's scratch is).
struct Buffer {
    float* p;
    explicit Buffer(int64_t n, float scale) {
        p = static_cast<float*>(std::aligned_alloc(64, (size_t(n) * 4 + 63) / 64 * 64));
        for (int64_t i = 0; i < n; ++i) p[i] = scale * float(int(i * 7919 % 61) - 30) / 61.0f;
    }
    ~Buffer() { std::free(p); }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
};

// The best of five runs of `body(thread, buffers)` on every thread at once, in seconds;
// each thread's buffers (their sizes `sizes`, a scale for each: 0 for zeros) made and
// first touched on that thread, untimed.
template <typename Body>
static double best_parallel(std::initializer_list<std::pair<int64_t, float>> sizes, Body&& body) {
    const int threads = omp_get_max_threads();
    std::vector<std::vector<std::unique_ptr<Buffer>>> buffers(threads);
#pragma omp parallel
    for (const auto& [n, scale] : sizes) buffers[omp_get_thread_num()].push_back(std::make_unique<Buffer>(n, scale));
    double best = 1e30;
    for (int run = 0; run < 5; ++run) {
        Clock::time_point t0;
#pragma omp parallel
        {
#pragma omp barrier
#pragma omp master
            t0 = Clock::now();
#pragma omp barrier
            std::vector<float*> p;
            for (auto& b : buffers[omp_get_thread_num()]) p.push_back(b->p);
            body(p);
        }
        best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return best;
}

static float peak_sink = 0;

int main() {
    constexpr int64_t MR = KILN_MM_MR, NR = KILN_MM_NR;
    const int threads = omp_get_max_threads();
    std::printf("# tiles MR %d NR %d KC %d NC %d MC %d VBYTES %d; %d thread(s)\n", int(MR), int(NR),
                int(KILN_MM_KC), int(KILN_MM_NC), int(KILN_MM_MC), int(KILN_MM_VBYTES), threads);
    double peak = 0;
#if defined(__AVX512F__)
    {
        constexpr int64_t iters = 20'000'000;
        const double s = best_parallel({}, [&](const std::vector<float*>&) {
            __m512 acc[24];
            for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(float(i));
            const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(0.001f);
            for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 24
                for (int i = 0; i < 24; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
            }
            float sink = 0;
            for (int i = 0; i < 24; ++i) sink += _mm512_reduce_add_ps(acc[i]);
#pragma omp atomic
            peak_sink += sink;
        });
        peak = 2.0 * 16 * 24 * double(iters) * threads / s * 1e-9;
    }
#endif
    std::printf("%-22s %8.1f GFLOP/s\n", "peak", peak);
    auto row = [&](const char* name, double flops, double s) {
        const double g = flops / s * 1e-9;
        std::printf("%-22s %8.1f GFLOP/s  %5.2f of peak\n", name, g, peak > 0 ? g / peak : 0.0);
        std::fflush(stdout);
    };
    char name[64];
    for (int64_t kc : {64, 128}) {
        const int64_t reps = 200'000'000 / (MR * NR * kc) * 10;
        const double s = best_parallel({{MR * kc, 1}, {NR * kc, 1}, {MR * NR, 0}}, [&](const std::vector<float*>& p) {
            for (int64_t r = 0; r < reps; ++r) kiln_mm_micro<float>(kc, p[0], p[1], p[2], NR, false, MR, NR, p[0]);
        });
        std::snprintf(name, sizeof name, "l1 %lld", (long long)kc);
        row(name, 2.0 * MR * NR * kc * reps * threads, s);
    }
    for (int64_t kc : {256, 512})
        for (int64_t nb : {128, 256}) {
            const int64_t reps = 2'000'000'000 / (MR * nb * kc);
            const double s = best_parallel({{MR * kc, 1}, {nb * kc, 1}, {MR * nb, 0}}, [&](const std::vector<float*>& p) {
                for (int64_t r = 0; r < reps; ++r)
                    for (int64_t sl = 0; sl < nb / NR; ++sl)
                        kiln_mm_micro<float>(kc, p[0], p[1] + sl * NR * kc, p[2] + sl * NR, nb, false, MR, NR, p[0]);
            });
            std::snprintf(name, sizeof name, "l2b %lld %lld", (long long)kc, (long long)nb);
            row(name, 2.0 * MR * nb * kc * reps * threads, s);
        }
    auto load = [](const float* p, int64_t i) { return p[i]; };
    auto store = [](float* p, int64_t i, float v) { p[i] = v; };
    for (int64_t kc : {256, 512})
        for (int64_t nb : {128, 256}) {
            // b's block is packed in whole slivers (the last zero-padded).
            const int64_t mp = (KILN_MM_MC + MR - 1) / MR * MR, n = 2048, reps = 4, padded = (nb + NR - 1) / NR * NR;
            const double s = best_parallel({{mp * kc, 1}, {kc * n, 1}, {mp * n, 0}, {kc * padded, 0}},
                                           [&](const std::vector<float*>& p) {
                for (int64_t r = 0; r < reps; ++r)
                    kiln_mm_task<float>(0, mp, n, 0, mp, 0, kc, false, 0, nb, 0, mp / MR, p[0], p[3], p[2], n, p[1],
                                        0, 0, n, 1, p[2], load, store);
            });
            std::snprintf(name, sizeof name, "task %lld %lld", (long long)kc, (long long)nb);
            row(name, 2.0 * mp * nb * kc * reps * threads, s);
        }
    for (int64_t n : {1024, 2048, 2000, 2064}) {
        Buffer a(n * n, 1), b(n * n, 1), out(n * n, 0);
        double best = 1e30;
        for (int run = 0; run < 5; ++run) {
            const auto t0 = Clock::now();
            kiln_mm_into<float>(1, n, n, n, a.p, 0, 0, n, 1, b.p, 0, 0, n, 1, out.p, n, load, store);
            best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
        }
        std::snprintf(name, sizeof name, "mm %lld", (long long)n);
        row(name, 2.0 * n * n * n, best);
    }
    return peak_sink == 12345.0f;
}
