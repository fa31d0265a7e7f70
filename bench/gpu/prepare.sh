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
#
# On a machine without Rust (the GPU machine), set KILN_HOST to a staged host
# (its plugins in plugins/ beside it, as `ab_stage.sh` leaves them) and
# KILN_CASES to the folder to write: nothing is built, and bench/gpu/graphs must
# already hold the test graphs (made here by a run without KILN_HOST).
set -euo pipefail
cd "$(dirname "$0")/../.."
cases=${KILN_CASES:-bench/gpu/cases}
if [ -n "${KILN_HOST:-}" ]; then
  host=("$KILN_HOST" --plugins "$(dirname "$KILN_HOST")/plugins")
  [ -d bench/gpu/graphs ] || { echo "error: bench/gpu/graphs is missing: run prepare.sh once without KILN_HOST" >&2; exit 1; }
else
  cargo build --release --workspace
  host=(target/release/host)
  rm -rf bench/gpu/graphs
  mkdir -p bench/gpu/graphs
  for graph in tests/graphs/*.toml; do
    name=$(basename "$graph" .toml)
    mkdir -p "bench/gpu/graphs/$name"
    cp "$graph" "bench/gpu/graphs/$name/graph.toml"
  done
  cargo run --release -q -p kiln-tests --example name_graphs -- bench/gpu/graphs
fi
rm -rf "$cases"
for device in cuda gxu; do
  for graph in examples/*.toml; do
    name=$(basename "$graph" .toml)
    "${host[@]}" compile "$graph" --device "$device" -o "$cases/$device/$name" "$@"
  done
  for folder in bench/gpu/graphs/*/; do
    name=$(basename "$folder")
    out="$cases/$device/$name"
    "${host[@]}" compile "$folder/graph.toml" --device "$device" -o "$out" "$@"
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
      out="$cases/$device/pt2_$name"
      "${host[@]}" compile "$archive" --device "$device" -o "$out" "$@"
      cp "$archive" "$out/model.pt2"
      cp "$fixtures/$model".input*.bin "$fixtures/$model".expected*.bin "$out/"
      for f in "$out/$model".input*.bin "$out/$model".expected*.bin; do
        mv "$f" "$out/${f##*/$model.}"
      done
      cp "$fixtures/$model.json" "$out/model.json"
    done
  done
done
