"""Kiln from PyTorch.

- ``torch.compile(model, backend="kiln", options={"device": "cpu"})``: dynamo hands each
  graph it captures to Kiln (the ``torch_dynamo_backends`` entry point this package
  registers); a graph Kiln cannot compile runs in eager, with a warning that says why.
- ``kiln.compile(module_or_exported_program, example_inputs, device=...)``: the whole
  module, exported with ``torch.export``, as one callable with the module's own signature
  (positional and keyword inputs, outputs in the module's own structure). An exported
  program with dynamic shapes gives a ``Dynamic``: called at any sizes in its ranges,
  compiled once for the whole range (each size at its first call where the target takes
  one size only).

Both run ``host compile`` (the Kiln compiler this package carries, or ``$KILN_HOST``) on
the exported graph, keep the result in a cache shared by every process
(``$KILN_CACHE_DIR/torch``, else ``~/.cache/kiln/torch``), and call the generated code:
``output_code.py`` for a Triton device (cuda, gxu, xpu), the built ``wrapper.cpp`` for
the cpu. Plugins are found as ``host`` finds them (``--plugins`` folders given as
``plugins=``, ``$KILN_PLUGIN_PATH``, beside the compiler).
"""

from ._errors import DeviceNotFound, KilnError
from ._compile import Compiled, Dynamic, compile
from ._dynamo import backend

__all__ = ["Compiled", "DeviceNotFound", "Dynamic", "KilnError", "backend", "compile"]
__version__ = "0.1.0"
