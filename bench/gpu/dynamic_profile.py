#!/usr/bin/env python3
"""Where a dynamic compile's time goes against a static one at one shape: both
compiled from one export (bench/gpu/dynamic_speed.py's models), each profiled over calls
(torch.profiler): the device time per kernel, and the host time per call. Each chooses
its attention as its first call measures (`--static-attention library` forces the
static one's to the library's).

    python3 bench/gpu/dynamic_profile.py HOST [--model gpt2] [--shape 1x128] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from dynamic_speed import DTYPES, exported, host_compile, model_of  # noqa: E402
from run import load_module  # noqa: E402


def profile(name: str, fn, calls: int = 20) -> None:
    for _ in range(3):
        fn()
    # The host's time to queue a call: the median of 7 rounds, each from an idle device.
    rounds = []
    for _ in range(7):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - start) / calls)
    host = sorted(rounds)[len(rounds) // 2]
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.device_time_total > 0]
    device = sum(e.device_time_total for e in events) / calls / 1e3
    print(f"## {name}: {host * 1e3:.3f} ms a call on the host (queueing), {device:.3f} ms of device time")
    for e in sorted(events, key=lambda e: -e.device_time_total)[:12]:
        print(f"  {e.device_time_total / calls / 1e3:8.4f} ms  x{e.count // calls:<3} {e.key[:90]}")
    if PYTHON_PROFILE:
        import cProfile
        import io
        import pstats

        with cProfile.Profile() as prof:
            for _ in range(calls):
                fn()
        text = io.StringIO()
        stats = pstats.Stats(prof, stream=text)
        stats.sort_stats("tottime").print_stats(30)
        print(f"  host time by function (cProfile, {stats.total_calls // calls} Python calls a call):")
        for line in text.getvalue().splitlines()[6:]:
            if line.strip():
                print("   ", line[:150])


def compiled_pair(host: str, model_name: str, dtype, b: int, s: int, wrapper: str = "python"):
    """The model exported with a dynamic batch and length, compiled by `host` static at
    b x s and dynamic, both loaded for cuda (the C++ wrapper's through
    bench/gpu/aot_loader.py for `wrapper="cpp"`), and its inputs at b x s."""
    torch.manual_seed(0)
    model, longest, make = model_of(model_name)
    model = model.to(dtype).eval()
    root = Path(tempfile.mkdtemp(prefix="kiln-dynamic-pair-"))
    archive = root / f"{model_name}.pt2"
    inputs = lambda b_, s_, device="cuda": make(b_, s_, dtype, device)  # noqa: E731
    with torch.no_grad():
        sb, ss = exported(model, inputs, archive, (1, 64), (2, longest))
    extra = ["--wrapper", "cpp"] if wrapper == "cpp" else []
    host_compile(host, archive, root / "dynamic", "cuda", ["--dynamic", *extra])
    host_compile(host, archive, root / "static", "cuda",
                 ["--specialize", f"{sb}={b}", "--specialize", f"{ss}={s}", *extra])
    if wrapper == "cpp":
        from aot_loader import AotModule

        return AotModule(str(root / "static")), AotModule(str(root / "dynamic")), list(inputs(b, s).values())
    dynamic = load_module(root / "dynamic" / "output_code.py", "cuda")
    static = load_module(root / "static" / "output_code.py", "cuda")
    return static, dynamic, list(inputs(b, s).values())


# `--python-profile`: also the host's time per Python function.
PYTHON_PROFILE = False


def time_launches(module) -> dict:
    """Wraps each Triton launch `module` binds from now on (its kiln_runtime's `Launches`) so
    that its host time is summed per binary: {name: [calls, seconds]}."""
    launches = module.kiln_runtime.Launches
    times: dict = {}

    def timed(bind):
        def bind_timed(self, *a):
            launch = bind(self, *a)
            entry = times.setdefault(f"{getattr(self.binary, 'name', '?')} {a}", [0, 0.0])

            def run(*args, stream):
                start = time.perf_counter()
                launch(*args, stream=stream)
                entry[0] += 1
                entry[1] += time.perf_counter() - start

            return run

        return bind_timed

    launches._bind = timed(launches._bind)
    launches.bind_with = timed(launches.bind_with)
    return times


def print_launch_times(times: dict, calls: int) -> None:
    total = sum(t for _, t in times.values())
    print(f"  host time in Triton launches: {total / calls * 1e3:.3f} ms a call")
    launched = [(name, (n, t)) for name, (n, t) in times.items() if n]
    for name, (n, t) in sorted(launched, key=lambda kv: -kv[1][1])[:12]:
        print(f"    {t / calls * 1e6:8.1f} us  x{n // calls:<3} ({t / n * 1e6:5.1f} us each) {name[:70]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("host")
    p.add_argument("--model", default="gpt2", choices=["mlp_ln", "gpt2", "bert"])
    p.add_argument("--shape", default="1x128")
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    p.add_argument("--static-attention", default="measure", choices=["measure", "library", "kiln"])
    p.add_argument("--python-profile", action="store_true", help="the host's time per Python function too")
    p.add_argument("--wrapper", choices=["python", "cpp"], default="python")
    p.add_argument("--launch-times", action="store_true",
                   help="the host time of each Triton launch (the Python wrapper's), per kernel")
    a = p.parse_args()
    global PYTHON_PROFILE
    PYTHON_PROFILE = a.python_profile
    b, s = (int(v) for v in a.shape.split("x"))
    static, dynamic, xs = compiled_pair(a.host, a.model, DTYPES[a.dtype], b, s, a.wrapper)
    if getattr(static, "ATTENTION", None) is not None:
        static.ATTENTION.mode = a.static_attention
    print(f"# bench/gpu/dynamic_profile.py on {torch.cuda.get_device_name(0)}: {a.model} {a.dtype} at {b} x {s}")
    timed = {}
    if a.launch_times and a.wrapper == "python":
        timed = {"static": time_launches(static), "dynamic": time_launches(dynamic)}
    with torch.no_grad():
        profile(f"static ({a.static_attention} attention)", lambda: static.call(list(xs)))
        profile("dynamic", lambda: dynamic.call(list(xs)))
        for name, module in (("static", static), ("dynamic", dynamic)):
            if name in timed:
                for _ in range(3):
                    module.call(list(xs))
                for entry in timed[name].values():
                    entry[:] = [0, 0.0]
                torch.cuda.synchronize()
                for _ in range(20):
                    module.call(list(xs))
                torch.cuda.synchronize()
                print(f"## {name}, 20 calls:")
                print_launch_times(timed[name], 20)


if __name__ == "__main__":
    main()
