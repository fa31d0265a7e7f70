#!/usr/bin/env python3
"""What a fresh process's first `triton.compile` costs against the next ones: the time a
compile worker spends before its first kernel (kiln/_workers.py starts workers ahead to
hide it). Compiles a pointwise add (`a`) and a bf16 row reduction (`r`) in the order
given, for sm_90, and prints the import time of Triton and each compile's time. Run
each order in a fresh process with an empty Triton cache:

    for o in r ar ra rr; do TRITON_CACHE_DIR=$(mktemp -d) python3 bench/gpu/first_compile.py $o; done

Needs Triton (a GPU not: the target is given).
"""
import sys
import time

start = time.perf_counter()
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

imported = time.perf_counter() - start


@triton.jit
def add(x, y, o, n, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    m = i < n
    tl.store(o + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)


@triton.jit
def red(x, o, n, B: tl.constexpr):
    r = tl.program_id(0)
    i = tl.arange(0, B)
    v = tl.load(x + r * n + i, mask=i < n, other=0.0).to(tl.float32)
    tl.store(o + r, tl.sum(v * v, 0) / n)


KERNELS = {
    "a": (add, {"x": "*fp32", "y": "*fp32", "o": "*fp32", "n": "i32", "B": "constexpr"}),
    "r": (red, {"x": "*bf16", "o": "*fp32", "n": "i32", "B": "constexpr"}),
}


def main() -> None:
    order = sys.argv[1] if len(sys.argv) > 1 else "ar"
    times = []
    for k in order:
        fn, signature = KERNELS[k]
        start = time.perf_counter()
        triton.compile(ASTSource(fn, signature, {"B": 1024}), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": 4, "num_stages": 1})
        times.append(time.perf_counter() - start)
    print(order, "import", round(imported, 3), "compiles", [round(t, 3) for t in times])


if __name__ == "__main__":
    main()
