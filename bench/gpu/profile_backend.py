#!/usr/bin/env python3
"""Where the host time of a call goes: Kiln's output_code.py called directly against the same
model through `torch.compile(backend="kiln")`, each profiled with cProfile over the same number
of calls (bench/gpu/torch_backend.py measures the times; this says what they are made of).

    PYTHONPATH=python KILN_HOST=bench/gpu/ab/NAME/host python3 bench/gpu/profile_backend.py \\
        MODEL DTYPE [--calls 300] [--top 30] [--out FILE]

cProfile adds its own cost to each Python-level call, so compare the two columns' counts and
their relative times, not the absolute microseconds.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import statistics
import time
import io
import pstats
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from precision_child import DEVICE, setup, sync  # noqa: E402
from precision_models import DTYPES, build, make_inputs  # noqa: E402
from run import load_module  # noqa: E402


def profiled(fn, calls: int, top: int) -> str:
    for _ in range(5):
        fn()
    sync()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(calls):
        fn()
    profile.disable()
    sync()
    text = io.StringIO()
    stats = pstats.Stats(profile, stream=text)
    stats.sort_stats("tottime").print_stats(top)
    return text.getvalue()


def steady_us(fns: dict, calls: int = 100, rounds: int = 9) -> dict:
    """Host us per call of each of `fns` in a loop of `calls` calls with no synchronization
    inside it: where the device keeps up (a call bound by the host), the call's host time.
    Interleaved rounds: (median, least)."""
    times: dict = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            sync()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - start) / calls * 1e6)
    sync()
    return {name: (statistics.median(t), min(t)) for name, t in times.items()}


def measure(steps, a, text: list) -> list:
    """Each step's host us per call (into `text`), with Python's cyclic garbage collector on
    and then off (a collection's cost falls on whichever call triggers it), and its profile
    (returned)."""
    for collector in ("on", "off"):
        if collector == "off":
            gc.collect()
            gc.disable()
        try:
            for name, (median, least) in steady_us(dict(steps)).items():
                text.append(f"# host us per call, steady, gc {collector}: median {median:.0f}, least {least:.0f}: "
                            f"{name}")
        finally:
            gc.enable()
    return [f"## {name}\n{profiled(fn, a.calls, a.top)}" for name, fn in steps]


def inductor_steps(module, inputs, a, text: list) -> list:
    """The same question asked of Inductor: torch.compile's call against the function Inductor
    compiled (compile_fx's), called as dynamo calls it but without dynamo."""
    from torch._inductor.compile_fx import compile_fx

    torch._dynamo.reset()
    made = []

    def recording(gm, example_inputs, **kwargs):
        fn = compile_fx(gm, example_inputs)
        made.append((fn, list(example_inputs)))
        return fn

    compiled = torch.compile(module, backend=recording)
    compiled(*inputs)
    steps = [("Inductor: torch.compile", lambda: compiled(*inputs))]
    if len(made) == 1:
        fn, args = made[0]
        try:  # compile_fx's function takes its arguments spread, or (boxed) as one list
            fn(*args)
            call = lambda: fn(*args)  # noqa: E731
        except (AssertionError, TypeError):
            call = lambda: fn(list(args))  # noqa: E731
        steps.append(("Inductor: its function as dynamo calls it, without dynamo", call))
    return measure(steps, a, text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("dtype")
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--out", type=Path)
    p.add_argument("--inductor", action="store_true",
                   help="also Inductor's own: torch.compile against its compiled function called without dynamo")
    a = p.parse_args()
    import kiln

    setup()
    module, _ = build(a.model, DTYPES[a.dtype], DEVICE)
    inputs = make_inputs(a.model, DTYPES[a.dtype], DEVICE)
    direct = load_module(kiln.compile(module, inputs, device="cuda").folder / "output_code.py", "cuda")
    made = []

    def recording(gm, example_inputs, **kwargs):
        fn = kiln.backend(gm, example_inputs, **kwargs)
        made.append((fn, list(example_inputs)))
        return fn

    def nothing(gm, example_inputs, **kwargs):
        outputs = gm(*example_inputs)
        return lambda *args: outputs

    compiled = torch.compile(module, backend=recording)
    compiled(*inputs)
    steps = [("output_code.py called directly", lambda: direct.call(list(inputs))),
             ("torch.compile(backend='kiln')", lambda: compiled(*inputs))]
    if len(made) == 1:
        fn, args = made[0]
        steps.append(("Kiln's function as dynamo calls it, without dynamo", lambda: fn(*args)))
        graph = load_module(fn.kiln.folder / "output_code.py", "cuda")  # the dynamo graph's own code
        steps.append(("the dynamo graph's output_code.py called directly", lambda: graph.call(list(args))))
        plain = [t.detach() for t in args]
        steps.append(("the same, inputs as plain tensors (no Parameter)", lambda: graph.call(list(plain))))
    text = [f"# {a.model} {a.dtype}, {a.calls} calls each, {torch.cuda.get_device_name(0)}"]
    profiles = measure(steps, a, text)
    torch._dynamo.reset()  # one backend's code in dynamo's cache at a time
    alone = torch.compile(module, backend=nothing)
    alone(*inputs)
    last = [("dynamo alone (a backend whose function returns at once)", lambda: alone(*inputs))]
    if len(made) == 1:  # whether dynamo's own work slows the function that follows it

        def both():
            alone(*inputs)
            fn(*args)

        last.append(("dynamo alone, then Kiln's function without dynamo", both))
    profiles += measure(last, a, text)
    if a.inductor:
        profiles += inductor_steps(module, inputs, a, text)
    text += profiles
    out = "\n".join(text)
    print(out)
    if a.out:
        a.out.write_text(out)


if __name__ == "__main__":
    main()
