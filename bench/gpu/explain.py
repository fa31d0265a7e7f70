#!/usr/bin/env python3
"""Why a case is slower than Inductor: both sides' kernels, side by side.

For each case folder CASES/<device>/<graph>/ (as `prepare.sh` or
`sweep_prepare.sh` writes them), on a CUDA GPU:

- Inductor: `torch.compile` of the same graph; its generated module is copied
  to OUT/<graph>/inductor.py, and every Triton kernel's name, heuristics
  (size hints, reduction hint) and the config its autotuner kept are printed.
- Both sides' kernels timed one by one with the CUDA profiler, with L2 flushed
  between calls (each kernel's GPU time, not the wrapper's).
- With --sweep, every Kiln kernel with a grid-stride loop is launched again
  under a range of block sizes and warp counts (the same arguments Kiln's
  `call` gave it) and the fastest configs are printed next to the plugin's:
  what the launch heuristics could have picked.

Usage: explain.py CASES [--only NAME ...] [--sweep] [--out DIR] [--warm K/N]

To compile the sweep's configs in parallel first (Triton keeps them on disk):
  for k in 0 1 2 3; do explain.py CASES --only X --warm $k/4 & done; wait
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from pathlib import Path

import torch
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).parent))
from run import EagerGraph, ExportedModel, load_module  # noqa: E402

FLUSH = None


def flush_l2() -> None:
    global FLUSH
    if FLUSH is None:
        FLUSH = torch.empty(1 << 26, dtype=torch.int32, device="cuda")
    FLUSH.zero_()


def profile(fn, calls: int = 20) -> dict[str, tuple[int, float]]:
    """GPU time per kernel name: (launches per call, mean µs per launch)."""
    from torch.profiler import ProfilerActivity, profile as prof

    fn()
    torch.cuda.synchronize()
    with prof(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(calls):
            flush_l2()
            fn()
        torch.cuda.synchronize()
    out: dict[str, list[float]] = {}
    for e in p.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and "fill" not in e.name.lower():
            out.setdefault(e.name, []).append(e.device_time)
    return {k: (len(v) // calls, sum(v) / len(v)) for k, v in out.items()}


class Recorder:
    """Stands in for a Kiln module's KERNELS: records every launch of one call."""

    def __init__(self, real):
        self.real, self.launches = real, []

    def __getattr__(self, name):
        real, rec = getattr(self.real, name), self

        class One:
            def __getitem__(self, grid):
                launch = real[grid]

                def run(*args, stream=None):
                    rec.launches.append((name, grid, args))
                    return launch(*args, stream=stream)

                return run

        return One()


def candidates(meta: dict, xnumel: int, rnumel: int | None, persistent: bool):
    """Launch configs to try: powers of two within Triton's and the H100's limits."""
    pow2 = lambda n: 1 << max(0, (n - 1).bit_length())
    if rnumel is None:
        for xb, w in itertools.product([128, 256, 512, 1024, 2048, 4096, 8192], [1, 2, 4, 8, 16]):
            if w * 32 <= xb and xb <= max(128, pow2(xnumel)):
                yield {"XBLOCK": xb}, w
        return
    rblocks = [pow2(rnumel)] if persistent else [b for b in (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
                                                  if b <= pow2(rnumel)]
    for rb in rblocks:
        for xb in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512):
            tile = xb * rb
            if xb > pow2(xnumel) or tile > (16384 if persistent else 8192) or tile < 64:
                continue
            for w in (1, 2, 4, 8, 16):
                if w * 32 <= max(tile, 32) * 2 and tile // (w * 32) <= 64:
                    yield {"XBLOCK": xb, "RBLOCK": rb}, w


def sweep(module, name: str, grid, args, top: int, shard: tuple[int, int] | None) -> None:
    meta = module.KERNEL_META[name]
    jit = getattr(module, name)
    if not hasattr(jit, "src") or set(meta["constants"]) - {"XBLOCK", "RBLOCK"}:
        print(f"    (no sweep: {name} is autotuned or has other block sizes)")
        return
    if "range(tl.program_id(0) * XBLOCK, xnumel" not in jit.src:
        print(f"    (no sweep: {name} has no grid-stride loop)")
        return
    params = list(meta["signature"])
    runtime = args[: len(params)]
    values = dict(zip(params, runtime))
    xnumel, rnumel = int(values["xnumel"]), values.get("rnumel")
    persistent = rnumel is not None and "for roffset" not in jit.src
    rows = []
    base = (meta["constants"], meta["num_warps"])
    tried = list(candidates(meta, xnumel, None if rnumel is None else int(rnumel), persistent))
    if base not in tried:
        tried.insert(0, base)
    if shard is not None:
        # Compile only (to fill Triton's cache), this process's share of the configs.
        for consts, warps in tried[shard[0]::shard[1]]:
            g = (min(-(-xnumel // consts["XBLOCK"]), 2**31 - 1), 1, 1)
            try:
                jit[g](*runtime, **consts, num_warps=warps, num_stages=1)
            except Exception:  # noqa: BLE001 (reported by the timed pass)
                pass
        torch.cuda.synchronize()
        return
    for consts, warps in tried:
        g = (min(-(-xnumel // consts["XBLOCK"]), 2**31 - 1), 1, 1)
        try:
            run = lambda: jit[g](*runtime, **consts, num_warps=warps, num_stages=1)
            run()
            ms = do_bench(run, warmup=5, rep=25)
        except Exception as e:  # noqa: BLE001 (a config the compiler refuses: out of resources)
            print(f"    {consts} w{warps}: {type(e).__name__}")
            continue
        rows.append((ms, consts, warps))
    rows.sort(key=lambda r: r[0])
    mine = next((r for r in rows if (r[1], r[2]) == base), None)
    if mine:
        print(f"    plugin's config {base[0]} w{base[1]}: {mine[0] * 1000:.1f} µs "
              f"(rank {rows.index(mine) + 1} of {len(rows)})")
    for ms, consts, warps in rows[:top]:
        print(f"    {ms * 1000:8.1f} µs  {consts} w{warps}")


def inductor(graph, inputs, folder: Path):
    """`torch.compile` of the graph with its own cache folder (where the autotuner's
    choices land as *.best_config); the generated module goes to inductor.py."""
    import torch._inductor.config as config
    from torch._inductor.utils import run_and_get_code

    folder.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str((folder / "cache").resolve())
    config.fx_graph_cache = False
    torch._dynamo.reset()
    compiled = torch.compile(graph.__call__, dynamic=False)
    _, codes = run_and_get_code(compiled, *inputs)
    torch.cuda.synchronize()
    (folder / "inductor.py").write_text("\n\n".join(codes))
    return compiled


def explain(case: Path, out: Path, do_sweep: bool, top: int, shard: tuple[int, int] | None) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    device_name, graph_name = case.parent.name, case.name
    print(f"=== {device_name} {graph_name}")
    cuda = torch.device("cuda", 0)
    graph = ExportedModel(case, cuda) if (case / "model.pt2").exists() else EagerGraph(case / "graph.toml", cuda)
    module = load_module(case / "output_code.py", device_name)
    inputs = graph.inputs()
    rec = Recorder(module.KERNELS)
    module.KERNELS = rec
    module.call(list(inputs))
    torch.cuda.synchronize()
    launches = list(rec.launches)
    module.KERNELS = rec.real
    if shard is not None:
        if shard[0] == 0 and device_name == "cuda":
            inductor(graph, inputs, out / graph_name)
        seen = set()
        for name, grid, args in launches:
            if name not in seen:
                seen.add(name)
                sweep(module, name, grid, args, top, shard)
        return
    kiln_ms = do_bench(lambda: module.call(list(inputs)))
    print(f"kiln: {len(launches)} launch(es), {kiln_ms * 1000:.1f} µs per call")
    times = profile(lambda: module.call(list(inputs)))
    for name, grid, args in launches:
        meta = module.KERNEL_META.get(name, {})
        n, us = times.get(name, (0, float("nan")))
        print(f"  {name} grid {tuple(grid)} {meta.get('constants')} w{meta.get('num_warps')}: {us:.1f} µs")
    kiln_names = {name for name, _, _ in launches}
    for name, (n, us) in times.items():
        if name not in kiln_names:
            print(f"  (extern) {name[:90]}: {n} per call, {us:.1f} µs")
    if device_name == "cuda":
        compiled = inductor(graph, inputs, out / graph_name)
        ind_ms = do_bench(lambda: compiled(*inputs))
        print(f"inductor: {ind_ms * 1000:.1f} µs per call (kiln/inductor {kiln_ms / ind_ms:.3f})")
        for f in sorted((out / graph_name / "cache").rglob("*.best_config")):
            print(f"  {f.stem} kept {f.read_text().strip()}")
        for name, (n, us) in profile(lambda: compiled(*inputs)).items():
            print(f"  {name}: {n} per call, {us:.1f} µs")
    if do_sweep:
        seen = set()
        for name, grid, args in launches:
            if name in seen:
                continue
            seen.add(name)
            print(f"  sweep of {name}:")
            sweep(module, name, grid, args, top, None)
    sys.stdout.flush()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", type=Path)
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--devices", nargs="*", default=["cuda"])
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--out", type=Path, default=Path("explain_out"))
    parser.add_argument("--warm", metavar="K/N", help="only compile share K of N of the sweep's configs "
                        "(and Inductor's kernels for K=0), to fill the caches in parallel processes")
    args = parser.parse_args()
    cases = [c.parent for c in sorted(args.cases.glob("*/*/output_code.py"))
             if (not args.only or c.parent.name in args.only) and c.parent.parent.name in args.devices]
    shard = tuple(map(int, args.warm.split("/"))) if args.warm else None
    for case in cases:
        try:
            explain(case, args.out, args.sweep, args.top, shard)
        except Exception as e:  # noqa: BLE001 (reported, the next case goes on)
            print(f"=== {case}: FAILED {e!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
