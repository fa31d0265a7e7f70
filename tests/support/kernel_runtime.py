#!/usr/bin/env python3
"""Exercises output_code.py's kernel runtime (KernelSet) without torch or a GPU.

Usage: kernel_runtime.py OUTPUT_CODE (cold|warm)

Runs the part of the file before the wrapper (the kernels, KERNEL_META and the
runtime; it needs only Triton), builds its KernelSet as an import does, and
gets every kernel's binary as a first launch would. `cold` expects them
compiled (by the worker pool or here) and kept in $KILN_CACHE_DIR/triton;
`warm` expects every one loaded from there, and fails if anything compiles.
Prints one line per kernel: NAME BINARY-NAME SOURCE.
"""

import os
import sys

MARK = "# The wrapper: everything from here on needs torch."


def main() -> int:
    path, mode = sys.argv[1], sys.argv[2]
    text = open(path).read()
    if MARK not in text:
        print(f"{path}: no line `{MARK}`", file=sys.stderr)
        return 1
    head = text.split(MARK)[0]
    scope = {"__file__": path, "__name__": "kiln_kernel_runtime_test"}
    # Compiled under the file's own name: the kernels' source lines are the file's.
    exec(compile(head, path, "exec"), scope)
    kernel_set = scope["KernelSet"]
    if mode == "warm":
        def no_compile(*args):
            raise AssertionError("compiled a kernel the cache holds")
        kernel_set.compile = staticmethod(no_compile)
    kernels = kernel_set(scope)
    store = os.path.join(os.environ["KILN_CACHE_DIR"], "triton")
    for name, meta in scope["KERNEL_META"].items():
        if meta.get("autotuned"):
            continue
        binary = kernels.binary(kernels._kernels[name])
        assert binary.name == name, (binary.name, name)
        assert binary.kernel, f"{name}: no binary"
        found = os.path.join(store, kernels._kernels[name].key)
        assert os.path.isfile(os.path.join(found, name + ".json")), f"{name}: not kept in {store}"
        print(name, binary.name, "cache" if mode == "warm" else "compiled")
    return 0


if __name__ == "__main__":
    sys.exit(main())
