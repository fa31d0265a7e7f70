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
missing; the wrapper's checks and copies on stand-in tensors; and
`load_weights` on small safetensors files (each tensor at its offset, and a
missing, truncated or foreign file refused with a message that names it). Prints
`ok: WHAT` per check; exits 1 on the first failure.
"""

import importlib.util
import json
import os
import shutil
import struct
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
    from types import SimpleNamespace

    fast_calls, grouped_calls = [], []

    def fast(tensor, size, stride):  # torch's C++ check, as the stand-in torch has it
        fast_calls.append(size)
        if tuple(tensor.size()) != tuple(size):
            raise AssertionError("C++ message")

    def grouped(tensors, sizes, strides, what):  # torch's grouped C++ check
        grouped_calls.append(len(tensors))
        for t, size, stride in zip(tensors, sizes, strides):
            fast(t, size, stride)

    def torch_with(**guards):
        return SimpleNamespace(_C=SimpleNamespace(_dynamo=SimpleNamespace(guards=SimpleNamespace(**guards))))

    names, sizes, strides = ("a", "b"), ((4, 1), (4, 9)), ((1, 1), (9, 1))
    good = (FakeTensor((4, 1), (1, 7)), FakeTensor((4, 9), (9, 1)))
    bad = (FakeTensor((4, 1), (1, 7)), FakeTensor((4, 8), (8, 1)))
    checked = rt.input_check(torch_with(assert_size_stride=fast), names, sizes, strides)
    ok = raises(checked, good) is None
    wrong = raises(checked, bad)
    check("where torch has its C++ size and stride check it is used per input, a failure reported by name",
          ok and fast_calls == [(4, 1), (4, 9), (4, 1), (4, 9)] and wrong is not None
          and wrong.startswith("b: expected size (4, 9)"), (fast_calls, wrong))
    fast_calls.clear()
    checked = rt.input_check(torch_with(assert_size_stride=fast, assert_size_stride_grouped=grouped), names, sizes,
                             strides)
    ok = raises(checked, good) is None
    wrong = raises(checked, bad)
    check("where torch has its grouped check, one call checks every input, a failure reported by name",
          ok and grouped_calls == [2, 2] and wrong is not None and wrong.startswith("b: expected size (4, 9)"),
          (grouped_calls, wrong))
    checked = rt.input_check(SimpleNamespace(_C=SimpleNamespace()), names, sizes, strides)
    check("without them, the check is the runtime's own",
          raises(checked, good) is None and (raises(checked, bad) or "").startswith("b: expected size (4, 9)"))
    aligned, off = FakeTensor((8,), (1,), ptr=64), FakeTensor((8,), (1,), ptr=68)
    args = [aligned, off]
    rt.align_inputs(args, (0, 1))
    check("a misaligned input is copied, keeping its strides",
          args[0] is aligned and args[1].copied_from is off and args[1].stride() == (1,))
    result = FakeTensor((2, 3), (1, 2))
    check("a result in the planned layout is kept", rt.in_layout(result, (2, 3), (1, 2)) is result)
    copy = rt.in_layout(result, (2, 3), (3, 1))
    check("another layout is copied into the planned one", copy.copied_from is result and copy.stride() == (3, 1))


class FakeDType:
    """A torch dtype as the weights loader asks of it: its item size."""

    def __init__(self, fmt):
        self.fmt, self.itemsize = fmt, struct.calcsize(fmt)


class FakeLoaded:
    """What the weights loader does with a tensor read from the file."""

    def __init__(self, values):
        self.values, self.shape, self.device = values, None, None

    def reshape(self, shape):
        self.shape = shape
        return self

    def to(self, device):
        self.device = device
        return self


def fake_frombuffer(data, dtype, count, offset):
    """torch.frombuffer on the stand-in dtypes: the values at `offset`."""
    return FakeLoaded(list(struct.unpack_from(f"<{count}{dtype.fmt}", data, offset)))


def safetensors(path, tensors, header=None):
    """Writes `tensors` (key: (dtype name, format, shape, values)) to `path` as
    safetensors; `header`, when given, is written instead of the right one."""
    meta, data = {}, b""
    for key, (name, fmt, shape, values) in tensors.items():
        raw = struct.pack(f"<{len(values)}{fmt}", *values)
        meta[key] = {"dtype": name, "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = header if header is not None else json.dumps(meta).encode()
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + data)


def raised(f, *args):
    """The RuntimeError `f(*args)` raises, as text; None if it returns."""
    try:
        f(*args)
    except RuntimeError as error:
        return str(error)
    return None


def weights_checks(rt, folder):
    """load_weights on small safetensors files beside a stand-in generated file."""
    f32, i64 = FakeDType("f"), FakeDType("q")
    beside = os.path.join(folder, "weights", "output_code.py")
    os.makedirs(os.path.dirname(beside))
    path = os.path.join(os.path.dirname(beside), "w.safetensors")
    tensors = {"a": ("F32", "f", (2, 3), [0.5, 1, 2, 3, 4, 5]), "b": ("I64", "q", (2,), [7, -8])}
    expected = {"a": ("F32", f32, (2, 3)), "b": ("I64", i64, (2,))}

    def load(table):
        return rt.load_weights(beside, "w.safetensors", fake_frombuffer, "dev", table)

    missing = raised(load, expected)
    check("weights: a missing file is named, with what to do",
          missing is not None and f"cannot open the weights file {path}" in missing and "compile again" in missing,
          missing)
    safetensors(path, tensors)
    got = load(expected)
    check("weights: each tensor read at its offset, shaped and on the device",
          got["a"].values == [0.5, 1, 2, 3, 4, 5] and got["b"].values == [7, -8]
          and (got["a"].shape, got["b"].shape) == ((2, 3), (2,)) and got["b"].device == "dev",
          {k: (t.values, t.shape, t.device) for k, t in got.items()})
    wrong = raised(load, {"a": ("F32", f32, (3, 2))})
    check("weights: a foreign shape is refused, by tensor",
          wrong is not None and "tensor `a` is F32[2, 3], the code expects F32[3, 2]" in wrong, wrong)
    wrong = raised(load, {"b": ("I32", FakeDType("i"), (2,))})
    check("weights: a foreign dtype is refused", wrong is not None and "the code expects I32[2]" in wrong, wrong)
    wrong = raised(load, {"c": ("F32", f32, (1,))})
    check("weights: a missing tensor is named", wrong is not None and "has no tensor `c`" in wrong, wrong)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 4)
    wrong = raised(load, expected)
    check("weights: a truncated file is refused", wrong is not None and "tensor `b` lies past its end" in wrong, wrong)
    safetensors(path, tensors, header=b"{not json")
    wrong = raised(load, expected)
    check("weights: an unreadable header is refused", wrong is not None and "has an unreadable header" in wrong, wrong)
    safetensors(path, tensors, header=json.dumps({"a": {"dtype": "F32", "shape": [2, 3]}}).encode())
    wrong = raised(load, {"a": expected["a"]})
    check("weights: a tensor without data_offsets is refused",
          wrong is not None and "tensor `a` has no valid data_offsets" in wrong, wrong)


class FakeBinary:
    """Triton's CompiledKernel as a launch uses it: its handles made by `_init_handles`, its
    launcher `run`, and Triton's own `binary[grid]` path."""

    def __init__(self):
        self.function, self.packed_metadata = None, "packed"
        self.inits, self.calls = 0, []

    def _init_handles(self):
        self.inits += 1
        self.function = "function"

    @property
    def run(self):
        return lambda *a: self.calls.append(a)

    def __getitem__(self, grid):
        return lambda *args, stream=None: self.calls.append(("triton", grid, stream, args))


def launch_checks(rt):
    """Launches: a compiled kernel's launches bound once per grid, straight to its launcher."""
    from triton import knobs

    binary = FakeBinary()
    launches = rt.Launches.of(binary)
    first = launches[(4, 1, 1)]
    first("a", "b", stream=7)
    launches[(4, 1, 1)]("c", "d", stream=7)
    check("a compiled kernel's launches go straight to its launcher, its handles bound once per grid",
          binary.calls == [(4, 1, 1, 7, "function", "packed", None, None, None, "a", "b"),
                           (4, 1, 1, 7, "function", "packed", None, None, None, "c", "d")]
          and binary.inits == 1 and launches[(4, 1, 1)] is first, (binary.calls, binary.inits))
    check("an object that is not Triton's CompiledKernel is launched as it is", rt.Launches.of("x") == "x")
    chain = knobs.runtime.launch_enter_hook
    knobs.runtime.launch_enter_hook = lambda *a: None
    try:
        launches[(2, 2, 1)]("e", stream=8)
    finally:
        knobs.runtime.launch_enter_hook = chain
    check("with a launch hook set (a profiler), a grid's launches go through Triton's own path",
          binary.calls[-1] == ("triton", (2, 2, 1), 8, ("e",)), binary.calls[-1])


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
    launch_checks(rt)
    weights_checks(rt, folder)
    # Workers build each kernel's launcher with the class of the backend that compiles
    # for the target (Triton's `nvidia` package for the `cuda` target).
    launcher = rt._kiln_launcher_class(target)
    check("the cuda target's launcher class is found", getattr(launcher, "__name__", None) == "CudaLauncher",
          repr(launcher))
    none = rt.KernelSet.target({"backend": "kiln-none", "arch": "1", "warp_size": 32})
    check("a target without a backend has no launcher class", rt._kiln_launcher_class(none) is None)

    # Compiled in this process into the cache, then found there by a second set.
    kernels = rt.KernelSet(scope_of(module), workers=0)
    kernel = kernels._kernels["kiln_add_one"]
    check("a kernel not compiled yet is not found", kernel.folder is None, kernel.folder)
    binary = kernels.binary(kernel)
    kept = os.path.join(cache, "triton", kernel.key)
    check("the binary is kiln_add_one's", binary.name == "kiln_add_one", binary.name)
    check("the binary is kept in the cache", os.path.isfile(os.path.join(kept, "kiln_add_one.json")), kept)
    # A launch variant (a kernel of dynamic sizes) compiles the function it names with
    # its own config, kept apart.
    variant = kernels._kernels["kiln_add_one_v1"]
    compiled = kernels.binary(variant)
    check("a variant compiles its function with its own config",
          compiled.name == "kiln_add_one" and compiled.metadata.num_warps == 2 and variant.key != kernel.key,
          f"{compiled.name} {compiled.metadata.num_warps}")
    check("a variant's binary is kept under its own key",
          os.path.isfile(os.path.join(cache, "triton", variant.key, "kiln_add_one.json")), variant.key)
    kernels.ready(["kiln_add_one", "kiln_add_one_v1"])
    check("ready resolves each named kernel",
          not any(isinstance(getattr(kernels, n), rt._KilnKernel) for n in ("kiln_add_one", "kiln_add_one_v1")))
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
    variant = pooled._kernels["kiln_add_one_v1"]
    variant.done.wait(300)
    check("a worker compiles a variant from its function", variant.state == "done" and variant.folder is not None
          and os.path.isfile(os.path.join(variant.folder, "kiln_add_one.json")), f"{variant.state} {variant.folder}")
    os.environ["KILN_CACHE_DIR"] = cache

    # --precompile, as `host compile --precompile` runs it.
    out = os.path.join(folder, "kernels")
    run = subprocess.run([sys.executable, tiny, "--precompile", out, "--jobs", "1"],
                         capture_output=True, text=True)
    check("--precompile succeeds", run.returncode == 0, run.stderr)
    check("--precompile reports", "2 of 2 kernel(s) compiled for cuda" in run.stdout, run.stdout)
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
