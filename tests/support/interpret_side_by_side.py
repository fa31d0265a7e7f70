#!/usr/bin/env python3
"""Runs the `call` of a compiled `side_by_side_pointwise` (tests/graphs) under Triton's
interpreter on the cpu, and checks its outputs against PyTorch: three pointwise results
over 1024, 256 and 1 elements that Kiln computes in one kernel, each part's loads and
stores guarded to its own space. The outputs start as NaNs (or a sentinel integer), so a
part that stores past its space, or short of it, shows.

Usage: interpret_side_by_side.py OUTPUT_CODE_PY

It needs PyTorch and Triton. Prints `ok: WHAT` per check; exits 1 on the first failure.
"""

import sys

from interpreted import call_of, check  # first: it turns the interpreter on

import torch


def main():
    source = open(sys.argv[1]).read()
    launches = [line for line in source.splitlines() if "KERNELS." in line and "[(" in line]
    check("one kernel computes the three results", len(launches) == 1, "\n".join(launches))
    check("the smaller parts' stores are guarded",
          "& ((xindex) < 256))" in source and "& ((xindex) < 1))" in source)
    call = call_of(sys.argv[1])
    torch.manual_seed(0)
    q, k = torch.randn(16, 64), torch.randn(4, 64)
    k_scale, position = torch.randint(-8, 8, (4, 1)), torch.tensor([41])
    q_rope, k_scaled, next_position = call([q, k, k_scale, position])
    want = q + torch.cat([-q[:, 32:], q[:, :32]], dim=1)
    check("the query's rope matches PyTorch", torch.equal(q_rope, want), f"{q_rope} {want}")
    check("the scaled key matches PyTorch", torch.equal(k_scaled, k * k_scale), f"{k_scaled}")
    check("the next position matches PyTorch", next_position.tolist() == [42], f"{next_position}")


if __name__ == "__main__":
    main()
