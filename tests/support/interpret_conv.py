#!/usr/bin/env python3
"""Runs every convolution launch of a Triton device's C++ wrapper (`host compile --wrapper
cpp`: wrapper.cpp and kernels.py) under Triton's interpreter on the cpu, and checks each
against PyTorch's convolution: the operands are made with the sizes and strides the launch
passes (so the host's arguments are checked with the kernel), filled at random, and the
kernel launched on the launch's grid with its constants; then the same launch over operands
laid out channels-last (the kernel takes any strides).

Usage: interpret_conv.py COMPILE_DIR

It needs PyTorch and Triton. Prints `ok: WHAT` per check; exits 1 on the first failure.
"""

import re
import sys
from pathlib import Path

from interpreted import check, kernels_of  # first: it turns the interpreter on

import torch

# The kernel's integer parameters, in order (codegen/triton/conv.rs's PARAMS).
PARAMS = ["n", "c", "h", "w", "k", "oh", "ow", "sxn", "sxc", "sxh", "sxw", "swk", "swc", "swh", "swe",
          "syn", "syk", "syh", "syw", "sh", "sw", "ph", "pw", "dh", "dw", "cg", "kg", "groups", "rows",
          "tiles_m"]


def launches(wrapper: str):
    """Each convolution launch's kernel, scalars and grid, in order."""
    found = []
    for block in re.finditer(r"\{ // (kiln_conv_\d+)\n(.*?)\n        \}", wrapper, re.S):
        body = block.group(2)
        scalars = [int(v) for _, v in sorted(
            ((int(i), v) for i, v in re.findall(r"int(?:32|64)_t s(\d+) = (-?\d+);", body)))]
        grid = re.search(r"\w+\(\w+, (\d+)u, (\d+)u, (\d+)u, (\d+)u,", body)
        found.append((block.group(1), dict(zip(PARAMS, scalars)), tuple(int(g) for g in grid.groups()[:3])))
    return found


def strided(sizes, strides, dtype):
    """A tensor of `sizes` laid out with `strides` (a size-1 dim's stride may be 0), random."""
    t = torch.empty_strided(sizes, [max(s, 0) for s in strides], dtype=dtype)
    t.copy_(torch.randn(sizes).to(dtype))
    return t


def main():
    out = Path(sys.argv[1])
    source = (out / "kernels.py").read_text()
    kernels = kernels_of(source)
    meta = kernels["KERNEL_META"]
    found = launches((out / "wrapper.cpp").read_text())
    check("the wrapper launches a convolution kernel", len(found) > 0)
    torch.manual_seed(0)
    for (name, launched, grid), layout in [(f, layout) for f in found for layout in ("as launched", "channels-last")]:
        constants = meta[name]["constants"]
        dtype = {"*fp32": torch.float32, "*fp16": torch.float16, "*bf16": torch.bfloat16}[meta[name]["signature"]["X"]]
        kh, kw = constants["KH"], constants["KW"]
        a = dict(launched)
        if layout == "channels-last":  # the same launch over operands laid out so
            for (c, h, w), keys in (((a["c"], a["h"], a["w"]), ["sxn", "sxc", "sxh", "sxw"]),
                                    ((a["cg"], kh, kw), ["swk", "swc", "swh", "swe"]),
                                    ((a["k"], a["oh"], a["ow"]), ["syn", "syk", "syh", "syw"])):
                a.update(zip(keys, [c * h * w, 1, w * c, c]))
        x = strided([a["n"], a["c"], a["h"], a["w"]], [a["sxn"], a["sxc"], a["sxh"], a["sxw"]], dtype)
        w = strided([a["k"], a["cg"], kh, kw], [a["swk"], a["swc"], a["swh"], a["swe"]], dtype)
        y = torch.empty_strided([a["n"], a["k"], a["oh"], a["ow"]], [a["syn"], a["syk"], a["syh"], a["syw"]],
                                dtype=dtype)
        y.fill_(float("nan"))
        kernels[name][grid](x, w, y, *[a[p] for p in PARAMS], **constants)
        want = torch.nn.functional.conv2d(x.float(), w.float(), stride=(a["sh"], a["sw"]),
                                          padding=(a["ph"], a["pw"]), dilation=(a["dh"], a["dw"]),
                                          groups=a["groups"])
        err = ((y.float() - want).abs().max() / want.abs().max().clamp(min=1e-6)).item()
        # The result's one rounding to its dtype: half a unit in the last place, 2^-9 of the
        # value in bfloat16 (up to 2^-8 of the largest), 2^-12 in float16.
        tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}[dtype]
        what = (f"{name} ({dtype}, {layout}, {a['n']}x{a['c']}x{a['h']}x{a['w']} by {a['k']}x{a['cg']}x{kh}x{kw}, "
                f"groups {a['groups']}, {'tl.dot' if constants['DOT'] else 'elementwise'})")
        check(f"{what} matches PyTorch", err <= tol, f"relative error {err}")


if __name__ == "__main__":
    main()
