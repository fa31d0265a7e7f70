#!/usr/bin/env python3
"""A sum over each row (read once) in the forms Kiln's Triton codegen can take, against
Inductor's kernel for the same graph in the same process: for choosing between a
persistent tile and a loop along the row for reductions that read their rows once, and
for finding what a form costs.

    sum_forms.py [--shape 8192,8192 ...] [--top 8] [--show-inductor]

Each form is Kiln's kernel shape (row and row-count constants, one program per XBLOCK
rows) with switches: `persistent` (one tile over the whole row, no loop) or a loop by
RBLOCK; `stride` (the grid-stride loop over rows Kiln emits) or one block of rows per
program; `masked` (row and element masks on the loads, as Kiln emits them) or none where
the shape allows. Prints per shape the fastest forms and the ones in Kiln's current
form, as ms and share of copy bandwidth, then Inductor's.
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from inductor_report import report_inductor


@triton.jit
def _sum_rows(in_ptr, out_ptr, xoffset, xnumel: tl.constexpr, rnumel: tl.constexpr, XBLOCK: tl.constexpr,
              RBLOCK: tl.constexpr, PERSISTENT: tl.constexpr, MASKED: tl.constexpr):
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    rbase = tl.arange(0, RBLOCK)[None, :]
    if PERSISTENT:
        rmask = rbase < rnumel
        if MASKED:
            v = tl.load(in_ptr + (rnumel * xindex + rbase), xmask & rmask, other=0)
            red = tl.sum(tl.where(xmask & rmask, v, 0.0), 1)[:, None]
        else:
            v = tl.load(in_ptr + (rnumel * xindex + rbase))
            red = tl.sum(v, 1)[:, None]
    else:
        acc = tl.full([XBLOCK, RBLOCK], 0.0, tl.float32)
        for roffset in range(0, rnumel, RBLOCK):
            rindex = roffset + rbase
            rmask = rindex < rnumel
            if MASKED:
                v = tl.load(in_ptr + (rnumel * xindex + rindex), xmask & rmask, eviction_policy='evict_first',
                            other=0)
                acc = acc + tl.where(xmask & rmask, v, 0.0)
            else:
                v = tl.load(in_ptr + (rnumel * xindex + rindex), eviction_policy='evict_first')
                acc = acc + v
        red = tl.sum(acc, 1)[:, None]
    if MASKED:
        tl.store(out_ptr + xindex, red, xmask)
    else:
        tl.store(out_ptr + xindex, red)


@triton.jit
def sum_form(in_ptr, out_ptr, xnumel: tl.constexpr, rnumel: tl.constexpr, XBLOCK: tl.constexpr,
             RBLOCK: tl.constexpr, PERSISTENT: tl.constexpr, STRIDE: tl.constexpr, MASKED: tl.constexpr):
    if STRIDE:
        for xoffset in range(tl.program_id(0) * XBLOCK, xnumel, tl.num_programs(0) * XBLOCK):
            _sum_rows(in_ptr, out_ptr, xoffset, xnumel, rnumel, XBLOCK, RBLOCK, PERSISTENT, MASKED)
    else:
        _sum_rows(in_ptr, out_ptr, tl.program_id(0) * XBLOCK, xnumel, rnumel, XBLOCK, RBLOCK, PERSISTENT, MASKED)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", nargs="*", default=["32768,2048", "16384,4096", "8192,8192", "4096,8192",
                                                   "65536,1024", "8192,5000"])
    p.add_argument("--top", type=int, default=8)
    p.add_argument("--show-inductor", action="store_true", help="print Inductor's whole kernel")
    args = p.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"# {torch.cuda.get_device_name()} ({sms} SMs), torch {torch.__version__}, triton {triton.__version__}")
    for shape in args.shape:
        rows, n = (int(s) for s in shape.split(","))
        x = torch.randn(rows, n, device="cuda")
        ref = x.double().sum(1, keepdim=True).float()
        y = torch.empty_like(ref)
        nbytes = (x.numel() + ref.numel()) * 4
        scale = nbytes / (2 * x.numel() * 4)
        copy_ms = do_bench(lambda: x.clone())
        n_p2 = triton.next_power_of_2(n)
        results = []
        for w in (4, 8, 16):
            for rb in (1024, 2048, 4096, n_p2):
                persistent = rb >= n_p2
                if rb > n_p2 or rb < 128 * w:
                    continue
                for stride in (True, False):
                    for masked in (True, False):
                        if not masked and n % rb:
                            continue
                        fn = lambda: sum_form[(rows,)](x, y, rows, n, 1, rb, persistent, stride, masked,
                                                       num_warps=w, num_stages=1)
                        fn()
                        if not torch.allclose(y, ref, rtol=1e-4, atol=1e-3):
                            print(f"WRONG {shape} warps {w} RBLOCK {rb} stride {stride} masked {masked}")
                            continue
                        results.append((do_bench(fn, rep=200), w, rb, persistent, stride, masked))
        results.sort()
        print(f"## sum of [{rows}, {n}]: copy {copy_ms:.4f} ms")

        def line(r):
            ms, w, rb, persistent, stride, masked = r
            form = "persistent" if persistent else f"loop {rb:5d}"
            return (f"warps {w:2d} {form:>10} stride {stride!s:5} masked {masked!s:5}: {ms:.4f} ms "
                    f"{copy_ms * scale / ms * 100:5.1f} % of copy")
        for r in results[:args.top]:
            print(line(r))
        print("  Kiln's form (stride, masked):")
        for r in [r for r in results if r[4] and r[5]][:4]:
            print("  " + line(r))
        report_inductor(lambda t: t.sum(1, keepdim=True), (x,), lambda ms: copy_ms * scale / ms * 100,
                        "." if args.show_inductor else r"R0_BLOCK: tl.constexpr =|for r0_offset|tl\.load",
                        f" ({nbytes / 1e6:.0f} MB moved)")


if __name__ == "__main__":
    main()
