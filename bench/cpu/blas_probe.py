#!/usr/bin/env python3
"""Which BLAS libraries a machine has, and how fast their `cblas_sgemm` is against torch.mm
on pinned cores: for deciding whether the cpu device's matrix product should call one.

    python3 bench/cpu/blas_probe.py [--cores 0,1] [--shape M,K,N ...] [--lib PATH ...]

Candidates: the shared libraries `ldconfig -p` lists whose names say BLAS (OpenBLAS, MKL,
BLIS, FlexiBLAS, a reference libblas), the ones Python packages bundle (numpy's and
scipy's OpenBLAS, whose symbols carry a `scipy_` prefix and a `64_` suffix for 64-bit
integers), torch's own libraries, and any `--lib`. For each one that exports a
`cblas_sgemm` (under any of those names) with 32-bit integers, the table gives its ms and
its speed as a share of torch.mm's, each measured in rounds that take turns.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from inductor import interleaved_ms, parse_cores, pin_all_threads  # noqa: E402

ROW_MAJOR, NO_TRANS = 101, 111
NAMES = ("cblas_sgemm", "scipy_cblas_sgemm")


def candidates(extra: list[str]) -> list[str]:
    found = list(extra)
    try:
        listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    except OSError:
        listing = ""
    for line in listing.splitlines():
        m = re.search(r"=>\s*(\S+)$", line)
        if m and re.search(r"blas|mkl_rt|blis|flexiblas", Path(m.group(1)).name, re.I):
            found.append(m.group(1))
    for site in sys.path:
        for pattern in ("*.libs/*openblas*.so*", "scipy_openblas*/lib/*.so*", "torch/lib/*.so*",
                        "nvidia/*/lib/*blas*.so*"):
            found.extend(glob.glob(os.path.join(site, pattern)))
    seen, out = set(), []
    for path in found:
        real = os.path.realpath(path)
        if real not in seen and os.path.isfile(real):
            seen.add(real)
            out.append(path)
    return out


def sgemm_symbol(lib: ctypes.CDLL):
    for name in NAMES:
        fn = getattr(lib, name, None)
        if fn is not None:
            return name, fn
    return None, None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cores", default="0,1")
    p.add_argument("--shape", nargs="*", default=["2048,2048,2048", "1024,4096,1024", "4096,768,3072", "512,512,512"])
    p.add_argument("--lib", nargs="*", default=[])
    args = p.parse_args()
    cores = parse_cores(args.cores)
    threads = str(len(cores))
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
        os.environ[var] = threads
    import torch

    torch.set_num_threads(len(cores))
    libs = []
    for path in candidates(args.lib):
        try:
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
        except OSError as e:
            print(f"# {path}: not loadable ({str(e)[:80]})")
            continue
        name, fn = sgemm_symbol(lib)
        print(f"# {path}: {name or 'no cblas_sgemm'}")
        if fn is not None:
            fn.restype = None
            fn.argtypes = [ctypes.c_int] * 3 + [ctypes.c_int] * 3 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int,
                                                                      ctypes.c_void_p, ctypes.c_int, ctypes.c_float,
                                                                      ctypes.c_void_p, ctypes.c_int]
            libs.append((Path(path).name, fn))
    pin_all_threads(cores)
    print(f"# {threads} thread(s) on cores {args.cores}; torch {torch.__version__}; "
          f"torch BLAS: {torch.backends.mkl.is_available() and 'MKL' or 'not MKL'}")
    for shape in args.shape:
        m, k, n = (int(s) for s in shape.split(","))
        a, b = torch.randn(m, k), torch.randn(k, n)
        ref = a @ b
        fns = {"torch": lambda: torch.mm(a, b)}
        for name, fn in libs:
            c = torch.empty(m, n)
            call = (lambda fn=fn, c=c: fn(ROW_MAJOR, NO_TRANS, NO_TRANS, m, n, k, 1.0, a.data_ptr(), k,
                                          b.data_ptr(), n, 0.0, c.data_ptr(), n))
            call()
            if not torch.allclose(c, ref, rtol=1e-3, atol=1e-3):
                print(f"{shape} {name}: WRONG result")
                continue
            fns[name] = call
        ms = interleaved_ms(fns, rounds=5, budget_s=3.0)
        flops = 2 * m * n * k
        for name, t in ms.items():
            print(f"mm {shape:>16} {name:>40}: {t:8.2f} ms {flops / t / 1e6:6.0f} GFLOP/s "
                  f"{ms['torch'] / t:5.2f}x torch's speed")


if __name__ == "__main__":
    main()
