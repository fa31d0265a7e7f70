"""Checks how a generated output_code.py reads its weights file, without PyTorch.

Usage: weights_loader.py OUTPUT_CODE_PY EXPECTED_JSON

The file reads it through the runtime written beside it (kiln_runtime.py's
`load_weights`), passing its own path, WEIGHTS_FILE, torch's `frombuffer`, its DEVICE
and the table of the tensors it expects. That call's arguments are taken from the
source (with `ast`) and evaluated against a small stand-in for `torch` whose
`frombuffer` decodes the bytes at the offset asked for, and the runtime's function is
called with them. So the real loader's header parsing, offset arithmetic and error
checks run on the real file; only the copy to a device is faked. EXPECTED_JSON maps
each tensor's key to its first values. Prints one line per check; exits non-zero on
the first failure.
"""

import ast
import importlib.util
import json
import math
import os
import shutil
import struct
import sys
import tempfile


class DType:
    def __init__(self, name, fmt, itemsize):
        self.name, self.fmt, self.itemsize = name, fmt, itemsize


class Tensor:
    def __init__(self, values):
        self.values = values

    def reshape(self, shape):
        return self

    def to(self, device):
        self.device = device
        return self


class Torch:
    float32 = DType("float32", "<f", 4)
    float64 = DType("float64", "<d", 8)
    int64 = DType("int64", "<q", 8)
    int32 = DType("int32", "<i", 4)
    bool = DType("bool", "<?", 1)
    float16 = DType("float16", "<e", 2)
    bfloat16 = DType("bfloat16", None, 2)

    @staticmethod
    def frombuffer(data, dtype, count, offset):
        raw = bytes(data[offset : offset + count * dtype.itemsize])
        if len(raw) != count * dtype.itemsize:
            raise ValueError("frombuffer past the end of the buffer")
        if dtype.fmt is None:  # bfloat16: the high half of a float32
            values = [struct.unpack("<f", b"\0\0" + raw[i : i + 2])[0] for i in range(0, len(raw), 2)]
        else:
            values = [v[0] for v in struct.iter_unpack(dtype.fmt, raw)]
        return Tensor(values)


def runtime(code_path):
    """The kiln_runtime.py written beside `code_path`, imported by its path."""
    path = os.path.join(os.path.dirname(os.path.abspath(code_path)), "kiln_runtime.py")
    spec = importlib.util.spec_from_file_location("kiln_runtime_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def loader(source, rt, file):
    """The file's own call of the runtime's loader, as a function of the table it
    passes (`expected`), run as if the file were at `file`; and that table."""
    tree = ast.parse(source)
    files = [
        n
        for n in tree.body
        if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "WEIGHTS_FILE" for t in n.targets)
    ]
    if len(files) != 1:
        sys.exit("output_code.py has no WEIGHTS_FILE")
    if any(isinstance(n, ast.FunctionDef) and "load_weights" in n.name for n in ast.walk(tree)):
        sys.exit("output_code.py defines a weights loader of its own instead of calling the runtime's")
    calls = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "load_weights"
        and getattr(n.func.value, "id", "") == "kiln_runtime"
    ]
    if len(calls) != 1:
        sys.exit("_constants never calls kiln_runtime.load_weights")
    call = calls[0]
    if call.keywords or len(call.args) != 5:
        sys.exit(f"kiln_runtime.load_weights is called with {ast.unparse(call)}")
    space = {"torch": Torch, "DEVICE": "device", "__file__": file, "kiln_runtime": rt}
    exec(compile(ast.Module(body=files, type_ignores=[]), "output_code.py", "exec"), space)
    # The file's own arguments (its path, WEIGHTS_FILE, torch.frombuffer, DEVICE),
    # and the table it passes last.
    args = [eval(compile(ast.Expression(a), "output_code.py", "eval"), space) for a in call.args]
    return (lambda expected: rt.load_weights(*args[:-1], expected)), args[-1]


def expect_error(load, table, words, label):
    try:
        load(table)
    except RuntimeError as e:
        if words not in str(e):
            sys.exit(f"{label}: the error does not say `{words}`: {e}")
        print(f"{label}: {words} ({e})")
        return
    sys.exit(f"{label}: no error")


def main():
    code_path, expected_path = sys.argv[1], sys.argv[2]
    source = open(code_path).read()
    expected = json.load(open(expected_path))
    weights = os.path.join(os.path.dirname(os.path.abspath(code_path)), "weights.safetensors")

    rt = runtime(code_path)
    load, table = loader(source, rt, code_path)
    tensors = load(table)
    if set(tensors) != set(expected):
        sys.exit(f"read: keys {sorted(tensors)} != {sorted(expected)}")
    for key, first in expected.items():
        got = tensors[key].values[: len(first)]
        for g, w in zip(got, first):
            if not math.isclose(g, w, rel_tol=1e-6, abs_tol=1e-30):
                sys.exit(f"read: {key} starts {got}, expected {first}")
        if tensors[key].device != "device":
            sys.exit(f"read: {key} was copied to {tensors[key].device}, not to DEVICE")
    print(f"read: every tensor at its offset, on DEVICE ({len(tensors)} tensors)")

    with tempfile.TemporaryDirectory() as tmp:
        fake = os.path.join(tmp, "output_code.py")
        beside = os.path.join(tmp, "weights.safetensors")
        load, table = loader(source, rt, fake)
        expect_error(load, table, "cannot open the weights file", "missing")
        data = open(weights, "rb").read()
        with open(beside, "wb") as f:
            f.write(data[: len(data) // 2])
        expect_error(load, table, "is truncated", "truncated")
        with open(beside, "wb") as f:
            f.write(data[:4])
        expect_error(load, table, "is truncated or not a safetensors file", "stub")
        # A header whose last tensor claims bytes past the end of the file.
        n = int.from_bytes(data[:8], "little")
        header = json.loads(data[8 : 8 + n])
        last = max((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][1])
        start, end = header[last]["data_offsets"]
        header[last]["data_offsets"] = [start + 64, end + 64]
        text = json.dumps(header).encode()
        with open(beside, "wb") as f:
            f.write(len(text).to_bytes(8, "little") + text + data[8 + n :])
        expect_error(load, table, f"tensor `{last}` lies past its end", "offsets past the end")
        shutil.copy(weights, beside)
        key = next(iter(table))
        wrong = dict(table)
        wrong[key] = ("F16",) + tuple(table[key][1:])
        expect_error(load, wrong, "the code expects", "foreign dtype")
        wrong = dict(table)
        wrong[key] = table[key][:2] + ((7,) + tuple(table[key][2]),)
        expect_error(load, wrong, "the code expects", "foreign shape")
        wrong = dict(table)
        wrong["kiln_nowhere"] = table[key]
        expect_error(load, wrong, "has no tensor `kiln_nowhere`", "missing tensor")


if __name__ == "__main__":
    main()
