"""`kiln.compile`: an exported program compiled by Kiln, called with the module's signature."""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path

from . import _host, _workers
from ._errors import KilnError
from ._graphs import Graphed, graphs_module, kept_inputs

_LOCK = threading.Lock()
# Loaded code by cache folder: a process loads each compiled graph once.
_LOADED: dict = {}


def cache_root() -> Path:
    """Where compiled graphs are kept: $KILN_CACHE_DIR/torch, else ~/.cache/kiln/torch."""
    base = os.environ.get("KILN_CACHE_DIR")
    return (Path(base) if base else Path.home() / ".cache" / "kiln") / "torch"


def export(model, args=(), kwargs=None):
    """`model` as an ExportedProgram: as it is, or `torch.export.export` of the module
    in inference (no_grad) on the example inputs."""
    import torch

    if isinstance(model, torch.export.ExportedProgram):
        return model
    with torch.no_grad():
        return without_transforms(torch.export.export(model, tuple(args), kwargs=dict(kwargs or {})))


def without_transforms(program):
    """`program` with the functorch transforms dynamo spells out (vmap's nesting levels and
    batch dims, `torch._functorch.predispatch`; transformers' Mamba scans with vmap) traced
    through to the ops they batch (`run_decompositions` with no decompositions). A graph
    from a model exported directly has none, and is returned as it is."""
    import torch

    def transforms(graph) -> bool:
        return any(getattr(n.target, "__module__", None) == "torch._functorch.predispatch" for n in graph.nodes)

    if not any(transforms(m.graph) for m in program.graph_module.modules() if hasattr(m, "graph")):
        return program
    with torch.no_grad():
        return program.run_decompositions({})


def default_device(values) -> str:
    """The device of the first tensor among `values` ("cuda:1" as it is), else "cpu"."""
    import torch

    for v in values:
        if isinstance(v, torch.Tensor):
            d = v.device
            return d.type if d.index is None else f"{d.type}:{d.index}"
    return "cpu"


def check_device(device: str, values, skip=frozenset()) -> None:
    """Kiln's compiled code reads its inputs where they are: compiled for the cpu, every
    tensor among `values` must be in host memory; compiled for another device, none may be.
    The positions in `skip` are not checked (the floats dynamo passes as 0-d host tensors,
    which the compile takes in as values)."""
    import torch

    on_cpu = device.split(":")[0] == "cpu"
    for i, v in enumerate(values):
        if i not in skip and isinstance(v, torch.Tensor) and (v.device.type == "cpu") != on_cpu:
            raise KilnError(f"input {i} is on {v.device}, but the graph is compiled for `{device}`, whose code "
                            f"reads its inputs where they are: move the model and its inputs to {device}, or "
                            f"compile for {v.device.type}")


class Compiled:
    """A program Kiln compiled, called like the module it was exported from: the same
    positional and keyword inputs (tensors of the example's sizes and dtypes, other
    values as the example's), the outputs in the module's own structure."""

    def __init__(self, program, device: str, plugins=(), mode=None, sizes=None, dynamic=False):
        import torch.utils._pytree as pytree

        if mode not in (None, "default", "reduce-overhead"):
            raise KilnError(f"mode {mode!r}: kiln.compile takes None, \"default\" or \"reduce-overhead\"")

        self.device = device
        self._in_spec = program.call_spec.in_spec
        self._out_spec = program.call_spec.out_spec
        self._pytree = pytree
        # `dynamic`: one compile for the export's whole range (`host compile --dynamic`);
        # a symbolic dim is then None here, and the code checks each call's sizes.
        inputs, outputs = _user_values(program, sizes, dynamic)
        self._inputs = inputs
        self.folder = build(program, device, tuple(str(p) for p in plugins), sizes, dynamic)
        graphs = graphs_module(device) if mode == "reduce-overhead" else None
        self._state = _State.of(self.folder, program, device, fixed=graphs is not None)
        extra = self._state.outputs if self._state is not None else []
        self._run = _runner(self.folder, device, outputs + extra)
        self._call = self._run if self._state is None else self._stepped
        if graphs is not None:  # each call one replay of a device graph
            snapshot = (lambda: self._state.snapshot()) if self._state is not None else None
            self._call = Graphed(self._call, graphs, kept=(), snapshot=snapshot)

    def takes_flat_tensors(self, count: int) -> bool:
        """Whether the program takes `count` tensors as positional arguments and returns a
        flat tuple, as dynamo's graphs do (so `flat_call` can serve it)."""
        if self._in_spec is None or self._out_spec is None or len(self._inputs) != count or self._state is not None:
            return False
        args_spec, kwargs_spec = _children(self._in_spec)
        flat_in = (args_spec.type is tuple and kwargs_spec.num_leaves == 0
                   and all(c.is_leaf() for c in _children(args_spec)))
        return flat_in and self._out_spec.type in (tuple, list) and all(
            c.is_leaf() for c in _children(self._out_spec))

    def flat_call(self, example_inputs):
        """The compiled graph as a function of a dynamo graph's arguments (a sequence of
        tensors in order) giving its outputs as a tuple, with no pytree work per call.
        The caller's guards hold every input to its example's device, dtype, size and
        strides (dynamo's, for a graph of static shapes), so none of these is checked
        again. The inputs whose example is not contiguous are made so; the others are
        passed as they are. Parameters and buffers found 16-byte aligned here are taken
        to stay so, as Inductor takes its static inputs: only the other inputs'
        addresses are checked per call."""
        import torch

        run, strided = self._run, [i for i, t in enumerate(example_inputs)
                                   if isinstance(t, torch.Tensor) and not t.is_contiguous()]
        if isinstance(run, _OutputCode):
            run = run.guarded(_aligned_kept(example_inputs))
        if not strided:
            return run

        def call(tensors):
            tensors = list(tensors)
            for i in strided:
                tensors[i] = tensors[i].contiguous()
            return run(tensors)

        return call

    def _check(self, tensors):
        if len(tensors) != len(self._inputs):
            raise KilnError(f"called with {len(tensors)} tensor input(s); the compiled graph takes "
                            f"{len(self._inputs)}")
        check_device(self.device, tensors)
        for i, (t, (shape, dtype)) in enumerate(zip(tensors, self._inputs)):
            fits = t.dim() == len(shape) and all(d is None or d == n for d, n in zip(shape, t.shape))
            if not fits or t.dtype != dtype:
                raise KilnError(f"input {i} is {t.dtype}{list(t.shape)}; the graph was compiled for "
                                f"{dtype}{list(shape)} (Kiln compiles static shapes: compile again for these)")

    def __call__(self, *args, **kwargs):
        import torch

        flat, spec = self._pytree.tree_flatten((args, kwargs))
        if self._in_spec is not None and spec != self._in_spec:
            raise KilnError(f"called with inputs of another structure than the example's: {spec} against "
                            f"{self._in_spec}")
        tensors = [x for x in flat if isinstance(x, torch.Tensor)]
        self._check(tensors)
        outputs = self._call([t.contiguous() for t in tensors])
        if self._out_spec is None:
            return tuple(outputs)
        return self._pytree.tree_unflatten(list(outputs), self._out_spec)


    def _stepped(self, tensors):
        return self._state.step(self._run, tensors)

    @property
    def state(self) -> dict:
        """The tensors the program keeps between calls (a KV cache its forward writes in
        place), by the module's names for them, as the last call left them; empty for a
        program without state. They are the compiled code's own: read them, or clone."""
        return {} if self._state is None else dict(zip(self._state.names, self._state.tensors))

    def reset_state(self) -> None:
        """Puts the state back to its value before the first call (the exported program's)."""
        if self._state is not None:
            self._state.reset()

    def share_state(self, other: "Compiled") -> None:
        """Makes this program read and write `other`'s state, tensor for tensor, by name: a
        decoding step that goes on from the cache a prefill (another export of the same
        model, for the prompt's length) filled, with nothing copied. Call it before either
        program's first call under device graphs."""
        mine, theirs = self._state, other._state
        if mine is None or theirs is None:
            raise KilnError("share_state: both programs must keep state (a buffer their forward writes in place)")
        if (mine.names, mine.outputs) != (theirs.names, theirs.outputs):
            raise KilnError(f"share_state: the programs keep different state: {list(zip(mine.names, mine.outputs))} "
                            f"against {list(zip(theirs.names, theirs.outputs))}")
        # Where either runs under device graphs, both keep the tensors where they are.
        theirs.fixed = theirs.fixed or mine.fixed
        self._state = theirs


class _State:
    """The state a compiled program keeps between calls (`state.json`, which `host compile`
    writes beside the code): the code takes each tensor's current value as one of its last
    inputs and gives the new value as one of its last outputs, which the next call passes.
    A KV cache comes back as the tensor passed in, written in place. Another new value is
    kept as it is, or, where the state must keep its addresses (`fixed`, under device
    graphs), copied into the old one (a position counter: a few bytes)."""

    def __init__(self, rows, initial, device: str, fixed: bool = False):
        import torch

        self.fixed = fixed
        self.names = [r["name"] for r in rows]
        self.outputs = [(tuple(r["shape"]), initial[r["name"]].dtype) for r in rows]
        self._initial = {n: initial[n] for n in self.names}
        self._device = torch.device(device)
        self.tensors: list = []
        self.reset()

    @classmethod
    def of(cls, folder: Path, program, device: str, fixed: bool = False):
        """The state of the program compiled into `folder`, None where it keeps none."""
        import json

        path = folder / "state.json"
        if not path.is_file():
            return None
        rows = json.loads(path.read_text())["state"]
        tensors = {**program.state_dict, **program.constants}
        missing = [r["name"] for r in rows if r["name"] not in tensors]
        if missing:
            raise KilnError(f"{path} names state the program does not hold: {', '.join(missing)}")
        return cls(rows, tensors, device, fixed)

    def reset(self) -> None:
        """The exported values again (under device graphs, into the tensors themselves, which
        keep their addresses)."""
        initial = [self._initial[n].detach().to(self._device, copy=True).contiguous() for n in self.names]
        if self.fixed and self.tensors:
            for t, value in zip(self.tensors, initial):
                t.copy_(value)
        else:
            self.tensors = initial

    def snapshot(self):
        """A copy of the state now, and the function that puts it back."""
        saved = [t.clone() for t in self.tensors]

        def undo():
            for t, value in zip(self.tensors, saved):
                t.copy_(value)

        return undo

    def step(self, run, args):
        """One call of `run` with the state after `args`: the new state kept, the other
        outputs returned."""
        outputs = run([*args, *self.tensors])
        kept = len(outputs) - len(self.tensors)
        if self.fixed:
            for t, new in zip(self.tensors, outputs[kept:]):
                if new is not t:
                    t.copy_(new)
            return outputs[:kept]
        new, seen = list(outputs[kept:]), set()
        for k, t in enumerate(new):
            # Two states the code computes alike (two counters) may come back as one
            # tensor: each keeps its own, as the code may update one in place.
            if id(t) in seen:
                new[k] = t.clone()
            seen.add(id(t))
        self.tensors = new
        return outputs[:kept]


def _children(spec):
    """A pytree spec's children (`children()` in newer torch, `children_specs` before)."""
    children = getattr(spec, "children", None)
    return list(children()) if callable(children) else list(spec.children_specs)


def compile(model, example_inputs=(), *, example_kwargs=None, device=None, plugins=(), mode=None):
    """Kiln's compile of `model` (a torch.nn.Module, exported here on `example_inputs`
    and `example_kwargs`, or a torch.export.ExportedProgram) for `device` (default:
    the example inputs' device), with `plugins` folders searched first. Returns a
    `Compiled`, called as the module is. `mode="reduce-overhead"` replays each call as one
    device graph where the device has them (CUDA graphs: the outputs are the graph's own
    buffers, overwritten by the next call, as torch.compile's mode gives them)."""
    given = [*example_inputs, *(example_kwargs or {}).values()]
    _workers.warm(str(device or default_device(given)))  # ready while the model is exported
    program = export(model, example_inputs, example_kwargs)
    if device is None:
        example = getattr(program, "example_inputs", None) or ((), {})
        device = default_device([*given, *example[0]])
    check_device(str(device), given)
    dims = _dynamic_dims(program)
    if dims:
        return Dynamic(program, str(device), plugins, mode, dims)
    return Compiled(program, str(device), plugins, mode)


def _bound(value, unbounded: int) -> int:
    """A range's end as an integer, `unbounded` where it has none (sympy's infinity, or
    torch's `int_oo`, which export gives a symbol with no upper bound)."""
    try:
        return int(value)
    except (TypeError, ValueError, AttributeError, OverflowError):
        return unbounded


def _dynamic_dims(program) -> list:
    """For an export with dynamic shapes: each tensor user input's dim that is a symbol,
    as (input position, input name, dim, symbol name, least, greatest); empty for a static
    export."""
    import torch
    from torch.export.graph_signature import InputKind

    ranges = {str(s): (_bound(r.lower, 0), _bound(r.upper, sys.maxsize))
              for s, r in program.range_constraints.items()}
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    dims, position = [], 0
    for spec in program.graph_signature.input_specs:
        if spec.kind != InputKind.USER_INPUT:
            continue
        val = placeholders[spec.arg.name].meta.get("val")
        if not hasattr(val, "shape"):
            continue
        for d, size in enumerate(val.shape):
            if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                name = str(size.node.expr)
                lo, hi = ranges.get(name, (0, sys.maxsize))
                dims.append((position, spec.arg.name, d, name, lo, hi))
        position += 1
    return dims


class Dynamic:
    """An export with dynamic shapes, called like the module at any sizes within the
    ranges the export gives its symbols: each call's sizes are read from its inputs and
    checked (a size outside its range, or two dims the export makes one size that differ,
    is an error naming them). The first call compiles the program once for the whole
    range (`host compile --dynamic`), whose code reads the sizes at every call. Where the
    target takes one size only (a mode of device graphs, a convolution; the compile says
    what), each size is compiled at its first call instead (`--specialize`) and kept.
    `compiles` counts the compiles (docs/dynamic-shapes.md)."""

    def __init__(self, program, device: str, plugins, mode, dims):
        import torch.utils._pytree as pytree

        self.device, self._program, self._plugins, self._mode = device, program, plugins, mode
        self._dims = dims
        self._pytree = pytree
        self.compiled: dict = {}
        # The one compile for every size; None until the first call, or where the
        # target took one size only (`per_size` then says why).
        self.whole: Compiled | None = None
        self.per_size: str | None = "device graphs replay one size" if mode == "reduce-overhead" else None

    @property
    def compiles(self) -> int:
        """The compiles so far: 1 for the one compile of the whole range, else the sizes."""
        return len(self.compiled) + (self.whole is not None)

    def _compile_whole(self) -> None:
        """Compiles the program once for its whole range, unless the target takes one
        size only (its refusal names `--specialize`): then each size compiles apart."""
        try:
            self.whole = Compiled(self._program, self.device, self._plugins, self._mode, dynamic=True)
        except KilnError as error:
            if "--specialize" not in str(error):
                raise
            self.per_size = str(error)

    def sizes_of(self, tensors) -> dict:
        """Each symbol's value in a call of these tensor inputs, checked."""
        sizes: dict = {}
        for position, input_name, d, name, lo, hi in self._dims:
            if position >= len(tensors) or d >= tensors[position].dim():
                raise KilnError(f"input `{input_name}` has no dim {d}, which the export makes the size `{name}`")
            value = int(tensors[position].shape[d])
            if not lo <= value <= hi:
                raise KilnError(f"input `{input_name}` dim {d} is {value}: outside the range {lo}..={hi} the "
                                f"export gives it (`{name}`)")
            seen = sizes.setdefault(name, (value, f"`{input_name}` dim {d}"))
            if seen[0] != value:
                raise KilnError(f"input `{input_name}` dim {d} is {value}, but input {seen[1]} is {seen[0]}: the "
                                f"export makes both the size `{name}`")
        return {name: v for name, (v, _) in sizes.items()}

    def __call__(self, *args, **kwargs):
        import torch

        flat, _ = self._pytree.tree_flatten((args, kwargs))
        sizes = self.sizes_of([x for x in flat if isinstance(x, torch.Tensor)])
        if self.whole is None and self.per_size is None:
            self._compile_whole()
        if self.whole is not None:
            return self.whole(*args, **kwargs)
        key = tuple(sorted(sizes.items()))
        compiled = self.compiled.get(key)
        if compiled is None:
            compiled = Compiled(self._program, self.device, self._plugins, self._mode, sizes)
            self.compiled[key] = compiled
        return compiled(*args, **kwargs)


def _size(d, sizes, dynamic=False) -> int | None:
    """A dim as an integer: a symbolic one (an export with dynamic shapes) at `sizes`, its
    symbols' values by name, without the guard `int()` would add to the program; None for
    a symbolic one of a compile for the whole range (`dynamic`)."""
    import torch

    if not isinstance(d, torch.SymInt):
        return int(d)
    if dynamic:
        return None
    expr = d.node.expr
    missing = [str(s) for s in expr.free_symbols if str(s) not in (sizes or {})]
    if missing:
        raise KilnError(f"a size of the program depends on {', '.join(missing)}, which no input's size gives")
    return int(expr.xreplace({s: sizes[str(s)] for s in expr.free_symbols}))


def _user_values(program, sizes=None, dynamic=False):
    """The (shape, dtype) of each tensor user input, and of each user output, in order
    (for an export with dynamic shapes, at `sizes`; or, compiled for its whole range, with
    None for each symbolic dim)."""
    from torch.export.graph_signature import InputKind, OutputKind

    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    inputs = []
    for spec in program.graph_signature.input_specs:
        if spec.kind != InputKind.USER_INPUT:
            continue
        val = placeholders[spec.arg.name].meta.get("val")
        if hasattr(val, "shape"):
            inputs.append((tuple(_size(d, sizes, dynamic) for d in val.shape), val.dtype))
    output_node = next(n for n in program.graph.nodes if n.op == "output")
    values = list(output_node.args[0])
    outputs = []
    for spec, node in zip(program.graph_signature.output_specs, values):
        if spec.kind == OutputKind.USER_OUTPUT:
            val = node.meta.get("val") if hasattr(node, "meta") else None
            if not hasattr(val, "shape"):
                raise KilnError(f"output `{spec.arg.name}` is not a tensor; Kiln's graphs return tensors")
            outputs.append((tuple(_size(d, sizes, dynamic) for d in val.shape), val.dtype))
    return inputs, outputs


def _digest(program, device: str, plugins: tuple, host_version: str, plugin: dict, sizes=None,
            dynamic=False) -> str:
    """The cache key: the compiler's version, the device, its plugin (name, versions,
    library path, size and modification time) and the plugin folders, the graph's code
    and signature, every input's metadata, and every constant's bytes."""
    import json

    import torch

    h = hashlib.sha256()
    for part in (host_version, device, json.dumps(plugin, sort_keys=True), *plugins, program.graph_module.code,
                 str(program.graph_signature), str(program.call_spec), json.dumps(sorted((sizes or {}).items())),
                 "dynamic" if dynamic else "static"):
        h.update(part.encode())
        h.update(b"\0")
    for node in program.graph.nodes:
        if node.op == "placeholder":
            val = node.meta.get("val")
            h.update(f"{node.name}:{getattr(val, 'dtype', val)}:{list(getattr(val, 'shape', []))}".encode())
    tensors = {**program.state_dict, **program.constants}
    for name in sorted(tensors):
        t = tensors[name]
        if not isinstance(t, torch.Tensor):
            h.update(f"{name}={t!r}".encode())
            continue
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}:{t.dtype}:{list(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:32]


def build(program, device: str, plugins: tuple = (), sizes: dict | None = None, dynamic: bool = False) -> Path:
    """The folder of Kiln's compile of `program` for `device` (an export with dynamic
    shapes specialised at `sizes`, or compiled for its whole range with `dynamic`): from
    the cache, or compiled now (the archive saved with torch.export.save, `host compile`
    into a fresh folder, renamed into place once complete)."""
    import torch

    host = _host.find_host()
    plugin = _host.plugin_of(host, device, plugins)
    key = _digest(program, device, plugins, _host.version(host), plugin, sizes, dynamic)
    root = cache_root()
    folder = root / key
    if (folder / "kiln-complete").is_file():
        return folder
    root.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root))
    try:
        archive = stage / "graph.pt2"
        save_without_examples(program, archive)
        out = stage / "out"
        _host.compile_archive(host, archive, device, out, plugins, sizes, dynamic)
        archive.unlink()
        (out / "kiln-complete").write_text(f"{device}\n")
        try:
            os.replace(out, folder)
        except OSError:  # another process finished first: its folder is as good
            if not (folder / "kiln-complete").is_file():
                raise
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return folder


def save_without_examples(program, archive: Path) -> None:
    """`torch.export.save` of `program` without its example inputs, which Kiln does not read:
    dynamo's graphs take the parameters as inputs, and pickling them would copy every weight
    (seconds for a real model). Nor its canonical-form self-test (`_no_canonical_check`)."""
    import torch

    examples = program.example_inputs
    program.example_inputs = None
    try:
        with _no_canonical_check():
            torch.export.save(program, str(archive))
    finally:
        program.example_inputs = examples


_SAVE_LOCK = threading.Lock()


class _no_canonical_check:
    """Within it, torch's serializer skips the canonical form it computes of each program
    only to test that one is defined, and then discards ("Test canonical form is well defined"
    in torch/_export/serde/serialize.py): a deep copy and a sort that took two thirds of the
    save of a transformer's dynamo graph (0.45 of 0.7 s for BERT-base), which counts in a
    first result's time. The archive written is the same. Where torch has no such function,
    nothing changes."""

    def __enter__(self):
        _SAVE_LOCK.acquire()
        try:
            from torch._export.serde import serialize
        except ImportError:
            serialize = None
        self._serde = serialize
        self._original = getattr(serialize, "canonicalize", None)
        if self._original is not None:
            serialize.canonicalize = _not_canonicalized
        return self

    def __exit__(self, *exc):
        try:
            if self._original is not None:
                self._serde.canonicalize = self._original
        finally:
            _SAVE_LOCK.release()
        return False


def _not_canonicalized(program, *args, **kwargs):
    """The serialized program as it is."""
    return program


def _runner(folder: Path, device: str, outputs):
    """A function of the flat input tensors that runs the compiled code, returning
    the output tensors in order."""
    with _LOCK:
        run = _LOADED.get(folder)
        if run is None:
            if device.split(":")[0] == "cpu":
                run = _CpuLibrary(folder, outputs)
            else:
                run = _python_wrapper(folder)
            _LOADED[folder] = run
    return run


def _python_wrapper(folder: Path):
    return _OutputCode(load_output_code(folder))


class _OutputCode:
    """output_code.py's `call`, on a list of its own (`call` empties the list it is given)."""

    def __init__(self, module):
        self.module = module
        self._call = module.call

    def __call__(self, tensors):
        return self._call(list(tensors))

    def guarded(self, kept):
        """`call` for the inputs of a dynamo graph of static shapes, whose guards hold every
        input to the size and strides of the example the code was compiled for (so `call`
        need not check them), and of which those at the positions `kept` are known to be
        16-byte aligned on every call: it checks only the others' addresses."""
        call = self._call
        aligned = tuple(i for i in self.module.ALIGNED_INPUTS if i not in kept)
        code = call.__code__
        if "check" not in code.co_varnames[:code.co_argcount]:  # code from before `check`
            return lambda tensors: call(list(tensors), aligned)
        return lambda tensors: call(list(tensors), aligned, None)


def _aligned_kept(example_inputs) -> frozenset:
    """The positions of the inputs dynamo marks as parameters and buffers whose example
    is 16-byte aligned."""
    return frozenset(i for i in kept_inputs(example_inputs) if example_inputs[i].data_ptr() % 16 == 0)


def load_output_code(folder: Path):
    """The folder's output_code.py, loaded as a module under a name of its own."""
    path = folder / "output_code.py"
    name = f"kiln_output_code_{folder.name}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class _CpuLibrary:
    """The cpu device's kiln.so through its C interface (docs/cpp-wrapper.md): the
    weights loaded once, each call writing into output tensors allocated here."""

    def __init__(self, folder: Path, outputs):
        lib = ctypes.CDLL(str(folder / "kiln.so"))
        lib.kiln_call.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]
        lib.kiln_call.restype = ctypes.c_int
        # A library compiled for a range of sizes takes each call's (kiln_call_shaped).
        self._shaped = hasattr(lib, "kiln_call_shaped")
        if self._shaped:
            sizes = ctypes.POINTER(ctypes.POINTER(ctypes.c_int64))
            lib.kiln_output_shapes.argtypes = [sizes, sizes]
            lib.kiln_call_shaped.argtypes = [sizes, ctypes.POINTER(ctypes.c_void_p),
                                             ctypes.POINTER(ctypes.c_void_p)]
        lib.kiln_last_error.restype = ctypes.c_char_p
        lib.kiln_load_weights.argtypes = [ctypes.c_char_p]
        if lib.kiln_num_weights() > 0:
            if lib.kiln_load_weights(str(folder / "weights.safetensors").encode()) != 0:
                raise KilnError(f"{folder}: {lib.kiln_last_error().decode()}")
        if lib.kiln_num_outputs() != len(outputs):
            raise KilnError(f"{folder}/kiln.so has {lib.kiln_num_outputs()} output(s); the program has "
                            f"{len(outputs)}: delete the folder to compile again")
        self._lib, self._outputs = lib, outputs

    def __call__(self, tensors):
        import torch

        if self._shaped:
            return self._shaped_call(tensors)
        outs = [torch.empty(shape, dtype=dtype) for shape, dtype in self._outputs]
        ins = (ctypes.c_void_p * max(len(tensors), 1))(*[t.data_ptr() for t in tensors])
        ptrs = (ctypes.c_void_p * max(len(outs), 1))(*[t.data_ptr() for t in outs])
        self._status("kiln_call", self._lib.kiln_call(ins, ptrs))
        return tuple(outs)

    def _status(self, entry: str, rc: int) -> None:
        """Raises KilnError for a failed call's status, saying why (docs/cpp-wrapper.md)."""
        if rc == 0:
            return
        why = {1: "out of memory",
               2: "an index tensor held a value outside the dim it indexes (an embedding's token id past the "
                  "vocabulary, say)",
               3: "the weights are not loaded"}.get(rc) or self._lib.kiln_last_error().decode()
        raise KilnError(f"{entry} failed ({rc}): {why}")

    def _shaped_call(self, tensors):
        """A call of a library of a range of sizes: the outputs sized by
        kiln_output_shapes at the inputs' sizes, then kiln_call_shaped."""
        import torch

        row = ctypes.POINTER(ctypes.c_int64)
        table = lambda rows: (row * max(len(rows), 1))(*[ctypes.cast(r, row) for r in rows])  # noqa: E731
        in_sizes = [(ctypes.c_int64 * max(t.dim(), 1))(*t.shape) for t in tensors]
        out_sizes = [(ctypes.c_int64 * max(len(shape), 1))() for shape, _ in self._outputs]
        in_table = table(in_sizes)
        if self._lib.kiln_output_shapes(in_table, table(out_sizes)) != 0:
            raise KilnError(self._lib.kiln_last_error().decode())
        outs = [torch.empty(tuple(sizes[:len(shape)]), dtype=dtype)
                for sizes, (shape, dtype) in zip(out_sizes, self._outputs)]
        ins = (ctypes.c_void_p * max(len(tensors), 1))(*[t.data_ptr() for t in tensors])
        ptrs = (ctypes.c_void_p * max(len(outs), 1))(*[t.data_ptr() for t in outs])
        self._status("kiln_call_shaped", self._lib.kiln_call_shaped(in_table, ins, ptrs))
        return tuple(outs)
