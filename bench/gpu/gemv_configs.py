#!/usr/bin/env python3
"""Launch configs for a product of one row as a reduction (passes/few_rows.rs): how fast each
reads the weight, on the GPU machine.

A decoding step at batch 1 multiplies one row by each weight: `out[n] = sum_k x[k] * W[n, k]`,
which Kiln writes as a reduction over K with float32 products, one row of W per output. The
kernel below has the structure of Kiln's (rows of the grid-stride loop, a loop over K in steps
of RBLOCK when K is longer), with XBLOCK rows per program. Each config is timed as a decoding
step runs it, inside a CUDA graph (launch latency included, as one kernel of a step) that cycles
through copies of the weight larger than L2 together, and given as the share of the copy
bandwidth its bytes (the weight, the row, the result) reach.

    python3 bench/gpu/gemv_configs.py [--dtype bf16] [--shapes 1024x5632,2816x1024] [--pdl] [--out FILE]

Shapes are K x N (inputs x outputs); the default list holds GPT-2 small's, the Llama-style
model's and a 7B model's projections at one row.
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# K x N: GPT-2 small (qkv, o, fc, proj, LM head), the Llama-style model of bench/gpu/decode_step.py
# (qkv, o, gate and up merged, down, LM head), a 7B model's (q, gate and up merged, down).
SHAPES = ("768x2304,768x768,768x3072,3072x768,768x50257,1024x1536,1024x1024,1024x5632,2816x1024,"
          "1024x32000,4096x4096,4096x22016,11008x4096")
X_BLOCKS = (1, 2, 4, 8, 16)
R_BLOCKS = (128, 256, 512, 1024, 2048)
WARPS = (1, 2, 4, 8, 16)


@triton.jit
def one_row(x_ptr, w_ptr, out_ptr, N, K, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr, PDL: tl.constexpr):
    # With PDL (--pdl), launched as a programmatic dependent of the launch before it: each
    # step's weight load is issued first, then the next launch is let start and the kernel
    # waits for the one before, as Kiln's kernels do (kiln_dependent_wait).
    xbase = tl.arange(0, XBLOCK)[:, None]
    rbase = tl.arange(0, RBLOCK)[None, :]
    for xoffset in range(tl.program_id(0) * XBLOCK, N, tl.num_programs(0) * XBLOCK):
        xindex = xoffset + xbase
        xmask = xindex < N
        acc = tl.zeros([XBLOCK, RBLOCK], tl.float32)
        for roffset in range(0, K, RBLOCK):
            rindex = roffset + rbase
            rmask = rindex < K
            b = tl.load(w_ptr + K * xindex + rindex, xmask & rmask, other=0).to(tl.float32)
            if PDL:
                tl.extra.cuda.gdc_launch_dependents()
                tl.extra.cuda.gdc_wait()
            a = tl.load(x_ptr + rindex, rmask, other=0).to(tl.float32)
            acc += a * b
        red = tl.sum(acc, 1)[:, None]
        tl.store(out_ptr + xindex, red.to(out_ptr.dtype.element_ty), xmask)


def copy_bandwidth() -> float:
    """Bytes per second of a device-to-device copy of 1 GiB (read and write counted)."""
    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    ms = triton.testing.do_bench(lambda: b.copy_(a), warmup=25, rep=200)
    return 2 * a.numel() / (ms * 1e-3)


def in_graph_us(launch, launches: int = 50, replays: int = 10) -> float:
    """Microseconds per launch of `launch`, `launches` of them captured in one CUDA graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        launch()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            launch()
    graph.replay()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(replays):
        start = time.perf_counter()
        graph.replay()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / launches * 1e6)
    return best


# A decoding step's weights are read once each, from memory: the graph cycles through copies of
# the weight that together hold more than the H100's 50 MB of L2.
COLD_BYTES = 200 << 20


def sweep(k: int, n: int, dtype, bandwidth: float, sms: int, pdl: bool = False) -> list[tuple]:
    x = torch.randn(k, device="cuda").to(dtype)
    w = torch.randn(n, k, device="cuda").to(dtype)
    copies = [w] + [w.clone() for _ in range(COLD_BYTES // (w.numel() * w.element_size()))]
    turn = [0]
    out = torch.empty(n, device="cuda", dtype=dtype)
    want = (w.float() @ x.float()).to(dtype)
    nbytes = (n * k + k + n) * x.element_size()
    rows = []
    for xb, rb, warps in itertools.product(X_BLOCKS, R_BLOCKS, WARPS):
        if rb > triton.next_power_of_2(k) or xb * rb > 16384 or xb * rb < 32 * warps:
            continue
        programs = triton.cdiv(n, xb)
        for grid in sorted({programs, min(programs, 4 * sms)}):
            def launch(grid=grid, xb=xb, rb=rb, warps=warps):
                turn[0] = (turn[0] + 1) % len(copies)
                options = {"launch_pdl": True} if pdl else {}
                one_row[(grid,)](x, copies[turn[0]], out, n, k, XBLOCK=xb, RBLOCK=rb, PDL=pdl, num_warps=warps,
                                 **options)
            launch()
            torch.cuda.synchronize()
            if not torch.allclose(out.float(), want.float(), rtol=2e-2, atol=2e-2 * want.float().abs().max().item()):
                rows.append((xb, rb, warps, grid, float("nan"), 0.0))
                continue
            us = in_graph_us(launch)
            rows.append((xb, rb, warps, grid, us, nbytes / (us * 1e-6) / bandwidth))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", default="bf16", choices=DTYPES)
    p.add_argument("--shapes", default=SHAPES)
    p.add_argument("--top", type=int, default=5)
    p.add_argument("--pdl", action="store_true",
                   help="launch each as a programmatic dependent of the one before (sm_90 and later)")
    p.add_argument("--out", type=Path)
    p.add_argument("--dump", type=Path, help="also every config's time, a line each")
    a = p.parse_args()
    dtype = DTYPES[a.dtype]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    bandwidth = copy_bandwidth()
    lines = [f"# bench/gpu/gemv_configs.py, {time.strftime('%Y-%m-%d %H:%M')}: {torch.cuda.get_device_name(0)}, "
             f"{sms} SMs, copy bandwidth {bandwidth / 1e12:.2f} TB/s, {a.dtype}; us per kernel inside a CUDA graph "
             f"of 50 launches, each on a copy of the weight not in L2; share of copy bandwidth"
             f"{'; each launched as a programmatic dependent of the one before' if a.pdl else ''}",
             "| K x N | x 1 and Kiln's step today (p2(K) up to 1024, else half of it up to 2048 here), two best warps | best | the next ones |",
             "| --- | --- | --- | --- |"]
    print("\n".join(lines), flush=True)
    for shape in a.shapes.split(","):
        k, n = (int(v) for v in shape.split("x"))
        rows = [r for r in sweep(k, n, dtype, bandwidth, sms, a.pdl) if r[4] == r[4]]
        rows.sort(key=lambda r: r[4])
        if a.dump:
            with a.dump.open("a") as f:
                f.writelines(f"{shape} x{r[0]} r{r[1]} w{r[2]} g{r[3]} {r[4]:.2f}\n" for r in rows)
        today_r = min(triton.next_power_of_2(k), 1024) if k <= 1024 else min(triton.next_power_of_2(k) // 2, 2048)
        today = [r for r in rows if r[0] == 1 and r[1] == today_r and r[3] == n]
        cell = lambda r: f"x{r[0]} r{r[1]} w{r[2]} g{r[3]}: {r[4]:.2f} us {100 * r[5]:.0f} %"  # noqa: E731
        lines.append(f"| {shape} | {' / '.join(cell(r) for r in today[:2]) or '—'} | {cell(rows[0])} | "
                     f"{'; '.join(cell(r) for r in rows[1:a.top])} |")
        print(lines[-1], flush=True)
        if a.out:
            a.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
