"""The `torch.compile` backend: `torch.compile(model, backend="kiln", options={...})`.

Dynamo hands over each graph it captures (an FX GraphModule and its example inputs;
a graph break gives several). Each is exported with `torch.export` on those inputs
(so it reaches Kiln through the same `.pt2` front end and op table as an exported
model) and compiled; one Kiln cannot compile runs in eager, with a warning giving
Kiln's reason, which names the op.
"""

from __future__ import annotations

import functools
import operator
import warnings

from . import _host, _workers
from ._compile import Compiled, check_device, default_device, export, without_transforms
from ._errors import DeviceNotFound, KilnError
from ._graphs import AutoGraphed, Graphed, graphs_module, kept_inputs

OPTIONS = ("device", "plugins", "freeze", "cudagraphs")


def backend(gm, example_inputs, mode=None, options=None):
    """A dynamo backend. `options`: `device` (default: the example inputs' device; a
    name a plugin provides, "cuda:1" with an index), `plugins` (folders searched
    for plugins before the default places) and `freeze` (compile the parameters and
    buffers dynamo hands over as constants, as Inductor's freezing does:
    `_Frozen`). Device graphs, where the device's torch module has them (torch.cuda's
    CUDA graphs): `mode="reduce-overhead"`, or `cudagraphs` true among the options
    (torch.compile takes a mode or options, not both), captures each graph's call and
    replays it (`_graphs.Graphed`); `cudagraphs` false, or
    mode="max-autotune-no-cudagraphs", runs each call as Kiln compiled it; otherwise a
    graph replays a capture where that measures faster, its outputs copied out
    (`_graphs.AutoGraphed`)."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise KilnError(f"unknown option(s) {', '.join(unknown)}: the kiln backend takes {', '.join(OPTIONS)}")
    device = str(options.get("device") or default_device(example_inputs))
    plugins = options.get("plugins") or ()
    if isinstance(plugins, str):
        plugins = (plugins,)
    _host.plugin_of(_host.find_host(), device, tuple(str(p) for p in plugins))  # DeviceNotFound first
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    scalars = {i for i, n in enumerate(placeholders) if _float_scalar(n.meta.get("grapharg"))}
    check_device(device, example_inputs, scalars)
    _warn_if_training(gm, example_inputs)
    freeze = bool(options.get("freeze", False))
    graphs = _graphs_policy(mode, options.get("cudagraphs"))
    _workers.warm(device)  # the kernels' compile workers get ready while the graph is exported
    if _symbolic(example_inputs):
        sources = None if freeze or graphs == "replay" else _size_sources(gm)
        if sources is None:
            return _PerShape(gm, device, plugins, graphs, freeze)
        return _OneCompile(gm, sources, device, plugins, graphs)
    return _compile_static(gm, example_inputs, device, plugins, graphs, freeze)


def _graphs_policy(mode, cudagraphs) -> str:
    """How a graph's calls use device graphs: "replay" (mode="reduce-overhead", or the
    cudagraphs option true: outputs are the graph's own buffers), "off" (the cudagraphs
    option false, or mode="max-autotune-no-cudagraphs") or "auto" (otherwise: `AutoGraphed`
    measures whether replaying beats launching, and copies the outputs out)."""
    if cudagraphs is not None:
        return "replay" if cudagraphs else "off"
    if mode == "reduce-overhead":
        return "replay"
    return "off" if mode == "max-autotune-no-cudagraphs" else "auto"


def _compile_static(gm, example_inputs, device: str, plugins, graphs, freeze=False):
    """The function dynamo calls for a graph of static shapes: Kiln's compile of it, or
    the graph itself (eager) with a warning where Kiln cannot compile it."""
    try:
        if freeze and kept_inputs(example_inputs):
            return _Frozen(gm, example_inputs, device, plugins, graphs)
        compiled = Compiled(export(gm, example_inputs), device, plugins)
    except DeviceNotFound:  # a setup error: no graph would compile
        raise
    except KilnError as error:
        _warn_eager(gm, str(error))
        return gm.forward
    except Exception as error:  # torch.export could not take the graph
        _warn_eager(gm, f"torch.export: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
        return gm.forward
    return _runner(compiled, example_inputs, device, graphs)


def _runner(compiled, example_inputs, device: str, graphs):
    """The function of dynamo's arguments that calls `compiled`, under device graphs as the
    policy `graphs` says; `.kiln` is the Compiled, `.graphed` the Graphed or AutoGraphed if
    any."""
    if not compiled.takes_flat_tensors(len(example_inputs)):
        def run(*args):
            return compiled(*args)
    else:  # every argument a tensor, a tuple out: straight to the compiled code
        call_flat = graphed(compiled.flat_call(example_inputs), device, example_inputs, graphs)

        def run(*args):
            return call_flat(args)

        run.graphed = call_flat if isinstance(call_flat, (Graphed, AutoGraphed)) else None
    run.kiln = compiled
    return run


def _symbolic(example_inputs) -> bool:
    """Whether dynamo traced the graph with symbolic sizes (dynamic=True, or automatic
    dynamic shapes after a size changed): a SymInt among the inputs, or in a shape."""
    import torch

    sym = (torch.SymInt, torch.SymFloat, torch.SymBool)
    return any(isinstance(v, sym) or (isinstance(v, torch.Tensor) and any(isinstance(d, sym) for d in v.shape))
               for v in example_inputs)


class _Frozen:
    """A graph compiled with the inputs dynamo marks as parameters and buffers as its
    constants (`options={"freeze": True}`, as Inductor's freezing): Kiln folds and lays
    them out at compile time as it does a module's weights (`kiln.compile`), and a call
    passes only the other inputs. Each call checks that every frozen input is still the
    tensor it froze, unchanged (the same object, address and version counter, which any
    in-place change such as `load_state_dict` advances); where one is not, the graph is
    compiled again with the current values."""

    def __init__(self, gm, example_inputs, device: str, plugins, graphs):
        self._gm, self._device, self._plugins, self._graphs = gm, device, plugins, graphs
        self._frozen = tuple(kept_inputs(example_inputs))
        frozen = set(self._frozen)
        self._user = tuple(i for i in range(len(example_inputs)) if i not in frozen)
        self._pick_frozen, self._pick_user = _picker(self._frozen), _picker(self._user)
        self.compiles = 0
        self._freeze(list(example_inputs))

    def _freeze(self, args):
        user = list(self._pick_user(args))
        program = export(_with_constants()(self._gm, args, self._frozen), user)
        self.kiln = Compiled(program, self._device, self._plugins)
        run = _runner(self.kiln, user, self._device, self._graphs)
        self.graphed = getattr(run, "graphed", None)
        self._run = run
        self._stamp = self._stamp_of(self._pick_frozen(args))
        self.compiles += 1

    @staticmethod
    def _stamp_of(tensors) -> tuple:
        """What a frozen input's change alters: the object, its version counter (which any
        in-place write advances) and its address (which assigning `.data` moves). Read
        with C-level maps: a model hands over hundreds of parameters and buffers."""
        return tuple(tensors), list(map(_VERSION, tensors)), list(map(_ADDRESS, tensors))

    def __call__(self, *args):
        tensors, versions, addresses = self._stamp
        frozen = self._pick_frozen(args)
        if (any(map(operator.is_not, frozen, tensors)) or list(map(_VERSION, frozen)) != versions
                or list(map(_ADDRESS, frozen)) != addresses):
            self._freeze(list(args))
        return self._run(*self._pick_user(args))


_VERSION = operator.attrgetter("_version")
_ADDRESS = operator.methodcaller("data_ptr")


def _picker(indices: tuple):
    """A function of a sequence giving the tuple of its items at `indices`, at C speed."""
    if not indices:
        return lambda values: ()
    if len(indices) == 1:
        (i,) = indices
        return lambda values: (values[i],)
    return operator.itemgetter(*indices)


@functools.cache
def _with_constants():
    """The module class `_Frozen` exports: a dynamo graph with some of its inputs held as
    buffers, which the exported program has as its constants; its forward takes the others,
    in order. (Made on first use: the package imports torch only when it needs it.)"""
    import torch

    class WithConstants(torch.nn.Module):
        def __init__(self, gm, args, frozen):
            super().__init__()
            self.gm = gm
            self._n = len(args)
            self._slots = {i: f"frozen_{k}" for k, i in enumerate(frozen)}
            for i, name in self._slots.items():
                self.register_buffer(name, args[i].detach())

        def forward(self, *user):
            rest = iter(user)
            return self.gm(*[getattr(self, self._slots[i]) if i in self._slots else next(rest)
                             for i in range(self._n)])

    return WithConstants


def _size_sources(gm):
    """Where each argument of a graph dynamo traced with symbolic sizes comes from, when
    every size argument it takes is one of its tensors' dims: ("tensor", k) for its k-th
    tensor, ("size", k, d) for dim d of that tensor (dynamo passes each symbol as an int),
    ("scalar", None) for a Python float dynamo passes as a 0-d tensor (a module's `eps`,
    which dynamic=True makes an input), ("value", None) for another argument (passed as it
    is); None when some argument is neither (a size that is an expression, a symbolic
    float), and the graph is compiled per set of sizes instead."""
    import torch

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    values = [n.meta.get("example_value") for n in placeholders]
    scalars = [_float_scalar(n.meta.get("grapharg")) for n in placeholders]
    dims, k = {}, 0
    for v, scalar in zip(values, scalars):
        if isinstance(v, torch.Tensor) and not scalar:
            for d, size in enumerate(v.shape):
                if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                    dims.setdefault(str(size.node.expr), (k, d))
            k += 1
    sources, k = [], 0
    for v, scalar in zip(values, scalars):
        if scalar:
            sources.append(("scalar", None))
        elif isinstance(v, torch.Tensor):
            sources.append(("tensor", k))
            k += 1
        elif isinstance(v, torch.SymInt):
            source = dims.get(str(v.node.expr)) if v.node.expr.is_Symbol else None
            if source is None:
                return None
            sources.append(("size", *source))
        elif isinstance(v, (torch.SymFloat, torch.SymBool)) or v is None:
            return None
        else:
            sources.append(("value", None))
    return sources


def _float_scalar(grapharg) -> bool:
    """Whether dynamo passes this argument, a Python float, as a 0-d tensor."""
    example = getattr(grapharg, "example", None) if getattr(grapharg, "pass_arg_as_tensor", False) else None
    return example is not None and example.dim() == 0 and example.dtype.is_floating_point


class _Scalar(float):
    """A float that answers `.item()`, as the 0-d tensor dynamo passes for it would: the
    graph reads the value with `.item()`, which the export then holds as a constant."""

    def item(self) -> float:
        return float(self)


class _OneCompile:
    """A graph dynamo traced with symbolic sizes, compiled by Kiln once for every size
    (`host compile --dynamic`, through `kiln.Dynamic`): at its first call it is exported
    with each of its tensors' symbolic dims dynamic (from 2, as dynamo specialises sizes
    0 and 1 apart), the size arguments dynamo passes read from those dims. An input that
    is not contiguous is copied to one that is. A graph that torch.export or Kiln cannot
    take whole goes per set of sizes (`_PerShape`, which says why it falls back to eager
    where it must). A float dynamo passes as a tensor (a module's `eps`) is compiled in as
    its first call's value; a call with another value goes per set of sizes too.
    `compiles` counts Kiln's compiles."""

    def __init__(self, gm, sources, device: str, plugins, graphs):
        self._gm, self._sources, self._device, self._plugins = gm, sources, device, plugins
        self._per_shape = _PerShape(gm, device, plugins, graphs)
        self._tensors = [i for i, (kind, *_) in enumerate(sources) if kind == "tensor"]
        self._pick = _picker(tuple(self._tensors))
        self._scalars = [i for i, (kind, *_) in enumerate(sources) if kind == "scalar"]
        self._values: list = []  # the scalars' values compiled in
        self.whole = None  # the kiln.Dynamic, after the first call
        self.refused: str | None = None  # why the graph goes per set of sizes

    @property
    def compiles(self) -> int:
        whole = self.whole.compiles if self.whole is not None else 0
        return whole + len(self._per_shape.compiled)

    def __call__(self, *args):
        tensors = self._pick(args)
        if self.whole is None and self.refused is None:
            self._export(args, tensors)
        if self.whole is not None and [args[i].item() for i in self._scalars] == self._values:
            if not all(map(_CONTIGUOUS, tensors)):  # the compile reads dense inputs
                tensors = [t.contiguous() for t in tensors]
            try:
                return self.whole(*tensors)
            except DeviceNotFound:
                raise
            except KilnError as error:
                if self.whole.compiles:  # the compiled program's own error: the caller's
                    raise
                # Kiln cannot compile the graph whole: its sizes go one by one, each
                # falling back to eager, with a warning, where Kiln cannot compile it.
                self.whole, self.refused = None, str(error)
        return self._per_shape(*args)

    def _export(self, args, tensors) -> None:
        from ._compile import Dynamic, _dynamic_dims

        try:
            self._values = [args[i].item() for i in self._scalars]
            program = _export_symbolic(self._gm, self._sources, args, tensors)
            dims = _dynamic_dims(program)
            if not dims:
                raise KilnError("the export kept no size symbolic")
            self.whole = Dynamic(program, self._device, self._plugins, None, dims)
        except DeviceNotFound:
            raise
        except Exception as error:  # torch.export or Kiln: the sizes go one by one
            self.refused = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"


_CONTIGUOUS = operator.methodcaller("is_contiguous")


def _export_symbolic(gm, sources, args, tensors):
    """`gm` exported with `torch.export` as a function of its tensor arguments alone (each
    size argument read from the dim `sources` gives), every symbolic dim of those tensors
    dynamic: one `Dim` per symbol, shared by the dims dynamo gave it."""
    import torch

    values = [n.meta.get("example_value") for n in gm.graph.nodes if n.op == "placeholder"]
    fixed = {i: a for i, (a, (kind, *_)) in enumerate(zip(args, sources)) if kind == "value"}
    fixed.update({i: _Scalar(a.item()) for i, (a, (kind, *_)) in enumerate(zip(args, sources)) if kind == "scalar"})

    class BySizes(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gm = gm

        def forward(self, *ts):
            full = []
            for i, (kind, *where) in enumerate(sources):
                if kind == "tensor":
                    full.append(ts[where[0]])
                elif kind == "size":
                    full.append(ts[where[0]].shape[where[1]])
                else:
                    full.append(fixed[i])
            return self.gm(*full)

    dims: dict = {}
    shapes = []
    for v in (v for v, (kind, *_) in zip(values, sources) if kind == "tensor"):
        spec = {}
        for d, size in enumerate(v.shape):
            if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                name = str(size.node.expr)
                spec[d] = dims.setdefault(name, torch.export.Dim(f"kiln_{name}", min=2))
        shapes.append(spec or None)
    with torch.no_grad():
        # `forward(*ts)`: its one argument is the tuple of tensors.
        program = torch.export.export(BySizes(), tuple(tensors), dynamic_shapes=(tuple(shapes),), strict=False)
        return without_transforms(program)


class _PerShape:
    """A graph dynamo traced with symbolic sizes, compiled by Kiln once per distinct set of
    input sizes and values as calls bring them (Kiln's graphs have static shapes until
    symbolic dims exist): each set is exported and compiled at its first call, and kept.
    The default mode's device graphs are off here: sizes that vary from call to call would
    each keep a captured graph and its memory (mode="reduce-overhead" still captures each)."""

    def __init__(self, gm, device: str, plugins, graphs, freeze=False):
        graphs = "off" if graphs == "auto" else graphs
        self._gm, self._device, self._plugins, self._graphs, self._freeze = gm, device, plugins, graphs, freeze
        self.compiled: dict = {}

    def __call__(self, *args):
        import torch

        if self._device.split(":")[0] != "cpu":
            # The floats dynamo passes as 0-d host tensors go to the device, as every
            # input Kiln's code reads must.
            placeholders = [n for n in self._gm.graph.nodes if n.op == "placeholder"]
            args = tuple(a.to(self._device) if _float_scalar(n.meta.get("grapharg")) else a
                         for a, n in zip(args, placeholders))

        # Strides too: each compile's function trusts its inputs' layouts as dynamo's guards
        # hold a static graph's (`Compiled.flat_call`), and this graph's guards are symbolic.
        key = tuple((tuple(a.shape), a.stride(), a.dtype, str(a.device)) if isinstance(a, torch.Tensor) else a
                    for a in args)
        run = self.compiled.get(key)
        if run is None:
            run = _compile_static(self._gm, list(args), self._device, self._plugins, self._graphs, self._freeze)
            self.compiled[key] = run
        return run(*args)


def graphed(call_flat, device: str, example_inputs, policy: str):
    """`call_flat` under the device's graphs as `policy` says (`_graphs_policy`), where its
    torch module has them; else as it is (the cpu)."""
    module = graphs_module(device) if policy != "off" else None
    if module is None:
        return call_flat
    kept = kept_inputs(example_inputs)
    return Graphed(call_flat, module, kept) if policy == "replay" else AutoGraphed(call_flat, module, kept)


def _warn_if_training(gm, example_inputs) -> None:
    """Kiln compiles inference graphs: where dynamo traced with gradients on and an
    input that requires them (a parameter, outside torch.no_grad()), say that the
    outputs carry none."""
    import torch

    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs):
        warnings.warn("Kiln compiles for inference: this graph's outputs carry no gradient (call the compiled "
                      "model under torch.no_grad() or torch.inference_mode(), or use another backend to train)",
                      stacklevel=3)


def _warn_eager(gm, why: str) -> None:
    warnings.warn(f"Kiln cannot compile this graph of {len(list(gm.graph.nodes))} node(s), which runs in "
                  f"eager instead: {' '.join(why.split())}", stacklevel=3)
