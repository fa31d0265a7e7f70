#!/usr/bin/env python3
"""Speed of one dynamic compile against static ones, on the GPU machine: a model exported
with a dynamic batch and sequence length (`torch.export`, `dynamic_shapes=`) at a realistic
size, compiled once by `host compile --dynamic` and once per shape by `host compile
--specialize`, timed at several shapes in one process against eager and
`torch.compile(dynamic=True)` (Inductor), each the median of `triton.testing.do_bench`.

    python3 bench/gpu/dynamic_speed.py HOST [--model mlp_ln|gpt2|bert] [--dtype float32]
        [--shapes 8x128,16x512,32x1024] [--device cuda] [--wrapper cpp]

`--wrapper cpp` compiles both for the C++ wrapper (`wrapper.cpp`, built and called
through bench/gpu/aot_loader.py: `kiln_call_shaped` for the dynamic one).

Models (random weights, exported as tools/export_dynamic.py exports its small ones):
- `mlp_ln`: linear 1024 -> 4096, GELU, linear back, residual and layer norm over
  `x` `[batch, seq, 1024]`;
- `gpt2`: GPT-2 small (12 layers, 768 wide) LM logits over `input_ids`;
- `bert`: BERT base (12 layers, 768 wide) hidden states over `input_ids` and an
  `attention_mask` with padding.

Prints one table row per shape: ms per call of each, and the ratios the issue sets bars
for (dynamic / static, dynamic / Inductor dynamic).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent / "tools"))
from export_dynamic import BertHidden, Gpt2Logits  # noqa: E402
from aot_loader import AotModule  # noqa: E402
from run import load_module, rel_error  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class MlpLn(torch.nn.Module):
    def __init__(self, width: int = 1024, hidden: int = 4096):
        super().__init__()
        self.up = torch.nn.Linear(width, hidden)
        self.down = torch.nn.Linear(hidden, width)
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, x):
        return self.norm(x + self.down(torch.nn.functional.gelu(self.up(x))))


def model_of(name: str):
    """The model, the largest sequence its positions allow, and its inputs at a size."""
    if name == "mlp_ln":
        return MlpLn(), 2048, lambda b, s, dtype, device="cuda": {
            "x": torch.randn(b, s, 1024, dtype=dtype, device=device)}
    from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel

    def ids(b, s, _, device="cuda"):
        return {"input_ids": torch.randint(0, 30000, (b, s), device=device)}
    if name == "gpt2":
        return Gpt2Logits(GPT2LMHeadModel(GPT2Config())), 1024, ids

    def masked(b, s, dtype, device="cuda"):
        mask = torch.ones(b, s, dtype=torch.int64, device=device)
        mask[0, s - 1:] = 0
        return {**ids(b, s, dtype, device), "attention_mask": mask}
    return BertHidden(BertModel(BertConfig())), 512, masked


def exported(model: torch.nn.Module, inputs, path: Path, batch: tuple, seq: tuple):
    """The model (on the cpu) exported there with a dynamic batch and sequence length, as
    tools/export_dynamic.py exports (on CUDA, transformers' attention mask adds a guard
    that export cannot prove over the range), saved to `path`, and the names of those
    two symbols in the archive."""
    b, s = torch.export.Dim("batch", min=batch[0], max=batch[1]), torch.export.Dim("seq", min=seq[0], max=seq[1])
    example = inputs(2, 8, "cpu")
    ep = torch.export.export(model, (), example, dynamic_shapes={k: {0: b, 1: s} for k in example}, strict=False)
    torch.export.save(ep, str(path))
    first = next(iter(example))
    val = next(n for n in ep.graph.nodes if n.op == "placeholder" and n.name == first).meta["val"]
    return str(val.shape[0]), str(val.shape[1])


def interleaved(runs: dict, rounds: int = 5) -> dict:
    """Each function's ms per call: the median of `rounds` interleaved rounds of
    `triton.testing.do_bench` (the machine is noisy)."""
    from triton.testing import do_bench

    samples = {k: [] for k in runs}
    for _ in range(rounds):
        for k, f in runs.items():
            samples[k].append(do_bench(f, warmup=5, rep=50))
    return {k: sorted(v)[len(v) // 2] for k, v in samples.items()}


def host_compile(host: str, archive: Path, out: Path, device: str, extra: list) -> float:
    start = time.perf_counter()
    done = subprocess.run([host, "compile", str(archive), "--device", device, "-o", str(out), *extra],
                          capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"host compile {' '.join(extra)} failed:\n{done.stderr}")
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("host")
    p.add_argument("--model", default="mlp_ln", choices=["mlp_ln", "gpt2", "bert"])
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    p.add_argument("--shapes", default="8x128,16x512,32x1024,3x77")
    p.add_argument("--device", default="cuda")
    p.add_argument("--wrapper", choices=["python", "cpp"], default="python")
    a = p.parse_args()
    wrapper = ["--wrapper", "cpp"] if a.wrapper == "cpp" else []

    def load(folder: Path):
        return AotModule(str(folder)) if a.wrapper == "cpp" else load_module(folder / "output_code.py", a.device)

    dtype = DTYPES[a.dtype]
    torch.manual_seed(0)
    model, longest, make = model_of(a.model)
    model = model.to(dtype).eval()
    inputs = lambda b, s, device="cuda": make(b, s, dtype, device)  # noqa: E731
    root = Path(tempfile.mkdtemp(prefix="kiln-dynamic-speed-"))
    archive = root / f"{a.model}.pt2"
    with torch.no_grad():
        sb, ss = exported(model, inputs, archive, (1, 64), (2, longest))
    model = model.to("cuda")
    shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")]
    dyn_s = host_compile(a.host, archive, root / "dynamic", a.device, ["--dynamic", *wrapper])
    dynamic = load(root / "dynamic")
    inductor = torch.compile(model, dynamic=True)
    print(f"# bench/gpu/dynamic_speed.py on {torch.cuda.get_device_name(0)}, torch {torch.__version__}: "
          f"{a.model} {a.dtype}, device {a.device}, {a.wrapper} wrapper; one --dynamic host compile: {dyn_s:.2f} s")
    print("| batch x seq | eager ms | Inductor dynamic ms | Kiln static ms | Kiln static, library attention ms | "
          "Kiln dynamic ms | dynamic / static | dynamic / Inductor | rel error |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    ratios = []
    for b, s in shapes:
        static_dir = root / f"static-{b}x{s}"
        host_compile(a.host, archive, static_dir, a.device,
                     ["--specialize", f"{sb}={b}", "--specialize", f"{ss}={s}", *wrapper])
        static = load(static_dir)
        kw = inputs(b, s)
        xs = list(kw.values())
        with torch.no_grad():
            want = model(**kw)
            inductor(**kw)
            got = dynamic.call(list(xs))[0]
            static.call(list(xs))
            torch.cuda.synchronize()
            # Interleaved rounds, the median of each: the machine is noisy.
            runs = {
                "eager": lambda: model(**kw),
                "inductor": lambda: inductor(**kw),
                "static": lambda: static.call(list(xs)),
                "dynamic": lambda: dynamic.call(list(xs)),
            }
            # The static compile with the library's attention, as the dynamic one runs
            # it: what the attention kernel's choice accounts for.
            chosen = getattr(getattr(static, "ATTENTION", None), "chosen", None)
            if chosen:
                saved = list(chosen)
                library = [None] * len(chosen)
                static.ATTENTION.mode = "library"
                static.ATTENTION.chosen[:] = library
                static.call(list(xs))
                lib_chosen = list(static.ATTENTION.chosen)
                static.ATTENTION.chosen[:] = saved

                def with_library():
                    static.ATTENTION.chosen[:] = lib_chosen
                    out = static.call(list(xs))
                    static.ATTENTION.chosen[:] = saved
                    return out
                runs["static_library"] = with_library
            times = interleaved(runs)
        err = rel_error(got.float(), want.float())
        r_static, r_ind = times["dynamic"] / times["static"], times["dynamic"] / times["inductor"]
        ratios.append(r_static)
        lib = f"{times['static_library']:.4f}" if "static_library" in times else "-"
        print(f"| {b} x {s} | {times['eager']:.4f} | {times['inductor']:.4f} | {times['static']:.4f} | {lib} | "
              f"{times['dynamic']:.4f} | {r_static:.3f} | {r_ind:.3f} | {err:.1e} |", flush=True)
    geo = 1.0
    for r in ratios:
        geo *= r
    print(f"# geometric mean of dynamic / static: {geo ** (1 / len(ratios)):.3f}")
    attention = getattr(dynamic, "ATTENTION", None)
    for (i, bucket), side in sorted(getattr(attention, "by_size", {}).items()):
        pick = "library" if callable(side) else "kiln" if side == attention.KILN else f"kiln tile variant {side}"
        report = attention.by_size_report[(i, bucket)]
        times = ", ".join(f"{k} {v * 1e6:.1f} us" for k, v in report.items() if isinstance(v, float))
        print(f"# dynamic attention signature {i}, size bucket {bucket}: {pick} ({times or report['why']})")


if __name__ == "__main__":
    main()
