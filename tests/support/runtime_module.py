#!/usr/bin/env python3
"""Tests Kiln's kernel runtime (kiln_runtime.py) on its own, without torch or a GPU.

Usage: runtime_module.py FOLDER

FOLDER holds kiln_runtime.py and tiny.py, a file laid out as Kiln generates one
(Triton kernels, TRITON_TARGET, KERNEL_META, then the runtime's loader): its
kernel `kiln_add_one` calls the helper `kiln_twice`. FOLDER/edited holds the
same with the helper edited. Through the runtime's
public functions this checks: TRITON_TARGET becomes Triton's GPUTarget; a
KernelSet compiles a kernel into the cache and a second one finds it there; a
worker process (tiny.py run with the worker flag) compiles one too;
`--precompile` writes the binaries and their manifest; a helper's edit changes
the kernels' keys; a target Triton has no backend for falls back to Triton's
JIT with a warning, and `--precompile` refuses it; two folders loaded in one
process keep their own runtimes; a file without its runtime says what is
missing; and the wrapper's checks and copies on stand-in tensors. Prints
`ok: WHAT` per check; exits 1 on the first failure.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import warnings


def load(path, name):
    """The generated file at `path`, imported as a module (not as __main__)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check(what, ok, detail=""):
    """Prints `ok: what`, or fails with `detail`."""
    if not ok:
        print(f"FAILED: {what} {detail}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what}")


class FakeTensor:
    """What the wrapper's checks and copies ask of a tensor, without torch."""

    def __init__(self, size, stride, ptr=0):
        self._size, self._stride, self.ptr, self.copied_from = tuple(size), tuple(stride), ptr, None

    def size(self):
        return self._size

    def stride(self):
        return self._stride

    def numel(self):
        n = 1
        for d in self._size:
            n *= d
        return n

    def data_ptr(self):
        return self.ptr

    def new_empty_strided(self, size, stride):
        return FakeTensor(size, stride)

    def copy_(self, other):
        self.copied_from = other
        return self


def raises(f, *args):
    """The AssertionError `f(*args)` raises, as text; None if it returns."""
    try:
        f(*args)
    except AssertionError as error:
        return str(error)
    return None


def wrapper_checks(rt):
    """assert_size_stride, align_inputs and in_layout on stand-in tensors."""
    check("a planned layout passes", raises(rt.assert_size_stride, FakeTensor((4, 1), (1, 7)), (4, 1), (1, 1), "a")
          is None)
    wrong = raises(rt.assert_size_stride, FakeTensor((4, 8), (1, 4)), (4, 8), (8, 1), "a")
    check("a transposed input is refused, by name",
          wrong is not None and wrong.startswith("a: expected size (4, 8) and stride (8, 1)"), wrong)
    aligned, off = FakeTensor((8,), (1,), ptr=64), FakeTensor((8,), (1,), ptr=68)
    args = [aligned, off]
    rt.align_inputs(args, (0, 1))
    check("a misaligned input is copied, keeping its strides",
          args[0] is aligned and args[1].copied_from is off and args[1].stride() == (1,))
    result = FakeTensor((2, 3), (1, 2))
    check("a result in the planned layout is kept", rt.in_layout(result, (2, 3), (1, 2)) is result)
    copy = rt.in_layout(result, (2, 3), (3, 1))
    check("another layout is copied into the planned one", copy.copied_from is result and copy.stride() == (3, 1))


def scope_of(module):
    """The module's globals, as the generated file passes them."""
    return dict(vars(module))


def main():
    folder = sys.argv[1]
    tiny = os.path.join(folder, "tiny.py")
    cache = os.environ["KILN_CACHE_DIR"]
    module = load(tiny, "tiny_a")
    rt = module.kiln_runtime

    target = rt.KernelSet.target(module.TRITON_TARGET)
    check("TRITON_TARGET is a GPUTarget", (target.backend, target.arch, target.warp_size) == ("cuda", 90, 32),
          repr(target))
    check("the cache is $KILN_CACHE_DIR", rt.KernelSet.cache_dir() == cache, rt.KernelSet.cache_dir())

    wrapper_checks(rt)

    # Compiled in this process into the cache, then found there by a second set.
    kernels = rt.KernelSet(scope_of(module), workers=0)
    kernel = kernels._kernels["kiln_add_one"]
    check("a kernel not compiled yet is not found", kernel.folder is None, kernel.folder)
    binary = kernels.binary(kernel)
    kept = os.path.join(cache, "triton", kernel.key)
    check("the binary is kiln_add_one's", binary.name == "kiln_add_one", binary.name)
    check("the binary is kept in the cache", os.path.isfile(os.path.join(kept, "kiln_add_one.json")), kept)
    again = rt.KernelSet(scope_of(module), workers=0)
    check("a second set finds it", again._kernels["kiln_add_one"].folder == kept,
          again._kernels["kiln_add_one"].folder)

    # A helper's edit (FOLDER/edited/tiny.py) is a different kernel; that
    # folder's runtime is its own, this folder's the same at every load.
    edited = load(os.path.join(folder, "edited", "tiny.py"), "tiny_edited")
    keys = rt.KernelSet(scope_of(edited), workers=0)._kernels["kiln_add_one"].key
    check("a helper's edit changes the key", keys != kernel.key)
    check("two folders keep their own runtimes", edited.kiln_runtime is not rt)
    check("one folder shares its runtime", load(tiny, "tiny_again").kiln_runtime is rt)

    # A worker process: tiny.py run with the worker flag compiles into a fresh cache.
    os.environ["KILN_CACHE_DIR"] = os.path.join(cache, "workers")
    pooled = rt.KernelSet(scope_of(module), workers=1)
    kernel = pooled._kernels["kiln_add_one"]
    kernel.done.wait(300)
    check("a worker compiled the kernel", kernel.state == "done" and kernel.folder is not None,
          f"{kernel.state} {kernel.folder}")
    check("into the cache", kernel.folder.startswith(os.path.join(cache, "workers")), kernel.folder)
    os.environ["KILN_CACHE_DIR"] = cache

    # --precompile, as `host compile --precompile` runs it.
    out = os.path.join(folder, "kernels")
    run = subprocess.run([sys.executable, tiny, "--precompile", out, "--jobs", "1"],
                         capture_output=True, text=True)
    check("--precompile succeeds", run.returncode == 0, run.stderr)
    check("--precompile reports", "1 of 1 kernel(s) compiled for cuda" in run.stdout, run.stdout)
    with open(os.path.join(out, "manifest.json")) as f:
        manifest = json.load(f)
    check("the manifest names the kernel's folder",
          os.path.isfile(os.path.join(out, manifest.get("kiln_add_one", "?"), "kiln_add_one.json")),
          json.dumps(manifest))

    # A target without a backend here: Triton's JIT compiles at the first launch.
    other = scope_of(module)
    other["TRITON_TARGET"] = {"backend": "kiln-none", "arch": "1", "warp_size": 32}
    jit = rt.KernelSet(other, workers=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jit.kiln_add_one[(1, 1, 1)]  # the first launch, up to its arguments
    check("no backend: a warning at the first launch",
          any("Triton's JIT compiles it instead" in str(w.message) for w in caught),
          [str(w.message) for w in caught])
    check("no backend: the JIT launches it", type(jit.kiln_add_one).__name__ == "_KilnJitLauncher")
    none = os.path.join(folder, "none")
    os.makedirs(none)
    shutil.copy(os.path.join(folder, "kiln_runtime.py"), none)
    with open(tiny) as f:
        text = f.read().replace('"backend": "cuda"', '"backend": "kiln-none"')
    with open(os.path.join(none, "tiny.py"), "w") as f:
        f.write(text)
    run = subprocess.run([sys.executable, os.path.join(none, "tiny.py"), "--precompile"],
                         capture_output=True, text=True)
    check("no backend: --precompile refuses", run.returncode == 1 and "no backend for `kiln-none`" in run.stderr,
          run.stderr)

    # Without its runtime, the file says what is missing and what to do.
    alone = os.path.join(folder, "alone")
    os.makedirs(alone)
    shutil.copy(tiny, alone)
    run = subprocess.run([sys.executable, os.path.join(alone, "tiny.py")], capture_output=True, text=True)
    check("a missing runtime is named", run.returncode != 0 and "kiln_runtime.py is missing" in run.stderr
          and "keep the files together" in run.stderr, run.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
