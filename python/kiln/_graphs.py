"""`mode="reduce-overhead"`: a compiled graph's call captured into a CUDA graph (or the device
module's equivalent) on its first call and replayed after, one launch per call instead of one per
kernel, as Inductor's cudagraphs do.

The graph reads its inputs at the addresses it was captured with. Inputs that keep their address
from call to call (parameters and buffers, which dynamo hands over as graph inputs) are captured as
they are; the others are copied into static copies before each replay. A kept input found at another
address (a module moved, or its weights replaced) makes the next call capture again. The outputs are
the graph's own buffers: the next call overwrites them (clone one to keep it), as with
`torch.cuda.graphs`.
"""

from __future__ import annotations


class Graphed:
    """`call` (a function of the flat input tensors giving a tuple of outputs) under device graphs.
    `device` is torch's module of the device type (torch.cuda): its Stream, stream, current_stream,
    CUDAGraph, graph and is_current_stream_capturing. `kept` are the positions of the inputs
    captured in place (parameters and buffers)."""

    def __init__(self, call, device, kept, snapshot=None):
        self._call, self._device, self._kept = call, device, frozenset(kept)
        # State the call updates (a KV cache): saved before the warm-up call and put
        # back after it, so that the warm-up does not count as a call.
        self._snapshot = snapshot
        self._graph = None
        self._inputs = self._outputs = None
        self._addresses = {}
        self.captures = 0

    def __call__(self, tensors):
        if self._device.is_current_stream_capturing():  # inside the caller's own capture
            return self._call(tensors)
        if self._graph is None or any(tensors[i].data_ptr() != a for i, a in self._addresses.items()):
            self._capture(tensors)
        else:
            for i, t in enumerate(tensors):
                if i not in self._kept:
                    self._inputs[i].copy_(t)
        self._graph.replay()
        return self._outputs

    def _capture(self, tensors):
        """Warms the call up on a side stream (kernel compiles, the runtime's first-call choices,
        library handles: nothing of that may happen during a capture), then captures it."""
        device = self._device
        self._graph = None
        inputs = [t if i in self._kept else t.clone() for i, t in enumerate(tensors)]
        side = device.Stream()
        side.wait_stream(device.current_stream())
        undo = self._snapshot() if self._snapshot is not None else None
        with device.stream(side):
            self._call(inputs)
        device.current_stream().wait_stream(side)
        if undo is not None:
            undo()
        graph = device.CUDAGraph()
        with device.graph(graph):
            outputs = self._call(inputs)
        self._graph, self._inputs, self._outputs = graph, inputs, outputs
        self._addresses = {i: tensors[i].data_ptr() for i in self._kept}
        self.captures += 1


def graphs_module(device: str):
    """torch's module of `device`'s type where it has device graphs (torch.cuda), else None."""
    import torch

    module = getattr(torch, device.split(":")[0], None)
    if module is None or not all(hasattr(module, a) for a in ("CUDAGraph", "graph", "Stream", "stream")):
        return None
    return module


def kept_inputs(example_inputs) -> list[int]:
    """The positions of the inputs dynamo marks as keeping their address (parameters and buffers)."""
    import torch

    return [i for i, t in enumerate(example_inputs)
            if isinstance(t, torch.nn.Parameter) or getattr(t, "_dynamo_static_input_type", None) is not None]
