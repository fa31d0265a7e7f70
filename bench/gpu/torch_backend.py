#!/usr/bin/env python3
"""The `kiln` package's torch.compile backend on the seven models of bench/gpu/precision.py, on the GPU
machine: what the backend adds to a call of Kiln's own output_code.py, and its first result against
Inductor's.

For one MODEL and DTYPE (precision.py's names, its work folder holding the compiled output_code.py):
- `overhead`: in one process, Kiln's output_code.py called directly and the same model through
  `torch.compile(model, backend=kiln.backend)` (launched directly; rounds interleaved as precision.py
  times them), both checked against eager. The issue's bar: at most 1.05.
- `first`: in a fresh process with empty Kiln and Triton caches, the wall time from torch.compile to
  the first result synchronized (Kiln: export, host compile, the kernels' compile, the call). Compare
  with precision.py's first-call column for Inductor (the bar: at most 0.5).

The package is used from the checkout (PYTHONPATH=python), with KILN_HOST naming a staged host
(bench/gpu/ab_stage.sh), so nothing needs installing on the GPU machine:

    PYTHONPATH=python KILN_HOST=bench/gpu/ab/new/host python3 bench/gpu/torch_backend.py \\
        overhead MODEL DTYPE [--work bench/gpu/zoo/precision] [--build new]
    PYTHONPATH=python KILN_HOST=bench/gpu/ab/new/host python3 bench/gpu/torch_backend.py first MODEL DTYPE
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from precision_child import DEVICE, as_tuple, interleaved, setup, sync  # noqa: E402
from precision_models import DTYPES, build, make_inputs  # noqa: E402
from run import load_module, rel_error  # noqa: E402


def overhead(model: str, dtype_name: str, code: Path, rep: float) -> dict:
    import kiln

    setup()
    module, _ = build(model, DTYPES[dtype_name], DEVICE)
    inputs = make_inputs(model, DTYPES[dtype_name], DEVICE)
    direct = load_module(code / "output_code.py", "cuda")
    with torch.no_grad():
        want = as_tuple(module(*inputs))
        compiled = torch.compile(module, backend=kiln.backend)
        got = as_tuple(compiled(*inputs))
        mine = as_tuple(direct.call(list(inputs)))
        sync()
        errors = [max(rel_error(a, b) for a, b in zip(outs, want)) for outs in (got, mine)]
        ms = interleaved({"direct": lambda: direct.call(list(inputs)),
                          "backend": lambda: compiled(*inputs)}, rep)
    return {"model": model, "dtype": dtype_name, "direct_ms": ms["direct"], "backend_ms": ms["backend"],
            "backend_over_direct": ms["backend"] / ms["direct"], "backend_error": errors[0],
            "direct_error": errors[1]}


def first(model: str, dtype_name: str) -> dict:
    """Run in a fresh process: the caches are the caller's (empty folders)."""
    import kiln

    setup()
    module, _ = build(model, DTYPES[dtype_name], DEVICE)
    inputs = make_inputs(model, DTYPES[dtype_name], DEVICE)
    sync()
    start = time.perf_counter()
    with torch.no_grad():
        torch.compile(module, backend=kiln.backend)(*inputs)
    sync()
    return {"model": model, "dtype": dtype_name, "first_s": time.perf_counter() - start}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("phase", choices=("overhead", "first", "first-child"))
    p.add_argument("model")
    p.add_argument("dtype", choices=sorted(DTYPES))
    p.add_argument("--work", type=Path, default=HERE / "zoo" / "precision")
    p.add_argument("--build", default="new")
    p.add_argument("--rep", type=float, default=200)
    a = p.parse_args()
    if a.phase == "overhead":
        print(json.dumps(overhead(a.model, a.dtype, a.work / a.build / "code" / f"{a.model}-{a.dtype}", a.rep)))
    elif a.phase == "first-child":
        print(json.dumps(first(a.model, a.dtype)))
    else:
        import subprocess

        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, KILN_CACHE_DIR=f"{tmp}/kiln", TRITON_CACHE_DIR=f"{tmp}/triton",
                       TORCHINDUCTOR_CACHE_DIR=f"{tmp}/inductor")
            done = subprocess.run([sys.executable, __file__, "first-child", a.model, a.dtype], env=env,
                                  capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(done.stderr[-3000:])
            print(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
