#!/usr/bin/env python3
"""Runs the `call` of a compiled `side_by_side_pointwise` (tests/graphs) under Triton's
interpreter on the cpu, and checks its outputs against PyTorch: three pointwise results
over 1024, 256 and 1 elements that Kiln computes in one kernel, each part's loads and
stores guarded to its own space. The outputs start as NaNs (or a sentinel integer), so a
part that stores past its space, or short of it, shows.

Usage: interpret_side_by_side.py OUTPUT_CODE_PY

It needs PyTorch and Triton. Prints `ok: WHAT` per check; exits 1 on the first failure.
"""

import contextlib
import sys
import types

from interpreted import check, kernels_of  # first: it turns the interpreter on

import torch


class Launcher:
    """`KERNELS.name[grid](*args, stream=...)` as the wrapper writes it, on the interpreter."""

    def __init__(self, fn):
        self.fn = fn

    def __getitem__(self, grid):
        return lambda *args, stream=None: self.fn[grid](*args)


class OnCpu:
    """`torch` as the wrapper uses it, its device module (`torch.cuda`, `torch.gxu`) a
    stand-in: the device guard does nothing, and buffers are the cpu's."""

    device = types.SimpleNamespace(_DeviceGuard=lambda _: contextlib.nullcontext(),
                                   set_device=lambda _: None)

    def __getattr__(self, name):
        return self.device if name == "cuda" or not hasattr(torch, name) else getattr(torch, name)


def filled(size, stride, dtype):
    """A buffer whose every element is NaN, or a sentinel integer."""
    out = torch.empty_strided(size, stride, dtype=dtype)
    out.fill_(float("nan") if dtype.is_floating_point else -12345)
    return out


def main():
    source = open(sys.argv[1]).read()
    scope = kernels_of(source)
    launches = [line for line in source.splitlines() if "KERNELS." in line and "[(" in line]
    check("one kernel computes the three results", len(launches) == 1, "\n".join(launches))
    check("the smaller parts' stores are guarded",
          "& ((xindex) < 256))" in source and "& ((xindex) < 1))" in source)
    env = {
        "torch": OnCpu(),
        "align_inputs": lambda args, aligned: None,
        "ALIGNED_INPUTS": (),
        "check_inputs": None,
        "get_raw_stream": lambda _: 0,
        "empty_strided_device": filled,
        "reinterpret_tensor": lambda base, size, stride, offset: base.as_strided(
            size, stride, base.storage_offset() + offset),
        "KERNELS": types.SimpleNamespace(
            **{n: Launcher(f) for n, f in scope.items() if n.startswith("kiln_")}),
    }
    exec(compile(source[source.index("def call("): source.index("def make_inputs(")], "call", "exec"), env)
    torch.manual_seed(0)
    q, k = torch.randn(16, 64), torch.randn(4, 64)
    k_scale, position = torch.randint(-8, 8, (4, 1)), torch.tensor([41])
    q_rope, k_scaled, next_position = env["call"]([q, k, k_scale, position])
    want = q + torch.cat([-q[:, 32:], q[:, :32]], dim=1)
    check("the query's rope matches PyTorch", torch.equal(q_rope, want), f"{q_rope} {want}")
    check("the scaled key matches PyTorch", torch.equal(k_scaled, k * k_scale), f"{k_scaled}")
    check("the next position matches PyTorch", next_position.tolist() == [42], f"{next_position}")


if __name__ == "__main__":
    main()
