#!/usr/bin/env python3
"""Two builds of Kiln on the same graphs, in alternating rounds (for a change to
the cpu code generator or its C++ runtime, on a machine without torch).

    python3 bench/cpu/sweep.py /tmp/g                       # or any folder of graphs
    python3 bench/cpu/hosts_ab.py OLD/host NEW/host /tmp/g [--only NAME ...] [--rounds 5] [--cores 2,3]

Each host runs each graph with `host run --bench N` (random inputs, the median of N
runs after a warm-up) in its own process, pinned to --cores with one OpenMP thread
per core; the rounds alternate old and new, and each line gives the median over
the rounds of both and new/old. Graphs each build handles differently only show
what the machine's noise allows: repeat on another core pair before believing 5 %.
The geometric mean of new/old ends the table. Each host loads the plugins beside it.
"""
import argparse
import math
import os
import re
import statistics
import subprocess
import sys


def bench(host: str, graph: str, runs: int, cores: str) -> float:
    env = dict(os.environ)
    threads = len(os.sched_getaffinity(0)) if not cores else None
    cmd = [host, "--plugins", os.path.dirname(os.path.abspath(host)), "run", graph, "--device", "cpu",
           "--bench", str(runs)]
    if cores:
        cmd = ["taskset", "-c", cores] + cmd
        threads = len(expand(cores))
    env.setdefault("OMP_NUM_THREADS", str(threads))
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{host} {graph}: exit {out.returncode}: {out.stderr.strip()[-500:]}")
    m = re.search(r"median of \d+ runs ([0-9.]+) ms", out.stdout + out.stderr)
    if m is None:
        raise RuntimeError(f"{host} {graph}: no median in its output")
    return float(m.group(1))


def expand(cores: str) -> list[int]:
    out = []
    for part in cores.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("graphs", help="a folder of kiln-graph/1 files")
    ap.add_argument("--only", nargs="*", default=[], help="graphs whose names start with one of these")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=20, help="host run --bench N per round")
    ap.add_argument("--cores", default="", help="a taskset list (default: unpinned, every core)")
    args = ap.parse_args()
    names = sorted(f for f in os.listdir(args.graphs) if f.endswith(".toml"))
    if args.only:
        names = [n for n in names if any(n.startswith(p) for p in args.only)]
    if not names:
        print("no graphs", file=sys.stderr)
        return 1
    print(f"{'graph':40} {'old ms':>9} {'new ms':>9} {'new/old':>8}")
    ratios = []
    for name in names:
        graph = os.path.join(args.graphs, name)
        old, new = [], []
        try:
            for _ in range(args.rounds):
                old.append(bench(args.old, graph, args.runs, args.cores))
                new.append(bench(args.new, graph, args.runs, args.cores))
        except RuntimeError as e:
            print(f"{name[:-5]:40} failed: {e}")
            continue
        o, n = statistics.median(old), statistics.median(new)
        ratios.append(n / o)
        print(f"{name[:-5]:40} {o:9.4f} {n:9.4f} {n / o:8.3f}", flush=True)
    if ratios:
        gmean = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"new/old over {len(ratios)} graph(s): geometric mean {gmean:.3f}, "
              f"best {min(ratios):.3f}, worst {max(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
