#!/usr/bin/env python3
"""Softmax over long rows (a looped reduction: an online max and sum over the row, then a
second pass that writes it) under several launch configs, in the form Kiln generates it,
against Inductor's kernel for the same graph in the same process. For choosing the
heuristics' looped-row config (warps, RBLOCK, stages, programs):

    row_configs.py [--shape 4096,50257 ...] [--warps 1] [--log | --sum]

prints per shape the fastest configs (median ms and share of copy bandwidth), then
Inductor's time and its kernel's config. `--warps 1` keeps to one-warp programs (the
gxu's rule); `--log` times log_softmax, `--sum` a plain sum over each row (read once). `programs` is the grid: `rows` (one program per row) or a multiple of the
GPU's SMs (each program then walks rows in a grid-stride loop, fewer rows in flight, so
that a row is still in L2 when the second pass reads it).
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice
from triton.testing import do_bench

from inductor_report import report_inductor


@triton.jit
def kiln_max_combine(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def kiln_online_softmax_update(m, s, v):
    m_new = tl.maximum(m, v, propagate_nan=tl.PropagateNan.ALL)
    base = tl.where(m_new == float("-inf"), 0.0, m_new)
    return m_new, s * libdevice.exp(m - base) + libdevice.exp(v - base)


@triton.jit
def kiln_online_softmax_finish(m, s):
    m_row = tl.reduce(m, 1, kiln_max_combine)[:, None]
    base = tl.where(m_row == float("-inf"), 0.0, m_row)
    return m_row, tl.sum(s * libdevice.exp(m - base), 1)[:, None]


@triton.jit
def row_softmax(in_ptr, out_ptr, xnumel, rnumel, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr,
                LOG: tl.constexpr, FIRST_EVICT_LAST: tl.constexpr):
    xbase = tl.arange(0, XBLOCK)[:, None]
    rbase = tl.arange(0, RBLOCK)[None, :]
    for xoffset in range(tl.program_id(0) * XBLOCK, xnumel, tl.num_programs(0) * XBLOCK):
        xindex = xoffset + xbase
        xmask = xindex < xnumel
        acc0 = tl.full([XBLOCK, RBLOCK], float("-inf"), tl.float32)
        acc1 = tl.full([XBLOCK, RBLOCK], 0.0, tl.float32)
        for roffset in range(0, rnumel, RBLOCK):
            rindex = roffset + rbase
            rmask = rindex < rnumel
            if FIRST_EVICT_LAST:
                v = tl.load(in_ptr + (rnumel * xindex + rindex), xmask & rmask, eviction_policy='evict_last', other=0)
            else:
                v = tl.load(in_ptr + (rnumel * xindex + rindex), xmask & rmask, other=0)
            acc0, acc1 = kiln_online_softmax_update(acc0, acc1, tl.where(xmask & rmask, v, float("-inf")))
        red0, red1 = kiln_online_softmax_finish(acc0, acc1)
        logsum = libdevice.log(red1)
        for roffset in range(0, rnumel, RBLOCK):
            rindex = roffset + rbase
            rmask = rindex < rnumel
            v = tl.load(in_ptr + (rnumel * xindex + rindex), xmask & rmask, eviction_policy='evict_first', other=0)
            if LOG:
                y = (v - red0) - logsum
            else:
                y = libdevice.exp(v - red0) / red1
            tl.store(out_ptr + (rnumel * xindex + rindex), y, xmask & rmask)


@triton.jit
def row_sum(in_ptr, out_ptr, xnumel, rnumel, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr,
            LOG: tl.constexpr, FIRST_EVICT_LAST: tl.constexpr):
    # A plain sum over each row (read once): looped, or one step when RBLOCK covers the row.
    xbase = tl.arange(0, XBLOCK)[:, None]
    rbase = tl.arange(0, RBLOCK)[None, :]
    for xoffset in range(tl.program_id(0) * XBLOCK, xnumel, tl.num_programs(0) * XBLOCK):
        xindex = xoffset + xbase
        xmask = xindex < xnumel
        acc = tl.full([XBLOCK, RBLOCK], 0.0, tl.float32)
        for roffset in range(0, rnumel, RBLOCK):
            rindex = roffset + rbase
            rmask = rindex < rnumel
            if FIRST_EVICT_LAST:
                v = tl.load(in_ptr + (rnumel * xindex + rindex), xmask & rmask, eviction_policy='evict_first',
                            other=0)
            else:
                v = tl.load(in_ptr + (rnumel * xindex + rindex), xmask & rmask, other=0)
            acc = acc + tl.where(xmask & rmask, v, 0.0)
        tl.store(out_ptr + xindex, tl.sum(acc, 1)[:, None], xmask)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", nargs="*", default=["4096,50257", "1335,50257", "512,131072", "8192,8192",
                                                   "13421,5000", "8192,4096"])
    p.add_argument("--warps", type=int, default=0, help="only configs of this many warps")
    p.add_argument("--log", action="store_true", help="log_softmax instead of softmax")
    p.add_argument("--sum", action="store_true",
                   help="a plain sum over each row instead (evict_last then means evict_first)")
    p.add_argument("--top", type=int, default=8)
    args = p.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"# {torch.cuda.get_device_name()} ({sms} SMs), torch {torch.__version__}, triton {triton.__version__}")
    for shape in args.shape:
        rows, n = (int(s) for s in shape.split(","))
        x = torch.randn(rows, n, device="cuda")
        if args.sum:
            op, kernel, name = (lambda t: t.sum(1, keepdim=True)), row_sum, "sum"
        elif args.log:
            op, kernel, name = (lambda t: torch.log_softmax(t, 1)), row_softmax, "log_softmax"
        else:
            op, kernel, name = (lambda t: torch.softmax(t, 1)), row_softmax, "softmax"
        ref = op(x)
        y = torch.empty_like(ref)
        nbytes = (x.numel() + ref.numel()) * 4
        # The share of copy bandwidth: a copy moves 2 × x; this moves `nbytes`.
        scale = nbytes / (2 * x.numel() * 4)
        copy_ms = do_bench(lambda: x.clone())
        results = []
        warps = [args.warps] if args.warps else [4, 8, 16]
        for w in warps:
            for rb in (512, 1024, 2048, 4096, 8192, 16384):
                if rb < 128 * w or rb > 2048 * w or rb > triton.next_power_of_2(n) or (rb > 8192 and not args.sum):
                    continue
                for stages in (1, 2):
                    for programs in ("rows", 1, 2, 4):
                        grid = rows if programs == "rows" else min(rows, programs * sms * max(1, 8 // w))
                        for evict_last in ((True, False) if args.sum else (True,)):
                            fn = lambda: kernel[(grid,)](x, y, rows, n, 1, rb, args.log, evict_last,
                                                         num_warps=w, num_stages=stages)
                            fn()
                            if not torch.allclose(y, ref, rtol=1e-4, atol=1e-5):
                                print(f"WRONG {shape} {w} {rb} {stages} {programs}")
                                continue
                            results.append((do_bench(fn), w, rb, stages, programs, grid, evict_last))
        results.sort()
        print(f"## {name} of [{rows}, {n}]: copy {copy_ms:.4f} ms")
        for ms, w, rb, stages, programs, grid, evict_last in results[:args.top]:
            print(f"warps {w:2d} RBLOCK {rb:5d} stages {stages} programs {str(programs):>4} ({grid:5d}) "
                  f"evict_last {evict_last!s:5}: {ms:.4f} ms {copy_ms * scale / ms * 100:5.1f} % of copy")
        kiln_like = [r for r in results if r[4] == "rows" and r[3] == 1 and r[6]]
        for ms, w, rb, stages, programs, grid, evict_last in kiln_like[:3]:
            print(f"  one program per row, 1 stage, warps {w:2d} RBLOCK {rb:5d}: {ms:.4f} ms "
                  f"{copy_ms * scale / ms * 100:5.1f} % of copy")
        report_inductor(op, (x,), lambda ms: copy_ms * scale / ms * 100,
                        r"reduction_hint|triton_config|R0_BLOCK|num_warps|grid\(|for r0_offset|tl\.load",
                        f" ({nbytes / 1e6:.0f} MB moved)")

if __name__ == "__main__":
    main()
