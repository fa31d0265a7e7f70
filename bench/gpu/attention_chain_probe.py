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
launch alone. Also timed: `last_combines`, the one-row kernel whose last program of a head
combines the head's partial results (a ticket from a count a head, set back to 0 by that
program), without the combining launch. Prints a markdown table: us per layer (attention and
combine) and the error of each form against PyTorch's attention.

  KILN_HOST=bench/gpu/ab/NAME/host python3 bench/gpu/attention_chain_probe.py [--dtype bf16] [--rep 200]
  python3 bench/gpu/attention_chain_probe.py --check   # last_combines in Triton's interpreter
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


@triton.jit
def last_combines(Q, K, V, M, P, C, O, sm_scale, S, H: tl.constexpr, E: tl.constexpr, SPLITS: tl.constexpr,
                  BLOCK_N: tl.constexpr, PDL: tl.constexpr):
    # Kiln's one-row split attention (batch 1, one query row, heads of E, unit inner strides,
    # an additive mask) whose last program of each head combines the head's partial results:
    # each program stores its range's values, running max and sum to P, then takes a ticket
    # from the head's count C (acquire and release); the program holding the last ticket reads
    # the head's SPLITS partial results (past L1), writes the head's output and sets the count
    # back to 0 for the next call. No combining launch.
    LOG2E: tl.constexpr = 1.4426950408889634
    pid = tl.program_id(0)
    split = pid % SPLITS
    h = pid // SPLITS
    offs_n0 = tl.arange(0, BLOCK_N)
    offs_e = tl.arange(0, E)
    chunk = tl.cdiv(tl.cdiv(S, SPLITS), BLOCK_N) * BLOCK_N
    lo = split * chunk
    hi = tl.minimum(S, lo + chunk)
    if PDL:
        LINE: tl.constexpr = 1024 // K.dtype.element_ty.primitive_bitwidth
        pf_e = tl.arange(0, (E + LINE - 1) // LINE) * LINE
        for start_n in range(lo, hi, BLOCK_N):
            offs_n = start_n + offs_n0
            keep = ((offs_n < hi)[:, None] & (pf_e[None, :] < E)).to(tl.int32)
            at = h * S * E + offs_n[:, None] * E + pf_e[None, :]
            tl.inline_asm_elementwise(
                "{ .reg .pred %p; setp.ne.b32 %p, $3, 0; @%p prefetch.global.L2 [$1]; "
                "@%p prefetch.global.L2 [$2]; mov.u32 $0, 0; }",
                "=r,l,l,r", [K + at, V + at, keep], dtype=tl.int32, is_pure=False, pack=1)
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    q = tl.load(Q + h * E + offs_e).to(tl.float32) * (sm_scale * LOG2E)
    m_i = tl.max(tl.full([BLOCK_N], float("-inf"), tl.float32), 0)
    l_i = tl.sum(tl.zeros([BLOCK_N], dtype=tl.float32), 0)
    acc = tl.zeros([E], dtype=tl.float32)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        keep = offs_n < hi
        k = tl.load(K + h * S * E + offs_n[:, None] * E + offs_e[None, :], mask=keep[:, None], other=0.0)
        v = tl.load(V + h * S * E + offs_n[:, None] * E + offs_e[None, :], mask=keep[:, None], other=0.0)
        mv = tl.load(M + h * S + offs_n, mask=keep, other=0)
        qk = tl.sum(k.to(tl.float32) * q[None, :], 1) + mv.to(tl.float32) * LOG2E
        qk = tl.where(keep, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 0))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(qk - m_use)
        alpha = tl.math.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 0)
        acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), 0)
        m_i = m_new
    part = (h * SPLITS + split) * (E + 2)
    tl.store(P + part + offs_e, acc)
    tl.store(P + part + E, m_i)
    tl.store(P + part + E + 1, l_i)
    tl.debug_barrier()
    ticket = tl.atomic_add(C + h, 1, sem="acq_rel")
    if ticket == SPLITS - 1:
        offs_s = tl.arange(0, SPLITS)
        parts = (h * SPLITS + offs_s) * (E + 2)
        m_s = tl.load(P + parts + E, cache_modifier=".cg")
        l_s = tl.load(P + parts + E + 1, cache_modifier=".cg")
        m = tl.max(m_s, 0)
        w = tl.math.exp2(m_s - tl.where(m == float("-inf"), 0.0, m))
        l_sum = tl.sum(l_s * w, 0)
        accs = tl.load(P + parts[:, None] + offs_e[None, :], cache_modifier=".cg")
        y = tl.sum(accs * w[:, None], 0) / tl.where(l_sum == 0.0, 1.0, l_sum)
        tl.store(O + h * E + offs_e, y.to(O.dtype.element_ty))
        tl.store(C + h, 0)


def check_last_combines() -> int:
    """`last_combines` in Triton's interpreter on the CPU (no prefetch, no dependent launch),
    two calls in a row, against PyTorch's attention: 0 where both match and the counts are
    back to 0."""
    torch.manual_seed(0)
    heads, cache, head, splits = 4, 256, 64, 8
    q = torch.randn(1, heads, 1, head)
    k, v = torch.randn(1, heads, cache, head), torch.randn(1, heads, cache, head)
    mask = torch.zeros(1, heads, 1, cache)
    mask[..., 100:] = float("-inf")
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    scratch = torch.full((heads * splits * (head + 2),), float("nan"))
    counts = torch.zeros(heads, dtype=torch.int32)
    failed = 0
    for call in range(2):
        out = torch.full((1, heads, 1, head), float("nan"))
        last_combines[(heads * splits,)](q, k, v, mask, scratch, counts, out, head ** -0.5, cache, heads, head,
                                         splits, 32, False)
        error = (out - want).abs().max().item()
        reset = counts.tolist() == [0] * heads
        print(f"last_combines, call {call + 1}: error {error:.1e}, counts back to 0: {reset}")
        failed += not (error < 1e-5 and reset)
    return failed


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

    counts = torch.zeros(HEADS, device="cuda", dtype=torch.int32)
    contiguous_mask = mask.contiguous()

    def fused(splits):
        def layer(i):
            last_combines[(HEADS * splits,)](q, ks[i], vs[i], contiguous_mask, scratch, counts, out, HEAD ** -0.5,
                                             CACHE, HEADS, HEAD, splits, CACHE // splits, True, num_warps=1,
                                             launch_pdl=True)
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
