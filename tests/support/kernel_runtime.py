#!/usr/bin/env python3
"""Exercises output_code.py's kernel runtime (KernelSet) without torch or a GPU.

Usage: kernel_runtime.py OUTPUT_CODE [--no-compile-here]

Runs the part of the file before the wrapper (the kernels, KERNEL_META and the
loading of kiln_runtime.py beside it; it needs only Triton), builds the
runtime's KernelSet as an import does, and
gets every kernel's binary as a first launch would. Checks that each is kept
in $KILN_CACHE_DIR/triton. Prints one line per kernel: NAME, then `found` when
the cache held it as the KernelSet was made, else `compiled` (by the worker
pool or this process). With --no-compile-here, compiling in this process is
an error.
"""

import os
import sys

MARK = "# The wrapper: everything from here on needs torch."


def main() -> int:
    path, strict = sys.argv[1], "--no-compile-here" in sys.argv[2:]
    text = open(path).read()
    if MARK not in text:
        print(f"{path}: no line `{MARK}`", file=sys.stderr)
        return 1
    head = text.split(MARK)[0]
    scope = {"__file__": path, "__name__": "kiln_kernel_runtime_test"}
    # Compiled under the file's own name: the kernels' source lines are the file's.
    exec(compile(head, path, "exec"), scope)
    kernel_set = scope["kiln_runtime"].KernelSet
    if strict:
        def no_compile(*args):
            raise AssertionError("compiled a kernel the cache holds")
        kernel_set.compile = staticmethod(no_compile)
    kernels = kernel_set(scope)
    found = {name for name, kernel in kernels._kernels.items() if kernel.folder is not None}
    store = os.path.join(os.environ["KILN_CACHE_DIR"], "triton")
    for name, meta in scope["KERNEL_META"].items():
        if meta.get("autotuned"):
            continue
        binary = kernels.binary(kernels._kernels[name])
        assert binary.name == name, (binary.name, name)
        assert binary.kernel, f"{name}: no binary"
        kept = os.path.join(store, kernels._kernels[name].key)
        assert os.path.isfile(os.path.join(kept, name + ".json")), f"{name}: not kept in {store}"
        print(name, "found" if name in found else "compiled")
    # With every binary made, no launch would wait: none is compiling (what the
    # attention's choice asks before launching Kiln's kernel).
    busy = [name for name, kernel in kernels._kernels.items() if kernel.compiling]
    assert not busy, f"still compiling after their binaries were made: {busy}"
    return 0


if __name__ == "__main__":
    sys.exit(main())
