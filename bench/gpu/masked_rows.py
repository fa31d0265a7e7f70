#!/usr/bin/env python3
"""Attention with queries whose keys are all masked out, on the GPU: Kiln's fused kernel
(KILN_ATTENTION=kiln) against PyTorch's scaled_dot_product_attention, which gives zeros for
such rows. Bool and additive masks (PyTorch takes no mask with is_causal), float32, bfloat16 and
float16, a few key lengths (one block of keys and several).

    PYTHONPATH=python KILN_HOST=bench/gpu/ab/NAME/host python3 bench/gpu/masked_rows.py [--out FILE]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.nn.functional as F

os.environ["KILN_ATTENTION"] = "kiln"


class Masked(torch.nn.Module):
    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def case(dtype, seq: int, additive: bool) -> tuple[float, bool, bool]:
    """(max |Kiln - PyTorch| / max |PyTorch|, whether Kiln has NaN, whether a masked row is zeros)."""
    import kiln

    gen = torch.Generator().manual_seed(seq)
    q, k, v = (torch.randn(2, 4, seq, 64, generator=gen).to("cuda", dtype) for _ in range(3))
    keep = torch.rand(2, 1, seq, seq, generator=gen) > 0.5
    keep[:, :, 1] = False  # query 1 keeps no key
    keep[1, :, seq - 1] = False
    mask = keep.cuda()
    if additive:
        mask = torch.zeros(keep.shape, dtype=dtype).masked_fill(~keep, float("-inf")).cuda()
    module = Masked()
    want = module(q, k, v, mask)
    got = kiln.compile(module, (q, k, v, mask), device="cuda")(q, k, v, mask)
    err = ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()
    return err, bool(got.isnan().any()), bool((got[:, :, 1] == 0).all())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    lines = [f"# bench/gpu/masked_rows.py: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
             "Kiln's fused attention kernel forced (KILN_ATTENTION=kiln)",
             "| dtype | keys | mask | rel. error vs PyTorch | NaN in Kiln's | masked row zeros |",
             "| --- | --- | --- | --- | --- | --- |"]
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for seq in (16, 200):
            for additive in (False, True):
                err, nan, zeros = case(dtype, seq, additive)
                lines.append(f"| {str(dtype)[6:]} | {seq} | {'additive' if additive else 'bool'} | "
                             f"{err:.1e} | {nan} | {zeros} |")
                print(lines[-1], flush=True)
    if a.out:
        a.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
