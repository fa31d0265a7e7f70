#!/usr/bin/env python3
"""Writes attention graphs (`scaled_dot_product_attention` in every form the fused
Triton kernel takes) as kiln-graph/1 files, one folder per case with its graph.toml,
for `host compile` and then `bench/gpu/run.py` (which runs each against PyTorch eager's
own `scaled_dot_product_attention` and torch.compile).

Usage: python3 bench/gpu/attention_cases.py OUT_DIR [--sizes check|speed|all]

`check` cases cover what the kernel must get right: float32/float16/bfloat16, causal
with L = S and L != S, bool and additive masks broadcast from fewer dims, grouped-query
heads, rank 3, head sizes that are not powers of two, a different value head size,
decode (one query row), an explicit scale, and query/key/value read through a
transposed [B, L, H, E] layout. `speed` cases are realistic sizes (batch 8 x 512
tokens). Needs only Python's standard library.
"""
import argparse
import os


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return repr(v)


def graph(name, inputs, nodes, outputs):
    lines = ['format = "kiln-graph/1"', f'name = "{name}"', f"outputs = {toml_value(outputs)}", ""]
    for n, shape, dtype in inputs:
        lines += ["[[inputs]]", f'name = "{n}"', f"shape = {toml_value(shape)}", f'dtype = "{dtype}"', ""]
    for n, op, args, attrs in nodes:
        lines += ["[[nodes]]", f'name = "{n}"', f'op = "{op}"', f"args = {toml_value(args)}"]
        if attrs:
            lines.append("attrs = { " + ", ".join(f"{k} = {toml_value(v)}" for k, v in attrs.items()) + " }")
        lines.append("")
    return "\n".join(lines)


def sdpa(name, q, k, v, dtype, mask=None, mask_dtype=None, causal=False, gqa=False, scale=None,
         transposed=False):
    """One attention of q [.., L, E], k [.., S, E], v [.., S, Ev]."""
    inputs, nodes = [], []
    operands = []
    for n, shape in (("q", q), ("k", k), ("v", v)):
        if transposed:
            # Stored [B, L, H, E]; attention reads it as [B, H, L, E].
            b, h, l, e = shape
            inputs.append((n, [b, l, h, e], dtype))
            nodes.append((f"{n}t", "transpose", [n, 1, 2], {}))
            operands.append(f"{n}t")
        else:
            inputs.append((n, shape, dtype))
            operands.append(n)
    if mask is not None:
        inputs.append(("mask", mask, mask_dtype))
        operands.append("mask")
    attrs = {}
    if causal:
        attrs["is_causal"] = True
    if gqa:
        attrs["enable_gqa"] = True
    if scale is not None:
        attrs["scale"] = scale
    nodes.append(("o", "scaled_dot_product_attention", operands, attrs))
    return name, graph(name, inputs, nodes, ["o"])


def check_cases():
    return [
        sdpa("attn_f32", [2, 4, 37, 64], [2, 4, 37, 64], [2, 4, 37, 64], "float32"),
        sdpa("attn_f16_causal", [2, 8, 128, 64], [2, 8, 128, 64], [2, 8, 128, 64], "float16", causal=True),
        sdpa("attn_causal_l_ne_s", [1, 2, 20, 32], [1, 2, 50, 32], [1, 2, 50, 32], "float32", causal=True),
        sdpa("attn_bool_mask", [2, 4, 33, 64], [2, 4, 33, 64], [2, 4, 33, 64], "bfloat16",
             mask=[2, 1, 33, 33], mask_dtype="bool"),
        sdpa("attn_add_mask", [1, 3, 17, 16], [1, 3, 40, 16], [1, 3, 40, 16], "float32",
             mask=[17, 40], mask_dtype="float32"),
        sdpa("attn_gqa", [2, 8, 64, 64], [2, 2, 64, 64], [2, 2, 64, 64], "float16", causal=True, gqa=True),
        sdpa("attn_rank3", [4, 100, 80], [4, 100, 80], [4, 100, 48], "float32"),
        sdpa("attn_decode", [8, 12, 1, 64], [8, 12, 512, 64], [8, 12, 512, 64], "float16"),
        sdpa("attn_e128_causal", [1, 4, 300, 128], [1, 4, 300, 128], [1, 4, 300, 128], "bfloat16", causal=True),
        sdpa("attn_transposed", [2, 4, 50, 32], [2, 4, 50, 32], [2, 4, 50, 32], "float32", transposed=True),
        sdpa("attn_scale", [1, 2, 64, 64], [1, 2, 64, 64], [1, 2, 64, 64], "float32", scale=0.3),
        sdpa("attn_e256", [1, 2, 64, 256], [1, 2, 64, 256], [1, 2, 64, 256], "float32"),
    ]


def speed_cases():
    return [
        sdpa("attn_b8_512_f16_causal", [8, 12, 512, 64], [8, 12, 512, 64], [8, 12, 512, 64], "float16",
             causal=True),
        sdpa("attn_b8_512_f32", [8, 12, 512, 64], [8, 12, 512, 64], [8, 12, 512, 64], "float32"),
        sdpa("attn_b8_512_bf16_gqa", [8, 32, 512, 128], [8, 8, 512, 128], [8, 8, 512, 128], "bfloat16",
             causal=True, gqa=True),
        sdpa("attn_b8_512_f16_mask", [8, 12, 512, 64], [8, 12, 512, 64], [8, 12, 512, 64], "float16",
             mask=[8, 1, 1, 512], mask_dtype="bool"),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--sizes", choices=["check", "speed", "all"], default="all")
    args = ap.parse_args()
    cases = []
    if args.sizes in ("check", "all"):
        cases += check_cases()
    if args.sizes in ("speed", "all"):
        cases += speed_cases()
    for name, text in cases:
        os.makedirs(os.path.join(args.out, name), exist_ok=True)
        with open(os.path.join(args.out, name, "graph.toml"), "w") as f:
            f.write(text)
    print(f"wrote {len(cases)} case(s) to {args.out}")


if __name__ == "__main__":
    main()
