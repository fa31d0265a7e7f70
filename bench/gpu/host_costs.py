#!/usr/bin/env python3
"""Host microseconds per call of each step a generated `output_code.py` makes on the GPU, on this
machine's CPU: where a model's call is bound by the host (many small kernels, a decoding step),
these are what it costs. Each step is called in a loop of tiny work, so the device never holds
the host back; the figure is the median over rounds.

    python3 bench/gpu/host_costs.py [--out FILE]

Steps: a Triton kernel's launch through Triton's `binary[grid](...)` and straight through its
launcher (as kiln_runtime.Launches makes it) and through Inductor's static launcher, `torch.mm`
with and without `out=`, `torch.addmm`, a fresh buffer, a view (`reinterpret_tensor`), the device
guard and `set_device`, the raw stream, a size-and-stride check, and MobileNetV2's convolutions.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import triton
import triton.language as tl


@triton.jit
def _copy(src, dst, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + i, tl.load(src + i, mask=i < n), mask=i < n)


def per_call_us(fn, calls: int = 2000, rounds: int = 7) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(times)


def steps() -> dict:
    dev = torch.device("cuda", 0)
    src = torch.randn(64, device=dev)
    dst = torch.empty_like(src)
    a = torch.randn(16, 16, device=dev, dtype=torch.bfloat16)
    b = torch.randn(16, 16, device=dev, dtype=torch.bfloat16)
    bias = torch.randn(16, device=dev, dtype=torch.bfloat16)
    out = torch.empty(16, 16, device=dev, dtype=torch.bfloat16)
    stream = torch._C._cuda_getCurrentRawStream(0)
    binary = _copy[(1,)](src, dst, 64, BLOCK=64)  # Triton's JIT gives the CompiledKernel it ran
    binary._init_handles()
    launch_triton = binary[(1, 1, 1)]
    run, function, packed = binary.run, binary.function, binary.packed_metadata

    def lean():
        run(1, 1, 1, stream, function, packed, None, None, None, src, dst, 64, 64)

    static = _static_launch(binary, src, dst, stream)
    conv = _conv_steps(dev)
    guards = torch._C._dynamo.guards
    empty = guards._empty_strided_cuda
    view = guards._reinterpret_tensor
    check = getattr(guards, "assert_size_stride", None)
    x = torch.empty(4, 16, 16, device=dev)
    return {
        "triton launch, binary[grid](...)": lambda: launch_triton(src, dst, 64, 64, stream=stream),
        "triton launch, binary[grid] made per call": lambda: binary[(1, 1, 1)](src, dst, 64, 64, stream=stream),
        "triton launch, straight to its launcher": lean,
        "triton launch, Inductor's static launcher (its run)": static,
        "torch.mm(a, b, out=)": lambda: torch.mm(a, b, out=out),
        "torch.mm(a, b)": lambda: torch.mm(a, b),
        "torch.addmm(bias, a, b)": lambda: torch.addmm(bias, a, b),
        "torch.addmm(bias, a, b, out=)": lambda: torch.addmm(bias, a, b, out=out),
        "a fresh buffer (_empty_strided_cuda)": lambda: empty((4, 16, 16), (256, 16, 1), torch.float32),
        "a view (_reinterpret_tensor)": lambda: view(x, (64, 16), (16, 1), 0),
        "torch.cuda._DeviceGuard(0) entered": lambda: _guarded(),
        "torch.cuda.set_device(0)": lambda: torch.cuda.set_device(0),
        "the raw stream": lambda: torch._C._cuda_getCurrentRawStream(0),
        "assert_size_stride (torch's C++)": (lambda: check(x, (4, 16, 16), (256, 16, 1))) if check else None,
        **conv,
    }


def _static_launch(binary, src, dst, stream):
    """A launch through Inductor's launcher of a Triton binary in torch's C++ (`_StaticCudaLauncher`),
    or None where this torch has none."""
    import tempfile

    try:
        from torch._inductor.runtime.static_triton_launcher import StaticallyLaunchedCudaKernel
        if not hasattr(binary, "_cubin_path"):  # set where Inductor compiles; written from the raw cubin below
            binary._cubin_path = None
        kernel = StaticallyLaunchedCudaKernel(binary)
        kernel.reload_cubin_from_raw(str(Path(tempfile.mkdtemp()) / "copy.cubin"))
        kernel.load_kernel(0)
    except Exception as error:  # a torch without it, or of another shape
        print(f"# no static launcher: {type(error).__name__}: {error}")
        return None
    return lambda: kernel.run(1, 1, 1, stream, src, dst, 64)


def _conv_steps(dev) -> dict:
    """A depthwise and a pointwise convolution of MobileNetV2's channels in bfloat16, channels-last
    (tiny images: the device never holds the host back), as
    the wrapper calls ATen (torch.convolution), and cuDNN's entry point straight."""
    x = torch.randn(1, 96, 4, 4, device=dev, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    dw = torch.randn(96, 1, 3, 3, device=dev, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    pw = torch.randn(24, 96, 1, 1, device=dev, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    steps = {
        "depthwise torch.convolution": lambda: torch.convolution(x, dw, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 96),
        "pointwise torch.convolution": lambda: torch.convolution(x, pw, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1),
        "pointwise aten.convolution.default": lambda: torch.ops.aten.convolution.default(
            x, pw, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1),
    }
    cudnn = getattr(torch, "cudnn_convolution", None)
    if cudnn is not None:
        steps["pointwise torch.cudnn_convolution"] = lambda: cudnn(x, pw, [0, 0], [1, 1], [1, 1], 1, False, False, True)
    return steps


def _guarded():
    with torch.cuda._DeviceGuard(0):
        pass


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    lines = [f"# bench/gpu/host_costs.py: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
             f"Triton {triton.__version__}; host us per call, median of 7 rounds of 2000",
             "| step | us |", "| --- | --- |"]
    for name, fn in steps().items():
        lines.append(f"| {name} | {'—' if fn is None else format(per_call_us(fn), '.2f')} |")
        print(lines[-1], flush=True)
    if a.out:
        a.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
