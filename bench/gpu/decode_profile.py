#!/usr/bin/env python3
"""Where a decoding step's device time goes: Kiln's static-cache step (bench/gpu/decode_step.py's
models) replayed under CUDA graphs inside torch.profiler, its kernels grouped by name with
their time per step, largest first.

    PYTHONPATH=python KILN_HOST=bench/gpu/ab/NAME/host python3 bench/gpu/decode_profile.py \\
        [--model gpt2] [--dtype bf16] [--cache 1024] [--position 512] [--steps 20] [--top 25]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent / "tools"))
from decode_step import DTYPES, model  # noqa: E402
from precision_child import setup, sync  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gpt2")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--cache", type=int, default=1024)
    p.add_argument("--position", type=int, default=512)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args()
    import kiln
    from generate import export_step

    setup()
    m = model(a.model, DTYPES[a.dtype], a.cache)
    step = kiln.compile(export_step(m, a.cache, "cuda"), device="cuda", mode="reduce-overhead")
    kwargs = {"input_ids": torch.tensor([[7]], device="cuda"),
              "cache_position": torch.tensor([a.position], device="cuda")}
    with torch.no_grad():
        for _ in range(3):
            step(**kwargs)
        sync()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(a.steps):
                step(**kwargs)
            sync()
    per_name: dict = defaultdict(lambda: [0.0, 0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per_name[e.name][0] += e.device_time_total
            per_name[e.name][1] += 1
    total = sum(v[0] for v in per_name.values()) / a.steps
    print(f"# {a.model} {a.dtype}, cache {a.cache}, position {a.position}: {torch.cuda.get_device_name(0)}; "
          f"device time per step {total:.1f} us over {len(per_name)} kernel names")
    print("| kernel | us per step | launches per step | share |")
    print("| --- | --- | --- | --- |")
    for name, (us, n) in sorted(per_name.items(), key=lambda kv: -kv[1][0])[:a.top]:
        print(f"| {name[:90]} | {us / a.steps:.1f} | {n / a.steps:.0f} | {us / a.steps / total:.1%} |")


if __name__ == "__main__":
    main()
