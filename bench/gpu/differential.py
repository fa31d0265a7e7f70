#!/usr/bin/env python3
"""Differential testing on a GPU: Kiln's generated Triton code against PyTorch eager.

Kiln's graph fuzzer (`graphgen emit`, tests/support/graphgen) writes random graphs
and each Triton device's `output_code.py`; this script runs every graph's code on
the GPU and compares each output with the same graph executed op by op with
`torch.ops.aten` (run.py's EagerGraph, which shares nothing with Kiln). A graph
fails when an output's shape or dtype differs, a float output differs by more than
its dtype allows (relative to the output's largest magnitude: 1e-4 for float32,
1e-2 for half precision; where eager itself is that far from a float64 run of the
graph, Kiln passes if it is no further), an integer or bool output differs at all,
or the code raises, crashes or hangs. Each failure is minimised (one output, nodes
cut into inputs, unused nodes pruned, `host compile` re-run each time) and written
as a graph file to --findings.

The `gxu` code runs with CUDA standing in for GXU, as in run.py.

Usage (on the GPU machine, with `host`, `graphgen` and the plugin libraries in BIN):
  differential.py --bin BIN [--from N] [--count C] [--devices cuda,gxu]
                  [--workers W] [--work DIR] [--findings DIR] [--deadline SECONDS]
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
# A worker is restarted after this many graphs: every loaded kernel stays resident.
GRAPHS_PER_WORKER = 150
# A case that shows no progress for this long is a hang.
HANG_SECONDS = 180


# ---------------------------------------------------------------------------
# Comparing one graph's outputs
# ---------------------------------------------------------------------------

def tolerance(dtypes) -> float:
    """The loosest float tolerance among the dtypes a graph computes in."""
    import torch

    tol = 0.0
    for d in dtypes:
        if d in (torch.float16, torch.bfloat16):
            tol = max(tol, 1e-2)
        elif d == torch.float32:
            tol = max(tol, 1e-4)
        elif d == torch.float64:
            tol = max(tol, 1e-9)
    return tol


def magnitude(t) -> float:
    """The largest finite |t| (0 for none)."""
    import torch

    if not t.is_floating_point() or t.numel() == 0:
        return 0.0
    finite = t[torch.isfinite(t)]
    return finite.double().abs().max().item() if finite.numel() else 0.0


def float_error(got, want, scale: float = 0.0) -> float:
    """run.py's relative error, against the larger of the output's magnitude and
    `scale` (the size of the operands it was computed from: a mean of values near 1
    that cancels to 1e-8 is only as exact as its operands)."""
    sys.path.insert(0, str(HERE))
    import run

    return run.rel_error(got, want, scale)


def operand_scale(graph, name: str) -> float:
    """The largest finite magnitude among the tensor operands of the node that
    computes `name`, as eager computed them."""
    node = next((n for n in graph.doc.get("nodes", []) if n["name"] == name), None)
    if node is None:
        return 0.0
    return max([magnitude(graph.values[a]) for a in names_in(node.get("args", []))
                if a in graph.values and hasattr(graph.values[a], "is_floating_point")] + [0.0])


def compare(graph, inputs, got, want):
    """None when Kiln's outputs match eager's, else what differs."""
    import torch

    if len(got) != len(want):
        return f"{len(got)} outputs, eager gives {len(want)}"
    names = graph.doc["outputs"]
    dtypes = {v.dtype for v in graph.values.values() if isinstance(v, torch.Tensor)}
    dtypes |= {t.dtype for t in list(inputs) + list(want)}
    tol = tolerance(dtypes)
    exact = None
    for i, (g, w) in enumerate(zip(got, want)):
        name = names[i]
        if not isinstance(g, torch.Tensor):
            return f"output `{name}` is a {type(g).__name__}, not a tensor"
        if tuple(g.shape) != tuple(w.shape) or g.dtype != w.dtype:
            return f"output `{name}` is {g.dtype}{list(g.shape)}, eager's is {w.dtype}{list(w.shape)}"
        scale = operand_scale(graph, name)
        if w.is_floating_point():
            err = float_error(g, w, scale)
            if err <= tol:
                continue
        else:
            bad = (g.cpu() != w.cpu()).sum().item()
            if bad == 0:
                continue
        # Rounding: judge both against the graph run in float64.
        if exact is None:
            exact = float64_run(graph, inputs)
        if exact is not None:
            e = exact[i]
            if w.is_floating_point():
                kiln64, eager64 = float_error(g, e.to(g.dtype), scale), float_error(w, e.to(w.dtype), scale)
                if kiln64 <= 2 * eager64 + tol:
                    continue
                return (f"output `{name}` ({w.dtype}{list(w.shape)}) differs: relative error {err:.3e} > {tol:.0e} "
                        f"(vs float64: kiln {kiln64:.2e}, eager {eager64:.2e})")
            kiln_bad = (g.cpu() != e.cpu().to(g.dtype)).sum().item()
            eager_bad = (w.cpu() != e.cpu().to(w.dtype)).sum().item()
            # A comparison or cast of floats decides ties by rounding: allow a few
            # elements (1 in 1000, at least one) more than eager gets wrong.
            slack = max(1, w.numel() // 1000) if tol > 0 else 0
            if kiln_bad <= eager_bad + slack:
                continue
            return (f"output `{name}` ({w.dtype}{list(w.shape)}): {bad} element(s) differ from eager, "
                    f"{kiln_bad} from float64 (eager: {eager_bad})")
        if w.is_floating_point():
            return f"output `{name}` ({w.dtype}{list(w.shape)}) differs: relative error {err:.3e} > {tol:.0e}"
        return f"output `{name}` ({w.dtype}{list(w.shape)}): {bad} element(s) differ"
    return None


def float64_run(graph, inputs):
    import torch

    try:
        keep, values = graph.keep, graph.values
        graph.keep, graph.exact = False, True
        try:
            return graph(*[t.double() if t.is_floating_point() else t for t in inputs])
        finally:
            graph.keep, graph.exact, graph.values = keep, False, values
    except Exception:
        return None


# ---------------------------------------------------------------------------
# One case, in a worker process
# ---------------------------------------------------------------------------

class Runner:
    """Runs cases in this process (torch imported once)."""

    def __init__(self):
        import torch

        sys.path.insert(0, str(HERE))
        import run  # bench/gpu/run.py: EagerGraph and load_module

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        self.torch = torch
        self.run = run
        self.device = torch.device("cuda", 0)
        self.loaded = 0

    def eager(self, doc: dict, seed: int, given: dict | None = None):
        """The graph run by eager on inputs drawn with `seed`, except those named in
        `given` (values of the same shape and dtype, such as a minimiser keeps)."""
        graph = self.run.EagerGraph(Path("graph.toml"), self.device, doc=doc)
        graph.keep = True
        inputs = graph.inputs(seed)
        for i, spec in enumerate(doc.get("inputs", [])):
            v = (given or {}).get(spec["name"])
            if v is not None and tuple(v.shape) == tuple(inputs[i].shape) and v.dtype == inputs[i].dtype:
                inputs[i] = v
        want = graph(*inputs)
        return graph, inputs, want

    def check(self, doc: dict, code: Path, device: str, seed: int,
              given: dict | None = None) -> tuple[str, str]:
        """(status, detail): status is ok, mismatch, error or eager-error."""
        torch = self.torch
        try:
            graph, inputs, want = self.eager(doc, seed, given)
        except Exception as e:
            return "eager-error", f"{type(e).__name__}: {' '.join(str(e).split())[:600]}"
        try:
            self.loaded += 1
            module = self.run.load_module(code, device)
            got = module.call(list(inputs))
            torch.cuda.synchronize()
        except Exception as e:
            detail = f"{type(e).__name__}: {first_line(e)}"
            if is_fatal(e):
                raise Fatal(detail) from e
            return "error", detail
        why = compare(graph, inputs, list(got), want)
        return ("mismatch", why) if why else ("ok", "")


class Fatal(Exception):
    """A CUDA error that leaves this process's context unusable."""


def is_fatal(e: BaseException) -> bool:
    text = str(e)
    return any(k in text for k in ("illegal memory access", "device-side assert", "CUDA error",
                                   "misaligned address", "unspecified launch failure"))


def first_line(e: BaseException) -> str:
    lines = [l for l in str(e).strip().splitlines() if l.strip()]
    text = lines[0] if lines else ""
    # Triton's compile errors put the useful line last.
    if len(lines) > 1 and ("CompilationError" in type(e).__name__ or "error" in lines[-1].lower()):
        text += " ... " + lines[-1].strip()
    return text[:400]


def worker(args) -> int:
    """Runs the seeds in --seeds, appending one JSON line per (seed, device) to
    --results, and a `begin` line before each so that the parent can name a case
    that killed the process."""
    work = Path(args.work)
    seeds = [int(s) for s in Path(args.seeds).read_text().split()]
    runner = Runner()
    deadline = args.deadline_at
    out = open(args.results, "a", buffering=1)
    for n, seed in enumerate(seeds):
        if n >= GRAPHS_PER_WORKER or (deadline and time.time() > deadline):
            return 0
        doc = tomllib.loads((work / "graphs" / f"g{seed}.toml").read_text())
        for device in args.devices:
            out.write(json.dumps({"begin": seed, "device": device}) + "\n")
            code = work / device / f"g{seed}" / "output_code.py"
            if not code.exists():
                status, detail = "refused", "host compile refused the graph (see the emit log)"
            else:
                try:
                    status, detail = runner.check(doc, code, device, seed)
                except Fatal as e:
                    out.write(json.dumps({"seed": seed, "device": device, "status": "crash",
                                          "detail": str(e)}) + "\n")
                    out.flush()
                    os._exit(3)
            out.write(json.dumps({"seed": seed, "device": device, "status": status, "detail": detail}) + "\n")
    return 0


# ---------------------------------------------------------------------------
# Minimising a failing graph
# ---------------------------------------------------------------------------

def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def to_toml(doc: dict) -> str:
    lines = [f"format = {toml_value(doc.get('format', 'kiln-graph/1'))}",
             f"name = {toml_value(doc.get('name', 'finding'))}",
             f"outputs = {toml_value(doc['outputs'])}"]
    for table in ("inputs", "constants", "nodes"):
        for entry in doc.get(table, []):
            lines.append("")
            lines.append(f"[[{table}]]")
            for k, v in entry.items():
                lines.append(f"{k} = {toml_value(v)}")
    return "\n".join(lines) + "\n"


def names_in(arg) -> list[str]:
    if isinstance(arg, str):
        return [arg]
    if isinstance(arg, list):
        return [n for a in arg for n in names_in(a)]
    return []


def prune(doc: dict) -> dict:
    """Only what the outputs need."""
    nodes = {n["name"]: n for n in doc.get("nodes", [])}
    need, stack = set(), list(doc["outputs"])
    while stack:
        name = stack.pop()
        if name in need:
            continue
        need.add(name)
        if name in nodes:
            stack.extend(names_in(nodes[name].get("args", [])))
    out = dict(doc)
    out["nodes"] = [n for n in doc.get("nodes", []) if n["name"] in need]
    out["inputs"] = [i for i in doc.get("inputs", []) if i["name"] in need]
    out["constants"] = [c for c in doc.get("constants", []) if c["name"] in need]
    return out


def dtype_name(dtype) -> str | None:
    import torch

    return {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
            torch.float64: "float64", torch.int64: "int64", torch.int32: "int32",
            torch.bool: "bool"}.get(dtype)


def minimise(doc: dict, device: str, seed: int, kind: str, bin_dir: Path, budget_s: float) -> tuple[dict, str]:
    """The smallest graph found (within budget_s) that still fails with `kind` on
    `device`, and how it fails."""
    runner = Runner()
    scratch = Path(tempfile.mkdtemp(prefix="kiln-min-"))
    counter = [0]
    start = time.time()
    # Every value of the original run, by name: a candidate's inputs (the original
    # ones, and nodes cut into inputs) keep the values that made the graph fail.
    try:
        original, _, _ = runner.eager(doc, seed)
        given = {k: v for k, v in original.values.items() if isinstance(v, runner.torch.Tensor)}
    except Exception:
        given = {}
    runner.torch.save({k: v.cpu() for k, v in given.items()}, scratch / "given.pt")

    def fails(candidate: dict) -> str | None:
        counter[0] += 1
        d = scratch / f"c{counter[0]}"
        d.mkdir()
        (d / "graph.toml").write_text(to_toml(candidate))
        r = subprocess.run([str(bin_dir / "host"), "--plugins", str(bin_dir), "compile", str(d / "graph.toml"),
                            "--device", device, "-o", str(d / "out")], capture_output=True, text=True)
        if r.returncode != 0:
            return None
        if kind == "crash":
            # A crash takes its process down: each candidate runs in a child.
            child = subprocess.run([sys.executable, __file__, "--check-one", str(d / "graph.toml"),
                                    "--device", device, "--seed", str(seed), "--given", str(scratch / "given.pt")],
                                   capture_output=True, text=True, timeout=HANG_SECONDS,
                                   env={**os.environ, "CUDA_LAUNCH_BLOCKING": "1"})
            tail = (child.stdout + child.stderr).strip().splitlines()
            return (tail[-1] if tail else f"exit {child.returncode}") if child.returncode not in (0, 1) else None
        try:
            status, detail = runner.check(candidate, d / "out" / "output_code.py", device, seed, given)
        except Fatal:
            return None
        return detail if status == kind else None

    best, why = prune(doc), None
    why = fails(best)
    if why is None:
        return doc, "(did not fail again when re-compiled; not minimised)", given
    # One output at a time.
    if len(best["outputs"]) > 1:
        for o in best["outputs"]:
            cand = prune({**best, "outputs": [o]})
            w = fails(cand)
            if w:
                best, why = cand, w
                break
    # Cut nodes into inputs, last first, until nothing more can go.
    changed = True
    while changed and time.time() - start < budget_s:
        changed = False
        try:
            graph, _, _ = runner.eager(best, seed, given)
        except Exception:
            break
        for node in reversed(best["nodes"]):
            if time.time() - start > budget_s:
                break
            value = graph.values.get(node["name"])
            if not isinstance(value, runner.torch.Tensor) or dtype_name(value.dtype) is None:
                continue
            cand = dict(best)
            cand["nodes"] = [n for n in best["nodes"] if n is not node]
            cand["inputs"] = list(best.get("inputs", [])) + [
                {"name": node["name"], "shape": list(value.shape), "dtype": dtype_name(value.dtype)}]
            cand = prune(cand)
            if not cand["nodes"]:
                continue
            w = fails(cand)
            if w:
                best, why, changed = cand, w, True
                break
    shutil.rmtree(scratch, ignore_errors=True)
    return best, why, given


def check_one(args) -> int:
    """One compiled graph (beside its out/ folder) in this process: exit 0 when it
    matches, 1 when it does not, 3 on a CUDA error."""
    path = Path(args.check_one)
    doc = tomllib.loads(path.read_text())
    runner = Runner()
    given = None
    if args.given:
        given = {k: v.to(runner.device) for k, v in runner.torch.load(args.given).items()}
    try:
        status, detail = runner.check(doc, path.parent / "out" / "output_code.py", args.device, args.seed, given)
    except Fatal as e:
        print(f"crash: {e}")
        return 3
    print(f"{status}: {detail}")
    return 0 if status == "ok" else 1


def minimise_main(args) -> int:
    doc = tomllib.loads(Path(args.minimise).read_text())
    best, why, given = minimise(doc, args.device, args.seed, args.kind, Path(args.bin), args.budget)
    out = Path(args.out)
    values = out.with_suffix(".inputs.pt")
    header = "".join(f"# {l}\n" for l in
                     [f"{args.kind} on {args.device} (graph g{args.seed}; its input values: "
                      f"torch.load('{values.name}'), by name):"] + why.splitlines())
    out.write_text(header + to_toml(best))
    import torch

    names = [i["name"] for i in best.get("inputs", [])]
    torch.save({n: given[n].cpu() for n in names if n in given}, values)
    return 0


# ---------------------------------------------------------------------------
# The parent: emit, run workers, minimise, report
# ---------------------------------------------------------------------------

def emit(bin_dir: Path, work: Path, first: int, count: int, devices: list[str], jobs: int) -> dict:
    """Runs `graphgen emit` in parallel chunks; returns {(seed, device): why} for
    the compiles Kiln refused."""
    chunk = max(1, min(250, math.ceil(count / jobs)))
    refused = {}

    def one(start):
        n = min(chunk, first + count - start)
        r = subprocess.run([str(bin_dir / "graphgen"), "--plugins", str(bin_dir), "emit", "--from", str(start),
                            "--count", str(n), "--out", str(work), "--devices", ",".join(devices)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"graphgen emit --from {start}: {r.stderr.strip()[-500:]}")
        return r.stderr

    with futures.ThreadPoolExecutor(jobs) as pool:
        for text in pool.map(one, range(first, first + count, chunk)):
            for m in re.finditer(r"^graph (\d+) on (\w+): (.*)$", text, re.M):
                refused[(int(m.group(1)), m.group(2))] = m.group(3)
    return refused


def drive(seeds: list[int], args, slot: int, results: Path, lock, report) -> None:
    """Runs worker processes over `seeds` until all are done or the deadline passes;
    a worker that dies is restarted after the case it died on."""
    remaining = list(seeds)
    log = results.with_suffix(".stderr")
    while remaining:
        if args.deadline_at and time.time() > args.deadline_at:
            return
        seeds_file = results.with_suffix(f".seeds")
        seeds_file.write_text(" ".join(map(str, remaining)))
        before = results.stat().st_size if results.exists() else 0
        cmd = [sys.executable, __file__, "--worker", "--work", str(args.work), "--seeds", str(seeds_file),
               "--results", str(results), "--devices", ",".join(args.devices)]
        if args.deadline_at:
            cmd += ["--deadline-at", str(args.deadline_at)]
        with open(log, "a") as err:
            proc = subprocess.Popen(cmd, stdout=err, stderr=err)
            last_size, last_change = before, time.time()
            while proc.poll() is None:
                time.sleep(1)
                size = results.stat().st_size if results.exists() else 0
                if size != last_size:
                    last_size, last_change = size, time.time()
                elif time.time() - last_change > HANG_SECONDS:
                    proc.kill()
                    proc.wait()
        lines = results.read_text()[before:].splitlines() if results.exists() else []
        done, begun = set(), None
        for line in lines:
            rec = json.loads(line)
            if "begin" in rec:
                begun = (rec["begin"], rec["device"])
            else:
                done.add(rec["seed"])
                report(rec)
                if (rec["seed"], rec["device"]) == begun:
                    begun = None
        if begun is not None and proc.returncode != 0:
            # The process died (or hung) in this case: a finding.
            seed, device = begun
            tail = log.read_text().strip().splitlines()[-1:] if log.exists() else []
            rec = {"seed": seed, "device": device,
                   "status": "hang" if proc.returncode in (-9, 137) else "crash",
                   "detail": f"worker exit {proc.returncode}: {' '.join(tail)[:300]}"}
            with open(results, "a") as f:
                f.write(json.dumps(rec) + "\n")
            report(rec)
            done.add(seed)
        remaining = [s for s in remaining if s not in done]
        if proc.returncode not in (0, 3) and begun is None and not lines:
            raise RuntimeError(f"worker {slot} failed before any case; see {log}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", type=Path, help="folder with host, graphgen and the plugin libraries")
    parser.add_argument("--from", dest="first", type=int, default=0)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--devices", default="cuda,gxu", type=lambda s: s.split(","))
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "kiln-differential")
    parser.add_argument("--findings", type=Path, default=Path("differential-findings"))
    parser.add_argument("--deadline", type=float, help="stop starting graphs after this many seconds")
    parser.add_argument("--max-findings", type=int, default=60, help="minimise at most this many")
    parser.add_argument("--archive", type=Path, help="also pack the findings into this .tar.gz")
    parser.add_argument("--minimise-budget", type=float, default=90, help="seconds per finding")
    # Internal: a worker, a minimiser.
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seeds", help=argparse.SUPPRESS)
    parser.add_argument("--results", help=argparse.SUPPRESS)
    parser.add_argument("--deadline-at", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--minimise", help=argparse.SUPPRESS)
    parser.add_argument("--check-one", help=argparse.SUPPRESS)
    parser.add_argument("--given", help=argparse.SUPPRESS)
    parser.add_argument("--device", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--kind", help=argparse.SUPPRESS)
    parser.add_argument("--budget", type=float, default=90, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    if args.minimise:
        return minimise_main(args)
    if args.check_one:
        return check_one(args)
    if args.bin is None:
        parser.error("--bin is required")

    t0 = time.time()
    args.deadline_at = t0 + args.deadline if args.deadline else None
    work = args.work
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    refused = emit(args.bin, work, args.first, args.count, args.devices, os.cpu_count() or 2)
    print(f"# emitted {args.count} graph(s) from seed {args.first} in {time.time() - t0:.1f} s; "
          f"{len(refused)} compile(s) refused", flush=True)

    counts = {d: {} for d in args.devices}
    failures = []
    lock = threading.Lock()

    def report(rec):
        with lock:
            c = counts[rec["device"]]
            c[rec["status"]] = c.get(rec["status"], 0) + 1
            if rec["status"] not in ("ok",):
                if rec["status"] == "refused":
                    rec["detail"] = refused.get((rec["seed"], rec["device"]), rec["detail"])
                print(f"g{rec['seed']} {rec['device']}: {rec['status']}: {rec['detail']}", flush=True)
                if rec["status"] != "refused":
                    failures.append(rec)

    seeds = list(range(args.first, args.first + args.count))
    slots = [seeds[i::args.workers] for i in range(args.workers)]
    with futures.ThreadPoolExecutor(args.workers) as pool:
        jobs = [pool.submit(drive, s, args, i, work / f"results{i}.jsonl", lock, report)
                for i, s in enumerate(slots) if s]
        for j in jobs:
            j.result()
    run_s = time.time() - t0

    # Minimise each failure, several at once.
    args.findings.mkdir(parents=True, exist_ok=True)

    def minimise_one(rec):
        out = args.findings / f"g{rec['seed']}-{rec['device']}.toml"
        kind = rec["status"] if rec["status"] in ("mismatch", "error", "crash") else None
        src = work / "graphs" / f"g{rec['seed']}.toml"
        if kind is None:
            shutil.copy(src, out)
            return
        r = subprocess.run([sys.executable, __file__, "--minimise", str(src), "--device", rec["device"],
                            "--seed", str(rec["seed"]), "--kind", kind, "--bin", str(args.bin),
                            "--budget", str(args.minimise_budget), "--out", str(out)],
                           capture_output=True, text=True, timeout=args.minimise_budget + 120)
        if r.returncode != 0 or not out.exists():
            shutil.copy(src, out)

    with futures.ThreadPoolExecutor(max(1, args.workers // 2)) as pool:
        list(pool.map(minimise_one, failures[:args.max_findings]))

    total = 0
    print(f"# {torch_version()}; {run_s:.0f} s for the graphs, {time.time() - t0:.0f} s in all")
    for d, c in counts.items():
        n = sum(c.values())
        total = max(total, n)
        print(f"# {d}: {n} graph(s) run: " + ", ".join(f"{v} {k}" for k, v in sorted(c.items())))
    print(f"# {len(failures)} failure(s); minimised graphs in {args.findings}")
    if args.archive:
        shutil.make_archive(str(args.archive).removesuffix(".tar.gz"), "gztar", args.findings.parent,
                            args.findings.name)
    return 1 if failures else 0


def torch_version() -> str:
    try:
        import torch
        import triton

        return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, triton {triton.__version__}"
    except Exception as e:
        return f"torch unavailable ({e})"


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
