#!/usr/bin/env python3
"""Two or more builds of Kiln on one decoding step, in one process: each build's
`kiln.compile(..., mode="reduce-overhead")` of the same export (transformers' static
cache, as `decode_step.py` makes it), timed in interleaved rounds with Inductor's
reduce-overhead, so that the builds' ratios share one machine state. Staged builds
come from `ab_stage.sh`.

    PYTHONPATH=python python3 bench/gpu/decode_ab.py --builds old=bench/gpu/ab/old/host,new=... \\
        [--models gpt2,llama] [--dtypes bf16] [--batches 1] [--out FILE]
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


def row(name: str, dtype: str, batch: int, builds: dict, a, bandwidth: float) -> str:
    import kiln
    from generate import export_step

    m = model(name, DTYPES[dtype], a.cache)
    ep = export_step(m, a.cache, "cuda", batch)
    eager = ep.module()
    kwargs = {"input_ids": torch.full((batch, 1), 7, dtype=torch.int64, device="cuda"),
              "cache_position": torch.tensor([a.position], device="cuda")}
    steps, errors = {}, {}
    with torch.no_grad():
        want = first(eager(**kwargs)).float()
        for label, host in builds.items():
            os.environ["KILN_HOST"] = host
            steps[label] = step = kiln.compile(ep, device="cuda", mode="reduce-overhead")
            got = first(step(**kwargs)).float()
            errors[label] = float((got - want).abs().max() / want.abs().max())
        inductor = torch.compile(ep.module(), mode="reduce-overhead")
        for _ in range(3):  # cudagraph trees record on a later call
            inductor(**kwargs)
        sync()
        timed = {label: (lambda s=s: s(**kwargs)) for label, s in steps.items()}
        timed["inductor_g"] = lambda: inductor(**kwargs)
        ms = interleaved(timed, a.rep)
    floor = floor_ms(m, next(iter(steps.values())), bandwidth)
    base = next(iter(builds))
    cells = [f"{ms[b]:.3f} ({ms[b] / ms[base]:.3f}; {ms[b] / floor:.2f}× floor; err {errors[b]:.1e})"
             for b in builds]
    return f"| {name} | {dtype} | {batch} | {' | '.join(cells)} | {ms['inductor_g']:.3f} | {floor:.3f} |"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--builds", required=True, help="label=host,... (the first is the reference)")
    p.add_argument("--models", default="gpt2,llama")
    p.add_argument("--dtypes", default="bf16")
    p.add_argument("--batches", default="1")
    p.add_argument("--cache", type=int, default=1024)
    p.add_argument("--position", type=int, default=512)
    p.add_argument("--rep", type=float, default=200, help="ms per column per round")
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    builds = dict(pair.split("=", 1) for pair in a.builds.split(","))
    setup()
    bandwidth = copy_bandwidth()
    lines = [f"# bench/gpu/decode_ab.py, {time.strftime('%Y-%m-%d %H:%M')}: {torch.cuda.get_device_name(0)}, "
             f"torch {torch.__version__}; position {a.position}; under CUDA graphs, median of interleaved "
             f"rounds; a cell: ms (/ {next(iter(builds))}; / floor; error vs eager)",
             f"| model | dtype | batch | {' | '.join(builds)} | inductor reduce-overhead ms | floor ms |",
             "| --- " * (len(builds) + 5) + "|"]
    print("\n".join(lines), flush=True)
    for name in a.models.split(","):
        for dtype in a.dtypes.split(","):
            for batch in (int(b) for b in a.batches.split(",")):
                try:
                    lines.append(row(name, dtype, batch, builds, a, bandwidth))
                except Exception as e:  # noqa: BLE001 (one row's failure is reported; the others still run)
                    lines.append(f"| {name} | {dtype} | {batch} | failed: {type(e).__name__}: {str(e)[:300]} |")
                print(lines[-1], flush=True)
                if a.out:
                    a.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
