#!/usr/bin/env python3
"""Times Kiln's index_copy Triton kernel (the C++ wrapper's) against ATen's index_copy_ on a
GPT-2 cache row (bench/gpu/index_copy_bench.toml: a bf16 [1, 12, 1024, 64] cache, one
position), on the GPU machine. The kernel is taken from `host compile --wrapper cpp`'s
kernels.py and launched with torch tensors.

    python3 bench/gpu/index_copy_kernel.py HOST
"""

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from triton.testing import do_bench

host = sys.argv[1]
out = Path(tempfile.mkdtemp())
here = Path(__file__).resolve().parent
subprocess.run([host, "--plugins", str(Path(host).parent / "plugins"), "compile", str(here / "index_copy_bench.toml"),
                "--device", "cuda", "--wrapper", "cpp", "-o", str(out)], check=True, capture_output=True)
sys.path.insert(0, str(out))
spec = importlib.util.spec_from_file_location("kernels", out / "kernels.py")
kernels = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kernels)
name = next(n for n in dir(kernels) if n.startswith("kiln_index_copy"))
kernel = getattr(kernels, name)
cache = torch.randn(1, 12, 1024, 64, device="cuda", dtype=torch.bfloat16)
new = torch.randn(1, 12, 1, 64, device="cuda", dtype=torch.bfloat16)
pos = torch.tensor([512], device="cuda")
numel = new.numel()
args = [1, 12, 1, 64, 768, 64, 64, 1, 786432, 65536, 64, 1, 1, 1024, numel]
grid = ((numel + 255) // 256,)
kernel[grid](cache, pos, new, *args, DIM=2, BLOCK=256)
want = cache.clone()
want.index_copy_(2, pos, new)
assert torch.equal(cache, want)
kiln_us = do_bench(lambda: kernel[grid](cache, pos, new, *args, DIM=2, BLOCK=256)) * 1e3
aten_us = do_bench(lambda: cache.index_copy_(2, pos, new)) * 1e3
print(f"# {torch.cuda.get_device_name(0)}: {name} {kiln_us:.1f} us, ATen index_copy_ {aten_us:.1f} us "
      "(do_bench, launch included)")
