#!/usr/bin/env python3
"""Run Kiln's generated output_code.py on a GPU against PyTorch eager and
torch.compile (TorchInductor), and print one table.

For every case folder CASES/<device>/<graph>/output_code.py (as written by
`bench/gpu/prepare.sh`), the graph's TOML file (the case's own graph.toml, else
EXAMPLES/<graph>.toml) is read again here and executed
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
import subprocess
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

# Ops that make a tensor from nothing: eager needs to be told the device.
FACTORIES = {"arange", "full", "zeros", "ones", "empty", "scalar_tensor"}


def convert(value):
    if isinstance(value, str) and value in DTYPES:
        return DTYPES[value]
    return value


class EagerGraph:
    """A kiln-graph/1 file executed with torch.ops.aten, node by node."""

    def __init__(self, path: Path, device: torch.device, doc: dict | None = None):
        self.doc = doc if doc is not None else tomllib.loads(path.read_text())
        self.device = device
        # Every value of the last call, by name (kept only when `keep` is set).
        self.keep = False
        self.values: dict = {}
        # Compute every float in float64 (casts and dtype arguments to a float dtype
        # become float64): the graph's exact result, to judge rounding against.
        self.exact = False

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
            if self.exact and dtype.is_floating_point:
                dtype = torch.float64
            shape = tuple(c["shape"])
            if "fill" in c:
                env[c["name"]] = torch.full(shape, c["fill"], dtype=dtype, device=self.device)
            else:
                env[c["name"]] = torch.tensor(c["values"], dtype=dtype, device=self.device).reshape(shape)

        for node in self.doc.get("nodes", []):
            op = node["op"]
            args = [resolve(env, a) for a in node.get("args", [])]
            attrs = {k: convert(v) for k, v in node.get("attrs", {}).items()}
            if self.exact:
                attrs = {k: torch.float64 if isinstance(v, torch.dtype) and v.is_floating_point else v
                         for k, v in attrs.items()}
            if op in FACTORIES:
                attrs.setdefault("device", self.device)
            if op == "index":
                # `[]` in an index list spells None (a dim taken whole).
                args[1] = [None if isinstance(i, list) and not i else i for i in args[1]]
            if op == "getitem":
                value = args[0][args[1]]
            elif op in ("_assert_tensor_metadata", "alias", "contiguous", "clone"):
                value = args[0].contiguous() if op == "contiguous" else args[0]
            elif op == "to":
                value = args[0].to(*args[1:], **attrs)
            else:
                value = call_aten(op, args, attrs, self.device)
            env[node["name"]] = value
        outputs = tuple(env[name] for name in self.doc["outputs"])
        self.values = dict(env) if self.keep else {}
        env.clear()
        return outputs


def call_aten(op: str, args: list, attrs: dict, device: torch.device):
    """torch.ops.aten.OP(*args, **attrs). Kiln's graph format lets a number stand
    for any tensor operand (`maximum(x, 0.5)`), where some ATen schemas take only
    a Tensor: those get the number as a 0-d tensor, which promotes as a number does."""
    fn = getattr(torch.ops.aten, op)
    if op == "view":
        # Kiln's `view` is PyTorch's where PyTorch allows it; where the input's layout
        # (which PyTorch carries through elementwise ops) does not, Kiln reshapes.
        try:
            return fn(*args, **attrs)
        except RuntimeError as e:
            if "view size is not compatible" not in str(e):
                raise
            return torch.ops.aten.reshape(*args, **attrs)
    if op == "scaled_dot_product_attention" and len(args) > 3 and isinstance(args[3], torch.Tensor):
        # PyTorch's fused CUDA kernels refuse a mask broadcast along the keys ("last
        # dimension must be contiguous"): the same mask, materialised.
        q, k, mask = args[0], args[1], args[3]
        scores = torch.broadcast_shapes(tuple(q.shape[:-1]) + (k.shape[-2],), tuple(mask.shape))
        args = list(args)
        args[3] = mask.expand(scores).contiguous()
    try:
        return fn(*args, **attrs)
    except RuntimeError as e:
        if "failed to match any schema" not in str(e) or not any(is_number(a) for a in args[1:]):
            raise
    # The number as a 0-d tensor of the dtype it promotes to with the tensor operand
    # (a 0-d tensor of its own default dtype would promote further).
    first = args[0]
    wrapped = [a if i == 0 or not is_number(a) else
               torch.tensor(a, device=device, dtype=torch.result_type(first, a)) for i, a in enumerate(args)]
    return fn(*wrapped, **attrs)


def is_number(a) -> bool:
    return isinstance(a, (bool, int, float))


def resolve(env: dict, a):
    """An operand: a tensor by name, a list of operands, or a number. A plain
    function, not a closure over `env`: a self-referencing closure would make a
    reference cycle that keeps every intermediate alive until the next GC."""
    if isinstance(a, str):
        # A string that names no tensor is a string argument (`pad`'s mode); Kiln
        # validated the graph, so it is not a dangling name.
        return env.get(a, a)
    if isinstance(a, list):
        return [resolve(env, x) for x in a]
    return a


class ExportedModel:
    """A torch.export archive with its input and PyTorch's expected output (the
    fixtures' layout): the archive's own module is the eager reference."""

    def __init__(self, case_dir: Path, device: torch.device):
        import json

        self.meta = json.loads((case_dir / "model.json").read_text())
        self.module = torch.export.load(str(case_dir / "model.pt2")).module()
        # Whole models export device-specific nodes (`arange(device=cpu)`, metadata
        # asserts): such a module runs where it was exported. Models traced on the CPU
        # run there; those traced on CUDA (tools/model_zoo.py --realistic) on the GPU.
        self.on_cpu = any(
            getattr(n.kwargs.get("device"), "type", None) == "cpu" for n in self.module.graph.nodes
        )
        if not self.on_cpu:
            self.module = self.module.to(device)
        self.case_dir = case_dir
        self.device = device

    def inputs(self, seed: int = 0) -> list[torch.Tensor]:
        out = []
        gen = torch.Generator().manual_seed(seed)
        for i, spec in enumerate(self.meta["inputs"]):
            dtype = getattr(torch, spec.get("dtype", "float32"))
            path = self.case_dir / f"input{i}.bin"
            if path.exists():
                raw = path.read_bytes()
                t = torch.frombuffer(bytearray(raw), dtype=dtype).reshape(spec["shape"])
            elif dtype.is_floating_point:
                # A realistic-size archive ships no inputs: draw them.
                t = torch.randn(spec["shape"], generator=gen, dtype=dtype)
            else:
                t = torch.randint(0, spec.get("high", 2), spec["shape"], generator=gen, dtype=dtype)
            out.append(t.to(self.device))
        return out

    def expected(self) -> list[torch.Tensor]:
        out = []
        for i, spec in enumerate(self.meta["outputs"]):
            raw = (self.case_dir / f"expected{i}.bin").read_bytes()
            t = torch.frombuffer(bytearray(raw), dtype=torch.float32).reshape(spec["shape"])
            out.append(t.to(self.device))
        return out

    def __call__(self, *inputs: torch.Tensor):
        with torch.no_grad():
            if self.on_cpu:
                out = self.module(*(t.cpu() for t in inputs))
                out = [o.to(self.device) for o in (out if isinstance(out, (tuple, list)) else (out,))]
            else:
                out = self.module(*inputs)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def load_module(path: Path, device_name: str):
    if device_name == "gxu" and getattr(torch, "gxu", None) is not torch.cuda:
        # CUDA stands in for GXU: the generated code runs unmodified. GXU is a
        # PrivateUse1 device, so `torch.device("gxu", 0)` parses once renamed.
        torch.utils.rename_privateuse1_backend("gxu")
        torch.gxu = torch.cuda
        torch._C._gxu_getCurrentRawStream = torch._C._cuda_getCurrentRawStream
    spec = importlib.util.spec_from_file_location(f"kiln_{device_name}_{path.parent.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.DEVICE = torch.device("cuda", 0)
    return module


def rel_error(got: torch.Tensor, want: torch.Tensor, scale: float = 0.0) -> float:
    """Largest |got - want| over the largest finite |want| (or `scale`, when larger:
    the size of the operands the output was computed from). NaN matches NaN and an
    infinity itself (graphs that make them on purpose); anywhere else they are an
    infinite error."""
    got, want = got.double(), want.double()
    if want.numel() == 0:
        return 0.0
    same = (got == want) | (torch.isnan(got) & torch.isnan(want))
    diff = torch.where(same, torch.zeros_like(got), (got - want).abs())
    err = torch.nan_to_num(diff, nan=math.inf).max().item()
    finite = want[torch.isfinite(want)]
    scale = max(scale, finite.abs().max().item() if finite.numel() else 0.0)
    return err / scale if err > 0 and scale > 0 else err


def copy_bandwidth() -> float:
    x = torch.empty(1 << 28, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    ms = do_bench(lambda: y.copy_(x))
    return 2 * x.numel() * 4 / (ms * 1e-3) / 1e12


def min_traffic_bytes(inputs, outputs) -> int:
    return sum(t.numel() * t.element_size() for t in list(inputs) + list(outputs))


# --cuda-graph: time Kiln and Inductor as CUDA graphs (set by main).
CUDA_GRAPH = False


def run_case(case: Path, examples: Path, tolerance: float, compile_ref: bool, bw: float,
             warm_only: bool = False) -> tuple[str, bool]:
    """One case, in this (child) process: check, then time. Returns a table row."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    device_name, graph_name = case.parent.parent.name, case.parent.name
    if (case.parent / "model.pt2").exists():
        graph = ExportedModel(case.parent, torch.device("cuda", 0))
    elif (case.parent / "graph.toml").exists():
        graph = EagerGraph(case.parent / "graph.toml", torch.device("cuda", 0))
    else:
        graph = EagerGraph(examples / f"{graph_name}.toml", torch.device("cuda", 0))
    module = load_module(case, device_name)
    inputs = graph.inputs()
    want = graph(*inputs)
    got = module.call(list(inputs))
    torch.cuda.synchronize()
    # float32 within `tolerance`; half-precision outputs within their own precision.
    limits = [tolerance if w.dtype not in (torch.float16, torch.bfloat16) else 1e-2 for w in want]
    errs = [rel_error(g, w) for g, w in zip(got, want)]
    err = max(errs)
    shapes_ok = all(g.shape == w.shape and g.dtype == w.dtype for g, w in zip(got, want))
    ok = shapes_ok and all(e <= l for e, l in zip(errs, limits))
    if shapes_ok and not ok:
        # An ill-conditioned graph (softmax of large scores) amplifies float32
        # rounding differently in eager and in Kiln. Judge both against float64:
        # Kiln passes when it is no less accurate than eager itself.
        exact = graph(*[t.double() if t.is_floating_point() else t for t in inputs])
        kiln64 = max(rel_error(g, e) for g, e in zip(got, exact))
        eager64 = max(rel_error(w, e) for w, e in zip(want, exact))
        print(f"vs float64: kiln {kiln64:.2e}, eager {eager64:.2e}", file=sys.stderr)
        ok = kiln64 <= 2 * eager64 + tolerance
        err = kiln64
    if isinstance(graph, ExportedModel) and graph.meta["outputs"]:
        # Also against PyTorch's float64 result stored with the archive.
        stored = max(rel_error(g, w) for g, w in zip(got, graph.expected()))
        print(f"vs the archive's expected output: {stored:.2e}", file=sys.stderr)
        ok = ok and stored <= 1e-4
    del got
    if warm_only:
        # Fill Triton's and Inductor's on-disk caches; the timed pass comes later.
        if compile_ref and device_name == "cuda":
            torch.compile(graph.__call__)(*inputs)
            torch.cuda.synchronize()
        return f"{device_name} {graph_name} warm", ok
    trace = lambda what: print(f"{what}: {torch.cuda.memory_allocated() / 2**30:.2f} GiB live, "
                               f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB peak", file=sys.stderr)
    trace("checked")
    kernels = len(getattr(module, "KERNEL_META", {}))
    if CUDA_GRAPH:
        # GPU time alone: the call captured once and replayed (no host work per call).
        graph_call = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph_call):
            module.call(list(inputs))
        kiln_ms = do_bench(graph_call.replay)
        del graph_call
    else:
        kiln_ms = do_bench(lambda: module.call(list(inputs)))
    trace("kiln timed")
    eager_ms = do_bench(lambda: graph(*inputs))
    trace("eager timed")
    ind_ms, cold = float("nan"), float("nan")
    if compile_ref and device_name == "cuda":
        compiled = torch.compile(graph.__call__, mode="reduce-overhead" if CUDA_GRAPH else None)
        t0 = time.perf_counter()
        compiled(*inputs)
        torch.cuda.synchronize()
        cold = time.perf_counter() - t0
        for _ in range(3 if CUDA_GRAPH else 0):
            compiled(*inputs)  # reduce-overhead records its CUDA graph on a later call
        ind_ms = do_bench(lambda: compiled(*inputs))
    traffic = min_traffic_bytes(inputs, want)
    pct = traffic / (kiln_ms * 1e-3) / 1e12 / bw * 100
    ind_pct = traffic / (ind_ms * 1e-3) / 1e12 / bw * 100 if not math.isnan(ind_ms) else float("nan")
    ratio = kiln_ms / ind_ms if not math.isnan(ind_ms) else float("nan")
    peak = torch.cuda.max_memory_allocated() / 2**30
    row = (
        f"{device_name:6} {graph_name:16} {kernels:7d} {err:9.2e} {'yes' if ok else 'NO':>3} "
        f"{kiln_ms:9.4f} {eager_ms:9.4f} {ind_ms:9.4f} {ratio:8.3f} {pct:6.1f} {ind_pct:6.1f} {cold:10.2f} {peak:7.2f}"
    )
    return row, ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", type=Path)
    parser.add_argument("--examples", type=Path, default=Path("examples"))
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    parser.add_argument("--jobs", type=int, default=1,
                        help="warm the kernel caches with this many cases at once before the timed, "
                             "one-at-a-time pass (the 'ind cold s' column then times a warm cache)")
    parser.add_argument("--in-process", action="store_true",
                        help="run every case in this process (faster; a case that crashes ends the run)")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="time GPU work alone: Kiln's call captured into a CUDA graph and replayed, "
                             "Inductor as torch.compile(mode='reduce-overhead') (launch-bound graphs and "
                             "whole models, whose host time otherwise dominates and varies)")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--warm", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bandwidth", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    global CUDA_GRAPH
    CUDA_GRAPH = args.cuda_graph

    if args.one is not None:
        # Child: one case, one line on stdout.
        row, ok = run_case(args.one, args.examples, args.tolerance, not args.no_compile, args.bandwidth,
                           args.warm)
        print(row)
        return 0 if ok else 1

    print(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}, triton {triton.__version__}")
    bw = copy_bandwidth()
    where = "all cases in this process" if args.in_process else "every case runs in its own process"
    if args.cuda_graph:
        where += "; Kiln and Inductor timed as CUDA graphs (GPU time alone)"
    print(f"# copy bandwidth {bw:.3f} TB/s; {where}")
    print(
        f"{'device':6} {'graph':16} {'kernels':>7} {'rel err':>9} {'ok':>3} {'kiln ms':>9} {'eager ms':>9} "
        f"{'ind ms':>9} {'kiln/ind':>8} {'%copy':>6} {'ind %':>6} {'ind cold s':>10} {'peak GiB':>7}"
    )
    sys.stdout.flush()
    failures = 0
    rows_seen = []
    cases = [c for c in sorted(args.cases.glob("*/*/output_code.py"))
             if not args.only or c.parent.name in args.only]
    if args.jobs > 1:
        from concurrent.futures import ThreadPoolExecutor
        def warm(case: Path) -> None:
            cmd = [sys.executable, __file__, str(args.cases), "--examples", str(args.examples), "--one",
                   str(case), "--warm"] + (["--no-compile"] if args.no_compile else [])
            subprocess.run(cmd, capture_output=True, text=True)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(warm, cases))
        print(f"# caches warmed in {time.perf_counter() - t0:.0f} s by {args.jobs} processes")
    for case in cases:
        if args.in_process:
            torch._dynamo.reset()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            try:
                row, ok = run_case(case, args.examples, args.tolerance, not args.no_compile, bw)
            except Exception as e:  # noqa: BLE001 (reported as the case's failure)
                row, ok = f"{case.parent.parent.name:6} {case.parent.name:16} FAILED: {e!r}"[:300], False
            print(row)
            sys.stdout.flush()
            if ok:
                rows_seen.append(row)
            else:
                failures += 1
            continue
        cmd = [sys.executable, __file__, str(args.cases), "--examples", str(args.examples), "--one", str(case),
               "--tolerance", str(args.tolerance), "--bandwidth", str(bw)]
        if args.cuda_graph:
            cmd.append("--cuda-graph")
        if args.no_compile:
            cmd.append("--no-compile")
        child = subprocess.run(cmd, capture_output=True, text=True)
        rows = [l for l in child.stdout.splitlines() if l.strip()]
        if child.returncode != 0 or not rows:
            failures += 1
            tail = (child.stderr.strip().splitlines() or ["no output"])[-1]
            print(rows[-1] if rows else f"{case.parent.parent.name:6} {case.parent.name:16} FAILED: {tail}")
        else:
            # Anything the case printed before its row (TRITON_PRINT_AUTOTUNING=1's choices).
            for line in rows:
                print(line if line is rows[-1] else f"#   {line}")
            rows_seen.append(rows[-1])
        sys.stdout.flush()
    print(f"# {failures} failure(s)")
    summarise(rows_seen)
    return 1 if failures else 0


def summarise(rows: list[str]) -> None:
    """Geometric means of Kiln/Inductor and Kiln/eager over the rows that have them,
    the worst Kiln/Inductor case, and the median share of copy bandwidth."""
    ind, eager, worst, pct, short = [], [], None, [], []
    for row in rows:
        f = row.split()
        if len(f) < 13:
            continue
        try:
            kiln_ms, eager_ms, ratio, share, ind_share = (float(f[i]) for i in (5, 6, 8, 9, 10))
        except ValueError:
            continue
        if ind_share >= 90 and share < 90:
            short.append(f"{f[0]} {f[1]} ({share:.0f} % vs {ind_share:.0f} %)")
        if kiln_ms > 0 and eager_ms > 0:
            eager.append(kiln_ms / eager_ms)
        if math.isfinite(ratio) and ratio > 0:
            ind.append(ratio)
            if worst is None or ratio > worst[0]:
                worst = (ratio, f"{f[0]} {f[1]}")
        pct.append(share)
    geo = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")
    if ind:
        print(f"# kiln/inductor: geometric mean {geo(ind):.3f} over {len(ind)} case(s); worst {worst[0]:.3f} ({worst[1]})")
    if eager:
        print(f"# kiln/eager: geometric mean {geo(eager):.3f} over {len(eager)} case(s)")
    if pct:
        print(f"# median share of copy bandwidth: {sorted(pct)[len(pct) // 2]:.1f} %")
    print(f"# below 90 % of copy bandwidth where Inductor reaches it: {len(short)}"
          + (": " + ", ".join(short) if short else ""))


if __name__ == "__main__":
    sys.exit(main())
