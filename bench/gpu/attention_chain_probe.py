#!/usr/bin/env python3
"""What a decoding step's split attention costs in a chain of dependent launches, by form:
Kiln's two split kernels (the `tl.dot` form of 16 query rows a tile, and the one-row form
of float32 sums, with and without its prefetch of keys and values before the wait), at
several split counts, warps and stages, each followed by its combining kernel, twelve
layers in a row under a CUDA graph, each launch a programmatic dependent of the one before
(as Kiln's runtime launches them on sm_90).

The kernels are Kiln's own: the script compiles tests/graphs/attention_one_query_long_cache
with the host named by KILN_HOST (default target/release/host) and takes both forms from its
output_code.py. The shapes are GPT-2 small's at batch 1: 12 heads of 64, a cache of 1024
positions of which the first 513 are kept by an additive mask (position 512). Each layer
reads its own cache. A chain of trivial kernels (wait, store one value) gives the cost of a
launch alone. Prints a markdown table: us per layer (attention and combine) and the error
of each form against PyTorch's attention.

  KILN_HOST=bench/gpu/ab/NAME/host python3 bench/gpu/attention_chain_probe.py [--dtype bf16] [--rep 200]
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import triton
import triton.language as tl
from graph_replays import best_replay_us, graphed

ROOT = Path(__file__).resolve().parents[2]
LAYERS, HEADS, HEAD, CACHE, POSITION = 12, 12, 64, 1024, 512


@triton.jit
def trivial(x, y):
    tl.extra.cuda.gdc_launch_dependents()
    tl.extra.cuda.gdc_wait()
    tl.store(y + tl.program_id(0), tl.load(x + tl.program_id(0)) + 1.0)


def kiln_kernels(dtype: str):
    """Kiln's split attention kernels (by form) and its combining kernel, compiled with
    programmatic dependent launch on. The graph is float32: for 16-bit inputs its `tl.dot`s
    lose their float32 precision argument, as Kiln writes them for 16-bit graphs."""
    host = os.environ.get("KILN_HOST", str(ROOT / "target/release/host"))
    out = Path(tempfile.mkdtemp())
    subprocess.run([host, "compile", str(ROOT / "tests/graphs/attention_one_query_long_cache.toml"),
                    "--device", "cuda", "-o", str(out)], check=True, capture_output=True)
    source = (out / "output_code.py").read_text()
    source = source[: source.index("def _kiln_runtime")].replace(
        "KILN_PDL = tl.constexpr(False)", "KILN_PDL = tl.constexpr(True)")
    if dtype != "fp32":
        source = re.sub(r', input_precision="[a-z0-9]+"', "", source)
    path = out / "kernels.py"  # Triton's jit reads its functions' source from a file
    path.write_text(source)
    sys.path.insert(0, str(out))
    import kernels  # noqa: E402

    forms = {}
    for name in dir(kernels):
        if name.startswith("kiln_flash_attention"):
            fn = getattr(kernels, name)
            form = "row" if "one query row a program" in fn.src else "dot"
            forms.setdefault(form, fn)
        if name.startswith("kiln_flash_combine"):
            forms.setdefault("combine", getattr(kernels, name))
    return forms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    ap.add_argument("--rep", type=int, default=200)
    args = ap.parse_args()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    forms = kiln_kernels(args.dtype)
    torch.manual_seed(0)
    q = torch.randn(1, HEADS, 1, HEAD, device="cuda", dtype=dtype)
    ks = [torch.randn(1, HEADS, CACHE, HEAD, device="cuda", dtype=dtype) for _ in range(LAYERS)]
    vs = [torch.randn(1, HEADS, CACHE, HEAD, device="cuda", dtype=dtype) for _ in range(LAYERS)]
    mask = torch.zeros(1, 1, 1, CACHE, device="cuda", dtype=dtype)
    mask[..., POSITION + 1:] = float("-inf")
    mask = mask.expand(1, HEADS, 1, CACHE)  # one row for every head, as the step's
    out = torch.empty(1, HEADS, 1, HEAD, device="cuda", dtype=dtype)
    want = torch.nn.functional.scaled_dot_product_attention(q.float(), ks[0].float(), vs[0].float(),
                                                            attn_mask=mask.float())
    scratch = torch.empty(HEADS * 64 * (HEAD + 2), device="cuda", dtype=torch.float32)

    def attention(form, splits, warps, stages, prefetch=0):
        block_n = CACHE // splits
        block_m = 1 if form == "row" else 16
        kernel, combine = forms[form], forms["combine"]

        def layer(i):
            k, v = ks[i], vs[i]
            kernel[(HEADS * splits,)](
                q, k, v, mask, scratch, HEAD ** -0.5,
                *q.stride(), *k.stride(), *v.stride(), *mask.stride(), *out.stride(),
                1, HEADS, 1, CACHE, 1, HEAD, HEAD, block_m, block_n, HEAD, HEAD, 0, 2, splits, prefetch, 0,
                num_warps=warps, num_stages=stages, launch_pdl=True)
            combine[(HEADS,)](scratch, out, *out.stride(), HEADS, 1, HEADS, splits, HEAD, HEAD,
                              num_warps=1, launch_pdl=True)
        return layer

    x = torch.zeros(1024, device="cuda")
    y = torch.zeros(1024, device="cuda")

    def trivial_layer(i):
        trivial[(HEADS * 16,)](x, y, num_warps=4, launch_pdl=True)
        trivial[(HEADS,)](y, x, num_warps=1, launch_pdl=True)

    variants = {"two trivial kernels (a launch's floor)": trivial_layer}
    for splits in (8, 16, 32, 64):
        for stages in (1, 3):
            variants[f"dot, {splits} splits, 4 warps, {stages} stages"] = attention("dot", splits, 4, stages)
        for warps in (1, 2, 4, 8):
            variants[f"row, {splits} splits, {warps} warps"] = attention("row", splits, warps, 1, 1)
        variants[f"row, {splits} splits, 1 warp, no prefetch"] = attention("row", splits, 1, 1, 0)
    errors = {}
    for name, layer in variants.items():
        layer(0)
        torch.cuda.synchronize()
        errors[name] = (out.float() - want).abs().max().item() if "trivial" not in name else 0.0
    chains = {name: (lambda layer=layer: [layer(i) for i in range(LAYERS)]) for name, layer in variants.items()}
    times = best_replay_us({name: graphed(chain) for name, chain in chains.items()}, args.rep)
    print(f"# attention_chain_probe: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"triton {triton.__version__}, {args.dtype}; {LAYERS} layers of {HEADS} heads of {HEAD}, "
          f"cache {CACHE}, position {POSITION}; best of 5 rounds of {args.rep} replays")
    print("| form | us per layer (attention + combine) | max error vs PyTorch |")
    print("| --- | --- | --- |")
    for name in variants:
        print(f"| {name} | {times[name] / LAYERS:.2f} | {errors[name]:.1e} |")


if __name__ == "__main__":
    main()
