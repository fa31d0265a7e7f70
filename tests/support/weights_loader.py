"""Checks the weights loader of a generated output_code.py without PyTorch.

Usage: weights_loader.py OUTPUT_CODE_PY EXPECTED_JSON

The file's own `_load_weights` and the table its `_constants` passes to it are taken
from the source (with `ast`) and run against a small stand-in for `torch` whose
`frombuffer` decodes the bytes at the offset asked for. So the real loader's header
parsing, offset arithmetic and error checks run; only the copy to a device is faked.
EXPECTED_JSON maps each tensor's key to its first values. Prints one line per check;
exits non-zero on the first failure.
"""

import ast
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


def loader(source, file):
    tree = ast.parse(source)
    keep = [
        n
        for n in tree.body
        if (isinstance(n, ast.FunctionDef) and n.name == "_load_weights")
        or (isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "WEIGHTS_FILE" for t in n.targets))
    ]
    if len(keep) != 2:
        sys.exit("output_code.py has no _load_weights and WEIGHTS_FILE")
    space = {"torch": Torch, "DEVICE": "device", "__file__": file}
    exec(compile(ast.Module(body=keep, type_ignores=[]), "output_code.py", "exec"), space)
    table = None
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "_load_weights":
            table = eval(compile(ast.Expression(n.args[0]), "table", "eval"), {"torch": Torch})
    if table is None:
        sys.exit("_constants never calls _load_weights")
    return space["_load_weights"], table


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

    load, table = loader(source, code_path)
    tensors = load(table)
    if set(tensors) != set(expected):
        sys.exit(f"read: keys {sorted(tensors)} != {sorted(expected)}")
    for key, first in expected.items():
        got = tensors[key].values[: len(first)]
        for g, w in zip(got, first):
            if not math.isclose(g, w, rel_tol=1e-6, abs_tol=1e-30):
                sys.exit(f"read: {key} starts {got}, expected {first}")
    print(f"read: every tensor at its offset ({len(tensors)} tensors)")

    with tempfile.TemporaryDirectory() as tmp:
        fake = os.path.join(tmp, "output_code.py")
        load, table = loader(source, fake)
        expect_error(load, table, "cannot open the weights file", "missing")
        data = open(weights, "rb").read()
        with open(os.path.join(tmp, "weights.safetensors"), "wb") as f:
            f.write(data[: len(data) // 2])
        expect_error(load, table, "is truncated", "truncated")
        shutil.copy(weights, os.path.join(tmp, "weights.safetensors"))
        key = next(iter(table))
        wrong = dict(table)
        wrong[key] = ("F16",) + tuple(table[key][1:])
        expect_error(load, wrong, "the code expects", "foreign dtype")


if __name__ == "__main__":
    main()
