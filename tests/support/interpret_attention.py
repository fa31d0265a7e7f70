#!/usr/bin/env python3
"""Runs the split attention kernels of a compiled `attention_one_query_long_cache`
(tests/graphs) under Triton's interpreter on the cpu, and checks each step against
PyTorch's `scaled_dot_product_attention`: the keys split across programs, their partial
results written to a scratch buffer that starts as NaNs, then combined into the output
by the second kernel of the step.

Usage: interpret_attention.py OUTPUT_CODE_PY

It needs PyTorch and Triton (the interpreter runs programs one after another on the
cpu). Prints `ok: WHAT` per check; exits 1 on the first failure.
"""

import re
import sys
import types

from interpreted import check, kernels_of  # first: it turns the interpreter on

import torch


def main():
    source = open(sys.argv[1]).read()
    kernels = kernels_of(source)
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 1, 64), torch.randn(1, 4, 1024, 64), torch.randn(1, 4, 1024, 64)
    kg, q2 = torch.randn(1, 2, 1024, 64), torch.randn(1, 4, 2, 64)
    keep = torch.rand(1, 1, 1, 1024) > 0.3
    keep[..., :300] = False  # whole splits of the row hidden
    sdpa = torch.nn.functional.scaled_dot_product_attention
    want = {
        "buf_o": sdpa(q, k, v),
        "buf_g": sdpa(q, kg, kg, enable_gqa=True),
        "buf_c": sdpa(q2, k, v, is_causal=True),
        "buf_m": sdpa(q, k, v, attn_mask=keep),
        "buf_d": sdpa(q, k, v, is_causal=True),
    }
    env = {
        "q": q, "k": k, "v": v, "kg": kg, "q2": q2, "keep": keep,
        "KERNELS": types.SimpleNamespace(**{n: f for n, f in kernels.items() if n.startswith("kiln_flash")}),
    }
    call = source[source.index("def call("):]
    steps = 0
    for line in call.splitlines():
        m = re.match(r"\s+(buf_attention_splits\w*) = empty_strided_device\(\((\d+),\)", line)
        if m:  # garbage in the scratch: every partial result read must have been written
            env[m.group(1)] = torch.full((int(m.group(2)),), float("nan"))
        m = re.match(r"\s+(buf_attention_splits\w*) = (buf_attention_splits\w*)  # reuse", line)
        if m:
            env[m.group(1)] = env[m.group(2)]
        m = re.match(r"\s+(buf_\w) = ATTENTION\.run\(\d+, lambda _kiln_out: (.*), lambda: \(.*\)\)$", line)
        if not m:
            continue
        name, launch = m.group(1), m.group(2).replace(", stream=stream0", "")
        check(f"{name} splits its keys, then combines them", "SPLITS" in source and
              re.fullmatch(r"\(KERNELS\.kiln_flash_attention_\d+\[.*\), KERNELS\.kiln_flash_combine_\d+\[.*\)\)",
                           launch) is not None, launch)
        out = torch.full_like(want[name], float("nan"))
        eval(launch, env | {"_kiln_out": out})
        err = (out - want[name]).abs().max().item()
        check(f"{name} matches PyTorch", err < 1e-5, f"max error {err}")
        steps += 1
    check("every attention step ran", steps == 5, str(steps))


if __name__ == "__main__":
    main()
