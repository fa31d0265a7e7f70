#!/usr/bin/env bash
# On the GPU machine: the zoo and attention cases compiled by bench/gpu/models_prepare.sh
# (bench/gpu/zoo/, carried with the repository), checked and timed by run.py, and, with
# --export DIR, the realistic-size model archives written to DIR by tools/model_zoo.py
# (compile those on the build machine with models_prepare.sh --realistic DIR, then run
# this again).
set -uo pipefail
cd "$(dirname "$0")/../.."
status=0
if [ "${1:-}" = "--export" ]; then
  python3 tools/model_zoo.py "$2" --realistic || status=1
  shift 2
fi
for set in attn models realistic; do
  [ -d "bench/gpu/zoo/$set" ] || continue
  echo "## $set"
  extra=()
  [ "$set" = models ] && extra=(--no-compile)
  python3 bench/gpu/run.py "bench/gpu/zoo/$set" "${extra[@]}" "$@" || status=1
done
exit $status
