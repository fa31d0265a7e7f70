#!/usr/bin/env python3
"""Where a decoding step's device time goes: the static-cache step (bench/gpu/decode_step.py's
models), or with --no-cache the one-token forward without a cache, replayed under CUDA graphs
inside torch.profiler, its kernels grouped by name with their time per step, largest first.
Kiln's `mode="reduce-overhead"` step by default; `--inductor` profiles Inductor's
reduce-overhead step of the same export instead, to compare kernel by kernel.

    PYTHONPATH=python KILN_HOST=bench/gpu/ab/NAME/host python3 bench/gpu/decode_profile.py \\
        [--model gpt2] [--dtype bf16] [--cache 1024] [--position 512] [--steps 20] [--top 25] \\
        [--no-cache] [--inductor] [--timeline]

With --timeline it prints, instead, one step's kernels in launch order with what each adds to
the step's end: its end less the latest end before it. Under dependent launch a kernel's
programs start early and wait, so its duration overstates it; what it adds does not.

With --edit NAME, Kiln's step is profiled as an edit of `bench/gpu/decode_edits.py` or
`decode_probes.py` rewrites its compiled code (`no_wait`: no kernel waits for the one before).
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
from decode_step import DTYPES, NoCacheStep, model  # noqa: E402
from precision_child import setup, sync  # noqa: E402


def compiled_step(a):
    """The function to profile and its keyword arguments."""
    import kiln
    from generate import export_step

    m = model(a.model, DTYPES[a.dtype], a.cache)
    ids = torch.tensor([[7]], device="cuda")
    if a.no_cache:
        step = NoCacheStep(m).eval()
        if a.inductor:
            return torch.compile(step, mode="reduce-overhead"), {"input_ids": ids}
        with torch.no_grad():
            compiled = kiln.compile(step, (ids,), device="cuda", mode="reduce-overhead")
        return (lambda input_ids: compiled(input_ids)), {"input_ids": ids}
    ep = export_step(m, a.cache, "cuda")
    kwargs = {"input_ids": ids, "cache_position": torch.tensor([a.position], device="cuda")}
    if a.inductor:
        return torch.compile(ep.module(), mode="reduce-overhead"), kwargs
    step = kiln.compile(ep, device="cuda", mode="reduce-overhead")
    if a.edit:
        from decode_ablate import compiled_variant
        from decode_probes import EDITS

        step, _ = compiled_variant(ep, step.folder, a.edit, EDITS[a.edit])
    return step, kwargs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gpt2")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--cache", type=int, default=1024)
    p.add_argument("--position", type=int, default=512)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--no-cache", action="store_true", help="the one-token forward without a cache")
    p.add_argument("--inductor", action="store_true", help="profile Inductor's reduce-overhead step instead")
    p.add_argument("--timeline", action="store_true",
                   help="one step's kernels in order, with what each adds to the step's end")
    p.add_argument("--edit", help="profile Kiln's step as this edit (decode_edits.py, decode_probes.py) rewrites it")
    a = p.parse_args()
    setup()
    step, kwargs = compiled_step(a)
    with torch.no_grad():
        for _ in range(3):  # Kiln's first call warms up and records; cudagraph trees record on a later one
            step(**kwargs)
        sync()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(a.steps):
                step(**kwargs)
            sync()
    if a.timeline:
        timeline(prof, a)
        return
    per_name: dict = defaultdict(lambda: [0.0, 0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per_name[e.name][0] += e.device_time_total
            per_name[e.name][1] += 1
    total = sum(v[0] for v in per_name.values()) / a.steps
    what = ("inductor" if a.inductor else "kiln") + (" no cache" if a.no_cache else f", cache {a.cache}, "
                                                     f"position {a.position}")
    print(f"# {a.model} {a.dtype} {what}: {torch.cuda.get_device_name(0)}; "
          f"device time per step {total:.1f} us over {len(per_name)} kernel names")
    print("| kernel | us per step | launches per step | share |")
    print("| --- | --- | --- | --- |")
    for name, (us, n) in sorted(per_name.items(), key=lambda kv: -kv[1][0])[:a.top]:
        print(f"| {name[:90]} | {us / a.steps:.1f} | {n / a.steps:.0f} | {us / a.steps / total:.1%} |")


def timeline(prof, a) -> None:
    """One step's kernels in order of start, and what each adds to the step's end, with the
    sum of what each name adds per step over all steps."""
    events = sorted(((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                     if e.device_type == torch.autograd.DeviceType.CUDA), key=lambda t: t[0])
    per_step = len(events) // a.steps
    adds: dict = defaultdict(float)
    last_end = events[0][0]
    rows = []
    for i, (start, end, name) in enumerate(events[:per_step * a.steps]):
        add = max(0.0, end - last_end)
        adds[name] += add / a.steps
        if i // per_step == a.steps - 1:
            rows.append((name, start, end, add))
        last_end = max(last_end, end)
    first = rows[0][1]
    total = rows[-1][2] - first
    print(f"# {a.model} {a.dtype}: {torch.cuda.get_device_name(0)}; one step's {per_step} kernels, "
          f"{total:.1f} us from the first start to the last end")
    print("| # | kernel | start us | end us | adds us |")
    print("| --- | --- | --- | --- | --- |")
    for i, (name, start, end, add) in enumerate(rows):
        print(f"| {i} | {name[:70]} | {start - first:.1f} | {end - first:.1f} | {add:.2f} |")
    print("| kernel | adds us per step |")
    print("| --- | --- |")
    for name, us in sorted(adds.items(), key=lambda kv: -kv[1])[:a.top]:
        print(f"| {name[:90]} | {us:.1f} |")


if __name__ == "__main__":
    main()
