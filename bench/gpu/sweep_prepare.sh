#!/usr/bin/env bash
# Writes the general-shape sweep (bench/gpu/sweep.py) and compiles every case for the
# Triton devices into bench/gpu/sweep_cases/<device>/<case>/ with its graph.toml, ready
# for `python3 bench/gpu/run.py bench/gpu/sweep_cases` on the GPU machine (carry the
# folder). Extra arguments go to every `host compile` (e.g. --autotune).
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -p kiln-host -p kiln-plugin-cuda -p kiln-plugin-gxu
rm -rf bench/gpu/sweep_cases
python3 bench/gpu/sweep.py bench/gpu/sweep_cases/graphs
for device in ${SWEEP_DEVICES:-cuda gxu}; do
  for graph in bench/gpu/sweep_cases/graphs/*.toml; do
    name=$(basename "$graph" .toml)
    out="bench/gpu/sweep_cases/$device/$name"
    target/release/host compile "$graph" --device "$device" -o "$out" "$@" >/dev/null
    cp "$graph" "$out/graph.toml"
  done
done
rm -rf bench/gpu/sweep_cases/graphs
echo "compiled $(find bench/gpu/sweep_cases -name output_code.py | wc -l) case(s) under bench/gpu/sweep_cases"
