#!/usr/bin/env bash
# Split attention (flash-decoding) and index_copy on the GPU machine, with a staged host
# (bench/gpu/ab_stage.sh NAME; carry bench/gpu/ab/NAME): the test graphs of both compiled
# for cuda and gxu and run against PyTorch with Kiln's attention kernel forced
# (KILN_ATTENTION=kiln, run.py), and the attention graph through the C++ wrapper
# (`host run --check`), and the static-cache decoding step of tests/fixtures/decode through it;
# the split attention that reads its mask (made from the position) before its wait, in both
# wrappers, at positions that keep part of a range and the whole cache.
#
#   bash bench/gpu/split_attention_checks.sh NAME
set -euo pipefail
cd "$(dirname "$0")/../.."
name=${1:?usage: split_attention_checks.sh NAME}
host=(bench/gpu/ab/$name/host --plugins bench/gpu/ab/$name/plugins)
cases=$(mktemp -d)
for device in cuda gxu; do
  for graph in attention_one_query_long_cache attention_position_mask index_copy; do
    "${host[@]}" compile "tests/graphs/$graph.toml" --device "$device" -o "$cases/$device/$graph" >/dev/null
    cp "tests/graphs/$graph.toml" "$cases/$device/$graph/graph.toml"
  done
done
KILN_ATTENTION=kiln python3 bench/gpu/run.py "$cases" --no-compile
"${host[@]}" run tests/graphs/attention_one_query_long_cache.toml --device cuda --check
"${host[@]}" run tests/graphs/index_copy.toml --device cuda --check
# A decoding step's cache update (index_copy into the state) through the C++ wrapper: token
# 3 at position 5 (positions are checked against the cache, so not drawn at random).
python3 -c "import struct, sys; open(sys.argv[1] + '/input_ids.bin', 'wb').write(struct.pack('<q', 3)); \
open(sys.argv[1] + '/cache_position.bin', 'wb').write(struct.pack('<q', 5))" "$cases"
"${host[@]}" run tests/fixtures/decode/gpt2_static_cache_step.pt2 --device cuda --check --inputs "$cases"
# The mask made from the position, read before the attention's wait, through the C++ wrapper
# (`--inputs` takes every input from the folder: the query, keys and values drawn here).
python3 -c "
import numpy as np, sys
draw = np.random.default_rng(0)
for name, n in (('q', 256), ('k', 262144), ('v', 262144)):
    draw.standard_normal(n, dtype=np.float32).tofile(sys.argv[1] + '/' + name + '.bin')" "$cases"
for position in 100 1023; do
  python3 -c "import struct, sys; open(sys.argv[1] + '/position.bin', 'wb').write(struct.pack('<q', int(sys.argv[2])))" \
    "$cases" "$position"
  "${host[@]}" run tests/graphs/attention_position_mask.toml --device cuda --check --inputs "$cases"
done
