#!/usr/bin/env python3
"""Runs the split attention kernels of a compiled `attention_one_query_long_cache`
(tests/graphs) under Triton's interpreter on the cpu, and checks each step against
PyTorch's `scaled_dot_product_attention`: the keys split across programs, their partial
results written to a scratch buffer that starts as NaNs, then combined into the output
by the second kernel of the step.

Usage: interpret_attention.py OUTPUT_CODE_PY [GRAPH_TOML]

With GRAPH_TOML (the graph compiled, or one of its variants: other head counts, head
sizes, cache lengths), the inputs take its shapes; without it, the repository graph's.

The operands take the dtype the kernels were compiled for (the graph's: float32, or the
graph made float16 or bfloat16, where the boolean mask's step `m` is left out: a 16-bit
attention's mask is made additive by a kernel of its own), and PyTorch's attention is taken
in float32 over the same values; the output is checked to within its dtype's roundings.
Every attention step of the file runs.

It needs PyTorch and Triton (the interpreter runs programs one after another on the
cpu). Prints `ok: WHAT` per check; exits 1 on the first failure.
"""

import re
import sys
import types

from interpreted import attention_dtype, check, kernels_of  # first: it turns the interpreter on

import torch


def main():
    source = open(sys.argv[1]).read()
    kernels = kernels_of(source)
    dtype, tolerance = attention_dtype(kernels)
    shapes = {"q": [1, 4, 1, 64], "k": [1, 4, 1024, 64], "v": [1, 4, 1024, 64], "kg": [1, 2, 1024, 64],
              "q2": [1, 4, 2, 64], "keep": [1, 1, 1, 1024]}
    if len(sys.argv) > 2:
        import tomllib

        with open(sys.argv[2], "rb") as graph:
            shapes.update({i["name"]: i["shape"] for i in tomllib.load(graph)["inputs"]})
    torch.manual_seed(0)
    q, k, v, kg, q2 = (torch.randn(*shapes[n]).to(dtype) for n in ("q", "k", "v", "kg", "q2"))
    keep = torch.rand(*shapes["keep"]) > 0.3
    keep[..., :shapes["keep"][-1] * 3 // 10] = False  # whole splits of the row hidden
    sdpa = torch.nn.functional.scaled_dot_product_attention
    f = {name: t.float() for name, t in (("q", q), ("k", k), ("v", v), ("kg", kg), ("q2", q2))}
    want = {
        "buf_o": sdpa(f["q"], f["k"], f["v"]),
        "buf_g": sdpa(f["q"], f["kg"], f["kg"], enable_gqa=True),
        "buf_c": sdpa(f["q2"], f["k"], f["v"], is_causal=True),
        "buf_m": sdpa(f["q"], f["k"], f["v"], attn_mask=keep),
        "buf_d": sdpa(f["q"], f["k"], f["v"], is_causal=True),
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
        out = torch.full_like(want[name], float("nan"), dtype=dtype)
        eval(launch, env | {"_kiln_out": out})
        err = (out.float() - want[name]).abs().max().item()
        check(f"{name} ({dtype}) matches PyTorch", err < tolerance, f"max error {err}")
        steps += 1
    check("every attention step ran", steps == call.count("ATTENTION.run(") > 0, str(steps))


if __name__ == "__main__":
    main()
