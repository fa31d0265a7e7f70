#!/usr/bin/env python3
"""Kiln's sort of one row of N elements (a mixture of experts' (token, expert) pairs:
int64 expert ids with many ties), its rank reduction launched at other tiles than the
heuristics' choice, against `torch.sort(stable=True)` in the same process. The rank
kernel compares every pair, so its cost is compute; this says how much its tile shapes it.

    KILN_HOST=bench/gpu/ab/NAME/host python3 bench/gpu/rank_tiles.py [--n 16384] [--ids 64] [--out FILE]

Each row: XBLOCK, RBLOCK, num_warps (the first row the heuristics' own), the median time of
the whole compiled call (the ranks, the scatter to them, the gather of the values) and
whether its result is torch's.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import load_module  # noqa: E402

GRAPH = """format = "kiln-graph/1"
name = "sort"
outputs = ["v", "p"]

[[inputs]]
name = "x"
shape = [{n}]
dtype = "int64"

[[nodes]]
name = "s"
op = "sort"
args = ["x"]

[[nodes]]
name = "v"
op = "getitem"
args = ["s", 0]

[[nodes]]
name = "p"
op = "getitem"
args = ["s", 1]
"""

CONFIGS = [(64, 8, 4), (16, 64, 4), (32, 64, 4), (64, 64, 4), (64, 64, 8), (32, 128, 4), (128, 32, 8),
           (8, 256, 4), (4, 512, 4), (16, 256, 8), (128, 64, 8)]


def variant(text: str, kernel: str, config, rows: int) -> str:
    """`text` (output_code.py) with the rank kernel `kernel` launched at `config`, a program
    per tile of `rows` rows."""
    x, r, w = config
    text = re.sub(rf'("{kernel}": .*?"constants": )\{{"XBLOCK": \d+, "RBLOCK": \d+\}}(.*?"num_warps": )\d+',
                  rf'\g<1>{{"XBLOCK": {x}, "RBLOCK": {r}}}\g<2>{w}', text)
    return re.sub(rf"(KERNELS\.{kernel})\[\(\d+, 1, 1\)\](\(.*?), \d+, \d+, stream=",
                  rf"\g<1>[({-(-rows // x)}, 1, 1)]\g<2>, {x}, {r}, stream=", text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=16384)
    p.add_argument("--ids", type=int, default=64, help="the keys are random ids below this")
    p.add_argument("--out")
    a = p.parse_args()
    work = Path(tempfile.mkdtemp())
    (work / "sort.toml").write_text(GRAPH.format(n=a.n))
    subprocess.run([os.environ["KILN_HOST"], "compile", str(work / "sort.toml"), "--device", "cuda",
                    "-o", str(work / "out")], check=True, capture_output=True)
    text = (work / "out" / "output_code.py").read_text()
    kernel = re.search(r"def (kiln_red_\w+)\(", text).group(1)
    meta = re.search(rf'"{kernel}": .*?"XBLOCK": (\d+), "RBLOCK": (\d+)\}}.*?"num_warps": (\d+)', text)
    own = tuple(int(g) for g in meta.groups())
    x = torch.randint(0, a.ids, (a.n,), device="cuda")
    want = torch.sort(x, stable=True)
    lines = [f"# {torch.cuda.get_device_name()}: a sort of {a.n} int64 ids below {a.ids}",
             f"# torch.sort(stable=True): {do_bench(lambda: torch.sort(x, stable=True)) * 1000:.1f} us",
             "| XBLOCK | RBLOCK | warps | us | matches torch |", "| --- | --- | --- | --- | --- |"]
    for i, config in enumerate([own] + [c for c in CONFIGS if c != own]):
        path = work / "out" / f"variant_{i}.py"
        path.write_text(variant(text, kernel, config, a.n) if i else text)
        module = load_module(path, "cuda")
        got = module.call([x])
        ok = torch.equal(got[0], want.values) and torch.equal(got[1], want.indices)
        us = do_bench(lambda: module.call([x])) * 1000
        mark = " (the heuristics')" if i == 0 else ""
        lines.append(f"| {config[0]} | {config[1]} | {config[2]}{mark} | {us:.1f} | {ok} |")
        print(lines[-1], flush=True)
    if a.out:
        Path(a.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:2]))


if __name__ == "__main__":
    main()
