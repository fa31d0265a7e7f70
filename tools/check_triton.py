#!/usr/bin/env python3
"""Compile every Triton kernel in Kiln-generated output_code.py files with the
real Triton compiler, without a GPU.

Each generated file defines its kernels as plain ``@triton.jit`` functions and a
literal ``KERNEL_META`` dict: for every kernel, its argument signature (Triton
type strings such as ``*fp32`` or ``i32``), its ``constexpr`` values, and the
launch's ``num_warps`` and ``num_stages``. This script reads both through
Python's ``ast`` module (it never runs the wrapper, which needs torch and a
device), writes the kernels into a scratch module, and calls
``triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))`` on each.

Usage: check_triton.py [--arch 90] [--warp-size 32] FILE_OR_DIR...
Exit status 0 when every kernel compiled; 1 otherwise, with each failure named.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

KERNEL_IMPORTS = (
    "import triton\n"
    "import triton.language as tl\n"
    "from triton.language.extra import libdevice\n"
)


def kernel_sources(path: Path) -> tuple[list[tuple[str, str]], dict]:
    """The (name, source) of every @triton.jit function, and KERNEL_META."""
    text = path.read_text()
    tree = ast.parse(text, filename=str(path))
    kernels = []
    meta = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(
            ast.unparse(d) in ("triton.jit", "jit") for d in node.decorator_list
        ):
            kernels.append((node.name, ast.get_source_segment(text, node, padded=False)))
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "KERNEL_META" for t in node.targets
        ):
            meta = ast.literal_eval(node.value)
    if kernels and meta is None:
        raise ValueError(f"{path}: kernels found but no literal KERNEL_META dict")
    return kernels, meta or {}


def decorated(name: str, source: str) -> str:
    # get_source_segment drops the decorator lines; put the one we need back.
    return f"@triton.jit\n{source}\n"


def check_file(path: Path, arch: int, warp_size: int, scratch: Path) -> list[str]:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    failures = []
    kernels, meta = kernel_sources(path)
    module_path = scratch / f"kiln_kernels_{abs(hash(str(path)))}.py"
    module_path.write_text(KERNEL_IMPORTS + "\n\n".join(decorated(n, s) for n, s in kernels))
    spec = importlib.util.spec_from_file_location(module_path.stem, module_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    target = GPUTarget("cuda", arch, warp_size)
    compiled_names = [n for n, _ in kernels if n in meta]
    missing = [n for n in meta if n not in dict(kernels)]
    for name in missing:
        failures.append(f"{path}: {name}: in KERNEL_META but no @triton.jit function")
    # @triton.jit functions without a KERNEL_META entry are helpers the kernels call.
    for name in compiled_names:
        info = meta[name]
        signature = dict(info["signature"])
        constexprs = dict(info.get("constants", {}))
        for key in constexprs:
            signature[key] = "constexpr"
        try:
            src = ASTSource(fn=getattr(module, name), signature=signature, constexprs=constexprs)
            compiled = triton.compile(
                src,
                target=target,
                options={"num_warps": info["num_warps"], "num_stages": info["num_stages"]},
            )
            if "ptx" not in compiled.asm:
                failures.append(f"{path}: {name}: no PTX produced")
        except Exception as error:  # report every kernel, not just the first
            lines = [l for l in str(error).strip().splitlines() if l.strip()]
            where = lines[0] if lines else ""
            what = lines[-1] if len(lines) > 1 else type(error).__name__
            failures.append(f"{path}: {name}: {what} ({where.strip()})")
    print(f"{path}: {len(compiled_names) - len(failures)} of {len(compiled_names)} kernel(s) compiled")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--arch", type=int, default=90)
    parser.add_argument("--warp-size", type=int, default=32)
    args = parser.parse_args()
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    files = []
    for p in args.paths:
        files.extend(sorted(p.rglob("output_code.py")) if p.is_dir() else [p])
    if not files:
        print("no output_code.py found", file=sys.stderr)
        return 1
    failures = []
    with tempfile.TemporaryDirectory() as scratch:
        for f in files:
            try:
                failures += check_file(f, args.arch, args.warp_size, Path(scratch))
            except Exception as error:
                failures.append(f"{f}: {error}")
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
