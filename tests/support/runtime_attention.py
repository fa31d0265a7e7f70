#!/usr/bin/env python3
"""Tests the attention choice of Kiln's kernel runtime (kiln_runtime.Attention) on
its own, without torch or a device: stand-in tensors, a stand-in library function
and Kiln kernel, and a clock that each call advances by its cost.

Usage: runtime_attention.py KILN_RUNTIME_PY

Checks: the faster side is chosen, once per signature (a step of dynamic shapes: once
per bucket of its sizes), and later calls run only it;
the library is declined where it raises, disagrees with Kiln's kernel, or gets a
causal attention with a mask; KILN_ATTENTION forces a side and refuses a value it
does not know; with the device's sleep and events, the device's time decides; a
call during a graph capture with no choice yet runs Kiln's kernel
and measures nothing; grouped key/value heads go to the library with `enable_gqa`
(each repeated where it has no such argument) and a single one is expanded; the
library's result is the step's buffer where its strides are the planned ones, else
a copy in them. Prints `ok: WHAT` per check; exits 1 on the first failure.
"""

import importlib.util
import sys


def check(what, ok, detail=""):
    """Prints `ok: what`, or fails with `detail`."""
    if not ok:
        print(f"FAILED: {what} {detail}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what}")


def contiguous(size):
    stride, step = [], 1
    for n in reversed(size):
        stride.insert(0, step)
        step *= n
    return tuple(stride)


class Tensor:
    """What the attention choice asks of a tensor: a size, strides, a dtype and
    one value standing for its elements."""

    def __init__(self, size, stride=None, dtype="torch.bfloat16", value=0.0):
        self.shape = tuple(size)
        self._stride = tuple(stride) if stride is not None else contiguous(size)
        self.dtype, self.value, self.copied_from = dtype, value, None

    def size(self):
        return self.shape

    def stride(self):
        return self._stride

    def expand(self, *size):
        assert len(size) == len(self.shape) and all(a in (1, b) for a, b in zip(self.shape, size)), size
        return Tensor(size, [0 if a == 1 and b != 1 else s for a, b, s in zip(self.shape, size, self._stride)],
                      self.dtype, self.value)

    def repeat_interleave(self, n, dim):
        size = list(self.shape)
        size[dim] *= n
        return Tensor(size, None, self.dtype, self.value)

    def new_empty_strided(self, size, stride):
        return Tensor(size, stride, self.dtype)

    def copy_(self, other):
        self.value, self.copied_from = other.value, other
        return self

    def storage_offset(self):
        return 0

    def transpose(self, d0, d1):
        size, stride = list(self.shape), list(self._stride)
        size[d0], size[d1] = size[d1], size[d0]
        stride[d0], stride[d1] = stride[d1], stride[d0]
        t = Tensor(size, stride, self.dtype, self.value)
        t.copied_from, t.transposed_from = self.copied_from, self
        return t

    def float(self):
        return self

    def allclose(self, other, rtol, atol, equal_nan):
        return abs(self.value - other.value) <= atol + rtol * abs(other.value)


class World:
    """A clock, Kiln's kernel and the library's function, with their costs, and
    what each was called with."""

    def __init__(self, kiln_s=2.0, library_s=1.0, library_value=1.0, library_stride=None,
                 raises=None, gqa=True):
        self.now, self.kiln_s, self.library_s = 0.0, kiln_s, library_s
        self.library_value, self.library_stride, self.raises, self.gqa = library_value, library_stride, raises, gqa
        self.kiln_calls, self.library_calls, self.syncs, self.capturing = 0, [], 0, False

    def timer(self):
        return self.now

    def synchronize(self):
        self.syncs += 1

    def empty(self, size, stride, dtype):
        return Tensor(size, stride, dtype)

    def kiln(self, out):
        self.kiln_calls += 1
        self.now += self.kiln_s
        out.value = 1.0

    def sdpa(self, q, k, v, attn_mask=None, is_causal=False, scale=None, **rest):
        if rest and not self.gqa:
            raise TypeError(f"scaled_dot_product_attention() got an unexpected keyword argument {rest}")
        self.library_calls.append(dict(q=q, k=k, v=v, mask=attn_mask, causal=is_causal, scale=scale, **rest))
        if self.raises:
            raise self.raises
        self.now += self.library_s
        size = q.shape[:-1] + v.shape[-1:]
        return Tensor(size, self.library_stride, q.dtype, self.library_value)

    def is_current_stream_capturing(self):
        return self.capturing

    def attention(self, signatures, environ=None):
        # The world stands for torch's device module (`torch.cuda`): it has a capture
        # test, and no sleep or events, so the choice times on the host clock.
        return runtime.Attention(self.sdpa, self.empty, self.synchronize, self, signatures,
                                 timer=self.timer, environ=environ or {})


class DeviceClock(World):
    """A world whose device has a clock of its own, a sleep and events: each call
    costs the host its dispatch and the device its kernel."""

    def __init__(self, kiln_s, kiln_host_s, library_s, library_host_s):
        super().__init__(kiln_s=kiln_host_s, library_s=library_host_s)
        self.device_now, self.kiln_device_s, self.library_device_s, self.slept = 0.0, kiln_s, library_s, 0

    def kiln(self, out):
        super().kiln(out)
        self.device_now += self.kiln_device_s

    def sdpa(self, *args, **kwargs):
        result = super().sdpa(*args, **kwargs)
        self.device_now += self.library_device_s
        return result

    def _sleep(self, cycles):
        self.slept += 1

    def Event(self, enable_timing=False):
        world = self

        class Event:
            def record(self):
                self.at = world.device_now

            def synchronize(self):
                pass

            def elapsed_time(self, end):
                return (end.at - self.at) * 1e3

        assert enable_timing
        return Event()


SIZE = (2, 4, 16, 32)
SIGNATURE = (SIZE, contiguous(SIZE), "torch.bfloat16", True, 0.125, False)
MASKED = (SIZE, contiguous(SIZE), "torch.bfloat16", False, 0.125, False)


def operands(kv_heads=4, mask=None):
    return lambda: (Tensor(SIZE), Tensor((2, kv_heads, 16, 32)), Tensor((2, kv_heads, 16, 32)), mask)


def main():
    w = World()
    a = w.attention([SIGNATURE, SIGNATURE])
    first = a.run(0, w.kiln, operands())
    check("a faster library is chosen on the first call, after timing both",
          a.chosen[0] not in (None, runtime.Attention.KILN) and a.report[0]["library"] == 1.0
          and a.report[0]["kiln"] == 2.0 and w.syncs > 0, a.report)
    check("the first call returns the chosen side's result", first.value == 1.0 and w.library_calls)
    check("the library gets the step's causal flag and scale",
          w.library_calls[-1]["causal"] is True and w.library_calls[-1]["scale"] == 0.125
          and "enable_gqa" not in w.library_calls[-1], w.library_calls[-1])
    kiln_calls, library_calls, syncs = w.kiln_calls, len(w.library_calls), w.syncs
    for _ in range(3):
        out = a.run(0, w.kiln, operands())
    check("later calls of the signature run only the library, untimed",
          w.kiln_calls == kiln_calls and len(w.library_calls) == library_calls + 3 and w.syncs == syncs)
    check("the library's result in the planned strides is the step's buffer, not a copy",
          out.copied_from is None and out.stride() == contiguous(SIZE))
    check("each signature is chosen on its own", a.chosen[1] is None)

    # A step of dynamic shapes: its signature has no size; each call gives its buffer's
    # size and strides and its bucket of sizes, and each bucket is chosen on its own.
    dynamic = (None, None) + SIGNATURE[2:]
    w = World()
    a = w.attention([dynamic])
    small = (runtime.size_bucket((2, 9)), SIZE, contiguous(SIZE))
    out = a.run(0, w.kiln, operands(), small)
    check("a dynamic step's first call at a bucket of sizes times both, into the call's buffer",
          small[0] == (2, 16) and a.by_size[(0, (2, 16))] not in (None, runtime.Attention.KILN)
          and a.by_size_report[(0, (2, 16))]["kiln"] == 2.0 and out.shape == SIZE and a.chosen[0] is None,
          a.by_size_report)
    syncs = w.syncs
    a.run(0, w.kiln, operands(), (runtime.size_bucket((2, 16)), SIZE, contiguous(SIZE)))
    check("a size of the same bucket runs the bucket's choice, untimed", w.syncs == syncs)
    w.kiln_s, w.library_s = 1.0, 3.0
    big = (4, 4, 64, 32)
    out = a.run(0, w.kiln, operands(), (runtime.size_bucket((3, 40)), big, contiguous(big)))
    check("another bucket is timed and chosen on its own: Kiln's kernel there, into a buffer of its size",
          a.by_size[(0, (4, 64))] is runtime.Attention.KILN and out.shape == big
          and a.by_size[(0, (2, 16))] is not runtime.Attention.KILN, a.by_size_report)

    # Tile variants of Kiln's kernel: each bucket takes the fastest (its index), or the library.
    w = World(library_s=2.5)

    def variant(cost, tag):
        def launch(out):
            w.now += cost
            w.kiln_calls += 1
            out.value, out.tag = 1.0, tag
        return launch

    kilns = (variant(3.0, "wide"), variant(1.5, "narrow"))
    a = w.attention([dynamic])
    out = a.run(0, kilns, operands(), small)
    check("a dynamic step's tile variants are each timed, and the fastest is kept by its index",
          a.by_size[(0, (2, 16))] == 1 and a.by_size_report[(0, (2, 16))]["variants"] == [3.0, 1.5]
          and a.by_size_report[(0, (2, 16))]["library"] == 2.5, a.by_size_report)
    syncs = w.syncs
    out = a.run(0, kilns, operands(), small)
    check("later calls of the bucket launch only the chosen variant, untimed",
          out.tag == "narrow" and w.syncs == syncs)
    w.library_s = 0.5
    a.run(0, kilns, operands(), (runtime.size_bucket((4, 40)), big, contiguous(big)))
    check("a library faster than every variant is chosen for its bucket",
          a.by_size[(0, (4, 64))] not in (None, runtime.Attention.KILN, 0, 1), a.by_size_report)

    w = World(kiln_s=1.0, library_s=3.0)
    a = w.attention([SIGNATURE])
    a.run(0, w.kiln, operands())
    library_calls = len(w.library_calls)
    a.run(0, w.kiln, operands())
    check("a faster Kiln kernel is chosen, and the library is not called again",
          a.chosen[0] is runtime.Attention.KILN and len(w.library_calls) == library_calls)

    # The library's kernel is faster on the device, its dispatch slower on the host:
    # with a device clock the choice times the device, as a busy model sees it.
    w = DeviceClock(kiln_s=2.0, kiln_host_s=0.5, library_s=1.0, library_host_s=5.0)
    a = w.attention([SIGNATURE])
    a.run(0, w.kiln, operands())
    check("with the device's sleep and events the device's time decides, not the host's",
          a.chosen[0] not in (None, runtime.Attention.KILN) and a.report[0]["library"] == 1.0
          and a.report[0]["kiln"] == 2.0 and w.slept == 2 * runtime.Attention.ROUNDS, a.report)

    w = World(raises=RuntimeError("No available kernel"))
    a = w.attention([SIGNATURE])
    out = a.run(0, w.kiln, operands())
    check("a library that raises leaves the signature to Kiln's kernel",
          a.chosen[0] is runtime.Attention.KILN and out.value == 1.0 and "No available kernel" in a.report[0]["why"],
          a.report)

    w = World(library_value=5.0)
    a = w.attention([SIGNATURE])
    a.run(0, w.kiln, operands())
    check("a library whose result differs from Kiln's kernel's is declined",
          a.chosen[0] is runtime.Attention.KILN and "differs" in a.report[0]["why"], a.report)

    w = World()
    a = w.attention([SIGNATURE])
    a.run(0, w.kiln, operands(mask=Tensor((2, 1, 16, 16), dtype="torch.bool")))
    check("a causal attention with a mask is Kiln's (the library takes one or the other)",
          a.chosen[0] is runtime.Attention.KILN and not w.library_calls, a.report)

    w = World()
    a = w.attention([MASKED])
    mask = Tensor((2, 1, 16, 16), dtype="torch.bool")
    a.run(0, w.kiln, operands(mask=mask))
    check("a mask goes to the library as it is (it broadcasts)",
          w.library_calls[-1]["mask"] is mask and w.library_calls[-1]["causal"] is False)

    w = World()
    a = w.attention([SIGNATURE], environ={"KILN_ATTENTION": "kiln"})
    a.run(0, w.kiln, operands())
    check("KILN_ATTENTION=kiln never calls the library", a.chosen[0] is runtime.Attention.KILN and not w.library_calls)

    w = World(kiln_s=1.0, library_s=3.0)
    a = w.attention([SIGNATURE], environ={"KILN_ATTENTION": "library"})
    out = a.run(0, w.kiln, operands())
    check("KILN_ATTENTION=library chooses the slower library, untimed",
          a.chosen[0] not in (None, runtime.Attention.KILN) and w.syncs == 0 and out.value == 1.0)

    w = World(raises=RuntimeError("no kernel"))
    a = w.attention([SIGNATURE], environ={"KILN_ATTENTION": "library"})
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a.run(0, w.kiln, operands())
    check("KILN_ATTENTION=library falls back to Kiln's kernel, with a warning, where the library raises",
          a.chosen[0] is runtime.Attention.KILN and any("KILN_ATTENTION=library" in str(c.message) for c in caught))

    try:
        World().attention([SIGNATURE], environ={"KILN_ATTENTION": "fastest"})
        refused = ""
    except RuntimeError as error:
        refused = str(error)
    check("an unknown KILN_ATTENTION is refused, naming the variable and its values",
          "KILN_ATTENTION='fastest'" in refused and "measure" in refused, refused)

    w = World()
    a = w.attention([SIGNATURE])
    w.capturing = True
    out = a.run(0, w.kiln, operands())
    check("during a capture an unchosen signature runs Kiln's kernel and measures nothing",
          a.chosen[0] is None and w.kiln_calls == 1 and not w.library_calls and w.syncs == 0 and out.value == 1.0)
    w.capturing = False
    a.run(0, w.kiln, operands())
    check("after the capture the first call chooses", a.chosen[0] not in (None, runtime.Attention.KILN))

    w = World()
    a = w.attention([SIGNATURE])
    a.run(0, w.kiln, operands(kv_heads=2))
    call = w.library_calls[-1]
    check("grouped key/value heads go to the library with enable_gqa, unrepeated",
          call.get("enable_gqa") is True and call["k"].shape == (2, 2, 16, 32), call)

    w = World(gqa=False)
    a = w.attention([SIGNATURE])
    a.run(0, w.kiln, operands(kv_heads=2))
    call = w.library_calls[-1]
    check("a library without enable_gqa gets each key/value head repeated",
          "enable_gqa" not in call and call["k"].shape == SIZE and call["v"].shape == SIZE
          and a.chosen[0] not in (None, runtime.Attention.KILN), call)

    w = World()
    a = w.attention([SIGNATURE])
    a.run(0, w.kiln, operands(kv_heads=1))
    call = w.library_calls[-1]
    check("one key/value head is expanded over the query's",
          call["k"].shape == SIZE and call["k"].stride()[1] == 0 and "enable_gqa" not in call, call)

    blhe = (16 * 4 * 32, 32, 4 * 32, 1)
    w = World(library_stride=blhe)
    a = w.attention([SIGNATURE])
    out = a.run(0, w.kiln, operands())
    check("a library result in other strides is copied into the planned ones",
          out.stride() == contiguous(SIZE) and out.copied_from is not None and out.copied_from.stride() == blhe)
    # The buffer [B, L, H, E] (heads inside the rows), the result its transpose.
    stored = (2, 16, 4, 32)
    w = World(library_stride=blhe)
    a = w.attention([(stored, contiguous(stored), "torch.bfloat16", True, 0.125, True)])
    out = a.run(0, w.kiln, operands())
    check("a library result in [B, L, H, E] strides is bound, transposed, as a [B, L, H, E] buffer",
          out.shape == stored and out.stride() == contiguous(stored) and out.copied_from is None
          and out.transposed_from.stride() == blhe and a.chosen[0] not in (None, runtime.Attention.KILN))
    w = World()
    a = w.attention([(stored, contiguous(stored), "torch.bfloat16", True, 0.125, True)])
    out = a.run(0, w.kiln, operands())
    check("a contiguous [B, H, L, E] library result is copied into a [B, L, H, E] buffer",
          out.shape == stored and out.stride() == contiguous(stored) and out.copied_from is not None)


if __name__ == "__main__":
    spec = importlib.util.spec_from_file_location("kiln_runtime", sys.argv[1])
    runtime = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runtime)
    main()
