#!/usr/bin/env python3
"""Exercises output_code.py's kernel runtime (KernelSet) without torch or a GPU.

Usage: kernel_runtime.py OUTPUT_CODE [--no-compile-here] [--lent N]
       kernel_runtime.py OUTPUT_CODE --ptx ARCH

Runs the part of the file before the wrapper (the kernels, KERNEL_META and the
loading of kiln_runtime.py beside it; it needs only Triton), builds the
runtime's KernelSet as an import does, and
gets every kernel's binary as a first launch would. Checks that each is kept
in $KILN_CACHE_DIR/triton. Prints one line per kernel: NAME, then `found` when
the cache held it as the KernelSet was made, else `compiled` (by the worker
pool or this process), then `dependent` where the binary launches as a
programmatic dependent of the kernel before it (Triton's launch_pdl), else
`plain`. With --no-compile-here, compiling in this process is
an error. With --lent N, N workers of the kiln package's pool (python/kiln/
_workers.py) are started ahead for the file's target, and only they may
compile: the KernelSet must take them, and they compile every kernel.
With --ptx ARCH, compiles each kernel in this process for CUDA's sm_ARCH
(KernelSet.compile, as a worker does) and prints NAME, the number of
`griddepcontrol` instructions in its PTX, and `dependent` or `plain`.
"""

import os
import subprocess
import sys
import time

MARK = "# The wrapper: everything from here on needs torch."


def main() -> int:
    path, strict = sys.argv[1], "--no-compile-here" in sys.argv[2:]
    with open(path) as f:
        text = f.read()
    if MARK not in text:
        print(f"{path}: no line `{MARK}`", file=sys.stderr)
        return 1
    head = text.split(MARK)[0]
    scope = {"__file__": path, "__name__": "kiln_kernel_runtime_test"}
    # Compiled under the file's own name: the kernels' source lines are the file's.
    exec(compile(head, path, "exec"), scope)
    kernel_set = scope["kiln_runtime"].KernelSet
    if "--ptx" in sys.argv:
        return ptx(scope, kernel_set, int(sys.argv[sys.argv.index("--ptx") + 1]))
    if strict:
        def no_compile(*args):
            raise AssertionError("compiled a kernel the cache holds")
        kernel_set.compile = staticmethod(no_compile)
    lent = int(sys.argv[sys.argv.index("--lent") + 1]) if "--lent" in sys.argv else 0
    if lent:
        pool = start_pool(kernel_set, scope, lent)
    kernels = kernel_set(scope)
    found = {name for name, kernel in kernels._kernels.items() if kernel.folder is not None}
    if lent:
        assert not pool._IDLE, f"the KernelSet left {len(pool._IDLE)} started worker(s)"
        for name, kernel in kernels._kernels.items():
            assert kernel.done.wait(120), f"{name}: no lent worker compiled it"
    store = os.path.join(os.environ["KILN_CACHE_DIR"], "triton")
    for name, meta in scope["KERNEL_META"].items():
        if meta.get("autotuned"):
            continue
        binary = kernels.binary(kernels._kernels[name])
        assert binary.name == name, (binary.name, name)
        assert binary.kernel, f"{name}: no binary"
        kept = os.path.join(store, kernels._kernels[name].key)
        assert os.path.isfile(os.path.join(kept, name + ".json")), f"{name}: not kept in {store}"
        print(name, "found" if name in found else "compiled", launched(binary))
    return 0


def launched(binary):
    return "dependent" if binary.metadata.launch_pdl else "plain"


def ptx(scope, kernel_set, arch):
    """Each kernel compiled here for sm_ARCH: its griddepcontrol instructions."""
    from triton.backends.compiler import GPUTarget

    target = GPUTarget("cuda", arch, 32)
    for name, meta in scope["KERNEL_META"].items():
        if meta.get("autotuned"):
            continue
        binary = kernel_set.compile(scope[name], meta, target)
        print(name, binary.asm["ptx"].count("griddepcontrol"), launched(binary))
    return 0


def start_pool(kernel_set, scope, count):
    """Starts `count` workers ahead (kiln._workers, as the torch.compile backend does)
    for the file's target, and makes the KernelSet unable to start its own."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path.insert(0, os.path.join(repo, "python"))
    from kiln import _workers

    t = kernel_set.target(scope["TRITON_TARGET"])
    os.environ["KILN_COMPILE_WORKERS"] = str(count)
    assert _workers.start([t.backend, t.arch, t.warp_size]) == count
    own = kernel_set._started
    kernel_set._started = lambda self, proc: own(self, proc) if proc is not None else None
    check_idle_exit(_workers.SCRIPT, [t.backend, t.arch, t.warp_size])
    return _workers


def check_idle_exit(script, target):
    """A worker given no file exits, after its idle time or at the end of its stdin."""
    import json

    for idle, stdin in (("0.2", subprocess.PIPE), ("600", subprocess.DEVNULL)):
        start = time.monotonic()
        proc = subprocess.Popen([sys.executable, script, json.dumps(target), idle], stdin=stdin)
        assert proc.wait(timeout=120) == 0, f"a worker idle for {idle} s exited {proc.returncode}"
        if proc.stdin:
            proc.stdin.close()
        assert time.monotonic() - start < 60, f"a worker idle for {idle} s took {time.monotonic() - start:.0f} s"


if __name__ == "__main__":
    sys.exit(main())
