#!/usr/bin/env python3
"""The `kiln` package's torch.compile backend on the seven real-size models of
bench/gpu/precision.py (its precision_models.py), on the GPU machine:

- `overhead`: in one process, Kiln's own output_code.py for the model (`kiln.compile` of the
  module: torch.export, `host compile`, the folder's output_code.py loaded and called directly,
  as precision.py calls it) and the same model through `torch.compile(model, backend=kiln.backend)`,
  both checked against eager and timed launched directly, in interleaved rounds (precision.py's
  timing), then the backend's CUDA graphs (mode="reduce-overhead", or the cudagraphs option with
  --options) against the output_code.py call captured into one. Also the host time per call of
  each, of Kiln's function called without dynamo, and of dynamo alone (a backend that returns at
  once): where the host is the bottleneck, what dynamo adds shows. The backend's default mode
  chooses per graph whether to replay a CUDA graph (kiln._graphs.AutoGraphed, on its second call):
  the row gives the choice, and the backend's error is also checked on a call after it. The
  issue's bar: backend / output_code.py at most 1.05.
- `first`: the wall time from `torch.compile(model, backend=...)` to the first result synchronized,
  for Kiln and for Inductor, each in a fresh process with empty Kiln, Triton and Inductor caches
  (the model and its inputs on the GPU before the clock starts). The bar: Kiln / Inductor at most 0.5.

The package is used from the checkout (PYTHONPATH=python) with KILN_HOST naming a staged host
(bench/gpu/ab_stage.sh; its plugins beside it), so nothing needs installing on the GPU machine:

    PYTHONPATH=python KILN_HOST=bench/gpu/ab/new/host python3 bench/gpu/torch_backend.py \\
        [--models gpt2,bert,...] [--dtypes fp32,bf16,fp16] [--first-dtypes bf16] [--budget 540] [--out FILE] \\
        [--options '{"freeze": true}'] [--firsts-only]

prints one table row per model and dtype (and writes them to FILE as they come).
`overhead-child MODEL DTYPE` and `first-child MODEL DTYPE kiln|inductor` are the steps, one per process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from precision_child import DEVICE, as_tuple, capture, interleaved, setup, sync  # noqa: E402
from precision import TOLERANCE  # noqa: E402
from precision_models import DTYPES, MODELS, build, make_inputs  # noqa: E402
from run import load_module, rel_error  # noqa: E402


def options() -> dict | None:
    """The kiln backend's options for this run (--options, handed to the steps' processes)."""
    return json.loads(os.environ.get("KILN_BENCH_OPTIONS") or "null")


def counting(backend, graphs: list, made: list | None = None):
    """`backend` with each graph dynamo hands it recorded: its input count, whether Kiln
    compiled it (a fallback to eager has no `kiln`) and the seconds it took; `made` gets each
    (function returned, example inputs)."""

    def count(gm, example_inputs, **kwargs):
        start = time.perf_counter()
        fn = backend(gm, example_inputs, **kwargs)
        graphs.append({"inputs": len(example_inputs), "kiln": hasattr(fn, "kiln"),
                       "compile_s": time.perf_counter() - start})
        if made is not None:
            made.append((fn, list(example_inputs)))
        return fn

    return count


def host_us(fn, calls: int = 5, repeats: int = 20) -> float:
    """Host microseconds per call of `fn`: `calls` calls queued after a synchronize, few
    enough that the launch queue never fills (so the device's own time does not show), median
    of `repeats`."""
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls * 1e6)
    sync()
    return statistics.median(times)


def dynamo_alone_us(module, inputs) -> float:
    """Host microseconds per call of dynamo itself on the model: its guards and the gathering
    of the graph's arguments, with a backend whose function returns at once."""
    torch._dynamo.reset()

    def nothing(gm, example_inputs, **kwargs):
        outputs = gm(*example_inputs)
        return lambda *args: outputs

    compiled = torch.compile(module, backend=nothing)
    compiled(*inputs)
    us = host_us(lambda: compiled(*inputs))
    torch._dynamo.reset()
    return us


def overhead(model: str, dtype_name: str, rep: float) -> dict:
    """Kiln's output_code.py against the backend, launched directly and under CUDA graphs (the
    backend's mode="reduce-overhead" against the output_code.py call captured in one), with the
    host time per call of each and of dynamo alone."""
    import kiln

    setup()
    module, _ = build(model, DTYPES[dtype_name], DEVICE)
    inputs = make_inputs(model, DTYPES[dtype_name], DEVICE)
    want = as_tuple(module(*inputs))
    folder = kiln.compile(module, inputs, device="cuda").folder
    direct = load_module(folder / "output_code.py", "cuda")
    result = {"device": torch.cuda.get_device_name(0), "dynamo_alone_us": dynamo_alone_us(module, inputs)}
    graphs: list = []
    made: list = []
    compiled = torch.compile(module, backend=counting(kiln.backend, graphs, made), options=options())
    got = as_tuple(compiled(*inputs))
    mine = as_tuple(direct.call(list(inputs)))
    sync()
    errors = [max(rel_error(a, b) for a, b in zip(outs, want)) for outs in (got, mine)]
    ms = interleaved({"direct": lambda: direct.call(list(inputs)), "backend": lambda: compiled(*inputs)}, rep)
    # By then the default mode has made its choice (kiln._graphs.AutoGraphed, on the second call):
    # the result of a call after it is checked too.
    later = as_tuple(compiled(*inputs))
    errors[0] = max(errors[0], max(rel_error(a, b) for a, b in zip(later, want)))
    result.update(direct_ms=ms["direct"], backend_ms=ms["backend"], ratio=ms["backend"] / ms["direct"],
                  chosen=",".join(getattr(getattr(fn, "graphed", None), "chosen", None) or "-" for fn, _ in made),
                  backend_error=errors[0], direct_error=errors[1],
                  agree=max(rel_error(a, b) for a, b in zip(got, mine)), graphs=graphs,
                  direct_host_us=host_us(lambda: direct.call(list(inputs))),
                  backend_host_us=host_us(lambda: compiled(*inputs)))
    if len(made) == 1:  # Kiln's function as dynamo calls it, without dynamo
        fn, args = made[0]
        result["kiln_fn_host_us"] = host_us(lambda: fn(*args))
    del compiled, got, later
    result.update(under_graphs(module, inputs, direct, want, rep))
    return result


def under_graphs(module, inputs, direct, want, rep: float) -> dict:
    """The backend's mode="reduce-overhead" against output_code.py's call captured into a CUDA
    graph by hand (which reads the inputs where they are; the backend copies the model's inputs
    in, and reads the parameters where they are)."""
    import kiln

    torch._dynamo.reset()
    static = list(inputs)
    graph, _ = capture(lambda: direct.call(list(static)))
    if options():  # torch.compile takes a mode or options: the backend's option for graphs
        compiled = torch.compile(module, backend=kiln.backend, options={**options(), "cudagraphs": True})
    else:
        compiled = torch.compile(module, backend=kiln.backend, mode="reduce-overhead")
    for _ in range(2):
        got = as_tuple(compiled(*inputs))
    error = max(rel_error(a, b) for a, b in zip(got, want))
    ms = interleaved({"direct": graph.replay, "backend": lambda: compiled(*inputs)}, rep)
    torch._dynamo.reset()
    return {"graphs_direct_ms": ms["direct"], "graphs_backend_ms": ms["backend"],
            "graphs_ratio": ms["backend"] / ms["direct"], "graphs_backend_error": error}


def first(model: str, dtype_name: str, which: str) -> dict:
    """In a fresh process whose caches the caller emptied."""
    setup()
    module, _ = build(model, DTYPES[dtype_name], DEVICE)
    inputs = make_inputs(model, DTYPES[dtype_name], DEVICE)
    graphs: list = []
    if which == "kiln":
        import kiln

        backend = counting(kiln.backend, graphs)
    else:
        backend = "inductor"
    sync()
    start = time.perf_counter()
    out = as_tuple(torch.compile(module, backend=backend, options=options() if which == "kiln" else None)(*inputs))
    sync()
    first_s = time.perf_counter() - start
    want = as_tuple(module(*inputs))
    # Kiln's part: export, `host compile` (the kernels compile at the first call, inside first_s).
    return {"first_s": first_s, "error": max(rel_error(a, b) for a, b in zip(out, want)), "graphs": graphs,
            "backend_s": sum(g["compile_s"] for g in graphs)}


def child(args: list[str], env: dict, timeout: float) -> dict:
    """One step in its own process: its JSON line, or {"failed": why}."""
    try:
        done = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"failed": f"timed out after {timeout:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"failed": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][:300]}
    return json.loads(lines[-1])


def fresh_caches(tmp: str) -> dict:
    return dict(os.environ, KILN_CACHE_DIR=f"{tmp}/kiln", TRITON_CACHE_DIR=f"{tmp}/triton",
                TORCHINDUCTOR_CACHE_DIR=f"{tmp}/inductor")


def cell(value, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def row(model: str, dtype: str, over: dict | None, firsts: dict) -> str:
    over = over or {}
    kiln_first, ind_first = (firsts.get(w, {}).get("first_s") for w in ("kiln", "inductor"))
    ratio_first = kiln_first / ind_first if kiln_first and ind_first else None
    graphs = over.get("graphs") or firsts.get("kiln", {}).get("graphs") or []
    compiled = sum(g["kiln"] for g in graphs)
    tol = TOLERANCE[dtype]
    # Matching eager: within the dtype's tolerance, or as close as Kiln's own output_code.py is
    # (which precision.py checks against the model one float type wider where eager itself is off).
    ok = (not over or ("failed" not in over and over["ratio"] <= 1.05
                       and over["backend_error"] <= max(tol, 1.5 * over["direct_error"]))) and (
        ratio_first is None or ratio_first <= 0.5)
    failed = "; ".join(f"{k}: {v['failed']}" for k, v in (("overhead", over), *firsts.items()) if "failed" in v)
    host = " / ".join(cell(over.get(k), ".0f") for k in ("direct_host_us", "backend_host_us", "kiln_fn_host_us",
                                                          "dynamo_alone_us"))
    return (f"| {model} | {dtype} | {cell(over.get('ratio'), '.3f')} | {cell(over.get('backend_ms'), '.3f')} / "
            f"{cell(over.get('direct_ms'), '.3f')} | {over.get('chosen') or '—'} | {cell(over.get('graphs_ratio'), '.3f')} | "
            f"{cell(over.get('graphs_backend_ms'), '.3f')} / {cell(over.get('graphs_direct_ms'), '.3f')} | {host} | "
            f"{cell(over.get('backend_error'), '.1e')} / {cell(over.get('direct_error'), '.1e')} ({tol}) | "
            f"{compiled}/{len(graphs)} | {cell(ratio_first, '.2f')} | {cell(kiln_first, '.1f')} / "
            f"{cell(ind_first, '.1f')} | {'yes' if ok and not failed else 'NO ' + failed} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--dtypes", default="fp32,bf16,fp16")
    p.add_argument("--first-dtypes", default="bf16", help="the dtypes whose first call is timed ('' for none)")
    p.add_argument("--rep", type=float, default=200, help="ms per column per round")
    p.add_argument("--firsts-only", action="store_true", help="time only the first results (no overhead step)")
    p.add_argument("--budget", type=float, default=540, help="seconds; no step starts past it")
    p.add_argument("--out", type=Path)
    p.add_argument("--details", type=Path, help="also write each step's JSON record here, one per line")
    p.add_argument("--options", help='the kiln backend\'s options, as JSON: \'{"freeze": true}\'')
    a = p.parse_args()
    start = time.monotonic()
    if a.options:
        json.loads(a.options)  # refused here, not in every step
        os.environ["KILN_BENCH_OPTIONS"] = a.options
    host = os.environ.get("KILN_HOST", "the package's own")
    if Path(host).is_absolute() and Path(host).is_relative_to(HERE.parent.parent):
        host = str(Path(host).relative_to(HERE.parent.parent))
    header = [f"# bench/gpu/torch_backend.py, {time.strftime('%Y-%m-%d %H:%M')}, host {host}",
              f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}; TF32 off; launched directly, "
              f"median of interleaved rounds; backend options {a.options or 'none'}",
              "| model | dtype | backend / output_code.py | ms: backend / output_code.py | default mode's choice "
              "(AutoGraphed) | under CUDA graphs "
              "(reduce-overhead / captured call) | graphs ms | host us per call: output_code.py / backend / Kiln's "
              "function without dynamo / dynamo alone | error vs eager: backend / output_code.py (tol) | graphs Kiln "
              "compiled | first result Kiln / Inductor | first s: Kiln / Inductor | ok |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    lines = list(header)
    print("\n".join(header), flush=True)
    first_dtypes = [d for d in a.first_dtypes.split(",") if d]
    with tempfile.TemporaryDirectory() as shared:
        for model in a.models.split(","):
            for dtype in a.dtypes.split(","):
                if time.monotonic() - start > a.budget:
                    lines.append(f"# budget spent: {model} {dtype} and later left out")
                    print(lines[-1], flush=True)
                    break
                # Kiln's and Triton's caches kept across models: the timing does not depend on them.
                over = None if a.firsts_only else child(["overhead-child", model, dtype, "--rep", str(a.rep)],
                                                        fresh_caches(shared), 600)
                firsts = {}
                for which in ("kiln", "inductor") if dtype in first_dtypes else ():
                    with tempfile.TemporaryDirectory() as tmp:
                        firsts[which] = child(["first-child", model, dtype, which], fresh_caches(tmp), 600)
                if a.details:
                    with a.details.open("a") as f:
                        f.write(json.dumps({"model": model, "dtype": dtype, "overhead": over, "first": firsts}) + "\n")
                lines.append(row(model, dtype, over, firsts))
                print(lines[-1], flush=True)
                if a.out:
                    a.out.write_text("\n".join(lines) + "\n")


def dispatch() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "overhead-child":
        rep = float(sys.argv[5]) if len(sys.argv) > 5 else 200
        print(json.dumps(overhead(sys.argv[2], sys.argv[3], rep)))
    elif len(sys.argv) > 1 and sys.argv[1] == "first-child":
        print(json.dumps(first(sys.argv[2], sys.argv[3], sys.argv[4])))
    else:
        main()


if __name__ == "__main__":
    dispatch()
