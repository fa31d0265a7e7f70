"""The `torch.compile` backend: `torch.compile(model, backend="kiln", options={...})`.

Dynamo hands over each graph it captures (an FX GraphModule and its example inputs;
a graph break gives several). Each is exported with `torch.export` on those inputs
(so it reaches Kiln through the same `.pt2` front end and op table as an exported
model) and compiled; one Kiln cannot compile runs in eager, with a warning giving
Kiln's reason, which names the op.
"""

from __future__ import annotations

import warnings

from ._compile import Compiled, default_device, export
from ._errors import KilnError

OPTIONS = ("device", "plugins")


def backend(gm, example_inputs, mode=None, options=None):
    """A dynamo backend. `options`: `device` (default: the example inputs' device; a
    name a plugin provides, "cuda:1" with an index) and `plugins` (folders searched
    for plugins before the default places). `mode` is accepted as torch.compile
    passes it; each graph runs as Kiln compiled it."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise KilnError(f"unknown option(s) {', '.join(unknown)}: the kiln backend takes {', '.join(OPTIONS)}")
    device = str(options.get("device") or default_device(example_inputs))
    plugins = options.get("plugins") or ()
    if isinstance(plugins, str):
        plugins = (plugins,)
    try:
        compiled = Compiled(export(gm, example_inputs), device, plugins)
    except KilnError as error:
        _warn_eager(gm, str(error))
        return gm.forward
    except Exception as error:  # torch.export could not take the graph
        _warn_eager(gm, f"torch.export: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
        return gm.forward

    def run(*args):
        return compiled(*args)

    run.kiln = compiled
    return run


def _warn_eager(gm, why: str) -> None:
    warnings.warn(f"Kiln cannot compile this graph of {len(list(gm.graph.nodes))} node(s), which runs in "
                  f"eager instead: {' '.join(why.split())}", stacklevel=3)
