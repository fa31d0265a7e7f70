#!/usr/bin/env python3
"""Where the cpu device's matrix product spends its time, thread by thread: packing `a`'s
shared panels, packing each task's block of `b`, multiplying, and waiting at the two
barriers of each phase. For telling a packing cost from a micro-kernel or a load-balance
one when tuning the runtime's matrix product or a plugin's tiles.

    python3 bench/cpu/mm_profile.py --host PATH/TO/host [--cores 2,3] [--shape M,K,N ...]
                                    [--variant NAME=-DKILN_MM_MC=... ...] [--reps 10]

`host compile` writes the wrapper.cpp of `a @ b` for this machine and the runtime beside
it (kiln/*.h); a copy of the matrix product's header (kiln/matmul.h) gets timers (rdtsc, x86 only) around those parts and a `main` that runs the product
`--reps` times on random operands (Kiln's own kernel: -DKILN_MM_BLAS=0). Each variant is
that program built with its flags, run on the pinned cores, one process per variant and
shape (processes run one after another: compare shares, not times, across them; for
times use bench/cpu/mm_ab.py, whose variants take turns). The shares are of the wall
time of all the calls, per thread.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from inductor import parse_cores  # noqa: E402
from mm_ab import GRAPH, arguments  # noqa: E402

TIMERS = r"""#include <x86intrin.h>
#include <omp.h>
struct KilnProf { uint64_t v[5]; char pad[24]; };
static KilnProf kiln_prof[256];
#define KILN_PROF_START uint64_t kiln_t0 = __rdtsc();
#define KILN_PROF(i) { uint64_t t1 = __rdtsc(); kiln_prof[omp_get_thread_num()].v[i] += t1 - kiln_t0; kiln_t0 = t1; }
"""

MAIN = r"""
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>
int main(int argc, char** argv) {
    const int64_t M = atol(argv[1]), K = atol(argv[2]), N = atol(argv[3]);
    const int reps = atoi(argv[4]);
    std::vector<float> a(M * K), b(K * N), y(M * N);
    std::mt19937 g(0);
    std::normal_distribution<float> d;
    for (auto& v : a) v = d(g);
    for (auto& v : b) v = d(g);
    auto call = [&] {
        return kiln_mm<float>(1, M, N, K, a.data(), 0, 0, K, 1, b.data(), 0, 0, N, 1, y.data(),
                              [](const float* p, int64_t i) { return p[i]; },
                              [](float* p, int64_t i, float v) { p[i] = v; });
    };
    if (call() != 0 || call() != 0) { std::fprintf(stderr, "out of memory\n"); return 1; }
    std::memset(kiln_prof, 0, sizeof(kiln_prof));
    std::vector<double> ms;
    const uint64_t c0 = __rdtsc();
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        call();
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    const double total = double(__rdtsc() - c0);
    std::sort(ms.begin(), ms.end());
    std::printf("%6.2f ms %4.0f GFLOP/s |", ms[ms.size() / 2], 2.0 * M * N * K / ms[ms.size() / 2] / 1e6);
    for (int t = 0; t < omp_get_max_threads(); ++t) {
        const uint64_t* v = kiln_prof[t].v;
        std::printf(" t%d: pack a %4.1f%%  pack b %4.1f%%  multiply %4.1f%%  wait %4.1f%% + %4.1f%% |", t,
                    100 * v[0] / total, 100 * v[1] / total, 100 * v[2] / total, 100 * v[3] / total,
                    100 * v[4] / total);
    }
    std::printf("\n");
}
"""

# (what kiln/matmul.h says, what the profiled copy says instead): timers around the packing
# of a's panels and each task's b, the multiplying, and the phase's two barriers.
EDITS = [
    ("    const int64_t slivers = (nc + NR - 1) / NR;\n    kiln_mm_pack_b_block<Acc>(",
     "    const int64_t slivers = (nc + NR - 1) / NR;\n    KILN_PROF_START\n    kiln_mm_pack_b_block<Acc>("),
    ("    // One sliver of a stays in L1 while b's slivers stream past from L2.\n",
     "    KILN_PROF(1)\n    // One sliver of a stays in L1 while b's slivers stream past from L2.\n"),
    ("    if constexpr (!std::is_same<T, Acc>::value) {\n        if (last) {",
     "    KILN_PROF(2)\n    if constexpr (!std::is_same<T, Acc>::value) {\n        if (last) {"),
    ("#pragma omp for schedule(static) collapse(3)\n",
     "                    KILN_PROF_START\n#pragma omp for schedule(static) collapse(3) nowait\n"),
    ("#pragma omp for schedule(dynamic, 1)\n                    for (int64_t task = 0;",
     "                    KILN_PROF(0)\n#pragma omp barrier\n                    KILN_PROF(3)\n"
     "#pragma omp for schedule(dynamic, 1) nowait\n                    for (int64_t task = 0;"),
    ("                                              store);\n                    }\n                }\n    }\n    return failed;",
     "                                              store);\n                    }\n"
     "                    { KILN_PROF_START\n#pragma omp barrier\n                    KILN_PROF(4) }\n"
     "                }\n    }\n    return failed;"),
]


def profiled(wrapper: str, matmul: str) -> tuple[str, str]:
    """The wrapper including a copy of kiln/matmul.h with the timers, plus a `main`, and
    that copy; or an error naming the edit that no longer matches the header (update EDITS
    with it)."""
    end = wrapper.index('extern "C" int kiln_num_weights')
    src = wrapper[:end]
    include = '#include "kiln/matmul.h"\n'
    if src.count(include) != 1:
        raise SystemExit("mm_profile.py: the wrapper no longer includes kiln/matmul.h once; "
                         "update profiled() to how it includes the matrix product")
    first = src.index('#include "kiln/')
    src = src[:first] + TIMERS + src[first:].replace(include, '#include "kiln/matmul_profiled.h"\n')
    for old, new in EDITS:
        if matmul.count(old) != 1:
            raise SystemExit(f"mm_profile.py: kiln/matmul.h no longer has exactly one {old.strip()[:60]!r}; "
                             "update EDITS to the matrix product's current text")
        matmul = matmul.replace(old, new)
    return src + MAIN, matmul


def main() -> None:
    p = arguments(__doc__)
    p.add_argument("--reps", type=int, default=10)
    args = p.parse_args()
    threads = len(parse_cores(args.cores))
    work = Path(tempfile.mkdtemp(prefix="mm_profile."))
    (work / "graph.toml").write_text(GRAPH.format(m=64, k=64, n=64))
    env = dict(os.environ, KILN_CPU_CORES=str(threads))
    subprocess.run([str(args.host), "--plugins", str(args.host.parent), "compile", str(work / "graph.toml"),
                    "--device", "cpu", "-o", str(work)], check=True, env=env, capture_output=True)
    wrapper = (work / "wrapper.cpp").read_text()
    source, matmul = profiled(wrapper, (work / "kiln" / "matmul.h").read_text())
    (work / "kiln" / "matmul_profiled.h").write_text(matmul)
    (work / "profile.cpp").write_text(source)
    line = next(l for l in wrapper.splitlines() if l.startswith("// Build:"))
    build = [c for c in shlex.split(line.split(":", 1)[1])
             if c not in ("wrapper.cpp", "kiln.so", "-o", "-shared", "-fPIC")]
    variants = {"own": ""}
    for v in args.variant:
        name, _, flags = v.partition("=")
        variants[name] = flags
    for name, flags in variants.items():
        exe = work / f"profile_{name}"
        subprocess.run(build + ["-DKILN_MM_BLAS=0"] + shlex.split(flags) + [str(work / "profile.cpp"), "-o", str(exe)],
                       check=True)
    print(f"# {threads} thread(s) on cores {args.cores}; 'wait' is at the barrier after a's packing + "
          "after the tasks", flush=True)
    run_env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    for shape in args.shape:
        m, k, n = shape.split(",")
        for name in variants:
            out = subprocess.run(["taskset", "-c", args.cores, str(work / f"profile_{name}"), m, k, n,
                                  str(args.reps)], check=True, env=run_env, capture_output=True, text=True)
            print(f"mm {m}x{k}x{n} {name:>10}: {out.stdout.strip()}", flush=True)


if __name__ == "__main__":
    main()
