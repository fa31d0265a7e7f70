#!/usr/bin/env python3
"""Host time per call of Kiln's C++ wrapper (`--wrapper cpp`, cases from
aot_prepare.sh) against Kiln's Python wrapper and Inductor's, in one run.

For each case folder: aot_bench.cpp (built here with the CUDA runtime) loads
kiln.so with no Python in the process and reports the host time of one
kiln_call (N calls back to back, no synchronisation), the time per call
once the GPU has finished them all, and the same for the call captured into a
CUDA graph. Where the case has a graph.toml, the same graph's output_code.py
(Python wrapper, compiled by aot_prepare.sh into aot_python/) and
torch.compile of its eager graph are timed the way wrapper_overhead.py does.

    aot_bench.py CASE_DIR [CASE_DIR ...]
"""

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def build_bench() -> Path:
    from aot_loader import cuda_home

    exe = HERE / "aot_bench"
    home = cuda_home()
    cmd = [os.environ.get("CXX", "c++"), "-O2", "-std=c++17", str(HERE / "aot_bench.cpp"), "-o", str(exe),
           f"-I{home}/include", f"-L{home}/lib64", f"-Wl,-rpath,{home}/lib64", "-lcudart", "-ldl"]
    subprocess.run(cmd, check=True)
    return exe


def main() -> int:
    from aot_loader import build

    exe = build_bench()
    rows = []
    print(f"{'case':32} {'C++ host us':>11} {'C++ us/call':>11} {'graph host us':>13} "
          f"{'graph us/call':>13} {'py host us':>10} {'ind host us':>11}")
    for case in map(Path, sys.argv[1:]):
        build(str(case))
        done = subprocess.run([str(exe), str(case)], capture_output=True, text=True)
        if done.returncode != 0:
            print(f"{case.name:32} FAILED: {done.stderr.strip()[-300:]}")
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        py, ind = float("nan"), float("nan")
        python_case = HERE / "aot_python" / "cuda" / case.name
        if (python_case / "output_code.py").exists() and (case / "graph.toml").exists():
            import torch
            from run import EagerGraph, load_module
            from wrapper_overhead import per_call_us

            graph = EagerGraph(case / "graph.toml", torch.device("cuda", 0))
            inputs = graph.inputs()
            module = load_module(python_case / "output_code.py", "cuda")
            py = per_call_us(lambda xs: module.call(list(xs)), inputs)
            compiled = torch.compile(graph.__call__)
            ind = per_call_us(lambda xs: compiled(*xs), inputs)
        print(f"{case.name:32} {r['host_us']:11.1f} {r['total_us']:11.1f} {r['graph_host_us']:13.1f} "
              f"{r['graph_total_us']:13.1f} {py:10.1f} {ind:11.1f}")
        sys.stdout.flush()
        rows.append(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
