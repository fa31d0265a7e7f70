"""Builds the `kiln` package with Kiln's compiler and bundled plugins inside it (kiln/bin/).

`pip install ./python` (from the repository's root) runs `cargo build --release` for the
`host` binary and the cuda, xpu, gxu and cpu plugins and copies them into the package,
where `host` finds its plugins beside itself. With $KILN_BINARIES set to a folder that
already holds them (absolute, or relative to the repository's root: target/release,
target/debug as the tests use, or a staged bench/gpu/ab/NAME with its plugins/), they are copied from there and cargo does not run. The copies'
debug info is stripped where `strip` is on PATH.
"""

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

REPO = Path(__file__).resolve().parent.parent
PLUGINS = ("cuda", "xpu", "gxu", "cpu")
BINARIES = ["host"] + [f"libkiln_{p}.so" for p in PLUGINS]


class BuildWithCompiler(build_py):
    def run(self):
        super().run()
        given = os.environ.get("KILN_BINARIES")
        if given:
            source = Path(given) if Path(given).is_absolute() else REPO / given
        else:
            packages = ["-p", "kiln-host"]
            for p in PLUGINS:
                packages += ["-p", f"kiln-plugin-{p}"]
            subprocess.run(["cargo", "build", "--release", *packages], cwd=REPO, check=True)
            source = REPO / "target" / "release"
        # A plugin may also be in plugins/ beside the host (bench/gpu/ab_stage.sh's layout).
        found = {name: next((p for p in (source / name, source / "plugins" / name) if p.is_file()), None)
                 for name in BINARIES}
        missing = [name for name, path in found.items() if path is None]
        if missing:
            raise SystemExit(f"{source} lacks {', '.join(missing)}: build them (cargo build --release) or "
                             "point KILN_BINARIES at a folder that has them")
        dest = Path(self.build_lib) / "kiln" / "bin"
        dest.mkdir(parents=True, exist_ok=True)
        strip = shutil.which("strip")
        for name in BINARIES:
            shutil.copy2(found[name], dest / name)
            if strip:  # the release profile keeps debug info: 51 MB of host become about 8
                subprocess.run([strip, "--strip-debug", str(dest / name)], check=True)


class BinaryDistribution(Distribution):
    """The wheel carries native binaries: tag it for this platform."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithCompiler}, distclass=BinaryDistribution)
