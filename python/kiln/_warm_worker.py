"""A kernel-compile worker started ahead of the file it serves (`kiln._workers`).

    python _warm_worker.py TARGET_JSON IDLE_S

It loads Triton and compiles one small kernel for TARGET_JSON ([backend, arch, warp
size], or null for none), which costs a fresh process about a second, then waits for
one line on stdin: the path of a generated file (output_code.py or kernels.py). It runs
that file as `python FILE --kiln-compile-worker` would (the file's runtime serves the
kernels the launching process sends). It exits at the end of stdin, or where no path
comes within IDLE_S seconds. Run by its path: it imports neither torch nor kiln.
"""

import json
import os
import runpy
import select
import shutil
import sys
import tempfile

WORKER_FLAG = "--kiln-compile-worker"

try:
    import triton
    import triton.language as tl

    @triton.jit
    def _kiln_warm_up(x, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(x + offsets, tl.load(x + offsets, mask=mask) * 2.0, mask=mask)

except Exception:  # no Triton: the file's own imports say so when it runs
    triton = None


def warm_up(target) -> None:
    """Compiles `_kiln_warm_up` for `target` into a cache of its own, removed after."""
    if triton is None or not target:
        return
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    cache = tempfile.mkdtemp(prefix="kiln-warm-up-")
    kept = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = cache
    try:
        source = ASTSource(_kiln_warm_up, {"x": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 256})
        triton.compile(source, target=GPUTarget(*target), options={"num_warps": 4})
    except Exception:  # the warm-up is only a head start
        pass
    finally:
        if kept is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = kept
        shutil.rmtree(cache, ignore_errors=True)


def main() -> int:
    target, idle = json.loads(sys.argv[1]), float(sys.argv[2])
    warm_up(target)
    ready, _, _ = select.select([sys.stdin], [], [], idle)
    path = sys.stdin.readline().strip() if ready else ""
    if not path:
        return 0
    sys.argv = [path, WORKER_FLAG]
    sys.path[0] = os.path.dirname(os.path.abspath(path))  # as when the file runs as a script
    runpy.run_path(path, run_name="__main__")  # the file's runtime exits when stdin ends
    return 0


if __name__ == "__main__":
    sys.exit(main())
