#!/usr/bin/env python3
"""How close a chain of one-row products can come to the memory floor on this device: a decoding
step's products alone (GPT-2 small's by default: per layer q/k/v, output, MLP up and down, then
the LM head), each one Triton kernel that loads its weight rows, waits for the product before it
and reads its vector, replayed under a CUDA graph. Nothing else of a step (norms, attention,
their launches) is in it, so its time bounds what any step made of one launch per product can
take. Timed in interleaved rounds: launched plainly, as programmatic dependents (the weights load
while the product before runs, as Kiln launches them), as dependents that never wait (wrong
results: the weights' streaming alone, with every launch's cost), and as one persistent launch
whose programs wait for the tiles of the product before by spinning on counts (`--persistent`).
With `--pipelined`, each program of the persistent launch also loads its next tile's weights and
prefetches those of the tiles after it before it waits (untimed when this was written: a prototype
for a persistent step). `chain_probe.py` times the layers' products by launch shape, and `persistent_probe.py` a
persistent kernel with a barrier between products; this chain adds the LM head, the launch without
waits, and waits on counts.

    python3 bench/gpu/gemv_chain.py [--hidden 768] [--layers 12] [--vocab 50257] \\
        [--dtype bf16] [--persistent 1,2] [--pipelined 0,4] [--tile-rows 4] [--out FILE]
    python3 bench/gpu/gemv_chain.py --check    # the persistent kernels in Triton's interpreter
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode_step import copy_bandwidth  # noqa: E402
from precision_child import interleaved, setup  # noqa: E402


@triton.jit
def gemv(x_ptr, w_ptr, y_ptr, N, K: tl.constexpr, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr,
         MODE: tl.constexpr):
    # MODE 0: plain; 1: a programmatic dependent that waits; 2: one that never waits.
    rows = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    cols = tl.arange(0, RBLOCK)[None, :]
    keep = (rows < N) & (cols < K)
    w = tl.load(w_ptr + rows * K + cols, keep, other=0.0)
    if MODE != 0:
        tl.extra.cuda.gdc_launch_dependents()
    if MODE == 1:
        tl.extra.cuda.gdc_wait()
    x = tl.load(x_ptr + cols, cols < K, other=0.0).to(tl.float32)
    y = tl.sum(w.to(tl.float32) * x, 1)[:, None]
    tl.store(y_ptr + rows, y.to(y_ptr.dtype.element_ty), rows < N)


@triton.jit
def _finish_tile(w, v_ptr, count_ptr, in_ptr, out_ptr, tiles_ptr, s, rows, n, k, cols, counted):
    """Product `s`'s tile of `rows` by weights `w`: waits (spinning) until every tile of the
    product before is counted, multiplies its vector, stores, and adds `counted` tiles (this
    one and any the program finished before it uncounted) to the product's count."""
    if s > 0:
        need = tl.load(tiles_ptr + s - 1)
        done = tl.atomic_add(count_ptr + s - 1, 0, sem="acquire")
        while done < need:
            done = tl.atomic_add(count_ptr + s - 1, 0, sem="acquire")
    x = tl.load(v_ptr + tl.load(in_ptr + s) + cols, cols < k, other=0.0)
    y = tl.sum(w.to(tl.float32) * x, 1)[:, None]
    tl.store(v_ptr + tl.load(out_ptr + s) + rows, y, rows < n)
    if counted > 0:
        tl.debug_barrier()
        tl.atomic_add(count_ptr + s, counted, sem="release")


@triton.jit
def persistent(w_ptr, v_ptr, count_ptr, woff_ptr, n_ptr, k_ptr, in_ptr, out_ptr, tiles_ptr, STAGES,
               XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    # Every product of the chain in one launch of as many programs as the device holds: a
    # program takes its tiles of each product in turn, loads a tile's weights, waits (spinning
    # on the count of the product before's finished tiles) for the vector it multiplies, then
    # counts its own tile finished.
    cols = tl.arange(0, RBLOCK)[None, :]
    for s in range(0, STAGES):
        n = tl.load(n_ptr + s)
        k = tl.load(k_ptr + s)
        tiles = tl.load(tiles_ptr + s)
        woff = tl.load(woff_ptr + s)
        for t in range(tl.program_id(0), tiles, tl.num_programs(0)):
            rows = t * XBLOCK + tl.arange(0, XBLOCK)[:, None]
            keep = (rows < n) & (cols < k)
            w = tl.load(w_ptr + woff + rows.to(tl.int64) * k + cols, keep, other=0.0)
            _finish_tile(w, v_ptr, count_ptr, in_ptr, out_ptr, tiles_ptr, s, rows, n, k, cols, 1)


@triton.jit
def _tile(w_ptr, woff_ptr, n_ptr, k_ptr, stage_ptr, tile_ptr, g, total, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    """Global tile `g`'s weight rows (none past `total`), its product, rows, the product's rows
    (0 past `total`) and length."""
    live = g < total
    s = tl.load(stage_ptr + g, mask=live, other=0)
    rows = tl.load(tile_ptr + g, mask=live, other=0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    cols = tl.arange(0, RBLOCK)[None, :]
    n = tl.where(live, tl.load(n_ptr + s), 0)
    k = tl.load(k_ptr + s)
    w = tl.load(w_ptr + tl.load(woff_ptr + s) + rows.to(tl.int64) * k + cols, (rows < n) & (cols < k), other=0.0)
    return w, s, rows, n, k


@triton.jit
def _prefetch_tile(w_ptr, woff_ptr, n_ptr, k_ptr, stage_ptr, tile_ptr, g, total,
                   XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    """Global tile `g`'s weight rows into L2, one prefetch per 128-byte line."""
    LINE: tl.constexpr = 1024 // w_ptr.dtype.element_ty.primitive_bitwidth
    live = g < total
    s = tl.load(stage_ptr + g, mask=live, other=0)
    rows = tl.load(tile_ptr + g, mask=live, other=0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    cols = (tl.arange(0, RBLOCK // LINE) * LINE)[None, :]
    k = tl.load(k_ptr + s)
    keep = (rows < tl.where(live, tl.load(n_ptr + s), 0)) & (cols < k)
    ptrs = w_ptr + tl.load(woff_ptr + s) + rows.to(tl.int64) * k + cols
    tl.inline_asm_elementwise(
        "{ .reg .pred %p; setp.ne.b32 %p, $2, 0; @%p prefetch.global.L2 [$1]; mov.u32 $0, 0; }",
        "=r,l,r", [ptrs, keep.to(tl.int32)], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def persistent_pipelined(w_ptr, v_ptr, count_ptr, woff_ptr, n_ptr, k_ptr, in_ptr, out_ptr, tiles_ptr,
                         stage_ptr, tile_ptr, total, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr,
                         AHEAD: tl.constexpr):
    # The chain's tiles in one global order (each product's after the one before's), a program
    # taking every num_programs-th: the next tile's weights load into registers, and those of
    # the AHEAD tiles after it into L2, before the program waits (spinning on the count of the
    # product before's finished tiles) for the vector its tile multiplies. The next tile's place
    # in the tables is read with its weights, so that no table read waits after the wait. A
    # program counts its tiles of a product once, after its last (a product's readers wait
    # for all of it): one barrier and atomic a product rather than a tile.
    step = tl.num_programs(0)
    w, s, rows, n, k = _tile(w_ptr, woff_ptr, n_ptr, k_ptr, stage_ptr, tile_ptr, tl.program_id(0), total,
                             XBLOCK, RBLOCK)
    cols = tl.arange(0, RBLOCK)[None, :]
    mine = 0
    for g in range(tl.program_id(0), total, step):
        w_next, s_next, rows_next, n_next, k_next = _tile(w_ptr, woff_ptr, n_ptr, k_ptr, stage_ptr, tile_ptr,
                                                          g + step, total, XBLOCK, RBLOCK)
        for d in tl.static_range(2, AHEAD + 2):
            _prefetch_tile(w_ptr, woff_ptr, n_ptr, k_ptr, stage_ptr, tile_ptr, g + d * step, total, XBLOCK, RBLOCK)
        mine += 1
        last = (g + step >= total) | (s_next != s)
        _finish_tile(w, v_ptr, count_ptr, in_ptr, out_ptr, tiles_ptr, s, rows, n, k, cols, tl.where(last, mine, 0))
        mine = tl.where(last, 0, mine)
        w, s, rows, n, k = w_next, s_next, rows_next, n_next, k_next


@triton.jit
def _acquire(ptr, ASM: tl.constexpr):
    """The int32 at `ptr`, loaded with acquire order at device scope (every thread loads it)."""
    if ASM:
        return tl.min(tl.inline_asm_elementwise("ld.acquire.gpu.global.b32 $0, [$1];", "=r,l",
                                                [ptr + tl.arange(0, 1)], dtype=tl.int32, is_pure=False,
                                                pack=1), 0)
    else:  # Triton's interpreter runs no inline assembly
        return tl.atomic_add(ptr, 0, sem="acquire")


@triton.jit
def _await(count_ptr, need, ASM: tl.constexpr):
    """Spins until the count at `count_ptr` reaches `need`, or gives up after 2^22 reads (a
    launch of more programs than the device holds at once would otherwise hang: its result
    is then wrong, and `run_slab`'s callers check it)."""
    done = _acquire(count_ptr, ASM)
    spins = 0
    while (done < need) & (spins < 4194304):
        done = _acquire(count_ptr, ASM)
        spins += 1


@triton.jit
def _prefetch_range(w_ptr, lo, hi, ASM: tl.constexpr):
    """The weights from `lo` to `hi` into L2, one prefetch a 128-byte line, 256 lines a block."""
    if ASM:
        LINE: tl.constexpr = 1024 // w_ptr.dtype.element_ty.primitive_bitwidth
        for at in range(lo, hi, 256 * LINE):
            ptrs = at + tl.arange(0, 256) * LINE
            tl.inline_asm_elementwise(
                "{ .reg .pred %p; setp.ne.b32 %p, $2, 0; @%p prefetch.global.L2 [$1]; mov.u32 $0, 0; }",
                "=r,l,r", [w_ptr + ptrs, (ptrs < hi).to(tl.int32)], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _slab_product(w_ptr, v_ptr, count_ptr, i, woff, in_off, out_off, pf_start, pf_size, total,
                  N: tl.constexpr, K: tl.constexpr, P: tl.constexpr, BR: tl.constexpr, BK: tl.constexpr,
                  ASM: tl.constexpr, PROBE: tl.constexpr):
    """Product `i` (N rows of K) for this program's slab of ceil(N / P) consecutive rows: loads
    the slab's weights, prefetches its 1/P of the `pf_size` weights from `pf_start` (a later
    product's) into L2, waits until all P programs have counted product i - 1, multiplies its
    vector, stores, and counts product i. PROBE 1 never waits, 2 loads no weights (both give
    wrong results: the streaming alone and the waits alone)."""
    ROWS: tl.constexpr = (N + P - 1) // P
    r = tl.arange(0, BR)
    rows = tl.program_id(0) * ROWS + r
    live = (r < ROWS) & (rows < N)
    cols = tl.arange(0, BK)
    w = tl.load(w_ptr + woff + rows[:, None] * K + cols[None, :],
                live[:, None] & (cols < K)[None, :] & (PROBE != 2), other=0.0)
    share = tl.cdiv(pf_size, P)
    lo = pf_start + tl.program_id(0) * share
    _prefetch_range(w_ptr, lo, tl.minimum(tl.minimum(lo + share, pf_start + pf_size), total), ASM & (PROBE != 2))
    if (i > 0) & (PROBE != 1):
        _await(count_ptr + i - 1, P, ASM)
    x = tl.load(v_ptr + in_off + cols, cols < K, other=0.0)
    tl.store(v_ptr + out_off + rows, tl.sum(w.to(tl.float32) * x[None, :], 1), live)
    tl.debug_barrier()
    tl.atomic_add(count_ptr + i, 1, sem="release")


@triton.jit
def slab_chain(w_ptr, v_ptr, count_ptr, LAYERS, VOCAB: tl.constexpr, H: tl.constexpr, P: tl.constexpr,
               AHEAD: tl.constexpr, BR_QKV: tl.constexpr, BR_OUT: tl.constexpr, BR_UP: tl.constexpr,
               BR_DOWN: tl.constexpr, BR_HEAD: tl.constexpr, BK: tl.constexpr, BK4: tl.constexpr,
               ASM: tl.constexpr, PROBE: tl.constexpr):
    # GPT-2's products chain (`chain`) in one launch of P programs, all resident: each program
    # takes one slab of consecutive rows of every product, its addresses all arithmetic (no
    # tables), loads the slab's weights and prefetches its share of the product AHEAD after
    # into L2 before it waits (spinning on the product before's count of programs done).
    # A layer's weights: q/k/v (3H x H), output (H x H), up (4H x H), down (H x 4H); its
    # outputs in the vectors likewise (3H, H, 4H, H) after the input's H.
    HH: tl.constexpr = H * H
    total = LAYERS * 12 * HH + VOCAB * H
    for layer in range(0, LAYERS):
        base = layer * 12 * HH
        outs = H + layer * 9 * H
        for j in tl.static_range(4):
            # The product AHEAD after this one: its layer's start and its offset and size there.
            a = (j + AHEAD) % 4
            pf = base + ((j + AHEAD) // 4) * 12 * HH + ((a >= 1) * 3 + (a >= 2) + (a >= 3) * 4) * HH
            pf_size = (3 - 2 * (a == 1) + (a >= 2)) * HH
            if j == 0:
                _slab_product(w_ptr, v_ptr, count_ptr, 4 * layer, base, tl.where(layer == 0, 0, outs - H), outs,
                              pf, pf_size, total, 3 * H, H, P, BR_QKV, BK, ASM, PROBE)
            elif j == 1:
                _slab_product(w_ptr, v_ptr, count_ptr, 4 * layer + 1, base + 3 * HH, outs, outs + 3 * H,
                              pf, pf_size, total, H, H, P, BR_OUT, BK, ASM, PROBE)
            elif j == 2:
                _slab_product(w_ptr, v_ptr, count_ptr, 4 * layer + 2, base + 4 * HH, outs + 3 * H, outs + 4 * H,
                              pf, pf_size, total, 4 * H, H, P, BR_UP, BK, ASM, PROBE)
            else:
                _slab_product(w_ptr, v_ptr, count_ptr, 4 * layer + 3, base + 8 * HH, outs + 4 * H, outs + 8 * H,
                              pf, pf_size, total, H, 4 * H, P, BR_DOWN, BK4, ASM, PROBE)
    # The LM head: this program's ceil(VOCAB / P) rows in blocks of BR_HEAD, the first block
    # loaded before the wait, each next one prefetched into L2 while the one before is summed.
    i = 4 * LAYERS
    head = LAYERS * 12 * HH
    ROWS: tl.constexpr = (VOCAB + P - 1) // P
    first = tl.program_id(0) * ROWS
    r = tl.arange(0, BR_HEAD)
    cols = tl.arange(0, BK)
    w = tl.load(w_ptr + head + (first + r)[:, None] * H + cols[None, :],
                ((r < ROWS) & (first + r < VOCAB) & (PROBE != 2))[:, None] & (cols < H)[None, :], other=0.0)
    if PROBE != 1:
        _await(count_ptr + i - 1, P, ASM)
    x = tl.load(v_ptr + H + LAYERS * 9 * H - H + cols, cols < H, other=0.0)
    out = H + LAYERS * 9 * H
    last = tl.minimum(first + ROWS, VOCAB)
    for at in range(0, ROWS, BR_HEAD):
        rows = first + at + r
        live = (at + r < ROWS) & (rows < VOCAB)
        if at > 0:
            w = tl.load(w_ptr + head + rows[:, None] * H + cols[None, :],
                        (live & (PROBE != 2))[:, None] & (cols < H)[None, :], other=0.0)
        nxt = first + at + BR_HEAD
        _prefetch_range(w_ptr, head + nxt * H, head + tl.minimum(nxt + BR_HEAD, last) * H, ASM & (PROBE != 2))
        tl.store(v_ptr + out + rows, tl.sum(w.to(tl.float32) * x[None, :], 1), live)
    tl.debug_barrier()
    tl.atomic_add(count_ptr + i, 1, sem="release")


def resident_programs(registers: int, shared: int, warps: int) -> int:
    """How many programs of `warps` warps, `registers` a thread and `shared` bytes the device
    runs at once (registers allocated 256 a warp at a time)."""
    props = torch.cuda.get_device_properties(0)
    per_warp = -(-registers * 32 // 256) * 256
    by_registers = props.regs_per_multiprocessor // per_warp // warps
    by_threads = props.max_threads_per_multi_processor // (32 * warps)
    by_shared = props.shared_memory_per_multiprocessor // shared if shared else by_threads
    return props.multi_processor_count * min(by_registers, by_threads, by_shared, 32)


class PersistentChain:
    """A chain's operands laid out for the persistent kernels: every weight in one flat tensor,
    the vectors between the products in one float32 tensor, the per-product tables, and each
    global tile's product and tile; `run(programs, ahead)` launches `persistent` (`ahead` None)
    or `persistent_pipelined`."""

    def __init__(self, products, dtype, x_block: int, device: str, scale: float = 0.02):
        self.products, self.x_block = products, x_block
        self.rblock = triton.next_power_of_2(max(k for _, k in products))
        sizes = [r * k for r, k in products]
        self.weights = torch.randn(sum(sizes), device=device, dtype=dtype) * scale
        self.woff = torch.tensor([sum(sizes[:i]) for i in range(len(sizes))], device=device, dtype=torch.int64)
        outs = [r for r, _ in products]
        self.vectors = torch.randn(products[0][1] + sum(outs), device=device, dtype=torch.float32)
        self.out_off = [products[0][1] + sum(outs[:i]) for i in range(len(outs))]
        tiles = [triton.cdiv(r, x_block) for r in outs]
        self.table = {name: torch.tensor(values, device=device, dtype=torch.int32) for name, values in (
            ("n", outs), ("k", [k for _, k in products]), ("in", [0] + self.out_off[:-1]), ("out", self.out_off),
            ("tiles", tiles), ("stage_of", [s for s, t in enumerate(tiles) for _ in range(t)]),
            ("tile_of", [i for t in tiles for i in range(t)]))}
        self.counts = torch.zeros(len(products), device=device, dtype=torch.int32)

    def run(self, programs: int, ahead: int | None) -> None:
        t = self.table
        self.counts.zero_()
        if ahead is None:
            persistent[(programs,)](self.weights, self.vectors, self.counts, self.woff, t["n"], t["k"], t["in"],
                                    t["out"], t["tiles"], len(self.products), self.x_block, self.rblock, num_warps=8)
        else:
            persistent_pipelined[(programs,)](self.weights, self.vectors, self.counts, self.woff, t["n"], t["k"],
                                              t["in"], t["out"], t["tiles"], t["stage_of"], t["tile_of"],
                                              t["stage_of"].numel(), self.x_block, self.rblock, ahead, num_warps=8)

    def run_slab(self, programs: int, ahead: int, warps: int, head_rows: int = 16, asm: bool = True,
                 probe: int = 0) -> None:
        """`slab_chain` in `programs` programs of `warps` warps (GPT-2's layout of products:
        `chain`), prefetching the product `ahead` after each into L2 (`probe`: its PROBE)."""
        hidden, vocab = self.products[0][1], self.products[-1][0]
        layers = (len(self.products) - 1) // 4
        rows = [triton.next_power_of_2(triton.cdiv(n * hidden, programs)) for n in (3, 1, 4, 1)]
        args = (self.weights, self.vectors, self.counts, layers, vocab, hidden, programs, ahead, *rows, head_rows,
                triton.next_power_of_2(hidden), triton.next_power_of_2(4 * hidden), asm, probe)
        if self.weights.is_cuda:
            kernel = slab_chain.warmup(*args, grid=(programs,), num_warps=warps)
            kernel._init_handles()
            resident = resident_programs(kernel.n_regs, kernel.metadata.shared, warps)
            if programs > resident:
                raise ValueError(f"{programs} programs of {warps} warps and {kernel.n_regs} registers: the device "
                                 f"holds {resident} at once, and the rest would wait for programs that spin")
        self.counts.zero_()
        slab_chain[(programs,)](*args, num_warps=warps)

    def reference(self) -> torch.Tensor:
        """The chain's last vector computed by torch from the first."""
        x = self.vectors[:self.products[0][1]].float()
        for (r, k), off in zip(self.products, self.woff.tolist()):
            x = self.weights[off:off + r * k].view(r, k).float() @ x[:k]
        return x

    def error(self) -> float:
        """The last vector's largest error against torch's, relative to torch's largest value."""
        want = self.reference()
        return float((self.result() - want).abs().max() / want.abs().max())

    def result(self) -> torch.Tensor:
        return self.vectors[self.out_off[-1]:self.out_off[-1] + self.products[-1][0]]


def build_persistent(products, dtype, programs: int, ahead: int | None = None, x_block: int = 4):
    """The chain as one persistent launch (`persistent`; with `ahead`, `persistent_pipelined`
    prefetching that many tiles into L2) in tiles of `x_block` rows, and its weights' bytes."""
    operands = PersistentChain(products, dtype, x_block, "cuda")
    operands.run(programs, ahead)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        operands.run(programs, ahead)
    graph.keep = operands  # the replays read its tensors
    return graph, operands.weights.numel() * operands.weights.element_size()


def build_slab(products, dtype, programs: int, warps: int, ahead: int, probe: int = 0):
    """The chain as one `slab_chain` launch under a CUDA graph, and its result's error."""
    operands = PersistentChain(products, dtype, 4, "cuda")
    operands.run_slab(programs, ahead, warps, probe=probe)
    torch.cuda.synchronize()
    error = operands.error()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        operands.run_slab(programs, ahead, warps, probe=probe)
    graph.keep = operands
    return graph, error


def check() -> int:
    """The persistent forms on a small float32 chain, with one program (which alone never waits
    for another), in Triton's interpreter on the CPU, against torch: 0 where all match."""
    torch.manual_seed(0)
    failed = 0
    forms = {"persistent": lambda c: c.run(1, None),  # the interpreter runs no inline assembly:
             "persistent_pipelined": lambda c: c.run(1, 0),  # no L2 prefetches
             "slab_chain": lambda c: c.run_slab(1, 1, 4, asm=False)}
    for name, run in forms.items():
        operands = PersistentChain(chain(64, 2, 100, torch.float32), torch.float32, 4, "cpu", scale=0.1)
        run(operands)
        error = operands.error()
        counted = operands.counts.tolist() == (operands.table["tiles"].tolist() if name != "slab_chain"
                                               else [1] * len(operands.products))
        print(f"{name}: error {error:.1e}, every tile counted: {counted}")
        failed += error > 1e-5 or not counted
    return failed


def chain(hidden: int, layers: int, vocab: int, dtype) -> list[tuple[int, int]]:
    """(rows, length) of each product of one step, in order."""
    per_layer = [(3 * hidden, hidden), (hidden, hidden), (4 * hidden, hidden), (hidden, 4 * hidden)]
    return per_layer * layers + [(vocab, hidden)]


def config(rows: int, length: int) -> tuple[int, int]:
    """Rows a program and warps: Kiln's choices for GPT-2's products (4 rows; 8 warps for the
    long reduction, 1 for the LM head's many rows)."""
    if rows > 16 * length:
        return 4, 1
    return 4, 8 if length > 2048 else 4


def build(products, dtype, mode: int):
    weights = [torch.randn(r, k, device="cuda", dtype=dtype) * 0.02 for r, k in products]
    vectors = [torch.randn(products[0][1], device="cuda", dtype=dtype)]
    vectors += [torch.empty(r, device="cuda", dtype=dtype) for r, _ in products]

    def step():
        for i, ((rows, length), w) in enumerate(zip(products, weights)):
            x_block, warps = config(rows, length)
            # Each product reads the first `length` values of the one before's output.
            source = vectors[i] if vectors[i].numel() >= length else vectors[0]
            gemv[(triton.cdiv(rows, x_block),)](source, w, vectors[i + 1], rows, length, x_block,
                                               triton.next_power_of_2(length), mode, num_warps=warps,
                                               launch_pdl=mode != 0)

    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    graph.keep = (weights, vectors)  # the replays read them
    return graph, sum(w.numel() * w.element_size() for w in weights)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    p.add_argument("--rep", type=float, default=200)
    p.add_argument("--persistent", type=lambda v: [int(x) for x in v.split(",") if x], default=[1],
                   help="programs a multiprocessor of the persistent variants (comma-separated; empty: none)")
    p.add_argument("--tile-rows", type=int, default=4, help="rows a tile of the persistent variants")
    p.add_argument("--check", action="store_true",
                   help="check the persistent kernels in Triton's interpreter on the CPU (no GPU) and exit")
    p.add_argument("--pipelined", type=lambda v: [int(x) for x in v.split(",") if x], default=[],
                   help="tiles each program of a pipelined persistent variant prefetches into L2 ahead of the next "
                        "(comma-separated; one program a multiprocessor, the next tile's weights in registers)")
    p.add_argument("--slab", type=lambda v: [tuple(int(x) for x in c.split(":")) for c in v.split(",") if c],
                   default=[], help="slab_chain variants as WARPS:AHEAD[:PER_UNIT[:PROBE]] (comma-separated): "
                   "PER_UNIT programs a multiprocessor (1) of WARPS warps, prefetching the product AHEAD after "
                   "each into L2; PROBE 1 never waits, 2 loads no weights")
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    if a.check:
        if os.environ.get("TRITON_INTERPRET") != "1":  # read when the kernels are defined
            os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "TRITON_INTERPRET": "1"})
        sys.exit(check())
    setup()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.dtype]
    products = chain(a.hidden, a.layers, a.vocab, dtype)
    graphs, nbytes = {}, 0
    for label, mode in (("plain", 0), ("dependent", 1), ("dependent, no wait", 2)):
        graphs[label], nbytes = build(products, dtype, mode)
    units = torch.cuda.get_device_properties(0).multi_processor_count
    for per_unit in a.persistent:
        graphs[f"persistent, {per_unit} a unit"], _ = build_persistent(products, dtype, per_unit * units,
                                                                       x_block=a.tile_rows)
    for ahead in a.pipelined:
        graphs[f"persistent, pipelined, {ahead} tiles ahead in L2"], _ = build_persistent(
            products, dtype, units, ahead, a.tile_rows)
    errors = {}
    for warps, ahead, *more in a.slab:
        per_unit, probe = (more + [1, 0][len(more):])[:2]
        label = (f"slab, {per_unit} of {warps} warps a unit, product {ahead} ahead in L2"
                 + ("", ", no waits", ", no weights")[probe])
        try:
            graphs[label], errors[label] = build_slab(products, dtype, per_unit * units, warps, ahead, probe)
        except ValueError as why:
            print(f"{label}: {why}", flush=True)
    bandwidth = copy_bandwidth()
    floor = nbytes / bandwidth * 1e3
    ms = interleaved({label: g.replay for label, g in graphs.items()}, a.rep)
    lines = [f"# bench/gpu/gemv_chain.py, {time.strftime('%Y-%m-%d %H:%M')}: {torch.cuda.get_device_name(0)}, "
             f"torch {torch.__version__}, triton {triton.__version__}; {len(products)} products of hidden "
             f"{a.hidden} x {a.layers} layers + vocab {a.vocab}, {a.dtype}: {nbytes / 1e6:.1f} MB, floor "
             f"{floor:.4f} ms at {bandwidth / 1e12:.2f} TB/s copy bandwidth; graph replays, L2 flushed before each",
             "| launch | ms | × floor | error |", "| --- | --- | --- | --- |"]
    error = {label: f"{e:.1e}" for label, e in errors.items()}
    lines += [f"| {label} | {t:.4f} | {t / floor:.2f} | {error.get(label, '')} |" for label, t in ms.items()]
    print("\n".join(lines), flush=True)
    if a.out:
        a.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
