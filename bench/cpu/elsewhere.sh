#!/usr/bin/env bash
# The cpu device on another machine (one without Rust): every small example
# compiled, run and checked against the reference, then bench/cpu/run.py with
# all cores and with two. Build here, copy the binaries beside each other:
#
#   cargo build --release --workspace
#   mkdir -p remote/kiln && cp target/release/host target/release/libkiln_cpu.so remote/kiln/
#   strip remote/kiln/*            # optional: smaller to copy
#   # then, on the other machine, from the repository root:
#   bash bench/cpu/elsewhere.sh remote/kiln/host
set -euo pipefail
HOST=${1:?usage: bench/cpu/elsewhere.sh PATH/TO/host}
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-$(mktemp -d)}
echo "== machine"
lscpu | grep -E "Model name|^CPU\(s\)|Thread|L1d|L2|L3" || true
grep -o -m1 -E "avx512f|avx2" /proc/cpuinfo | head -1 || true
g++ --version | head -1
echo "== plugins"
"$HOST" list
echo "== every small example, checked"
for f in examples/small_*.toml; do
  printf '%s: ' "$f"
  "$HOST" run "$f" --device cpu --check | tail -1
done
echo "== the cpu plugin's matrix-product tiles on this machine"
"$HOST" compile examples/small_mlp.toml --device cpu -o "$KILN_CACHE_DIR/mlp" >/dev/null
grep "define KILN_MM" "$KILN_CACHE_DIR/mlp/wrapper.cpp"
echo "== bench, all cores"
OMP_NUM_THREADS=$(nproc) python3 bench/cpu/run.py --host "$HOST" --scale 2
echo "== bench, two threads"
OMP_NUM_THREADS=2 python3 bench/cpu/run.py --host "$HOST"
