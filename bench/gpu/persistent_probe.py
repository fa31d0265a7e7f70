#!/usr/bin/env python3
"""Whether one persistent kernel with grid-wide barriers between its phases beats one
launch a phase (programmatic dependent launch, under a CUDA graph) for a decoding step's
chain of small matrix-vector products.

The chain is GPT-2 small's layer of products, twelve times: q/k/v (2304 x 768), output
(768 x 768), fc1 (3072 x 768) and fc2 (768 x 3072), each reading the vector the one before
wrote, in bfloat16. Forms timed in one process, interleaved, under CUDA graphs:

- `launches`: a kernel a product, each a programmatic dependent of the one before (its
  weights loaded before it waits, as Kiln's kernels do);
- `persistent`: one kernel of one, two or four programs a unit, looping over the products, with a
  grid-wide barrier (an int64 arrival counter that only grows, so no reset between calls)
  between them; `persistent+prefetch` loads each product's first weight tile before the
  barrier that precedes it.

The floor is the weights read once at the device's copy bandwidth. Prints a markdown table.

  python3 bench/gpu/persistent_probe.py [--rep 200]
"""

import argparse

import torch
import triton
import triton.language as tl
from graph_replays import chain_operands, chain_table

SHAPES = [(2304, 768), (768, 768), (3072, 768), (768, 3072)]  # (N, K) of each product
LAYERS = 12


@triton.jit
def _tile(W, x, y, tile, N: tl.constexpr, K: tl.constexpr, XB: tl.constexpr, RB: tl.constexpr, w0):
    row = tile * XB + tl.arange(0, XB)
    rows = row[:, None]
    cols = tl.arange(0, RB)[None, :]
    acc = w0.to(tl.float32) * tl.load(x + cols).to(tl.float32)
    for k in range(RB, K, RB):
        w = tl.load(W + rows * K + k + cols, mask=rows < N)
        acc += w.to(tl.float32) * tl.load(x + k + cols).to(tl.float32)
    tl.store(y + row, tl.sum(acc, 1).to(y.dtype.element_ty), mask=row < N)


@triton.jit
def _first(W, tile, N: tl.constexpr, K: tl.constexpr, XB: tl.constexpr, RB: tl.constexpr):
    rows = tile * XB + tl.arange(0, XB)[:, None]
    return tl.load(W + rows * K + tl.arange(0, RB)[None, :], mask=rows < N)


@triton.jit
def gemv(W, x, y, N: tl.constexpr, K: tl.constexpr, XB: tl.constexpr, RB: tl.constexpr,
         PDL: tl.constexpr):
    tiles = tl.cdiv(N, XB)
    for tile in range(tl.program_id(0), tiles, tl.num_programs(0)):
        w0 = _first(W, tile, N, K, XB, RB)
        if PDL:
            tl.extra.cuda.gdc_launch_dependents()
            tl.extra.cuda.gdc_wait()
        _tile(W, x, y, tile, N, K, XB, RB, w0)


@triton.jit
def _barrier(count, programs):
    # Every program adds one; the barrier this program is in is `old // programs`, so it
    # waits for the count to reach that barrier's end.
    old = tl.atomic_add(count, 1, sem="acq_rel", scope="gpu")
    target = (old // programs + 1) * programs
    while tl.atomic_add(count, 0, sem="acquire", scope="gpu") < target:
        pass


@triton.jit
def _phase(W, x, y, count, N: tl.constexpr, K: tl.constexpr, XB: tl.constexpr, RB: tl.constexpr,
           PREFETCH: tl.constexpr):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    tiles = tl.cdiv(N, XB)
    if PREFETCH:
        w0 = _first(W, pid % tiles, N, K, XB, RB)
    _barrier(count, programs)
    for tile in range(pid, tiles, programs):
        if PREFETCH:
            if tile == pid:
                w = w0
            else:
                w = _first(W, tile, N, K, XB, RB)
        else:
            w = _first(W, tile, N, K, XB, RB)
        _tile(W, x, y, tile, N, K, XB, RB, w)


@triton.jit
def persistent(W0, W1, W2, W3, v0, v1, v2, v3, count, LAYERS: tl.constexpr, PREFETCH: tl.constexpr,
               XB: tl.constexpr, RB: tl.constexpr):
    for layer in range(LAYERS):
        _phase(W0 + layer * 2304 * 768, v0, v1, count, 2304, 768, XB, RB, PREFETCH)
        _phase(W1 + layer * 768 * 768, v1, v2, count, 768, 768, XB, RB, PREFETCH)
        _phase(W2 + layer * 3072 * 768, v2, v3, count, 3072, 768, XB, RB, PREFETCH)
        _phase(W3 + layer * 768 * 3072, v3, v0, count, 768, 3072, XB, RB, PREFETCH)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rep", type=int, default=200)
    args = ap.parse_args()
    units = torch.cuda.get_device_properties(0).multi_processor_count
    W, vecs = chain_operands(SHAPES, LAYERS)
    count = torch.zeros(1, device="cuda", dtype=torch.int64)
    XB, RB = 4, 256

    def launches(pdl):
        def run():
            for layer in range(LAYERS):
                for i, (n, k) in enumerate(SHAPES):
                    w = W[i][layer * n * k:]
                    x, y = vecs[i], vecs[(i + 1) % 4]
                    grid = (triton.cdiv(n, XB),)
                    gemv[grid](w, x, y, n, k, XB, RB, pdl, num_warps=4, launch_pdl=pdl)
        return run

    def persistent_run(prefetch, per_unit):
        def run():
            persistent[(units * per_unit,)](*W, *vecs, count, LAYERS, prefetch, XB, RB, num_warps=4)
        return run

    forms = {
        "launches (PDL)": launches(True),
        "launches": launches(False),
    }
    # Programs a unit: all must be resident at once (4 warps each), or the barrier hangs.
    for per_unit in (1, 2, 4):
        forms[f"persistent, {per_unit} a unit"] = persistent_run(False, per_unit)
        forms[f"persistent+prefetch, {per_unit} a unit"] = persistent_run(True, per_unit)
    # The forms compute the same chain: each result against that of the plain launches.
    chain_table("persistent_probe", forms, vecs[0], sum(w.numel() * 2 for w in W), LAYERS * len(SHAPES), args.rep,
                "launches")


if __name__ == "__main__":
    main()
