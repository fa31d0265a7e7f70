#!/usr/bin/env bash
# Compiles, for bench/gpu/models.sh on a GPU machine, into bench/gpu/zoo/ (ignored by git;
# carry it with the repository):
# - attn/<device>/<case>/: the attention cases of bench/gpu/attention_cases.py, each with
#   its graph.toml (run.py runs PyTorch's own scaled_dot_product_attention beside it);
# - models/<device>/pt2_<name>/: the model zoo of tests/fixtures/models, each with its
#   archive, inputs and PyTorch's expected outputs;
# - with --realistic DIR: realistic/cuda/pt2_<name>/ from the archives that
#   `tools/model_zoo.py DIR --realistic` wrote on the GPU machine (run.py draws inputs).
set -euo pipefail
cd "$(dirname "$0")/../.."
realistic=""
if [ "${1:-}" = "--realistic" ]; then
  realistic="$2"
fi
cargo build --release --workspace
host=target/release/host
rm -rf bench/gpu/zoo/attn bench/gpu/zoo/models
cases=$(mktemp -d)
python3 bench/gpu/attention_cases.py "$cases"
for device in cuda gxu; do
  for folder in "$cases"/*/; do
    name=$(basename "$folder")
    out="bench/gpu/zoo/attn/$device/$name"
    "$host" compile "$folder/graph.toml" --device "$device" -o "$out"
    cp "$folder/graph.toml" "$out/graph.toml"
  done
  for archive in tests/fixtures/models/*.pt2; do
    name=$(basename "$archive" .pt2)
    case "$name" in *skeleton*) continue ;; esac
    model=${name%_core}
    out="bench/gpu/zoo/models/$device/pt2_$name"
    "$host" compile "$archive" --device "$device" -o "$out"
    cp "$archive" "$out/model.pt2"
    for f in tests/fixtures/models/"$model".input*.bin tests/fixtures/models/"$model".expected*.bin; do
      cp "$f" "$out/${f##*/$model.}"
    done
    cp "tests/fixtures/models/$model.json" "$out/model.json"
  done
done
rm -rf "$cases"
if [ -n "$realistic" ]; then
  rm -rf bench/gpu/zoo/realistic
  for archive in "$realistic"/*.pt2; do
    name=$(basename "$archive" .pt2)
    out="bench/gpu/zoo/realistic/cuda/pt2_$name"
    "$host" compile "$archive" --device cuda -o "$out"
    cp "$archive" "$out/model.pt2"
    cp "$realistic/$name.json" "$out/model.json"
  done
fi
du -sh bench/gpu/zoo/* | sed 's/^/# /'
