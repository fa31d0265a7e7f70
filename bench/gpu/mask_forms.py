#!/usr/bin/env python3
"""What PyTorch's scaled_dot_product_attention costs with BERT's padding mask as a bool
mask (converted to an additive one inside every call) and as an additive mask made once,
per backend, against Kiln's choice of timing (the device's clock).

BERT-base at batch 8 x 512 tokens in 16 bits: q, k, v `[8, 12, 512, 64]` read as views
of the `[8, 512, 768]` projections, the mask `[8, 1, 512, 512]` materialized.

    python3 bench/gpu/mask_forms.py [--out FILE]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out")
    args = p.parse_args()
    lines = [f"# {torch.cuda.get_device_name()}, torch {torch.__version__}"]
    B, H, L, E = 8, 12, 512, 64
    for dtype in (torch.bfloat16, torch.float16):
        proj = [torch.randn(B, L, H * E, device="cuda", dtype=dtype) for _ in range(3)]
        q, k, v = (t.view(B, L, H, E).transpose(1, 2) for t in proj)
        lengths = torch.randint(L // 2, L + 1, (B,), device="cuda")
        keep = (torch.arange(L, device="cuda")[None, :] < lengths[:, None])[:, None, None, :]
        mask = keep.expand(B, 1, L, L).contiguous()
        additive = torch.zeros(B, 1, L, L, device="cuda", dtype=dtype).masked_fill(~mask, float("-inf"))
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        forms = {
            "bool mask": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
            "additive mask": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=additive),
            "conversion alone": lambda: torch.zeros(B, 1, L, L, device="cuda", dtype=dtype).masked_fill(~mask, float("-inf")),
        }
        for name, fn in forms.items():
            t = triton.testing.do_bench(fn, rep=100)
            lines.append(f"{str(dtype)[6:]:9} {name:18} default backend: {t * 1e3:6.1f} us")
        for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
            for name, m in (("bool mask", mask), ("additive mask", additive)):
                try:
                    with sdpa_kernel([backend]):
                        out = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
                        err = (out.float() - ref.float()).abs().max().item()
                        t = triton.testing.do_bench(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=m), rep=100)
                    lines.append(f"{str(dtype)[6:]:9} {name:18} {backend.name:20}: {t * 1e3:6.1f} us (err {err:.1e})")
                except RuntimeError as e:
                    lines.append(f"{str(dtype)[6:]:9} {name:18} {backend.name:20}: unavailable ({str(e).splitlines()[0][:80]})")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
