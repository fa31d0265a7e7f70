#!/usr/bin/env python3
"""How the launch shape of a chain of one-row products sets its time under programmatic
dependent launch: a decoding step's products, each reading the vector the one before wrote.

The chain is GPT-2 small's layer of products, twelve times: q/k/v (2304 x 768), output
(768 x 768), fc1 (3072 x 768) and fc2 (768 x 3072), in bfloat16, one launch a product under
a CUDA graph, each a programmatic dependent of the one before. Forms, timed in one process,
interleaved:

- `rows R`: R output rows a program, a grid of N / R programs, the row's weight loaded in
  chunks of RB with only the first chunk before the wait (Kiln's one-row product today
  loads the whole row of a short product, and the first chunk of a long one);
- `slice P`: about P programs a unit, each a block of rows whose whole weight slice it
  loads into registers before the wait, so that after it only the vector is read;
  `early` lets the next kernel start at the program's start rather than at its wait.

The floor is the weights read once at the device's copy bandwidth. Prints a markdown table.

  python3 bench/gpu/chain_probe.py [--rep 200]
"""

import argparse

import torch
import triton
import triton.language as tl
from graph_replays import chain_operands, chain_table

SHAPES = [(2304, 768), (768, 768), (3072, 768), (768, 3072)]  # (N, K) of each product
LAYERS = 12


@triton.jit
def rows_gemv(W, x, y, N: tl.constexpr, K: tl.constexpr, XB: tl.constexpr, RB: tl.constexpr):
    rows = tl.program_id(0) * XB + tl.arange(0, XB)[:, None]
    cols = tl.arange(0, RB)[None, :]
    w0 = tl.load(W + rows * K + cols, mask=(rows < N) & (cols < K), other=0.0)
    tl.extra.cuda.gdc_launch_dependents()
    tl.extra.cuda.gdc_wait()
    acc = w0.to(tl.float32) * tl.load(x + cols, mask=cols < K, other=0.0).to(tl.float32)
    for k in range(RB, K, RB):
        w = tl.load(W + rows * K + k + cols, mask=(rows < N) & (k + cols < K), other=0.0)
        acc += w.to(tl.float32) * tl.load(x + k + cols, mask=k + cols < K, other=0.0).to(tl.float32)
    out = tl.sum(acc, 1)
    tl.store(y + rows.reshape(XB), out.to(y.dtype.element_ty), mask=rows.reshape(XB) < N)


@triton.jit
def slice_gemv(W, x, y, N: tl.constexpr, K: tl.constexpr, XB: tl.constexpr, KP: tl.constexpr,
               EARLY: tl.constexpr):
    if EARLY:
        tl.extra.cuda.gdc_launch_dependents()
    rows = tl.program_id(0) * XB + tl.arange(0, XB)[:, None]
    cols = tl.arange(0, KP)[None, :]
    w = tl.load(W + rows * K + cols, mask=(rows < N) & (cols < K), other=0.0)
    if not EARLY:
        tl.extra.cuda.gdc_launch_dependents()
    tl.extra.cuda.gdc_wait()
    v = tl.load(x + cols, mask=cols < K, other=0.0)
    out = tl.sum(w.to(tl.float32) * v.to(tl.float32), 1)
    tl.store(y + rows.reshape(XB), out.to(y.dtype.element_ty), mask=rows.reshape(XB) < N)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rep", type=int, default=200)
    args = ap.parse_args()
    units = torch.cuda.get_device_properties(0).multi_processor_count
    W, vecs = chain_operands(SHAPES, LAYERS)

    def chain(launch):
        def run():
            for layer in range(LAYERS):
                for i, (n, k) in enumerate(SHAPES):
                    launch(W[i][layer * n * k:], vecs[i], vecs[(i + 1) % 4], n, k)
        return run

    def rows(xb, rb, warps):
        def launch(w, x, y, n, k):
            rows_gemv[(triton.cdiv(n, xb),)](w, x, y, n, k, xb, min(rb, triton.next_power_of_2(k)),
                                             num_warps=warps, launch_pdl=True)
        return chain(launch)

    def slices(per_unit, warps, early):
        def launch(w, x, y, n, k):
            xb = triton.next_power_of_2(max(1, n // (units * per_unit)))
            while xb > 1 and triton.cdiv(n, xb) < units * per_unit:
                xb //= 2
            slice_gemv[(triton.cdiv(n, xb),)](w, x, y, n, k, xb, triton.next_power_of_2(k), early,
                                              num_warps=warps, launch_pdl=True)
        return chain(launch)

    forms = {
        "rows 1, RB 1024/2048 (Kiln's today)": rows(1, 2048, 4),
        "rows 4, RB 256": rows(4, 256, 4),
    }
    for per_unit in (1, 2, 4):
        for warps in (4, 8):
            for early in (False, True):
                forms[f"slice {per_unit} a unit, {warps} warps{', early' if early else ''}"] = \
                    slices(per_unit, warps, early)
    # The forms compute the same chain: each result against the first's.
    chain_table("chain_probe", forms, vecs[0], sum(w.numel() * 2 for w in W), LAYERS * len(SHAPES), args.rep,
                next(iter(forms)))


if __name__ == "__main__":
    main()
