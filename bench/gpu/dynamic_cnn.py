#!/usr/bin/env python3
"""Convolutional networks over a dynamic batch on the GPU machine: a torchvision model
exported with a dynamic batch (`torch.export`, `dynamic_shapes=`), compiled once by `host
compile --dynamic` and once per batch by `host compile --specialize`, checked against eager
and timed in one process against eager and `torch.compile(dynamic=True)` (Inductor), each the
median of interleaved `triton.testing.do_bench` rounds.

    python3 bench/gpu/dynamic_cnn.py HOST [--model resnet50] [--dtype float32]
        [--batches 1,8,32] [--image 224]

Prints one table row per batch: ms per call of each, dynamic / static and dynamic /
Inductor, and the relative error against eager (float32 with TF32 off; 16-bit against
eager in the same dtype).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from dynamic_speed import DTYPES, host_compile, interleaved  # noqa: E402
from run import load_module, rel_error  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("host")
    p.add_argument("--model", default="resnet50", help="a torchvision.models constructor")
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    p.add_argument("--batches", default="1,8,32")
    p.add_argument("--image", type=int, default=224)
    p.add_argument("--most", type=int, default=64, help="the largest batch of the range")
    a = p.parse_args()
    import torchvision

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dtype = DTYPES[a.dtype]
    torch.manual_seed(0)
    model = getattr(torchvision.models, a.model)().to(dtype).eval()
    root = Path(tempfile.mkdtemp(prefix="kiln-dynamic-cnn-"))
    archive = root / f"{a.model}.pt2"
    example = torch.randn(2, 3, a.image, a.image, dtype=dtype)
    batch = torch.export.Dim("batch", min=1, max=a.most)
    with torch.no_grad():
        ep = torch.export.export(model, (example,), dynamic_shapes=({0: batch},), strict=False)
    torch.export.save(ep, str(archive))
    symbol = str(next(n for n in ep.graph.nodes if n.op == "placeholder"
                      and n.name in ep.graph_signature.user_inputs).meta["val"].shape[0])
    model = model.to("cuda")
    compile_s = host_compile(a.host, archive, root / "dynamic", "cuda", ["--dynamic"])
    dynamic = load_module(root / "dynamic" / "output_code.py", "cuda")
    inductor = torch.compile(model, dynamic=True)
    print(f"# bench/gpu/dynamic_cnn.py on {torch.cuda.get_device_name(0)}, torch {torch.__version__}: "
          f"{a.model} {a.dtype} at {a.image} x {a.image}, batch 1..{a.most}; one --dynamic host compile: "
          f"{compile_s:.2f} s")
    print("| batch | eager ms | Inductor dynamic ms | Kiln static ms | Kiln dynamic ms | dynamic / static | "
          "dynamic / Inductor | rel error |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    ratios = []
    for b in (int(v) for v in a.batches.split(",")):
        static_dir = root / f"static-{b}"
        host_compile(a.host, archive, static_dir, "cuda", ["--specialize", f"{symbol}={b}"])
        static = load_module(static_dir / "output_code.py", "cuda")
        x = torch.randn(b, 3, a.image, a.image, dtype=dtype, device="cuda")
        with torch.no_grad():
            want = model(x)
            got = dynamic.call([x])[0]
            inductor(x)
            static.call([x])
            torch.cuda.synchronize()
            runs = {
                "eager": lambda: model(x),
                "inductor": lambda: inductor(x),
                "static": lambda: static.call([x]),
                "dynamic": lambda: dynamic.call([x]),
            }
            times = interleaved(runs)
        err = rel_error(got.float(), want.float())
        r_static, r_ind = times["dynamic"] / times["static"], times["dynamic"] / times["inductor"]
        ratios.append(r_static)
        print(f"| {b} | {times['eager']:.4f} | {times['inductor']:.4f} | {times['static']:.4f} | "
              f"{times['dynamic']:.4f} | {r_static:.3f} | {r_ind:.3f} | {err:.1e} |", flush=True)
    geo = 1.0
    for r in ratios:
        geo *= r
    print(f"# geometric mean of dynamic / static: {geo ** (1 / len(ratios)):.3f}")


if __name__ == "__main__":
    main()
