#!/usr/bin/env python3
"""The general-shape sweep: ordinary graphs of many shapes, generated here rather than
picked by hand, to measure Kiln against eager PyTorch and torch.compile beyond the
benchmark workloads of bench/README.md (issue 12).

    sweep.py DIR        write one kiln-graph/1 file per case into DIR

bench/gpu/sweep_prepare.sh compiles them for cuda and gxu; bench/gpu/run.py times them
on the GPU (each case in its own process, eager and Inductor in the same run) and
prints the geometric mean and the worst case of Kiln/Inductor.

The cases: a reduction over every dim position of 2-D to 4-D tensors (sum, mean, amax,
keepdim and broadcast back), softmax and log_softmax over rows of 1 to 2^17 elements
(odd lengths included), layer and RMS norms, elementwise chains over 2-D to 4-D
broadcasts, permutes and transposes, float16 and bfloat16 variants, and decode-sized
graphs (one token). Each case moves about 2^26 elements unless it is a decode case.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from differential import to_toml  # noqa: E402  (the runner's graph-file writer)

TOTAL = 1 << 26  # elements in a memory-bound case's main input


def graph(name: str, inputs: list[tuple[str, list[int], str]], nodes: list[tuple], outputs: list[str]) -> str:
    """A kiln-graph/1 file: inputs as (name, shape, dtype), nodes as (name, op, args[, attrs])."""
    return to_toml({
        "name": name,
        "outputs": outputs,
        "inputs": [{"name": n, "shape": shape, "dtype": dt} for n, shape, dt in inputs],
        "nodes": [{"name": n[0], "op": n[1], "args": n[2], **({"attrs": n[3]} if len(n) > 3 else {})}
                  for n in nodes],
    })


def cases() -> dict[str, str]:
    out: dict[str, str] = {}

    # Reductions over every dim position, 2-D to 4-D.
    for shape in ([8192, 8192], [64, 1024, 1024], [32, 64, 128, 256]):
        r = len(shape)
        tag = "x".join(map(str, shape))
        for d in range(r):
            out[f"sum_d{d}_{tag}"] = graph(f"sum_d{d}", [("x", shape, "float32")],
                                           [("y", "sum", ["x", [d]])], ["y"])
        out[f"amax_last_{tag}"] = graph("amax_last", [("x", shape, "float32")],
                                        [("y", "amax", ["x", [r - 1]])], ["y"])
    # Reduce a middle dim and broadcast back (centering).
    for shape in ([32, 4096, 512], [512, 512, 256]):
        tag = "x".join(map(str, shape))
        out[f"center_d1_{tag}"] = graph("center", [("x", shape, "float32")], [
            ("m", "mean", ["x", [1]], {"keepdim": True}),
            ("y", "sub", ["x", "m"]),
        ], ["y"])
    out["mean_d02_256x1024x256"] = graph("mean_d02", [("x", [256, 1024, 256], "float32")],
                                         [("y", "mean", ["x", [0, 2]])], ["y"])

    # Softmax over rows of every length, odd ones included.
    for n in (1, 7, 100, 1000, 5000, 8192, 50257, 1 << 17):
        rows = max(1, TOTAL // n)
        out[f"softmax_{rows}x{n}"] = graph("softmax", [("x", [rows, n], "float32")],
                                           [("y", "softmax", ["x", -1])], ["y"])
    out["log_softmax_4096x50257"] = graph("log_softmax", [("x", [4096, 50257], "float32")],
                                          [("y", "log_softmax", ["x", -1])], ["y"])
    out["softmax_d0_4096x4096"] = graph("softmax_d0", [("x", [4096, 4096], "float32")],
                                        [("y", "softmax", ["x", 0])], ["y"])

    # Norms.
    for shape, dt in (([65536, 768], "float32"), ([16384, 4096], "float16"), ([8192, 1000], "float32")):
        h = shape[-1]
        tag = "x".join(map(str, shape)) + "_" + dt
        out[f"layer_norm_{tag}"] = graph("layer_norm", [("x", shape, dt), ("w", [h], dt), ("b", [h], dt)],
                                         [("y", "layer_norm", ["x", [h], "w", "b"], {"eps": 1e-5})], ["y"])
        out[f"rms_norm_{tag}"] = graph("rms_norm", [("x", shape, dt), ("w", [h], dt)],
                                       [("y", "rms_norm", ["x", [h], "w"], {"eps": 1e-6})], ["y"])

    # Elementwise over broadcasts, 2-D to 4-D.
    out["bcast_rowcol_8192x8192"] = graph("bcast_rowcol", [("a", [8192, 1], "float32"), ("b", [1, 8192], "float32")],
                                          [("y", "add", ["a", "b"])], ["y"])
    out["bcast_3d_64x1024x1024"] = graph("bcast_3d", [("x", [64, 1024, 1024], "float32"), ("s", [64, 1, 1024], "float32")],
                                         [("m", "mul", ["x", "s"]), ("y", "tanh", ["m"])], ["y"])
    out["bcast_4d_bias_32x64x128x256"] = graph(
        "bcast_4d", [("x", [32, 64, 128, 256], "float32"), ("b", [1, 64, 1, 1], "float32")],
        [("s", "add", ["x", "b"]), ("y", "relu", ["s"])], ["y"])
    for dt in ("float32", "bfloat16", "float16"):
        out[f"gelu_bias_8192x8192_{dt}"] = graph(
            "gelu_bias", [("x", [8192, 8192], dt), ("b", [8192], dt)],
            [("s", "add", ["x", "b"]), ("y", "gelu", ["s"])], ["y"])
    out["silu_mul_8192x8192_bf16"] = graph(
        "silu_mul", [("g", [8192, 8192], "bfloat16"), ("u", [8192, 8192], "bfloat16")],
        [("s", "silu", ["g"]), ("y", "mul", ["s", "u"])], ["y"])
    out["where_mask_8192x8192"] = graph(
        "where_mask", [("x", [8192, 8192], "float32"), ("m", [1, 8192], "bool")],
        [("y", "where", ["m", "x", 0.0])], ["y"])
    out["cast_f32_bf16_8192x8192"] = graph("cast", [("x", [8192, 8192], "float32")],
                                           [("y", "to", ["x"], {"dtype": "bfloat16"})], ["y"])

    # Permutes and transposes (a copy to contiguous memory, or fused with an op).
    out["transpose_8192x8192"] = graph("transpose", [("x", [8192, 8192], "float32")],
                                       [("t", "transpose", ["x", 0, 1]), ("y", "contiguous", ["t"])], ["y"])
    out["permute_021_64x1024x1024"] = graph("permute021", [("x", [64, 1024, 1024], "float32")],
                                            [("t", "permute", ["x", [0, 2, 1]]), ("y", "contiguous", ["t"])], ["y"])
    out["permute_heads_bias_8x512x12x64"] = graph(
        "permute_heads", [("x", [8, 512, 12, 64], "float32"), ("b", [64], "float32")],
        [("t", "permute", ["x", [0, 2, 1, 3]]), ("y", "add", ["t", "b"])], ["y"])
    out["transpose_add_4096x4096"] = graph(
        "transpose_add", [("x", [4096, 4096], "float32"), ("z", [4096, 4096], "float32")],
        [("t", "transpose", ["x", 0, 1]), ("y", "add", ["t", "z"])], ["y"])

    # Decode-sized graphs: one token, launch-bound.
    out["decode_layer_norm_1x768"] = graph(
        "decode_ln", [("x", [1, 768], "float32"), ("w", [768], "float32"), ("b", [768], "float32")],
        [("y", "layer_norm", ["x", [768], "w", "b"], {"eps": 1e-5})], ["y"])
    out["decode_mlp_1x768"] = graph(
        "decode_mlp", [("x", [1, 768], "float32"), ("w1", [3072, 768], "float32"), ("b1", [3072], "float32"),
                       ("w2", [768, 3072], "float32"), ("b2", [768], "float32")],
        [("h", "linear", ["x", "w1", "b1"]), ("g", "gelu", ["h"]), ("y", "linear", ["g", "w2", "b2"])], ["y"])
    out["decode_softmax_12x1x512"] = graph("decode_softmax", [("x", [12, 1, 512], "float32")],
                                           [("y", "softmax", ["x", -1])], ["y"])
    out["decode_rms_silu_1x4096_bf16"] = graph(
        "decode_rms_silu", [("x", [1, 4096], "bfloat16"), ("w", [4096], "bfloat16")],
        [("n", "rms_norm", ["x", [4096], "w"], {"eps": 1e-6}), ("y", "silu", ["n"])], ["y"])
    return out


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    folder = Path(sys.argv[1])
    folder.mkdir(parents=True, exist_ok=True)
    all_cases = cases()
    for name, text in all_cases.items():
        (folder / f"{name}.toml").write_text(text)
    print(f"{len(all_cases)} cases in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
