#!/usr/bin/env bash
# README.md's test command: builds the workspace and runs the whole test suite.
#
# The tests compile every generated Triton kernel with the real Triton compiler,
# so this installs Triton once into a virtual environment under target/ (reused
# by later runs; `cargo clean` removes it). Set KILN_PYTHON to a Python that
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

cargo build --workspace
# Every test binary runs even when one fails, so one report shows everything.
cargo test --workspace --no-fail-fast "$@"
