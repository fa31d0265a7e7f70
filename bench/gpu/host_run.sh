#!/usr/bin/env bash
# `host run --device cuda --check` on a GPU machine: the C++ wrapper of every
# example graph and every torch.export fixture, built by the host with the
# cuda plugin's flags and run in the host process, checked against the
# reference interpreter. The host and the plugins are built elsewhere (the GPU
# machine may have no Rust) and copied into bench/gpu/bin/ by
#
#   bash bench/gpu/host_run.sh --stage      # here: cargo build, copy, strip
#   bash bench/gpu/host_run.sh              # there: run; needs Triton (python3), the CUDA toolkit
#
# Each line: the case, PASS/FAIL, and the host's own figures.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=bench/gpu/bin
if [ "${1:-}" = "--stage" ]; then
  cargo build --release --workspace || exit 1
  rm -rf "$bin" && mkdir -p "$bin/plugins"
  strip -o "$bin/host" target/release/host
  for p in cuda cpu; do strip -o "$bin/plugins/libkiln_$p.so" "target/release/libkiln_$p.so"; done
  echo "staged: $(du -sh "$bin" | cut -f1) in $bin"
  exit 0
fi
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-$(mktemp -d)}
# cuBLAS from the wheel PyTorch depends on, where the toolkit has none: its
# versioned library linked as libcublas.so in a folder of its own, so that the
# plugin's -lcublas finds it.
home=${CUDA_HOME:-/usr/local/cuda}
if ! ls "$home"/lib64/libcublas.so >/dev/null 2>&1; then
  root=$(python3 -c 'import nvidia.cublas as w; print(list(w.__path__)[0])' 2>/dev/null)
  lib=$(ls "$root"/lib/libcublas.so.* 2>/dev/null | head -1)
  if [ -n "$lib" ]; then
    mkdir -p "$KILN_CACHE_DIR/cublas"
    ln -sf "$lib" "$KILN_CACHE_DIR/cublas/libcublas.so"
    export KILN_DEVICE_CXXFLAGS="-I$root/include -L$KILN_CACHE_DIR/cublas -Wl,-rpath,$root/lib"
    echo "cuBLAS from $root ($KILN_DEVICE_CXXFLAGS)"
  fi
fi
pass=0 fail=0
run_case() {  # name, file, extra args
  local name=$1 file=$2; shift 2
  if out=$("$bin/host" --plugins "$bin/plugins" run "$file" --device cuda --check "$@" 2>&1); then
    pass=$((pass + 1)); echo "PASS $name: $(echo "$out" | grep -E '^(ran|bench)' | tr '\n' ' ')"
  else
    fail=$((fail + 1)); echo "FAIL $name:"; echo "$out" | tail -15
  fi
}
for g in examples/*.toml; do run_case "$(basename "$g" .toml)" "$g" --bench 20; done
for a in tests/fixtures/pt2/*.pt2; do run_case "pt2_$(basename "$a" .pt2)" "$a"; done
echo "host run --device cuda: $pass passed, $fail failed"
