#!/usr/bin/env python3
"""Times the ways a wrapper can call a decode-sized matrix product (one row times a
transposed weight) on the GPU, with TF32 off as run.py has it, to choose the one the
Python wrapper emits. Usage: decode_mm.py [M K N]"""

import sys

import torch
import torch.nn.functional as F
from triton.testing import do_bench

torch.backends.cuda.matmul.allow_tf32 = False
torch.set_float32_matmul_precision("highest")
m, k, n = (int(a) for a in sys.argv[1:4]) if len(sys.argv) == 4 else (1, 768, 3072)
x = torch.randn(m, k, device="cuda")
w = torch.randn(n, k, device="cuda")
b = torch.randn(n, device="cuda")
out = torch.empty(m, n, device="cuda")
wt = torch.as_strided(w, (k, n), (1, k), 0)
ways = {
    "mm(x, w.t(), out=)": lambda: torch.mm(x, wt, out=out),
    "mm(x, w.t())": lambda: torch.mm(x, wt),
    "addmm(b, x, w.t(), out=)": lambda: torch.addmm(b, x, wt, out=out),
    "addmm(b, x, w.t())": lambda: torch.addmm(b, x, wt),
    "linear(x, w, b)": lambda: F.linear(x, w, b),
    "linear(x, w)": lambda: F.linear(x, w),
    "matmul(x, w.t())": lambda: torch.matmul(x, wt),
    "mm(w, x.t()).t()": lambda: torch.mm(w, x.t()).t(),
}
print(f"# {torch.cuda.get_device_name(0)}, M={m} K={k} N={n}")
for name, fn in ways.items():
    fn()
    print(f"{name:28} {do_bench(fn) * 1e3:8.2f} us")
