#!/usr/bin/env python3
"""What a decoding step would gain without some of its launches: Kiln's reduce-overhead step
(bench/gpu/decode_step.py's models, transformers' static cache), and the same compiled code with
the launches of the kernels a pattern names replaced by nothing, each timed under CUDA graphs in
interleaved rounds in one process. A step without a kernel computes garbage; its time bounds what
removing that launch (folding its work into another kernel) could save. `--edit NAME` times the
code as the edit NAME of `bench/gpu/decode_edits.py` or `decode_probes.py` rewrites it instead:
another launch config for a kernel, or a kernel's text changed (a probe, whose results may be
wrong: each variant's logits are compared with the base's). Also timed: the base step's graph
replayed alone, without the call's input copies and Python.

    PYTHONPATH=python KILN_HOST=bench/gpu/ab/NAME/host python3 bench/gpu/decode_ablate.py \\
        [--model gpt2] [--dtype bf16] [--batch 1] --drop combine=kiln_flash_combine \\
        [--drop mask=where_le ...] [--edit lm_x8_w8 ...] [--out FILE]

A pattern is a regular expression searched in each launched kernel's name; a label may name
several patterns joined by `|`.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent / "tools"))
from decode_edits import substitute  # noqa: E402
from decode_probes import EDITS  # noqa: E402
from decode_step import DTYPES, model  # noqa: E402
from precision_child import interleaved, setup, sync  # noqa: E402

LAUNCH = re.compile(r"KERNELS\.(\w+)\[[^\]]*\]\([^()]*\)")


def without(code: str, pattern: str) -> tuple[str, int]:
    """`code` with each launch of a kernel whose name matches `pattern` replaced by `None`."""
    return substitute(code, LAUNCH, pattern, lambda _: "None")


def variant(folder: Path, label: str, change) -> tuple[Path, int]:
    """A copy of the compiled folder (files linked, not copied) whose output_code.py is `change`
    of the original's text (which gives the new text and how many places it changed)."""
    out = folder.parent / f"{folder.name}-{label}"
    out.mkdir(exist_ok=True)
    for f in folder.iterdir():
        if f.name != "output_code.py" and not (out / f.name).exists():
            (out / f.name).symlink_to(f)
    code, count = change((folder / "output_code.py").read_text())
    (out / "output_code.py").write_text(code)
    return out, count


def compiled_variant(ep, folder: Path, label: str, change):
    """`kiln.compile` of export `ep` (mode reduce-overhead) from a copy of its compiled `folder`
    whose output_code.py is `change` of it (`variant`), and how many places it changed."""
    import kiln
    import kiln._compile as compiled_module

    path, count = variant(folder, label, change)
    build = compiled_module.build
    compiled_module.build = lambda *_args, **_kw: path
    try:
        return kiln.compile(ep, device="cuda", mode="reduce-overhead"), count
    finally:
        compiled_module.build = build


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gpt2")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--cache", type=int, default=1024)
    p.add_argument("--position", type=int, default=512)
    p.add_argument("--drop", action="append", default=[], help="label=pattern (repeatable)")
    p.add_argument("--edit", action="append", default=[],
                   help="an edit of decode_edits.py or decode_probes.py (repeatable)")
    p.add_argument("--rep", type=float, default=200, help="ms per column per round")
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    setup()
    # Kiln's attention kernel whatever the library measures: a step without its combine
    # disagrees with the library, which the first call's choice would then take.
    os.environ["KILN_ATTENTION"] = "kiln"
    import kiln
    from generate import export_step

    m = model(a.model, DTYPES[a.dtype], a.cache)
    ep = export_step(m, a.cache, "cuda", a.batch)
    kwargs = {"input_ids": torch.full((a.batch, 1), 7, dtype=torch.int64, device="cuda"),
              "cache_position": torch.tensor([a.position], device="cuda")}
    steps = {"base": kiln.compile(ep, device="cuda", mode="reduce-overhead")}
    folder = steps["base"].folder
    counts = {"base": 0}
    changes = [(label, lambda code, p=pattern: without(code, p))
               for label, pattern in (spec.split("=", 1) for spec in a.drop)]
    changes += [(name, EDITS[name]) for name in a.edit]
    for label, change in changes:
        steps[label], counts[label] = compiled_variant(ep, folder, label, change)
    errors = {}
    with torch.no_grad():
        for label, step in steps.items():
            step(**kwargs)
            out = step(**kwargs)
            out = (out[0] if isinstance(out, (tuple, list)) else out).float()
            if label == "base":
                want = out.clone()
            errors[label] = float((out - want).abs().max() / want.abs().max())
        sync()
        timed = {label: (lambda s=s: s(**kwargs)) for label, s in steps.items()}
        graph = steps["base"]._call._graph
        timed["base replay only"] = graph.replay
        ms = interleaved(timed, a.rep)
    lines = [f"# bench/gpu/decode_ablate.py, {time.strftime('%Y-%m-%d %H:%M')}: {torch.cuda.get_device_name(0)}, "
             f"torch {torch.__version__}; {a.model} {a.dtype} batch {a.batch}, position {a.position}; "
             f"under CUDA graphs, median of interleaved rounds",
             "| variant | places changed | ms | saves us | logits' error against base |",
             "| --- | --- | --- | --- | --- |"]
    for label, t in ms.items():
        error = f"{errors[label]:.1e}" if label in errors else ""
        lines.append(f"| {label} | {counts.get(label, 0)} | {t:.4f} | {(ms['base'] - t) * 1e3:.1f} | {error} |")
    print("\n".join(lines), flush=True)
    if a.out:
        a.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
