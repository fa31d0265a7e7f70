#!/usr/bin/env python3
"""Tests the dynamic-shape checks of Kiln's kernel runtime (kiln_runtime.py) on their
own, without torch or a device: stand-in tensors of a shape and strides, as
`output_code.py` of a `--dynamic` compile hands them over.

Usage: runtime_dynamic.py KILN_RUNTIME_PY

Checks: `symbolic_input_check` reads each size from its input dim and returns the
values; refuses a size outside its range (SizeError naming the input, the dim and the
range) and an input with too few dims; refuses inputs that disagree on a size they
share, or a layout the kernels were not generated for, naming the input, and allows any
stride of a dim of size 1. `grid_of` picks the plugin's grid for the bucket of programs, and
`SizedLaunch` a kernel's variant and grid for the bucket of its sizes.
Prints `ok: WHAT` per check; exits 1 on the first failure.
"""

import importlib.util
import sys


def check(what, ok, detail=""):
    """Prints `ok: what`, or fails with `detail`."""
    if not ok:
        print(f"FAILED: {what} {detail}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what}")


class Tensor:
    """A tensor's shape and strides."""

    def __init__(self, shape, strides=None):
        self.shape = tuple(shape)
        if strides is None:
            strides, step = [], 1
            for d in reversed(shape):
                strides.insert(0, step)
                step *= max(d, 1)
        self._strides = tuple(strides)

    def size(self):
        return self.shape

    def stride(self):
        return self._strides

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n


class Torch:
    """A torch without `_C._dynamo`: the runtime takes its Python checks."""

    class _C:
        pass


def raised(fn, kind):
    """The message of the `kind` error `fn()` raises, or None."""
    try:
        fn()
    except kind as error:
        return str(error)
    return None


def main():
    spec = importlib.util.spec_from_file_location("kiln_runtime", sys.argv[1])
    rt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rt)
    # Two inputs `[batch, seq]` sharing both sizes, as BERT's ids and mask.
    names = ("input_ids", "attention_mask")
    symbols = (("ks0", "s43", 0, 0, 1, 16), ("ks1", "s53", 0, 1, 2, 64))

    def layouts(ks0, ks1):
        return ((ks0, ks1), (ks0, ks1)), ((ks1, 1), (ks1, 1))

    checked = rt.symbolic_input_check(Torch, names, symbols, layouts)
    got = checked((Tensor((3, 17)), Tensor((3, 17))))
    check("the sizes are read from the inputs' dims", got == [3, 17], got)
    got = checked((Tensor((16, 2)), Tensor((16, 2))))
    check("the ends of the ranges are in them", got == [16, 2], got)
    message = raised(lambda: checked((Tensor((4, 65)), Tensor((4, 65)))), rt.SizeError)
    check("a size past its range is refused with the input, the dim and the range",
          message is not None and "`input_ids` dim 1 is 65" in message and "s53 in 2..=64" in message, message)
    message = raised(lambda: checked((Tensor((0, 8)), Tensor((0, 8)))), rt.SizeError)
    check("a size below its range is refused", message is not None and "s43 in 1..=16" in message, message)
    check("a SizeError is a ValueError", issubclass(rt.SizeError, ValueError))
    message = raised(lambda: checked((Tensor((8,)), Tensor((8,)))), rt.SizeError)
    check("an input with too few dims is refused", message is not None and "has 1 dims" in message, message)
    message = raised(lambda: checked((Tensor((2, 8)), Tensor((2, 9)))), AssertionError)
    check("inputs that disagree on a size they share are refused, naming the input",
          message is not None and "attention_mask" in message, message)
    message = raised(lambda: checked((Tensor((2, 8), (1, 2)), Tensor((2, 8)))), AssertionError)
    check("a layout the kernels were not generated for is refused",
          message is not None and "input_ids" in message, message)
    got = checked((Tensor((1, 8), (99, 1)), Tensor((1, 8))))
    check("a dim of size 1 takes any stride", got == [1, 8], got)
    grids = ((1, 1, 1), (2, 1, 1), (4, 1, 1), (8, 1, 1))
    picks = [rt.grid_of(grids, n, 128) for n in (0, 1, 128, 129, 512, 513, 1 << 20)]
    want = [(1, 1, 1), (1, 1, 1), (1, 1, 1), (2, 1, 1), (4, 1, 1), (8, 1, 1), (8, 1, 1)]
    check("the grid is the bucket's that covers the programs, the last past them", picks == want, picks)
    sized_launches(rt)


class Launched:
    """A stand-in KERNELS: each `KERNELS.name[grid](*args, stream=s)` is recorded."""

    def __init__(self):
        self.calls, self.bound, self.readied = [], 0, []

    def ready(self, names):
        self.readied.append(list(names))

    def __getattr__(self, name):
        outer = self

        class Kernel:
            def __getitem__(self, grid):
                outer.bound += 1
                return lambda *args, stream: outer.calls.append((name, grid, args, stream))

        return Kernel()


def sized_launches(rt):
    """SizedLaunch launches, per bucket of the row count (an eighth of a power of two) and
    of the row length (a power of two), the variant the table names with its constexprs
    appended, on the bucket's grid; sizes past the table take its edge; each bucket is
    bound once."""
    keys = [rt.SizedLaunch.row_key(n) for n in (1, 2, 3, 4, 16, 17, 18, 19, 20, 1024, 1025, 1152, 1153)]
    check("a row count's key is an eighth of its power of two",
          keys == [0, 9, 18, 19, 39, 40, 40, 41, 41, 87, 88, 88, 89], keys)
    kernels = Launched()
    # Row counts from key 40 (17..18), row lengths from bucket 4 (9..16).
    table = (
        ((0, (1, 1, 1)), (1, (1, 1, 1))),
        ((0, (2, 1, 1)), (1, (2, 1, 1))),
        ((2, (4, 1, 1)), (2, (4, 1, 1))),
    )
    sized = rt.SizedLaunch(kernels, (("k", (1, 16)), ("k_v1", (1, 32)), ("k_v2", (4, 32))), 40, 4, table)
    sized(18, 16)("x", 18, 16, stream=7)
    sized(19, 17)("y", 19, 17, stream=7)
    sized(1 << 20, 1 << 20)("z", 1, 1, stream=8)
    sized(1, 1)("w", 1, 1, stream=8)
    sized(20, 20)("v", 20, 20, stream=9)
    want = [
        ("k", (1, 1, 1), ("x", 18, 16, 1, 16), 7),
        ("k_v1", (2, 1, 1), ("y", 19, 17, 1, 32), 7),
        ("k_v2", (4, 1, 1), ("z", 1, 1, 4, 32), 8),
        ("k", (1, 1, 1), ("w", 1, 1, 1, 16), 8),
        ("k_v1", (2, 1, 1), ("v", 20, 20, 1, 32), 9),
    ]
    check("a kernel of dynamic sizes launches its bucket's variant and grid", kernels.calls == want, kernels.calls)
    check("each bucket binds its launch once", kernels.bound == 4, kernels.bound)
    check("the first launch readies every variant, once", kernels.readied == [["k", "k_v1", "k_v2"]],
          kernels.readied)
    check("choice names the variant and grid", sized.choice(100, 2) == ("k_v2", (4, 1, 1)), sized.choice(100, 2))
    narrow_launches(rt, table)


def narrow_launches(rt, table):
    """A kernel of further forms launches, in the form the call says its sizes allow, its
    bucket's variant, each form bound apart; the first launch readies every variant of
    every form."""
    kernels = Launched()
    wide = (("k", (1, 16, 1)), ("k_v1", (1, 32, 1)), ("k_v2", (4, 32, 1)))
    narrow = (("k_i32", (1, 16, 0)), ("k_v1_i32", (1, 32, 0)), ("k_v2_i32", (4, 32, 0)))
    aligned = (("k_a16", (1, 16, 1)), ("k_v1_a16", (1, 32, 1)), ("k_v2_a16", (4, 32, 1)))
    sized = rt.SizedLaunch(kernels, wide, 40, 4, table, forms=(narrow, aligned, ()))
    sized(18, 16, 1)("x", 18, 16, stream=7)
    sized(18, 16, 0)("y", 18, 16, stream=7)
    sized(18, 16, 1)("z", 18, 16, stream=7)
    sized(18, 16, 2)("w", 18, 16, stream=7)
    want = [
        ("k_i32", (1, 1, 1), ("x", 18, 16, 1, 16, 0), 7),
        ("k", (1, 1, 1), ("y", 18, 16, 1, 16, 1), 7),
        ("k_i32", (1, 1, 1), ("z", 18, 16, 1, 16, 0), 7),
        ("k_a16", (1, 1, 1), ("w", 18, 16, 1, 16, 1), 7),
    ]
    check("a call launches its bucket's variant in the form its sizes allow", kernels.calls == want,
          kernels.calls)
    check("each form of a bucket binds once", kernels.bound == 3, kernels.bound)
    check("the first launch readies every variant of every form",
          kernels.readied == [["k", "k_v1", "k_v2", "k_i32", "k_v1_i32", "k_v2_i32", "k_a16", "k_v1_a16",
                               "k_v2_a16"]], kernels.readied)
    check("choice names the variant in its form", sized.choice(100, 2, 1) == ("k_v2_i32", (4, 1, 1)),
          sized.choice(100, 2, 1))

main()
