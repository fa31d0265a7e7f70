#!/usr/bin/env python3
"""Whether a torch call costs the host more inside a function dynamo calls (the function a
`torch.compile` backend returns) than outside it, and what state differs between the two.

    python3 bench/gpu/dynamo_region.py [--out FILE]

A backend returns a function that times a loop of small device calls (an out= add, a
convolution, a Triton launch straight through its launcher); the same function is then called
directly. Each figure is the median over calls of the loop's host us per device call.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host_costs import _copy  # noqa: E402


def state() -> dict:
    """The thread-local state a torch call depends on."""
    c = torch._C
    return {
        "grad": torch.is_grad_enabled(),
        "inference_mode": torch.is_inference_mode_enabled(),
        "dispatch tls include": str(c._dispatch_tls_local_include_set()),
        "dispatch tls exclude": str(c._dispatch_tls_local_exclude_set()),
        "torch function modes": c._len_torch_function_stack(),
        "dispatch modes": c._len_torch_dispatch_stack(),
        "torch function enabled": c._is_torch_function_enabled(),
        "autocast cuda": torch.is_autocast_enabled("cuda"),
        "profile/trace": (sys.getprofile() is not None, sys.gettrace() is not None),
        "cudnn benchmark": torch.backends.cudnn.benchmark,
        "current stream": torch.cuda.current_stream().cuda_stream if torch.cuda.is_available() else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    torch.set_grad_enabled(False)
    dev = torch.device("cuda", 0)
    x, y, z = (torch.randn(64, device=dev) for _ in range(3))
    image = torch.randn(1, 8, 8, 8, device=dev, dtype=torch.bfloat16)
    weight = torch.randn(8, 1, 3, 3, device=dev, dtype=torch.bfloat16)
    binary = _copy[(1,)](x, z, 64, BLOCK=64)
    binary._init_handles()
    run, function, packed = binary.run, binary.function, binary.packed_metadata
    stream = torch._C._cuda_getCurrentRawStream(0)
    loops = {
        "torch.add(out=)": lambda: torch.add(x, y, out=z),
        "depthwise torch.convolution": lambda: torch.convolution(image, weight, None, [1, 1], [1, 1], [1, 1],
                                                                  False, [0, 0], 8),
        "triton launch": lambda: run(1, 1, 1, stream, function, packed, None, None, None, x, z, 64, 64),
    }
    times: dict = {(name, where): [] for name in loops for where in ("outside", "inside")}
    seen: dict = {}

    def timed(where):
        seen[where] = state()
        for name, fn in loops.items():
            start = time.perf_counter()
            for _ in range(500):
                fn()
            times[(name, where)].append((time.perf_counter() - start) / 500 * 1e6)
            torch.cuda.synchronize()
        return (z,)

    class Tiny(torch.nn.Module):
        def forward(self, t):
            return t + 1

    compiled = torch.compile(Tiny(), backend=lambda gm, example: (lambda *args: timed("inside")))
    compiled(x)
    for _ in range(20):  # interleaved
        timed("outside")
        compiled(x)
    lines = [f"# bench/gpu/dynamo_region.py: {torch.cuda.get_device_name(0)}, torch {torch.__version__}",
             "| call | us outside dynamo | us inside |", "| --- | --- | --- |"]
    for name in loops:
        lines.append(f"| {name} | {statistics.median(times[(name, 'outside')]):.2f} | "
                     f"{statistics.median(times[(name, 'inside')]):.2f} |")
    differs = [f"{k}: {seen['outside'][k]} -> {seen['inside'][k]}" for k in seen["outside"]
               if seen["outside"][k] != seen["inside"][k]]
    lines.append("# state that differs inside: " + ("; ".join(differs) or "none"))
    print("\n".join(lines))
    if a.out:
        a.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
