#!/usr/bin/env python3
"""Kiln's sort (`sort_runs`, then `merge_runs` for a row longer than one run) against
`torch.sort(stable=True)` in the same process, over lengths and dtypes: a mixture of
experts' (token, expert) ids (int64, many ties), float32 and bfloat16 values, and many
short rows (a router's experts).

    KILN_HOST=bench/gpu/ab/NAME/host python3 bench/gpu/sort.py [--out FILE]

Each row: the shape sorted, the dtype, whether Kiln's values and positions are torch's,
the median microseconds of a call of each replayed as a CUDA graph (the device's time:
a short sort's call is bound by the host's launches, which a model's other work hides),
their ratio, and the median microseconds of a whole call of each launched directly.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parent))
from precision_child import capture  # noqa: E402
from run import load_module  # noqa: E402

GRAPH = """format = "kiln-graph/1"
name = "sort"
outputs = ["v", "p"]

[[inputs]]
name = "x"
shape = {shape}
dtype = "{dtype}"

[[nodes]]
name = "s"
op = "sort"
args = ["x", -1, {descending}]

[[nodes]]
name = "v"
op = "getitem"
args = ["s", 0]

[[nodes]]
name = "p"
op = "getitem"
args = ["s", 1]
"""

# (shape, dtype, descending): ids of prefills of 512 to 4096 tokens by 8 experts, value
# rows, a router's 64 or 128 experts over 2048 tokens.
CASES = [([4096], "int64", False), ([16384], "int64", False), ([32768], "int64", False),
         ([2, 50000], "float32", True), ([8, 4096], "bfloat16", True),
         ([2048, 64], "float32", True), ([2048, 128], "float32", True)]
TORCH = {"int64": torch.int64, "float32": torch.float32, "bfloat16": torch.bfloat16}


def one(work: Path, shape, dtype: str, descending: bool) -> str:
    folder = work / f"{dtype}_{'x'.join(map(str, shape))}"
    folder.mkdir()
    (folder / "graph.toml").write_text(GRAPH.format(shape=shape, dtype=dtype, descending=str(descending).lower()))
    subprocess.run([os.environ["KILN_HOST"], "compile", str(folder / "graph.toml"), "--device", "cuda",
                    "-o", str(folder / "out")], check=True, capture_output=True)
    module = load_module(folder / "out" / "output_code.py", "cuda")
    if dtype == "int64":
        x = torch.randint(0, 64, shape, device="cuda")
    else:
        x = torch.randn(shape, device="cuda").mul(8).round().to(TORCH[dtype])
    want = torch.sort(x, descending=descending, stable=True)
    got = module.call([x])
    ok = torch.equal(got[0], want.values) and torch.equal(got[1], want.indices)
    kiln = do_bench(lambda: module.call([x])) * 1000
    ref = do_bench(lambda: torch.sort(x, descending=descending, stable=True)) * 1000
    kiln_dev = device_us(lambda: module.call([x]))
    ref_dev = device_us(lambda: torch.sort(x, descending=descending, stable=True))
    return (f"| {shape} | {dtype} | {ok} | {kiln_dev:.1f} | {ref_dev:.1f} | {kiln_dev / ref_dev:.2f} | "
            f"{kiln:.1f} | {ref:.1f} |")


def device_us(call) -> float:
    """The median microseconds of `call()` captured in a CUDA graph and replayed."""
    graph, _ = capture(call)
    return do_bench(graph.replay) * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out")
    a = p.parse_args()
    work = Path(tempfile.mkdtemp())
    lines = [f"# {torch.cuda.get_device_name()}, torch {torch.__version__}",
             "| shape | dtype | matches torch | Kiln graph us | torch.sort graph us | Kiln / torch | "
             "Kiln call us | torch.sort call us |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    print("\n".join(lines), flush=True)
    for shape, dtype, descending in CASES:
        try:
            line = one(work, shape, dtype, descending)
        except Exception as error:  # noqa: BLE001 (a failure is its row of the table)
            line = f"| {shape} | {dtype} | {type(error).__name__}: {str(error)[:300]} |"
        print(line, flush=True)
        lines.append(line)
        if a.out:
            Path(a.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
