#!/usr/bin/env python3
"""What a rotary embedding's cos/sin cost in a Triton kernel, and how accurate each form is.

Llama's rotary embedding computes `q * cos(f) + rotate_half(q) * sin(f)` with the angles `f`
(position times inverse frequency) computed in the same kernel, so every element of q and k
evaluates a cos and a sin. This times that kernel, in the layout Kiln and Inductor generate it
(q read from the projection's [B, L, H, E], written [B, H, L, E]), with libdevice's
correctly range-reduced `cos`/`sin` against `tl.cos`/`tl.sin`, and measures each form's error
against float64 over the angles real models reach (positions up to 32k).

    python3 bench/gpu/trig_probe.py [--out FILE]
"""

from __future__ import annotations

import argparse
import math

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def rope(q_ptr, f_ptr, out_ptr, H: tl.constexpr, L: tl.constexpr, E: tl.constexpr,
         XBLOCK: tl.constexpr, FAST: tl.constexpr):
    x = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    e = x % E
    l = (x // E) % L
    h = (x // (E * L)) % H
    b = x // (E * L * H)
    src = b * (L * H * E) + l * (H * E) + h * E
    q = tl.load(q_ptr + src + e).to(tl.float32)
    half = E // 2
    rot = tl.where(e < half, -tl.load(q_ptr + src + e + half, mask=e < half, other=0.0).to(tl.float32),
                   tl.load(q_ptr + src + e - half, mask=e >= half, other=0.0).to(tl.float32))
    f = tl.load(f_ptr + l + L * (e % half))
    if FAST:
        y = q * tl.cos(f) + rot * tl.sin(f)
    else:
        y = q * libdevice.cos(f) + rot * libdevice.sin(f)
    tl.store(out_ptr + x, y.to(out_ptr.dtype.element_ty))


@triton.jit
def trig(x_ptr, cos_ptr, sin_ptr, n, FAST: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    x = tl.load(x_ptr + i, mask=m)
    if FAST:
        c = tl.cos(x)
        s = tl.sin(x)
    else:
        c = libdevice.cos(x)
        s = libdevice.sin(x)
    tl.store(cos_ptr + i, c, mask=m)
    tl.store(sin_ptr + i, s, mask=m)


def ptx_has(kernel, text: str) -> bool:
    return any(text in v for k, v in kernel.asm.items() if k == "ptx")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out")
    args = p.parse_args()
    lines = [f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}"]
    # Accuracy over angles up to 32k positions x inverse frequency 1.
    x = torch.linspace(0, 32768, 1 << 22, device="cuda", dtype=torch.float32)
    ref_c = torch.cos(x.double())
    ref_s = torch.sin(x.double())
    for fast in (False, True):
        c = torch.empty_like(x)
        s = torch.empty_like(x)
        k = trig[(triton.cdiv(x.numel(), 1024),)](x, c, s, x.numel(), FAST=fast, BLOCK=1024)
        for hi in (512, 4096, 32768):
            sel = x <= hi
            err = max((c.double() - ref_c)[sel].abs().max().item(), (s.double() - ref_s)[sel].abs().max().item())
            lines.append(f"{'tl.cos/sin' if fast else 'libdevice'}: max abs error for angles <= {hi}: {err:.2e}")
        lines.append(f"  ptx: cos.approx {ptx_has(k, 'cos.approx')}, sin.approx {ptx_has(k, 'sin.approx')}")
    torch_err = max((torch.cos(x).double() - ref_c).abs().max().item(), (torch.sin(x).double() - ref_s).abs().max().item())
    lines.append(f"torch.cos/sin (eager float32): max abs error for angles <= 32768: {torch_err:.2e}")
    # Speed on Llama-style shapes.
    for (B, H, L, E) in ((8, 16, 512, 64), (8, 4, 512, 64), (8, 32, 1024, 128)):
        for dtype in (torch.bfloat16, torch.float32):
            q = torch.randn(B, L, H, E, device="cuda", dtype=dtype)
            inv = 1.0 / (10000 ** (torch.arange(0, E, 2, device="cuda").float() / E))
            f = (inv[:, None] * torch.arange(L, device="cuda").float()[None, :]).contiguous()
            out = torch.empty(B, H, L, E, device="cuda", dtype=dtype)
            n = out.numel()
            times = {}
            for name, fast in (("libdevice", False), ("tl", True)):
                def go(fast=fast):
                    rope[(n // 1024,)](q, f, out, H, L, E, XBLOCK=1024, FAST=fast)
                times[name] = triton.testing.do_bench(go, rep=100)
                got = out.float()
            ang = torch.cat([f.t(), f.t()], -1)  # [L, E]: angle e is f[e % (E/2)]
            qt = q.float().permute(0, 2, 1, 3)
            rot = torch.cat([-qt[..., E // 2:], qt[..., : E // 2]], -1)
            ref = qt * torch.cos(ang) + rot * torch.sin(ang)
            err = (got - ref).abs().max().item()
            gb = (q.numel() + out.numel()) * q.element_size() / 1e9
            lines.append(
                f"rope B{B} H{H} L{L} E{E} {str(dtype)[6:]}: libdevice {times['libdevice'] * 1e3:.1f} us, "
                f"tl {times['tl'] * 1e3:.1f} us (ratio {times['tl'] / times['libdevice']:.2f}); "
                f"copy floor {gb / 3.0e3 * 1e6:.1f} us at 3 TB/s; fast form's error {err:.1e}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
