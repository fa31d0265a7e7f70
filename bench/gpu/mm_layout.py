#!/usr/bin/env python3
"""How the layout of a matrix product's operands and result decides cuBLAS's speed.

For `x [M, K] @ B [K, N]` in float32 (TF32 off), bfloat16 and float16, over a sweep of
N (round and odd sizes, vocabulary sizes, and random draws) and two weight layouts:

- `nk`: the weight stored `[N, K]` and read transposed (`nn.Linear`, a tied LM head);
- `kn`: the weight stored `[K, N]` (GPT-2's `Conv1D`).

it times, with triton.testing.do_bench (median ms):

- `plain`: `torch.mm(x, B)` into a contiguous `[M, N]` result;
- `pad_out`: the same product written into the first N columns of a `[M, N']`
  buffer whose rows are padded to 16 bytes (`out=` a strided view);
- `pad_both`: as `pad_out`, with a `kn` weight's rows padded too (a copy made
  once, as a compile-time layout of a constant would be);
- `inductor`: `torch.compile` of `x @ B` on the plain layout (first K only);
- `copy`: a contiguous copy of the padded result (what returning a contiguous
  output would add).

Prints one row per case and the geometric means of plain/pad_out and
pad_out/inductor over the cases whose N is not a multiple of the alignment.

Usage: mm_layout.py [--m 4096] [--ks 768,4096] [--random 4] [--no-inductor]
"""

from __future__ import annotations

import argparse
import math
import random

import torch
from triton.testing import do_bench

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def padded(n: int, dtype: torch.dtype) -> int:
    per = 16 // torch.empty((), dtype=dtype).element_size()
    return (n + per - 1) // per * per


def bench(fn) -> float:
    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def case(m: int, k: int, n: int, dtype: torch.dtype, layout: str, inductor: bool) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=dtype, generator=gen)
    np_ = padded(n, dtype)
    if layout == "nk":
        w = torch.randn(n, k, device="cuda", dtype=dtype, generator=gen)
        b = w.t()
        b_pad = b
    else:
        w = torch.randn(k, n, device="cuda", dtype=dtype, generator=gen)
        b = w
        b_pad = torch.zeros(k, np_, device="cuda", dtype=dtype)[:, :n]
        b_pad.copy_(w)
    out = torch.empty(m, n, device="cuda", dtype=dtype)
    out_buf = torch.empty(m, np_, device="cuda", dtype=dtype)
    out_pad = out_buf[:, :n]
    ref = torch.mm(x.double(), b.double())
    row = {"m": m, "k": k, "n": n, "dtype": str(dtype).split(".")[1], "layout": layout}
    row["plain"] = bench(lambda: torch.mm(x, b, out=out))
    row["pad_out"] = bench(lambda: torch.mm(x, b, out=out_pad))
    row["pad_both"] = bench(lambda: torch.mm(x, b_pad, out=out_pad))
    for got in (out, out_pad):
        err = ((got.double() - ref).abs().max() / ref.abs().max()).item()
        assert err < (1e-2 if dtype != torch.float32 else 1e-5), (row, err)
    row["copy"] = bench(lambda: out.copy_(out_pad))
    if inductor:
        torch._dynamo.reset()  # a fresh compile per shape, never dynamo's recompile limit's eager fallback
        f = torch.compile(lambda a, c: a @ c, dynamic=False)
        f(x, b)
        row["inductor"] = bench(lambda: f(x, b))
    del x, w, b, b_pad, out, out_buf, out_pad, ref
    torch.cuda.empty_cache()
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--m", type=int, default=4096)
    p.add_argument("--ks", default="768,4096")
    p.add_argument("--dtypes", default="bf16,fp16,fp32")
    p.add_argument("--random", type=int, default=4, help="random N values to add")
    p.add_argument("--no-inductor", action="store_true")
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rng = random.Random(45)
    ns = [1000, 2050, 3072, 4097, 30522, 32000, 32001, 50257, 50264]
    ns += sorted(rng.randrange(1000, 60000) for _ in range(a.random))
    ks = [int(k) for k in a.ks.split(",")]
    cols = ["plain", "pad_out", "pad_both", "inductor", "copy"]
    print(f"{'dtype':5} {'lay':3} {'k':>5} {'n':>6} " + " ".join(f"{c:>9}" for c in cols))
    gains, vs_ind = [], []
    for name in a.dtypes.split(","):
        dtype = DTYPES[name]
        for layout in ("nk", "kn"):
            for k in ks:
                for n in ns:
                    r = case(a.m, k, n, dtype, layout, not a.no_inductor and k == ks[0])
                    vals = " ".join(f"{r[c]:9.4f}" if c in r else f"{'-':>9}" for c in cols)
                    print(f"{name:5} {layout:3} {k:5} {n:6} {vals}", flush=True)
                    if padded(n, dtype) != n:
                        best = min(r["pad_out"], r["pad_both"])
                        gains.append(r["plain"] / best)
                        if "inductor" in r:
                            vs_ind.append(best / r["inductor"])

    def gmean(v):
        return math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")

    print(f"unaligned N: plain / best padded gmean {gmean(gains):.3f} "
          f"(min {min(gains, default=float('nan')):.3f}, max {max(gains, default=float('nan')):.3f})")
    if vs_ind:
        print(f"unaligned N: best padded / inductor gmean {gmean(vs_ind):.3f} "
              f"(max {max(vs_ind):.3f})")


if __name__ == "__main__":
    main()
