#!/usr/bin/env python3
"""One decoding step with a static KV cache on the GPU machine: Kiln's compiled step
(`kiln.compile` of transformers' export for on-device runtimes, the cache kept as state)
against the same exported step in eager and under Inductor (`torch.compile` of the exported
program's module), launched directly and under CUDA graphs (Kiln's mode="reduce-overhead"
against Inductor's), in interleaved rounds (precision_child's timing). The memory floor is
the weights and the cache read once at the machine's copy bandwidth (measured here).

    PYTHONPATH=python KILN_HOST=bench/gpu/ab/NAME/host python3 bench/gpu/decode_step.py \\
        [--models gpt2,llama] [--dtypes fp32,bf16] [--batches 1,8] [--cache 1024] [--position 512] [--out FILE]

`gpt2` is GPT-2 small (124 M); `llama` the 170 M Llama-style model of issue "LLM decoding" (1024
hidden, 8 layers, 16 heads, 4 key/value heads). Random weights: the time does not depend on them.
Each step writes position `--position` of the cache and attends over the whole cache.
`--no-cache` times instead the one-token step without a cache (the model's forward on one token,
exported with use_cache=False): Kiln under CUDA graphs against Inductor's reduce-overhead.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent / "tools"))
from precision_child import interleaved, setup, sync  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def model(name: str, dtype, cache: int):
    if name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        m = GPT2LMHeadModel(GPT2Config(n_positions=cache))
    else:
        from transformers import LlamaConfig, LlamaForCausalLM

        m = LlamaForCausalLM(LlamaConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=8,
                                         num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
                                         max_position_embeddings=cache))
    return m.eval().to("cuda", dtype)


def copy_bandwidth() -> float:
    """Bytes per second of a device-to-device copy of 1 GiB (read and written)."""
    from precision_child import bench

    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = bench(lambda: dst.copy_(src), 100)
    return 2 * src.numel() / (ms / 1e3)


def floor_ms(m, step, bandwidth: float) -> float:
    """The weights and the state Kiln keeps (the cache) read once, in milliseconds."""
    weights = sum(p.numel() * p.element_size() for p in m.parameters())
    state = sum(t.numel() * t.element_size() for t in step.state.values())
    return (weights + state) / bandwidth * 1e3


def row(name: str, dtype: str, batch: int, a, bandwidth: float) -> str:
    import kiln
    from generate import export_step

    m = model(name, DTYPES[dtype], a.cache)
    ep = export_step(m, a.cache, "cuda", batch)
    start = time.perf_counter()
    step = kiln.compile(ep, device="cuda")
    compile_s = time.perf_counter() - start
    graphed = kiln.compile(ep, device="cuda", mode="reduce-overhead")
    eager = ep.module()
    inductor = torch.compile(ep.module())
    inductor_graphs = torch.compile(ep.module(), mode="reduce-overhead")
    ids = torch.full((batch, 1), 7, dtype=torch.int64, device="cuda")
    pos = torch.tensor([a.position], device="cuda")
    kwargs = {"input_ids": ids, "cache_position": pos}
    with torch.no_grad():
        want = eager(**kwargs)
        got = step(**kwargs)
        got_graphed = graphed(**kwargs)
        for _ in range(3):  # cudagraph trees record on a later call
            inductor(**kwargs)
            inductor_graphs(**kwargs)
        sync()
        got = got[0] if isinstance(got, (tuple, list)) else got
        want = want[0] if isinstance(want, (tuple, list)) else want
        got_graphed = got_graphed[0] if isinstance(got_graphed, (tuple, list)) else got_graphed
        err = float((got.float() - want.float()).abs().max() / want.float().abs().max())
        err_g = float((got_graphed.float() - want.float()).abs().max() / want.float().abs().max())
        ms = interleaved({"kiln": lambda: step(**kwargs), "eager": lambda: eager(**kwargs),
                          "inductor": lambda: inductor(**kwargs), "kiln_g": lambda: graphed(**kwargs),
                          "inductor_g": lambda: inductor_graphs(**kwargs)}, a.rep)
    floor = floor_ms(m, step, bandwidth)
    return (f"| {name} | {dtype} | {batch} | {a.cache} | {ms['kiln']:.3f} | {ms['inductor']:.3f} | {ms['eager']:.3f} | "
            f"{ms['kiln'] / ms['inductor']:.2f} | {ms['kiln_g']:.3f} | {ms['inductor_g']:.3f} | "
            f"{ms['kiln_g'] / ms['inductor_g']:.2f} | {floor:.3f} | {ms['kiln_g'] / floor:.2f} | "
            f"{err:.1e} / {err_g:.1e} | {compile_s:.1f} |")


class NoCacheStep(torch.nn.Module):
    """The model's forward on the given tokens without a cache, returning the logits."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m(input_ids=input_ids, use_cache=False).logits


def no_cache_row(name: str, dtype: str, a) -> str:
    """The one-token forward without a cache, under CUDA graphs: Kiln against Inductor."""
    import kiln

    m = model(name, DTYPES[dtype], a.cache)
    ids = torch.full((1, 1), 7, dtype=torch.int64, device="cuda")
    step = NoCacheStep(m).eval()
    with torch.no_grad():
        graphed = kiln.compile(step, (ids,), device="cuda", mode="reduce-overhead")
        inductor = torch.compile(step, mode="reduce-overhead")
        want = step(ids)
        got = graphed(ids)
        for _ in range(3):
            inductor(ids)
        sync()
        err = float((got.float() - want.float()).abs().max() / want.float().abs().max())
        ms = interleaved({"kiln_g": lambda: graphed(ids), "inductor_g": lambda: inductor(ids)}, a.rep)
    return (f"| {name} | {dtype} | no cache | {ms['kiln_g']:.3f} | {ms['inductor_g']:.3f} | "
            f"{ms['kiln_g'] / ms['inductor_g']:.2f} | {err:.1e} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="gpt2,llama")
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--cache", type=int, default=1024)
    p.add_argument("--position", type=int, default=512)
    p.add_argument("--no-cache", action="store_true", help="the one-token step without a cache, under graphs")
    p.add_argument("--rep", type=float, default=200, help="ms per column per round")
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    setup()
    if a.no_cache:
        print("| model | dtype | step | kiln graphs ms | inductor reduce-overhead ms | kiln / inductor | error vs eager |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for name in a.models.split(","):
            for dtype in a.dtypes.split(","):
                print(no_cache_row(name, dtype, a), flush=True)
        return
    bandwidth = copy_bandwidth()
    lines = [f"# bench/gpu/decode_step.py, {time.strftime('%Y-%m-%d %H:%M')}: {torch.cuda.get_device_name(0)}, "
             f"torch {torch.__version__}; position {a.position}; median of interleaved rounds; copy "
             f"bandwidth {bandwidth / 1e12:.2f} TB/s",
             "| model | dtype | batch | cache | kiln ms | inductor ms | eager ms | kiln / inductor | kiln graphs ms | "
             "inductor reduce-overhead ms | graphs: kiln / inductor | floor ms | kiln graphs / floor | "
             "error vs eager (direct / graphs) | kiln compile s |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    print("\n".join(lines), flush=True)
    for name in a.models.split(","):
        for dtype in a.dtypes.split(","):
            for batch in (int(b) for b in a.batches.split(",")):
                try:
                    lines.append(row(name, dtype, batch, a, bandwidth))
                except Exception as e:  # noqa: BLE001 (one row's failure is reported; the others still run)
                    lines.append(f"| {name} | {dtype} | {batch} | {a.cache} | failed: {type(e).__name__}: "
                                 f"{str(e)[:200]} |")
                print(lines[-1], flush=True)
                if a.out:
                    a.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
