#!/usr/bin/env python3
"""What a tiny kernel costs under CUDA graphs, by form and launch config: a decoding step's
pointwise kernels (GPT-2's gelu over 3072 elements) and persistent reductions (a layer norm of
one 768-wide row), in 16 bits, each written as Kiln writes it (programs striding over the
blocks: `for xoffset in range(pid * XBLOCK, xnumel, nprog * XBLOCK)`) and as Inductor does (one
block per program), at several blocks and warps. Each is captured 200 times back to back in
one graph; the time is a replay's over 200.

    python3 bench/gpu/tiny_kernels.py [--dtype bf16]
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl


@triton.jit
def _gelu_block(in0, in1, out0, xindex, xnumel):
    xmask = xindex < xnumel
    a = tl.load(in0 + xindex, xmask, other=0).to(tl.float32)
    b = tl.load(in1 + xindex, xmask, other=0).to(tl.float32)
    x = a + b
    y = 0.5 * x * (1.0 + tl.extra.cuda.libdevice.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    tl.store(out0 + xindex, y.to(out0.dtype.element_ty), xmask)


@triton.jit
def gelu_strided(in0, in1, out0, xnumel, XBLOCK: tl.constexpr):
    xbase = tl.arange(0, XBLOCK)
    for xoffset in range(tl.program_id(0) * XBLOCK, xnumel, tl.num_programs(0) * XBLOCK):
        _gelu_block(in0, in1, out0, xoffset + xbase, xnumel)


@triton.jit
def gelu_block(in0, in1, out0, xnumel, XBLOCK: tl.constexpr):
    _gelu_block(in0, in1, out0, tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK), xnumel)


@triton.jit
def _norm_rows(in0, in1, w, b, out0, out1, xindex, xnumel, rnumel, RBLOCK: tl.constexpr):
    """x = in0 + in1 stored to out0, and its layer norm (weight w, bias b) to out1."""
    rindex = tl.arange(0, RBLOCK)[None, :]
    rmask = rindex < rnumel
    m = (xindex < xnumel) & rmask
    x = tl.load(in0 + xindex * rnumel + rindex, m, other=0).to(tl.float32)
    x = x + tl.load(in1 + xindex * rnumel + rindex, m, other=0).to(tl.float32)
    tl.store(out0 + xindex * rnumel + rindex, x.to(out0.dtype.element_ty), m)
    mean = tl.sum(tl.where(m, x, 0.0), 1)[:, None] / rnumel
    d = x - mean
    var = tl.sum(tl.where(m, d * d, 0.0), 1)[:, None] / rnumel
    y = d * tl.math.rsqrt(var + 1e-5) * tl.load(w + rindex, rmask, other=0).to(tl.float32)
    y = y + tl.load(b + rindex, rmask, other=0).to(tl.float32)
    tl.store(out1 + xindex * rnumel + rindex, y.to(out1.dtype.element_ty), m)


@triton.jit
def norm_strided(in0, in1, w, b, out0, out1, xnumel, rnumel, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    xbase = tl.arange(0, XBLOCK)[:, None]
    for xoffset in range(tl.program_id(0) * XBLOCK, xnumel, tl.num_programs(0) * XBLOCK):
        _norm_rows(in0, in1, w, b, out0, out1, xoffset + xbase, xnumel, rnumel, RBLOCK)


@triton.jit
def norm_block(in0, in1, w, b, out0, out1, xnumel, rnumel, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    _norm_rows(in0, in1, w, b, out0, out1, xindex, xnumel, rnumel, RBLOCK)


def graph_us(launch, copies: int = 200, replays: int = 20) -> float:
    """Microseconds per launch: `copies` launches captured in one graph, replayed."""
    launch()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(copies):
            launch()
    g.replay()
    torch.cuda.synchronize()
    best = None
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            g.replay()
        end.record()
        end.synchronize()
        us = start.elapsed_time(end) * 1e3 / (replays * copies)
        best = us if best is None else min(best, us)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    a = p.parse_args()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[a.dtype]
    print(f"# bench/gpu/tiny_kernels.py on {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"triton {triton.__version__}, {a.dtype}: us per launch under a CUDA graph (best of 5 replays of 20 x 200)")
    print("| kernel | form | XBLOCK | warps | programs | us |")
    print("| --- | --- | --- | --- | --- | --- |")
    n = 3072
    x, bias, out = (torch.randn(n, device="cuda", dtype=dtype) for _ in range(3))
    for block, warps in [(128, 1), (256, 1), (256, 2), (512, 2), (512, 4), (1024, 4), (1024, 8), (4096, 8)]:
        grid = (triton.cdiv(n, block),)
        for name, kernel in [("strided", gelu_strided), ("block", gelu_block)]:
            us = graph_us(lambda: kernel[grid](x, bias, out, n, XBLOCK=block, num_warps=warps))
            print(f"| gelu 3072 | {name} | {block} | {warps} | {grid[0]} | {us:.2f} |", flush=True)
    rows, width = 1, 768
    t = [torch.randn(rows * width, device="cuda", dtype=dtype) for _ in range(6)]
    for warps in (1, 2, 4, 8, 16):
        for name, kernel in [("strided", norm_strided), ("block", norm_block)]:
            us = graph_us(lambda: kernel[(rows,)](*t, rows, width, XBLOCK=1, RBLOCK=1024, num_warps=warps))
            print(f"| add + layer norm 1 x 768 | {name} | 1 x 1024 | {warps} | {rows} | {us:.2f} |", flush=True)
    # An empty kernel: the floor of a launch in a graph.
    empty = torch.empty(1, device="cuda", dtype=dtype)
    us = graph_us(lambda: gelu_block[(1,)](empty, empty, empty, 0, XBLOCK=128, num_warps=1))
    print(f"| gelu of 0 elements (a launch alone) | block | 128 | 1 | 1 | {us:.2f} |")


if __name__ == "__main__":
    main()
