#!/usr/bin/env python3
"""Compile time, code size and peak memory of a GPT-2-small-sized archive.

Usage:
    python3 bench/models/gpt2_small_compile.py [--host target/release/host] [--work DIR]

Rebuilds the 124 M-parameter archive from the committed skeleton
(`tests/fixtures/models/gpt2_small.skeleton.pt2`, see `tools/inflate_pt2.py`), then
compiles it, each device in a fresh process, for cpu (wrapper.cpp) and cuda
(output_code.py), and prints per device: wall time of `host compile`, the generated
code's size, the weights file's size, and the process's peak resident memory against
the weights' size. The issue's targets: under 5 s, code under 1 MB, peak under 2x the
weights. Exits non-zero when a target is missed. Needs only Python's standard library
and a release build of the host.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "models")


def peak_rss_of(cmd):
    """Runs cmd in a child; returns (seconds, peak RSS bytes of that child, output)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.dup2(write, 1)
        os.dup2(write, 2)
        try:
            os.execv(cmd[0], cmd)
        finally:
            os._exit(127)
    os.close(write)
    start = time.perf_counter()
    chunks = []
    while True:
        chunk = os.read(read, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    _, status, usage = os.wait4(pid, 0)
    seconds = time.perf_counter() - start
    os.close(read)
    text = b"".join(chunks).decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{text}")
    return seconds, usage.ru_maxrss * 1024, text


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default=os.path.join(ROOT, "target", "release", "host"))
    ap.add_argument("--work", help="folder for the archive and outputs (default: a temporary one)")
    args = ap.parse_args()
    if not os.path.exists(args.host):
        sys.exit(f"{args.host} not found: build it with `cargo build --release --workspace`")
    work = args.work or tempfile.mkdtemp(prefix="kiln-gpt2-small-")
    os.makedirs(work, exist_ok=True)
    archive = os.path.join(work, "gpt2_small.pt2")
    if not os.path.exists(archive):
        subprocess.run(
            [
                sys.executable,
                os.path.join(ROOT, "tools", "inflate_pt2.py"),
                os.path.join(FIXTURES, "gpt2_small.skeleton.pt2"),
                os.path.join(FIXTURES, "gpt2_small.weights.json"),
                archive,
            ],
            check=True,
        )
    with open(os.path.join(FIXTURES, "gpt2_small.weights.json")) as f:
        weights = sum(json.load(f)["members"].values())
    print(f"archive {archive}: {os.path.getsize(archive) / 1e6:.1f} MB, weights {weights / 1e6:.1f} MB")
    failed = []
    print(f"{'device':<6} {'file':<15} {'compile s':>9} {'code MB':>8} {'weights MB':>10} {'peak MB':>8} {'peak/weights':>12}")
    for device, code_name in [("cpu", "wrapper.cpp"), ("cuda", "output_code.py")]:
        out = os.path.join(work, device)
        seconds, peak, _ = peak_rss_of([args.host, "compile", archive, "--device", device, "-o", out])
        code = os.path.getsize(os.path.join(out, code_name))
        file = os.path.getsize(os.path.join(out, "weights.safetensors"))
        ratio = peak / weights
        print(
            f"{device:<6} {code_name:<15} {seconds:>9.2f} {code / 1e6:>8.3f} {file / 1e6:>10.1f} "
            f"{peak / 1e6:>8.0f} {ratio:>12.2f}"
        )
        if seconds >= 5.0:
            failed.append(f"{device}: compile took {seconds:.2f} s (target < 5 s)")
        if code >= 1_000_000:
            failed.append(f"{device}: {code_name} is {code} bytes (target < 1 MB)")
        if ratio >= 2.0:
            failed.append(f"{device}: peak memory {ratio:.2f}x the weights (target < 2x)")
    for f in failed:
        print("MISSED", f)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
