"""What the scripts that run generated Triton kernels under Triton's interpreter on the
cpu share (`interpret_attention.py`, `interpret_conv.py`, `interpret_side_by_side.py`):
importing this module turns the interpreter on before Triton loads, and makes its
bfloat16 `tl.dot` right."""

import os
import sys

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
