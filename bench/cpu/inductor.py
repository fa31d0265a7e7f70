#!/usr/bin/env python3
"""Kiln's cpu device against eager PyTorch and torch.compile's C++ backend (Inductor-CPU)
on pinned cores, one table: the cpu half of the general-shape sweep (issue 12).

    python3 bench/cpu/inductor.py GRAPHS --host PATH/TO/host [--cores 0,1] [--jobs N]
                                  [--only NAME ...] [--work DIR]

GRAPHS is a folder of kiln-graph/1 files (bench/cpu/sweep.py writes the sweep's). On the
machine that runs them, for every graph:

1. `host compile G --device cpu` writes wrapper.cpp for as many cores as are pinned
   (KILN_CPU_CORES), and it is built into a library with the command its `// Build:`
   line gives, the flags `host run` uses. Builds run in parallel (--jobs).
2. One process then runs every case: the inputs are PyTorch's, the graph is executed op
   by op with ATen as the eager reference (bench/gpu/run.py's EagerGraph), torch.compile
   compiles it (its compile workers on every core), and then every thread of the process
   is pinned to CORES (sched_setaffinity, what `taskset -c CORES` does, applied to each
   thread so that OpenMP pools made earlier move too). Kiln's `kiln_call` (loaded with
   ctypes: the library `host run` would build) must match eager (1e-5 relative in
   float32, 1e-2 in 16-bit floats; else judged against float64 as bench/gpu/run.py
   does), and Kiln, eager and torch.compile are timed on the pinned cores with
   OMP_NUM_THREADS and torch's thread count set to their number: after two warm-up calls
   each, the three take turns in five rounds (the order rotating), and each one's time
   is the median of all its calls. The threads are unpinned again for the next compile.

The table gives ms for each, Kiln/Inductor, Kiln's share of copy bandwidth (the bytes
of inputs and outputs over the time of `y.copy_(x)` for 64 MiB on the same cores), and
the summary: geometric mean of Kiln/Inductor, the worst case, cases above 1.10, and for
the matrix products Kiln against torch's own (eager) time.
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import ctypes
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MATMUL_OPS = {"mm", "bmm", "matmul", "linear", "addmm"}
CONV_OPS = {"conv1d", "conv2d", "convolution"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("graphs", type=Path, help="folder of kiln-graph/1 files")
    p.add_argument("--host", type=Path, required=True, help="the host binary (its folder is searched for plugins)")
    p.add_argument("--cores", default="0,1", help="cores the timing runs on (a taskset -c list)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="parallel library builds")
    p.add_argument("--only", nargs="*", default=[], help="case names to run (substring match)")
    p.add_argument("--work", type=Path, help="folder for compiled cases (default: a temporary one)")
    return p.parse_args(argv)


# ------------------------------------------------------------------ timing
def pin_all_threads(cpus: set[int]) -> None:
    """Every thread of this process onto `cpus` (threads made later inherit it)."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass  # a thread that has just exited


def parse_cores(cores: str) -> set[int]:
    out = set()
    for part in cores.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def median_ms(fn, budget_s: float = 0.5, most: int = 500) -> float:
    fn()
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < 5 or (time.perf_counter() - start < budget_s and len(times) < most):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2] * 1e3


def interleaved_ms(fns: dict, rounds: int = 5, budget_s: float = 1.5) -> dict:
    """The median ms of each of `fns`, timed in `rounds` rounds that take turns (the order
    rotating each round), so that a noisy stretch of the machine falls on every side alike.
    Between turns, a pause lets the other OpenMP runtime's idle workers stop spinning (Kiln's
    library and torch each bring their own pool onto the same pinned cores)."""
    names = list(fns)
    samples = {n: [] for n in names}
    for fn in fns.values():
        fn()
        fn()
    per_turn = budget_s / (rounds * len(names))
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            time.sleep(0.05)
            start = time.perf_counter()
            while True:
                t0 = time.perf_counter()
                fns[n]()
                samples[n].append(time.perf_counter() - t0)
                if t0 - start >= per_turn or len(samples[n]) >= 100 * (r + 1):
                    break
    out = {}
    for n, times in samples.items():
        times.sort()
        out[n] = times[len(times) // 2] * 1e3
    return out


def kiln_caller(lib_path: Path, inputs, outputs):
    lib = ctypes.CDLL(str(lib_path))
    lib.kiln_call.restype = ctypes.c_int
    lib.kiln_call.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    if lib.kiln_num_inputs() != len(inputs) or lib.kiln_num_outputs() != len(outputs):
        raise RuntimeError(f"{lib_path}: the library takes {lib.kiln_num_inputs()} inputs and "
                           f"{lib.kiln_num_outputs()} outputs, the graph {len(inputs)} and {len(outputs)}")
    ins = (ctypes.c_void_p * len(inputs))(*[t.data_ptr() for t in inputs])
    outs = (ctypes.c_void_p * len(outputs))(*[t.data_ptr() for t in outputs])

    def call():
        rc = lib.kiln_call(ins, outs)
        if rc != 0:
            raise RuntimeError(f"kiln_call returned {rc}")

    return call


def time_case(case: Path, pinned: set[int], everywhere: set[int]) -> dict:
    import torch
    from run import EagerGraph, rel_error  # bench/gpu/run.py

    # Every case's graph runs through the same EagerGraph.__call__: without a
    # reset, Dynamo would stop compiling it after its recompile limit (8) and
    # the later cases would time eager as "Inductor".
    torch._dynamo.reset()
    graph = EagerGraph(case / "graph.toml", torch.device("cpu"))
    inputs = [t.contiguous() for t in graph.inputs()]
    with torch.no_grad():
        want = graph(*inputs)
        compiled = torch.compile(graph.__call__)
        t0 = time.perf_counter()
        compiled(*inputs)
        compile_s = time.perf_counter() - t0
    got = [torch.empty(w.shape, dtype=w.dtype) for w in want]
    call = kiln_caller(case / "kiln.so", inputs, got)
    call()
    limits = [1e-2 if w.dtype in (torch.float16, torch.bfloat16) else 1e-5 for w in want]
    errs = [rel_error(g, w) for g, w in zip(got, want)]
    ok = all(e <= l for e, l in zip(errs, limits))
    err = max(errs)
    if not ok:
        graph.exact = True
        with torch.no_grad():
            exact = graph(*[t.double() if t.is_floating_point() else t for t in inputs])
        graph.exact = False
        kiln64 = max(rel_error(g, e) for g, e in zip(got, exact))
        eager64 = max(rel_error(w, e) for w, e in zip(want, exact))
        ok = kiln64 <= 2 * eager64 + 1e-5
        err = kiln64
    pin_all_threads(pinned)
    try:
        with torch.no_grad():
            ms = interleaved_ms({"kiln": call, "eager": lambda: graph(*inputs),
                                 "ind": lambda: compiled(*inputs)})
        kiln_ms, eager_ms, ind_ms = ms["kiln"], ms["eager"], ms["ind"]
    finally:
        pin_all_threads(everywhere)
    traffic = sum(t.numel() * t.element_size() for t in list(inputs) + list(want))
    ops = {n["op"] for n in graph.doc.get("nodes", [])}
    return {"ok": ok, "err": err, "kiln_ms": kiln_ms, "eager_ms": eager_ms, "inductor_ms": ind_ms,
            "compile_s": compile_s, "bytes": traffic, "matmul": bool(ops & MATMUL_OPS),
            "conv": bool(ops & CONV_OPS)}


def copy_gbs(pinned: set[int], everywhere: set[int]) -> float:
    import torch

    x = torch.randn(1 << 24)
    y = torch.empty_like(x)
    pin_all_threads(pinned)
    try:
        ms = median_ms(lambda: y.copy_(x), budget_s=1.0)
    finally:
        pin_all_threads(everywhere)
    return 2 * x.numel() * 4 / (ms * 1e-3) / 1e9


# ------------------------------------------------------------------ parent
def build_case(graph: Path, work: Path, host: Path, cores: int) -> tuple[str, str | None]:
    """host compile + the library build; returns (name, error or None)."""
    name = graph.stem
    out = work / name
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, KILN_CPU_CORES=str(cores))
    r = subprocess.run([str(host), "--plugins", str(host.parent), "compile", str(graph), "--device", "cpu",
                        "-o", str(out)], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        return name, "host compile: " + (r.stderr.strip().splitlines() or ["failed"])[-1]
    shutil.copy(graph, out / "graph.toml")
    source = (out / "wrapper.cpp").read_text()
    m = re.search(r"^// Build: c\+\+ (.*) wrapper\.cpp -o kiln\.so$", source, re.M)
    if not m:
        return name, "wrapper.cpp has no `// Build:` line"
    cxx = shlex.split(os.environ.get("CXX", "c++"))
    flags = os.environ.get("KILN_CXXFLAGS")
    args = shlex.split(m.group(1))
    if flags is not None:
        args = shlex.split(flags) + args[args.index("-std=c++17"):]
    r = subprocess.run(cxx + args + ["wrapper.cpp", "-o", "kiln.so"], cwd=out, capture_output=True, text=True)
    if r.returncode != 0:
        return name, "c++: " + r.stderr.strip()[-400:]
    return name, None


def main() -> int:
    args = parse_args()
    pinned = parse_cores(args.cores)
    threads = len(pinned)
    everywhere = os.sched_getaffinity(0)
    if not pinned <= everywhere:
        print(f"--cores {args.cores}: this process may run only on {sorted(everywhere)}", file=sys.stderr)
        return 2
    # Before torch (and its OpenMP runtime) is loaded: both read these once.
    os.environ["OMP_NUM_THREADS"] = str(threads)
    graphs = sorted(args.graphs.glob("*.toml"))
    if args.only:
        graphs = [g for g in graphs if any(o in g.stem for o in args.only)]
    if not graphs:
        print(f"no graphs in {args.graphs}", file=sys.stderr)
        return 2
    host = args.host.resolve()
    work = args.work or Path(tempfile.mkdtemp(prefix="kiln-cpu-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"{len(graphs)} case(s), timed on cores {args.cores} ({threads} threads), work folder {work}",
          flush=True)
    t0 = time.perf_counter()
    failed: dict[str, str] = {}
    with futures.ThreadPoolExecutor(args.jobs) as pool:
        for name, error in pool.map(lambda g: build_case(g, work, host, threads), graphs):
            if error:
                failed[name] = error
    print(f"built in {time.perf_counter() - t0:.1f} s", flush=True)

    sys.path.insert(0, str(HERE.parent / "gpu"))
    import torch

    torch.set_num_threads(threads)
    bw = copy_gbs(pinned, everywhere)
    print(f"copy bandwidth on cores {args.cores}: {bw:.1f} GB/s", flush=True)
    print(f"{'case':34} {'err':>9} ok {'kiln ms':>9} {'eager ms':>9} {'ind ms':>9} {'kiln/ind':>8} "
          f"{'%copy':>6} {'ind%':>6} {'compile s':>9}", flush=True)
    ratios, mm_vs_torch, conv_vs_torch, bad = [], [], [], 0
    for g in graphs:
        case = work / g.stem
        if g.stem in failed:
            continue
        try:
            row = time_case(case, pinned, everywhere)
        except Exception as e:  # noqa: BLE001  (one case's failure is reported, the rest run)
            failed[g.stem] = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
            continue
        ratio = row["kiln_ms"] / row["inductor_ms"]
        pct = row["bytes"] / (row["kiln_ms"] * 1e-3) / 1e9 / bw * 100
        ind_pct = row["bytes"] / (row["inductor_ms"] * 1e-3) / 1e9 / bw * 100
        ratios.append((ratio, case.name))
        if row["matmul"]:
            mm_vs_torch.append((row["eager_ms"] / row["kiln_ms"], case.name))
        if row["conv"]:
            conv_vs_torch.append((row["kiln_ms"] / row["eager_ms"], case.name))
        bad += 0 if row["ok"] else 1
        print(f"{case.name:34} {row['err']:9.2e} {'yes' if row['ok'] else 'NO':>3} {row['kiln_ms']:9.4f} "
              f"{row['eager_ms']:9.4f} {row['inductor_ms']:9.4f} {ratio:8.3f} {pct:6.1f} {ind_pct:6.1f} "
              f"{row['compile_s']:9.1f}", flush=True)
    for name, error in failed.items():
        print(f"{name:34} FAILED: {error}")
    if ratios:
        geo = math.exp(sum(math.log(r) for r, _ in ratios) / len(ratios))
        worst = max(ratios)
        above = sorted((r for r in ratios if r[0] > 1.10), reverse=True)
        print(f"\nKiln/Inductor-CPU over {len(ratios)} case(s): geometric mean {geo:.3f}, "
              f"worst {worst[0]:.3f} ({worst[1]})")
        print(f"above 1.10: {len(above)}" + "".join(f"\n  {r:.3f} {n}" for r, n in above))
        for speed, name in mm_vs_torch:
            print(f"matrix product {name}: Kiln at {speed:.2f}x torch eager's speed")
        for slower, name in conv_vs_torch:
            print(f"convolution {name}: Kiln's time {slower:.2f}x torch eager's (issue 11: at most 2)")
    print(f"wrong results: {bad}; failed: {len(failed)}")
    return 1 if bad or failed else 0


if __name__ == "__main__":
    sys.exit(main())
