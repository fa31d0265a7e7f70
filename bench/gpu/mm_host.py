#!/usr/bin/env python3
"""Host microseconds of one matrix product as the Python wrapper could make it: torch.mm (ATen's
cuBLASLt or cuBLAS path, by dtype and by torch's preferred BLAS library) against cuBLAS's
cublasGemmEx called straight through ctypes on torch's own handle and stream. Tiny operands, so
that the device never holds the host back.

    python3 bench/gpu/mm_host.py [--out FILE]
"""

from __future__ import annotations

import argparse
import ctypes
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host_costs import per_call_us  # noqa: E402

CUDA_R = {torch.float32: 0, torch.float16: 2, torch.bfloat16: 14}
CUBLAS_COMPUTE_32F = 68
CUBLAS_OP_N = 0


def cublas():
    for name in ("libcublas.so.13", "libcublas.so.12", "libcublas.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def gemm_ex(lib, a, b, out):
    """out = a @ b (row-major), as column-major out^T = b^T a^T."""
    handle = ctypes.c_void_p(torch.cuda.current_blas_handle())
    f = lib.cublasGemmEx
    f.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                  ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                  ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                  ctypes.c_int]
    alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
    pa, pb = ctypes.byref(alpha), ctypes.byref(beta)
    m, k = a.shape
    n = b.shape[1]
    t = CUDA_R[a.dtype]

    def run():
        return f(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, pa, b.data_ptr(), t, n, a.data_ptr(), t, k, pb,
                 out.data_ptr(), t, n, CUBLAS_COMPUTE_32F, -1)

    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    dev = torch.device("cuda", 0)
    lib = cublas()
    lines = [f"# bench/gpu/mm_host.py: {torch.cuda.get_device_name(0)}, torch {torch.__version__}; host us per "
             f"call, median of 7 rounds of 2000; preferred BLAS {torch.backends.cuda.preferred_blas_library()}",
             "| dtype | torch.mm(out=) | torch.mm(out=), preferred cublas | cublasGemmEx through ctypes | "
             "same result |", "| --- | --- | --- | --- | --- |"]
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        a = torch.randn(16, 32, device=dev, dtype=dtype)
        b = torch.randn(32, 24, device=dev, dtype=dtype)
        out = torch.empty(16, 24, device=dev, dtype=dtype)
        usual = per_call_us(lambda: torch.mm(a, b, out=out))
        before = torch.backends.cuda.preferred_blas_library()
        torch.backends.cuda.preferred_blas_library("cublas")
        legacy = per_call_us(lambda: torch.mm(a, b, out=out))
        torch.backends.cuda.preferred_blas_library(before)
        direct, same = "—", "—"
        if lib is not None:
            run = gemm_ex(lib, a, b, out)
            torch.cuda.current_blas_handle()  # torch binds its handle to the current stream
            status = run()
            torch.cuda.synchronize()
            same = f"{status == 0 and torch.allclose(out.float(), (a.float() @ b.float()), atol=0.1, rtol=0.02)}"
            direct = f"{per_call_us(run):.2f}"
        lines.append(f"| {dtype} | {usual:.2f} | {legacy:.2f} | {direct} | {same} |")
        print(lines[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
