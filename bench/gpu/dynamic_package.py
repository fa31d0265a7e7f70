#!/usr/bin/env python3
"""`kiln.compile` of exports with dynamic shapes on a GPU: the checks of
tests/support/torch_backend.py's `dynamic_export` (one compile for the whole range, every
call eager's; sizes outside the range refused; a convolution compiled per size) run on
`--device` instead of the cpu.

    KILN_HOST=HOST KILN_PLUGIN_PATH=PLUGINS PYTHONPATH=python \\
        python3 bench/gpu/dynamic_package.py [--device cuda]
"""

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests/support"))

import torch_backend  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    a = p.parse_args()
    torch_backend.DEVICE = a.device
    torch_backend.dynamic_export(REPO)


if __name__ == "__main__":
    main()
