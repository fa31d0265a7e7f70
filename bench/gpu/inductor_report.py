"""Inductor's side of the config scripts (outer_configs.py, row_configs.py, tile_configs.py):
compile the same computation with torch.compile, time it, and show how its kernels are
configured."""

from __future__ import annotations

import re
from typing import Callable

import torch
from triton.testing import do_bench


def report_inductor(fn: Callable, args: tuple, share: Callable[[float], float], pattern: str,
                    note: str = "") -> float:
    """Prints Inductor's median time for `fn(*args)`, its share of copy bandwidth
    (`share(ms)`, in percent), and every line of its generated code that matches
    `pattern` (configs, loads, loops); returns the time in ms."""
    from torch._inductor.utils import run_and_get_code

    compiled = torch.compile(fn)
    _, codes = run_and_get_code(compiled, *args)
    ms = do_bench(lambda: compiled(*args))
    print(f"Inductor: {ms:.4f} ms {share(ms):5.1f} % of copy{note}")
    for code in codes:
        for line in code.splitlines():
            if re.search(pattern, line):
                print("  ", line.strip()[:200])
    return ms
