#!/usr/bin/env python3
"""Where the GPU time of one of precision.py's pairs goes: Kiln's output_code.py and
torch.compile's code, each run under torch.profiler, and their kernels listed side by side
by GPU time per call (the kernel classes the issue names: products, norms, pointwise,
attention, convolutions, copies).

Needs precision.py's work folder for the pair (its export and compiled code):

    precision_profile.py MODEL DTYPE [--work bench/gpu/zoo/precision] [--build new] [--top 25]
                         [--code-out DIR]

--code-out copies both sides' code there to read the kernels: Kiln's output_code.py and each
module torch.compile loaded from its cache (Inductor's output code, kernels inline).
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from precision_child import DEVICE, setup, sync  # noqa: E402
from precision_models import DTYPES, build, make_inputs  # noqa: E402
from run import load_module  # noqa: E402

CALLS = 5


def kernels(fn) -> dict[str, tuple[int, float]]:
    """Kernel name -> (launches per call, GPU microseconds per call) over CALLS calls."""
    for _ in range(3):
        fn()
    sync()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            fn()
        sync()
    table: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            entry = table[event.name]
            entry[0] += 1
            entry[1] += event.device_time_total if hasattr(event, "device_time_total") \
                else event.cuda_time_total
    return {name: (count / CALLS, us / CALLS) for name, (count, us) in table.items()}


def show(title: str, table: dict[str, tuple[int, float]], top: int) -> None:
    total = sum(us for _, us in table.values())
    print(f"## {title}: {total:.1f} us of GPU time per call, {sum(c for c, _ in table.values()):.0f} "
          f"launches")
    for name, (count, us) in sorted(table.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"{us:10.1f} us {count:6.1f}x  {name[:110]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("dtype")
    p.add_argument("--work", default=str(HERE / "zoo" / "precision"))
    p.add_argument("--build", default="new")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--code-out", type=Path, help="copy Kiln's and Inductor's code here")
    a = p.parse_args()
    setup()
    dtype = DTYPES[a.dtype]
    code = Path(a.work) / a.build / "code" / f"{a.model}-{a.dtype}"
    if not (code / "output_code.py").is_file():
        sys.exit(f"{code}/output_code.py is missing: run precision.py's compile phase first")
    module, _ = build(a.model, dtype, DEVICE)
    inputs = make_inputs(a.model, dtype, DEVICE)
    kiln = load_module(code / "output_code.py", "cuda")
    compiled = torch.compile(module)
    with torch.no_grad():
        show(f"Kiln {a.model} {a.dtype}", kernels(lambda: kiln.call(list(inputs))), a.top)
        choices(kiln)
        show(f"Inductor {a.model} {a.dtype}", kernels(lambda: compiled(*inputs)), a.top)
    if a.code_out:
        copy_code(a.code_out / f"{a.model}-{a.dtype}", code / "output_code.py")


def copy_code(out: Path, kiln_code: Path) -> None:
    """Kiln's output_code.py as kiln.py, and every module loaded from Inductor's
    cache that compiles kernels (its output code) as inductor_N.py."""
    import shutil

    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(kiln_code, out / "kiln.py")
    paths = {getattr(m, "__file__", None) or "" for m in list(sys.modules.values())}
    try:  # where this torch keeps its loaded output code
        from torch._inductor.codecache import PyCodeCache
        paths |= {getattr(m, "__file__", None) or "" for m in getattr(PyCodeCache, "modules", [])}
    except ImportError:
        pass
    n = 0
    for path in sorted(paths):
        if "torchinductor" not in path or not path.endswith(".py"):
            continue
        text = Path(path).read_text()
        if "async_compile" in text and "def call(" in text:
            (out / f"inductor_{n}.py").write_text(text)
            n += 1
    print(f"code: {out} (Kiln's and {n} Inductor module(s))")


def choices(kiln) -> None:
    """What each attention signature of Kiln's wrapper ran: its kernel or the
    library's, with the microseconds its first call measured for each."""
    attention = getattr(kiln, "ATTENTION", None)
    if attention is None:
        return
    for i, report in enumerate(attention.report):
        if report is None:
            continue
        side = "Kiln's kernel" if attention.chosen[i] is type(attention).KILN else "the library"
        us = {k: "-" if report[k] is None else f"{report[k] * 1e6:.1f}" for k in ("kiln", "library")}
        print(f"attention signature {i}: {side} (Kiln {us['kiln']} us, library {us['library']} us; "
              f"{report['why']})")


if __name__ == "__main__":
    main()
