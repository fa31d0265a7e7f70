#!/usr/bin/env python3
"""Tests the bias choice of Kiln's kernel runtime (kiln_runtime.BiasEpilogue) on its
own, without torch or a device: stand-in tensors, stand-in `addmm` and `mm`, and a
clock that each call advances by its cost.

Usage: runtime_bias.py KILN_RUNTIME_PY

Checks: the faster side (the library's bias epilogue, or the product then an add in
place) is chosen once per signature and later calls run only it; both sides compute
the same sum into the step's buffer; with the device's sleep and events the device's
time decides; a call during a graph capture with no choice yet runs the epilogue and
measures nothing; over dynamic shapes each bucket of sizes chooses apart; KILN_BIAS forces
a side and refuses a value it does not know.
Prints `ok: WHAT` per check; exits 1 on the first failure.
"""

import importlib.util
import sys


def check(what, ok, detail=""):
    """Prints `ok: what`, or fails with `detail`."""
    if not ok:
        print(f"FAILED: {what} {detail}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what}")


class Tensor:
    """A number standing for a tensor: a product is the operands' product."""

    def __init__(self, value=0.0):
        self.value = value

    def add_(self, other):
        world.calls.append("add_")
        world.now += world.add_s
        world.device_now += world.add_s
        self.value += other.value
        return self


class World:
    """A clock and the library's two calls with their costs (host and device alike
    unless a device clock is asked for), and the calls made."""

    def __init__(self, addmm_s=2.0, mm_s=1.0, add_s=0.5, device_clock=False):
        self.now = self.device_now = 0.0
        self.addmm_s, self.mm_s, self.add_s = addmm_s, mm_s, add_s
        self.calls, self.syncs, self.slept, self.capturing = [], 0, 0, False
        if device_clock:
            self._sleep, self.Event = self.sleep, self.event

    def addmm(self, bias, a, b, out):
        self.calls.append("addmm")
        self.now += self.addmm_s
        self.device_now += self.addmm_s
        out.value = a.value * b.value + bias.value

    def mm(self, a, b, out):
        self.calls.append("mm")
        self.now += self.mm_s
        self.device_now += self.mm_s
        out.value = a.value * b.value

    def timer(self):
        return self.now

    def synchronize(self):
        self.syncs += 1

    def is_current_stream_capturing(self):
        return self.capturing

    def sleep(self, cycles):
        self.slept += 1

    def event(self, enable_timing=False):
        clock = self

        class Event:
            def record(self):
                self.at = clock.device_now

            def synchronize(self):
                pass

            def elapsed_time(self, end):
                return (end.at - self.at) * 1e3

        return Event()

    def choice(self, count=1, environ=None):
        return runtime.BiasEpilogue(self.addmm, self.mm, self.synchronize, self, count,
                                    timer=self.timer, environ=environ or {})


def step(choice, i=0):
    out = Tensor()
    return choice.run(i, Tensor(1.0), Tensor(2.0), Tensor(3.0), out), out


def main():
    global world
    world = World(addmm_s=1.0, mm_s=1.0, add_s=0.5)
    c = world.choice(2)
    result, out = step(c)
    check("a faster epilogue is chosen on the first call, after timing both",
          c.chosen[0] == runtime.BiasEpilogue.EPILOGUE and c.report[0]["epilogue"] == 1.0
          and c.report[0]["add"] == 1.5 and world.syncs > 0, c.report)
    check("the step's buffer holds the product plus the bias, and is returned",
          result is out and out.value == 7.0, out.value)
    calls, syncs = len(world.calls), world.syncs
    for _ in range(3):
        step(c)
    check("later calls of the signature run only the epilogue, untimed",
          world.calls[calls:] == ["addmm"] * 3 and world.syncs == syncs, world.calls[calls:])
    check("each signature is chosen on its own", c.chosen[1] is None)

    world = World(addmm_s=3.0, mm_s=1.0, add_s=0.5)
    c = world.choice()
    step(c)
    calls = len(world.calls)
    _, out = step(c)
    check("a faster product and add is chosen, and computes the same sum",
          c.chosen[0] == runtime.BiasEpilogue.ADD and world.calls[calls:] == ["mm", "add_"]
          and out.value == 7.0, (c.chosen, world.calls[calls:], out.value))

    # Slower on the host, faster on the device: the device's clock decides.
    world = World(addmm_s=3.0, mm_s=1.0, add_s=0.5, device_clock=True)

    def slow_host_mm(a, b, out):
        World.mm(world, a, b, out)
        world.now += 10.0

    c = runtime.BiasEpilogue(world.addmm, slow_host_mm, world.synchronize, world, 1,
                             timer=world.timer, environ={})
    step(c)
    check("with the device's sleep and events the device's time decides, not the host's",
          c.chosen[0] == runtime.BiasEpilogue.ADD and world.slept == 2 * runtime.DeviceTiming.ROUNDS,
          (c.report, world.slept))

    world = World(addmm_s=3.0, mm_s=1.0)
    world.capturing = True
    c = world.choice()
    _, out = step(c)
    check("during a capture an unchosen signature runs the epilogue, untimed, and stays unchosen",
          world.calls == ["addmm"] and world.syncs == 0 and c.chosen[0] is None and out.value == 7.0,
          world.calls)

    # Dynamic shapes: the choice is made and kept per bucket of the call's sizes.
    world = World(addmm_s=1.0, mm_s=1.0, add_s=0.5)
    c = world.choice()
    out = Tensor()
    c.run(0, Tensor(1.0), Tensor(2.0), Tensor(3.0), out, (1, 128))
    world.addmm_s = 3.0  # the epilogue slower at the next bucket's sizes
    c.run(0, Tensor(1.0), Tensor(2.0), Tensor(3.0), out, (16, 512))
    calls = len(world.calls)
    c.run(0, Tensor(1.0), Tensor(2.0), Tensor(3.0), out, (1, 128))
    check("over dynamic shapes each bucket of sizes chooses apart, and keeps its choice",
          c.by_size == {(0, (1, 128)): runtime.BiasEpilogue.EPILOGUE, (0, (16, 512)): runtime.BiasEpilogue.ADD}
          and world.calls[calls:] == ["addmm"] and c.chosen[0] is None and out.value == 7.0,
          (c.by_size, world.calls[calls:]))

    world = World(addmm_s=1.0, mm_s=5.0)
    c = world.choice(environ={"KILN_BIAS": "add"})
    _, out = step(c)
    c.run(0, Tensor(1.0), Tensor(2.0), Tensor(3.0), Tensor(), (4, 64))
    check("KILN_BIAS=add forces the product and add, untimed, at every bucket of sizes too",
          world.calls == ["mm", "add_"] * 2 and world.syncs == 0 and out.value == 7.0, world.calls)
    try:
        world.choice(environ={"KILN_BIAS": "fastest"})
        check("an unknown KILN_BIAS is refused", False)
    except RuntimeError as error:
        check("an unknown KILN_BIAS is refused, naming the values it takes",
              "fastest" in str(error) and "epilogue" in str(error) and "add" in str(error), str(error))


world = None

if __name__ == "__main__":
    spec = importlib.util.spec_from_file_location("kiln_runtime", sys.argv[1])
    runtime = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runtime)
    main()
