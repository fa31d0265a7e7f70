#!/usr/bin/env python3
"""Host (CPU) time per call of Kiln's Python wrapper against Inductor's, for
launch-bound graphs: each side is called N times back to back with no
synchronisation inside, so the figure is the wrapper's own work per call (argument
checks, allocation, launches), divided by its kernel count for a per-launch figure.

    wrapper_overhead.py [--profile] CASE_DIR [CASE_DIR ...]    (folders as sweep_prepare.sh or
                                                             models_prepare.sh write them)

A whole model whose GPU time exceeds its host time fills the launch queue: its figure
is then the GPU's time per call, the larger of the two.

--profile prints where Kiln's call spends its host time (cProfile, top 15 by own time).
"""

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import EagerGraph, ExportedModel, load_module  # noqa: E402

N = 2000


def per_call_us(fn, inputs) -> float:
    for _ in range(50):
        fn(inputs)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(N):
        fn(inputs)
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / N * 1e6


def main() -> int:
    profile = "--profile" in sys.argv
    cases = [a for a in sys.argv[1:] if a != "--profile"]
    print(f"{'case':32} {'kernels':>7} {'kiln us':>8} {'ind us':>8} {'kiln/launch':>11}")
    for case in map(Path, cases):
        cuda = torch.device("cuda", 0)
        graph = ExportedModel(case, cuda) if (case / "model.pt2").exists() else EagerGraph(case / "graph.toml", cuda)
        module = load_module(case / "output_code.py", case.parent.name)
        inputs = graph.inputs()
        kernels = len(getattr(module, "KERNEL_META", {}))
        kiln = per_call_us(lambda xs: module.call(list(xs)), inputs)
        compiled = torch.compile(graph.__call__)
        ind = per_call_us(lambda xs: compiled(*xs), inputs)
        print(f"{case.name:32} {kernels:7d} {kiln:8.1f} {ind:8.1f} {kiln / max(kernels, 1):11.1f}")
        if profile:
            import cProfile
            import pstats
            prof = cProfile.Profile()
            prof.enable()
            per_call_us(lambda xs: module.call(list(xs)), inputs)
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    return 0


if __name__ == "__main__":
    sys.exit(main())
