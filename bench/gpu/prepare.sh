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
# The torch.export archives of ../shared/fixtures/pt2, each with its input and
# PyTorch's expected output beside the generated code.
fixtures=../shared/fixtures/pt2
if [ -d "$fixtures" ]; then
  for device in cuda gxu; do
    for archive in "$fixtures"/*.pt2; do
      name=$(basename "$archive" .pt2)
      model=${name%_core}
      out="bench/gpu/cases/$device/pt2_$name"
      target/release/host compile "$archive" --device "$device" -o "$out" "$@"
      cp "$archive" "$out/model.pt2"
      cp "$fixtures/$model.input0.bin" "$out/input0.bin"
      cp "$fixtures/$model.expected0.bin" "$out/expected0.bin"
      cp "$fixtures/$model.json" "$out/model.json"
    done
  done
fi
done
