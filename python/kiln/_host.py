"""Finding and running the Kiln compiler (`host`)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

from ._errors import DeviceNotFound, KilnError

_LOCK = threading.Lock()
# `host list --json` per compiler and plugin folders: what devices there are.
_LISTS: dict = {}

HERE = Path(__file__).resolve().parent


def find_host() -> Path:
    """The compiler: $KILN_HOST, else the one this package was installed with
    (kiln/bin/host), else, in a checkout of the repository, its release or debug build."""
    named = os.environ.get("KILN_HOST")
    if named:
        path = Path(named)
        if not path.is_file():
            raise KilnError(f"KILN_HOST={named} is not a file: point it at Kiln's `host` binary")
        return path
    candidates = [HERE / "bin" / "host"]
    repo = HERE.parent.parent
    if (repo / "Cargo.toml").is_file():
        candidates += [repo / "target" / "release" / "host", repo / "target" / "debug" / "host"]
    for path in candidates:
        if path.is_file():
            return path
    raise KilnError("Kiln's compiler (`host`) was not found: install the package with `pip install ./python` "
                    "from the repository (it builds and carries the compiler), or set KILN_HOST to a `host` "
                    "binary (cargo build --release -p kiln-host)")


def version(host: Path) -> str:
    """`host --version`, with the binary's path, size and modification time: what keys the
    compile cache for the compiler (two builds of one version generate different code)."""
    done = subprocess.run([str(host), "--version"], capture_output=True, text=True)
    if done.returncode != 0:
        raise KilnError(f"{host} --version failed: {done.stderr.strip()}")
    stat = os.stat(host)
    return f"{done.stdout.strip()} {Path(host).resolve()} {stat.st_size} {stat.st_mtime_ns}"


def plugin_of(host: Path, device: str, plugins: tuple[str, ...]) -> dict:
    """The plugin that provides `device` ("cuda:1" is cuda's), as `host list --json`
    describes it (name, version, API version, path, ...), its library's size and
    modification time added; DeviceNotFound names the devices there are."""
    with _LOCK:
        listing = _LISTS.get((str(host), plugins))
        if listing is None:
            cmd = [str(host)] + [arg for folder in plugins for arg in ("--plugins", str(folder))] + ["list", "--json"]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                raise KilnError(f"`{' '.join(cmd)}` failed: {done.stderr.strip()}")
            listing = json.loads(done.stdout)
            _LISTS[(str(host), plugins)] = listing
    name = device.split(":")[0]
    found = next((d for d in listing.get("devices", []) if d.get("name") == name), None)
    if found is None:
        names = ", ".join(d.get("name", "?") for d in listing.get("devices", [])) or "none"
        searched = ", ".join(str(s.get("path", s)) if isinstance(s, dict) else str(s)
                             for s in listing.get("searched", []))
        raise DeviceNotFound(f"no plugin provides the device `{name}`; available devices: {names}; searched: "
                             f"{searched} (add a plugin folder: plugins=[DIR] for kiln.compile, options={{'plugins': [DIR]}} "
                             "for torch.compile, or KILN_PLUGIN_PATH)")
    entry = {k: v for k, v in found.items() if k != "status"}
    try:
        stat = os.stat(found["path"])
        entry["file"] = [stat.st_size, stat.st_mtime_ns]
    except (KeyError, OSError):
        pass
    return entry


def compile_archive(host: Path, archive: Path, device: str, out: Path, plugins: tuple[str, ...],
                    sizes: dict | None = None, dynamic: bool = False) -> None:
    """`host compile ARCHIVE --device DEVICE -o OUT` (with `--library` for the cpu, whose
    wrapper.cpp is built into OUT/kiln.so), an export with dynamic shapes specialised at
    `sizes` (`{"s27": 128}`, `--specialize`) or compiled for its whole range (`dynamic`,
    `--dynamic`). Raises KilnError with the compiler's message."""
    cmd = [str(host)]
    for folder in plugins:
        cmd += ["--plugins", str(folder)]
    cmd += ["compile", str(archive), "--device", device, "-o", str(out)]
    for name, value in sorted((sizes or {}).items()):
        cmd += ["--specialize", f"{name}={value}"]
    if dynamic:
        cmd.append("--dynamic")
    if device.split(":")[0] == "cpu":
        cmd.append("--library")
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.strip().splitlines() if line.strip()]
        # The archive is this compile's temporary file: say "the graph" for its path.
        message = " ".join(lines).replace(f"in {archive}: ", "").replace(str(archive), "the graph")
        if message.startswith("error: "):
            message = message[len("error: "):]
        raise KilnError(message or f"`{' '.join(cmd)}` exited with {done.returncode}")
