#!/usr/bin/env python3
"""Kiln's `_grouped_mm` (a mixture of experts' product) against PyTorch's, one op at a time.

For each case (rows, K, N, groups, dtype): rows routed to groups at random and sorted, as a
mixture of experts sorts its (token, expert) pairs; `kiln.compile` of the one op, checked against
the product computed in float32 (largest error over the largest value), then the median time of
Kiln's call and of `torch._grouped_mm` (CUDA events, in this process).

    PYTHONPATH=python KILN_HOST=bench/gpu/ab/NAME/host python3 bench/gpu/grouped_mm.py [--out FILE]

Needs a CUDA device and PyTorch.
"""

from __future__ import annotations

import argparse

import torch

from moe import add_row, timed  # bench/gpu/moe.py, beside this file

# rows, K, N, groups: decoding batches (fewer than 16 rows: Kiln's reduction over K, not its
# kernel) and prefills of Mixtral-, OLMoE- and Qwen3-MoE-like layers.
CASES = [(2, 4096, 28672, 8), (16, 4096, 28672, 8), (8, 2048, 2048, 64), (256, 4096, 28672, 8), (2048, 4096, 28672, 8), (2048, 14336, 4096, 8),
         (64, 2048, 2048, 64), (1024, 2048, 2048, 64), (8192, 2048, 2048, 64), (8192, 1024, 2048, 64),
         (1024, 2048, 1536, 128), (4096, 768, 2048, 128), (17, 48, 56, 3)]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
TOLERANCE = {"bf16": 2e-2, "fp16": 1e-2, "fp32": 1e-4}


class GroupedMm(torch.nn.Module):
    """The product as transformers' experts make it: weights in nn.Linear's layout, transposed."""

    def forward(self, a, w, offs):
        return torch._grouped_mm(a, w.transpose(-2, -1), offs)


def case(rows, k, n, groups, dtype) -> str:
    import kiln

    torch.manual_seed(0)
    dt = DTYPES[dtype]
    a = torch.randn(rows, k, device="cuda", dtype=dt)
    w = torch.randn(groups, n, k, device="cuda", dtype=dt) / k**0.5  # nn.Linear's layout
    b = w.transpose(-2, -1)
    experts = torch.sort(torch.randint(0, groups, (rows,), device="cuda")).values
    offs = torch.cumsum(torch.bincount(experts, minlength=groups), 0).to(torch.int32)
    want = torch.cat([a[s:e].float() @ b[g].float() for g, (s, e) in
                      enumerate(zip([0] + offs[:-1].tolist(), offs.tolist()))])
    compiled = kiln.compile(GroupedMm(), (a, w, offs))
    got = compiled(a, w, offs)
    error = ((got.float() - want).abs().max() / want.abs().max()).item()
    ok = "ok" if error <= TOLERANCE[dtype] else "MISMATCH"
    t_kiln = timed(lambda: compiled(a, w, offs), 20)
    try:
        t_torch = f"{timed(lambda: torch._grouped_mm(a, b, offs), 20):.3f}"
    except RuntimeError as e:  # PyTorch's kernel takes some dtypes and devices only
        t_torch = f"- ({str(e).splitlines()[0][:60]})"
    return f"| {rows} | {k} | {n} | {groups} | {dtype} | {error:.1e} {ok} | {t_kiln:.3f} | {t_torch} |"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # PyTorch's _grouped_mm takes bfloat16 alone on CUDA (its meta function refuses others at
    # export); models in other dtypes reach Kiln's kernel through transformers' fallback op.
    p.add_argument("--dtypes", default="bf16")
    p.add_argument("--out")
    a = p.parse_args()
    lines = [f"# {torch.cuda.get_device_name()}, torch {torch.__version__}",
             "| rows | K | N | groups | dtype | error | Kiln ms | torch._grouped_mm ms |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    print("\n".join(lines), flush=True)
    for dtype in a.dtypes.split(","):
        for rows, k, n, groups in CASES:
            try:
                line = case(rows, k, n, groups, dtype)
            except Exception as error:  # noqa: BLE001 (a failure is its row of the table)
                line = f"| {rows} | {k} | {n} | {groups} | {dtype} | {type(error).__name__}: {str(error)[:200]} |"
            add_row(lines, line, a.out)


if __name__ == "__main__":
    main()
