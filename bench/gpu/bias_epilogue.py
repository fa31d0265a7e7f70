#!/usr/bin/env python3
"""Where a linear layer's bias is cheapest: in the product's epilogue (`torch.addmm`, cuBLASLt's
bias epilogue) or in the pointwise kernel that reads the product.

For each dtype and shape of a sweep (M rows of activations, K x N weights stored `[N, K]` as
`nn.Linear` keeps them and read transposed, as Kiln's wrapper reads them), times on the device
clock, with the L2 cache as a model leaves it (no flush: the pointwise kernel reads what the
product just wrote):
- mm: `torch.mm(x, w.t(), out=y)`;
- addmm: `torch.addmm(b, x, w.t(), out=y)`;
- mm + gelu(y + b): the product, then Kiln's form of an erf-GELU kernel that adds the bias,
  in place;
- addmm + gelu(y): the bias in the product, then the GELU kernel without it, in place.

    python3 bench/gpu/bias_epilogue.py [--out FILE] [--dtypes fp32,bf16,fp16]
"""

from __future__ import annotations

import argparse
import statistics

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
ROWS = (512, 4096, 16384)
WEIGHTS = ((768, 768), (768, 3072), (3072, 768), (1024, 4096), (4096, 1024), (2048, 2048))


@triton.jit
def gelu(y_ptr, b_ptr, xnumel, N: tl.constexpr, BIAS: tl.constexpr, XBLOCK: tl.constexpr):
    xbase = tl.arange(0, XBLOCK)
    for xoffset in range(tl.program_id(0) * XBLOCK, xnumel, tl.num_programs(0) * XBLOCK):
        xindex = xoffset + xbase
        xmask = xindex < xnumel
        h = tl.load(y_ptr + xindex, xmask, other=0).to(tl.float32)
        if BIAS:
            h += tl.load(b_ptr + xindex % N, xmask, other=0).to(tl.float32)
        out = h * 0.5 * (libdevice.erf(h * 0.7071067811865476) + 1.0)
        tl.store(y_ptr + xindex, out.to(y_ptr.dtype.element_ty), xmask)


def device_us(fn, calls: int = 20, rounds: int = 5) -> float:
    """Microseconds per call of `fn` on the device clock: the median of `rounds` rounds of
    `calls` calls between events, each round queued while the device sleeps."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        torch.cuda._sleep(1_000_000)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(times)


def row(dtype: torch.dtype, m: int, k: int, n: int) -> tuple[float, float, float, float]:
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    w = torch.randn(n, k, device="cuda", dtype=dtype) / k ** 0.5
    b = torch.randn(n, device="cuda", dtype=dtype)
    y = torch.empty(m, n, device="cuda", dtype=dtype)
    numel, xblock = m * n, 1024
    grid = (triton.cdiv(numel, xblock),)

    def gelu_bias():
        gelu[grid](y, b, numel, N=n, BIAS=True, XBLOCK=xblock, num_warps=4)

    def gelu_plain():
        gelu[grid](y, b, numel, N=n, BIAS=False, XBLOCK=xblock, num_warps=4)

    def mm():
        torch.mm(x, w.t(), out=y)

    def addmm():
        torch.addmm(b, x, w.t(), out=y)

    want = torch.nn.functional.gelu(x.float() @ w.float().t() + b.float())
    for first, second in ((mm, gelu_bias), (addmm, gelu_plain)):
        first()
        second()
        err = (y.float() - want).abs().max().item() / want.abs().max().item()
        assert err < 3e-2, f"{first.__name__} + gelu: relative error {err}"
    return (device_us(mm), device_us(addmm), device_us(lambda: (mm(), gelu_bias())),
            device_us(lambda: (addmm(), gelu_plain())))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out")
    p.add_argument("--dtypes", default="fp32,bf16,fp16")
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    lines = [f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
             "TF32 off; device-clock us per call, L2 as the chain leaves it",
             "| dtype | M x K x N | mm | addmm | addmm / mm | mm + gelu(y + b) | addmm + gelu(y) | ratio |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name in a.dtypes.split(","):
        for m in ROWS:
            for k, n in WEIGHTS:
                t_mm, t_addmm, t_split, t_fold = row(DTYPES[name], m, k, n)
                lines.append(f"| {name} | {m} x {k} x {n} | {t_mm:.1f} | {t_addmm:.1f} | {t_addmm / t_mm:.3f} "
                             f"| {t_split:.1f} | {t_fold:.1f} | {t_fold / t_split:.3f} |")
                print(lines[-1], flush=True)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
