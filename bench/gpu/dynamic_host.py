#!/usr/bin/env python3
"""Where a dynamic compile's host time goes against a static one at one shape (a call bound
by the host: a small batch): both compiled from one export (bench/gpu/dynamic_speed.py's
models), each call's time to queue its work (the median of rounds from an idle device), with
and without the inputs' check, and the wall time of interleaved calls.

    python3 bench/gpu/dynamic_host.py HOST [--model gpt2] [--shape 1x128] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from dynamic_profile import compiled_pair  # noqa: E402
from dynamic_speed import DTYPES  # noqa: E402


def queueing(fn, calls: int = 50, rounds: int = 9) -> float:
    """The host's time to queue one call, ms: the median over rounds, each from an idle device."""
    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
    torch.cuda.synchronize()
    return statistics.median(times) * 1e3


def wall(fns: dict, calls: int = 50, rounds: int = 15) -> dict:
    """Each function's time per call, ms, synchronized, in interleaved rounds (medians)."""
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
            times[k].append((time.perf_counter() - start) / calls)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("host")
    p.add_argument("--model", default="gpt2", choices=["mlp_ln", "gpt2", "bert"])
    p.add_argument("--shape", default="1x128")
    p.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES))
    a = p.parse_args()
    b, s = (int(v) for v in a.shape.split("x"))
    static, dynamic, xs = compiled_pair(a.host, a.model, DTYPES[a.dtype], b, s)
    print(f"# bench/gpu/dynamic_host.py on {torch.cuda.get_device_name(0)}: {a.model} {a.dtype} at {b} x {s}")
    runs = {
        "static": lambda: static.call(list(xs)),
        "dynamic": lambda: dynamic.call(list(xs)),
        "static, no check": lambda: static.call(list(xs), check=None),
        "dynamic, no check": lambda: dynamic.call(list(xs), check=None),
    }
    with torch.no_grad():
        for fn in runs.values():
            for _ in range(3):
                fn()
        for name, fn in runs.items():
            print(f"  queueing, {name}: {queueing(fn):.3f} ms a call")
        times = wall(runs)
    for name, ms in times.items():
        print(f"  wall, {name}: {ms:.3f} ms a call ({ms / times['static']:.3f} of static)")
    launches = getattr(dynamic, "KERNEL_LAUNCHES", {})
    if launches:
        name, sized = next(iter(launches.items()))
        start = time.perf_counter()
        for _ in range(100000):
            sized(b * s, 768)
        print(f"  one sized launch's lookup: {(time.perf_counter() - start) * 10:.3f} us ({name})")


if __name__ == "__main__":
    main()
