#!/usr/bin/env python3
"""Refills the weights of an archive written by `tools/model_zoo.py --skeleton`.

Usage:
    python3 tools/inflate_pt2.py SKELETON.pt2 SIZES.json OUT.pt2

Every member that SIZES.json lists is written with that many bytes of float32 values drawn
from a normal distribution (sigma 0.02, the scale of GPT-2's initialisation), deterministic
from a fixed seed; every other member is copied. The result is a complete `torch.export`
archive with random weights: the input for compile-time and memory benchmarks of a real
model's size. Needs only Python's standard library.
"""
import json
import random
import struct
import sys
import zipfile


def block(seed, count):
    rng = random.Random(seed)
    return struct.pack(f"<{count}f", *(rng.gauss(0.0, 0.02) for _ in range(count)))


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    skeleton, sizes_path, out = sys.argv[1:]
    with open(sizes_path) as f:
        sizes = json.load(f)["members"]
    # One random block of 1 MiB, rotated per member: drawing 124 M normals in pure Python
    # would take minutes, and a benchmark of compile time does not need independent values.
    pool = block(0, 1 << 18)
    with zipfile.ZipFile(skeleton) as src, zipfile.ZipFile(out, "w") as dst:
        for n, info in enumerate(src.infolist()):
            size = sizes.get(info.filename)
            if size is None:
                dst.writestr(info, src.read(info.filename))
                continue
            with dst.open(info.filename, "w", force_zip64=True) as w:
                start = (n * 4099 * 4) % len(pool)
                left = size
                while left > 0:
                    chunk = (pool[start:] + pool[:start])[:left]
                    w.write(chunk)
                    left -= len(chunk)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
