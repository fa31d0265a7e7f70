#!/usr/bin/env bash
# Builds the host and plugins (release) and compiles, for the Triton devices,
# into bench/gpu/cases/<device>/<case>/ (ready for run.py on a GPU machine;
# copy the folder there, or carry it with the repository):
# - every example graph (run.py reads it again from examples/);
# - every graph of tests/graphs/ (graphs that once went wrong) and the two
#   graphs whose names are every name generated code binds, each with its
#   graph.toml beside the code;
# - the torch.export archives of tests/fixtures/pt2, each with its input
#   and PyTorch's expected output beside the generated code.
# Extra arguments go to every `host compile` (e.g. --autotune).
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --workspace
rm -rf bench/gpu/cases bench/gpu/graphs
mkdir -p bench/gpu/graphs
for graph in tests/graphs/*.toml; do
  name=$(basename "$graph" .toml)
  mkdir -p "bench/gpu/graphs/$name"
  cp "$graph" "bench/gpu/graphs/$name/graph.toml"
done
cargo run --release -q -p kiln-tests --example name_graphs -- bench/gpu/graphs
for device in cuda gxu; do
  for graph in examples/*.toml; do
    name=$(basename "$graph" .toml)
    target/release/host compile "$graph" --device "$device" -o "bench/gpu/cases/$device/$name" "$@"
  done
  for folder in bench/gpu/graphs/*/; do
    name=$(basename "$folder")
    out="bench/gpu/cases/$device/$name"
    target/release/host compile "$folder/graph.toml" --device "$device" -o "$out" "$@"
    cp "$folder/graph.toml" "$out/graph.toml"
  done
done
# The torch.export archives of tests/fixtures/pt2 and the model zoo of
# tests/fixtures/models, each with its inputs and PyTorch's expected outputs.
for fixtures in tests/fixtures/pt2 tests/fixtures/models; do
  [ -d "$fixtures" ] || continue
  for device in cuda gxu; do
    for archive in "$fixtures"/*.pt2; do
      name=$(basename "$archive" .pt2)
      case "$name" in *skeleton*) continue ;; esac
      model=${name%_core}
      out="bench/gpu/cases/$device/pt2_$name"
      target/release/host compile "$archive" --device "$device" -o "$out" "$@"
      cp "$archive" "$out/model.pt2"
      cp "$fixtures/$model".input*.bin "$fixtures/$model".expected*.bin "$out/"
      for f in "$out/$model".input*.bin "$out/$model".expected*.bin; do
        mv "$f" "$out/${f##*/$model.}"
      done
      cp "$fixtures/$model.json" "$out/model.json"
    done
  done
done
