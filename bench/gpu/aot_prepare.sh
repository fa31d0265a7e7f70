#!/usr/bin/env bash
# Compiles, for cuda with the C++ wrapper (`host compile --wrapper cpp`), every
# example graph, every graph of tests/graphs/, every torch.export archive of
# tests/fixtures/pt2 and the decode-sized graphs of the sweep into
# bench/gpu/aot_cases/cuda/<case>/: kernels.py, kernels/ (the compiled
# kernels), wrapper.cpp, weights.safetensors where the graph has weights, the
# graph or the archive's inputs and expected outputs beside them (as
# prepare.sh lays them out), and an output_code.py shim that builds
# wrapper.cpp into kiln.so and calls it through ctypes (bench/gpu/aot_loader.py),
# so that run.py checks and times it like any case:
#
#   python3 bench/gpu/run.py bench/gpu/aot_cases --no-compile
#   python3 bench/gpu/aot_bench.py bench/gpu/aot_cases/cuda/*     # host overhead per call, CUDA graphs
#
# The decode-sized graphs are also compiled with --cuda-graph (<case>_cuda_graph).
# A graph the C++ wrapper cannot take (a convolution) is reported and skipped.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --workspace
out_root=bench/gpu/aot_cases/cuda
rm -rf bench/gpu/aot_cases bench/gpu/aot_python
mkdir -p "$out_root"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

shim() {
  cat > "$1/output_code.py" <<'PY'
# Kiln's wrapper.cpp beside this file, built into kiln.so and called through
# ctypes (bench/gpu/aot_loader.py), with the interface run.py expects of
# output_code.py: call(args) -> outputs, KERNEL_META.
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from aot_loader import AotModule  # noqa: E402

_module = AotModule(os.path.dirname(os.path.abspath(__file__)))
call = _module.call
KERNEL_META = _module.kernel_meta
PY
}

compile_case() {  # graph-or-archive name [extra host compile flags]
  local source=$1 name=$2 out="$out_root/$2"
  if ! target/release/host compile "$source" --device cuda --wrapper cpp "${@:3}" -o "$out" >"$work/log" 2>&1; then
    echo "skipped $name: $(grep -m1 'error' "$work/log" || tail -1 "$work/log")"
    rm -rf "$out"
    return 1
  fi
  shim "$out"
}

for graph in examples/*.toml; do
  compile_case "$graph" "$(basename "$graph" .toml)" || true
done
for graph in examples/small_*.toml; do
  name=$(basename "$graph" .toml)_cuda_graph
  compile_case "$graph" "$name" --cuda-graph && cp "$graph" "$out_root/$name/graph.toml" || true
done
mkdir -p "$work/graphs"
for graph in tests/graphs/*.toml; do
  name=$(basename "$graph" .toml)
  mkdir -p "$work/graphs/$name"
  cp "$graph" "$work/graphs/$name/graph.toml"
done
# And the graphs whose names are every name generated code binds.
cargo run --release -q -p kiln-tests --example name_graphs -- "$work/graphs"
for folder in "$work"/graphs/*/; do
  name=$(basename "$folder")
  compile_case "$folder/graph.toml" "$name" && cp "$folder/graph.toml" "$out_root/$name/graph.toml" || true
done
python3 bench/gpu/sweep.py "$work/sweep" >/dev/null
for graph in "$work"/sweep/decode_*.toml; do
  name=$(basename "$graph" .toml)
  compile_case "$graph" "$name" && cp "$graph" "$out_root/$name/graph.toml" || true
  # The same with the call captured into a CUDA graph by the wrapper itself.
  compile_case "$graph" "${name}_cuda_graph" --cuda-graph && cp "$graph" "$out_root/${name}_cuda_graph/graph.toml" || true
  # The Python wrapper of the same graph, for aot_bench.py's comparison.
  target/release/host compile "$graph" --device cuda -o "bench/gpu/aot_python/cuda/$name" >/dev/null
done
for archive in tests/fixtures/pt2/*.pt2; do
  name=$(basename "$archive" .pt2)
  model=${name%_core}
  out="$out_root/pt2_$name"
  compile_case "$archive" "pt2_$name" || continue
  cp "$archive" "$out/model.pt2"
  for f in tests/fixtures/pt2/"$model".input*.bin tests/fixtures/pt2/"$model".expected*.bin; do
    cp "$f" "$out/${f##*/$model.}"
  done
  cp "tests/fixtures/pt2/$model.json" "$out/model.json"
done
echo "compiled $(find bench/gpu/aot_cases -name wrapper.cpp | wc -l) case(s) under bench/gpu/aot_cases"
