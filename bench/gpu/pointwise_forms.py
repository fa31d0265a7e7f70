#!/usr/bin/env python3
"""Which form of a flat pointwise Triton kernel reaches the memory bandwidth in 16 bits.

Kiln's pointwise kernels (element count a constant, as Kiln writes it) walk their elements in a grid-stride loop
(`for xoffset in range(pid * XBLOCK, xnumel, num_programs * XBLOCK)`) with a mask on
every access; Inductor's launch one program per block, and drop the mask when the block
divides the element count. This times BERT's GELU (bias add, erf GELU, bfloat16
`[4096, 3072]`) and a plain bf16 add in each form, block size and warp count, and prints
GB/s against a `copy_` of the same bytes.

    python3 bench/gpu/pointwise_forms.py [--out FILE]
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def gelu_loop(x_ptr, b_ptr, y_ptr, xnumel: tl.constexpr, N: tl.constexpr, XBLOCK: tl.constexpr, MASK: tl.constexpr):
    xbase = tl.arange(0, XBLOCK)
    for xoffset in range(tl.program_id(0) * XBLOCK, xnumel, tl.num_programs(0) * XBLOCK):
        xindex = xoffset + xbase
        xmask = xindex < xnumel if MASK else None
        x = tl.load(x_ptr + xindex, xmask).to(tl.float32)
        b = tl.load(b_ptr + xindex % N, xmask).to(tl.float32)
        h = x + b
        y = h * 0.5 * (libdevice.erf(h * 0.7071067811865476) + 1.0)
        tl.store(y_ptr + xindex, y.to(tl.bfloat16), xmask)


@triton.jit
def gelu_block(x_ptr, b_ptr, y_ptr, xnumel, N: tl.constexpr, XBLOCK: tl.constexpr, MASK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel if MASK else None
    x = tl.load(x_ptr + xindex, xmask).to(tl.float32)
    b = tl.load(b_ptr + xindex % N, xmask).to(tl.float32)
    h = x + b
    y = h * 0.5 * (libdevice.erf(h * 0.7071067811865476) + 1.0)
    tl.store(y_ptr + xindex, y.to(tl.bfloat16), xmask)


@triton.jit
def add_loop(x_ptr, z_ptr, y_ptr, xnumel: tl.constexpr, XBLOCK: tl.constexpr, MASK: tl.constexpr):
    xbase = tl.arange(0, XBLOCK)
    for xoffset in range(tl.program_id(0) * XBLOCK, xnumel, tl.num_programs(0) * XBLOCK):
        xindex = xoffset + xbase
        xmask = xindex < xnumel if MASK else None
        y = tl.load(x_ptr + xindex, xmask).to(tl.float32) + tl.load(z_ptr + xindex, xmask).to(tl.float32)
        tl.store(y_ptr + xindex, y.to(tl.bfloat16), xmask)


@triton.jit
def add_block(x_ptr, z_ptr, y_ptr, xnumel, XBLOCK: tl.constexpr, MASK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel if MASK else None
    y = tl.load(x_ptr + xindex, xmask).to(tl.float32) + tl.load(z_ptr + xindex, xmask).to(tl.float32)
    tl.store(y_ptr + xindex, y.to(tl.bfloat16), xmask)


def ptx_vector_loads(k) -> bool:
    ptx = k.asm.get("ptx", "")
    return "ld.global.v4" in ptx or "ld.global.nc.v4" in ptx or ".v4.b32" in ptx


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out")
    args = p.parse_args()
    lines = [f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}"]
    M, N = 4096, 3072
    x = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    z = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    n = x.numel()
    ref = torch.nn.functional.gelu(x.float() + b.float()).to(torch.bfloat16)
    copy = triton.testing.do_bench(lambda: y.copy_(x), rep=100)
    moved = 2 * n * 2
    lines.append(f"copy_ of [{M}, {N}] bf16: {copy * 1e3:.1f} us ({moved / copy / 1e6:.0f} GB/s)")
    for kind in ("gelu", "add"):
        for form in ("loop", "block"):
            for mask in (True, False):
                for xblock, warps in ((512, 4), (1024, 4), (1024, 8), (2048, 8)):
                    grid = (triton.cdiv(n, xblock),)
                    if kind == "gelu":
                        kern = gelu_loop if form == "loop" else gelu_block
                        call = lambda: kern[grid](x, b, y, n, N=N, XBLOCK=xblock, MASK=mask, num_warps=warps)
                        traffic = 2 * n * 2
                    else:
                        kern = add_loop if form == "loop" else add_block
                        call = lambda: kern[grid](x, z, y, n, XBLOCK=xblock, MASK=mask, num_warps=warps)
                        traffic = 3 * n * 2
                    handle = call()
                    if kind == "gelu":
                        err = (y.float() - ref.float()).abs().max().item()
                        assert err < 0.05, err
                    t = triton.testing.do_bench(call, rep=100)
                    lines.append(
                        f"{kind:4} {form:5} mask={int(mask)} XBLOCK={xblock:4} warps={warps}: {t * 1e3:6.1f} us "
                        f"({traffic / t / 1e6:5.0f} GB/s) v4 loads {ptx_vector_loads(handle)}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
