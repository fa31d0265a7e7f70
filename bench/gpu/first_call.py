#!/usr/bin/env python3
"""Time to the first result: Kiln's output_code.py against torch.compile, each
in a fresh process, with empty caches and then with warm ones.

For every case CASES/cuda/<name>/ (as bench/gpu/prepare.sh writes them; by
default the examples and the torch.export archives, `pt2_*`; `--all` adds the
regression graphs), on the GPU machine:

- cold: a fresh process whose caches are new, empty folders (Triton's, Kiln's
  and Inductor's) makes the graph's inputs on the GPU, then times until the
  first result is on the device. Kiln: importing output_code.py (a copy without
  any kernels/ folder) and its first `call`. Inductor: `torch.compile` of the
  same graph (run.py's eager executor, or the exported program) and its first
  call.
- warm: the same again in a new process that finds the caches the cold run
  left; `second` is that process's second call, for comparison.
- precompiled (with --precompile): the copy's kernels compiled ahead by
  `output_code.py --precompile` (what `host compile --precompile` runs; here,
  with the GPU machine's Triton), then Kiln's first call in a fresh process
  with those binaries beside the code and otherwise empty caches.

Prints one table and the geometric mean of Kiln/Inductor (cold).

Usage: first_call.py CASES [--only NAME ...] [--all] [--no-inductor] [--precompile]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(mode: str, case: Path, code: Path) -> None:
    """In a fresh process: make the inputs, then time the first call and the second."""
    sys.path.insert(0, str(HERE))
    import torch

    from run import EagerGraph, ExportedModel, load_module

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = torch.device("cuda", 0)
    if (case / "model.pt2").exists():
        graph = ExportedModel(case, device)
    elif (case / "graph.toml").exists():
        graph = EagerGraph(case / "graph.toml", device)
    else:
        graph = EagerGraph(HERE.parent.parent / "examples" / f"{case.name}.toml", device)
    inputs = graph.inputs()
    torch.cuda.synchronize()
    start = time.perf_counter()
    if mode == "kiln":
        module = load_module(code, "cuda")
        run = lambda: module.call(list(inputs))
    else:
        compiled = torch.compile(graph.__call__)
        run = lambda: compiled(*inputs)
    run()
    torch.cuda.synchronize()
    first = time.perf_counter() - start
    start = time.perf_counter()
    run()
    torch.cuda.synchronize()
    second = time.perf_counter() - start
    print(json.dumps({"first": first, "second": second}))


def measure(mode: str, case: Path, code: Path, caches: Path, timeout: float) -> dict:
    env = dict(os.environ)
    env.update({
        "TRITON_CACHE_DIR": str(caches / "triton"),
        "KILN_CACHE_DIR": str(caches / "kiln"),
        "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"),
    })
    try:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", mode, str(case), str(code)],
            env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout:.0f} s"}
    lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": tail[:120]}
    return json.loads(lines[-1])


def copy_without_binaries(case: Path, into: Path) -> Path:
    """The case's generated files, without kernels/: what a plain `host compile` writes."""
    into.mkdir(parents=True)
    for f in case.iterdir():
        if f.is_file() and (f.name in ("output_code.py", "kiln_runtime.py") or f.suffix == ".safetensors"):
            shutil.copy(f, into / f.name)
    return into / "output_code.py"


def kernels_of(code: Path) -> int:
    text = code.read_text()
    return sum(1 for l in text.splitlines() if l.startswith("    \"kiln_") and "\"signature\"" in l)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", type=Path)
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--all", action="store_true", help="every case, the regression graphs too")
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--precompile", action="store_true",
                        help="also time the first call with the kernels compiled ahead")
    parser.add_argument("--timeout", type=float, default=240)
    args = parser.parse_args()
    examples = {p.stem for p in (HERE.parent.parent / "examples").glob("*.toml")}
    cases = sorted(p for p in (args.cases / "cuda").iterdir() if (p / "output_code.py").exists())
    if args.only:
        cases = [c for c in cases if c.name in args.only]
    elif not args.all:
        cases = [c for c in cases if c.name in examples or c.name.startswith("pt2_")]
    header = (f"{'case':<28} {'kernels':>7} {'kiln cold s':>11} {'inductor cold s':>15} {'kiln/ind':>8} "
              f"{'kiln warm s':>11} {'second s':>8} {'warm-second':>11} {'precompiled s':>13}")
    print(header)
    print("-" * len(header))
    ratios, worst_warm = [], 0.0
    for case in cases:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            code = copy_without_binaries(case, tmp / "code")
            cold = measure("kiln", case, code, tmp / "caches", args.timeout)
            warm = measure("kiln", case, code, tmp / "caches", args.timeout)
            pre = {}
            if args.precompile:
                ahead = copy_without_binaries(case, tmp / "ahead")
                env = dict(os.environ, TRITON_CACHE_DIR=str(tmp / "caches-ahead" / "triton"),
                           KILN_CACHE_DIR=str(tmp / "caches-ahead" / "kiln"))
                done = subprocess.run([sys.executable, str(ahead), "--precompile"], env=env,
                                      capture_output=True, text=True)
                pre = (measure("kiln", case, ahead, tmp / "caches-pre", args.timeout) if done.returncode == 0
                       else {"error": (done.stderr.strip().splitlines() or ["?"])[-1][:120]})
            ind = {} if args.no_inductor else measure("inductor", case, code, tmp / "caches-ind", args.timeout)
        fmt = lambda r, k="first": f"{r[k]:.2f}" if k in r else ("-" if not r else "ERR")
        ratio = cold["first"] / ind["first"] if "first" in cold and "first" in ind else float("nan")
        if not math.isnan(ratio):
            ratios.append(ratio)
        gap = warm["first"] - warm["second"] if "first" in warm else float("nan")
        if not math.isnan(gap):
            worst_warm = max(worst_warm, gap)
        print(f"{case.name:<28} {kernels_of(case / 'output_code.py'):>7} {fmt(cold):>11} {fmt(ind):>15} "
              f"{ratio:>8.2f} {fmt(warm):>11} {fmt(warm, 'second'):>8} {gap:>11.2f} {fmt(pre):>13}")
        for what, r in (("kiln cold", cold), ("kiln warm", warm), ("precompiled", pre), ("inductor", ind)):
            if "error" in r:
                print(f"    {what}: {r['error']}")
        sys.stdout.flush()
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"\nKiln/Inductor first call (cold): geometric mean {geo:.2f}, worst {max(ratios):.2f} "
              f"over {len(ratios)} case(s); warm first call minus second call: worst {worst_warm:.2f} s")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]))
    else:
        sys.exit(main())
