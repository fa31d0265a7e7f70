#!/usr/bin/env bash
# The kiln package's checks (tests/support/torch_backend.py) on CUDA, on the GPU machine: the
# package installed with pip from the checkout, its compiler and plugins taken from a staged
# build (bench/gpu/ab_stage.sh NAME on the build machine; carry bench/gpu/ab/NAME), into a
# folder of its own, so `torch.compile(model, backend="kiln")` finds it by its entry point as
# after a user's install.
#
#   bash bench/gpu/torch_backend_checks.sh NAME
set -euo pipefail
cd "$(dirname "$0")/../.."
name=${1:?usage: torch_backend_checks.sh NAME}
site=$(mktemp -d)
if ! KILN_BINARIES="bench/gpu/ab/$name" python3 -m pip install --no-deps --no-build-isolation --no-index \
    --target "$site/lib" ./python >"$site/pip.log" 2>&1; then
  tail -20 "$site/pip.log"
  exit 1
fi
env -u KILN_HOST PYTHONPATH="$site/lib" KILN_CACHE_DIR="$site/cache" \
  python3 tests/support/torch_backend.py . --device cuda
