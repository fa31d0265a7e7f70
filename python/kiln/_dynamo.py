"""The `torch.compile` backend: `torch.compile(model, backend="kiln", options={...})`.

Dynamo hands over each graph it captures (an FX GraphModule and its example inputs;
a graph break gives several). Each is exported with `torch.export` on those inputs
(so it reaches Kiln through the same `.pt2` front end and op table as an exported
model) and compiled; one Kiln cannot compile runs in eager, with a warning giving
Kiln's reason, which names the op.
"""

from __future__ import annotations

import warnings

from . import _host
from ._compile import Compiled, check_device, default_device, export
from ._errors import DeviceNotFound, KilnError
from ._graphs import Graphed, kept_inputs

OPTIONS = ("device", "plugins")


def backend(gm, example_inputs, mode=None, options=None):
    """A dynamo backend. `options`: `device` (default: the example inputs' device; a
    name a plugin provides, "cuda:1" with an index) and `plugins` (folders searched
    for plugins before the default places). `mode="reduce-overhead"` captures each
    graph's call into a device graph where the device's torch module has them
    (torch.cuda's CUDA graphs; `_graphs.Graphed`); other modes run the graph as
    Kiln compiled it."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise KilnError(f"unknown option(s) {', '.join(unknown)}: the kiln backend takes {', '.join(OPTIONS)}")
    device = str(options.get("device") or default_device(example_inputs))
    plugins = options.get("plugins") or ()
    if isinstance(plugins, str):
        plugins = (plugins,)
    _host.plugin_of(_host.find_host(), device, tuple(str(p) for p in plugins))  # DeviceNotFound first
    check_device(device, example_inputs)
    _warn_if_training(gm, example_inputs)
    if _symbolic(example_inputs):
        return _PerShape(gm, device, plugins, mode)
    return _compile_static(gm, example_inputs, device, plugins, mode)


def _compile_static(gm, example_inputs, device: str, plugins, mode):
    """The function dynamo calls for a graph of static shapes: Kiln's compile of it, or
    the graph itself (eager) with a warning where Kiln cannot compile it."""
    try:
        compiled = Compiled(export(gm, example_inputs), device, plugins)
    except DeviceNotFound:  # a setup error: no graph would compile
        raise
    except KilnError as error:
        _warn_eager(gm, str(error))
        return gm.forward
    except Exception as error:  # torch.export could not take the graph
        _warn_eager(gm, f"torch.export: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
        return gm.forward

    if not compiled.takes_flat_tensors(len(example_inputs)):
        def run(*args):
            return compiled(*args)
    else:  # every argument a tensor, a tuple out: straight to the compiled code
        call_flat = compiled.flat_call(example_inputs)
        if mode == "reduce-overhead":
            call_flat = graphed(call_flat, device, example_inputs)

        def run(*args):
            return call_flat(args)

        run.graphed = call_flat if isinstance(call_flat, Graphed) else None
    run.kiln = compiled
    return run


def _symbolic(example_inputs) -> bool:
    """Whether dynamo traced the graph with symbolic sizes (dynamic=True, or automatic
    dynamic shapes after a size changed): a SymInt among the inputs, or in a shape."""
    import torch

    sym = (torch.SymInt, torch.SymFloat, torch.SymBool)
    return any(isinstance(v, sym) or (isinstance(v, torch.Tensor) and any(isinstance(d, sym) for d in v.shape))
               for v in example_inputs)


class _PerShape:
    """A graph dynamo traced with symbolic sizes, compiled by Kiln once per distinct set of
    input sizes and values as calls bring them (Kiln's graphs have static shapes until
    symbolic dims exist): each set is exported and compiled at its first call, and kept."""

    def __init__(self, gm, device: str, plugins, mode):
        self._gm, self._device, self._plugins, self._mode = gm, device, plugins, mode
        self.compiled: dict = {}

    def __call__(self, *args):
        import torch

        key = tuple((tuple(a.shape), a.dtype, str(a.device)) if isinstance(a, torch.Tensor) else a for a in args)
        run = self.compiled.get(key)
        if run is None:
            run = _compile_static(self._gm, list(args), self._device, self._plugins, self._mode)
            self.compiled[key] = run
        return run(*args)


def graphed(call_flat, device: str, example_inputs):
    """`call_flat` under the device's graphs (mode="reduce-overhead"), where its torch
    module has them; else as it is (the cpu)."""
    import torch

    module = getattr(torch, device.split(":")[0], None)
    if module is None or not all(hasattr(module, a) for a in ("CUDAGraph", "graph", "Stream", "stream")):
        return call_flat
    return Graphed(call_flat, module, kept_inputs(example_inputs))


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
