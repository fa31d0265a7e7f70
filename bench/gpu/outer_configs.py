#!/usr/bin/env python3
"""Outer reductions (the innermost dim kept: `x.sum(d)` for d before the last) under
several launch configs, in the form Kiln generates them, against Inductor's kernel
for the same graph in the same process. For choosing the heuristics' outer tile:

    outer_configs.py [--shape 32,64,128,256 --dim 2] [--warps 1]

prints, per (XBLOCK, RBLOCK, num_warps, eviction) config, the median time (ms) and the
share of copy bandwidth, then Inductor's time and its generated kernel's config.
`--warps 1` keeps to one-warp programs (the gxu's rule).
"""

from __future__ import annotations

import argparse
import math

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from inductor_report import report_inductor


@triton.jit
def outer_sum(in_ptr, out_ptr, xnumel, rnumel, inner, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr,
              EVICT: tl.constexpr, STRIDE_LOOP: tl.constexpr):
    # x viewed as [outer, rnumel, inner]; the result [outer, inner] (xnumel = outer * inner).
    xbase = tl.arange(0, XBLOCK)[:, None]
    rbase = tl.arange(0, RBLOCK)[None, :]
    step = tl.num_programs(0) * XBLOCK if STRIDE_LOOP else xnumel
    for xoffset in range(tl.program_id(0) * XBLOCK, xnumel, step):
        xindex = xoffset + xbase
        xmask = xindex < xnumel
        acc = tl.full([XBLOCK, RBLOCK], 0.0, tl.float32)
        for roffset in range(0, rnumel, RBLOCK):
            rindex = roffset + rbase
            rmask = rindex < rnumel
            ptr = in_ptr + (rnumel * inner * (xindex // inner) + inner * rindex + xindex % inner)
            if EVICT:
                v = tl.load(ptr, xmask & rmask, eviction_policy='evict_first', other=0)
            else:
                v = tl.load(ptr, xmask & rmask, other=0)
            acc = acc + tl.where(xmask & rmask, v, 0.0)
        tl.store(out_ptr + xindex, tl.sum(acc, 1)[:, None], xmask)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="32,64,128,256")
    p.add_argument("--dim", type=int, default=2)
    p.add_argument("--warps", type=int, default=0, help="only configs of this many warps")
    args = p.parse_args()
    shape = [int(s) for s in args.shape.split(",")]
    d = args.dim
    outer = math.prod(shape[:d])
    r = shape[d]
    inner = math.prod(shape[d + 1:])
    x = torch.randn(shape, device="cuda")
    ref = x.sum(d)
    y = torch.empty_like(ref)
    nbytes = x.numel() * 4 + ref.numel() * 4
    copy_ms = do_bench(lambda: x.clone())
    copy_bw = 2 * x.numel() * 4 / (copy_ms * 1e-3)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    print(f"# sum over dim {d} of {shape}: outer {outer}, reduced {r}, inner {inner}; copy {copy_bw / 1e12:.3f} TB/s")
    rows = []
    warps = [args.warps] if args.warps else [2, 4, 8]
    for xb in (32, 64, 128, 256, 512):
        for rb in (2, 4, 8, 16, 32):
            for w in warps:
                if xb * rb < 32 * w or xb * rb > 4096 * max(1, w // 4) or rb > r:
                    continue
                for evict in (False, True):
                    for loop in (True, False):
                        programs = triton.cdiv(outer * inner, xb)
                        fn = lambda: outer_sum[(programs,)](x, y, outer * inner, r, inner, xb, rb, evict, loop,
                                                            num_warps=w, num_stages=1)
                        fn()
                        if not torch.allclose(y, ref, rtol=1e-4, atol=1e-4):
                            print(f"WRONG {xb} {rb} {w}")
                            continue
                        ms = do_bench(fn)
                        rows.append((ms, xb, rb, w, evict, loop))
    rows.sort()
    for ms, xb, rb, w, evict, loop in rows[:20]:
        print(f"XBLOCK {xb:4d} RBLOCK {rb:3d} warps {w} evict_first {evict!s:5} grid-stride {loop!s:5}: "
              f"{ms:.4f} ms {nbytes / (ms * 1e-3) / copy_bw * 100:5.1f} % of copy")
    report_inductor(lambda t: t.sum(d), (x,), lambda ms: nbytes / (ms * 1e-3) / copy_bw * 100,
                    r"reduction_hint|triton_config|XBLOCK|R0_BLOCK|num_warps|tl\.load|for r0_offset")

if __name__ == "__main__":
    main()
