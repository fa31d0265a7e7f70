#!/usr/bin/env bash
# On the GPU machine: every staged build of bench/gpu/ab/ (see ab_stage.sh)
# compiles the GPU cases (prepare.sh with KILN_HOST), run.py runs them against
# PyTorch eager in one process each (no torch.compile), and ab_compare.py lists
# every case whose correctness or error differs between the builds.
#
#   bash bench/gpu/ab_cases.sh [OUT_DIR]      # tables and the comparison in OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-bench/gpu/ab_results}
mkdir -p "$out"
for dir in bench/gpu/ab/*/; do
  name=$(basename "$dir")
  KILN_HOST="$dir/host" KILN_CASES="bench/gpu/ab_cases/$name" bash bench/gpu/prepare.sh \
    > "$out/$name.prepare.txt" 2>&1 || { echo "prepare failed for $name:"; tail -20 "$out/$name.prepare.txt"; }
  python3 bench/gpu/run.py "bench/gpu/ab_cases/$name" --no-compile --in-process \
    > "$out/$name.txt" 2> "$out/$name.stderr.txt"
  echo "$name: $(grep -cE '^(cuda|gxu) ' "$out/$name.txt") cases, $(grep -E '^(cuda|gxu) ' "$out/$name.txt" | awk '$5 != "yes"' | wc -l) not ok"
done
python3 bench/gpu/ab_compare.py "$out"/*.txt
