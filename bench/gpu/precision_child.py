#!/usr/bin/env python3
"""The GPU work of bench/gpu/precision.py, one step per process (precision.py starts them).

    precision_child.py export MODEL DTYPE[,DTYPE...] EXPORT_DIR
        Builds the model, runs it eagerly and, where every output is finite, exports it with
        torch.export into EXPORT_DIR/MODEL-DTYPE.pt2; writes EXPORT_DIR/MODEL-DTYPE.json either
        way (the weights' fingerprint, inputs, outputs, or why the pair is left out).
    precision_child.py measure MODEL DTYPE CODE_DIR EXPORT_JSON PHASES REP_MS TOLERANCE
        Checks Kiln's CODE_DIR/output_code.py against eager (see `check`), then, as PHASES (a comma list of
        `time` and `graphs`) asks, times Kiln, eager and torch.compile launched directly, and
        under CUDA graphs. Prints one JSON line.
    precision_child.py first-kiln MODEL DTYPE CODE_DIR
    precision_child.py first-inductor MODEL DTYPE
        The first call in this process (precision.py gives it empty caches): Kiln from the
        import of output_code.py, Inductor from torch.compile, each to the first result
        synchronized; the inputs (and Inductor's model) are on the GPU before the clock starts.
        Prints one JSON line.

Every mode runs with TF32 off and gradients off.
"""

from __future__ import annotations

import copy
import json
import uuid
import sys
import statistics
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from precision_models import (DTYPES, build, build_float32, fingerprint, make_inputs,  # noqa: E402
                              same_fingerprint)
from run import load_module, rel_error  # noqa: E402

DEVICE = torch.device("cuda", 0)


def setup() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.set_grad_enabled(False)


def sync() -> None:
    torch.cuda.synchronize()


def as_tuple(out) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def describe(tensors) -> list[dict]:
    return [{"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")} for t in tensors]


def export(model: str, dtypes: list[str], out: Path) -> None:
    setup()
    base, cfg = build_float32(model, DEVICE)
    for name in dtypes:
        try:
            meta = export_one(base, model, name, out)
        except Exception as e:  # noqa: BLE001 (recorded for the table; the next dtype still runs)
            meta = {"model": model, "dtype": name, "id": uuid.uuid4().hex,
                    "error": f"export: {type(e).__name__}: {str(e)[:300]}"}
        meta["config"] = cfg
        (out / f"{model}-{name}.json").write_text(json.dumps(meta, indent=1, default=str) + "\n")
        done = meta.get("skip") or meta.get("error") or "exported in %.1f s" % meta["export_s"]
        print(f"{model} {name}: {done}", flush=True)
        torch.cuda.empty_cache()


def export_one(base, model: str, name: str, out: Path) -> dict:
    """One dtype of the model: its eager outputs, then, where they are finite, its archive."""
    module = copy.deepcopy(base).to(DTYPES[name])
    inputs = make_inputs(model, DTYPES[name], DEVICE)
    outputs = as_tuple(module(*inputs))
    meta = {
        "model": model, "dtype": name, "torch_version": torch.__version__,
        "parameters": sum(p.numel() for p in module.parameters()),
        "fingerprint": fingerprint(module), "inputs": describe(inputs),
        "outputs": describe(outputs), "id": uuid.uuid4().hex,
    }
    bad = [i for i, o in enumerate(outputs) if not bool(torch.isfinite(o).all())]
    if bad:
        # Eager itself overflows (T5 in float16): there is nothing to compare with.
        meta["skip"] = f"eager gives non-finite values in output(s) {bad}"
        return meta
    start = time.perf_counter()
    exported = torch.export.export(module, tuple(inputs))
    partial = out / f"{model}-{name}.partial.pt2"  # torch.export.save wants .pt2
    torch.export.save(exported, partial)
    partial.replace(out / f"{model}-{name}.pt2")
    meta["export_s"] = time.perf_counter() - start
    return meta


def errors(got, want) -> list[float]:
    return [rel_error(g, w) for g, w in zip(got, want)]


def check(module, kiln, inputs, dtype_name: str, tol: float) -> tuple[dict, tuple]:
    """Kiln's outputs against eager's: the largest |kiln - eager| over the largest finite |eager|
    of each output (run.py's rel_error) at most `tol`. Where they differ by more, both are
    judged against the model run in the next wider float type (float64 for float32, float32
    for 16 bits): Kiln passes if it is no further from that than `tol` or twice eager."""
    want = as_tuple(module(*inputs))
    got = as_tuple(kiln.call(list(inputs)))
    sync()
    result = {"tolerance": tol, "outputs": len(want)}
    if len(got) != len(want) or any(g.shape != w.shape or g.dtype != w.dtype for g, w in zip(got, want)):
        result.update(ok=False, error=f"Kiln gives {describe(got)}, eager {describe(want)}")
        return result, want
    err = max(errors(got, want))
    result.update(error_vs_eager=err, ok=err <= tol)
    if not result["ok"]:
        wide = torch.float64 if dtype_name == "fp32" else torch.float32
        exact = as_tuple(copy.deepcopy(module).to(wide)(
            *[t.to(wide) if t.is_floating_point() else t for t in inputs]))
        kiln_exact, eager_exact = max(errors(got, exact)), max(errors(want, exact))
        result.update(kiln_vs_wide=kiln_exact, eager_vs_wide=eager_exact,
                      ok=kiln_exact <= max(tol, 2 * eager_exact))
        del exact
    del got
    return result, want


def bench(fn, rep: float) -> float:
    """Median milliseconds of `fn` (triton.testing.do_bench, L2 flushed before each call)."""
    from triton.testing import do_bench
    return do_bench(fn, warmup=max(25, rep / 4), rep=rep, return_mode="median")


# Each column's timed calls are split into this many rounds, taken in turn with the other
# columns' (in a rotating order), and the column's time is the median of its rounds' medians:
# the clock and power state the device drifts through over a run (whole seconds of float32
# products at full power) weigh on every column alike, not on whichever ran first.
ROUNDS = 5


def interleaved(fns: dict, rep: float) -> dict:
    """Milliseconds per call of each of `fns` (name -> function), over ROUNDS interleaved rounds."""
    times: dict = {name: [] for name in fns}
    names = list(fns)
    for r in range(ROUNDS):
        for name in names[r % len(names):] + names[:r % len(names)]:
            times[name].append(bench(fns[name], rep / ROUNDS))
    return {name: statistics.median(t) for name, t in times.items()}


def time_direct(module, kiln, inputs, want, rep: float) -> dict:
    torch._dynamo.reset()
    compiled = torch.compile(module)
    start = time.perf_counter()
    result = as_tuple(compiled(*inputs))
    sync()
    out = {"inductor_compile_s": time.perf_counter() - start}  # caches as the work folder left them
    out["inductor_error_vs_eager"] = max(errors(result, want))
    del result
    ms = interleaved({"kiln": lambda: kiln.call(list(inputs)), "eager": lambda: module(*inputs),
                      "inductor": lambda: compiled(*inputs)}, rep)
    out.update({f"{name}_ms": t for name, t in ms.items()})
    del compiled
    torch._dynamo.reset()
    return out


def capture(fn):
    """`fn` captured into a CUDA graph after two warm-up calls on a side stream: (graph, outputs)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    sync()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = as_tuple(fn())
    return graph, outputs


def time_graphs(module, kiln, inputs, want, rep: float) -> dict:
    """Kiln's call captured with torch.cuda.graph against torch.compile(mode="reduce-overhead"),
    and eager captured likewise where it can be (last: a failed capture may spoil the context)."""
    static = [t.clone() for t in inputs]
    graph, outputs = capture(lambda: kiln.call(list(static)))
    graph.replay()
    sync()
    out = {"kiln_graph_error_vs_eager": max(errors(outputs, want))}
    del outputs
    torch._dynamo.reset()
    compiled = torch.compile(module, mode="reduce-overhead")
    for _ in range(3):  # reduce-overhead records its CUDA graph on a later call
        compiled(*inputs)
    sync()
    # Kiln against Inductor interleaved; eager last (a failed capture may spoil the context).
    ms = interleaved({"kiln": graph.replay, "inductor": lambda: compiled(*inputs)}, rep)
    out.update({f"{name}_ms": t for name, t in ms.items()})
    del graph
    try:
        eager, _ = capture(lambda: module(*static))
        out["eager_ms"] = bench(eager.replay, rep)
        del eager
    except Exception as e:  # noqa: BLE001 (eager under graphs is optional: say why it is missing)
        out["eager_note"] = f"eager not capturable: {type(e).__name__}: {str(e)[:160]}"
    del compiled
    torch._dynamo.reset()
    return out


def measure(model: str, dtype_name: str, code: Path, meta_path: Path, phases: list[str], rep: float,
            tol: float) -> dict:
    setup()
    meta = json.loads(meta_path.read_text())
    module, _ = build(model, DTYPES[dtype_name], DEVICE)
    if not same_fingerprint(fingerprint(module), meta["fingerprint"]):
        raise SystemExit(f"{model} {dtype_name}: the rebuilt weights differ from the exported ones "
                         f"({fingerprint(module)} vs {meta['fingerprint']}): export again (--force)")
    inputs = make_inputs(model, DTYPES[dtype_name], DEVICE)
    kiln = load_module(code / "output_code.py", "cuda")
    import triton
    result = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
              "triton": triton.__version__, "kernels": len(getattr(kiln, "KERNEL_META", {}))}
    result["check"], want = check(module, kiln, inputs, dtype_name, tol)
    if "time" in phases:
        result["time"] = time_direct(module, kiln, inputs, want, rep)
    if "graphs" in phases:
        result["graphs"] = time_graphs(module, kiln, inputs, want, rep)
    result["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return result


def first_call(mode: str, model: str, dtype_name: str, code: Path | None) -> dict:
    setup()
    dtype = DTYPES[dtype_name]
    inputs = make_inputs(model, dtype, DEVICE)
    if mode == "first-inductor":
        module, _ = build(model, dtype, DEVICE)
    sync()
    start = time.perf_counter()
    weights: list[float] = []
    if mode == "first-kiln":
        kiln = load_module(code / "output_code.py", "cuda")
        time_weights(weights)
        run = lambda: kiln.call(list(inputs))
    else:
        compiled = torch.compile(module)
        run = lambda: compiled(*inputs)
    run()
    sync()
    first = time.perf_counter() - start
    start = time.perf_counter()
    run()
    sync()
    out = {"first_s": first, "second_s": time.perf_counter() - start}
    if weights:
        out["weights_s"] = sum(weights)
    return out


def time_weights(into: list[float]) -> None:
    """Times the wrapper's reading and upload of its weights file (inside its first call, and
    so inside Kiln's first-call time), by wrapping kiln_runtime.load_weights."""
    runtime = next((m for name, m in sys.modules.items() if name.startswith("kiln_runtime:")), None)
    load = getattr(runtime, "load_weights", None)
    if load is None:
        return

    def timed(*args, **kwargs):
        start = time.perf_counter()
        tensors = load(*args, **kwargs)
        sync()
        into.append(time.perf_counter() - start)
        return tensors

    runtime.load_weights = timed


def main(argv: list[str]) -> None:
    mode = argv[0] if argv else ""
    if mode == "export" and len(argv) == 4:
        export(argv[1], argv[2].split(","), Path(argv[3]))
        return
    if mode == "measure" and len(argv) == 8:
        result = measure(argv[1], argv[2], Path(argv[3]), Path(argv[4]), argv[5].split(","), float(argv[6]),
                         float(argv[7]))
    elif mode == "first-kiln" and len(argv) == 4:
        result = first_call(mode, argv[1], argv[2], Path(argv[3]))
    elif mode == "first-inductor" and len(argv) == 3:
        result = first_call(mode, argv[1], argv[2], None)
    else:
        raise SystemExit(__doc__)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
