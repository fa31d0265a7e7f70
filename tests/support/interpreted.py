"""What the scripts that run generated Triton kernels under Triton's interpreter on the
cpu share (`interpret_attention.py`, `interpret_conv.py`, `interpret_side_by_side.py`,
`interpret_position_mask.py`): importing this module turns the interpreter on before
Triton loads, and makes its bfloat16 `tl.dot` right; `call_of` runs a generated file's
whole `call` on the cpu."""

import contextlib
import importlib.util
import os
import sys
import types

os.environ["TRITON_INTERPRET"] = "1"


def _widen_bfloat16_dots():
    """Triton's interpreter keeps bfloat16 as its 16 bits in uint16 arrays and multiplies a
    `tl.dot`'s operands as they are: bfloat16 products come out as products of integers
    (Triton 3.9). Its `create_dot` is wrapped to widen bfloat16 operands to float32 first,
    exactly (a bfloat16 is the top half of a float32), as a GPU's tensor cores read them."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder.create_dot, "kiln_widened", False):
        return
    original = builder.create_dot

    def widened(handle):
        if handle.dtype != tl.bfloat16:
            return handle
        bits = handle.data.astype(np.uint32) << np.uint32(16)
        return interpreter.TensorHandle(bits.view(np.float32), tl.float32)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return original(self, widened(a), widened(b), d, input_precision, max_num_imprecise_acc)

    create_dot.kiln_widened = True
    builder.create_dot = create_dot


_widen_bfloat16_dots()


def check(what, ok, detail=""):
    """Prints `ok: what`, or fails with `detail`."""
    if not ok:
        print(f"FAILED: {what} {detail}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what}")


def kernels_of(source):
    """The `@triton.jit` functions of an output_code.py's text, by name: everything
    before the runtime's loader, run."""
    scope = {}
    exec(compile(source[: source.index("def _kiln_runtime")], "kernels", "exec"), scope)
    return scope


def attention_dtype(kernels):
    """The dtype the attention kernels of `kernels` (`kernels_of`'s scope) were compiled for
    (their query's), and the error its output may have against PyTorch's float32 attention
    over the same values: float32 sums; in 16 bits, the output's rounding and, in the
    `tl.dot` form, the probabilities' before their product with the values (as flash
    attention rounds them): 2^-9 (bfloat16) or 2^-12 (float16) of sums of |v| up to about 4."""
    import torch

    pointer = next(m["signature"]["Q"] for n, m in kernels["KERNEL_META"].items()
                   if n.startswith("kiln_flash_attention"))
    dtype = {"*fp32": torch.float32, "*fp16": torch.float16, "*bf16": torch.bfloat16}[pointer]
    return dtype, {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2}[dtype]


class Launcher:
    """`KERNELS.name[grid](*args, stream=...)` as the wrapper writes it, on the interpreter."""

    def __init__(self, fn):
        self.fn = fn

    def __getitem__(self, grid):
        return lambda *args, stream=None: self.fn[grid](*args)


class OnCpu:
    """`torch` as the wrapper uses it, its device module (`torch.cuda`, `torch.gxu`) a
    stand-in: the device guard does nothing, and buffers are the cpu's."""

    def __init__(self):
        import torch

        self.torch = torch
        self.device = types.SimpleNamespace(_DeviceGuard=lambda _: contextlib.nullcontext(),
                                            set_device=lambda _: None)

    def __getattr__(self, name):
        torch = self.torch
        return self.device if name == "cuda" or not hasattr(torch, name) else getattr(torch, name)


def filled(size, stride, dtype):
    """A buffer whose every element is NaN, or a sentinel integer."""
    import torch

    out = torch.empty_strided(size, stride, dtype=dtype)
    out.fill_(float("nan") if dtype.is_floating_point else -12345)
    return out


class KilnAttention:
    """`ATTENTION.run` as the wrapper calls it, always Kiln's kernels: the output, of the
    query's size but the value's head, starts as NaNs."""

    @staticmethod
    def run(_, kiln, operands, shape=None):
        import torch

        q, _, v = operands()[:3]
        size = tuple(q.shape[:-1]) + (v.shape[-1],)
        out = filled(size, torch.empty(size, device="meta").stride(), q.dtype)
        kiln(out)
        return out


def call_of(path):
    """The `call` of the generated file at `path`, its kernels run by the interpreter on
    the cpu, its buffers the cpu's and starting as NaNs (or a sentinel integer), its
    constants read from the weights file beside it by the file's own runtime."""
    import torch

    source = open(path).read()
    spec = importlib.util.spec_from_file_location(
        "kiln_runtime", os.path.join(os.path.dirname(os.path.abspath(path)), "kiln_runtime.py"))
    runtime = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runtime)
    scope = kernels_of(source)
    env = {
        "__file__": path,
        "torch": OnCpu(),
        "DEVICE": torch.device("cpu"),
        "kiln_runtime": runtime,
        "align_inputs": lambda args, aligned: None,
        "in_layout": runtime.in_layout,
        # A float32 product with a bias is the library's epilogue (no timing on the cpu).
        "BIASES": runtime.BiasEpilogue(torch.addmm, torch.mm, lambda: None, None, 1 << 12,
                                       environ={"KILN_BIAS": "epilogue"}),
        "get_raw_stream": lambda _: 0,
        "empty_strided_device": filled,
        "reinterpret_tensor": lambda base, size, stride, offset: base.as_strided(
            size, stride, base.storage_offset() + offset),
        "ATTENTION": KilnAttention,
        "KERNELS": types.SimpleNamespace(
            **{n: Launcher(f) for n, f in scope.items() if n.startswith("kiln_")}),
    }
    start = min(source.find(mark) for mark in ("WEIGHTS_FILE = ", "INPUT_NAMES = ") if mark in source)
    exec(compile(source[start: source.index("def make_inputs(")], path, "exec"), env)
    return lambda args: env["call"](list(args), check=None)
