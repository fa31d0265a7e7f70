#!/usr/bin/env python3
"""The exports with dynamic shapes of tests/fixtures/dynamic on the GPU machine, for cuda and
gxu (CUDA standing in for GXU), checked against PyTorch's outputs recorded in cases.json
(float32, TF32 off).

- `--mode specialize` (the default): each archive compiled by `host compile --specialize` at
  each size of cases.json, and run at that size.
- `--mode dynamic`: each archive compiled once, by `host compile --dynamic`, and that one
  output_code.py run at every size of cases.json, then at sizes across the range against
  the exported program itself. A compile Kiln refuses is reported with its message.
  - `--wrapper cpp` (cuda): the C++ wrapper instead (`wrapper.cpp`'s `kiln_call_shaped`,
    built and called through bench/gpu/aot_loader.py), with `--cuda-graph` too when given;
    then a size past the range, which must be refused naming it.

The first call's time at each size and the Triton compiles it made (new binaries in the run's
own caches: $KILN_CACHE_DIR/triton, where Kiln's runtime keeps them, and $TRITON_CACHE_DIR)
show what a new size costs once others ran.

    python3 bench/gpu/dynamic_cases.py HOST [--devices cuda,gxu] [--mode dynamic]
    python3 bench/gpu/dynamic_cases.py HOST --devices cuda --mode dynamic --wrapper cpp [--cuda-graph]
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
from aot_loader import AotModule  # noqa: E402
from run import load_module, rel_error  # noqa: E402

FIXTURES = HERE.parent.parent / "tests/fixtures/dynamic"
DTYPES = {"float32": torch.float32, "int64": torch.int64}


def tensor(path: Path, dtype, shape) -> torch.Tensor:
    return torch.frombuffer(bytearray(path.read_bytes()), dtype=dtype).reshape(shape).to("cuda")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("host")
    p.add_argument("--devices", default="cuda,gxu")
    p.add_argument("--mode", choices=["specialize", "dynamic"], default="specialize")
    p.add_argument("--wrapper", choices=["python", "cpp"], default="python")
    p.add_argument("--cuda-graph", action="store_true", help="with --wrapper cpp: capture CUDA graphs")
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
    if a.mode == "dynamic":
        failed = dynamic(a, cases, out_root, compiled)
        print(f"# {failed} failed")
        sys.exit(1 if failed else 0)
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


def inputs_of(archive: str, size: dict) -> list:
    shape = (size["batch"], size["seq"], 32) if archive.startswith("mlp") else (size["batch"], size["seq"])
    dtype = DTYPES["float32" if archive.startswith("mlp") else "int64"]
    return [tensor(FIXTURES / f, dtype, shape) for f in size["inputs"]]


def random_inputs(archive: str, b: int, seq: int, g: torch.Generator) -> list:
    if archive.startswith("mlp"):
        return [torch.randn(b, seq, 32, generator=g).cuda()]
    ids = torch.randint(0, 32, (b, seq), generator=g).cuda()
    if archive.startswith("gpt2"):
        return [ids]
    mask = torch.ones(b, seq, dtype=torch.int64, device="cuda")
    mask[0, seq - 1:] = 0
    return [ids, mask]


def dynamic(a, cases: dict, out_root: Path, compiled) -> int:
    """One `--dynamic` compile per archive and device, run at every size."""
    failed = 0
    g = torch.Generator().manual_seed(0)
    for archive, case in cases.items():
        symbols = list(dict.fromkeys(case["dims"].values()))
        (lo_b, hi_b), (lo_s, hi_s) = [case["ranges"][s] for s in symbols]
        extra = [(lo_b, lo_s), (hi_b, hi_s), (3, 17), (hi_b // 2 + 1, hi_s - 1)]
        ep = None
        for device in a.devices.split(","):
            out = out_root / f"{archive}-{device}-dynamic"
            cmd = [a.host, "compile", str(FIXTURES / f"{archive}.pt2"), "--device", device, "-o", str(out),
                   "--dynamic"]
            if a.wrapper == "cpp":
                cmd += ["--wrapper", "cpp"] + (["--cuda-graph"] if a.cuda_graph else [])
            start = time.perf_counter()
            done = subprocess.run(cmd, capture_output=True, text=True)
            host_s = time.perf_counter() - start
            if done.returncode:
                reason = " ".join(done.stderr.split())[-240:]
                print(f"| {archive} | {device} | all | refused: {reason} | | | refused |", flush=True)
                continue
            module = AotModule(str(out)) if a.wrapper == "cpp" else load_module(out / "output_code.py", device)
            runs = [(s["batch"], s["seq"], inputs_of(archive, s),
                     tensor(FIXTURES / s["expected"], torch.float32, s["shape"])) for s in case["sizes"]]
            if ep is None:
                # The reference runs on the cpu: an export's constants stay there.
                ep = torch.export.load(str(FIXTURES / f"{archive}.pt2")).module()
            for b, seq in extra:
                xs = random_inputs(archive, b, seq, g)
                names = ["x"] if archive.startswith("mlp") else ["input_ids", "attention_mask"][:len(xs)]
                with torch.no_grad():
                    want = ep(**dict(zip(names, (x.cpu() for x in xs)))).cuda()
                runs.append((b, seq, xs, want))
            for i, (b, seq, xs, want) in enumerate(runs):
                before, start = compiled(), time.perf_counter()
                got = module.call(list(xs))[0]
                torch.cuda.synchronize()
                first_s, compiles = time.perf_counter() - start, compiled() - before
                err = rel_error(got, want)
                ok = err <= 1e-4 and (i == 0 or compiles == 0)
                failed += not ok
                print(f"| {archive} | {device} | {b} x {seq} | {err:.1e} | {first_s:.3f} | {compiles} | "
                      f"{'yes' if ok else 'NO'} |", flush=True)
            print(f"# {archive} {device}: one host compile ({host_s:.2f} s with process start) for "
                  f"{len(runs)} sizes", flush=True)
            if a.wrapper == "cpp":
                failed += not refused_past_range(module, archive, hi_b, hi_s + 1, g)
    return failed


def refused_past_range(module, archive: str, b: int, seq: int, g: torch.Generator) -> bool:
    """Whether a call of `b x seq`, a length past the range, is refused naming the range."""
    try:
        module.call(random_inputs(archive, b, seq, g))
    except RuntimeError as e:
        ok = "outside the range" in str(e)
        print(f"# {archive} at {b} x {seq}, past the range: refused ({'ok' if ok else 'NO'}): {e}", flush=True)
        return ok
    print(f"# {archive} at {b} x {seq}, past the range: NOT refused", flush=True)
    return False


if __name__ == "__main__":
    main()
