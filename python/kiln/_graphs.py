"""Device graphs for compiled graphs' calls (torch.cuda's CUDA graphs, or the device module's
equivalent): one launch per call instead of one per kernel, as Inductor's cudagraphs do.

`Graphed` is `mode="reduce-overhead"`: the call captured on its first call and replayed after. The
graph reads its inputs at the addresses it was captured with. Inputs that keep their address from
call to call (parameters and buffers, which dynamo hands over as graph inputs) are captured as they
are; the others are copied into static copies before each replay. A kept input found at another
address (a module moved, or its weights replaced) makes the next call capture again. The outputs are
the graph's own buffers: the next call overwrites them (clone one to keep it), as with
`torch.cuda.graphs`.

`AutoGraphed` is the default mode's: a `Graphed` where its second call measures it at least as
fast as the call as compiled, with the outputs copied out, so each call's results are its own.
"""

from __future__ import annotations

import logging
import threading
import time


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
        self._copied = []
        self._addresses = {}
        self.captures = 0

    def __call__(self, tensors):
        if self._device.is_current_stream_capturing():  # inside the caller's own capture
            return self._call(tensors)
        if self._graph is None or any(tensors[i].data_ptr() != a for i, a in self._addresses.items()):
            self._capture(tensors)
        elif self._copied:
            # One launch for all of them (a multi-tensor kernel where they share a
            # dtype), rather than one copy each: a decoding step's token and position.
            self._copy(self._copied_into, [tensors[i] for i in self._copied])
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
        self._copied = [i for i in range(len(tensors)) if i not in self._kept]
        self._copied_into = [inputs[i] for i in self._copied]
        import torch

        self._copy = torch._foreach_copy_
        self._addresses = {i: tensors[i].data_ptr() for i in self._kept}
        self.captures += 1


class AutoGraphed:
    """The default mode's choice, made once per compiled graph on its second call (the first
    compiles the kernels and makes the runtime's first-call choices): a call whose launches take
    the host longer than the device takes to run them replays a device graph (`Graphed`) and
    copies its outputs out, so that each call's results are its own, as the compiled code's
    are; a call the device bounds runs as compiled.

    The choice is measured, as the runtime's other choices are: the compiled call's host time
    against its time to a synchronized result; where the host takes at least half of it, calls
    each way (`ROUNDS` rounds of `TRIAL_CALLS`, the least per call of each). The graph is kept
    unless it measures `SLOWER` or more slower: a replay leaves the host free for the caller's
    own work (dynamo's guards, the model's Python), which the trial, made inside the call, does
    not see, while its cost, the outputs' copies, it does see. Graphs are not tried
    where an output shares memory with an input or another output (copying it out would break
    that), and not kept where the capture fails. A replay runs only on the stream it was captured
    on and in one thread at a time; any other call runs as compiled."""

    TRIAL_CALLS = 5
    ROUNDS = 3
    SLOWER = 1.02

    def __init__(self, call, device, kept, clock=time.perf_counter):
        self._call, self._device, self._kept, self._clock = call, device, kept, clock
        self._calls = 0
        self.graphed = None  # the Graphed replayed, once chosen
        self.chosen = None  # "graphs" or "compiled", once measured
        self.measured = {}  # what the choice was made on, in seconds per call
        self._stream = None
        self._lock = threading.Lock()

    def __call__(self, tensors):
        if self.chosen == "graphs" and self._lock.acquire(blocking=False):
            try:
                if not self._device.is_current_stream_capturing() and self._device.current_stream() == self._stream:
                    return tuple(out.clone() for out in self.graphed(tensors))
            except Exception as error:  # noqa: BLE001 (a capture again, for a moved parameter, failed)
                _LOG.debug("kiln: device graphs off for this call (%s: %s)", type(error).__name__, error)
                self.chosen, self.graphed = "compiled", None
            finally:
                self._lock.release()
        if self.chosen is None and not self._device.is_current_stream_capturing():
            self._calls += 1
            if self._calls == 2:
                with self._lock:
                    return self._choose(tensors)
        return self._call(tensors)

    def _choose(self, tensors):
        outputs = self._call(tensors)
        self.chosen = "compiled"
        if _shares_memory(tensors, outputs):
            return outputs
        host, result = self._host_and_result(tensors)
        self.measured = {"host": host, "result": result}
        if host < result / 2:  # bound by the device: a graph saves nothing
            return outputs
        try:
            graphed = Graphed(self._call, self._device, self._kept)
            graphed(tensors)  # captures
        except Exception as error:  # noqa: BLE001 (a call that cannot be captured runs as compiled)
            _LOG.debug("kiln: no device graph for this call (%s: %s)", type(error).__name__, error)
            return outputs
        compiled, replayed = self._per_call(lambda: self._call(tensors),
                                            lambda: tuple(out.clone() for out in graphed(tensors)))
        self.measured.update(compiled=compiled, graphs=replayed)
        if replayed < self.SLOWER * compiled:
            self.chosen, self.graphed, self._stream = "graphs", graphed, self._device.current_stream()
            return tuple(out.clone() for out in graphed(tensors))
        return outputs

    def _host_and_result(self, tensors):
        """The least, over `TRIAL_CALLS` calls from an idle device, of the time the call takes
        to return and of the time to its synchronized result."""
        host = result = float("inf")
        for _ in range(self.TRIAL_CALLS):
            self._device.synchronize()
            start = self._clock()
            self._call(tensors)
            returned = self._clock()
            self._device.synchronize()
            host, result = min(host, returned - start), min(result, self._clock() - start)
        return host, result

    def _per_call(self, *fns):
        """The least seconds per call of each of `fns` over `ROUNDS` interleaved rounds of
        `TRIAL_CALLS` calls made back to back."""
        least = [float("inf")] * len(fns)
        for fn in fns:
            fn()
        for _ in range(self.ROUNDS):
            for i, fn in enumerate(fns):
                self._device.synchronize()
                start = self._clock()
                for _ in range(self.TRIAL_CALLS):
                    fn()
                self._device.synchronize()
                least[i] = min(least[i], (self._clock() - start) / self.TRIAL_CALLS)
        return least


_LOG = logging.getLogger("kiln")


def _shares_memory(inputs, outputs) -> bool:
    """Whether an output's storage is an input's or another output's."""
    seen = {t.untyped_storage().data_ptr() for t in inputs if t.untyped_storage().nbytes()}
    for out in outputs:
        if not out.untyped_storage().nbytes():
            continue
        address = out.untyped_storage().data_ptr()
        if address in seen:
            return True
        seen.add(address)
    return False


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
