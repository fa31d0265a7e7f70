#!/usr/bin/env bash
# On the GPU machine: bench/gpu/precision.py with the host that bench/gpu/ab_stage.sh staged in
# bench/gpu/ab/$KILN_AB/ (default: new), a --budget that ends the call well within 10 minutes
# ($KILN_BUDGET seconds, default 540), and, where $OUT is set (the device machine's folder that
# comes back), the table in $OUT/precision-$KILN_AB.txt. Further arguments go to precision.py
# (a later --budget or --out wins). Run the same command again until it reports no step left.
#
#   bash bench/gpu/precision.sh [--models gpt2,bert] [--dtypes bf16] [--phases time,graphs] ...
set -euo pipefail
cd "$(dirname "$0")/../.."
name=${KILN_AB:-new}
out=()
[ -z "${OUT:-}" ] || out=(--out "$OUT/precision-$name.txt")
exec python3 bench/gpu/precision.py --host "bench/gpu/ab/$name/host" --budget "${KILN_BUDGET:-540}" \
  "${out[@]}" "$@"
