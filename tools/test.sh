#!/usr/bin/env bash
# README.md's test command: builds the workspace and runs the whole test suite.
#
# The tests compile every generated Triton kernel with the real Triton compiler,
# so this installs Triton once into a virtual environment under target/ (reused
# by later runs; `cargo clean` removes it), and PyTorch into another for the
# Python package's tests. Set KILN_PYTHON to a Python that
# already has Triton to use it instead. Extra arguments go to `cargo test`
# (e.g. `tools/test.sh -p kiln-tests --test goldens`).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${KILN_PYTHON:-}" ]; then
  venv=target/test-python
  python="$PWD/$venv/bin/python3"
  if ! "$python" -c "import triton" >/dev/null 2>&1; then
    echo "== installing Triton into $venv (once; later runs reuse it)"
    if ! python3 -m venv "$venv"; then
      echo "error: \`python3 -m venv\` failed: install Python's venv module (Debian/Ubuntu: apt install python3-venv)," >&2
      echo "       or set KILN_PYTHON to a Python that has Triton (pip install triton)" >&2
      exit 1
    fi
    "$python" -m pip install --quiet --disable-pip-version-check triton
  fi
  export KILN_PYTHON="$python"
fi
"$KILN_PYTHON" -c "import triton, sys; print('Triton', triton.__version__, 'for', sys.executable)"

# The Python package (python/) is tested under PyTorch: torch, torchvision and transformers
# go into a second environment, target/torch-python (once; later runs reuse it; torch pins
# its own Triton, so it does not share the one above). Set KILN_TORCH_PYTHON to a Python
# that has them to use it instead; the package is installed into it either way.
if [ -z "${KILN_TORCH_PYTHON:-}" ]; then
  venv=target/torch-python
  torch_python="$PWD/$venv/bin/python3"
  if ! "$torch_python" -c "import torch, torchvision, transformers" >/dev/null 2>&1; then
    echo "== installing PyTorch, torchvision and transformers into $venv (once; later runs reuse it)"
    python3 -m venv "$venv"
    "$torch_python" -m pip install --quiet --disable-pip-version-check torch torchvision transformers
  fi
  export KILN_TORCH_PYTHON="$torch_python"
fi
"$KILN_TORCH_PYTHON" -c "import torch, sys; print('PyTorch', torch.__version__, 'for', sys.executable)"

cargo build --workspace
# The package as `pip install ./python` builds it, carrying this build's compiler and plugins.
KILN_BINARIES=target/debug "$KILN_TORCH_PYTHON" -m pip install --quiet --disable-pip-version-check \
  --no-deps --no-build-isolation --force-reinstall ./python
# Every test binary runs even when one fails, so one report shows everything.
cargo test --workspace --no-fail-fast "$@"
