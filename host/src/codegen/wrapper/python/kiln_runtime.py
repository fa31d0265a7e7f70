"""Kiln's kernel runtime: compiles the Triton kernels of a generated file ahead
of their launches.

`host compile` writes this module beside every `output_code.py` (and a C++
wrapper's `kernels.py`), which loads it by its path and makes
`KERNELS = kiln_runtime.KernelSet(globals())` from its own `KERNEL_META` and
`TRITON_TARGET`. At that moment every kernel not compiled already (in a
`kernels/` folder beside the file, written by `host compile --precompile`, or in
Kiln's cache, $KILN_CACHE_DIR/triton, by default ~/.cache/kiln/triton) starts
compiling in a pool of worker processes, each running the generated file with
--kiln-compile-worker, which imports Triton and not torch. A launch waits only
for its own kernel, and compiles it itself when no worker has started it yet.
Where the program importing the file started workers ahead (the kiln package's
torch.compile backend does, `KernelSet.lent`), those serve it.
Binaries go to the cache, so a later process loads them and compiles nothing.
KILN_COMPILE_WORKERS=N sets the pool's size (0: every kernel is compiled by the
process that launches it).

The generated file calls `run_tool(globals())` when run as a script, before it
imports torch: `python output_code.py --precompile [FOLDER] [--jobs N]`, and the
workers, are served here. The checks and copies of the wrapper's `call`
(`assert_size_stride`, `align_inputs`, `in_layout`) are here too, and so is
`load_weights`, which reads the weights file beside the generated file with the
`frombuffer` and the device its caller hands it. Nothing in this module imports
torch.

Kept in Kiln's repository as a Python file (host/src/codegen/wrapper/python/);
the `host` binary embeds it.
"""

import sys


class KernelSet:
    """The kernels of KERNEL_META, compiled ahead of time, by name:
    `KERNELS.name[grid](*args, stream=stream)` with every parameter in order.
    Autotuned kernels are not in it: `triton.autotune` compiles them as it
    benchmarks them."""

    WORKER_FLAG = "--kiln-compile-worker"

    def __init__(self, scope, target=None, folders=None, store=None, workers=None):
        import collections
        import os
        import threading

        self._scope = scope
        self._path = scope.get("__file__")
        self._lock = threading.Lock()
        self._queue = collections.deque()
        self._kernels = {}
        self._target = target
        self._checked = target is not None
        if folders is None:
            folders = [os.path.join(KernelSet.cache_dir(), "triton")]
            if self._path:
                folders.insert(0, os.path.join(os.path.dirname(os.path.abspath(self._path)), "kernels"))
        self._folders = folders
        self._store = store or folders[-1]
        self._helpers = KernelSet.helpers_digest(scope)
        for name, meta in scope["KERNEL_META"].items():
            if not meta.get("autotuned"):
                kernel = _KilnKernel(self, name, scope[meta.get("function", name)], meta)
                self._kernels[name] = kernel
                setattr(self, name, kernel)
        try:
            if self._target is None:
                self._target = KernelSet.target(scope["TRITON_TARGET"])
            pending = []
            for kernel in self._kernels.values():
                kernel.key = self._key(kernel)
                kernel.folder = self._find(kernel)
                if kernel.folder is None:
                    pending.append(kernel)
        except Exception as error:  # no Triton backend for the target here
            self._failed(error)
            return
        if workers is None:
            workers = os.environ.get("KILN_COMPILE_WORKERS", "")
            workers = int(workers) if workers.isdigit() else max(1, KernelSet.cpus() - 1)
        workers = min(workers, len(pending)) if self._path and os.path.isfile(self._path) else 0
        for kernel in pending:
            kernel.state = "queued"
            self._queue.append(kernel)
        lent = KernelSet.lent(self._path, workers) if workers else []
        for i in range(workers):
            threading.Thread(target=self._serve, args=(lent[i] if i < len(lent) else None,), daemon=True).start()
        # Binaries from a --precompile folder come without Triton's host-side launchers,
        # which it builds with the C compiler at each kernel's first launch: build them
        # now, side by side (the compiler runs outside the GIL).
        ahead = collections.deque(
            k for k in self._kernels.values()
            if k.folder and len(self._folders) > 1 and not k.folder.startswith(self._folders[-1]))
        for _ in range(min(len(ahead), KernelSet.cpus()) if len(ahead) > 1 else 0):
            threading.Thread(target=self._prepare, args=(ahead,), daemon=True).start()

    @staticmethod
    def cpus():
        import os

        try:
            return len(os.sched_getaffinity(0))
        except AttributeError:
            return os.cpu_count() or 1

    @staticmethod
    def cache_dir():
        """$KILN_CACHE_DIR, else ~/.cache/kiln (as `host` caches its libraries)."""
        import os
        import tempfile

        if os.environ.get("KILN_CACHE_DIR"):
            return os.environ["KILN_CACHE_DIR"]
        home = os.environ.get("HOME")
        return os.path.join(home, ".cache", "kiln") if home else os.path.join(tempfile.gettempdir(), "kiln-cache")

    @staticmethod
    def running_target():
        """The target of the device this process runs on, as Triton's JIT sees it."""
        try:
            from triton.runtime import driver

            return driver.active.get_current_target()
        except Exception:  # no device: the binaries' target stands
            return None

    @staticmethod
    def target(spec):
        """Triton's GPUTarget from TRITON_TARGET's fields."""
        import json

        from triton.backends.compiler import GPUTarget

        if spec is None:
            raise RuntimeError("the device plugin names no Triton target")
        arch = spec["arch"]
        if arch.isdigit():
            arch = int(arch)
        elif arch.startswith("{"):
            arch = json.loads(arch)
        return GPUTarget(spec["backend"], arch, spec["warp_size"])

    @staticmethod
    def helpers_digest(scope):
        """A digest of the source of every @triton.jit function that is not a kernel
        of KERNEL_META: the helpers kernels call."""
        import hashlib

        from triton.runtime.jit import JITFunction

        meta = scope["KERNEL_META"]
        sources = sorted(v.src for k, v in scope.items() if isinstance(v, JITFunction) and k not in meta)
        return hashlib.sha256("\0".join(sources).encode()).hexdigest()

    def _key(self, kernel):
        """The binary's name in the folders: the kernel's name and a digest of its
        source and the helpers' (as the file has them now), signature, constants,
        alignment, launch options, target, Triton's version and the environment
        Triton compiles by."""
        import hashlib
        import json

        import triton
        import triton.compiler.compiler as compiler

        environment = getattr(compiler, "get_cache_invalidating_env_vars", dict)()
        t = self._target
        text = json.dumps(
            [kernel.jit.src, self._helpers, kernel.meta, t.backend, t.arch, t.warp_size, triton.__version__,
             sorted(environment.items()), KernelSet.dependent_launch(t)],
            sort_keys=True, default=str)
        return f"{kernel.name}-{hashlib.sha256(text.encode()).hexdigest()[:32]}"

    def _find(self, kernel):
        import os

        for folder in self._folders:
            path = os.path.join(folder, kernel.key)
            if os.path.isfile(os.path.join(path, kernel.jit.__name__ + ".json")):
                return path
        return None

    @staticmethod
    def source(jit, meta, target):
        """Triton's ASTSource for the kernel as KERNEL_META launches it."""
        from triton.compiler import ASTSource, make_backend

        signature, constants = meta["signature"], meta["constants"]
        names = list(jit.arg_names)
        # Constants may sit anywhere among the parameters (an argument compiled in).
        if [n for n in names if n not in constants] != list(signature) or not set(constants) <= set(names):
            raise RuntimeError(
                f"KERNEL_META lists the parameters {list(signature)} and constants {list(constants)}, "
                f"the kernel has {names} (a bug in Kiln: please report)")
        backend = make_backend(target)
        divisible = backend.parse_attr("D") if hasattr(backend, "parse_attr") else [["tt.divisibility", 16]]
        attrs = {(names.index(name),): divisible for name in meta.get("aligned", ())}
        types = {name: "constexpr" if name in constants else signature[name] for name in names}
        return ASTSource(jit, types, dict(constants), attrs)

    @staticmethod
    def compile(jit, meta, target):
        import triton

        options = {"num_warps": meta["num_warps"], "num_stages": meta["num_stages"]}
        if KernelSet.launched_dependent(jit, meta, target):
            options["launch_pdl"] = True
        return triton.compile(KernelSet.source(jit, meta, target), target=target, options=options)

    @staticmethod
    def dependent_launch(target):
        """Whether a kernel compiled for `target` that waits for the kernel before it
        (KERNEL_META's "dependent": it calls kiln_dependent_wait before it touches anything
        but constants) is launched as that kernel's programmatic dependent: on Triton's CUDA
        backend for sm_90 and later, with a Triton that has `launch_pdl` (3.4 and later).
        Its programs then start while the kernel before still runs, and the kernel's launch
        overlaps that kernel's end. KILN_PDL=0 turns it off."""
        import os

        if os.environ.get("KILN_PDL", "1") == "0" or getattr(target, "backend", None) != "cuda":
            return False
        try:
            from triton.language.extra import cuda

            return int(target.arch) >= 90 and hasattr(cuda, "gdc_wait")
        except (ImportError, TypeError, ValueError):
            return False

    @staticmethod
    def launched_dependent(jit, meta, target):
        """Sets the kernels' KILN_PDL for `target` (where their file defines it), and
        returns whether this kernel launches as a programmatic dependent."""
        import triton.language as tl

        pdl = KernelSet.dependent_launch(target)
        scope = getattr(getattr(jit, "fn", None), "__globals__", {})
        if "KILN_PDL" in scope:
            scope["KILN_PDL"] = tl.constexpr(pdl)
        return pdl and bool(meta.get("dependent"))

    @staticmethod
    def keep(binary, store, key):
        """Copies a compiled kernel's metadata and binary (not its intermediate IR)
        into `store`/`key`, atomically (a whole folder or none), and returns that
        folder."""
        import os
        import shutil
        import threading

        from triton.compiler import make_backend

        final = os.path.join(store, key)
        if os.path.isdir(final):
            return final
        os.makedirs(store, exist_ok=True)
        partial = f"{final}.partial-{os.getpid()}-{threading.get_ident()}"
        shutil.rmtree(partial, ignore_errors=True)
        os.makedirs(partial)
        wanted = (".json", "." + make_backend(binary.metadata.target).binary_ext)
        for name, path in binary.metadata_group.items():
            if name.endswith(wanted):
                shutil.copyfile(path, os.path.join(partial, name))
        try:
            os.rename(partial, final)
        except OSError:  # another process kept the same kernel first
            shutil.rmtree(partial, ignore_errors=True)
        return final

    @staticmethod
    def lent(path, count):
        """Up to `count` compile workers that the program importing this file started
        ahead, each told to serve `path` (it replies "ready" as a worker of its own
        does). A fresh worker spends about a second before its first kernel is done
        (loading Triton, then a first compile that sets up the compiler); one started
        ahead did that while the graph was exported and compiled. The kiln package's
        torch.compile backend starts them (its module `kiln._workers`, found here only
        where already imported); none without it."""
        lender = sys.modules.get("kiln._workers")
        try:
            return list(lender.lend(path, count)) if hasattr(lender, "lend") else []
        except Exception:  # a lender of another version: the workers start here
            return []

    def _serve(self, lent=None):
        """One worker process (the one `lent`, else one started here, as also where the
        lent one fails to start): takes queued kernels until none are left."""
        import json

        proc = self._started(lent) or (self._started(None) if lent else None)
        if proc is None:
            return
        t = self._target
        try:
            while True:
                with self._lock:
                    if not self._queue:
                        return
                    kernel = self._queue.popleft()
                    kernel.state = "running"
                job = {"name": kernel.name, "key": kernel.key, "store": self._store,
                       "target": [t.backend, t.arch, t.warp_size]}
                try:
                    proc.stdin.write(json.dumps(job) + "\n")
                    proc.stdin.flush()
                    line = proc.stdout.readline()
                    reply = json.loads(line) if line else {"error": "the worker process exited"}
                except Exception as error:  # whatever happened, the kernel must finish
                    line, reply = "", {"error": f"the worker process failed: {error}"}
                if not isinstance(reply, dict):
                    reply = {"error": f"the worker process replied {line!r}"}
                kernel.finish(reply.get("folder"))  # on an error, the launch compiles it
                if not line:
                    return
        finally:
            KernelSet._end(proc)

    @staticmethod
    def _end(proc):
        """Ends a worker process: the end of its stdin makes it exit (killed if it has not
        within a few seconds); reaped, with its pipes closed."""
        import subprocess

        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()

    def _started(self, proc):
        """`proc`, or a worker process started here, once it has said "ready"; None
        where it does not (it could not start, or it exited)."""
        import subprocess

        try:
            proc = proc or subprocess.Popen(
                [sys.executable, self._path, KernelSet.WORKER_FLAG],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                text=True, bufsize=1)
        except OSError:
            return None
        try:
            if proc.stdout.readline().strip() == "ready":
                return proc
        except (OSError, ValueError):
            pass
        KernelSet._end(proc)
        return None

    def _prepare(self, ahead):
        """Loads found binaries and builds their launchers until `ahead` is empty."""
        while True:
            with self._lock:
                if not ahead:
                    return
                kernel = ahead.popleft()
                if kernel.state != "idle":
                    continue
                kernel.state = "preparing"
            try:
                binary = self._load(kernel, kernel.folder)
                _kiln_build_launcher(binary, self._target)
                kernel.prepared = binary
            except Exception:  # the launch loads it again, and reports what is wrong
                pass
            kernel.finish(kernel.folder)

    def _failed(self, error):
        """Ahead-of-time compilation is impossible here: every kernel launches
        through Triton's JIT, as a plain @triton.jit function does."""
        import warnings

        warnings.warn(f"Kiln: kernels are compiled by Triton's JIT at their first launch: {error}",
                      stacklevel=3)
        for kernel in self._kernels.values():
            setattr(self, kernel.name, _KilnJitLauncher(kernel))

    def binary(self, kernel, load=True):
        """The kernel's compiled binary: loaded from its folder, or compiled here
        when no worker has taken it (or one failed); waits for the worker that is
        compiling it. With `load` false, only makes sure the folder exists."""
        import os

        with self._lock:
            mine = kernel.state in ("idle", "queued")
            if kernel.state == "queued":
                self._queue.remove(kernel)
            if mine:
                kernel.state = "local"
            if not self._checked:
                self._checked = True
                self._retarget(KernelSet.running_target())
        if not mine:
            kernel.done.wait()
        folder = kernel.folder
        try:
            if folder is None or os.path.basename(folder) != kernel.key:
                folder = self._find(kernel)
            if folder is not None:
                if not load:
                    return None
                if kernel.prepared is not None and folder == kernel.folder:
                    return kernel.prepared
                return self._load(kernel, folder)
            binary = KernelSet.compile(kernel.jit, kernel.meta, self._target)
            try:
                folder = KernelSet.keep(binary, self._store, kernel.key)
            except OSError:
                pass  # a read-only cache: the binary is still good for this process
            return binary
        finally:
            if mine:
                kernel.finish(folder)

    def _load(self, kernel, folder):
        """The compiled kernel kept in `folder`."""
        import os

        from triton.compiler import CompiledKernel

        group = {name: os.path.join(folder, name) for name in os.listdir(folder)}
        return CompiledKernel(KernelSet.source(kernel.jit, kernel.meta, self._target), group, kernel.key)

    def _retarget(self, running):
        """The device this process runs on is not the target the kernels were being
        compiled for: from now on they are compiled for it, into the cache."""
        if running is None or running == self._target:
            return
        self._target = running
        self._folders = self._folders[-1:]
        self._store = self._folders[0]
        for kernel in self._kernels.values():
            kernel.key = self._key(kernel)

    def resolve(self, kernel):
        """Replaces the kernel's entry with its binary, so later launches go
        straight to it; falls back to Triton's JIT if it cannot be compiled ahead."""
        try:
            launcher = Launches.of(self.binary(kernel))
        except Exception as error:
            import warnings

            warnings.warn(f"Kiln: {kernel.name} could not be compiled ahead of its launch ({error}); "
                          "Triton's JIT compiles it instead", stacklevel=3)
            launcher = _KilnJitLauncher(kernel)
        setattr(self, kernel.name, launcher)
        return launcher

    def ready(self, names):
        """Makes sure each named kernel is compiled (or compiles it here), as its launch
        would: a kernel of dynamic sizes readies every variant at its first launch, so no
        later size compiles one."""
        for name in names:
            kernel = getattr(self, name, None)
            if isinstance(kernel, _KilnKernel):
                self.resolve(kernel)

    def precompile(self):
        """Compiles every kernel (this thread works the queue beside the workers);
        returns the failures as (name, error)."""
        failures = []
        for kernel in list(self._kernels.values()):
            try:
                self.binary(kernel, load=False)
            except Exception as error:
                failures.append((kernel.name, f"{type(error).__name__}: {error}"))
        return failures


class _KilnKernel:
    """A kernel before its first launch: waits for, or makes, its binary."""

    def __init__(self, owner, name, jit, meta):
        import threading

        self.owner, self.name, self.jit, self.meta = owner, name, jit, meta
        self.key = self.folder = self.prepared = None
        self.state = "idle"
        self.done = threading.Event()

    def finish(self, folder):
        self.folder, self.state = folder, "done"
        self.done.set()

    def __getitem__(self, grid):
        return self.owner.resolve(self)[grid]


class Launches:
    """A compiled kernel's launches, `KERNELS.name[grid](*args, stream=stream)`, made straight
    through its backend's launcher with the kernel's handles bound once per grid. Triton's own
    `binary[grid](...)` makes a closure, asks for launch metadata and reads its launch-hook
    knobs at every launch: microseconds that a call bound by the host (many small kernels, a
    decoding step) pays for each kernel. The launcher is called as Triton's CompiledKernel
    calls it, with no launch metadata and no hooks; where a launch hook is set when a grid is
    first launched (a profiler such as Proton), or the binary lacks the handles this needs,
    its launches go through Triton's own path."""

    # Grids kept per kernel: a kernel launched with more (sizes that vary between calls)
    # binds each launch as it comes.
    MAX_GRIDS = 64

    def __init__(self, binary):
        self.binary = binary
        self._by_grid = {}

    @staticmethod
    def of(binary):
        """`binary` with its launches bound, or as it is where it is not Triton's CompiledKernel."""
        usual = all(hasattr(type(binary), a) for a in ("_init_handles", "run")) and all(
            a in getattr(binary, "__dict__", {}) for a in ("function", "packed_metadata"))
        return Launches(binary) if usual else binary

    def __getitem__(self, grid):
        launch = self._by_grid.get(grid)
        if launch is None:
            launch = self._bind(grid)
            if len(self._by_grid) < Launches.MAX_GRIDS:
                self._by_grid[grid] = launch
        return launch

    def _bind(self, grid):
        binary = self.binary
        if Launches._hooked():
            return binary[grid]
        binary._init_handles()
        run, function, packed = binary.run, binary.function, binary.packed_metadata
        x, y, z = grid

        def launch(*args, stream):
            run(x, y, z, stream, function, packed, None, None, None, *args)

        return launch

    def bind_with(self, grid, constants):
        """A launch on `grid` that passes `constants` (the constexprs) after the
        arguments it is given, in one call (a kernel of dynamic sizes' variant)."""
        binary = self.binary
        if Launches._hooked():
            run = binary[grid]
            return lambda *args, stream: run(*args, *constants, stream=stream)
        binary._init_handles()
        run, function, packed = binary.run, binary.function, binary.packed_metadata
        x, y, z = grid

        def launch(*args, stream):
            run(x, y, z, stream, function, packed, None, None, None, *args, *constants)

        return launch

    @staticmethod
    def _hooked():
        """Whether a launch hook is set (or Triton keeps them where this does not look)."""
        try:
            from triton import knobs
        except ImportError:
            return True
        def set_(hook):  # a function, or (newer Triton) a chain of them
            calls = getattr(hook, "calls", None)
            return bool(calls) if isinstance(calls, list) else hook is not None

        runtime = knobs.runtime
        return set_(runtime.launch_enter_hook) or set_(runtime.launch_exit_hook)


class _KilnJitLauncher:
    """A kernel launched through Triton's JIT (where no binary could be made ahead)."""

    def __init__(self, kernel):
        self.jit, self.meta = kernel.jit, kernel.meta
        self.options = {"num_warps": kernel.meta["num_warps"], "num_stages": kernel.meta["num_stages"]}
        if KernelSet.launched_dependent(kernel.jit, kernel.meta, kernel.owner._target):
            self.options["launch_pdl"] = True

    def __getitem__(self, grid):
        launch = self.jit[grid]
        options = self.options

        def run(*args, stream=None):
            return launch(*args, **options)

        return run


TOOL_FLAGS = (KernelSet.WORKER_FLAG, "--precompile")


def run_tool(scope):
    """Serves `python FILE --precompile ...` or a compile worker, for the generated
    file whose globals are `scope`, and exits; returns when the file was run with
    neither flag (its own `__main__` goes on)."""
    if sys.argv[1:2] and sys.argv[1] in TOOL_FLAGS:
        sys.exit(kernel_tool(scope, sys.argv[1:]))


def kernel_tool(scope, argv):
    """`python output_code.py --precompile [FOLDER] [--jobs N]`, or a compile worker."""
    import argparse
    import json
    import os
    import time

    if argv[:1] == [KernelSet.WORKER_FLAG]:
        # Replies go to the real stdout; anything the compiler prints goes to stderr.
        replies = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)
        print("ready", file=replies, flush=True)
        for line in sys.stdin:
            job = json.loads(line)
            try:
                from triton.backends.compiler import GPUTarget

                target = GPUTarget(*job["target"])
                meta = scope["KERNEL_META"][job["name"]]
                jit = scope[meta.get("function", job["name"])]
                binary = KernelSet.compile(jit, meta, target)
                reply = {"folder": KernelSet.keep(binary, job["store"], job["key"])}
                _kiln_build_launcher(binary, target)
            except Exception as error:
                reply = {"error": f"{type(error).__name__}: {error}"}
            print(json.dumps(reply), file=replies, flush=True)
        return 0
    here = os.path.dirname(os.path.abspath(scope["__file__"]))
    parser = argparse.ArgumentParser(
        prog=os.path.basename(scope["__file__"]) + " --precompile",
        description="Compile every kernel of this file for TRITON_TARGET into FOLDER, "
                    "where the wrapper loads them from instead of compiling them.")
    parser.add_argument("folder", nargs="?", default=os.path.join(here, "kernels"),
                        help="where the binaries go (default: kernels/ beside this file)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="worker processes (default: one per core but one)")
    args = parser.parse_args(argv[1:])
    start = time.perf_counter()
    target = KernelSet.target(scope["TRITON_TARGET"])
    import triton.backends

    if not any(b.compiler.supports_target(target) for b in triton.backends.backends.values()):
        installed = ", ".join(sorted(triton.backends.backends)) or "none"
        print(f"FAILED: Triton has no backend for `{target.backend}` here (installed: {installed}); "
              "precompile where it has one, or let the kernels compile at their first launch",
              file=sys.stderr)
        return 1
    kernels = KernelSet(scope, target=target, folders=[args.folder], workers=args.jobs)
    failures = kernels.precompile()
    # Which folder holds each kernel, for loaders that do not compute keys (wrapper.cpp's
    # generator): {"name": "name-<key>"}.
    manifest = {name: kernel.key for name, kernel in kernels._kernels.items()
                if os.path.isdir(os.path.join(args.folder, kernel.key))}
    os.makedirs(args.folder, exist_ok=True)
    with open(os.path.join(args.folder, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    for name, error in failures:
        print(f"FAILED {name}: {error}", file=sys.stderr)
    done = len(kernels._kernels) - len(failures)
    print(f"{done} of {len(kernels._kernels)} kernel(s) compiled for {target.backend} into "
          f"{args.folder} in {time.perf_counter() - start:.2f} s")
    return 1 if failures else 0


# The checks and copies the wrapper's `call` makes, which output_code.py binds as
# its own globals. They need no import of torch: a copy is made by the tensor's
# own methods.


def assert_size_stride(tensor, size, stride, name):
    """Raises AssertionError unless `tensor` has the size and the layout the
    kernels were generated for, as Inductor's wrapper asserts its inputs."""
    # A dim of size 1 is never stepped along and an empty tensor is never read:
    # only the strides of the other dims are the layout the kernels index with.
    got = tuple(tensor.size())
    steps = tensor.numel() > 0 and any(
        n > 1 and s != t for n, s, t in zip(got, tensor.stride(), stride))
    if got != size or steps:
        raise AssertionError(
            f"{name}: expected size {size} and stride {stride}, "
            f"got size {tuple(tensor.size())} and stride {tuple(tensor.stride())}"
        )


def input_check(torch, names, sizes, strides):
    """The function `call` checks its inputs with (a tuple, in order) against
    the sizes and strides the kernels were generated for: through torch's own
    checks in C++, the ones Inductor's wrappers call, where this `torch` has
    them. A call whose weights are inputs (a graph from torch.compile) checks
    hundreds: one C++ call checks them all where torch has the grouped check,
    else one per input, at a fraction of a microsecond each. A failure is
    reported, with the input's name, by `assert_size_stride` (whose rule, that
    a dim of size 1 has any stride, decides)."""
    guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
    grouped = getattr(guards, "assert_size_stride_grouped", None)
    fast = getattr(guards, "assert_size_stride", None)
    layouts = tuple(zip(names, sizes, strides))

    def slow(tensors):
        for tensor, (name, size, stride) in zip(tensors, layouts):
            assert_size_stride(tensor, size, stride, name)

    if grouped is not None:
        def check(tensors):
            try:
                grouped(tensors, sizes, strides, "input")
            except AssertionError:
                slow(tensors)
    elif fast is not None:
        def check(tensors):
            for tensor, (name, size, stride) in zip(tensors, layouts):
                try:
                    fast(tensor, size, stride)
                except AssertionError:
                    assert_size_stride(tensor, size, stride, name)
    else:
        check = slow
    return check


class SizeError(ValueError):
    """A call's size outside the range the program was compiled for."""


def symbolic_input_check(torch, names, symbols, layouts):
    """The check of a program of dynamic shapes: reads each size symbol from the
    input dim `symbols` names (`(kernel_name, source_name, input, dim, least,
    most)`), refuses a value outside its range (SizeError, naming the input, the
    dim and the range), then checks every input against the sizes and strides
    `layouts(*values)` gives (two inputs that share a size must agree), as
    `input_check` does. Returns the values, in `symbols`' order."""
    guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
    grouped = getattr(guards, "assert_size_stride_grouped", None)

    def check(tensors):
        values = []
        for _, source, i, d, least, most in symbols:
            shape = tensors[i].shape
            if d >= len(shape):
                raise SizeError(f"input `{names[i]}` has {len(shape)} dims; the program "
                                f"reads its size {source} from dim {d}")
            n = shape[d]
            if not least <= n <= most:
                raise SizeError(f"input `{names[i]}` dim {d} is {n}: the program was compiled "
                                f"for {source} in {least}..={most}; compile again for a range "
                                f"that holds it")
            values.append(n)
        sizes, strides = layouts(*values)
        if grouped is not None:
            try:
                grouped(tensors, sizes, strides, "input")
                return values
            except AssertionError:
                pass
        for tensor, name, size, stride in zip(tensors, names, sizes, strides):
            assert_size_stride(tensor, size, stride, name)
        return values

    return check


def grid_of(grids, numel, block):
    """The grid of a kernel of dynamic rows for `numel` rows, `block` a program: the
    plugin's grid for the power of two of programs that covers them (`grids[k]`
    serves up to 2**k programs; the kernels' grid-stride loops take any grid)."""
    programs = max(-(-numel // block), 1)
    return grids[min((programs - 1).bit_length(), len(grids) - 1)]


class SizedLaunch:
    """A kernel of dynamic sizes, launched as `KERNEL_LAUNCHES[name](xnumel[, rnumel])(*args,
    stream=stream)`: the variant compiled for the bucket of the call's row count and row
    length, with its constexprs, on the plugin's grid for that bucket. A row length's bucket
    is its power of two (`bucket`); a row count's an eighth of one (`row_key`), since the
    grid follows it. `variants` are (KERNELS name, constexprs); `table[i][j]` is (variant,
    grid) for the row count's key `x_from + i` and the row length's bucket `r_from + j` (a
    size past the table takes its last row or column; the kernels' grid-stride loops take
    any grid). A kernel of further forms (its text compiled under facts some sizes give:
    1, 32-bit indexes; 2, an inner count of a multiple of 16; 3, both) has `forms`: for each,
    every variant's (name, constexprs), or () for a form it has not; a call passes the form
    its sizes allow (`KERNEL_LAUNCHES[name](xnumel, rnumel, form)`)."""

    __slots__ = ("_kernels", "_variants", "_forms", "_x_from", "_r_from", "_table", "_bound")

    def __init__(self, kernels, variants, x_from, r_from, table, forms=((), (), ())):
        self._kernels, self._variants, self._forms = kernels, variants, forms
        self._x_from, self._r_from, self._table = x_from, r_from, table
        self._bound = {}

    def __call__(self, xnumel, rnumel=1, form=0):
        # row_key(xnumel), bucket(rnumel) and the form, in one key.
        m = xnumel - 1
        b = m.bit_length()
        key = ((b << 3 | ((m >> (b - 4)) & 7 if b > 4 else m & 7)) << 7 | (rnumel - 1).bit_length()) << 2 | form
        launch = self._bound.get(key)
        if launch is None:
            launch = self._bound[key] = self._bind(key >> 9, (key >> 2) & 127, form)
        return launch

    @staticmethod
    def bucket(n):
        """A row length's bucket: the least b with n <= 2**b (an empty launch, of 0, takes
        bucket 1's: any grid does)."""
        return (n - 1).bit_length()

    @staticmethod
    def row_key(n):
        """A row count's bucket: 8 * bucket(n) plus the three bits of n - 1 after its
        leading one (its own low bits below 16)."""
        m = n - 1
        b = m.bit_length()
        return b << 3 | ((m >> (b - 4)) & 7 if b > 4 else m & 7)

    def choice(self, xnumel, rnumel=1, form=0):
        """The (variant name, grid) a call of these sizes launches."""
        n, grid = self._cell(SizedLaunch.row_key(xnumel), SizedLaunch.bucket(rnumel))
        return self._in_form(form)[n][0], grid

    def _in_form(self, form):
        return self._forms[form - 1] if form else self._variants

    def _cell(self, x_key, r_bucket):
        row = self._table[min(max(x_key - self._x_from, 0), len(self._table) - 1)]
        return row[min(max(r_bucket - self._r_from, 0), len(row) - 1)]

    def _bind(self, x_key, r_bucket, form=0):
        if not self._bound:
            # The first launch readies every variant in every form: no later size compiles one.
            ready = getattr(self._kernels, "ready", None)
            if ready is not None:
                ready([name for variants in (self._variants, *self._forms) for name, _ in variants])
        n, grid = self._cell(x_key, r_bucket)
        name, constants = self._in_form(form)[n]
        kernel = getattr(self._kernels, name)
        if hasattr(kernel, "bind_with"):  # a compiled kernel's launches
            return kernel.bind_with(grid, constants)
        run = kernel[grid]
        return lambda *args, stream: run(*args, *constants, stream=stream)


def size_bucket(values):
    """The bucket of a call's size symbols that a choice made at run time is kept
    for: each value's next power of two."""
    return tuple(1 << (max(v, 1) - 1).bit_length() for v in values)


def align_inputs(args, indices):
    """Copies each of `args[indices]` that is not 16-byte aligned (a view into the
    middle of a storage) to fresh memory, keeping its strides: the kernels are
    compiled for aligned pointers, as Triton's JIT would specialize them."""
    for i in indices:
        x = args[i]
        if x.data_ptr() % 16:
            args[i] = x.new_empty_strided(x.size(), x.stride()).copy_(x)


def in_layout(t, size, stride):
    """An extern kernel's result (ATen's convolution) as the buffer the kernels
    were generated for: `t` itself where ATen chose the planned strides (cuDNN
    may answer channels-last), as Inductor binds `extern_kernels.convolution`'s
    result, else a copy in them."""
    if t.stride() == stride:
        return t
    return t.new_empty_strided(size, stride).copy_(t)


# The weights file `host compile` writes beside output_code.py, read when the
# wrapper first needs its constants. torch's `frombuffer` and the device come from
# the caller, so that this module still never imports torch.


def load_weights(beside, name, frombuffer, device, expected):
    """The tensors of the weights file `name` in the folder of the file `beside`
    (the generated file's `__file__`), memory-mapped and copied to `device`:
    `expected` maps each key to its safetensors dtype, its torch dtype and its
    shape, and each tensor is checked against them. The file is safetensors: an
    8-byte header length, a JSON header, the data. Raises RuntimeError naming the
    file and the tensor when the file is missing, truncated or not the one the
    code was generated with."""
    import json
    import mmap
    import os

    path = os.path.join(os.path.dirname(os.path.abspath(beside)), name)
    again = "keep the files `host compile` wrote together, or compile again"
    try:
        f = open(path, "rb")
    except OSError as e:
        raise RuntimeError(f"Kiln: cannot open the weights file {path}: {e.strerror}; {again}") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else -1
        if n < 0 or 8 + n > size:
            raise RuntimeError(f"Kiln: {path} is truncated or not a safetensors file ({size} bytes); {again}")
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            raise RuntimeError(f"Kiln: {path} has an unreadable header ({e}); {again}") from None
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    tensors = {}
    for key, (st_dtype, dtype, shape) in expected.items():
        meta = header.get(key)
        if not isinstance(meta, dict):
            raise RuntimeError(f"Kiln: {path} has no tensor `{key}`; {again}")
        if meta.get("dtype") != st_dtype or tuple(meta.get("shape", ())) != shape:
            raise RuntimeError(
                f"Kiln: {path}: tensor `{key}` is {meta.get('dtype')}{list(meta.get('shape', ()))}, "
                f"the code expects {st_dtype}{list(shape)}; {again}"
            )
        offsets = meta.get("data_offsets")
        if not (isinstance(offsets, list) and len(offsets) == 2
                and all(isinstance(o, int) and o >= 0 for o in offsets)):
            raise RuntimeError(f"Kiln: {path}: tensor `{key}` has no valid data_offsets ({offsets}); {again}")
        start, end = offsets
        numel = 1
        for d in shape:
            numel *= d
        if end - start != numel * dtype.itemsize or 8 + n + end > size:
            raise RuntimeError(f"Kiln: {path} is truncated: tensor `{key}` lies past its end ({size} bytes); {again}")
        t = frombuffer(data, dtype=dtype, count=numel, offset=8 + n + start)
        tensors[key] = t.reshape(shape).to(device)
    return tensors


def _kiln_build_launcher(binary, target):
    """Builds the kernel's host-side launcher (a C module Triton compiles and caches
    per signature) in the worker, so the launching process finds it made."""
    try:
        launcher = _kiln_launcher_class(target)
        if launcher is not None:
            launcher(binary.src, binary.metadata)
    except Exception:  # the launching process builds it instead
        pass


def _kiln_launcher_class(target):
    """The launcher class of the Triton backend that compiles for `target` (its
    driver module's `...Launcher`; a backend's package is not named after the
    target: `nvidia` compiles for `cuda`), or None."""
    import triton.backends

    for backend in triton.backends.backends.values():
        if backend.compiler.supports_target(target):
            module = sys.modules.get(backend.driver.__module__)
            for value in vars(module or object).values():
                if isinstance(value, type) and value.__name__.endswith("Launcher"):
                    return value
    return None


# Attention: each fused attention step of the wrapper runs Kiln's flash-attention
# kernel or the library's scaled_dot_product_attention (PyTorch's dispatcher picks
# flash, cuDNN, memory-efficient or math), whichever its signature's first call
# measures faster. The generated file hands over torch's pieces, so that this
# module still never imports torch.


class DeviceTiming:
    """How the runtime's first-call choices time one side: the best of ROUNDS
    rounds of CALLS calls each, after WARMUP calls. Where the device module has
    a sleep and events (torch.cuda), each round is queued while the device
    sleeps and events around it time the device's work alone: in a model the
    device runs ahead of the host, so that is what a step costs (timed on the
    host, the library's dispatch in Python, longer than its kernel at GPT-2's
    sizes in 16 bits, made it look slower than it is). Otherwise each round is
    timed on the host between device synchronizations."""

    WARMUP = 2
    ROUNDS = 3
    CALLS = 8
    # Device cycles the device sleeps before a timing round (about a millisecond):
    # long enough for the host to queue the round's calls behind it.
    SLEEP_CYCLES = 2_000_000

    def __init__(self, synchronize, device, timer=None):
        import time

        self._synchronize = synchronize
        self._sleep = getattr(device, "_sleep", None)
        self._event = getattr(device, "Event", None)
        self._timer = timer or time.perf_counter

    def time(self, fn):
        """Seconds per call of `fn`."""
        for _ in range(DeviceTiming.WARMUP):
            fn()
        if self._sleep is not None and self._event is not None:
            return self._device_time(fn)
        best = None
        for _ in range(DeviceTiming.ROUNDS):
            self._synchronize()
            start = self._timer()
            for _ in range(DeviceTiming.CALLS):
                fn()
            self._synchronize()
            took = (self._timer() - start) / DeviceTiming.CALLS
            best = took if best is None else min(best, took)
        return best

    def _device_time(self, fn):
        best = None
        for _ in range(DeviceTiming.ROUNDS):
            self._synchronize()
            self._sleep(DeviceTiming.SLEEP_CYCLES)
            start, end = self._event(enable_timing=True), self._event(enable_timing=True)
            start.record()
            for _ in range(DeviceTiming.CALLS):
                fn()
            end.record()
            end.synchronize()
            took = start.elapsed_time(end) / 1e3 / DeviceTiming.CALLS
            best = took if best is None else min(best, took)
        return best


def library_attention(sdpa, ops, buffer, causal, scale):
    """The library's attention of these operands as a function of the
    query, key, value and mask, with Kiln's semantics, its result as the
    step's `buffer` (size, stride, dtype, heads_inner): key and value batch
    or head dims of 1 are expanded, key and value heads that divide the
    query's are grouped (`enable_gqa`, or each repeated where the library
    has no such argument), and the result is copied into the planned
    strides only where the library chose others (its flash and cuDNN
    kernels write `[B, L, H, Ev]`). Raises where the library cannot take
    the step."""
    size, stride, dtype, heads_inner = buffer
    q, k, v, mask = ops
    rank = len(q.shape)
    if rank not in (3, 4) or len(k.shape) != rank or len(v.shape) != rank:
        raise ValueError(f"operands of rank {rank}, {len(k.shape)} and {len(v.shape)}")
    if causal and mask is not None:
        # The library takes a mask or `is_causal`, not both.
        raise ValueError("a causal attention with a mask")
    if q.dtype != dtype or k.dtype != dtype or v.dtype != dtype:
        raise ValueError(f"operands of {q.dtype}, {k.dtype} and {v.dtype} into {dtype}")
    # Batch (and, with rank 4, head) dims of 1 broadcast over the query's.
    lead = list(q.shape[:rank - 2])
    group = 1
    if rank == 4:
        h, hk = q.shape[1], k.shape[1]
        if hk != v.shape[1]:
            raise ValueError(f"key and value of {hk} and {v.shape[1]} heads")
        if hk not in (1, h):
            if h % hk:
                raise ValueError(f"{h} query heads over {hk} key/value heads")
            group, lead[1] = h // hk, hk
    expand = tuple(k.shape[:rank - 2]) != tuple(lead)

    def grown(t):
        return t.expand(*lead, *t.shape[rank - 2:]) if expand else t

    # The result's size and strides in the buffer.
    want_size, want_stride = list(size), list(stride)
    if heads_inner:
        if rank != 4:
            raise ValueError(f"a [B, L, H, Ev] buffer for operands of rank {rank}")
        want_size[1], want_size[2] = want_size[2], want_size[1]
        want_stride[1], want_stride[2] = want_stride[2], want_stride[1]
    want_size, want_stride = tuple(want_size), tuple(want_stride)

    def bound(t):
        if t.stride() != want_stride or t.storage_offset() != 0:
            t = t.new_empty_strided(want_size, want_stride).copy_(t)
        return t.transpose(1, 2) if heads_inner else t

    def call(q, k, v, mask):
        return bound(sdpa(q, grown(k), grown(v), attn_mask=mask, is_causal=causal, scale=scale))

    def grouped(q, k, v, mask):
        return bound(sdpa(q, grown(k), grown(v), attn_mask=mask, is_causal=causal, scale=scale,
                          enable_gqa=True))

    def repeated(q, k, v, mask):
        k = grown(k).repeat_interleave(group, dim=1)
        v = grown(v).repeat_interleave(group, dim=1)
        return bound(sdpa(q, k, v, attn_mask=mask, is_causal=causal, scale=scale))

    if group == 1:
        return call
    try:
        grouped(*ops)
        return grouped
    except TypeError:  # a library without `enable_gqa`
        return repeated


def dynamic_attention(sdpa):
    """The attention of a step of dynamic shapes: the library's, at each call's sizes
    (Kiln's attention kernel is generated for one size). `size` and `stride` are
    the step's buffer at those sizes. The library call is planned once per set of
    operand shapes and buffer (the layers of a model share one)."""
    plans = {}

    def run(q, k, v, mask, size, stride, dtype, causal, scale, heads_inner):
        key = (q.shape, k.shape, v.shape, None if mask is None else mask.shape, size, stride, dtype, causal,
               scale, heads_inner)
        call = plans.get(key)
        if call is None:
            call = library_attention(sdpa, (q, k, v, mask), (size, stride, dtype, heads_inner), causal, scale)
            if len(plans) > 4096:
                plans.clear()
            plans[key] = call
        return call(q, k, v, mask)

    return run


class Attention:
    """The choice between Kiln's attention kernel and the library's for each
    attention signature of a generated file (`signatures[i]` is the output
    buffer's size, stride and dtype, `causal`, `scale`, and whether the buffer
    is `[B, L, H, Ev]`, the transpose of the `[B, H, L, Ev]` result; the steps
    of every layer of a model share one).

    `run(i, kiln, operands)` computes one step: `kiln(out)` launches Kiln's
    kernel into `out`, `operands()` gives the query, key, value and mask (or
    None) as the library reads them. A step of dynamic shapes passes
    `shape=(bucket, size, stride)`: its buffer's size and strides at this call
    (the signature has None for them), and the call's bucket of sizes
    (`size_bucket`), for which the choice is made and kept apart (`by_size`,
    `by_size_report`), as a static compile's first call makes it for its one
    size. Its `kiln` is a tuple of launches, Kiln's kernel with the tiles the
    plugin's heuristics give at sizes across the range: each bucket takes the
    fastest of them (its index), or the library's. The first call of a signature (or bucket) outside a graph capture
    times both (a warm-up, then the best of a few rounds between
    device synchronizations: a few milliseconds), checks that they agree, and
    keeps the faster for the rest of the process. The library is never chosen
    where it raises (no such function on the device, a mask or layout it does
    not take) or disagrees with Kiln's kernel. During a capture a signature not
    chosen yet runs Kiln's kernel, untimed.

    KILN_ATTENTION=kiln or =library forces a side (the library still falls back
    to Kiln's kernel where it raises); =measure, the default, measures."""

    MODES = ("measure", "kiln", "library")
    ROUNDS = DeviceTiming.ROUNDS

    def __init__(self, sdpa, empty, synchronize, device, signatures, timer=None, environ=None):
        """`device` is torch's module of the device type (`torch.cuda`), or None:
        its `is_current_stream_capturing` tells a graph capture, and its `_sleep`
        and `Event`, where it has both, time the device's work alone."""
        import os

        self._sdpa, self._empty = sdpa, empty
        self._capturing = getattr(device, "is_current_stream_capturing", None) or (lambda: False)
        self._timing = DeviceTiming(synchronize, device, timer)
        self._signatures = list(signatures)
        environ = os.environ if environ is None else environ
        self.mode = environ.get("KILN_ATTENTION", "measure") or "measure"
        if self.mode not in Attention.MODES:
            raise RuntimeError(
                f"Kiln: KILN_ATTENTION={self.mode!r} is not one of {', '.join(Attention.MODES)} "
                "(measure, the default, times Kiln's attention kernel against the library's)")
        # Per signature: None until chosen, then KILN or the library's closure.
        self.chosen = [None] * len(self._signatures)
        # Per signature, what the choice measured: {"kiln": s, "library": s or None, "why": text}.
        self.report = [None] * len(self._signatures)
        # The same for steps of dynamic shapes, by (signature, bucket of sizes).
        self.by_size = {}
        self.by_size_report = {}

    KILN = "kiln"

    def run(self, i, kiln, operands, shape=None):
        if shape is None:
            slot, (size, stride) = i, self._signatures[i][:2]
            side = self.chosen[i]
        else:
            bucket, size, stride = shape
            slot = (i, bucket)
            side = self.by_size.get(slot)
        if side is Attention.KILN:
            return self._kiln(i, kiln, size, stride)
        if isinstance(side, int):  # one of a dynamic step's tile variants
            return self._kiln(i, kiln[side], size, stride)
        if side is not None:
            return side(*operands())
        if self._capturing():
            return self._kiln(i, kiln[0] if isinstance(kiln, tuple) else kiln, size, stride)
        return self._choose(slot, kiln, operands, size, stride)

    def _kiln(self, i, kiln, size, stride):
        out = self._empty(size, stride, self._signatures[i][2])
        kiln(out)
        return out

    def _keep(self, slot, side, report):
        """Keeps the choice of a signature (an index) or of a bucket of one
        (`(index, bucket)`)."""
        if isinstance(slot, tuple):
            self.by_size[slot], self.by_size_report[slot] = side, report
        else:
            self.chosen[slot], self.report[slot] = side, report

    def _choose(self, slot, kiln, operands, size, stride):
        """The first call of a signature (or of a bucket of one): chooses, and
        returns its result."""
        import logging

        log = logging.getLogger("kiln.attention")
        i = slot[0] if isinstance(slot, tuple) else slot
        dtype, causal, scale, heads_inner = self._signatures[i][2:]
        kilns = kiln if isinstance(kiln, tuple) else (kiln,)
        mine = self._kiln(i, kilns[0], size, stride)
        library, theirs, why = None, None, None
        if self.mode != "kiln":
            try:
                library = self.library_call(operands(), (size, stride, dtype, heads_inner), causal, scale)
                theirs = library(*operands())
                if not Attention.agree(mine, theirs, dtype):
                    library, why = None, "its result differs from Kiln's kernel's"
            except Exception as error:  # the library cannot compute this step
                library, why = None, f"{type(error).__name__}: {error}"
        if library is None:
            if self.mode == "library":
                import warnings

                warnings.warn(f"Kiln: KILN_ATTENTION=library, but the library cannot compute attention "
                              f"signature {i} ({why}); Kiln's kernel runs it", stacklevel=3)
            why = why or f"KILN_ATTENTION={self.mode}"
            if len(kilns) == 1:
                self._keep(slot, Attention.KILN, {"kiln": None, "library": None, "why": why})
                log.debug("attention signature %s: Kiln's kernel (%s)", slot, why)
                return mine
        elif self.mode == "library":
            self._keep(slot, library, {"kiln": None, "library": None, "why": "KILN_ATTENTION=library"})
            return theirs
        ops = operands()
        times = [self._timing.time(lambda k=k: self._kiln(i, k, size, stride)) for k in kilns]
        best = min(range(len(kilns)), key=times.__getitem__)
        kiln_s, library_s = times[best], None
        if library is not None:
            try:
                library_s = self._timing.time(lambda: library(*ops))
            except Exception as error:  # as above: Kiln's kernel runs it
                why = f"{type(error).__name__}: {error}"
        faster = library_s is not None and library_s < kiln_s
        why = why or "measured"
        report = {"kiln": kiln_s, "library": library_s, "why": why}
        if len(kilns) > 1:
            report["variants"] = times
        self._keep(slot, library if faster else (best if len(kilns) > 1 else Attention.KILN), report)
        log.debug("attention signature %s: %s (%s; Kiln's kernel %.1f µs, the library %s µs)",
                  slot, "the library" if faster else "Kiln's kernel", why, kiln_s * 1e6,
                  "-" if library_s is None else f"{library_s * 1e6:.1f}")
        return theirs if faster else mine

    def library_call(self, ops, buffer, causal, scale):
        """`library_attention` with this object's library function."""
        return library_attention(self._sdpa, ops, buffer, causal, scale)

    @staticmethod
    def agree(mine, theirs, dtype):
        """Whether the library's result is Kiln's kernel's within the dtype's
        rounding (a guard against a semantics or layout mismatch; a row that
        keeps no key is zeros on both sides, and not-a-number in an input must
        give not-a-number in the same places)."""
        if tuple(mine.shape) != tuple(theirs.shape) or mine.dtype != theirs.dtype:
            return False
        tolerance = {"torch.float32": 5e-3, "torch.float16": 2e-2}.get(str(dtype), 1e-1)
        return bool(mine.float().allclose(theirs.float(), rtol=tolerance, atol=tolerance, equal_nan=True))


# A float32 product with its bias: the library's bias epilogue (`torch.addmm`,
# cuBLASLt's epilogue on CUDA) or the plain product and then the bias added in
# place, whichever its signature's first call measures faster. In 16 bits the
# epilogue costs the product at most a few percent and the wrapper calls it
# directly; in float32 it is free for some shapes and 1.2-1.5x the product for
# others (bench/gpu/results/2026-11-26-bias-epilogue-h100.txt).


class BiasEpilogue:
    """The choice between `addmm(bias, a, b, out=out)` and `mm(a, b, out=out)`
    then `out.add_(bias)` for each float32 product-with-bias signature of a
    generated file (`count` of them; the steps of a model's layers share one).

    `run(i, bias, a, b, out)` computes one step into `out` and returns it. The
    first call of a signature outside a graph capture times both (DeviceTiming)
    and keeps the faster for the rest of the process; during a capture a
    signature not chosen yet runs the epilogue, untimed. A step of dynamic shapes
    passes the bucket of the call's sizes (`size_bucket`) as `bucket`: the choice
    is then made and kept per signature and bucket (`by_size`, `by_size_report`),
    as the faster side at one size may be the slower at another. KILN_BIAS=epilogue
    or =add forces a side; =measure, the default, measures."""

    MODES = ("measure", "epilogue", "add")
    EPILOGUE = "epilogue"
    ADD = "add"

    def __init__(self, addmm, mm, synchronize, device, count, timer=None, environ=None):
        import os

        self._addmm, self._mm = addmm, mm
        self._capturing = getattr(device, "is_current_stream_capturing", None) or (lambda: False)
        self._timing = DeviceTiming(synchronize, device, timer)
        environ = os.environ if environ is None else environ
        self.mode = environ.get("KILN_BIAS", "measure") or "measure"
        if self.mode not in BiasEpilogue.MODES:
            raise RuntimeError(
                f"Kiln: KILN_BIAS={self.mode!r} is not one of {', '.join(BiasEpilogue.MODES)} "
                "(measure, the default, times the library's bias epilogue against a product and an add)")
        forced = None if self.mode == "measure" else self.mode
        # Per signature: None until chosen, then EPILOGUE or ADD.
        self.chosen = [forced] * count
        # Per signature, what the choice measured: {"epilogue": s, "add": s}.
        self.report = [None] * count
        self._forced = forced
        # The same for steps of dynamic shapes, by (signature, bucket of sizes).
        self.by_size = {}
        self.by_size_report = {}

    def run(self, i, bias, a, b, out, bucket=None):
        slot = i if bucket is None else (i, bucket)
        side = self.chosen[i] if bucket is None else self.by_size.get(slot, self._forced)
        if side is None:
            if self._capturing():
                side = BiasEpilogue.EPILOGUE
            else:
                side = self._choose(slot, bias, a, b, out)
        if side == BiasEpilogue.EPILOGUE:
            self._addmm(bias, a, b, out=out)
        else:
            self._mm(a, b, out=out)
            out.add_(bias)
        return out

    def _choose(self, slot, bias, a, b, out):
        """Times both sides for a signature (an index) or a bucket of one (`(index,
        bucket)`), keeps the faster, and returns it."""
        import logging

        def epilogue():
            self._addmm(bias, a, b, out=out)

        def add():
            self._mm(a, b, out=out)
            out.add_(bias)

        times = {BiasEpilogue.EPILOGUE: self._timing.time(epilogue), BiasEpilogue.ADD: self._timing.time(add)}
        side = min(times, key=lambda k: (times[k], k != BiasEpilogue.EPILOGUE))
        if isinstance(slot, tuple):
            self.by_size[slot], self.by_size_report[slot] = side, times
        else:
            self.chosen[slot], self.report[slot] = side, times
        logging.getLogger("kiln.bias").debug(
            "bias signature %s: %s (epilogue %.1f µs, product and add %.1f µs)", slot, side,
            times[BiasEpilogue.EPILOGUE] * 1e6, times[BiasEpilogue.ADD] * 1e6)
        return side
