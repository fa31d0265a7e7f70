#!/usr/bin/env bash
# On the GPU machine: each staged build of bench/gpu/ab/ (see ab_stage.sh), or
# those named, compiles the GPU cases (prepare.sh with KILN_HOST), and run.py
# runs them against PyTorch eager in one process (no torch.compile; kernels
# compiled by 8 processes first). ab_compare.py then lists every case whose
# correctness or error differs between the builds' tables (run it here, or
# wherever the tables are; the first one named is the baseline).
#
#   bash bench/gpu/ab_cases.sh OUT_DIR [NAME ...]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: ab_cases.sh OUT_DIR [NAME ...]}
shift
mkdir -p "$out"
names=("$@")
[ ${#names[@]} -gt 0 ] || names=($(ls bench/gpu/ab))
for name in "${names[@]}"; do
  dir=bench/gpu/ab/$name
  KILN_HOST="$dir/host" KILN_CASES="bench/gpu/ab_cases/$name" bash bench/gpu/prepare.sh \
    > "$out/$name.prepare.txt" 2>&1 || { echo "prepare failed for $name:"; tail -20 "$out/$name.prepare.txt"; }
  python3 bench/gpu/run.py "bench/gpu/ab_cases/$name" --no-compile --in-process --jobs 8 \
    > "$out/$name.txt" 2> "$out/$name.stderr.txt"
  echo "$name: $(grep -cE '^(cuda|gxu) ' "$out/$name.txt") cases, $(grep -E '^(cuda|gxu) ' "$out/$name.txt" | awk '$5 != "yes"' | wc -l) not ok"
done
tables=()
for name in "${names[@]}"; do tables+=("$out/$name.txt"); done
[ ${#tables[@]} -lt 2 ] || python3 bench/gpu/ab_compare.py "${tables[@]}"
