#!/usr/bin/env python3
"""Where the first result of `torch.compile(model, backend="kiln")` goes: the wall time from the
call to the synchronized result, split into dynamo's tracing, Kiln's export, the compile (archive
saved, `host compile`), output_code.py's import, and the first call, with the time the first call
waited for each kernel's compile and spent choosing each attention's side. Run in a fresh process
with empty caches (KILN_CACHE_DIR, TRITON_CACHE_DIR) for the numbers of a first use.

    PYTHONPATH=python KILN_HOST=bench/gpu/ab/NAME/host python3 bench/gpu/first_breakdown.py MODEL [DTYPE] [--profile]

--profile also runs the first call of output_code.py under cProfile and prints its top functions.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from precision_child import DEVICE, setup, sync  # noqa: E402
from precision_models import DTYPES, build, make_inputs  # noqa: E402


def timed(owner, name: str, into: list, label=None):
    """Wraps `owner.name` so that each call appends (label, start, seconds) to `into`."""
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            into.append((label or name, start, time.perf_counter() - start))

    setattr(owner, name, wrapper)


def timed_binary(kernels, into: list):
    """Wraps `kernels.binary` (a launch waiting for a kernel's binary): each wait is summed under
    one label and also kept under the kernel's name."""
    original = kernels.binary

    def wrapper(kernel, *args, **kwargs):
        start = time.perf_counter()
        try:
            return original(kernel, *args, **kwargs)
        finally:
            seconds = time.perf_counter() - start
            into.append(("a launch waited for a kernel's binary", start, seconds))
            into.append(("binary " + str(getattr(kernel, "name", kernel)), start, seconds))

    kernels.binary = wrapper


def profiled(owner, name: str, into: list):
    """Wraps `owner.name` so that its first call runs under cProfile; its statistics go to `into`."""
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        if into:
            return original(*args, **kwargs)
        profile = cProfile.Profile()
        try:
            return profile.runcall(original, *args, **kwargs)
        finally:
            text = io.StringIO()
            pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(15)
            into.append(text.getvalue())

    setattr(owner, name, wrapper)


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--profile"]
    model, dtype = args[0], args[1] if len(args) > 1 else "bf16"
    profile = "--profile" in sys.argv
    import kiln
    from kiln import _compile, _dynamo

    setup()
    module, _ = build(model, DTYPES[dtype], DEVICE)
    inputs = make_inputs(model, DTYPES[dtype], DEVICE)
    spans: list = []
    timed(_dynamo, "export", spans, "torch.export of dynamo's graph")
    timed(_compile, "build", spans, "archive saved and host compile")
    timed(_compile, "load_output_code", spans, "output_code.py imported")
    timed(_dynamo, "_runner", spans, "the backend's function made")
    original = _compile.load_output_code

    def loaded(folder):
        module = original(folder)
        kernels = getattr(module, "KERNELS", None)
        if kernels is not None:
            timed_binary(kernels, spans)
        attention = getattr(module, "ATTENTION", None)
        if attention is not None:
            timed(attention, "_choose", spans, "an attention's side chosen (both timed)")
        timed(module, "call", spans, "output_code.py's first call")
        if profile:
            profiled(module, "call", stats)
        return module

    _compile.load_output_code = loaded
    entered: list = []
    stats: list = []

    def backend(gm, example_inputs, **kwargs):
        entered.append(time.perf_counter())
        return kiln.backend(gm, example_inputs, **kwargs)

    sync()
    start = time.perf_counter()
    torch.compile(module, backend=backend)(*inputs)
    sync()
    total = time.perf_counter() - start
    print(f"# {model} {dtype}: first result {total:.2f} s; {torch.cuda.get_device_name(0)}")
    print(f"dynamo's tracing, to the backend: {entered[0] - start:.2f} s")
    sums: dict = {}
    for label, _, seconds in spans:
        if label.startswith("binary "):
            continue
        n, s, most = sums.get(label, (0, 0.0, 0.0))
        sums[label] = (n + 1, s + seconds, max(most, seconds))
    for label, (n, s, most) in sums.items():
        print(f"{label}: {s:.2f} s in {n} (longest {most:.2f})")
    waits = sorted(((s, label) for label, _, s in spans if label.startswith("binary ")), reverse=True)[:5]
    print("longest waits:", ", ".join(f"{label[7:]} {s:.2f} s" for s, label in waits) or "none")
    for text in stats:
        print("# the first call's Python, by own time (cProfile)\n" + text)


if __name__ == "__main__":
    main()
