#!/usr/bin/env python3
"""Issue 45's bar: real models (its seven, and fourteen families beyond them) in fp32, bf16 and fp16, Kiln
against eager and Inductor.

On the GPU machine (one H100; PyTorch, Triton, transformers and torchvision; no Rust), for each
model and dtype asked for, phase by phase:

- export: the model built at its real size with random weights (seed 0; bench/gpu/precision_models.py
  says how), run eagerly, and exported with torch.export into WORK/export/MODEL-DTYPE.pt2. Where
  eager's own outputs are not finite (T5 in fp16 overflows), the pair is left out of every later
  phase and the table says so.
- compile: `HOST --plugins PLUGINS compile ARCHIVE --device cuda -o WORK/TAG/code/MODEL-DTYPE`.
- time: Kiln's output_code.py checked against eager, then Kiln, eager and torch.compile (default
  mode) timed in one process, launched directly (triton.testing.do_bench, median ms; each
  column's calls in rounds taken in turn with the others', precision_child.ROUNDS).
- graphs: the same check, then Kiln's call captured with torch.cuda.graph against
  torch.compile(mode="reduce-overhead") (warmed up first), and eager captured where it can be.
- first: the first call, each side in a fresh process with empty Triton, Inductor and Kiln caches:
  Kiln from the import of output_code.py (a copy without kernels/) to the first result
  synchronized; Inductor from torch.compile to the first result. Building the model and
  uploading its weights are outside Inductor's count; Kiln's wrapper reads its weights file
  inside its first call, so that is in Kiln's, and the table's notes say how long it took.

The check: for each output, the largest |Kiln - eager| over the largest finite |eager| must be at
most 1e-4 in fp32, 2e-2 in bf16, 1e-2 in fp16 (TF32 off). Where it is more, both are judged
against the model run one float type wider (float64 for fp32, float32 for 16 bits) and Kiln
passes if it is no further from that than the tolerance or twice eager's distance.

Every phase is resumable: each step's result is kept in WORK (exports in WORK/export/, the rest
per staged host in WORK/TAG/records/MODEL-DTYPE.json, TAG being the host's folder name), and a
step is skipped when its result is there and was made from the current export, compiled code and
host (a host is known by the SHA-256 of its files). --force redoes the phases asked for, --retry
redoes steps that failed. With --budget S, no step starts after S seconds and a step cut short
by the budget is left for the next call: run the same command again until it reports nothing
left. Warm caches for the time and graphs phases live in WORK/cache/.

Prints the table (and writes it to --out, with the raw records in the same name with .json);
exits 1 if any output mismatches or a step failed, 2 if steps are left for another call, else 0.

How to run it on the GPU machine in calls of 10 minutes: bench/gpu/precision.md. In short, stage
a host with `bash bench/gpu/ab_stage.sh new` on the build machine, carry bench/gpu/ab/new, and run

    python3 bench/gpu/precision.py --host bench/gpu/ab/new/host --budget 540 --out $OUT/p.txt \\
        [--models gpt2,bert,...] [--dtypes fp32,bf16,fp16] [--phases export,compile,time,graphs,first]

(or bench/gpu/precision.sh, which fills in those defaults) until it reports nothing left. The work
folder defaults to bench/gpu/zoo/precision, which git ignores.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHILD = HERE / "precision_child.py"

MODELS = ["gpt2", "bert", "llama", "t5", "vit", "resnet50", "mobilenet_v2", "qwen2", "convnext_tiny", "swin_t",
          "efficientnet_b0", "deberta", "opt", "bart", "clip_vision", "segformer", "densenet121", "resnext50",
          "regnet_y_1_6gf", "mobilenet_v3_large", "maxvit_t"]
DTYPES = ["fp32", "bf16", "fp16"]
PHASES = ["export", "compile", "time", "graphs", "first"]
LABELS = {
    "gpt2": "GPT-2 small (124 M)", "bert": "BERT-base",
    "llama": "Llama-style 1024/8 layers/16:4 heads/2816/32000", "t5": "T5-small encoder",
    "vit": "ViT-B/16", "resnet50": "ResNet-50", "mobilenet_v2": "MobileNetV2",
    "qwen2": "Qwen2-0.5B shape (494 M)", "convnext_tiny": "ConvNeXt-T", "swin_t": "Swin-T",
    "efficientnet_b0": "EfficientNet-B0", "deberta": "DeBERTa-v3-base", "opt": "OPT-125m",
    "bart": "BART-base", "clip_vision": "CLIP ViT-B/32 image tower", "segformer": "SegFormer-B0",
    "densenet121": "DenseNet-121", "resnext50": "ResNeXt-50 32x4d", "regnet_y_1_6gf": "RegNetY-1.6GF",
    "mobilenet_v3_large": "MobileNetV3-Large", "maxvit_t": "MaxViT-T",
}
# Kiln's outputs must be within this of eager's (precision_child.check says how it is measured).
TOLERANCE = {"fp32": 1e-4, "bf16": 2e-2, "fp16": 1e-2}
TOLERANCE_RULE = ("max |Kiln - eager| / max finite |eager| per output within TOLERANCE[dtype]; else Kiln "
                  "against the model one float type wider within max(tolerance, 2 x eager's distance)")
# A step is not started with less than this many seconds of the budget left: about what each
# kind takes on an H100 for the larger models with cold caches (a step cut short is redone).
MIN_STEP_S = {"export": 60, "compile": 20, "measure": 75, "first": 40}


def comma_list(allowed: list[str]):
    def parse(text: str) -> list[str]:
        items = [t for t in text.split(",") if t]
        wrong = [t for t in items if t not in allowed]
        if wrong:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(wrong)}: choose from {','.join(allowed)}")
        return items
    return parse


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[1:]))
    p.add_argument("--models", type=comma_list(MODELS), default=MODELS, help="comma list (default: all)")
    p.add_argument("--dtypes", type=comma_list(DTYPES), default=DTYPES, help="comma list (default: all)")
    p.add_argument("--phases", type=comma_list(PHASES), default=PHASES,
                   help="comma list of export,compile,time,graphs,first (default: all); an empty list "
                        "only prints the table of what WORK holds")
    p.add_argument("--work", type=Path, default=HERE / "zoo" / "precision", help="the work folder")
    p.add_argument("--out", type=Path, help="write the table here, and the records to the same name .json")
    p.add_argument("--host", type=Path, default=os.environ.get("KILN_HOST"),
                   help="the staged host (default $KILN_HOST), e.g. bench/gpu/ab/new/host")
    p.add_argument("--plugins", type=Path, help="its plugins folder (default: plugins/ beside the host)")
    p.add_argument("--tag", help="the name its results are kept under (default: the host's folder name)")
    p.add_argument("--first-timeout", type=float, default=300, help="seconds for each first-call process")
    p.add_argument("--timeout", type=float, default=480, help="seconds for each export or timing process")
    p.add_argument("--budget", type=float, help="start no step after this many seconds; leave the rest")
    p.add_argument("--rep", type=float, default=200, help="do_bench's rep (ms of timed calls per column)")
    p.add_argument("--force", action="store_true", help="redo the phases asked for")
    p.add_argument("--retry", action="store_true", help="redo steps that failed")
    a = p.parse_args(argv)
    if a.host is None:
        p.error("--host (or $KILN_HOST) is needed: the staged host, as bench/gpu/ab_stage.sh leaves it")
    a.host = a.host.resolve()
    if not a.host.is_file():
        p.error(f"--host {a.host}: no such file; stage one with bench/gpu/ab_stage.sh and carry bench/gpu/ab")
    a.plugins = (a.plugins or a.host.parent / "plugins").resolve()
    if not a.plugins.is_dir():
        p.error(f"--plugins {a.plugins}: no such folder (ab_stage.sh puts the plugins in plugins/ beside the host)")
    a.tag = a.tag or a.host.parent.name
    return a


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def host_digest(host: Path, plugins: Path) -> str:
    """SHA-256 over the host and every file of its plugins folder (mtimes change when carried)."""
    h = hashlib.sha256()
    for f in [host] + sorted(p for p in plugins.rglob("*") if p.is_file()):
        h.update(f.name.encode())
        with open(f, "rb") as data:
            for block in iter(lambda: data.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


class Budget:
    """The seconds this call may still spend; None for no limit."""

    def __init__(self, seconds: float | None):
        self.end = None if seconds is None else time.monotonic() + seconds
        self.pending = 0
        self.started = 0

    def left(self) -> float:
        return math.inf if self.end is None else self.end - time.monotonic()

    def may_start(self, kind: str) -> bool:
        if self.left() < MIN_STEP_S[kind]:
            self.pending += 1
            return False
        return True

    def timeout(self, own: float) -> tuple[float, bool]:
        """The step's timeout, and whether the budget (not the step's own limit) sets it."""
        left = self.left()
        return (left, True) if left < own else (own, False)


def run_group(cmd: list[str], env: dict | None, timeout: float) -> subprocess.CompletedProcess | None:
    """Runs `cmd` in its own process group; on timeout ends the whole group (the child's
    compile workers too) and returns None."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def run_child(args: list[str], env: dict, own_timeout: float, budget: Budget, what: str) -> dict | None:
    """Runs a child; its last JSON line, or {"error": ...}; None when the budget cut it short
    (the step is then left for the next call, unless it was the first step of this call)."""
    timeout, by_budget = budget.timeout(own_timeout)
    budget.started += 1
    start = time.monotonic()
    proc = run_group([sys.executable, str(CHILD)] + args, env, timeout)
    if proc is None:
        if by_budget and budget.started > 1:
            budget.pending += 1
            log(f"{what}: cut short by --budget, left for the next call")
            return None
        return {"error": f"over {timeout:.0f} s"}
    seconds = time.monotonic() - start
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            try:
                result = json.loads(line)
            except ValueError:
                continue  # a library's log line
            result["wall_s"] = seconds
            return result
    lines = (proc.stderr.strip() or proc.stdout.strip() or f"exit status {proc.returncode}").splitlines()
    if proc.returncode == 0 and not args[0].startswith(("measure", "first")):
        return {"wall_s": seconds, "log": proc.stdout[-2000:]}
    return {"error": lines[-1][:300], "stderr_tail": "\n".join(lines[-15:])}


class Work:
    """The work folder: exports, compiled code and records."""

    def __init__(self, root: Path, tag: str):
        self.root = root
        self.exports = root / "export"
        self.cache = root / "cache"
        self.code_root = root / tag / "code"
        self.records_dir = root / tag / "records"
        for d in (self.exports, self.cache, self.code_root, self.records_dir):
            d.mkdir(parents=True, exist_ok=True)

    def archive(self, pair: str) -> Path:
        return self.exports / f"{pair}.pt2"

    def meta(self, pair: str) -> dict | None:
        path = self.exports / f"{pair}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def write_meta(self, pair: str, meta: dict) -> None:
        (self.exports / f"{pair}.json").write_text(json.dumps(meta, indent=1) + "\n")

    def code(self, pair: str) -> Path:
        return self.code_root / pair

    def records(self, pair: str) -> dict:
        path = self.records_dir / f"{pair}.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def record(self, pair: str, section: str, value: dict) -> None:
        records = self.records(pair)
        records[section] = value
        path = self.records_dir / f"{pair}.json"
        path.with_suffix(".partial").write_text(json.dumps(records, indent=1) + "\n")
        path.with_suffix(".partial").replace(path)


def warm_env(work: Work) -> dict:
    env = dict(os.environ)
    env.update(TRITON_CACHE_DIR=str(work.cache / "triton"), TORCHINDUCTOR_CACHE_DIR=str(work.cache / "inductor"),
               KILN_CACHE_DIR=str(work.cache / "kiln"))
    return env


def cold_env(caches: Path) -> dict:
    env = dict(os.environ)
    env.update(TRITON_CACHE_DIR=str(caches / "triton"), TORCHINDUCTOR_CACHE_DIR=str(caches / "inductor"),
               KILN_CACHE_DIR=str(caches / "kiln"))
    return env


def redo(section: dict | None, after: str | None, a: argparse.Namespace, extra_ok: bool = True) -> bool:
    """Whether a step must run: no result, a stale one, --force, or a failure with --retry."""
    if a.force or section is None or section.get("after") != after or not extra_ok:
        return True
    return a.retry and "error" in section


def usable_export(work: Work, pair: str) -> dict | None:
    """The pair's export record when later phases can use it (exported, finite, no error)."""
    meta = work.meta(pair)
    if meta is None or "skip" in meta or "error" in meta or not work.archive(pair).exists():
        return None
    return meta


def phase_export(work: Work, a: argparse.Namespace, budget: Budget) -> None:
    for model in a.models:
        todo = []
        for dtype in a.dtypes:
            pair = f"{model}-{dtype}"
            meta = work.meta(pair)
            done = meta is not None and ("skip" in meta or "error" in meta or work.archive(pair).exists())
            if a.force or not done or (a.retry and "error" in meta):
                todo.append(dtype)
        if not todo or not budget.may_start("export"):
            continue
        log(f"export {model} {','.join(todo)}")
        before = {d: (work.meta(f"{model}-{d}") or {}).get("id") for d in todo}
        result = run_child(["export", model, ",".join(todo), str(work.exports)], warm_env(work),
                           a.timeout, budget, f"export {model}")
        if result is None:
            continue
        for dtype in todo:
            meta = work.meta(f"{model}-{dtype}")
            if meta is None or meta.get("id") == before[dtype]:
                # The child died before writing this dtype's record.
                work.write_meta(f"{model}-{dtype}", {
                    "model": model, "dtype": dtype, "id": uuid.uuid4().hex,
                    "error": f"export: the process ended before this dtype: {result.get('error', 'no record')}"})
        log(f"export {model}: {result.get('error') or '%.0f s' % result['wall_s']}")


def phase_compile(work: Work, a: argparse.Namespace, budget: Budget, digest: str) -> None:
    for pair in pairs(a):
        meta = usable_export(work, pair)
        if meta is None:
            continue
        section = work.records(pair).get("compile")
        same_host = section is not None and section.get("host") == digest
        if not redo(section, meta["id"], a, same_host) or not budget.may_start("compile"):
            continue
        out = work.code(pair)
        shutil.rmtree(out, ignore_errors=True)
        cmd = [str(a.host), "--plugins", str(a.plugins), "compile", str(work.archive(pair)),
               "--device", "cuda", "-o", str(out)]
        timeout, _ = budget.timeout(a.timeout)
        start = time.monotonic()
        proc = run_group(cmd, None, timeout)
        if proc is None:
            error = f"over {timeout:.0f} s"
        else:
            error = None if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["?"])[-1][:300]
        seconds = time.monotonic() - start
        value = {"after": meta["id"], "id": uuid.uuid4().hex, "host": digest, "compile_s": seconds}
        if error is None and not (out / "output_code.py").exists():
            error = f"{out}/output_code.py is missing after `host compile`"
        if error is not None:
            value["error"] = f"host compile: {error}"
        work.record(pair, "compile", value)
        log(f"compile {pair}: {value.get('error') or '%.1f s' % seconds}")


def compiled(work: Work, pair: str) -> dict | None:
    """The pair's compile record when its code can run (compiled from the current export)."""
    meta = usable_export(work, pair)
    section = work.records(pair).get("compile")
    if meta is None or section is None or "error" in section or section.get("after") != meta["id"]:
        return None
    return section


def phase_measure(work: Work, a: argparse.Namespace, budget: Budget) -> None:
    wanted = [p for p in ("time", "graphs") if p in a.phases]
    for pair in pairs(a):
        section = compiled(work, pair)
        if section is None or not wanted:
            continue
        records = work.records(pair)
        todo = [p for p in wanted if redo(records.get(p), section["id"], a)]
        if not todo or not budget.may_start("measure"):
            continue
        model, dtype = pair.rsplit("-", 1)
        log(f"{'+'.join(todo)} {pair}")
        result = run_child(["measure", model, dtype, str(work.code(pair)), str(work.exports / f"{pair}.json"),
                            ",".join(todo), str(a.rep), str(TOLERANCE[dtype])], warm_env(work), a.timeout, budget, f"measure {pair}")
        if result is None:
            continue
        common = {"after": section["id"], "id": uuid.uuid4().hex}
        if "error" in result:
            for phase in todo:
                work.record(pair, phase, {**common, "error": result["error"],
                                          "stderr_tail": result.get("stderr_tail", "")})
            log(f"{pair}: {result['error']}")
            continue
        env = {k: result.get(k) for k in ("device", "torch", "triton", "kernels", "peak_gib")}
        work.record(pair, "check", {**common, **result["check"]})
        for phase in todo:
            work.record(pair, phase, {**common, **env, **result.get(phase, {"error": "no result"})})
        log(f"{pair}: {summary_line(result)}")


def code_copy(code: Path, into: Path) -> Path:
    """The compiled files without kernels/ (what a plain `host compile` writes); large files
    (the weights) linked rather than copied."""
    into.mkdir(parents=True)
    for f in code.iterdir():
        if f.is_dir():
            continue
        if f.stat().st_size > 1 << 20:
            (into / f.name).symlink_to(f.resolve())
        else:
            shutil.copy(f, into / f.name)
    return into


def phase_first(work: Work, a: argparse.Namespace, budget: Budget) -> None:
    for pair in pairs(a):
        model, dtype = pair.rsplit("-", 1)
        meta = usable_export(work, pair)
        section = compiled(work, pair)
        records = work.records(pair)
        steps = []
        if section is not None and redo(records.get("first_kiln"), section["id"], a):
            steps.append(("first_kiln", section["id"]))
        if meta is not None and redo(records.get("first_inductor"), meta["id"], a):
            steps.append(("first_inductor", meta["id"]))
        for name, after in steps:
            if not budget.may_start("first"):
                continue
            with tempfile.TemporaryDirectory(prefix="kiln-first-") as tmp:
                tmp = Path(tmp)
                if name == "first_kiln":
                    args = ["first-kiln", model, dtype, str(code_copy(work.code(pair), tmp / "code"))]
                else:
                    args = ["first-inductor", model, dtype]
                result = run_child(args, cold_env(tmp / "caches"), a.first_timeout, budget, f"{name} {pair}")
            if result is None:
                continue
            work.record(pair, name, {"after": after, "id": uuid.uuid4().hex, **result})
            log(f"{name} {pair}: {result.get('error') or '%.2f s' % result['first_s']}")


def pairs(a: argparse.Namespace) -> list[str]:
    return [f"{m}-{d}" for m in a.models for d in a.dtypes]


def summary_line(r: dict) -> str:
    parts = []
    c = r.get("check", {})
    if "error_vs_eager" in c:
        parts.append(f"error {c['error_vs_eager']:.2e} {'ok' if c.get('ok') else 'MISMATCH'}")
    for phase in ("time", "graphs"):
        t = r.get(phase, {})
        if t.get("kiln_ms") and t.get("inductor_ms"):
            parts.append(f"{phase} kiln {t['kiln_ms']:.3f} ms / inductor {t['inductor_ms']:.3f} ms")
    return ", ".join(parts)


def fmt(value, digits: int = 3) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def ratio(section: dict | None) -> float | None:
    if not section or "error" in section or not section.get("inductor_ms"):
        return None
    return section["kiln_ms"] / section["inductor_ms"]


def row(label: str, dtype: str, meta: dict | None, r: dict) -> tuple[str, list[str]]:
    """The pair's table row and its notes (failures first marked `FAIL`)."""
    notes = []
    if meta is not None and "skip" in meta:
        return f"| {label} | {dtype} | left out: {meta['skip']} |" + " |" * 8, notes
    if meta is not None and "error" in meta:
        notes.append(f"FAIL {meta['error']}")
    for name in ("compile", "check", "time", "graphs", "first_kiln", "first_inductor"):
        if "error" in r.get(name, {}) and name != "check":
            notes.append(f"FAIL {name}: {r[name]['error']}")
    c, t, g = r.get("check", {}), r.get("time", {}), r.get("graphs", {})
    tol = c.get("tolerance")
    if c and not c.get("ok"):
        notes.append("FAIL Kiln's outputs differ from eager's: " + (c.get("error") if isinstance(c.get("error"), str)
                     else f"{c.get('error_vs_eager', float('nan')):.2e} > {tol}, against the wider type "
                          f"Kiln {c.get('kiln_vs_wide', float('nan')):.2e}, eager {c.get('eager_vs_wide', float('nan')):.2e}"))
    if tol is not None and g.get("kiln_graph_error_vs_eager", 0) > max(tol, c.get("error_vs_eager", 0)):
        notes.append(f"FAIL under CUDA graphs Kiln's outputs differ from eager's by {g['kiln_graph_error_vs_eager']:.2e}")
    if r.get("first_kiln", {}).get("weights_s") is not None:
        notes.append(f"Kiln's first call includes {r['first_kiln']['weights_s']:.2f} s reading and uploading "
                     f"its weights file")
    if g.get("eager_note"):
        notes.append(g["eager_note"])
    if tol is not None and t.get("inductor_error_vs_eager", 0) > tol:
        notes.append(f"Inductor itself differs from eager by {t['inductor_error_vs_eager']:.2e}")
    first = f"{fmt(r.get('first_kiln', {}).get('first_s'), 1)} / {fmt(r.get('first_inductor', {}).get('first_s'), 1)}"
    err = f"{c['error_vs_eager']:.1e} ({tol:g})" if "error_vs_eager" in c else "—"
    ok = "—" if not c else ("yes" if c.get("ok") else "**NO**")
    cells = [label, dtype, fmt(ratio(t)), fmt(ratio(g)), first, fmt(t.get("kiln_ms")), fmt(t.get("inductor_ms")),
             fmt(t.get("eager_ms")), f"{fmt(g.get('kiln_ms'))} / {fmt(g.get('inductor_ms'))} / {fmt(g.get('eager_ms'))}",
             err, ok]
    return "| " + " | ".join(cells) + " |", notes


def fresh_records(work: Work, pair: str, digest: str) -> dict:
    """The pair's records made from its current export, and from code the current host compiled."""
    meta, r = work.meta(pair) or {}, work.records(pair)
    out = {k: v for k, v in r.items() if k == "first_inductor" and v.get("after") == meta.get("id")}
    c = r.get("compile")
    if c is not None and c.get("after") == meta.get("id") and c.get("host") == digest:
        out["compile"] = c
        out.update((k, v) for k, v in r.items() if k != "compile" and v.get("after") == c["id"])
    return out


def report(work: Work, chosen: list[str], a: argparse.Namespace, digest: str) -> int:
    """Prints the table of what WORK holds for the chosen pairs and writes --out; the number of
    pairs with a failure (a mismatch or a step that failed)."""
    lines = ["| model | dtype | Kiln/Inductor | under CUDA graphs | first call, Kiln s / Inductor s | Kiln ms "
             "| Inductor ms | eager ms | graphs ms: Kiln / Inductor / eager | max error (tolerance) | ok |",
             "|" + " --- |" * 11]
    notes, records, failures, env = [], [], 0, None
    ratios, firsts = [], []
    for pair in chosen:
        model, dtype = pair.rsplit("-", 1)
        meta, r = work.meta(pair), fresh_records(work, pair, digest)
        line, pair_notes = row(LABELS[model], dtype, meta, r)
        lines.append(line)
        notes += [f"- {model} {dtype}: {n}" for n in pair_notes]
        failures += any(n.startswith("FAIL") for n in pair_notes)
        env = env or next((r[k] for k in ("time", "graphs") if "device" in r.get(k, {})), None)
        ratios += [(x, f"{model} {dtype} {k}") for k in ("time", "graphs") if (x := ratio(r.get(k))) is not None]
        fk, fi = r.get("first_kiln", {}).get("first_s"), r.get("first_inductor", {}).get("first_s")
        if fk and fi:
            firsts.append((fk / fi, f"{model} {dtype}"))
        records.append({"model": model, "dtype": dtype,
                        "export": {k: v for k, v in (meta or {}).items() if k != "config"}, **r})
    head = [f"# bench/gpu/precision.py, host {a.tag} (sha256 {digest[:12]}), {time.strftime('%Y-%m-%d %H:%M')}"]
    if env:
        head.append(f"# {env['device']}, torch {env['torch']}, triton {env['triton']}; TF32 off; "
                    f"do_bench, median of interleaved rounds, rep {a.rep:g} ms per column")
    tail = []
    if ratios:
        worst = max(ratios)
        tail.append(f"# Kiln/Inductor <= 1.00 in {sum(x <= 1.0 for x, _ in ratios)} of {len(ratios)} ratios; "
                    f"worst {worst[0]:.3f} ({worst[1]})")
    if firsts:
        worst = max(firsts)
        tail.append(f"# first call Kiln/Inductor <= 0.5 in {sum(x <= 0.5 for x, _ in firsts)} of {len(firsts)}; "
                    f"worst {worst[0]:.2f} ({worst[1]})")
    tail.append(f"# {failures} pair(s) with a failure")
    text = "\n".join(head + lines + [""] + notes + tail) + "\n"
    print(text, end="")
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        text_path = a.out if a.out.suffix != ".json" else a.out.with_suffix(".txt")
        text_path.write_text(text)
        text_path.with_suffix(".json").write_text(json.dumps(
            {"tag": a.tag, "host_sha256": digest, "tolerance": TOLERANCE, "rule": TOLERANCE_RULE,
             "pairs": records}, indent=1) + "\n")
    return failures


def main(argv: list[str]) -> int:
    a = parse_args(argv)
    work = Work(a.work.resolve(), a.tag)
    budget = Budget(a.budget)
    digest = host_digest(a.host, a.plugins)
    log(f"work {work.root}, host {a.host} ({a.tag}, sha256 {digest[:12]}), "
        f"models {','.join(a.models)}, dtypes {','.join(a.dtypes)}, phases {','.join(a.phases) or 'none'}")
    if "export" in a.phases:
        phase_export(work, a, budget)
    if "compile" in a.phases:
        phase_compile(work, a, budget, digest)
    if "time" in a.phases or "graphs" in a.phases:
        phase_measure(work, a, budget)
    if "first" in a.phases:
        phase_first(work, a, budget)
    failures = report(work, pairs(a), a, digest)
    if budget.pending:
        print(f"# {budget.pending} step(s) left for the next call (--budget): run the same command again")
    return 1 if failures else (2 if budget.pending else 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
