#!/usr/bin/env python3
"""The cpu device's first call from a cold cache against Inductor-CPU's, on the same cores.

For each zoo archive named (default: the tiny BERT and Llama of tests/fixtures/models), each
in fresh processes pinned to CORES (`taskset`), with empty caches, ROUNDS times:

- Kiln: `host run ARCHIVE --device cpu --inputs ...` with a new, empty KILN_CACHE_DIR: the
  whole command (reading the archive, compiling, building the C++ library, running it).
- Inductor: a fresh Python that has imported torch (not counted) loads the same archive with
  torch.export.load, then `torch.compile` of its module and the first call on the same inputs,
  with a new, empty TORCHINDUCTOR_CACHE_DIR; counted from torch.compile to the result.

Needs a release host with its cpu plugin (HOST, its plugins beside it in plugins/ as
bench/gpu/ab_stage.sh stages them, or target/release) and, for Inductor, torch.

Usage: first_call.py --host HOST [--cores 0,1] [--rounds 3] [NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "fixtures" / "models"

INDUCTOR = r"""
import json, sys, time
import numpy as np
import torch
archive, meta = sys.argv[1], json.load(open(sys.argv[2]))
inputs = [torch.from_numpy(np.fromfile(sys.argv[3] + "/" + i["file"], dtype=i["dtype"]).reshape(i["shape"]))
          for i in meta["inputs"]]
module = torch.export.load(archive).module()
start = time.perf_counter()
compiled = torch.compile(module)
with torch.no_grad():
    compiled(*inputs)
print(json.dumps({"first_s": time.perf_counter() - start}))
"""


def kiln(host: Path, name: str, cores: str) -> float:
    meta = json.loads((MODELS / f"{name}.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        inputs = Path(tmp) / "inputs"
        inputs.mkdir()
        for i, entry in enumerate(meta["inputs"]):
            (inputs / f"input{i}.bin").write_bytes((MODELS / entry["file"]).read_bytes())
        env = dict(os.environ, KILN_CACHE_DIR=str(Path(tmp) / "cache"))
        cmd = ["taskset", "-c", cores, str(host)]
        plugins = host.parent / "plugins"
        if plugins.is_dir():
            cmd += ["--plugins", str(plugins)]
        cmd += ["run", str(MODELS / f"{name}.pt2"), "--device", "cpu", "--inputs", str(inputs),
                "--out", str(Path(tmp) / "out")]
        start = time.perf_counter()
        run = subprocess.run(cmd, env=env, capture_output=True, text=True)
        took = time.perf_counter() - start
        if run.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{run.stderr}")
        return took


def inductor(name: str, cores: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(Path(tmp) / "inductor"),
                   TRITON_CACHE_DIR=str(Path(tmp) / "triton"))
        cmd = ["taskset", "-c", cores, sys.executable, "-c", INDUCTOR, str(MODELS / f"{name}.pt2"),
               str(MODELS / f"{name}.json"), str(MODELS)]
        run = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"Inductor on {name} failed:\n{run.stderr[-3000:]}")
        return json.loads(run.stdout.strip().splitlines()[-1])["first_s"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", default=["bert", "llama"])
    p.add_argument("--host", type=Path, default=ROOT / "target" / "release" / "host")
    p.add_argument("--cores", default="0,1")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-inductor", action="store_true")
    a = p.parse_args()
    print(f"# cold first call on cores {a.cores}, {a.rounds} round(s); seconds")
    for name in a.names:
        k = [kiln(a.host, name, a.cores) for _ in range(a.rounds)]
        row = f"{name:8} kiln {' '.join(f'{t:6.2f}' for t in k)}"
        if not a.no_inductor:
            i = [inductor(name, a.cores) for _ in range(a.rounds)]
            row += f"   inductor {' '.join(f'{t:6.2f}' for t in i)}   kiln/inductor (medians) " \
                   f"{sorted(k)[len(k) // 2] / sorted(i)[len(i) // 2]:.2f}"
        print(row, flush=True)


if __name__ == "__main__":
    main()
