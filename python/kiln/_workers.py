"""Kernel-compile workers started ahead of the code that needs them.

A generated `output_code.py` compiles its Triton kernels in a pool of worker processes
that it starts when it is imported (its runtime's `KernelSet`). A fresh worker spends
about a second before its first kernel is done: loading Triton, then a first compile
that sets the compiler up (0.3 s and 0.65 s on the H100 machine, where each later
kernel takes 0.07 s), and the first launch of a model's first call waits for it.

`warm(device)` starts the workers (`_warm_worker.py`) when a graph's compile begins, so
that they spend that second while the graph is exported and compiled. The runtime of
the file imported next takes them (`KernelSet.lent` calls `lend`, finding this module
among the loaded ones) before it starts any of its own. A worker not taken exits after
`IDLE_S` seconds, or is ended with this process.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
import time

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_warm_worker.py")
IDLE_S = 30.0

_LOCK = threading.Lock()
# The workers started and not lent yet: (process, start time).
_IDLE: list = []


def size() -> int:
    """How many workers a generated file's runtime starts: KILN_COMPILE_WORKERS, else one
    per core but one (its `KernelSet` reads the same)."""
    wanted = os.environ.get("KILN_COMPILE_WORKERS", "")
    if wanted.isdigit():
        return int(wanted)
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    return max(1, cpus - 1)


def target() -> list | None:
    """The Triton target of the device this process runs on, as [backend, arch, warp
    size]; None where Triton has no active device here."""
    try:
        from triton.runtime import driver

        t = driver.active.get_current_target()
        return [t.backend, t.arch, t.warp_size]
    except Exception:
        return None


def warm(device: str) -> int:
    """Tops the pool up to `size()` workers for a graph compiled for `device` (none for
    the cpu, whose kernels are C++); returns how many were started."""
    if device.split(":")[0] == "cpu" or size() == 0:
        return 0
    goal = target()
    return 0 if goal is None else start(goal)


def start(goal: list) -> int:
    """Tops the pool up to `size()` workers, each warmed up on the Triton target `goal`;
    returns how many were started."""
    started = 0
    with _LOCK:
        for proc, _ in [(p, t) for p, t in _IDLE if p.poll() is not None]:
            _end(proc)
        _IDLE[:] = [(p, t) for p, t in _IDLE if p.returncode is None]
        for _ in range(size() - len(_IDLE)):
            try:
                proc = subprocess.Popen(
                    [sys.executable, SCRIPT, json.dumps(goal), str(IDLE_S)],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                    text=True, bufsize=1)
            except OSError:  # the file's runtime starts its own
                break
            _IDLE.append((proc, time.monotonic()))
            started += 1
    return started


def lend(path: str, count: int) -> list:
    """Up to `count` started workers, each told to serve the generated file at `path`:
    processes whose stdout gives "ready" and then the runtime's replies. Workers close
    to their idle time are left to exit."""
    lent = []
    with _LOCK:
        while _IDLE and len(lent) < count:
            proc, started = _IDLE.pop(0)
            if proc.poll() is not None or time.monotonic() - started > 0.8 * IDLE_S:
                _end(proc)
                continue
            try:
                proc.stdin.write(path + "\n")
                proc.stdin.flush()
            except (OSError, ValueError):
                _end(proc)
                continue
            lent.append(proc)
    return lent


def _end(proc) -> None:
    """Ends a worker not lent (it is only waiting, or warming up): killed, reaped, its pipes
    closed."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        try:
            pipe.close()
        except OSError:
            pass


@atexit.register
def _end_all() -> None:
    """At exit, the workers never lent end with the process."""
    with _LOCK:
        for proc, _ in _IDLE:
            _end(proc)
        _IDLE.clear()
