#!/usr/bin/env python3
"""Runs the `call` of a compiled `attention_position_mask` (tests/graphs) under Triton's
interpreter on the cpu, and checks its output against PyTorch's attention over the keys at
or before the position, at positions that keep the first key alone, part of a split, a
split's last key, and the whole cache. The keys and values past the position are NaN: a
kernel that read any of them (rather than skipping them, as the mask read before its wait
lets it) would put NaN in the output. The operands take the dtype the kernels were compiled
for: the graph's float32 (a boolean mask), or the graph made bfloat16 or float16 (the mask
made additive by its kernel); PyTorch's attention is taken in float32 over the same values.

Usage: interpret_position_mask.py OUTPUT_CODE_PY

It needs PyTorch and Triton. Prints `ok: WHAT` per check; exits 1 on the first failure.
"""

import sys

from interpreted import attention_dtype, call_of, check, kernels_of  # first: it turns the interpreter on

import torch


def main():
    dtype, tolerance = attention_dtype(kernels_of(open(sys.argv[1]).read()))
    call = call_of(sys.argv[1])
    torch.manual_seed(0)
    q = torch.randn(1, 4, 1, 64).to(dtype)
    k, v = torch.randn(1, 4, 1024, 64).to(dtype), torch.randn(1, 4, 1024, 64).to(dtype)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for position in (0, 100, 511, 1023):
        want = sdpa(q.float(), k[:, :, :position + 1].float(), v[:, :, :position + 1].float())
        past_k, past_v = k.clone(), v.clone()
        past_k[:, :, position + 1:] = float("nan")
        past_v[:, :, position + 1:] = float("nan")
        (out,) = call([q, past_k, past_v, torch.tensor([position])])
        err = (out.float() - want).abs().max().item()
        check(f"position {position} ({dtype}): matches PyTorch over the keys up to it, reading none past it",
              err < tolerance, f"max error {err}")


if __name__ == "__main__":
    main()
