#!/usr/bin/env python3
"""Kiln's flash-attention kernel under other launch configs and kernel variants,
against PyTorch's own scaled_dot_product_attention, on realistic shapes.

The kernel text is taken from a Kiln output_code.py (any case with an attention,
e.g. one that `bench/gpu/models_prepare.sh` or `attention_cases.py` compiled), so
what is timed is what Kiln generates. Variants are made from that text:

- `ieee` / `tf32x3`: the float32 products' precision (exact FMA products, or three
  TF32 tensor-core products whose sum keeps float32's accuracy);
- `flat`: one program per row block instead of the grid-stride loop;
- `unit`: the innermost strides (sqe, ske, sve, smn, soe) as constexpr 1, so loads
  along the head dim vectorise.

For each shape it prints every variant x config's µs, its error against a float64
reference, and PyTorch's time (the kernel Inductor calls).

Usage: attention_tune.py --kernel-from OUTPUT_CODE.py [--shapes NAME ...] [--jobs N]
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import math
import os
import re
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch
from triton.testing import do_bench

# name: (batch, heads, kv heads, L, S, E, mask: none | bool | add | causal, dtype)
SHAPES = {
    "gpt2_bool_f32": (8, 2, 2, 512, 512, 64, "bool", torch.float32),
    "llama_gqa_bool_f32": (8, 4, 2, 512, 512, 32, "bool", torch.float32),
    "t5_add_f32": (8, 4, 4, 512, 512, 32, "add", torch.float32),
    "vit_none_f32": (8, 3, 3, 197, 197, 64, "none", torch.float32),
    "gpt2s_causal_bf16": (8, 12, 12, 512, 512, 64, "causal", torch.bfloat16),
}
UNIT_STRIDES = ["sqe", "ske", "sve", "smn", "soe"]


def kernel_source(path: Path) -> str:
    text = path.read_text()
    m = re.search(r"@triton\.jit\ndef (kiln_flash_attention_\d+)\(.*?(?=\n\n\n|\n[A-Za-z_@])", text, re.S)
    if not m:
        sys.exit(f"{path}: no kiln_flash_attention kernel")
    return m.group(0).replace(m.group(1), "attn")


def variant_source(src: str, precision: str, flat: bool, unit: bool) -> str:
    src = src.replace('input_precision="ieee"', f'input_precision="{precision}"')
    if precision != "ieee" and "input_precision" not in src:
        src = src.replace("tl.dot(q, k)", f'tl.dot(q, k, input_precision="{precision}")')
        src = src.replace("tl.dot(p.to(v.dtype), v)", f'tl.dot(p.to(v.dtype), v, input_precision="{precision}")')
    if flat:
        src = src.replace("    for pid in range(tl.program_id(0), total, tl.num_programs(0)):",
                          "    pid = tl.program_id(0)\n    if pid < total:")
    if unit:
        for s in UNIT_STRIDES:
            src = re.sub(rf"\b{s}\b(?=[,)])", f"{s}: tl.constexpr", src, count=1)
    return "import triton\nimport triton.language as tl\n\n" + src + "\n"


def load(src: str, tag: str):
    folder = Path(tempfile.gettempdir()) / "kiln_attention_tune"
    folder.mkdir(exist_ok=True)
    path = folder / f"attn_{tag}.py"
    if not path.exists() or path.read_text() != src:
        path.write_text(src)
    spec = importlib.util.spec_from_file_location(f"attn_{tag}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.attn


def make_inputs(shape):
    b, h, hk, l, s, e, mask, dtype = shape
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b, h, l, e, device="cuda", generator=gen).to(dtype)
    k = torch.randn(b, hk, s, e, device="cuda", generator=gen).to(dtype)
    v = torch.randn(b, hk, s, e, device="cuda", generator=gen).to(dtype)
    m = None
    if mask == "bool":
        m = torch.rand(b, 1, l, s, device="cuda", generator=gen) > 0.2
        m[..., 0] = True
    elif mask == "add":
        m = torch.randn(1, h, l, s, device="cuda", generator=gen).to(dtype)
    return q, k, v, m


def reference(q, k, v, m, causal: bool, group: int):
    q, k, v = q.double(), k.double(), v.double()
    if group > 1:
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if m is not None and m.dtype == torch.bool:
        scores = scores.masked_fill(~m, float("-inf"))
    elif m is not None:
        scores = scores + m.double()
    return torch.softmax(scores, -1) @ v


def launch_args(shape, q, k, v, m, o):
    b, h, hk, l, s, e, mask, dtype = shape
    group = h // hk
    mm = m if m is not None else q
    ms = [0, 0, 0, 0]
    if m is not None:
        full = m.expand(b, h, l, s)
        ms = list(full.stride())
    scale = 1.0 / math.sqrt(e)
    args = [q, k, v, mm, o, scale, *q.stride(), *k.stride(), *v.stride(), *ms, *o.stride(), b, h, l, s]
    block_e = max(16, 1 << (e - 1).bit_length())
    kind = {"none": 0, "causal": 0, "bool": 1, "add": 2}[mask]
    consts = dict(GROUP=group, E=e, EV=e, BLOCK_E=block_e, BLOCK_EV=block_e, CAUSAL=int(mask == "causal"),
                  MASK_KIND=kind)
    return args, consts


def configs():
    for bm, bn, w, st in itertools.product([32, 64, 128], [32, 64], [4, 8], [1, 2, 3]):
        if bm == 128 and w == 4:
            continue
        yield dict(BLOCK_M=bm, BLOCK_N=bn), w, st


VARIANTS = [("ieee", False, False), ("ieee", False, True), ("tf32x3", False, True), ("tf32x3", True, True)]
CACHE: dict = {}


def case(shape_name: str):
    """Inputs and the float64 reference of a shape, made once per process."""
    if shape_name not in CACHE:
        shape = SHAPES[shape_name]
        q, k, v, m = make_inputs(shape)
        want = reference(q, k, v, m, shape[6] == "causal", shape[1] // shape[2])
        CACHE[shape_name] = (q, k, v, m, want)
    return CACHE[shape_name]


def run_one(job):
    """Compiles (warm) or times one (shape, variant, config)."""
    src, shape_name, variant, cfg, warps, stages, timed = job
    torch.cuda.set_device(0)
    shape = SHAPES[shape_name]
    precision, flat, unit = variant
    if shape[-1] != torch.float32 and precision != "ieee":
        return None
    tag = f"{precision}_{int(flat)}_{int(unit)}"
    fn = load(variant_source(src, precision, flat, unit), tag)
    q, k, v, m, want = case(shape_name)
    o = torch.empty_like(q)
    args, consts = launch_args(shape, q, k, v, m, o)
    b, h, hk, l, s, e, _, _ = shape
    programs = b * h * -(-l // cfg["BLOCK_M"])
    grid = (programs if flat else min(programs, 132 * 8), 1, 1)
    try:
        call = lambda: fn[grid](*args, **consts, **cfg, num_warps=warps, num_stages=stages)
        call()
        torch.cuda.synchronize()
        if not timed:
            return None
        ms = do_bench(call, warmup=5, rep=30)
    except Exception as ex:  # noqa: BLE001 (out of shared memory etc.)
        return (shape_name, variant, cfg, warps, stages, float("nan"), f"{type(ex).__name__}")
    err = ((o.double() - want).abs().max() / want.abs().max()).item()
    return (shape_name, variant, cfg, warps, stages, ms, f"{err:.1e}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernel-from", type=Path, required=True)
    p.add_argument("--shapes", nargs="*", default=list(SHAPES))
    p.add_argument("--variants", nargs="*", default=None, help="e.g. tf32x3_1_1 (precision_flat_unit)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--top", type=int, default=6)
    a = p.parse_args()
    src = kernel_source(a.kernel_from)
    variants = VARIANTS
    if a.variants:
        variants = [v for v in VARIANTS if f"{v[0]}_{int(v[1])}_{int(v[2])}" in a.variants]
    jobs = [(src, sh, var, cfg, w, st) for sh in a.shapes for var in variants for cfg, w, st in configs()]
    # Compile in parallel processes (Triton's cache on disk), then time in this one.
    ctx = torch.multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(a.jobs, mp_context=ctx) as pool:
        list(pool.map(run_one, [j + (False,) for j in jobs], chunksize=4))
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for sh in a.shapes:
        shape = SHAPES[sh]
        q, k, v, m = make_inputs(shape)
        b, h, hk, l, s, e, mask, dtype = shape
        kw = dict(is_causal=mask == "causal", enable_gqa=h != hk)
        if m is not None:
            kw["attn_mask"] = m
        torch.backends.cuda.matmul.allow_tf32 = False
        ref_ms = do_bench(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, **kw), rep=30)
        rows = [r for r in (run_one(j + (True,)) for j in jobs if j[1] == sh) if r is not None]
        print(f"== {sh} {tuple(shape[:6])} {mask} {dtype}: torch sdpa {ref_ms * 1000:.1f} µs")
        for var in variants:
            mine = [r for r in rows if r[1] == var and not math.isnan(r[5])]
            if not mine:
                continue
            mine.sort(key=lambda r: r[5])
            cur = next((r for r in mine if r[2] == dict(BLOCK_M=64, BLOCK_N=64) and r[3] == 4 and r[4] == 2), None)
            name = f"{var[0]}{' flat' if var[1] else ''}{' unit' if var[2] else ''}"
            now = f"; 64x64 w4 s2 {cur[5] * 1000:.1f} µs" if cur else ""
            print(f"  {name}{now}")
            for r in mine[: a.top]:
                print(f"    {r[5] * 1000:7.1f} µs  M{r[2]['BLOCK_M']} N{r[2]['BLOCK_N']} w{r[3]} s{r[4]}  err {r[6]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
