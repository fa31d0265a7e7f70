"""Kiln's C++ wrapper for cuda (`host compile --wrapper cpp`), built and called
from Python for checking and timing on a GPU machine.

`AotModule(folder)` builds `folder/wrapper.cpp` into `folder/kiln.so` (once;
again when wrapper.cpp is newer) with the system C++ compiler against the
CUDA toolkit's headers, the driver library and cuBLAS, loads it with ctypes,
and calls `kiln_init(folder)`. `call(args)` allocates the outputs with torch
(sizes and dtypes from the library's kiln_output_* functions) and runs
`kiln_call(inputs, outputs, stream)` on torch's current CUDA stream. A wrapper
compiled for a range of sizes (`--dynamic`) is called at each call's sizes:
`kiln_output_shapes` sizes the outputs, and `kiln_call_shaped` runs it. Nothing of
torch is linked into the library: torch only allocates the tensors here.

The toolkit is $CUDA_HOME (else the folder above nvcc's, else /usr/local/cuda);
cuBLAS is taken from it, or from the nvidia-cublas wheel PyTorch depends on.
"""

from __future__ import annotations

import ctypes
import glob
import os
import shutil
import subprocess
import sys

import torch

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int64": torch.int64,
    "int32": torch.int32,
    "bool": torch.bool,
}


def cuda_home() -> str:
    if os.environ.get("CUDA_HOME"):
        return os.environ["CUDA_HOME"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        return os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    return "/usr/local/cuda"


def cublas_dirs() -> tuple[list[str], list[str]]:
    """Include and library folders holding cublas_v2.h and libcublas."""
    home = cuda_home()
    includes, libs = [os.path.join(home, "include")], []
    for lib in ("lib64", "lib", os.path.join("targets", "x86_64-linux", "lib")):
        if glob.glob(os.path.join(home, lib, "libcublas.so*")):
            libs.append(os.path.join(home, lib))
            break
    if not glob.glob(os.path.join(home, "include", "cublas_v2.h")) or not libs:
        try:
            import nvidia.cublas as wheel  # PyTorch's own dependency

            root = list(wheel.__path__)[0]
            includes.append(os.path.join(root, "include"))
            libs.append(os.path.join(root, "lib"))
        except ImportError:
            pass
    return includes, libs


def build(folder: str) -> str:
    source = os.path.join(folder, "wrapper.cpp")
    library = os.path.join(folder, "kiln.so")
    if os.path.exists(library) and os.path.getmtime(library) >= os.path.getmtime(source):
        return library
    includes, libs = cublas_dirs()
    cxx = os.environ.get("CXX", "c++")
    cmd = [cxx, "-O2", "-std=c++17", "-shared", "-fPIC", source, "-o", library]
    cmd += [f"-I{d}" for d in includes]
    for d in libs:
        cmd += [f"-L{d}", f"-Wl,-rpath,{d}"]
    # Link against the driver's stub where no unversioned libcuda.so is installed;
    # at run time the soname (libcuda.so.1) finds the driver.
    cmd.append(f"-L{os.path.join(cuda_home(), 'lib64', 'stubs')}")
    cublas = "-lcublas"
    if libs and not os.path.exists(os.path.join(libs[-1], "libcublas.so")):
        versioned = sorted(glob.glob(os.path.join(libs[-1], "libcublas.so.*")))
        if versioned:
            cublas = f"-l:{os.path.basename(versioned[0])}"
    cmd += ["-lcuda", cublas]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"building {source} failed:\n{' '.join(cmd)}\n{done.stderr[-4000:]}")
    return library


class AotModule:
    def __init__(self, folder: str):
        self.folder = folder
        lib = ctypes.CDLL(build(folder))
        for name, res, args in [
            ("kiln_init", ctypes.c_int, [ctypes.c_char_p]),
            ("kiln_call", ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]),
            ("kiln_last_error", ctypes.c_char_p, []),
            ("kiln_num_inputs", ctypes.c_int, []),
            ("kiln_num_outputs", ctypes.c_int, []),
            ("kiln_output_rank", ctypes.c_int, [ctypes.c_int]),
            ("kiln_output_size", ctypes.c_longlong, [ctypes.c_int, ctypes.c_int]),
            ("kiln_output_dtype", ctypes.c_char_p, [ctypes.c_int]),
        ]:
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        self.lib = lib
        # A wrapper of a range of sizes takes each call's sizes.
        self.shaped = hasattr(lib, "kiln_num_symbols")
        if self.shaped:
            shapes = ctypes.POINTER(ctypes.POINTER(ctypes.c_int64))
            lib.kiln_output_shapes.restype = ctypes.c_int
            lib.kiln_output_shapes.argtypes = [shapes, shapes]
            lib.kiln_call_shaped.restype = ctypes.c_int
            lib.kiln_call_shaped.argtypes = [shapes, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        torch.cuda.init()  # the wrapper runs in the context torch made current
        torch.empty(1, device="cuda")
        if lib.kiln_init(folder.encode()) != 0:
            raise RuntimeError(f"kiln_init: {lib.kiln_last_error().decode()}")
        self.outputs = []
        for i in range(lib.kiln_num_outputs()):
            shape = [lib.kiln_output_size(i, d) for d in range(lib.kiln_output_rank(i))]
            self.outputs.append((shape, DTYPES[lib.kiln_output_dtype(i).decode()]))
        self.n_in = lib.kiln_num_inputs()
        flag = getattr(lib, "kiln_device_graphs", None)
        self.graphs = flag is not None and flag() == 1
        self.kernel_meta = {}
        manifest = os.path.join(folder, "kernels", "manifest.json")
        if os.path.exists(manifest):
            import json

            with open(manifest) as f:
                self.kernel_meta = json.load(f)

    def call(self, args):
        ins = []
        for t in args:
            if not t.is_contiguous() or t.data_ptr() % 16 != 0:
                t = t.contiguous().clone()
            ins.append(t)
        args.clear()
        self.input_shapes = None
        if self.shaped:
            sizes, in_rows = self._shapes([list(t.shape) for t in ins])
            out_sizes, out_rows = self._shapes([[0] * len(shape) for shape, _ in self.outputs])
            if self.lib.kiln_output_shapes(sizes, out_sizes) != 0:
                raise RuntimeError(f"kiln_output_shapes: {self.lib.kiln_last_error().decode()}")
            self.input_shapes = (sizes, in_rows)
            shapes = [list(row)[:len(shape)] for row, (shape, _) in zip(out_rows, self.outputs)]
        else:
            shapes = [shape for shape, _ in self.outputs]
        outs = [torch.empty(shape, dtype=dtype, device="cuda") for shape, (_, dtype) in zip(shapes, self.outputs)]
        in_ptrs = (ctypes.c_void_p * max(len(ins), 1))(*[t.data_ptr() for t in ins])
        out_ptrs = (ctypes.c_void_p * max(len(outs), 1))(*[t.data_ptr() for t in outs])
        if self.graphs:
            # A --cuda-graph wrapper captures on a stream of its own (the
            # default stream cannot be captured): the first call captures and
            # launches, the next ones replay; the outputs are cleared between
            # them so that what is compared is the last replay's.
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for replay in range(3):
                    for t in outs:
                        t.zero_()
                    self._call(in_ptrs, out_ptrs, side.cuda_stream)
            torch.cuda.current_stream().wait_stream(side)
            return tuple(outs)
        self._call(in_ptrs, out_ptrs, torch.cuda.current_stream().cuda_stream)
        return tuple(outs)

    @staticmethod
    def _shapes(shapes):
        """`const int64_t* const*` of `shapes`, kept alive by the array it returns."""
        rows = [(ctypes.c_int64 * max(len(s), 1))(*s) for s in shapes]
        array = (ctypes.POINTER(ctypes.c_int64) * max(len(rows), 1))(
            *[ctypes.cast(r, ctypes.POINTER(ctypes.c_int64)) for r in rows])
        return array, rows

    def _call(self, in_ptrs, out_ptrs, stream):
        if self.shaped:
            status = self.lib.kiln_call_shaped(self.input_shapes[0], in_ptrs, out_ptrs, stream)
            name = "kiln_call_shaped"
        else:
            status = self.lib.kiln_call(in_ptrs, out_ptrs, stream)
            name = "kiln_call"
        if status != 0:
            raise RuntimeError(f"{name} returned {status}: {self.lib.kiln_last_error().decode()}")


if __name__ == "__main__":
    for folder in sys.argv[1:]:
        print(folder, build(folder))
