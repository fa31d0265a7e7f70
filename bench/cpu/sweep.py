#!/usr/bin/env python3
"""The general-shape sweep for the cpu device: the issue-12 workloads at 2048² (gelu
chain, softmax, layer norm, RMS-norm gate, matrix product) and ordinary graphs of many
shapes, generated here rather than picked by hand, sized for two cores.

    sweep.py DIR        write one kiln-graph/1 file per case into DIR

bench/cpu/inductor.py compiles them for cpu on the machine that runs them and times
Kiln against eager PyTorch and torch.compile's C++ backend on pinned cores.

The cases mirror bench/gpu/sweep.py at a sixteenth of its size (each memory-bound case
moves about 2^22 elements): a reduction over every dim position of 2-D to 4-D tensors,
softmax over rows of 1 to 2^17 elements (odd lengths included), layer and RMS norms,
elementwise chains over 2-D to 4-D broadcasts, permutes, bfloat16 variants, matrix
products, and decode-sized graphs (one token).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "gpu"))
from sweep import graph  # noqa: E402  (the GPU sweep's graph-file writer)

TOTAL = 1 << 22  # elements in a memory-bound case's main input
N = 2048  # the side of the square workloads


def cases() -> dict[str, str]:
    out: dict[str, str] = {}

    # The five workloads the issue measures at 2048².
    out[f"gelu_chain_{N}x{N}"] = graph("gelu_chain", [("x", [N, N], "float32"), ("w", [N], "float32"),
                                                      ("b", [N], "float32")],
                                       [("xw", "mul", ["x", "w"]), ("h", "add", ["xw", "b"]),
                                        ("y", "gelu", ["h"])], ["y"])
    out[f"softmax_{N}x{N}"] = graph("softmax", [("x", [N, N], "float32")],
                                    [("y", "softmax", ["x", -1])], ["y"])
    out[f"layer_norm_{N}x{N}"] = graph("layer_norm", [("x", [N, N], "float32"), ("w", [N], "float32"),
                                                      ("b", [N], "float32")],
                                       [("y", "layer_norm", ["x", [N], "w", "b"], {"eps": 1e-5})], ["y"])
    out[f"rmsnorm_gate_{N}x{N}"] = graph(
        "rmsnorm_gate", [("x", [N, N], "float32"), ("w", [N], "float32"), ("g", [N, N], "float32")],
        [("x2", "mul", ["x", "x"]), ("ms", "mean", ["x2", [-1]], {"keepdim": True}),
         ("e", "add", ["ms", 1e-6]), ("r", "rsqrt", ["e"]), ("nx", "mul", ["x", "r"]),
         ("nw", "mul", ["nx", "w"]), ("si", "silu", ["nw"]), ("y", "mul", ["si", "g"])], ["y"])
    out[f"mm_{N}x{N}"] = graph("mm", [("a", [N, N], "float32"), ("b", [N, N], "float32")],
                               [("y", "mm", ["a", "b"])], ["y"])

    # Matrix products of other shapes.
    out["linear_bias_1024x1024x4096"] = graph(
        "linear", [("x", [1024, 1024], "float32"), ("w", [4096, 1024], "float32"), ("b", [4096], "float32")],
        [("y", "linear", ["x", "w", "b"])], ["y"])
    out["bmm_16x256x64x256"] = graph("bmm", [("a", [16, 256, 64], "float32"), ("b", [16, 64, 256], "float32")],
                                     [("y", "bmm", ["a", "b"])], ["y"])
    out["mm_odd_1000x999x1001"] = graph("mm_odd", [("a", [1000, 999], "float32"), ("b", [999, 1001], "float32")],
                                        [("y", "mm", ["a", "b"])], ["y"])

    # Reductions over every dim position, 2-D to 4-D.
    for shape in ([N, N], [64, 256, 256], [16, 32, 64, 128]):
        r = len(shape)
        tag = "x".join(map(str, shape))
        for d in range(r):
            out[f"sum_d{d}_{tag}"] = graph(f"sum_d{d}", [("x", shape, "float32")],
                                           [("y", "sum", ["x", [d]])], ["y"])
        out[f"amax_last_{tag}"] = graph("amax_last", [("x", shape, "float32")],
                                        [("y", "amax", ["x", [r - 1]])], ["y"])
    out["center_d1_32x256x512"] = graph("center", [("x", [32, 256, 512], "float32")], [
        ("m", "mean", ["x", [1]], {"keepdim": True}),
        ("y", "sub", ["x", "m"]),
    ], ["y"])
    out["mean_d02_64x256x256"] = graph("mean_d02", [("x", [64, 256, 256], "float32")],
                                       [("y", "mean", ["x", [0, 2]])], ["y"])

    # Softmax over rows of every length, odd ones included.
    for n in (1, 7, 100, 1000, 5000, 50257, 1 << 17):
        rows = max(1, TOTAL // n)
        out[f"softmax_{rows}x{n}"] = graph("softmax", [("x", [rows, n], "float32")],
                                           [("y", "softmax", ["x", -1])], ["y"])
    out["log_softmax_128x50257"] = graph("log_softmax", [("x", [128, 50257], "float32")],
                                         [("y", "log_softmax", ["x", -1])], ["y"])
    out[f"softmax_d0_{N}x{N}"] = graph("softmax_d0", [("x", [N, N], "float32")],
                                       [("y", "softmax", ["x", 0])], ["y"])

    # Norms.
    for shape, dt in (([4096, 768], "float32"), ([1024, 4096], "bfloat16"), ([4096, 1000], "float32")):
        h = shape[-1]
        tag = "x".join(map(str, shape)) + "_" + dt
        out[f"layer_norm_{tag}"] = graph("layer_norm", [("x", shape, dt), ("w", [h], dt), ("b", [h], dt)],
                                         [("y", "layer_norm", ["x", [h], "w", "b"], {"eps": 1e-5})], ["y"])
        out[f"rms_norm_{tag}"] = graph("rms_norm", [("x", shape, dt), ("w", [h], dt)],
                                       [("y", "rms_norm", ["x", [h], "w"], {"eps": 1e-6})], ["y"])

    # Elementwise over broadcasts, 2-D to 4-D.
    out[f"bcast_rowcol_{N}x{N}"] = graph("bcast_rowcol", [("a", [N, 1], "float32"), ("b", [1, N], "float32")],
                                         [("y", "add", ["a", "b"])], ["y"])
    out["bcast_3d_64x256x256"] = graph("bcast_3d", [("x", [64, 256, 256], "float32"),
                                                    ("s", [64, 1, 256], "float32")],
                                       [("m", "mul", ["x", "s"]), ("y", "tanh", ["m"])], ["y"])
    out["bcast_4d_bias_16x64x64x64"] = graph(
        "bcast_4d", [("x", [16, 64, 64, 64], "float32"), ("b", [1, 64, 1, 1], "float32")],
        [("s", "add", ["x", "b"]), ("y", "relu", ["s"])], ["y"])
    for dt in ("float32", "bfloat16"):
        out[f"gelu_bias_{N}x{N}_{dt}"] = graph(
            "gelu_bias", [("x", [N, N], dt), ("b", [N], dt)],
            [("s", "add", ["x", "b"]), ("y", "gelu", ["s"])], ["y"])
    out[f"silu_mul_{N}x{N}_bf16"] = graph(
        "silu_mul", [("g", [N, N], "bfloat16"), ("u", [N, N], "bfloat16")],
        [("s", "silu", ["g"]), ("y", "mul", ["s", "u"])], ["y"])
    out[f"where_mask_{N}x{N}"] = graph(
        "where_mask", [("x", [N, N], "float32"), ("m", [1, N], "bool")],
        [("y", "where", ["m", "x", 0.0])], ["y"])
    out[f"exp_odd_{TOTAL + 3}"] = graph("exp_odd", [("x", [TOTAL + 3], "float32")],
                                        [("y", "exp", ["x"])], ["y"])

    # Permutes and transposes.
    out[f"transpose_{N}x{N}"] = graph("transpose", [("x", [N, N], "float32")],
                                      [("t", "transpose", ["x", 0, 1]), ("y", "contiguous", ["t"])], ["y"])
    out["permute_021_64x256x256"] = graph("permute021", [("x", [64, 256, 256], "float32")],
                                          [("t", "permute", ["x", [0, 2, 1]]), ("y", "contiguous", ["t"])],
                                          ["y"])
    # Sides that are no power of two (rows 12 000 and 4 000 bytes apart), a bias added
    # along the transposed rows. Made contiguous: eager and Inductor would otherwise give
    # the sum in the transposed operand's layout (no transpose at all), Kiln row-major.
    out["transpose_bias_1000x3000"] = graph(
        "transpose_bias", [("x", [1000, 3000], "float32"), ("b", [1000], "float32")],
        [("t", "transpose", ["x", 0, 1]), ("s", "add", ["t", "b"]), ("y", "contiguous", ["s"])], ["y"])
    out[f"transpose_{N}x{N}_bfloat16"] = graph("transpose_bf16", [("x", [N, N], "bfloat16")],
                                               [("t", "transpose", ["x", 0, 1]), ("y", "contiguous", ["t"])],
                                               ["y"])
    out["permute_021_float64_64x256x256"] = graph(
        "permute021_f64", [("x", [64, 256, 256], "float64")],
        [("t", "permute", ["x", [0, 2, 1]]), ("y", "contiguous", ["t"])], ["y"])
    out["permute_021_int32_24x500x300"] = graph(
        "permute021_int32", [("x", [24, 500, 300], "int32")],
        [("t", "permute", ["x", [0, 2, 1]]), ("y", "contiguous", ["t"])], ["y"])
    out["permute_heads_bias_8x128x12x64"] = graph(
        "permute_heads", [("x", [8, 128, 12, 64], "float32"), ("b", [64], "float32")],
        [("t", "permute", ["x", [0, 2, 1, 3]]), ("y", "add", ["t", "b"])], ["y"])

    # Convolutions as vision models run them (issue 11: within 2x of torch eager on two
    # cores): a ResNet stem and 3x3 body, a 1x1 expansion, a depthwise 3x3 (MobileNet), a
    # strided 3x3 and a dilated one, each with its bias and activation after it.
    def conv(name, x, w, stride, padding, groups=1, dilation=(1, 1), act="relu"):
        attrs = {"stride": list(stride), "padding": list(padding), "dilation": list(dilation), "groups": groups}
        out[name] = graph(name.split("_")[0], [("x", x, "float32"), ("w", w, "float32"), ("b", [w[0]], "float32")],
                          [("c", "conv2d", ["x", "w", "b"], attrs), ("y", act, ["c"])], ["y"])
    conv("convstem_8x3x224x224_k7s2", [8, 3, 224, 224], [16, 3, 7, 7], (2, 2), (3, 3))
    conv("conv3x3_8x32x56x56", [8, 32, 56, 56], [32, 32, 3, 3], (1, 1), (1, 1))
    conv("conv1x1_8x32x56x56_to128", [8, 32, 56, 56], [128, 32, 1, 1], (1, 1), (0, 0))
    conv("convdw_8x96x56x56", [8, 96, 56, 56], [96, 1, 3, 3], (1, 1), (1, 1), groups=96, act="hardtanh")
    conv("conv3x3s2_8x64x56x56", [8, 64, 56, 56], [128, 64, 3, 3], (2, 2), (1, 1))
    conv("conv3x3d2_4x32x64x64", [4, 32, 64, 64], [32, 32, 3, 3], (1, 1), (2, 2), dilation=(2, 2))

    # Decode-sized graphs: one token.
    out["decode_layer_norm_1x768"] = graph(
        "decode_ln", [("x", [1, 768], "float32"), ("w", [768], "float32"), ("b", [768], "float32")],
        [("y", "layer_norm", ["x", [768], "w", "b"], {"eps": 1e-5})], ["y"])
    out["decode_mlp_1x768"] = graph(
        "decode_mlp", [("x", [1, 768], "float32"), ("w1", [3072, 768], "float32"), ("b1", [3072], "float32"),
                       ("w2", [768, 3072], "float32"), ("b2", [768], "float32")],
        [("h", "linear", ["x", "w1", "b1"]), ("g", "gelu", ["h"]), ("y", "linear", ["g", "w2", "b2"])], ["y"])
    out["decode_softmax_12x1x512"] = graph("decode_softmax", [("x", [12, 1, 512], "float32")],
                                           [("y", "softmax", ["x", -1])], ["y"])
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
