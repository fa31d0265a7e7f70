#!/usr/bin/env bash
# Stages this checkout's release build for the GPU machine (which has no Rust):
# a stripped host and the cuda, gxu, cpu and xpu plugins in bench/gpu/ab/NAME/.
# Stage two builds (say `old` from one commit, `new` from another), carry
# bench/gpu/ab and bench/gpu/graphs to the GPU machine, and run ab_cases.sh there.
#
#   bash bench/gpu/ab_stage.sh NAME
set -euo pipefail
cd "$(dirname "$0")/../.."
name=${1:?usage: ab_stage.sh NAME}
cargo build --release --workspace
dir=bench/gpu/ab/$name
rm -rf "$dir" && mkdir -p "$dir/plugins"
strip -o "$dir/host" target/release/host
for p in cuda gxu cpu xpu; do strip -o "$dir/plugins/libkiln_$p.so" "target/release/libkiln_$p.so"; done
# The graphs prepare.sh compiles (tests/graphs and the hostile-name graphs).
[ -d bench/gpu/graphs ] || {
  mkdir -p bench/gpu/graphs
  for graph in tests/graphs/*.toml; do
    mkdir -p "bench/gpu/graphs/$(basename "$graph" .toml)"
    cp "$graph" "bench/gpu/graphs/$(basename "$graph" .toml)/graph.toml"
  done
  cargo run --release -q -p kiln-tests --example name_graphs -- bench/gpu/graphs
}
echo "staged: $(du -sh "$dir" | cut -f1) in $dir"
