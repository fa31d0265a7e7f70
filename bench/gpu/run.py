#!/usr/bin/env python3
"""Run Kiln's generated output_code.py on a GPU against PyTorch eager and
torch.compile (TorchInductor), and print one table.

For every case folder CASES/<device>/<graph>/output_code.py (as written by
`bench/gpu/prepare.sh`), the graph's TOML file is read again here and executed
op by op with PyTorch's own ATen ops, an implementation independent of Kiln's:
that is the eager reference. Kiln's `call` must match it (relative error at
most 1e-5 in float32, TF32 off); then Kiln, eager and torch.compile are timed
with triton.testing.do_bench (median, ms).

The `gxu` outputs run unmodified with CUDA standing in for GXU: `torch.gxu` is
`torch.cuda`, `_gxu_getCurrentRawStream` is CUDA's, and the module's DEVICE is
the CUDA device. GXU's heuristics (grid <= 48 or a multiple of 48, one warp)
must still cover every element.

Usage: run.py CASES [--examples DIR] [--only NAME ...] [--no-compile]
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import time
import tomllib
from pathlib import Path

import torch
import triton
from triton.testing import do_bench

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int64": torch.int64,
    "int32": torch.int32,
    "bool": torch.bool,
}

# Parameters whose value is a dtype name in the graph file.
DTYPE_ATTRS = {"dtype"}


def convert(value):
    if isinstance(value, str) and value in DTYPES:
        return DTYPES[value]
    return value


class EagerGraph:
    """A kiln-graph/1 file executed with torch.ops.aten, node by node."""

    def __init__(self, path: Path, device: torch.device):
        self.doc = tomllib.loads(path.read_text())
        self.device = device

    def inputs(self, seed: int = 0) -> list[torch.Tensor]:
        gen = torch.Generator().manual_seed(seed)
        out = []
        for spec in self.doc.get("inputs", []):
            shape, dtype = tuple(spec["shape"]), DTYPES[spec["dtype"]]
            if dtype == torch.bool:
                t = torch.rand(shape, generator=gen) < 0.5
            elif not dtype.is_floating_point:
                t = torch.randint(-8, 8, shape, generator=gen, dtype=dtype)
            else:
                t = torch.randn(shape, generator=gen, dtype=dtype)
            out.append(t.to(self.device))
        return out

    def __call__(self, *inputs: torch.Tensor):
        env = {}
        for spec, t in zip(self.doc.get("inputs", []), inputs):
            env[spec["name"]] = t
        for c in self.doc.get("constants", []):
            dtype = DTYPES[c["dtype"]]
            shape = tuple(c["shape"])
            if "fill" in c:
                env[c["name"]] = torch.full(shape, c["fill"], dtype=dtype, device=self.device)
            else:
                env[c["name"]] = torch.tensor(c["values"], dtype=dtype, device=self.device).reshape(shape)

        def arg(a):
            if isinstance(a, str):
                return env[a]
            if isinstance(a, list):
                return [arg(x) for x in a]
            return a

        for node in self.doc.get("nodes", []):
            op = node["op"]
            args = [arg(a) for a in node.get("args", [])]
            attrs = {k: convert(v) for k, v in node.get("attrs", {}).items()}
            if op == "getitem":
                value = args[0][args[1]]
            elif op in ("_assert_tensor_metadata", "alias", "contiguous", "clone"):
                value = args[0].contiguous() if op == "contiguous" else args[0]
            elif op == "to":
                value = args[0].to(*args[1:], **attrs)
            else:
                value = getattr(torch.ops.aten, op)(*args, **attrs)
            env[node["name"]] = value
        return tuple(env[name] for name in self.doc["outputs"])


def load_module(path: Path, device_name: str):
    if device_name == "gxu":
        # CUDA stands in for GXU: the generated code runs unmodified.
        torch.gxu = torch.cuda
        torch._C._gxu_getCurrentRawStream = torch._C._cuda_getCurrentRawStream
    spec = importlib.util.spec_from_file_location(f"kiln_{device_name}_{path.parent.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.DEVICE = torch.device("cuda", 0)
    return module


def rel_error(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.double(), want.double()
    scale = want.abs().max().item()
    err = (got - want).abs().max().item()
    return err / scale if scale > 0 else err


def copy_bandwidth() -> float:
    x = torch.empty(1 << 28, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    ms = do_bench(lambda: y.copy_(x))
    return 2 * x.numel() * 4 / (ms * 1e-3) / 1e12


def min_traffic_bytes(inputs, outputs) -> int:
    return sum(t.numel() * t.element_size() for t in list(inputs) + list(outputs))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", type=Path)
    parser.add_argument("--examples", type=Path, default=Path("examples"))
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    args = parser.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    device = torch.device("cuda", 0)
    print(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}, triton {triton.__version__}")
    bw = copy_bandwidth()
    print(f"# copy bandwidth {bw:.3f} TB/s")
    header = f"{'device':6} {'graph':16} {'kernels':>7} {'rel err':>9} {'ok':>3} {'kiln ms':>9} {'eager ms':>9} {'ind ms':>9} {'kiln/ind':>8} {'%copy':>6} {'ind cold s':>10}"
    print(header)
    failures = 0
    for case in sorted(args.cases.glob("*/*/output_code.py")):
        device_name, graph_name = case.parent.parent.name, case.parent.name
        if args.only and graph_name not in args.only:
            continue
        graph = EagerGraph(args.examples / f"{graph_name}.toml", device)
        try:
            module = load_module(case, device_name)
            inputs = graph.inputs()
            want = graph(*inputs)
            got = module.call(list(inputs))
            torch.cuda.synchronize()
            err = max(rel_error(g, w) for g, w in zip(got, want))
            ok = err <= args.tolerance and all(g.shape == w.shape for g, w in zip(got, want))
        except Exception as error:  # report and go on to the next case
            print(f"{device_name:6} {graph_name:16} FAILED: {type(error).__name__}: {error}")
            failures += 1
            continue
        failures += 0 if ok else 1
        kernels = len(getattr(module, "KERNEL_META", {}))
        kiln_ms = do_bench(lambda: module.call(list(inputs)))
        eager_ms = do_bench(lambda: graph(*inputs))
        ind_ms, cold = float("nan"), float("nan")
        if not args.no_compile and device_name == "cuda":
            torch._dynamo.reset()
            compiled = torch.compile(graph.__call__)
            t0 = time.perf_counter()
            compiled(*inputs)
            torch.cuda.synchronize()
            cold = time.perf_counter() - t0
            ind_ms = do_bench(lambda: compiled(*inputs))
        pct = min_traffic_bytes(inputs, want) / (kiln_ms * 1e-3) / 1e12 / bw * 100
        ratio = kiln_ms / ind_ms if not math.isnan(ind_ms) else float("nan")
        print(
            f"{device_name:6} {graph_name:16} {kernels:7d} {err:9.2e} {'yes' if ok else 'NO':>3} "
            f"{kiln_ms:9.4f} {eager_ms:9.4f} {ind_ms:9.4f} {ratio:8.3f} {pct:6.1f} {cold:10.2f}"
        )
        sys.stdout.flush()
    print(f"# {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
