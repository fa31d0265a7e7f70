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
launch alone. Also timed: `last_combines`, Kiln's one-row kernel rewritten so that the last
program of each (batch, head, row) combines its partial results (a ticket from a count a row,
set back to 0 by that program), without the combining launch. Prints a markdown table: us
per layer (attention and combine) and the error of each form against PyTorch's attention.

  KILN_HOST=bench/gpu/ab/NAME/host python3 bench/gpu/attention_chain_probe.py [--dtype bf16] [--rep 200]
  KILN_HOST=HOST python3 bench/gpu/attention_chain_probe.py --check   # last_combines in the interpreter
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


# What `last_combines` adds to Kiln's one-row split kernel: after a program stores its
# partial results, it takes a ticket from its (batch, head, row)'s count C (acquire and
# release); the holder of the last ticket reads the row's SPLITS partial results (past L1),
# combines them as Kiln's combining kernel does, writes the output R, and sets the count
# back to 0 for the next call.
LAST_COMBINES = """        tl.debug_barrier()
        ticket = tl.atomic_add(C + bh * L + row, 1, sem="acq_rel")
        if ticket == SPLITS - 1:
            offs_s = tl.arange(0, SPLITS)
            parts = ((bh * L + row) * SPLITS + offs_s) * (EV + 2)
            m_s = tl.load(O + parts + EV, cache_modifier=".cg")
            l_s = tl.load(O + parts + EV + 1, cache_modifier=".cg")
            m = tl.max(m_s, 0)
            w = tl.math.exp2(m_s - tl.where(m == float("-inf"), 0.0, m))
            l_sum = tl.sum(l_s * w, 0)
            accs = tl.load(O + parts[:, None] + offs_ev[None, :], mask=offs_ev[None, :] < EV, other=0.0,
                           cache_modifier=".cg")
            y = tl.sum(accs * w[:, None], 0) / tl.where(l_sum == 0.0, 1.0, l_sum)
            tl.store(R + (bh // H) * rob + (bh % H) * roh + row * rom + offs_ev * roe, y.to(R.dtype.element_ty),
                     mask=offs_ev < EV)
            tl.store(C + bh * L + row, 0)
"""
PARTIALS_STORED = "        tl.store(O + part + EV + 1, l_i)\n"


def last_combines_text(row_kernel: str) -> str:
    """`kiln_probe_last_combines`: Kiln's one-row split kernel (its text, `row_kernel`)
    taking, after its own parameters, the counts C and the output R with its strides, and
    combining in the last program of each row ([`LAST_COMBINES`]): no combining launch."""
    name = row_kernel[row_kernel.index("def ") + 4:row_kernel.index("(")]
    head_end = row_kernel.index("):\n")
    text = (row_kernel[:head_end] + ", C, R, rob, roh, rom, roe" + row_kernel[head_end:]).replace(
        f"def {name}(", "def kiln_probe_last_combines(")
    assert text.count(PARTIALS_STORED) == 1, "Kiln's one-row kernel no longer ends as this probe expects"
    return text.replace(PARTIALS_STORED, PARTIALS_STORED + LAST_COMBINES)


def kiln_kernels(dtype: str, pdl: bool = True):
    """Kiln's split attention kernels (by form), its combining kernel, and `last_combines`
    (the one-row kernel combining in its last program), compiled with programmatic dependent
    launch on (`pdl`). The graph is float32: for 16-bit inputs its `tl.dot`s lose their
    float32 precision argument, as Kiln writes them for 16-bit graphs."""
    host = os.environ.get("KILN_HOST", str(ROOT / "target/release/host"))
    out = Path(tempfile.mkdtemp())
    subprocess.run([host, "compile", str(ROOT / "tests/graphs/attention_one_query_long_cache.toml"),
                    "--device", "cuda", "-o", str(out)], check=True, capture_output=True)
    source = (out / "output_code.py").read_text()
    source = source[: source.index("def _kiln_runtime")].replace(
        "KILN_PDL = tl.constexpr(False)", f"KILN_PDL = tl.constexpr({pdl})")
    if dtype != "fp32":
        source = re.sub(r', input_precision="[a-z0-9]+"', "", source)
    one_row = re.search(r"@triton\.jit\ndef kiln_flash_attention_\d+\(.*?# Split flash attention for one query row"
                        r".*?(?=\n\n\n|\Z)", source, re.S)
    source += "\n\n@triton.jit\n" + last_combines_text(one_row.group(0)[len("@triton.jit\n"):] + "\n")
    path = out / "kernels.py"  # Triton's jit reads its functions' source from a file
    path.write_text(source)
    sys.path.insert(0, str(out))
    import kernels  # noqa: E402

    forms = {}
    for text in source.split("@triton.jit\n"):
        name = re.match(r"def (kiln_flash_(attention|combine)_\d+)\(", text)
        if name and name.group(2) == "combine":
            forms.setdefault("combine", getattr(kernels, name.group(1)))
        elif name:
            form = "row" if "one query row a program" in text else "dot"
            forms.setdefault(form, getattr(kernels, name.group(1)))
    forms["last"] = kernels.kiln_probe_last_combines
    return forms


def kiln_args(q, k, v, mask, scratch, out, block_m: int, splits: int, prefetch: int) -> tuple:
    """The arguments of Kiln's split kernels over one (batch 1) query row of q's heads, the
    keys split into `splits` ranges of whole blocks."""
    heads, cache, head = k.shape[1], k.shape[2], k.shape[3]
    return (q, k, v, mask, scratch, head ** -0.5, *q.stride(), *k.stride(), *v.stride(), *mask.stride(),
            *out.stride(), 1, heads, 1, cache, 1, head, head, block_m, cache // splits, head, head, 0, 2, splits,
            prefetch, 0)


def check_last_combines() -> int:
    """`last_combines` in Triton's interpreter on the CPU (float32, no prefetch, no dependent
    launch), two calls in a row, against PyTorch's attention: 0 where both match and the counts
    are back to 0."""
    last = kiln_kernels("fp32", pdl=False)["last"]
    torch.manual_seed(0)
    heads, cache, head, splits = 4, 256, 64, 8
    q = torch.randn(1, heads, 1, head)
    k, v = torch.randn(1, heads, cache, head), torch.randn(1, heads, cache, head)
    mask = torch.zeros(1, 1, 1, cache)
    mask[..., 100:] = float("-inf")
    mask = mask.expand(1, heads, 1, cache)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    scratch = torch.full((heads * splits * (head + 2),), float("nan"))
    counts = torch.zeros(heads, dtype=torch.int32)
    failed = 0
    for call in range(2):
        out = torch.full((1, heads, 1, head), float("nan"))
        last[(heads * splits,)](*kiln_args(q, k, v, mask, scratch, out, 1, splits, 0), counts, out, *out.stride())
        error = (out - want).abs().max().item()
        reset = counts.tolist() == [0] * heads
        print(f"last_combines, call {call + 1}: error {error:.1e}, counts back to 0: {reset}")
        failed += not (error < 1e-5 and reset)
    return failed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    ap.add_argument("--rep", type=int, default=200)
    ap.add_argument("--check", action="store_true",
                    help="check `last_combines` in Triton's interpreter on the CPU (no GPU) and exit")
    args = ap.parse_args()
    if args.check:
        if os.environ.get("TRITON_INTERPRET") != "1":  # read when the kernels are defined
            os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "TRITON_INTERPRET": "1"})
        sys.exit(check_last_combines())
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
        block_m = 1 if form == "row" else 16
        kernel, combine = forms[form], forms["combine"]

        def layer(i):
            kernel[(HEADS * splits,)](*kiln_args(q, ks[i], vs[i], mask, scratch, out, block_m, splits, prefetch),
                                      num_warps=warps, num_stages=stages, launch_pdl=True)
            combine[(HEADS,)](scratch, out, *out.stride(), HEADS, 1, HEADS, splits, HEAD, HEAD,
                              num_warps=1, launch_pdl=True)
        return layer

    counts = torch.zeros(HEADS, device="cuda", dtype=torch.int32)

    def fused(splits):
        def layer(i):
            forms["last"][(HEADS * splits,)](*kiln_args(q, ks[i], vs[i], mask, scratch, out, 1, splits, 1), counts,
                                             out, *out.stride(), num_warps=1, launch_pdl=True)
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
        if splits >= 16:
            variants[f"row, {splits} splits, 1 warp, the last program combining (`last_combines`)"] = fused(splits)
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
