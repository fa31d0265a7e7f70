#!/usr/bin/env python3
"""Two or more builds of Kiln on one decoding step, in one process: each build's
`kiln.compile(..., mode="reduce-overhead")` of the same export (transformers' static
cache, as `decode_step.py` makes it), timed in interleaved rounds with Inductor's
reduce-overhead, so that the builds' ratios share one machine state. Staged builds
come from `ab_stage.sh`.

    PYTHONPATH=python python3 bench/gpu/decode_ab.py --builds old=bench/gpu/ab/old/host,new=... \\
        [--models gpt2,llama] [--dtypes bf16] [--batches 1] [--positions 512] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent / "tools"))
from decode_step import DTYPES, copy_bandwidth, floor_ms, model  # noqa: E402
from precision_child import interleaved, setup, sync  # noqa: E402


def first(x):
    return x[0] if isinstance(x, (tuple, list)) else x


def rows(name: str, dtype: str, batch: int, builds: dict, a, bandwidth: float) -> list[str]:
    """The table's rows for one model, dtype and batch: each build compiled once, and timed
    with Inductor's reduce-overhead at each of `a.positions`."""
    import kiln
    from generate import export_step

    m = model(name, DTYPES[dtype], a.cache)
    ep = export_step(m, a.cache, "cuda", batch)
    eager = ep.module()
    ids = torch.full((batch, 1), 7, dtype=torch.int64, device="cuda")
    steps, out = {}, []
    with torch.no_grad():
        for label, host in builds.items():
            os.environ["KILN_HOST"] = host
            steps[label] = kiln.compile(ep, device="cuda", mode="reduce-overhead")
        inductor = torch.compile(ep.module(), mode="reduce-overhead")
        floor = floor_ms(m, next(iter(steps.values())), bandwidth)
        for position in a.positions:
            kwargs = {"input_ids": ids, "cache_position": torch.tensor([position], device="cuda")}
            want = first(eager(**kwargs)).float()
            errors = {}
            for label, step in steps.items():
                got = first(step(**kwargs)).float()
                errors[label] = float((got - want).abs().max() / want.abs().max())
            for _ in range(3):  # cudagraph trees record on a later call
                inductor(**kwargs)
            sync()
            timed = {label: (lambda s=s, k=kwargs: s(**k)) for label, s in steps.items()}
            timed["inductor_g"] = lambda k=kwargs: inductor(**k)
            ms = interleaved(timed, a.rep)
            base = next(iter(builds))
            cells = [f"{ms[b]:.3f} ({ms[b] / ms[base]:.3f}; {ms[b] / floor:.2f}× floor; err {errors[b]:.1e})"
                     for b in builds]
            out.append(f"| {name} | {dtype} | {batch} | {position} | {' | '.join(cells)} | "
                       f"{ms['inductor_g']:.3f} | {floor:.3f} |")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--builds", required=True, help="label=host,... (the first is the reference)")
    p.add_argument("--models", default="gpt2,llama")
    p.add_argument("--dtypes", default="bf16")
    p.add_argument("--batches", default="1")
    p.add_argument("--cache", type=int, default=1024)
    p.add_argument("--positions", type=lambda v: [int(x) for x in v.split(",")], default=[512],
                   help="cache positions the step is timed at, each build compiled once (comma-separated)")
    p.add_argument("--rep", type=float, default=200, help="ms per column per round")
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    builds = dict(pair.split("=", 1) for pair in a.builds.split(","))
    setup()
    bandwidth = copy_bandwidth()
    lines = [f"# bench/gpu/decode_ab.py, {time.strftime('%Y-%m-%d %H:%M')}: {torch.cuda.get_device_name(0)}, "
             f"torch {torch.__version__}; cache {a.cache}; under CUDA graphs, median of interleaved "
             f"rounds; a cell: ms (/ {next(iter(builds))}; / floor; error vs eager)",
             f"| model | dtype | batch | position | {' | '.join(builds)} | inductor reduce-overhead ms | floor ms |",
             "| --- " * (len(builds) + 6) + "|"]
    print("\n".join(lines), flush=True)
    for name in a.models.split(","):
        for dtype in a.dtypes.split(","):
            for batch in (int(b) for b in a.batches.split(",")):
                try:
                    new = rows(name, dtype, batch, builds, a, bandwidth)
                except Exception as e:  # noqa: BLE001 (one row's failure is reported; the others still run)
                    new = [f"| {name} | {dtype} | {batch} | failed: {type(e).__name__}: {str(e)[:300]} |"]
                lines += new
                print("\n".join(new), flush=True)
                if a.out:
                    a.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
