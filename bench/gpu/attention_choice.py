#!/usr/bin/env python3
"""Kiln's flash-attention kernel against the library's scaled_dot_product_attention
(PyTorch's dispatcher: flash, cuDNN, memory-efficient or math), and which of the two
the wrapper's run-time choice (kiln_runtime.Attention) picks, over a sweep of shapes.

Each case is a kiln-graph/1 attention as models write it: query, key and value
projections stored [B, L, H, E] and read as [B, H, L, E], the result transposed back
and reshaped to [B, L, H * E] (the output projection's operand). `host compile`
compiles it for cuda; its output_code.py is imported and called with
KILN_ATTENTION=measure (the chooser's pick and its own timings), =kiln and =library
(each timed over the whole call with triton.testing.do_bench, and checked against
float64 eager attention).

Usage (on the GPU machine, with a host staged by bench/gpu/ab_stage.sh):
  python3 bench/gpu/attention_choice.py --host bench/gpu/ab/new/host --out $OUT/attention.txt
"""

import argparse
import importlib.util
import itertools
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attention_cases import graph  # noqa: E402

# (name, batch, query heads, key/value heads, rows, head size)
SHAPES = [
    ("gpt2", 8, 12, 12, 512, 64),
    ("llama", 8, 16, 4, 512, 64),
    ("vit", 8, 12, 12, 197, 64),
    ("e128", 4, 16, 16, 1024, 128),
    ("gqa128", 4, 32, 8, 512, 128),
]
KINDS = ["causal", "mask", "none"]
DTYPES = ["float32", "bfloat16", "float16"]


def case_graph(name, b, h, hk, l, e, kind, dtype):
    """The graph of one case: inputs q [B, L, H, E], k and v [B, L, Hk, E], and a
    bool padding mask [B, 1, 1, L] for `mask`."""
    inputs = [("q", [b, l, h, e], dtype), ("k", [b, l, hk, e], dtype), ("v", [b, l, hk, e], dtype)]
    nodes = [(f"{n}t", "transpose", [n, 1, 2], {}) for n in "qkv"]
    operands = ["qt", "kt", "vt"]
    if kind == "mask":
        inputs.append(("m", [b, 1, 1, l], "bool"))
        operands.append("m")
    attrs = {"is_causal": True} if kind == "causal" else {}
    if hk != h:
        attrs["enable_gqa"] = True
    nodes.append(("o", "scaled_dot_product_attention", operands, attrs))
    nodes.append(("ot", "transpose", ["o", 1, 2], {}))
    nodes.append(("y", "reshape", ["ot", [b, l, h * e]], {}))
    return graph(name, inputs, nodes, ["y"])


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference(torch, inputs, h, hk, kind):
    """float64 eager attention of the case's inputs, [B, L, H * E]."""
    q, k, v = (t.double().transpose(1, 2) for t in inputs[:3])
    if hk != h:
        k, v = k.repeat_interleave(h // hk, dim=1), v.repeat_interleave(h // hk, dim=1)
    mask = inputs[3] if kind == "mask" else None
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=kind == "causal")
    return o.transpose(1, 2).reshape(q.shape[0], q.shape[2], -1)


def forced(module, mode):
    """A fresh Attention for `module`'s signatures, forced to `mode`."""
    old = module.ATTENTION
    return type(old)(old._sdpa, old._empty, old._synchronize, old._capturing, old._signatures,
                     environ={"KILN_ATTENTION": mode})


def run_case(torch, do_bench, module, h, hk, kind):
    """The chooser's report, and per side: µs per call and max error."""
    inputs = module.make_inputs()
    if kind == "mask":
        # Padding: each sequence keeps at least its first half of keys.
        b, l = inputs[3].shape[0], inputs[3].shape[-1]
        keep = torch.arange(l, device=inputs[3].device) < torch.randint(l // 2, l + 1, (b, 1, 1, 1),
                                                                        device=inputs[3].device)
        inputs[3] = keep
    want = reference(torch, inputs, h, hk, kind)
    scale = want.abs().max().item() or 1.0
    module.ATTENTION = forced(module, "measure")
    module.call(list(inputs))
    report = dict(module.ATTENTION.report[0])
    report["pick"] = "kiln" if module.ATTENTION.chosen[0] == module.ATTENTION.KILN else "library"
    sides = {}
    for mode in ("kiln", "library"):
        module.ATTENTION = forced(module, mode)
        (got,) = module.call(list(inputs))
        ran = "kiln" if module.ATTENTION.chosen[0] == module.ATTENTION.KILN else "library"
        err = ((got.double() - want).abs().nan_to_num(0).max() / scale).item()
        us = do_bench(lambda: module.call(list(inputs)), warmup=25, rep=100) * 1e3
        sides[mode] = (us, err, ran)
    return report, sides


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", required=True, help="a staged host (bench/gpu/ab/NAME/host)")
    ap.add_argument("--plugins", help="its plugins (default: plugins/ beside it)")
    ap.add_argument("--out", required=True, help="the result file")
    ap.add_argument("--shapes", nargs="*", default=[s[0] for s in SHAPES], help="names of SHAPES to run")
    a = ap.parse_args()
    plugins = a.plugins or os.path.join(os.path.dirname(os.path.abspath(a.host)), "plugins")
    import torch
    from triton.testing import do_bench

    torch.backends.cuda.matmul.allow_tf32 = False
    work = tempfile.mkdtemp(prefix="attention-choice-")
    lines = [f"# {time.strftime('%Y-%m-%d %H:%M')} {torch.cuda.get_device_name()} torch {torch.__version__}",
             "# µs per call of output_code.py (one attention, no other kernel) with KILN_ATTENTION=kiln and",
             "# =library; pick: the chooser's (measure) pick, with its own µs; best: the faster forced side;",
             "# err: max |got - float64 eager| / max |eager|.",
             f"{'case':<34} {'kiln µs':>8} {'lib µs':>8} {'lib/kiln':>8} {'pick':>7} "
             f"{'pick: kiln/lib µs':>18} {'best':>7} {'kiln err':>9} {'lib err':>9}  note"]
    print("\n".join(lines), flush=True)
    for (name, b, h, hk, l, e), kind, dtype in itertools.product(SHAPES, KINDS, DTYPES):
        if name not in a.shapes:
            continue
        case = f"{name}_{kind}_{dtype}"
        folder = os.path.join(work, case)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "graph.toml"), "w") as f:
            f.write(case_graph(case, b, h, hk, l, e, kind, dtype))
        proc = subprocess.run([a.host, "--plugins", plugins, "compile", os.path.join(folder, "graph.toml"),
                               "--device", "cuda", "-o", os.path.join(folder, "out")],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            line = f"{case:<34} host compile failed: {(proc.stderr.strip().splitlines() or ['?'])[-1][:200]}"
        else:
            try:
                module = load(os.path.join(folder, "out", "output_code.py"), f"kiln_{case}")
                report, sides = run_case(torch, do_bench, module, h, hk, kind)
                (k_us, k_err, _), (l_us, l_err, l_ran) = sides["kiln"], sides["library"]
                mine = "-" if report["kiln"] is None else f"{report['kiln'] * 1e6:.1f}"
                theirs = "-" if report["library"] is None else f"{report['library'] * 1e6:.1f}"
                note = "" if report["why"] == "measured" else report["why"][:80]
                if l_ran != "library":
                    note = f"library declined: {note}"
                best = "kiln" if k_us <= l_us else "library"
                line = (f"{case:<34} {k_us:8.1f} {l_us:8.1f} {l_us / k_us:8.3f} {report['pick']:>7} "
                        f"{mine + '/' + theirs:>18} {best:>7} {k_err:9.2e} {l_err:9.2e}  {note}")
            except Exception as error:  # one case's failure is a line of the table
                line = f"{case:<34} failed: {type(error).__name__}: {str(error)[:200]}"
            torch.cuda.empty_cache()
        lines.append(line)
        print(line, flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
