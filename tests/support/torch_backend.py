#!/usr/bin/env python3
"""Tests the `kiln` Python package under PyTorch, on the cpu, as a user gets it: installed
with pip (tools/test.sh installs it into the torch environment), Kiln's compiler and
plugins inside it.

Usage: torch_backend.py REPO_ROOT [--device cuda]

On the cpu by default (tools/test.sh). With `--device cuda` (on a GPU machine, with the
package on the path and KILN_HOST naming a host with its plugins), the same checks run on
CUDA, and two more:
- mode="reduce-overhead" captures a real CUDA graph and replays it: after the capture, calls
  with new inputs give eager's results without entering the compiled code;
- options={"device": "gxu"}: the vendor plugin's code runs with CUDA standing in for GXU
  (its `torch.gxu` is torch.cuda, as bench/gpu/run.py runs its outputs), across graph
  breaks and on every model of the zoo.

Checks:
- `kiln.compile` of a module with keyword inputs and a dict output, and of a transformers
  model (its ModelOutput): the module's own signature and structure, the values of eager;
- `torch.compile(model, backend="kiln")` through the entry point the package registers,
  on a model with graph breaks (a data-dependent branch, a `print`): every graph Kiln
  compiles, the result eager's;
- a graph with an op Kiln lacks runs in eager, with a warning naming the op, and so does one
  that updates a buffer in place (dynamo hands buffers over as the graph's inputs, which
  Kiln does not write into);
- kiln.compile of a program that writes its buffers in place (a cache row, a counter; and
  transformers' static-cache GPT-2 step) keeps them between calls as eager does, and
  reset_state() starts again;
- an unknown option is refused, naming the options; a device no plugin provides is an
  error naming the devices there are; a device other than the inputs' (cpu against cuda)
  is an error saying where the inputs are;
- with gradients on (a training-mode call), the graph compiles and a warning says that its
  outputs carry no gradient;
- options={"freeze": True}: parameters and buffers compiled as constants; an in-place change
  to one (add_, load_state_dict) compiles the graph again;
- graphs dynamo traces with symbolic sizes (dynamic=True, or after a size changes): compiled by
  Kiln once for every size (one `--dynamic` compile), a layer norm's `eps` that dynamo passes as
  a tensor too, every call matching eager;
- kiln.compile of an export with dynamic shapes: compiled once for its ranges (a convolution
  over a dynamic length: each length at its first call), every call eager's; a size outside a range, or two dims of one symbol that differ,
  refused with a message naming them;
- mode="reduce-overhead": directly on the cpu; under a stand-in device's graphs, one
  capture after a warm-up, replays with the other inputs copied in, kept inputs (parameters)
  read in place, a capture again when one moves;
- the compile cache: a second process compiles nothing (`host compile` never runs in it), and
  a rebuilt compiler compiles again;
- what a sweep of transformers' and torchvision's families found lacking (convolutions
  padded by name, meshgrid, a pooling window wider than its input, max_pool3d, torch.vmap)
  compiles and matches eager;
- transformers' mixtures of experts (Mixtral: its router's top-2, `histc` and the grouped
  products, by `_grouped_mm` or transformers' own `grouped_mm_fallback`) compile and match eager;
- sorts (stable, descending, NaN, ties, integers, along any dim, rows longer than one of
  Kiln's sort runs, in every key dtype), `topk` and `x[i, j] = v` (negative indices, an
  int32 index, a permutation inverted) match eager;
- every model of the zoo (tools/model_zoo.py) through torch.compile(backend="kiln")
  matches eager.
Prints `ok: WHAT` per check; exits 1 on the first failure.
"""

import contextlib
import copy
import io
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import torch

DEVICE = "cpu"


def dev(value):
    """A tensor or module moved to the device the checks run on."""
    return value.to(DEVICE)


def check(what, ok, detail=""):
    """Prints `ok: what`, or fails with `detail`."""
    if not ok:
        print(f"FAILED: {what} {detail}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what}", flush=True)


def close(a, b, tol=1e-4):
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(close(x, y, tol) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k], tol) for k in a)
    if isinstance(a, torch.Tensor):
        scale = max(1.0, b.abs().max().item()) if b.numel() else 1.0
        return a.shape == b.shape and a.dtype == b.dtype and (a.numel() == 0 or
                                                              (a - b).abs().max().item() <= tol * scale)
    return a == b


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 8)

    def forward(self, x, scale=None):
        hidden = torch.nn.functional.gelu(self.up(x))
        out = self.down(hidden)
        if scale is not None:
            out = out * scale
        return {"out": out, "hidden": hidden}


class Branchy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 16)
        self.b = torch.nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.a(x))
        if h.mean() > 0.2:  # data-dependent: a graph break
            h = h * 2.0
        print("kiln test: a print in forward")  # another
        return self.b(h).softmax(-1)


class Inverse(torch.nn.Module):
    def forward(self, x):
        return torch.linalg.inv(x).sin()


class Counter(torch.nn.Module):
    """A buffer updated in place on every call, as a decoding step's cache or position."""

    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros(4))

    def forward(self, x):
        self.steps.add_(1)
        return x * self.steps


class SlotCache(torch.nn.Module):
    """A cache in registered buffers that each call writes one row of (`index_copy_`) and a
    position counter it advances, as a decoding step keeps them."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(6, 4))
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x, pos):
        self.cache.index_copy_(0, pos, self.proj(x))
        self.calls.add_(1)
        return self.cache.cumsum(0)[pos] * self.calls


def stepped(call, steps):
    """Each step's result of `call`, one call per (args, kwargs) in `steps`."""
    results = []
    with torch.no_grad():
        for args, kwargs in steps:
            out = call(*args, **kwargs)
            results.append((out[0] if isinstance(out, (tuple, list)) else out).clone())
    return results


def kept_state(repo: Path):
    """kiln.compile of a program that writes its buffers in place: the compiled module keeps
    them between calls as eager does, and reset_state() starts again."""
    import kiln

    torch.manual_seed(0)
    m = dev(SlotCache().eval())
    steps = [((dev(torch.randn(1, 4)), dev(torch.tensor([i % 6]))), {}) for i in range(8)]
    eager = copy.deepcopy(m)  # before any call: export leaves the module's buffers as they are
    compiled = kiln.compile(m, steps[0][0])
    got, want = stepped(compiled, steps), stepped(eager, steps)
    check("a module's buffers written in place (a cache row, a counter) are kept between calls, as eager keeps "
          "them", all(close(a, b) for a, b in zip(got, want)) and not close(got[0], got[6]))
    check("the compiled module's state is its buffers as the last call left them",
          sorted(compiled.state) == ["cache", "calls"] and int(compiled.state["calls"]) == 8)
    compiled.reset_state()
    again = stepped(compiled, steps[:2])
    check("reset_state() starts again from the exported values", close(again[0], got[0]) and close(again[1], got[1]))
    functional = torch.export.export(copy.deepcopy(eager).eval(), steps[0][0]).run_decompositions()
    eager_again = copy.deepcopy(functional.module())
    kinds = {s.kind.name for s in functional.graph_signature.output_specs}
    compiled = kiln.compile(functional)
    got, want = stepped(compiled, steps), stepped(eager_again, steps)
    check("the same program functionalised (the new buffers as buffer_mutation outputs) keeps them too",
          "BUFFER_MUTATION" in kinds and all(close(a, b) for a, b in zip(got, want)), kinds)

    fixed_state()
    archive = repo / "tests/fixtures/decode/gpt2_static_cache_step.pt2"
    program = torch.export.load(str(archive))
    eager = program.module()
    tokens = [3, 7, 1, 30, 12, 5, 9, 2]
    steps = [((), {"input_ids": torch.tensor([[t]]), "cache_position": torch.tensor([i])})
             for i, t in enumerate(tokens)]
    compiled = kiln.compile(program, device="cpu")
    got, want = stepped(compiled, steps), stepped(eager, steps)
    check("transformers' static-cache GPT-2 step: eight decoding steps through the cache match eager's",
          all(close(a, b) for a, b in zip(got, want)), [float((a - b).abs().max()) for a, b in zip(got, want)])

    if DEVICE == "cuda":
        graphed = kiln.compile(program, device="cuda", mode="reduce-overhead")
        on_gpu = [((), {k: v.cuda() for k, v in kw.items()}) for _, kw in steps]
        got = stepped(graphed, on_gpu)
        check("the static-cache step under CUDA graphs (mode=\"reduce-overhead\"): one capture, eight replays "
              "through the cache, eager's logits", graphed._call.captures == 1
              and all(close(a.cpu(), b) for a, b in zip(got, want)))
        graphed.reset_state()
        again = stepped(graphed, on_gpu[:1])
        check("reset_state() under CUDA graphs starts again without a capture",
              graphed._call.captures == 1 and close(again[0].cpu(), want[0]))

    sys.path.insert(0, str(repo / "tools"))
    import generate

    modes = ["default", "reduce-overhead"] if DEVICE == "cuda" else ["default"]
    for kind, mode in [(kind, mode) for kind in ("gpt2", "llama") for mode in modes]:
        text = io.StringIO()
        with contextlib.redirect_stdout(text), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            status = generate.main([kind, "--steps", "64", "--device", DEVICE, "--mode", mode])
        check(f"tools/generate.py {kind} ({mode}): Kiln's compiled prefill, then 64 greedy tokens through its "
              "compiled step sharing the prefill's cache, are eager generate's",
              status == 0 and "ok: all 64 tokens match" in text.getvalue(), text.getvalue())
    try:
        compiled.share_state(kiln.compile(m, (dev(torch.randn(1, 4)), dev(torch.tensor([0])))))
        check("share_state between programs that keep different state is refused", False, "it was taken")
    except kiln.KilnError as error:
        check("share_state between programs that keep different state is refused, naming both",
              "lifted_tensor_0" in str(error) and "cache" in str(error), str(error))


def dynamic_export(repo: Path):
    """An exported program with dynamic shapes: compiled once for its whole range at the first
    call (no export again), every call at any size eager's; a size outside a range, or two dims
    the export makes one size that differ, refused with a message naming them. Under device
    graphs (one size per graph) each size compiles at its first call instead."""
    import kiln

    m = dev(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16)).eval())
    batch = torch.export.Dim("batch", min=1, max=8)
    with torch.no_grad():
        ep = torch.export.export(m, (dev(torch.randn(2, 8)),), dynamic_shapes=({0: batch},))
        compiled = kiln.compile(ep, device=DEVICE)
        results = [(compiled(v), m(v)) for v in (dev(torch.randn(n, 8)) for n in (2, 5, 2, 8))]
    check("an export with a dynamic batch compiles once and runs at each size in its range, every call eager's",
          isinstance(compiled, kiln.Dynamic) and compiled.whole is not None and compiled.compiles == 1
          and all(close(g, w) for g, w in results), (compiled.compiles, compiled.per_size))
    try:
        compiled(dev(torch.randn(9, 8)))
        check("a size outside the export's range is refused, naming the range", False, "it ran")
    except kiln.KilnError as error:
        check("a size outside the export's range is refused, naming the range",
              "dim 0 is 9: outside the range 1..=8 the export gives it" in str(error), str(error))
    bert = torch.export.load(str(repo / "tests/fixtures/dynamic/bert.pt2"))
    compiled = kiln.compile(bert, device=DEVICE)
    ids, mask = dev(torch.zeros(2, 8, dtype=torch.int64)), dev(torch.ones(2, 9, dtype=torch.int64))
    try:
        compiled(input_ids=ids, attention_mask=mask)
        check("two dims the export makes one size must agree", False, "it ran")
    except kiln.KilnError as error:
        check("two dims the export makes one size must agree",
              "input `attention_mask` dim 1 is 9, but input `input_ids` dim 1 is 8" in str(error), str(error))
    eager = bert.module()  # on the cpu, where the archive keeps its constants
    runs = []
    with torch.no_grad():
        for b, n in ((1, 3), (4, 33)):
            ids = torch.randint(0, 32, (b, n))  # the fixture's vocabulary
            mask = torch.ones(b, n, dtype=torch.int64)
            mask[0, n // 2:] = 0
            got = compiled(input_ids=dev(ids), attention_mask=dev(mask))
            runs.append((got.cpu(), eager(input_ids=ids, attention_mask=mask)))
    check("BERT with its mask compiles once and is eager's at two sizes of its range",
          compiled.compiles == 1 and all(close(g, w) for g, w in runs), compiled.compiles)
    # A convolution takes a symbolic batch, but one length only: over a dynamic batch it
    # compiles once; over a dynamic length, each length compiles at its first call.
    conv = dev(torch.nn.Conv1d(4, 6, 3).eval())
    counts = []
    for dim, lo, shapes in ((0, 1, ((2, 4, 10), (3, 4, 10), (5, 4, 10))),
                            (2, 4, ((2, 4, 10), (2, 4, 12), (2, 4, 10)))):
        with torch.no_grad():
            ep = torch.export.export(conv, (dev(torch.randn(2, 4, 10)),),
                                     dynamic_shapes=({dim: torch.export.Dim("n", min=lo, max=16)},))
            compiled = kiln.compile(ep, device=DEVICE)
            runs = [(compiled(v), conv(v)) for v in (dev(torch.randn(*s)) for s in shapes)]
        counts.append((compiled.compiles, compiled.whole is not None, "--specialize" in (compiled.per_size or "")))
        counts[-1] += (all(close(g, w) for g, w in runs),)
    check("a convolution over a dynamic batch compiles once; over a dynamic length, whose size it takes one at a "
          "time, each length at its first call", counts == [(1, True, False, True), (2, False, True, True)], counts)


def fixed_state():
    """The state of a program under device graphs keeps its tensors: a cache the code wrote
    in place stays itself, a new counter is copied into the old one, and a snapshot taken
    before a warm-up call puts the state back after it."""
    from kiln._compile import _State

    rows = [{"name": "cache", "shape": [3]}, {"name": "n", "shape": []}]
    state = _State(rows, {"cache": torch.zeros(3), "n": torch.zeros((), dtype=torch.int64)}, "cpu", fixed=True)
    cache, n = state.tensors

    def run(tensors):  # writes the cache in place, returns a new counter
        x, c, k = tensors
        c[int(k)] = x
        return (x * 2, c, k + 1)

    undo = state.snapshot()
    out = state.step(run, [torch.tensor(5.0)])
    kept = state.tensors[0] is cache and state.tensors[1] is n
    check("a fixed state keeps its tensors: the cache written in place, the new counter copied in",
          kept and out[0].item() == 10.0 and cache.tolist() == [5.0, 0.0, 0.0] and n.item() == 1)
    undo()
    check("a snapshot puts the state back", cache.tolist() == [0.0, 0.0, 0.0] and n.item() == 0)
    state.step(run, [torch.tensor(1.0)])
    state.reset()
    check("reset keeps a fixed state's tensors", state.tensors[0] is cache and n.item() == 0 and cache.sum() == 0)


def recording_backend(made):
    """kiln.backend, each function it returns for a graph appended to `made` (one Kiln
    compiled has `.kiln`; a fallback to eager has not)."""
    import kiln

    def backend(gm, example_inputs, **kwargs):
        made.append(kiln.backend(gm, example_inputs, **kwargs))
        return made[-1]

    return backend


def refused(b, x, options, what, *named):
    """torch.compile(b, backend="kiln", options=options)(x) fails, its message naming each of `named`."""
    torch._dynamo.reset()
    try:
        torch.compile(b, backend="kiln", options=options)(x)
    except Exception as error:  # dynamo wraps the backend's error
        check(what, all(n in str(error) for n in named), str(error)[-400:])
        return
    check(what, False, "it compiled")


def main(repo: Path):
    try:
        import kiln
    except ImportError:
        check(f"the kiln package is installed in {sys.executable}", False,
              "(tools/test.sh installs it: pip install ./python)")

    torch.manual_seed(0)
    m = dev(Mlp().eval())
    x, scale = dev(torch.randn(4, 16)), dev(torch.randn(8))
    compiled = kiln.compile(m, (x,), example_kwargs={"scale": scale})
    with torch.no_grad():
        want = m(x, scale=scale)
    got = compiled(x, scale=scale)
    check("kiln.compile takes the module's keyword inputs and gives its dict output, as eager",
          isinstance(got, dict) and close(got, want), (type(got), got.keys() if isinstance(got, dict) else None))
    x2 = dev(torch.randn(4, 16))
    with torch.no_grad():
        want2 = m(x2, scale=scale)
    check("the compiled module takes other inputs of the same shapes", close(compiled(x2, scale=scale), want2))
    try:
        compiled(dev(torch.randn(5, 16)), scale=scale)
        check("inputs of other shapes are refused", False)
    except kiln.KilnError as error:
        check("inputs of other shapes are refused, naming the shapes", "[5, 16]" in str(error), str(error))

    from transformers import BertConfig, BertModel

    cfg = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                     vocab_size=96, max_position_embeddings=32)
    bert = dev(BertModel(cfg).eval())
    ids = dev(torch.randint(0, 96, (2, 12)))
    mask = torch.ones(2, 12, dtype=torch.int64)
    mask[1, 9:] = 0
    mask = dev(mask)
    out = kiln.compile(bert, (ids,), example_kwargs={"attention_mask": mask})(ids, attention_mask=mask)
    with torch.no_grad():
        want = bert(ids, attention_mask=mask)
    check("a transformers model's ModelOutput comes back as one, its fields eager's",
          type(out) is type(want) and close(out.last_hidden_state, want.last_hidden_state)
          and close(out.pooler_output, want.pooler_output), type(out))

    torch._dynamo.reset()
    b = dev(Branchy().eval())
    x = dev(torch.randn(8, 16))
    with torch.no_grad():
        want = b(x)
        got = torch.compile(b, backend="kiln")(x)
    check("torch.compile(backend=\"kiln\") through the entry point matches eager across graph breaks",
          close(got, want))
    made = []
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(b, backend=recording_backend(made), options={"device": DEVICE})(x)
    graphs = [hasattr(f, "kiln") for f in made]
    check("each graph of a model with a data-dependent branch and a print is compiled by Kiln",
          len(graphs) >= 2 and all(graphs) and close(got, want), graphs)

    torch._dynamo.reset()
    inv = Inverse()
    a = dev(torch.randn(4, 4) + 4 * torch.eye(4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = torch.compile(inv, backend="kiln")(a)
    messages = [str(w.message) for w in caught if "Kiln" in str(w.message)]
    check("a graph with an op Kiln lacks runs in eager, with a warning naming the op",
          close(got, inv(a)) and any("linalg_inv" in m and "eager" in m for m in messages), messages)

    torch._dynamo.reset()
    counted, counter = dev(Counter()), dev(Counter())
    x4 = dev(torch.randn(4))
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        compiled = torch.compile(counted, backend="kiln")
        calls = [(compiled(x4), counter(x4)) for _ in range(3)]
    messages = [str(w.message) for w in caught if "Kiln" in str(w.message)]
    check("a graph that updates a buffer in place runs in eager, with a warning saying so: every call eager's",
          all(close(a, b) for a, b in calls) and close(counted.steps, counter.steps)
          and any("in place" in m and "eager" in m for m in messages), messages)

    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = torch.compile(b, backend="kiln")(x)  # gradients on: the parameters require them
    messages = [str(w.message) for w in caught if "Kiln" in str(w.message)]
    check("with gradients on, the graph still compiles, and a warning says its outputs carry none",
          close(got.detach(), want) and not got.requires_grad and any("inference" in m for m in messages), messages)

    refused(b, x, {"devise": "cpu"}, "an unknown option is refused, naming the options the backend takes",
            "devise", "device", "plugins", "freeze")
    refused(b, x, {"device": "npu"}, "a device no plugin provides is an error naming the devices there are, not a "
            "fallback to eager", "npu", "cpu", "cuda")

    frozen_weights()

    other = "cuda" if DEVICE == "cpu" else "cpu"
    refused(b, x, {"device": other}, "a device other than the inputs' is an error saying where the inputs are, "
            "before anything runs", f"compiled for `{other}`", f"on {x.device}")

    from kiln._dynamo import _OneCompile

    for dynamic in (None, True):
        torch._dynamo.reset()
        # A layer norm's `eps`, which dynamo passes to a graph of symbolic sizes as a tensor.
        seq = dev(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.LayerNorm(8)).eval())
        made = []
        compiled_seq = torch.compile(seq, backend=recording_backend(made), dynamic=dynamic)
        with warnings.catch_warnings(record=True) as caught, torch.no_grad():
            warnings.simplefilter("always")
            values = [dev(torch.randn(n, 8)) for n in (2, 3, 5, 3, 7)]
            results = [(compiled_seq(v), seq(v)) for v in values]
            once = [m.compiles for m in made if isinstance(m, _OneCompile)]
            # A transposed input: dynamo traces it again, and Kiln compiles that graph once too.
            transposed = dev(torch.randn(8, 3)).t()
            results.append((compiled_seq(transposed), seq(transposed)))
        symbolic = [m for m in made if isinstance(m, _OneCompile)]
        fallbacks = [str(w.message) for w in caught if "Kiln" in str(w.message)]
        what = "dynamic=True" if dynamic else "a size that changes (dynamo's automatic dynamic shapes)"
        check(f"{what}: the graph of symbolic sizes (a layer norm's eps passed as a tensor) is compiled by Kiln "
              "once for every size (a transposed input's graph once too), every call eager's",
              all(close(g, w) for g, w in results) and not fallbacks and once == [1]
              and sum(m.compiles for m in symbolic) == 2, (fallbacks, once, [m.refused for m in symbolic]))

    if DEVICE == "cpu":
        torch._dynamo.reset()
        with torch.no_grad():
            got = torch.compile(b, backend="kiln", mode="reduce-overhead")(x)
            torch._dynamo.reset()
            also = torch.compile(b, backend="kiln", options={"cudagraphs": True, "freeze": True})(x)
        check("mode=\"reduce-overhead\" (or options cudagraphs) on the cpu, which has no device graphs, runs the "
              "compiled graphs directly", close(got, want) and close(also, want))
    else:
        cuda_graphs()
    device_graphs()
    auto_graphs()
    archive_as_torch_saves_it()
    trusted_alignment()

    more_families()
    mixture_of_experts()
    sorts_and_scatters()
    kept_state(repo)
    dynamic_export(repo)
    cache_across_processes(repo)
    zoo(repo)
    if DEVICE == "cuda":
        gxu_standing_in(repo)


class MoreFamilies(torch.nn.Module):
    """What a sweep of transformers' and torchvision's families found Kiln lacking:
    convolutions padded by name (EfficientNet's "same", even kernels and dilation too),
    `meshgrid` (BEiT's relative positions), a pooling window far wider than its input
    (EfficientNet's head: 2560 over a 2 x 2 map, in ceil_mode), `max_pool3d` (torchvision's
    MViT) and `torch.vmap`, which dynamo spells out as functorch's own calls (transformers'
    Mamba scans with it)."""

    def __init__(self):
        super().__init__()
        self.same = torch.nn.Conv2d(3, 4, (4, 3), padding="same", dilation=(1, 2))
        self.same1 = torch.nn.Conv1d(4, 4, 4, padding="same", groups=2, bias=False)
        self.valid = torch.nn.Conv3d(3, 2, (1, 2, 2), padding="valid")

    def forward(self, x, v):
        y = self.same(x)
        z = self.same1(y.flatten(2))
        w = self.valid(x.unsqueeze(2))
        a, b = torch.meshgrid(torch.arange(5.0, device=v.device), v, indexing="ij")
        c, d = torch.meshgrid(v, v[:2], indexing="xy")
        wide = torch.nn.functional.avg_pool2d(x[:, :, :2, :2], 2560, ceil_mode=True)
        pooled = torch.nn.functional.max_pool2d(x, 3, 2, 1, dilation=2, ceil_mode=True)
        mapped = torch.vmap(lambda row: row.softmax(-1) * row.sum())(x.flatten(1))
        clip = x.unsqueeze(2).expand(-1, -1, 5, -1, -1) * torch.arange(1.0, 6.0, device=x.device).view(5, 1, 1)
        pooled3 = [torch.nn.functional.max_pool3d(clip, 3, (2, 1, 2), 1, ceil_mode=True),
                   torch.nn.functional.max_pool3d(clip[0], (2, 3, 2), 1, (0, 1, 1), dilation=(2, 1, 1))]
        return y, z, w, a * b, c - d, wide, pooled, mapped, *pooled3


def more_families():
    torch._dynamo.reset()
    m = dev(MoreFamilies().eval())
    x, v = dev(torch.randn(2, 3, 7, 8)), dev(torch.randn(3))
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        want = m(x, v)
        got = torch.compile(m, backend="kiln")(x, v)
    fallbacks = [str(w.message) for w in caught if "Kiln cannot compile" in str(w.message)]
    check("convolutions padded \"same\" and \"valid\", meshgrid, a pooling window wider than its input, max_pool3d "
          "and torch.vmap compile and match eager", close(got, want) and not fallbacks, fallbacks)


def mixture_of_experts():
    from transformers import MixtralConfig, MixtralForCausalLM

    torch._dynamo.reset()
    torch.manual_seed(0)
    config = MixtralConfig(vocab_size=128, hidden_size=32, intermediate_size=48, num_attention_heads=4,
                           num_key_value_heads=2, num_hidden_layers=2, num_local_experts=4, num_experts_per_tok=2)
    m = dev(MixtralForCausalLM(config).eval())
    ids = dev(torch.randint(0, 128, (2, 9)))
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        want = m(input_ids=ids, use_cache=False).logits
        got = torch.compile(m, backend="kiln")(input_ids=ids, use_cache=False).logits
    fallbacks = [str(w.message) for w in caught if "Kiln cannot compile" in str(w.message)]
    check("a mixture of experts (transformers' Mixtral: top-2 routing, histc, grouped products) compiles and "
          "matches eager", close(got, want) and not fallbacks, fallbacks)


class Sorts(torch.nn.Module):
    def forward(self, x, ids, y, v, long_ids, f, h, d, i32):
        values, order = torch.sort(x, dim=1, descending=True, stable=True)
        along_0 = torch.argsort(x, dim=0, stable=True)
        top_values, top = torch.topk(x, 3, dim=-1, largest=False)
        by_id, perm = torch.sort(ids, stable=True)
        inverse = torch.zeros_like(perm)
        inverse[perm] = torch.arange(perm.numel(), device=perm.device)
        i = torch.tensor([-1, 0, 2], device=x.device)
        j = torch.tensor([1, -2, 5], dtype=torch.int32, device=x.device)
        put = y.clone()
        put[:, i, j] = v
        # Rows longer than one run of Kiln's sort (1024), in every key form.
        long_by_id, long_perm = torch.sort(long_ids, stable=True)
        f_values, f_order = torch.sort(f, dim=-1, descending=True, stable=True)
        f_top_values, f_top = torch.topk(f, 7)
        return (values, order, along_0, top_values, torch.gather(x, -1, top), by_id, perm, inverse, put,
                long_by_id, long_perm, f_values, f_order, f_top_values, torch.gather(f, -1, f_top),
                torch.argsort(h, stable=True), torch.argsort(d, descending=True, stable=True),
                torch.argsort(i32, stable=True))


def sorts_and_scatters():
    torch._dynamo.reset()
    torch.manual_seed(0)
    x = torch.randn(4, 9, 6).round()  # ties
    x[0, 2, 1] = x[1, 0, 0] = float("nan")
    x[2, 3, 3] = -0.0
    ids = torch.randint(0, 5, (300,))  # a router's expert ids: many ties
    y, v = torch.randn(2, 5, 6), torch.randn(2, 3)
    long_ids = torch.randint(0, 64, (5000,))
    f = (torch.randn(2, 2500) * 4).round()
    f[0, ::97] = float("nan")
    f[1, ::89] = -0.0
    h = torch.randn(1500).to(torch.bfloat16)
    d = torch.randn(1100, dtype=torch.float64).round()
    i32 = torch.randint(-50, 50, (2049,), dtype=torch.int32)
    args = [dev(t) for t in (x, ids, y, v, long_ids, f, h, d, i32)]
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        want = Sorts()(*args)
        got = torch.compile(Sorts(), backend="kiln")(*args)
    fallbacks = [str(w.message) for w in caught if "Kiln cannot compile" in str(w.message)]
    same = [torch.equal(a.nan_to_num(), b.nan_to_num()) and torch.equal(a.isnan(), b.isnan())
            if a.is_floating_point() else torch.equal(a, b) for a, b in zip(want, got)]
    check("sorts (stable, descending, NaN, ties, integers, along any dim, rows of several runs), topk and "
          "x[i, j] = v (negative and int32 indices, a permutation inverted) match eager",
          all(same) and not fallbacks, (same, fallbacks))


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).mean((2, 3)))


def frozen_weights():
    """options={"freeze": True}: parameters and buffers compiled as constants, and compiled
    again when one changes in place."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = dev(ConvNet().eval())
    x = dev(torch.randn(2, 3, 8, 8))
    made = []
    backend = recording_backend(made)
    compiled = torch.compile(net, backend=backend, options={"freeze": True})
    with torch.no_grad():
        first = close(compiled(x), net(x)) and close(compiled(x + 1), net(x + 1))
        graph = made[0] if len(made) == 1 else None
        check("options={\"freeze\": True} compiles the parameters and buffers as constants: the call takes the "
              "input alone, eager's result", first and graph is not None and graph.compiles == 1
              and len(graph.kiln._inputs) == 1, made)
        net.fc.weight.add_(1.0)
        after_add = close(compiled(x), net(x))
        net.load_state_dict({k: v * 0.5 for k, v in net.state_dict().items()})
        after_load = close(compiled(x), net(x))
        net.fc.weight.data = net.fc.weight.data * 2  # the same Parameter, other memory
        after_data = close(compiled(x), net(x))
        again = close(compiled(x), net(x))
    check("a frozen parameter changed in place (add_, load_state_dict) or given other memory (.data =) is seen: "
          "the graph is compiled again, and only then", after_add and after_load and after_data and again
          and graph.compiles == 4, graph.compiles)


class FakeDevice:
    """torch.cuda's graph API on the cpu: a capture records the calls made in it, and a
    replay makes them again (as a CUDA graph replays its kernels on the captured addresses)."""

    class Stream:
        def wait_stream(self, other):
            pass

    def __init__(self):
        self.capturing, self.recorded = False, None
        self._stream = FakeDevice.Stream()

    def is_current_stream_capturing(self):
        return self.capturing

    def current_stream(self):
        return self._stream

    def synchronize(self):
        pass

    def stream(self, s):
        import contextlib
        return contextlib.nullcontext()

    def CUDAGraph(self):
        device = self

        class Graph:
            def replay(self):
                for action in self.actions:
                    action()

        g = Graph()
        g.actions = []
        device.recording = g
        return g

    def graph(self, g):
        import contextlib
        device = self

        @contextlib.contextmanager
        def capture():
            device.capturing = True
            try:
                yield
            finally:
                device.capturing = False

        return capture()


def device_graphs():
    """kiln._graphs.Graphed with a stand-in device: capture once after a warm-up, replay with
    the other inputs copied in, capture again when a kept input moves."""
    from kiln._graphs import Graphed

    device = FakeDevice()
    out = torch.zeros(3)
    runs = []

    def call(tensors):  # writes into its own output buffer, as compiled code does
        def kernel(a=tensors[0], w=tensors[1]):
            out.copy_(a * 2 + w)
        if device.capturing:
            device.recording.actions.append(kernel)
        else:
            kernel()
        runs.append(device.capturing)
        return (out,)

    weight = torch.ones(3)
    graphed = Graphed(call, device, kept=[1])
    first = graphed([torch.tensor([1.0, 2.0, 3.0]), weight])
    check("the first call warms up, captures, and replays: the graph's result",
          runs == [False, True] and graphed.captures == 1 and first[0].tolist() == [3.0, 5.0, 7.0], runs)
    second = graphed([torch.tensor([0.0, 1.0, 0.0]), weight])
    check("a later call copies the other inputs into the captured ones and replays, running nothing else",
          len(runs) == 2 and second[0].tolist() == [1.0, 3.0, 1.0] and second[0] is first[0], runs)
    weight.add_(1.0)
    third = graphed([torch.tensor([0.0, 1.0, 0.0]), weight])
    check("a kept input is read in place: its new values show without a capture",
          graphed.captures == 1 and third[0].tolist() == [2.0, 4.0, 2.0])
    moved = weight.clone()
    fourth = graphed([torch.tensor([1.0, 1.0, 1.0]), moved])
    check("a kept input at another address is captured again",
          graphed.captures == 2 and fourth[0].tolist() == [4.0, 4.0, 4.0])
    device.capturing = True
    inside = graphed([torch.tensor([1.0, 1.0, 1.0]), moved])
    device.capturing = False
    check("inside the caller's own capture the call is made directly",
          graphed.captures == 2 and runs[-1] is True and inside[0] is out)


class TimedDevice(FakeDevice):
    """A FakeDevice with a clock: launching takes the host `host` seconds a kernel and the
    device `work` seconds, run in order after what it already has; a replay costs the host
    nothing; `synchronize` waits for the device."""

    def __init__(self):
        super().__init__()
        self.now = self.busy = 0.0

    def synchronize(self):
        self.now = max(self.now, self.busy)

    def compiled(self, out, host, work, kernels=10):
        """A compiled call of `kernels` kernels writing `2 * a` into `out`; `.entered` lists,
        for each time the compiled code ran, whether it ran inside a capture."""
        device = self

        def call(tensors):
            def run(a=tensors[0]):
                out.copy_(a * 2)
                for _ in range(kernels):
                    device.busy = max(device.busy, device.now) + work

            call.entered.append(device.capturing)
            for _ in range(kernels):
                device.now += host
            if device.capturing:
                device.recording.actions.append(run)
            else:
                run()
            return (out,)

        call.entered = []
        return call


def auto_graphs():
    """kiln._graphs.AutoGraphed (the default mode's graphs) with a stand-in device and clock:
    a call the host bounds replays a graph from its second call on, with its outputs copied
    out; a call the device bounds, or whose output is an input, runs as compiled."""
    from kiln._dynamo import _graphs_policy
    from kiln._graphs import AutoGraphed

    device, out = TimedDevice(), torch.zeros(3)
    call = device.compiled(out, host=5e-6, work=1e-6)
    auto = AutoGraphed(call, device, kept=[], clock=lambda: device.now)
    firsts = [auto([torch.tensor([1.0, 2.0, 3.0])]) for _ in range(2)]
    entered = len(call.entered)
    later = [auto([torch.tensor([float(i), 0.0, 1.0])]) for i in range(3)]
    check("a call bound by the host (50 us to launch, 10 us to run) replays a graph from its second call: "
          "each result its own copy, the compiled code not entered again",
          auto.chosen == "graphs" and len(call.entered) == entered and True in call.entered
          and [r[0].tolist() for r in later] == [[0.0, 0.0, 2.0], [2.0, 0.0, 2.0], [4.0, 0.0, 2.0]]
          and all(r[0] is not out for r in firsts[1:] + later) and firsts[1][0].tolist() == [2.0, 4.0, 6.0],
          (auto.chosen, auto.measured, call.entered))
    device.capturing = True
    inside = auto([torch.tensor([1.0, 1.0, 1.0])])
    device.capturing = False
    check("inside the caller's own capture the call is made directly", inside[0] is out)

    device, out = TimedDevice(), torch.zeros(3)
    call = device.compiled(out, host=1e-7, work=1e-5)
    auto = AutoGraphed(call, device, kept=[], clock=lambda: device.now)
    results = [auto([torch.tensor([1.0, 2.0, 3.0])]) for _ in range(4)]
    check("a call bound by the device (1 us to launch, 100 us to run) runs as compiled, never captured",
          auto.chosen == "compiled" and auto.graphed is None and True not in call.entered
          and all(r[0] is out for r in results), (auto.chosen, auto.measured))

    device, out = TimedDevice(), torch.zeros(3)
    call = device.compiled(out, host=5e-6, work=1e-6)
    weight = torch.ones(3)
    auto = AutoGraphed(lambda tensors: call(tensors[:1]), device, kept=[1], clock=lambda: device.now)
    for _ in range(3):
        auto([torch.tensor([1.0, 2.0, 3.0]), weight])
    chosen = auto.chosen

    def refuse():
        raise RuntimeError("capture failed")

    device.CUDAGraph = refuse
    moved = auto([torch.tensor([2.0, 2.0, 2.0]), weight.clone()])
    check("where capturing again (a parameter moved) fails, the call runs as compiled, and so do the later ones",
          chosen == "graphs" and auto.chosen == "compiled" and moved[0] is out and moved[0].tolist() == [4.0] * 3,
          (chosen, auto.chosen))

    device = TimedDevice()
    same = AutoGraphed(lambda tensors: (tensors[0],), device, kept=[], clock=lambda: device.now)
    x = torch.ones(3)
    check("a call whose output is its input is never captured", all(same([x])[0] is x for _ in range(3))
          and same.chosen == "compiled" and same.graphed is None)
    from kiln._dynamo import _PerShape
    check("a graph traced with symbolic sizes does not choose graphs by default (each size would keep one)",
          _PerShape(None, "cuda", (), "auto")._graphs == "off"
          and _PerShape(None, "cuda", (), "replay")._graphs == "replay")
    check("torch.compile's modes and the cudagraphs option give the graphs policy",
          [_graphs_policy(None, None), _graphs_policy("default", None), _graphs_policy("reduce-overhead", None),
           _graphs_policy("max-autotune-no-cudagraphs", None), _graphs_policy(None, True),
           _graphs_policy(None, False)] == ["auto", "auto", "replay", "off", "replay", "off"])


def archive_as_torch_saves_it():
    """The archive Kiln writes of a graph is torch.export.save's, entry for entry, though it
    skips the canonical form torch's serializer computes only to test it."""
    import zipfile

    from torch._export.serde import serialize

    from kiln._compile import save_without_examples

    original = serialize.canonicalize
    program = torch.export.export(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)),
                                  (torch.randn(3, 4),))

    def entries(path):
        with zipfile.ZipFile(path) as z:  # the archive's top folder is named after its file
            return {name.split("/", 1)[-1]: z.read(name) for name in z.namelist()}

    with tempfile.TemporaryDirectory() as tmp:
        save_without_examples(program, Path(tmp, "kiln.pt2"))
        examples, program.example_inputs = program.example_inputs, None
        torch.export.save(program, str(Path(tmp, "torch.pt2")))
        program.example_inputs = examples
        kiln_entries, torch_entries = entries(Path(tmp, "kiln.pt2")), entries(Path(tmp, "torch.pt2"))
    check("Kiln's archive of a graph is torch.export.save's, entry for entry, without the canonical form torch "
          "computes only to test it (and torch's function is back in place after)",
          kiln_entries == torch_entries and serialize.canonicalize is original,
          sorted(n for n in kiln_entries if kiln_entries.get(n) != torch_entries.get(n)))


def trusted_alignment():
    """Dynamo's graphs: output_code.py's `call` is told to check the addresses of the inputs
    other than the aligned parameters and buffers only, as Inductor trusts its static inputs,
    and not to check sizes and strides, which dynamo's guards hold; a direct call checks all."""
    from types import SimpleNamespace

    from kiln._compile import _aligned_kept, _OutputCode

    base = torch.zeros(64)
    weight = torch.nn.Parameter(torch.zeros(8))
    shifted = torch.nn.Parameter(base[1:9])  # 4 bytes into its storage: not 16-byte aligned
    examples = [torch.zeros(8), weight, shifted, torch.zeros(8)]
    calls = []
    checker = object()
    module = SimpleNamespace(ALIGNED_INPUTS=(0, 1, 2), call=lambda args, aligned=(0, 1, 2), check=checker:
                             calls.append((len(args), aligned, check is checker)))
    kept = _aligned_kept(examples)
    _OutputCode(module).guarded(kept)(examples)
    _OutputCode(module)(examples)
    check("a graph's aligned parameters are not checked per call, nor any size dynamo guards; the other "
          "inputs' addresses (and a misaligned parameter's) are, and a direct call checks everything",
          kept == {1} and calls == [(4, (0, 2), False), (4, (0, 1, 2), True)], (kept, calls))


SECOND = """
import sys, torch, kiln
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.Tanh(), torch.nn.Linear(24, 4)).eval().to(sys.argv[1])
x = torch.ones(3, 16, device=sys.argv[1])
with torch.no_grad():
    got = torch.compile(m, backend="kiln")(x)
    want = m(x)
assert (got - want).abs().max().item() < 1e-5, (got, want)
"""


def cache_across_processes(repo: Path):
    """Two processes compile one model: the first runs `host compile`, the second only
    reads the cache (a logging stand-in for KILN_HOST records what each ran)."""
    import kiln

    real = kiln._host.find_host()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log"
        wrapper = Path(tmp) / "host"
        wrapper.write_text(f"#!/bin/sh\necho \"$@\" >> '{log}'\nexec '{real}' \"$@\"\n")
        wrapper.chmod(0o755)
        env = dict(os.environ, KILN_HOST=str(wrapper), KILN_CACHE_DIR=str(Path(tmp) / "cache"))
        compiles = []
        for run in range(3):
            if run == 2:  # a rebuilt compiler: the same version, another binary
                os.utime(wrapper, ns=(wrapper.stat().st_atime_ns, wrapper.stat().st_mtime_ns + 10**9))
            done = subprocess.run([sys.executable, "-c", SECOND, DEVICE], env=env, capture_output=True, text=True)
            if done.returncode != 0:
                check("the cache check's processes run", False, done.stderr[-2000:])
            lines = log.read_text().splitlines() if log.exists() else []
            compiles.append(sum(" compile " in f" {line} " for line in lines))
    check("a second process compiles nothing: the first's compile is in the cache", compiles[:2] == [1, 1], compiles)
    check("a rebuilt compiler of the same version compiles again", compiles[2] == 2, compiles)


def zoo(repo: Path, options=None):
    """Every model of tools/model_zoo.py through torch.compile(backend="kiln"), against eager."""
    sys.path.insert(0, str(repo / "tools"))
    import model_zoo

    where = f" with options={options}" if options else ""
    for name, factory in model_zoo.ZOO.items():
        torch._dynamo.reset()
        gen = torch.Generator().manual_seed(0)
        torch.manual_seed(0)
        module, inputs, _ = factory(gen)
        module = dev(module.eval())
        inputs = [dev(t) for t in inputs]
        with torch.no_grad():
            want = module(*inputs)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                got = torch.compile(module, backend="kiln", options=options)(*inputs)
        fallbacks = [str(w.message) for w in caught if "Kiln cannot compile" in str(w.message)]
        check(f"zoo model {name} through torch.compile(backend=\"kiln\"){where} matches eager, every graph "
              "compiled", close(got, want, 1e-3) and not fallbacks, fallbacks)


def cuda_graphs():
    """mode="reduce-overhead" on CUDA: one CUDA graph captured, then replayed for new inputs
    without entering the compiled code, parameters read where they are."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    m = dev(torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 32)).eval())
    made = []
    backend = recording_backend(made)
    xs = [dev(torch.randn(8, 64)) for _ in range(4)]
    frozen = torch.compile(m, backend="kiln", options={"cudagraphs": True, "freeze": True})
    with torch.no_grad():
        check("options cudagraphs and freeze (torch.compile takes a mode or options, not both): replays match eager",
              all(close(frozen(x).clone(), m(x)) for x in xs))
    torch._dynamo.reset()
    compiled = torch.compile(m, backend=backend, mode="reduce-overhead")
    with torch.no_grad():
        first = compiled(xs[0]).clone()
        graphed = getattr(made[0], "graphed", None) if len(made) == 1 else None
        check("mode=\"reduce-overhead\" on CUDA captures the graph's call into one CUDA graph",
              graphed is not None and graphed.captures == 1
              and isinstance(graphed._graph, torch.cuda.CUDAGraph) and close(first, m(xs[0])), made)

        def entered(tensors):
            raise AssertionError("a replay entered the compiled code")

        graphed._call = entered
        replays = [(compiled(x).clone(), m(x)) for x in xs[1:]]
        m[0].bias.add_(1.0)  # a parameter changed in place: read where it is
        replays.append((compiled(xs[0]).clone(), m(xs[0])))
    check("later calls replay the CUDA graph with the new inputs (and a parameter changed in place), "
          "eager's results, without entering the compiled code",
          graphed.captures == 1 and all(close(g, w) for g, w in replays))
    auto_cuda_graphs(m, xs)


def auto_cuda_graphs(small, xs):
    """The default mode on CUDA: a graph whose launches take longer than its kernels replays a
    CUDA graph from its second call, each call's outputs its own; one the device bounds does not."""
    torch._dynamo.reset()
    made = []
    compiled = torch.compile(small, backend=recording_backend(made))
    with torch.no_grad():
        outs = [compiled(x) for x in xs]
        wants = [small(x) for x in xs]
    auto = made[0].graphed if len(made) == 1 else None
    check("by default a graph the host bounds (a GELU between two small products) replays a CUDA graph from "
          "its second call: eager's results, each call's its own memory",
          auto is not None and auto.chosen == "graphs" and all(close(o, w) for o, w in zip(outs, wants))
          and len({o.data_ptr() for o in outs}) == len(outs), (auto and auto.chosen, auto and auto.measured))
    torch._dynamo.reset()
    made.clear()
    big = dev(torch.nn.Linear(4096, 4096))
    x = dev(torch.randn(8192, 4096))
    compiled = torch.compile(big, backend=recording_backend(made))
    with torch.no_grad():
        got = [compiled(x) for _ in range(3)]
        want = big(x)
    auto = made[0].graphed if len(made) == 1 else None
    check("by default a graph the device bounds (a float32 product of 8192 x 4096 x 4096) runs as compiled, "
          "never captured", auto is not None and auto.chosen == "compiled" and auto.graphed is None
          and all(close(g, want, 1e-3) for g in got), (auto and auto.chosen, auto and auto.measured))


class _Answering:
    """A module as seen through `names`: those attributes answered from it, the rest the module's."""

    def __init__(self, real, names):
        self._real, self._names = real, names

    def __getattr__(self, name):
        return self._names[name] if name in self._names else getattr(self._real, name)


def _gxu_device(kind, index=None):
    """torch.device, with GXU's devices CUDA's."""
    if isinstance(kind, str) and (kind == "gxu" or kind.startswith("gxu:")):
        kind = "cuda" + kind[3:]
    return torch.device(kind) if index is None else torch.device(kind, index)


def load_as_gxu(folder: Path):
    """The gxu plugin's output_code.py, its text unmodified, run with CUDA standing in for
    GXU: its `import torch` gives torch with torch.gxu torch.cuda, torch.device("gxu", 0)
    CUDA's and torch._C._gxu_getCurrentRawStream CUDA's (as bench/gpu/run.py runs gxu
    outputs). Only this module sees that torch; the process's is untouched."""
    import builtins
    import types

    torch_c = _Answering(torch._C, {"_gxu_getCurrentRawStream": torch._C._cuda_getCurrentRawStream})
    as_gxu = _Answering(torch, {"gxu": torch.cuda, "device": _gxu_device, "_C": torch_c})
    real_import = builtins.__import__

    def gxu_import(name, globals=None, locals=None, fromlist=(), level=0):
        module = real_import(name, globals, locals, fromlist, level)
        if level != 0 or not (name == "torch" or name.startswith("torch.")):
            return module
        if not fromlist:
            return as_gxu  # `import torch` and `import torch.x` bind the name `torch`
        return torch_c if name == "torch._C" else module

    path = folder / "output_code.py"
    module = types.ModuleType(f"kiln_output_code_{folder.name}")
    module.__file__ = str(path)
    module.__dict__["__builtins__"] = dict(vars(builtins), __import__=gxu_import)
    sys.modules[module.__name__] = module
    exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
    return module


def gxu_standing_in(repo: Path):
    """options={"device": "gxu"}: each graph compiled by the gxu plugin, its code run with
    CUDA standing in for GXU (`load_as_gxu`)."""
    import kiln
    import kiln._compile

    load = kiln._compile.load_output_code

    def standing_in(folder):
        first = (folder / "output_code.py").read_text().split("\n", 1)[0]
        return load_as_gxu(folder) if "for device `gxu`" in first else load(folder)

    kiln._compile.load_output_code = standing_in
    try:
        torch._dynamo.reset()
        b = dev(Branchy().eval())
        x = dev(torch.randn(8, 16))
        made = []
        backend = recording_backend(made)
        with torch.no_grad():
            want = b(x)
            got = torch.compile(b, backend=backend, options={"device": "gxu"})(x)
        headers = [(f.kiln.folder / "output_code.py").read_text().splitlines()[0] for f in made
                   if hasattr(f, "kiln")]
        check("options={\"device\": \"gxu\"}: each graph is compiled by the gxu plugin and runs with CUDA "
              "standing in, eager's result", len(headers) == len(made) >= 2 and close(got, want)
              and all("for device `gxu`" in h for h in headers), headers)
        zoo(repo, {"device": "gxu"})
    finally:
        kiln._compile.load_output_code = load


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=Path)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args()
    DEVICE = args.device
    if DEVICE == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    main(args.repo)
