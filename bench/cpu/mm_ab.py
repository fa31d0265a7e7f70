#!/usr/bin/env python3
"""Kiln's cpu matrix product built several ways, against torch's own, in one process on
pinned cores: for choosing the cpu plugin's tile rules and the C++ runtime's matrix-product
defaults on a machine (bench/cpu/mm_tiles.sh does the same one `host run` at a time,
which a noisy machine spreads over runs; here every variant and torch take turns).

    python3 bench/cpu/mm_ab.py --host PATH/TO/host [--cores 0,1] [--shape M,K,N ...]
                               [--variant NAME=-DKILN_MM_KC=256 ...] [--rounds 7]

Each variant is the wrapper.cpp `host compile` writes for `a @ b`, built with the
command its `// Build:` line gives plus the variant's flags (the plugin's own tiles when
a variant gives none). Every variant must match torch's result (1e-4 relative); then all
of them and torch run in `--rounds` rounds, the order rotating, and the table gives each
one's median ms and its speed as a share of torch's.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from inductor import interleaved_ms, kiln_caller, parse_cores, pin_all_threads  # noqa: E402

GRAPH = """format = "kiln-graph/1"
name = "mm"
outputs = ["y"]
[[inputs]]
name = "a"
shape = [{m}, {k}]
dtype = "float32"
[[inputs]]
name = "b"
shape = [{k}, {n}]
dtype = "float32"
[[nodes]]
name = "y"
op = "mm"
args = ["a", "b"]
"""


def build(host: Path, work: Path, m: int, k: int, n: int, name: str, flags: str, cores: int) -> Path:
    folder = work / f"mm_{m}_{k}_{n}_{name}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "graph.toml").write_text(GRAPH.format(m=m, k=k, n=n))
    env = dict(os.environ, KILN_CPU_CORES=str(cores))
    subprocess.run([str(host), "--plugins", str(host.parent), "compile", str(folder / "graph.toml"),
                    "--device", "cpu", "-o", str(folder)], check=True, env=env, capture_output=True)
    cpp = folder / "wrapper.cpp"
    line = next(l for l in cpp.read_text().splitlines() if l.startswith("// Build:"))
    cmd = shlex.split(line.split(":", 1)[1])
    cmd = [c for c in cmd if c not in ("wrapper.cpp", "kiln.so", "-o")]
    subprocess.run(cmd + shlex.split(flags) + [str(cpp), "-o", str(folder / "kiln.so")], check=True)
    return folder / "kiln.so"


def arguments(doc: str) -> argparse.ArgumentParser:
    """The options this script and mm_profile.py share: the host, the cores, the shapes and
    the variants (NAME=FLAGS)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--host", type=Path, required=True)
    p.add_argument("--cores", default="0,1")
    p.add_argument("--shape", nargs="*", default=["2048,2048,2048", "1024,4096,1024", "1000,999,1001"])
    p.add_argument("--variant", nargs="*", default=[], help="NAME=FLAGS, e.g. kc256=-DKILN_MM_KC=256")
    return p


def main() -> None:
    p = arguments(__doc__)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    import torch

    pinned = parse_cores(args.cores)
    everywhere = set(range(os.cpu_count() or 1))
    threads = len(pinned)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)
    variants = {"plugin": ""}
    for v in args.variant:
        name, _, flags = v.partition("=")
        variants[name] = flags
    work = Path(tempfile.mkdtemp(prefix="mm_ab."))
    print(f"# {threads} thread(s) on cores {args.cores}; torch {torch.__version__}", flush=True)
    for shape in args.shape:
        m, k, n = (int(s) for s in shape.split(","))
        a, b = torch.randn(m, k), torch.randn(k, n)
        want = a @ b
        fns = {"torch": lambda: torch.mm(a, b)}
        keep = []  # the results the libraries write into live as long as their callers
        for name, flags in variants.items():
            lib = build(args.host, work, m, k, n, name, flags, threads)
            out = torch.empty(m, n)
            keep.append(out)
            call = kiln_caller(lib, [a, b], [out])
            call()
            err = ((out - want).abs().max() / want.abs().max()).item()
            if err > 1e-4:
                print(f"{shape} {name}: WRONG (relative error {err:.2e})")
                continue
            fns[name] = call
        pin_all_threads(pinned)
        try:
            ms = interleaved_ms(fns, rounds=args.rounds, budget_s=0.25 * len(fns) * args.rounds)
        finally:
            pin_all_threads(everywhere)
        gflop = 2 * m * n * k / 1e9
        for name, t in ms.items():
            print(f"mm {m}x{k}x{n} {name:>12}: {t:8.2f} ms {gflop / (t * 1e-3):6.0f} GFLOP/s "
                  f"{ms['torch'] / t:5.2f}x torch's speed", flush=True)


if __name__ == "__main__":
    main()
