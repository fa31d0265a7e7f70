#!/usr/bin/env python3
"""Check Kiln-generated output_code.py files with the real Triton compiler and
Python's own parser, without a GPU.

Each generated file names the Triton target its kernels were generated for
(``TRITON_TARGET``, Triton's ``GPUTarget`` fields as the device plugin gives
them), defines its kernels as plain ``@triton.jit`` functions, and writes a
literal ``KERNEL_META`` dict: for every kernel, its argument signature (Triton
type strings such as ``*fp32`` or ``i32``), its ``constexpr`` values, and the
launch's ``num_warps`` and ``num_stages`` (a launch variant of a kernel of
dynamic sizes names the ``function`` it compiles with its own). This script reads them through
Python's ``ast`` module (it never runs the wrapper, which needs torch and a
device, nor loads the kernels' runtime, ``kiln_runtime.py`` beside the file:
a file checks on its own), and for each file:

- checks the wrapper's scope: ``call`` binds every local once, reads none
  before it is bound or after it is deleted, and no local shadows a
  module-level name of the file or a Python builtin (so no name from a graph
  can take a name the generated code uses);
- compiles every kernel with ``triton.compile(ASTSource(...),
  target=GPUTarget(backend, arch, warp_size))``, with the parameters
  KERNEL_META names ``aligned`` compiled as 16-divisible, and, for a CUDA
  target of sm_90 or later, the file's ``KILN_PDL`` set and its ``dependent``
  kernels compiled with ``launch_pdl`` (as the wrapper's runtime compiles
  them: launched as programmatic dependents), when the installed Triton has
  a backend for that target. A file for a backend that is not installed is
  reported as skipped (``SKIPPED``), unless ``--require-backends`` makes that
  a failure.

With ``--asm DIR``, each compiled kernel's assembly (PTX for CUDA, the backend's
first text form elsewhere) is written to ``DIR/FOLDER/NAME.<form>``, FOLDER being
the name of the folder the file is in: the code a target runs, read without its
device.

Usage: check_triton.py [--require-backends] [--asm DIR] FILE_OR_DIR...
Exit status 0 when every check that could run passed; 1 otherwise, with each
failure named on stderr (``FAILED path: ...``).
"""

from __future__ import annotations

import argparse
import ast
import builtins
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

KERNEL_IMPORTS = (
    "import triton\n"
    "import triton.language as tl\n"
    "from triton.language.extra import libdevice\n"
)


class Skipped(Exception):  # noqa: N818 (a reason, not an error)
    """The file's kernels cannot be compiled here (its backend is not installed)."""


def literal(tree: ast.Module, name: str, path: Path):
    """The value of the module-level literal assignment `name = ...`."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise ValueError(f"{path}: no literal {name}")


def constexpr_globals(text: str, tree: ast.Module) -> list[str]:
    """The source of every module-level ``NAME = tl.constexpr(...)`` the kernels read."""
    return [
        ast.get_source_segment(text, node, padded=False)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Call)
        and ast.unparse(node.value.func) == "tl.constexpr"
    ]


def dependent_launch(target) -> bool:
    """Whether the runtime launches `target`'s dependent kernels as programmatic
    dependents (kiln_runtime's KernelSet.dependent_launch, but for KILN_PDL=0)."""
    try:
        from triton.language.extra import cuda

        return target.backend == "cuda" and int(target.arch) >= 90 and hasattr(cuda, "gdc_wait")
    except (ImportError, TypeError, ValueError):
        return False


def kernel_sources(text: str, tree: ast.Module) -> list[tuple[str, str]]:
    """The (name, source) of every @triton.jit function."""
    return [
        (node.name, ast.get_source_segment(text, node, padded=False))
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and any(ast.unparse(d) in ("triton.jit", "jit") for d in node.decorator_list)
    ]


def module_names(tree: ast.Module) -> set[str]:
    """Every name the module binds at its top level."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        names.add(n.id)
    return names


def scope_problems(tree: ast.Module) -> list[str]:
    """Names `call` binds twice, or that shadow a module-level name or a builtin."""
    calls = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "call"]
    if not calls:
        return ["no call() function"]
    call = calls[0]
    module = module_names(tree)
    builtin = set(dir(builtins))
    bound: dict[str, int] = {arg.arg: 1 for arg in call.args.args}
    for node in ast.walk(call):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound[node.id] = bound.get(node.id, 0) + 1
    problems = order_problems(call, set(bound))
    for name, count in sorted(bound.items()):
        if count > 1:
            problems.append(f"call() binds `{name}` {count} times")
        if name in module:
            problems.append(f"call() binds `{name}`, shadowing the module-level `{name}`")
        if name in builtin:
            problems.append(f"call() binds `{name}`, shadowing the builtin `{name}`")
    return problems


def order_problems(call: ast.FunctionDef, local: set[str]) -> list[str]:
    """Locals of `call` read before they are bound, or after they are deleted,
    in statement order (`with` blocks followed into)."""
    problems = []
    alive = {arg.arg for arg in call.args.args}

    def visit(statements):
        for statement in statements:
            if isinstance(statement, ast.With):
                for item in statement.items:
                    check(item.context_expr)
                visit(statement.body)
                continue
            if isinstance(statement, ast.Delete):
                for target in statement.targets:
                    for n in ast.walk(target):
                        if isinstance(n, ast.Name):
                            if n.id not in alive:
                                problems.append(f"call() deletes `{n.id}`, which is not bound there")
                            alive.discard(n.id)
                continue
            check(statement)
            for n in ast.walk(statement):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    alive.add(n.id)

    def check(node):
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                if n.id in local and n.id not in alive:
                    problems.append(f"call() reads `{n.id}` where it is not bound")

    visit(call.body)
    return problems


def gpu_target(path: Path, tree: ast.Module):
    """The file's GPUTarget, or Skipped when Triton has no backend for it."""
    import triton.backends
    from triton.backends.compiler import GPUTarget

    spec = literal(tree, "TRITON_TARGET", path)
    if spec is None:
        raise ValueError(f"{path}: TRITON_TARGET is None: the device plugin names no Triton target")
    arch = spec["arch"]
    if arch.isdigit():
        arch = int(arch)
    elif arch.startswith("{"):
        arch = json.loads(arch)
    target = GPUTarget(spec["backend"], arch, spec["warp_size"])
    if not any(b.compiler.supports_target(target) for b in triton.backends.backends.values()):
        installed = ", ".join(sorted(triton.backends.backends)) or "none"
        raise Skipped(
            f"Triton has no backend for `{spec['backend']}` here (installed: {installed})"
        )
    return target


def write_asm(binary, name: str, asm_dir: Path) -> None:
    """`name`'s assembly in `asm_dir`: its PTX where it has one, else its first text form."""
    forms = [f for f, text in binary.asm.items() if isinstance(text, str)]
    form = "ptx" if "ptx" in forms else (forms[0] if forms else None)
    if form is not None:
        asm_dir.mkdir(parents=True, exist_ok=True)
        (asm_dir / f"{name}.{form}").write_text(binary.asm[form])


def check_file(path: Path, scratch: Path, asm_dir: Path | None = None) -> tuple[list[str], str | None]:
    """The file's failures, and why its kernels were not compiled, if they were not."""
    import triton
    from triton.compiler import ASTSource, make_backend

    text = path.read_text()
    tree = ast.parse(text, filename=str(path))
    failures = [f"{path}: {p}" for p in scope_problems(tree)]
    kernels = kernel_sources(text, tree)
    meta = literal(tree, "KERNEL_META", path)
    try:
        target = gpu_target(path, tree)
    except Skipped as why:
        return failures, str(why)
    module_path = scratch / f"kiln_kernels_{abs(hash(str(path)))}.py"
    module_path.write_text(
        KERNEL_IMPORTS
        + "\n".join(constexpr_globals(text, tree))
        + "\n\n"
        + "\n\n".join(f"@triton.jit\n{source}\n" for _, source in kernels)
    )
    spec = importlib.util.spec_from_file_location(module_path.stem, module_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    pdl = dependent_launch(target)
    if hasattr(module, "KILN_PDL"):
        import triton.language as tl

        module.KILN_PDL = tl.constexpr(pdl)
    names = dict(kernels)
    # A launch variant of a kernel of dynamic sizes names the function it compiles.
    function = {name: info.get("function", name) for name, info in meta.items()}
    for name in meta:
        if function[name] not in names:
            failures.append(f"{path}: {name}: in KERNEL_META but no @triton.jit function {function[name]}")
    # @triton.jit functions without a KERNEL_META entry are helpers the kernels call.
    compiled = [n for n in meta if function[n] in names]
    failed = 0
    for name in compiled:
        info = meta[name]
        constexprs = dict(info.get("constants", {}))
        try:
            fn = getattr(module, function[name])
            # In the kernel's parameter order: constants may sit among the runtime
            # parameters (an argument compiled in).
            runtime = dict(info["signature"])
            if [n for n in fn.arg_names if n not in constexprs] != list(runtime):
                raise ValueError(f"KERNEL_META's signature {list(runtime)} and constants {list(constexprs)} "
                                 f"are not the parameters {fn.arg_names}")
            signature = {n: "constexpr" if n in constexprs else runtime[n] for n in fn.arg_names}
            # The parameters the wrapper passes 16-byte divisible, as the runtime
            # compiles them (Triton's tt.divisibility).
            backend = make_backend(target)
            divisible = backend.parse_attr("D") if hasattr(backend, "parse_attr") else [["tt.divisibility", 16]]
            attrs = {}
            for arg in info.get("aligned", []):
                if arg not in fn.arg_names or arg in constexprs:
                    raise ValueError(f"KERNEL_META names `{arg}` aligned, which is no runtime parameter")
                attrs[(fn.arg_names.index(arg),)] = divisible
            src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
            options = {"num_warps": info["num_warps"], "num_stages": info["num_stages"]}
            if pdl and info.get("dependent"):
                options["launch_pdl"] = True
            binary = triton.compile(src, target=target, options=options)
            if not binary.asm:
                raise RuntimeError("no code produced")
            if asm_dir is not None:
                write_asm(binary, name, asm_dir / path.resolve().parent.name)
        except Exception as error:  # report every kernel, not just the first
            failed += 1
            lines = [l for l in str(error).strip().splitlines() if l.strip()]
            where = lines[0] if lines else ""
            what = lines[-1] if len(lines) > 1 else type(error).__name__
            failures.append(f"{path}: {name}: {what} ({where.strip()})")
    arch = "{...}" if isinstance(target.arch, dict) else target.arch
    print(
        f"{path}: {len(compiled) - failed} of {len(compiled)} kernel(s) compiled "
        f"for {target.backend} {arch}, warp size {target.warp_size}"
    )
    return failures, None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument(
        "--require-backends",
        action="store_true",
        help="fail, instead of skipping, a file whose Triton backend is not installed",
    )
    parser.add_argument("--asm", type=Path, metavar="DIR",
                        help="write each compiled kernel's assembly (PTX for CUDA) to DIR/FOLDER/NAME.<form>, "
                             "FOLDER the name of the folder of its output_code.py")
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
                found, skipped = check_file(f, Path(scratch), args.asm)
            except Exception as error:
                failures.append(f"{f}: {error}")
                continue
            failures += found
            if skipped is not None and args.require_backends:
                failures.append(f"{f}: {skipped}")
            elif skipped is not None:
                print(f"SKIPPED {f}: {skipped}")
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
