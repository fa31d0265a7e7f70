#!/usr/bin/env python3
"""A transpose fused with an add (`x.t() + z`: one read across the rows, one along them)
under several tile configs, in the form Kiln generates it (2-D tiles, a grid-stride loop
over each axis), against Inductor's kernel for the same graph in the same process. For
choosing the heuristics' tile for pointwise kernels that read across a transpose:

    tile_configs.py [--size 4096 ...] [--warps 1]

prints per size the fastest (XBLOCK, RBLOCK, num_warps, grid order) configs, the median
time and share of copy bandwidth, then Inductor's time and its kernel's config.
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from inductor_report import report_inductor


@triton.jit
def transpose_add(in_ptr0, in_ptr1, out_ptr0, xnumel, rnumel, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr,
                  R_FIRST: tl.constexpr):
    # Kiln's tile: x the output's rows (x's columns), r the output's columns.
    if R_FIRST:
        xpid, rpid, xprograms, rprograms = tl.program_id(1), tl.program_id(0), tl.num_programs(1), tl.num_programs(0)
    else:
        xpid, rpid, xprograms, rprograms = tl.program_id(0), tl.program_id(1), tl.num_programs(0), tl.num_programs(1)
    xbase = tl.arange(0, XBLOCK)[:, None]
    rbase = tl.arange(0, RBLOCK)[None, :]
    for xoffset in range(xpid * XBLOCK, xnumel, xprograms * XBLOCK):
        xindex = xoffset + xbase
        xmask = xindex < xnumel
        for roffset in range(rpid * RBLOCK, rnumel, rprograms * RBLOCK):
            rindex = roffset + rbase
            rmask = rindex < rnumel
            tmp0 = tl.load(in_ptr0 + (xindex + xnumel * rindex), xmask & rmask, other=0)
            tmp1 = tl.load(in_ptr1 + (rnumel * xindex + rindex), xmask & rmask, other=0)
            tl.store(out_ptr0 + (rnumel * xindex + rindex), tmp0 + tmp1, xmask & rmask)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", nargs="*", type=int, default=[4096, 8192, 3000])
    p.add_argument("--warps", type=int, default=0, help="only configs of this many warps")
    p.add_argument("--top", type=int, default=10)
    args = p.parse_args()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    for size in args.size:
        x = torch.randn(size, size, device="cuda")
        z = torch.randn(size, size, device="cuda")
        ref = (x.t() + z).contiguous()
        y = torch.empty(size, size, device="cuda")
        copy_ms = do_bench(lambda: x.clone())
        # Three arrays move where a copy moves two.
        scale = 1.5
        results = []
        warps = [args.warps] if args.warps else [4, 8]
        for xb in (32, 64, 128):
            for rb in (32, 64, 128):
                for w in warps:
                    if xb * rb < 64 * w or xb * rb > 512 * w * 4:
                        continue
                    for r_first in (False, True):
                        xg, rg = triton.cdiv(size, xb), triton.cdiv(size, rb)
                        grid = (rg, xg) if r_first else (xg, rg)
                        fn = lambda: transpose_add[grid](x, z, y, size, size, xb, rb, r_first, num_warps=w,
                                                         num_stages=1)
                        fn()
                        if not torch.equal(y, ref):
                            print(f"WRONG {size} {xb} {rb} {w}")
                            continue
                        results.append((do_bench(fn), xb, rb, w, r_first))
        results.sort()
        print(f"## x.t() + z of [{size}, {size}] float32: copy {copy_ms:.4f} ms")
        for ms, xb, rb, w, r_first in results[:args.top]:
            print(f"XBLOCK {xb:3d} RBLOCK {rb:3d} warps {w} columns first {r_first!s:5}: {ms:.4f} ms "
                  f"{copy_ms * scale / ms * 100:5.1f} % of copy")
        for ms, xb, rb, w, r_first in results:
            if (xb, rb, w, r_first) == (64, 64, 8, False):
                print(f"  Kiln's (64, 64, 8 warps, rows first): {ms:.4f} ms {copy_ms * scale / ms * 100:5.1f} %")
        report_inductor(lambda a, b: a.t() + b, (x, z), lambda ms: copy_ms * scale / ms * 100,
                        r"triton_config|tiling|XBLOCK|YBLOCK|num_warps|tl\.load|tl\.store|program_id")

if __name__ == "__main__":
    main()
