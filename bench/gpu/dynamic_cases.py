#!/usr/bin/env python3
"""The exports with dynamic shapes of tests/fixtures/dynamic on the GPU machine: each archive,
compiled by `host compile --specialize` at each size of cases.json for cuda and gxu (CUDA
standing in for GXU), run through its output_code.py on that size's inputs and checked against
PyTorch's outputs recorded there (float32, TF32 off). The first call's time and the Triton
compiles it made (new binaries in the run's own caches: $KILN_CACHE_DIR/triton, where Kiln's
runtime keeps them, and $TRITON_CACHE_DIR) show what a new size costs once others were
compiled.

    python3 bench/gpu/dynamic_cases.py HOST [--devices cuda,gxu]
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

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import load_module, rel_error  # noqa: E402

FIXTURES = HERE.parent.parent / "tests/fixtures/dynamic"
DTYPES = {"float32": torch.float32, "int64": torch.int64}


def tensor(path: Path, dtype, shape) -> torch.Tensor:
    return torch.frombuffer(bytearray(path.read_bytes()), dtype=dtype).reshape(shape).to("cuda")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("host")
    p.add_argument("--devices", default="cuda,gxu")
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    cases = json.loads((FIXTURES / "cases.json").read_text())
    print(f"# bench/gpu/dynamic_cases.py on {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    print("| archive | device | batch x sequence | rel error vs PyTorch | first call s | Triton compiles | ok |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    failed = 0
    out_root = Path(tempfile.mkdtemp(prefix="kiln-dynamic-"))
    caches = [Path(os.environ.setdefault("KILN_CACHE_DIR", str(out_root / "kiln"))) / "triton",
              Path(os.environ.setdefault("TRITON_CACHE_DIR", str(out_root / "triton")))]

    def compiled() -> int:
        return sum(sum(1 for _ in c.rglob("*.cubin")) for c in caches if c.exists())
    for archive, case in cases.items():
        dims = case["dims"]
        first = next(iter(dims)).split(":")[0]
        for device in a.devices.split(","):
            for size in case["sizes"]:
                b, seq = size["batch"], size["seq"]
                out = out_root / f"{archive}-{device}-{b}x{seq}"
                cmd = [a.host, "compile", str(FIXTURES / f"{archive}.pt2"), "--device", device, "-o", str(out),
                       "--specialize", f"{dims[first + ':0']}={b}", "--specialize", f"{dims[first + ':1']}={seq}"]
                done = subprocess.run(cmd, capture_output=True, text=True)
                if done.returncode:
                    failed += 1
                    print(f"| {archive} | {device} | {b} x {seq} | compile failed: {done.stderr.strip()[-200:]} | | | NO |")
                    continue
                module = load_module(out / "output_code.py", device)
                inputs = [tensor(FIXTURES / f, DTYPES["float32" if archive.startswith("mlp") else "int64"], (b, seq, 32)
                                 if archive.startswith("mlp") else (b, seq)) for f in size["inputs"]]
                want = tensor(FIXTURES / size["expected"], torch.float32, size["shape"])
                before, start = compiled(), time.perf_counter()
                got = module.call(list(inputs))[0]
                torch.cuda.synchronize()
                first_s, compiles = time.perf_counter() - start, compiled() - before
                err = rel_error(got, want)
                ok = err <= 1e-4
                failed += not ok
                print(f"| {archive} | {device} | {b} x {seq} | {err:.1e} | {first_s:.2f} | {compiles} | "
                      f"{'yes' if ok else 'NO'} |", flush=True)
    print(f"# {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
