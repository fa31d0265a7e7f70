#!/usr/bin/env python3
"""Split attention (flash-decoding) under real concurrency, many times over: Kiln's output_code.py
of tests/graphs/attention_one_query_long_cache.toml compiled for cuda (`host compile ... --device
cuda -o DIR`), called with fresh random inputs `--calls` times, each call's five attention results
checked against PyTorch's `scaled_dot_product_attention` in float32. A race between the programs
that write a row's partial results and whatever combines them (a row combined before all its
ranges were written, or never) shows as NaN or a large error in some call; the worst over all
calls is printed, and the exit status is 1 where any call is off by more than 1e-4.

    KILN_ATTENTION=kiln python3 bench/gpu/split_attention_stress.py DIR [--calls 2000]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--calls", type=int, default=2000)
    a = p.parse_args()
    spec = importlib.util.spec_from_file_location("split_stress", a.folder / "output_code.py")
    code = importlib.util.module_from_spec(spec)
    sys.modules["split_stress"] = code
    spec.loader.exec_module(code)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    shapes = {"q": [1, 4, 1, 64], "k": [1, 4, 1024, 64], "v": [1, 4, 1024, 64], "kg": [1, 2, 1024, 64],
              "q2": [1, 4, 2, 64]}
    worst, bad = 0.0, 0
    torch.manual_seed(0)
    for _ in range(a.calls):
        t = {n: torch.randn(*s, device="cuda") for n, s in shapes.items()}
        keep = torch.rand(1, 1, 1, 1024, device="cuda") > 0.3
        got = code.call([t["q"], t["k"], t["v"], t["kg"], t["q2"], keep])
        want = [sdpa(t["q"], t["k"], t["v"]), sdpa(t["q"], t["kg"], t["kg"], enable_gqa=True),
                sdpa(t["q2"], t["k"], t["v"], is_causal=True), sdpa(t["q"], t["k"], t["v"], attn_mask=keep),
                sdpa(t["q"], t["k"], t["v"], is_causal=True)]
        err = max(float((g - w).abs().max()) for g, w in zip(got, want))
        err = float("inf") if err != err else err
        worst = max(worst, err)
        bad += err > 1e-4
    print(f"split attention stress: {a.calls} calls of 5 steps on {torch.cuda.get_device_name(0)}; "
          f"worst error {worst:.2e}; calls over 1e-4: {bad}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
