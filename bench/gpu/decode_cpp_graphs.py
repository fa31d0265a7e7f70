#!/usr/bin/env python3
"""The static-cache decoding step through Kiln's C++ wrapper under CUDA graphs, against the
same export in eager and Kiln's Python wrapper under graphs: bench/gpu/decode_step.py's
models, compiled by `host compile --wrapper cpp --cuda-graph` and called through kiln.so
(aot_loader.py). The step's inputs and its state keep their addresses, so the first call
captures and every later one replays: each state (a cache, a position counter) is passed as
both its input and its output, which the wrapper updates in place. Greedy tokens are checked against eager's for `--steps`
steps from position 0, then a step is timed (CUDA events over 200 replays), against Kiln's
Python wrapper and Inductor (`mode="reduce-overhead"`), both under graphs, in the same process.

    PYTHONPATH=python KILN_HOST=bench/gpu/ab/NAME/host python3 bench/gpu/decode_cpp_graphs.py \\
        [--models gpt2,llama] [--dtypes fp32,bf16] [--cache 1024] [--steps 16]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent / "tools"))
from aot_loader import AotModule  # noqa: E402
from decode_step import DTYPES, model  # noqa: E402
from precision_child import setup  # noqa: E402


def events_ms(fn, n: int = 200) -> float:
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / n


class CppStep:
    """kiln.so of the step, called with fixed addresses on a stream of its own."""

    def __init__(self, folder: Path, ep, host: str):
        self.module = AotModule(str(folder))
        rows = json.loads((folder / "state.json").read_text())["state"]
        tensors = {**ep.state_dict, **ep.constants}
        self.state = [tensors[r["name"]].detach().to("cuda", copy=True).contiguous() for r in rows]
        shape, dtype = self.module.outputs[0]
        self.logits = torch.empty(shape, dtype=dtype, device="cuda")
        self.ids = torch.zeros(1, 1, dtype=torch.int64, device="cuda")
        self.pos = torch.zeros(1, dtype=torch.int64, device="cuda")
        # By the positions state.json gives: the user inputs and the logits come first.
        ins = [self.ids, self.pos] + [None] * len(rows)
        outs = [self.logits] + [None] * len(rows)
        for r, state in zip(rows, self.state):
            ins[r["input"]], outs[r["output"]] = state, state
        import ctypes

        self._in = (ctypes.c_void_p * len(ins))(*[t.data_ptr() for t in ins])
        self._out = (ctypes.c_void_p * len(outs))(*[t.data_ptr() for t in outs])
        self.stream = torch.cuda.Stream()

    def __call__(self):
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            self.module._call(self._in, self._out, self.stream.cuda_stream)
        torch.cuda.current_stream().wait_stream(self.stream)
        return self.logits


def row(name: str, dtype: str, a) -> str:
    import kiln
    from generate import export_step

    m = model(name, DTYPES[dtype], a.cache)
    ep = export_step(m, a.cache, "cuda")
    out = Path(tempfile.mkdtemp(prefix="kiln-decode-cpp-"))
    torch.export.save(ep, out / "step.pt2")
    done = subprocess.run([a.host, "compile", str(out / "step.pt2"), "--device", "cuda", "--wrapper", "cpp",
                           "--cuda-graph", "-o", str(out / "code")], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(done.stderr.strip()[-400:])
    step = CppStep(out / "code", ep, a.host)
    eager = ep.module()
    python = kiln.compile(ep, device="cuda", mode="reduce-overhead")
    agree = 0
    with torch.no_grad():
        token = 7
        for pos in range(a.steps):
            step.ids.fill_(token)
            step.pos.fill_(pos)
            got = step()
            want = eager(input_ids=step.ids.clone(), cache_position=step.pos.clone())
            want = want[0] if isinstance(want, (tuple, list)) else want
            agree += int(got[0, -1].argmax()) == int(want[0, -1].argmax())
            token = int(want[0, -1].argmax())
        err = float((got.float() - want.float()).abs().max() / want.float().abs().max())
        step.pos.fill_(a.steps)
        cpp_ms = events_ms(step)
        kwargs = {"input_ids": step.ids.clone(), "cache_position": step.pos.clone()}
        python_ms = events_ms(lambda: python(**kwargs))
        inductor = torch.compile(eager, mode="reduce-overhead")
        for _ in range(3):  # cudagraph trees record on a later call than the first
            inductor(**kwargs)
        inductor_ms = events_ms(lambda: inductor(**kwargs))
    return (f"| {name} | {dtype} | {agree}/{a.steps} | {err:.1e} | {cpp_ms:.3f} | {python_ms:.3f} | "
            f"{inductor_ms:.3f} | {cpp_ms / python_ms:.2f} | {cpp_ms / inductor_ms:.2f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="gpt2,llama")
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--cache", type=int, default=1024)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--host", default=None, help="the host binary (default: $KILN_HOST)")
    a = p.parse_args()
    import os

    a.host = a.host or os.environ["KILN_HOST"]
    setup()
    print(f"# bench/gpu/decode_cpp_graphs.py on {torch.cuda.get_device_name(0)}, torch {torch.__version__}; "
          f"cache {a.cache}, batch 1; steps from position 0, greedy tokens against eager's")
    print("| model | dtype | greedy tokens as eager's | last step's error vs eager | C++ wrapper graphs ms | "
          "Python wrapper graphs ms | inductor reduce-overhead ms | C++ / Python | C++ / inductor |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in a.models.split(","):
        for dtype in a.dtypes.split(","):
            try:
                print(row(name, dtype, a), flush=True)
            except Exception as e:  # noqa: BLE001 (one row's failure is reported; the others still run)
                print(f"| {name} | {dtype} | failed: {type(e).__name__}: {str(e)[:300]} |", flush=True)


if __name__ == "__main__":
    main()
