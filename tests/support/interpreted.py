"""What the scripts that run generated Triton kernels under Triton's interpreter on the
cpu share (`interpret_attention.py`, `interpret_side_by_side.py`): importing this
module turns the interpreter on before Triton loads."""

import os
import sys

os.environ["TRITON_INTERPRET"] = "1"


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
