#!/usr/bin/env python3
"""Kiln's cpu device against numpy on the benchmark workloads (bench/README.md), scaled to fit a
small machine, plus the mm kernel's GFLOP/s against the machine's measured peak.

    cargo build --release --workspace && pip install numpy && python3 bench/cpu/run.py [--scale S]

Threads: OMP_NUM_THREADS (default 2) for Kiln's OpenMP loops and numpy's BLAS
(numpy's element-wise code is single-threaded: that is numpy). Each workload is
written as a kiln-graph/1 file, given the same random inputs as numpy
(`--inputs`), run with `host run --bench N` (median of N after a warm-up run),
and its outputs are compared with numpy's, so both do the same computation.
numpy is timed the same way (median of N after one warm-up). numpy has no erf,
so its exact gelu uses an erf written with numpy ufuncs (Abramowitz-Stegun
7.1.26, |error| < 1.5e-7); the GPT-2 block's gelu is the tanh form in both.

The peak is measured in the same run: a small C++ program of independent
vector FMA chains on every thread (see PEAK below), compiled with the same
compiler and -march=native.
"""
import argparse, math, os, re, subprocess, sys, tempfile, time

os.environ.setdefault("OMP_NUM_THREADS", "2")
for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, os.environ["OMP_NUM_THREADS"])
import numpy as np  # after the thread variables, which BLAS reads when loaded

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOST = os.path.join(ROOT, "target", "release", "host")
F32 = np.float32


# ---------------------------------------------------------------- graphs
def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    return repr(v)


def graph(name, inputs, nodes, outputs):
    """inputs: [(name, shape)]; nodes: [(name, op, args[, attrs])]."""
    t = f'format = "kiln-graph/1"\nname = "{name}"\noutputs = {toml_value(outputs)}\n\n'
    for n, shape in inputs:
        t += f'[[inputs]]\nname = "{n}"\nshape = {toml_value(shape)}\ndtype = "float32"\n\n'
    for node in nodes:
        n, op, args = node[:3]
        t += f'[[nodes]]\nname = "{n}"\nop = "{op}"\nargs = {toml_value(args)}\n'
        if len(node) > 3:
            t += f"attrs = {toml_value(node[3])}\n"
        t += "\n"
    return t


def erf(x):
    # Abramowitz & Stegun 7.1.26, in float64 for the reference's accuracy.
    x = x.astype(np.float64)
    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
               + 0.254829592) * t * np.exp(-a * a)
    return (s * y).astype(F32)


def layer_norm(x, w, b, eps=F32(1e-5)):
    m = x.mean(-1, keepdims=True)
    d = x - m
    v = (d * d).mean(-1, keepdims=True)
    return d / np.sqrt(v + eps) * w + b


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def gelu_tanh(x):
    return F32(0.5) * x * (F32(1) + np.tanh(F32(0.7978845608028654) * (x + F32(0.044715) * x * x * x)))


def workloads(s):
    """(name, row of the workloads table, graph text, input shapes, numpy function, flop count or None)."""
    n = 2048 * s // 4 * 4 or 4
    w = []
    w.append(("gelu", f"gelu(x*w+b), x {n}x{n}",
              graph("gelu", [("x", [n, n]), ("w", [n]), ("b", [n])],
                    [("xw", "mul", ["x", "w"]), ("h", "add", ["xw", "b"]), ("y", "gelu", ["h"])], ["y"]),
              lambda x, w_, b: (lambda h: F32(0.5) * h * (F32(1) + erf(h * F32(1 / math.sqrt(2)))))(x * w_ + b),
              None))
    w.append(("softmax", f"softmax(x, -1), {n}x{n}",
              graph("softmax", [("x", [n, n])], [("y", "softmax", ["x", -1])], ["y"]),
              softmax, None))
    w.append(("layer_norm", f"layer_norm {n}x{n}",
              graph("layer_norm", [("x", [n, n]), ("w", [n]), ("b", [n])],
                    [("y", "layer_norm", ["x", [n], "w", "b"])], ["y"]),
              layer_norm, None))
    w.append(("rmsnorm_silu", f"silu(x*rsqrt(mean(x^2)+eps)*w)*g, {n}x{n}",
              graph("rmsnorm_silu", [("x", [n, n]), ("w", [n]), ("g", [n, n])],
                    [("x2", "mul", ["x", "x"]), ("ms", "mean", ["x2", [-1]], {"keepdim": True}),
                     ("e", "add", ["ms", 1e-6]), ("r", "rsqrt", ["e"]), ("nx", "mul", ["x", "r"]),
                     ("nw", "mul", ["nx", "w"]), ("si", "silu", ["nw"]), ("y", "mul", ["si", "g"])], ["y"]),
              lambda x, w_, g: (lambda t: t / (F32(1) + np.exp(-t)) * g)(
                  x / np.sqrt((x * x).mean(-1, keepdims=True) + F32(1e-6)) * w_),
              None))
    w.append(("mm", f"mm {n}x{n} @ {n}x{n}",
              graph("mm", [("a", [n, n]), ("b", [n, n])], [("y", "mm", ["a", "b"])], ["y"]),
              lambda a, b: a @ b, 2 * n ** 3))
    bt = 512 * s
    w.append(("mlp", f"MLP linear(1024->4096)*relu*linear, batch {bt}",
              graph("mlp", [("x", [bt, 1024]), ("w1", [4096, 1024]), ("b1", [4096]),
                            ("w2", [1024, 4096]), ("b2", [1024])],
                    [("h", "linear", ["x", "w1", "b1"]), ("a", "relu", ["h"]),
                     ("y", "linear", ["a", "w2", "b2"])], ["y"]),
              lambda x, w1, b1, w2, b2: np.maximum(x @ w1.T + b1, F32(0)) @ w2.T + b2,
              2 * 2 * bt * 1024 * 4096))
    bh, sq = 2 * s, 512
    w.append(("attention", f"attention q,k,v {bh}x8x{sq}x64",
              graph("attention", [("q", [bh, 8, sq, 64]), ("k", [bh, 8, sq, 64]), ("v", [bh, 8, sq, 64])],
                    [("kt", "transpose", ["k", -2, -1]), ("sc", "matmul", ["q", "kt"]),
                     ("sd", "div", ["sc", 8.0]), ("p", "softmax", ["sd", -1]),
                     ("o", "matmul", ["p", "v"])], ["o"]),
              lambda q, k, v: softmax(q @ k.swapaxes(-1, -2) / F32(8)) @ v,
              2 * 2 * bh * 8 * sq * sq * 64))
    w.append(gpt2(1 * s, 256))
    return w


def gpt2(b, t):
    c, h, d = 768, 12, 64
    inputs = [("x", [b, t, c]), ("mask", [t, t]), ("ln1_w", [c]), ("ln1_b", [c]),
              ("attn_w", [3 * c, c]), ("attn_b", [3 * c]), ("proj_w", [c, c]), ("proj_b", [c]),
              ("ln2_w", [c]), ("ln2_b", [c]), ("fc_w", [4 * c, c]), ("fc_b", [4 * c]),
              ("out_w", [c, 4 * c]), ("out_b", [c])]
    nodes = [("ln1", "layer_norm", ["x", [c], "ln1_w", "ln1_b", 1e-5]),
             ("qkv", "linear", ["ln1", "attn_w", "attn_b"]),
             ("parts", "split", ["qkv", c, -1])]
    for i, p in enumerate("qkv"):
        nodes += [(f"{p}0", "getitem", ["parts", i]), (f"{p}1", "view", [f"{p}0", [b, t, h, d]]),
                  (f"{p}h", "permute", [f"{p}1", [0, 2, 1, 3]])]
    nodes += [("kt", "transpose", ["kh", -2, -1]), ("att", "matmul", ["qh", "kt"]),
              ("att_s", "mul", ["att", 0.125]), ("att_m", "add", ["att_s", "mask"]),
              ("p", "softmax", ["att_m", -1]), ("yh", "matmul", ["p", "vh"]),
              ("yt", "permute", ["yh", [0, 2, 1, 3]]), ("yc", "contiguous", ["yt"]),
              ("y2", "view", ["yc", [b, t, c]]), ("proj", "linear", ["y2", "proj_w", "proj_b"]),
              ("r1", "add", ["x", "proj"]), ("ln2", "layer_norm", ["r1", [c], "ln2_w", "ln2_b", 1e-5]),
              ("fc", "linear", ["ln2", "fc_w", "fc_b"]), ("act", "gelu", ["fc"], {"approximate": "tanh"}),
              ("mo", "linear", ["act", "out_w", "out_b"]), ("y", "add", ["r1", "mo"])]

    def ref(x, mask, l1w, l1b, aw, ab, pw, pb, l2w, l2b, fw, fb, ow, ob):
        qkv = layer_norm(x, l1w, l1b) @ aw.T + ab
        q, k, v = (qkv[..., i * c:(i + 1) * c].reshape(b, t, h, d).transpose(0, 2, 1, 3) for i in range(3))
        p = softmax(q @ k.swapaxes(-1, -2) * F32(0.125) + mask)
        y = (p @ v).transpose(0, 2, 1, 3).reshape(b, t, c)
        r1 = x + (y @ pw.T + pb)
        return r1 + gelu_tanh(layer_norm(r1, l2w, l2b) @ fw.T + fb) @ ow.T + ob

    flops = 2 * b * t * c * (3 * c + c + 8 * c) + 2 * 2 * b * h * t * t * d
    return ("gpt2_block", f"GPT-2 block (768, 12 heads), {b}x{t}", graph("gpt2_block", inputs, nodes, ["y"]),
            ref, flops)


# ---------------------------------------------------------------- peak
PEAK = r"""
#include <chrono>
#include <cstdio>
#include <omp.h>
#ifdef __AVX512F__
#define LANES 16
#else
#define LANES 8
#endif
typedef float v8 __attribute__((vector_size(LANES * 4)));
int main() {
    const long iters = 50000000;
    float sink = 0;
    const double t0 = omp_get_wtime();
#pragma omp parallel reduction(+ : sink)
    {
        v8 a[10], b, c;
        for (int j = 0; j < LANES; ++j) { b[j] = 1.0000001f; c[j] = 1e-7f; }
        for (int i = 0; i < 10; ++i) for (int j = 0; j < LANES; ++j) a[i][j] = float(i);
        for (long i = 0; i < iters; ++i)
#pragma GCC unroll 10
            for (int j = 0; j < 10; ++j) a[j] = a[j] * b + c;
        for (int i = 0; i < 10; ++i) sink += a[i][0];
    }
    const double t = omp_get_wtime() - t0;
    std::printf("%f %d %g\n", 2.0 * LANES * 10 * iters * omp_get_max_threads() / t / 1e9,
                omp_get_max_threads(), double(sink));
}
"""


def measure_peak(d):
    """float32 FMA GFLOP/s over all threads: 10 independent FMA chains of the
    widest vectors (16 lanes with AVX-512, else 8) per thread, enough to
    fill two pipelined FMA units."""
    cxx = os.environ.get("CXX", "g++")
    src, exe = os.path.join(d, "peak.cpp"), os.path.join(d, "peak")
    open(src, "w").write(PEAK)
    subprocess.run([cxx, "-O2", "-march=native", "-ffp-contract=fast", "-fopenmp", src, "-o", exe], check=True)
    # The best of several short runs: a neighbour's load only ever lowers it.
    return max(float(subprocess.run([exe], capture_output=True, text=True, check=True).stdout.split()[0])
               for _ in range(9))


# ---------------------------------------------------------------- timing
def kiln(text, inputs, d, name, runs):
    path, ind, outd = (os.path.join(d, f"{name}.toml"), os.path.join(d, f"{name}.in"),
                       os.path.join(d, f"{name}.out"))
    open(path, "w").write(text)
    os.makedirs(ind, exist_ok=True)
    for i, a in enumerate(inputs):
        np.ascontiguousarray(a, dtype=F32).tofile(os.path.join(ind, f"input{i}.bin"))
    out = subprocess.run([HOST, "run", path, "--device", "cpu", "--inputs", ind, "--out", outd,
                          "--bench", str(runs)], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"host run failed for {name}:\n{out.stdout}{out.stderr}")
    ms = float(re.search(r"median of \d+ runs ([0-9.]+) ms", out.stdout).group(1))
    return ms / 1e3, np.fromfile(os.path.join(outd, "output0.bin"), dtype=F32)


def numpy_time(fn, args, runs):
    result = fn(*args)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2], result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=int, default=1, help="multiply the sizes (default 1: 2048x2048 tensors)")
    ap.add_argument("--runs", type=int, default=10, help="timed runs per measurement (median)")
    ap.add_argument("--only", help="comma-separated workload names")
    ap.add_argument("--host", help="the host binary (default: target/release/host)")
    args = ap.parse_args()
    global HOST
    if args.host:
        HOST = os.path.abspath(args.host)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as d:
        peak = measure_peak(d)
        threads = os.environ["OMP_NUM_THREADS"]
        print(f"OMP_NUM_THREADS={threads}; measured float32 FMA peak {peak:.1f} GFLOP/s")
        print("| workload | kiln ms | numpy ms | numpy/kiln | max rel diff | kiln GFLOP/s (% of peak) |")
        print("| --- | --- | --- | --- | --- | --- |")
        for name, row, text, fn, flops in workloads(args.scale):
            if args.only and name not in args.only.split(","):
                continue
            specs = [(m.group(1), [int(x) for x in m.group(2).split(", ")])
                     for m in re.finditer(r'\[\[inputs\]\]\nname = "([^"]*)"\nshape = \[([^\]]*)\]', text)]
            # Weight matrices scaled like a trained model's, so that the GPT-2
            # block's softmax is not saturated.
            inputs = [rng.uniform(-1, 1, s).astype(F32) * F32(0.05 if nm.endswith("_w") and len(s) == 2 else 1)
                      for nm, s in specs]
            k, got = kiln(text, inputs, d, name, args.runs)
            n, want = numpy_time(fn, inputs, args.runs)
            want = np.asarray(want, dtype=np.float64).ravel()
            diff = float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))
            rate = f"{flops / k / 1e9:.1f} ({100 * flops / k / 1e9 / peak:.0f}%)" if flops else "–"
            print(f"| {row} | {k * 1e3:.2f} | {n * 1e3:.2f} | {n / k:.2f}x | {diff:.1e} | {rate} |", flush=True)
            if not diff < 1e-3:
                sys.exit(f"{name}: Kiln's output differs from numpy's (max rel diff {diff:.2e})")
        after = measure_peak(d)
        if after > peak * 1.05:
            print(f"note: the peak measured {after:.1f} GFLOP/s after the workloads: the machine was busier "
                  "at the start, so the percentages above are high")


if __name__ == "__main__":
    main()
