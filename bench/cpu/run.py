#!/usr/bin/env python3
"""Kiln's cpu device against numpy on the DESIGN.md workloads scaled to fit (N x N),
with OMP_NUM_THREADS threads (default 2), plus the mm kernel's GFLOP/s.

    cargo build --release --workspace && pip install numpy && python3 bench/cpu/run.py [N]

Each workload is written as a kiln-graph/1 file, run with `host run --bench 10`
(median) and timed in numpy (median of 10) doing the same computation in float32
(numpy has no erf: its gelu is the tanh form, of similar cost).
"""
import os, re, subprocess, sys, tempfile, time
import numpy as np

N = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOST = os.path.join(ROOT, "target", "release", "host")
os.environ.setdefault("OMP_NUM_THREADS", "2")

def graph(name, inputs, nodes, out):
    t = f'format = "kiln-graph/1"\nname = "{name}"\noutputs = ["{out}"]\n\n'
    for n, shape in inputs:
        t += f'[[inputs]]\nname = "{n}"\nshape = {shape}\ndtype = "float32"\n\n'
    for n, op, args in nodes:
        t += f'[[nodes]]\nname = "{n}"\nop = "{op}"\nargs = {args}\n\n'
    return t

CASES = {
    "softmax": (graph("softmax", [("x", [N, N])], [("y", "softmax", '["x", -1]')], "y"),
                lambda x: (lambda e: e / e.sum(-1, keepdims=True))(np.exp(x - x.max(-1, keepdims=True)))),
    "layer_norm": (graph("layer_norm", [("x", [N, N]), ("w", [N]), ("b", [N])],
                         [("y", "layer_norm", f'["x", [{N}], "w", "b"]')], "y"),
                   lambda x, w, b: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w + b),
    "gelu_chain": (graph("gelu_chain", [("x", [N, N])],
                         [("g", "gelu", '["x"]'), ("y", "mul", '["g", 2.0]')], "y"),
                   lambda x: 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3))) * 2.0),
    "mm": (graph("mm", [("a", [N, N]), ("b", [N, N])], [("y", "mm", '["a", "b"]')], "y"),
           lambda a, b: a @ b),
}

def kiln(text):
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(text)
    out = subprocess.run([HOST, "run", f.name, "--device", "cpu", "--bench", "10"],
                         capture_output=True, text=True, check=True).stdout
    return float(re.search(r"median of \d+ runs ([0-9.]+) ms", out).group(1)) / 1e3

def numpy_time(fn, args):
    times = []
    for _ in range(10):
        t = time.perf_counter(); fn(*args); times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]

rng = np.random.default_rng(0)
print(f"N = {N}, OMP_NUM_THREADS = {os.environ['OMP_NUM_THREADS']}")
for name, (text, fn) in CASES.items():
    nargs = fn.__code__.co_argcount
    shapes = [[N, N]] + [[N]] * (nargs - 1) if name == "layer_norm" else [[N, N]] * nargs
    args = [rng.uniform(-1, 1, s).astype(np.float32) for s in shapes]
    k, n = kiln(text), numpy_time(fn, args)
    extra = f", {2 * N ** 3 / k / 1e9:.1f} GFLOP/s" if name == "mm" else ""
    print(f"{name:12s} kiln {k * 1e3:9.2f} ms  numpy {n * 1e3:9.2f} ms  speedup {n / k:5.2f}x{extra}")
