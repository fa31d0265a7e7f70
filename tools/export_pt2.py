#!/usr/bin/env python3
"""Exports a PyTorch module for Kiln: a torch.export archive, its example inputs and
PyTorch's outputs on them, in the layout of Kiln's fixtures (tests/fixtures/pt2).

Usage:
    python3 tools/export_pt2.py MODULE:FACTORY NAME --input 8x64 [--input 8x64 ...]
                                [--out DIR] [--core] [--seed N]

MODULE:FACTORY names a Python module (a file path or an importable name) and a callable in
it that returns the torch.nn.Module to export, for example `my_model.py:build`. Each
--input gives one example input's shape (float32, random normal, seeded).

Writes into DIR (default .):
    NAME.pt2            torch.export.export(...) saved with torch.export.save; with --core,
                        after run_decompositions() (core ATen ops)
    NAME.inputN.bin     the example inputs, raw little-endian float32, row-major
    NAME.expectedN.bin  the module's outputs on them (computed in float64, stored float32)
    NAME.json           the input and output shapes

Then, for example:
    host eval NAME.pt2 --inputs DIR_WITH_input0.bin --out out/
    host compile NAME.pt2 --device cuda -o out/

Needs PyTorch (2.5 or newer); Kiln itself does not.
"""
import argparse
import importlib
import importlib.util
import json
import os
import sys


def load_factory(spec):
    module_name, _, attr = spec.partition(":")
    if not attr:
        sys.exit(f"expected MODULE:FACTORY, got {spec!r}")
    if module_name.endswith(".py") or os.path.sep in module_name:
        loader = importlib.util.spec_from_file_location("kiln_export_target", module_name)
        if loader is None or loader.loader is None:
            sys.exit(f"cannot load {module_name}")
        module = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    return getattr(module, attr)


def shape(text):
    return [int(d) for d in text.lower().split("x")] if text else []


def write_f32(path, tensor):
    import torch

    # Raw little-endian float32, row-major.
    data = tensor.detach().to("cpu", dtype=torch.float32).contiguous().numpy()
    with open(path, "wb") as f:
        f.write(data.astype("<f4").tobytes())


def main():
    import torch

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("factory", help="MODULE:FACTORY returning the nn.Module")
    p.add_argument("name", help="base name of the files written")
    p.add_argument("--input", action="append", required=True, type=shape,
                   help="an example input's shape, like 8x64 (repeat for several inputs)")
    p.add_argument("--out", default=".", help="folder to write into")
    p.add_argument("--core", action="store_true", help="save after run_decompositions()")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()

    torch.manual_seed(a.seed)
    module = load_factory(a.factory)().eval()
    inputs = tuple(torch.randn(*s, dtype=torch.float32) for s in a.input)

    with torch.no_grad():
        program = torch.export.export(module, inputs)
        if a.core:
            program = program.run_decompositions()
        # The reference in float64, as Kiln's interpreter computes, rounded to float32.
        reference = module.to(torch.float64)(*(x.to(torch.float64) for x in inputs))
    outputs = reference if isinstance(reference, (tuple, list)) else (reference,)

    os.makedirs(a.out, exist_ok=True)
    base = os.path.join(a.out, a.name)
    torch.export.save(program, base + ".pt2")
    for i, x in enumerate(inputs):
        write_f32(f"{base}.input{i}.bin", x)
    for i, y in enumerate(outputs):
        write_f32(f"{base}.expected{i}.bin", y)
    with open(base + ".json", "w") as f:
        json.dump({
            "torch_version": torch.__version__,
            "core": a.core,
            "inputs": [{"file": f"{a.name}.input{i}.bin", "shape": list(x.shape),
                        "dtype": "float32"} for i, x in enumerate(inputs)],
            "outputs": [{"file": f"{a.name}.expected{i}.bin", "shape": list(y.shape),
                         "dtype": "float32", "computed_in": "float64, rounded to float32"}
                        for i, y in enumerate(outputs)],
        }, f, indent=2)
        f.write("\n")
    print(f"wrote {base}.pt2, {len(inputs)} input(s), {len(outputs)} expected output(s)")


if __name__ == "__main__":
    main()
