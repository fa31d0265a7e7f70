#!/usr/bin/env bash
# Builds the host and plugins (release) and compiles every example for the
# Triton devices into bench/gpu/cases/<device>/<graph>/, ready for run.py on a
# GPU machine (copy the folder there, or carry it with the repository).
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --workspace
rm -rf bench/gpu/cases
for device in cuda gxu; do
  for graph in examples/*.toml; do
    name=$(basename "$graph" .toml)
    target/release/host compile "$graph" --device "$device" -o "bench/gpu/cases/$device/$name" "$@"
  done
done
