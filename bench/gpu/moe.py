#!/usr/bin/env python3
"""Mixture-of-experts language models through `torch.compile(model, backend="kiln")`, against eager
and Inductor, at their real layer sizes (fewer layers, random weights, seed 0).

Each model runs a forward pass over one sequence of T tokens (T = 1 is a decoding step's shape
without a cache; larger T a prefill's). Per model, dtype and T: the largest |Kiln - eager| over
the largest |eager| of the logits, and Inductor's the same way (a token whose router's two best
experts are near a tie in 16 bits may take another expert in either, so this error can be large
for both), then the median time of a call (CUDA events, `--rep` calls
after warm-up) of eager, Inductor (`torch.compile` default mode) and Kiln, all in this process,
and Kiln's time over Inductor's.

    PYTHONPATH=python KILN_HOST=bench/gpu/ab/NAME/host python3 bench/gpu/moe.py \\
        [--models mixtral,olmoe,qwen3_moe] [--dtypes bf16] [--tokens 1,128] [--out FILE] [--profile N]

With --profile N it also lists, per row, the N kernels that take the most device time in a call
of Kiln's and of Inductor's (torch.profiler over five calls), to say where a ratio comes from.

Needs a CUDA device, PyTorch and transformers.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def models():
    """name: a function building the model at its real layer sizes, two layers."""
    import transformers as T

    def mixtral():  # Mixtral-8x7B's layers
        return T.MixtralForCausalLM(T.MixtralConfig(
            vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
            num_key_value_heads=8, num_hidden_layers=2, num_local_experts=8, num_experts_per_tok=2))

    def olmoe():  # OLMoE-1B-7B's layers
        return T.OlmoeForCausalLM(T.OlmoeConfig(
            vocab_size=50304, hidden_size=2048, intermediate_size=1024, num_attention_heads=16,
            num_key_value_heads=16, num_hidden_layers=2, num_experts=64, num_experts_per_tok=8))

    def qwen3_moe():  # Qwen3-30B-A3B's layers
        return T.Qwen3MoeForCausalLM(T.Qwen3MoeConfig(
            vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
            num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_hidden_layers=2,
            num_experts=128, num_experts_per_tok=8))

    return {"mixtral": mixtral, "olmoe": olmoe, "qwen3_moe": qwen3_moe}


def timed(call, rep: int) -> float:
    """The median milliseconds of `call()` over `rep` calls, after three."""
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    times = []
    for _ in range(rep):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def add_row(lines: list, line: str, out: str | None) -> None:
    """Prints a row of the table and writes the table so far to `out`, so a run cut short keeps its rows."""
    print(line, flush=True)
    lines.append(line)
    if out:
        with open(out, "w") as f:
            f.write("\n".join(lines) + "\n")


def kernels(call, top: int) -> list[str]:
    """The `top` kernels of most device time in one call of `call()` (the mean over five calls)."""
    from torch.profiler import ProfilerActivity, profile

    call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            call()
        torch.cuda.synchronize()
    rows = sorted(prof.key_averages(), key=lambda e: e.device_time_total, reverse=True)
    total = sum(e.device_time_total for e in rows) / 5
    out = [f"#   all kernels: {total / 1000:.3f} ms a call"]
    for e in rows[:top]:
        out.append(f"#   {e.device_time_total / 5 / 1000:7.3f} ms {e.count // 5:4d}x {e.key[:110]}")
    return out


def one(name: str, make, dtype: str, tokens: int, rep: int, top: int = 0) -> str:
    from kiln import backend as kiln_backend  # the package's backend, installed or on PYTHONPATH

    torch.manual_seed(0)
    with torch.device("cuda"):
        model = make().eval().to(DTYPES[dtype])
    ids = torch.randint(3, 1000, (1, tokens), device="cuda")
    call = lambda m: m(input_ids=ids, use_cache=False).logits  # noqa: E731
    torch._dynamo.reset()
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        want = call(model)
        start = time.time()
        kiln = torch.compile(model, backend=kiln_backend)
        got = call(kiln)
        first = time.time() - start
        eager_fallback = [w for w in caught if "Kiln cannot compile" in str(w.message)]
        error = ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()
        inductor = torch.compile(model)
        ind_error = ((call(inductor).float() - want.float()).abs().max() / want.float().abs().max()).item()
        t_eager = timed(lambda: call(model), rep)
        t_kiln = timed(lambda: call(kiln), rep)
        t_ind = timed(lambda: call(inductor), rep)
        profiles = []
        if top:
            profiles = ([f"# {name} {dtype} {tokens} tokens, Kiln:"] + kernels(lambda: call(kiln), top)
                        + [f"# {name} {dtype} {tokens} tokens, Inductor:"] + kernels(lambda: call(inductor), top))
    note = " (a graph fell back to eager)" if eager_fallback else ""
    del model, kiln, inductor
    torch.cuda.empty_cache()
    return "\n".join(profiles + [
        f"| {name} | {dtype} | {tokens} | {error:.1e} | {ind_error:.1e} | {t_eager:.3f} | {t_ind:.3f} | {t_kiln:.3f} | "
        f"{t_kiln / t_ind:.2f} | {first:.0f} s{note} |"])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="mixtral,olmoe,qwen3_moe")
    p.add_argument("--dtypes", default="bf16")
    p.add_argument("--tokens", default="1,128")
    p.add_argument("--rep", type=int, default=20)
    p.add_argument("--out")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="also list the N kernels of most device time in Kiln's call and in Inductor's")
    a = p.parse_args()
    lines = [f"# {torch.cuda.get_device_name()}, torch {torch.__version__}",
             "| model | dtype | tokens | Kiln's error | Inductor's error | eager ms | Inductor ms | Kiln ms | "
             "Kiln / Inductor | Kiln's first call |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    print("\n".join(lines), flush=True)
    built = models()
    for name in a.models.split(","):
        for dtype in a.dtypes.split(","):
            for tokens in map(int, a.tokens.split(",")):
                try:
                    line = one(name, built[name], dtype, tokens, a.rep, a.profile)
                except Exception as error:  # noqa: BLE001 (a failure is its row of the table)
                    line = f"| {name} | {dtype} | {tokens} | {type(error).__name__}: {str(error)[:200]} |"
                add_row(lines, line, a.out)


if __name__ == "__main__":
    main()
