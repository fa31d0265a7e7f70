#!/usr/bin/env bash
# The matrix product taken apart (bench/cpu/mm_micro.cpp): the micro-kernel against the
# cores' peak with its operands in L1, in L2, as a task runs it (on every core at once, each
# on its own) and as a whole product, built against the wrapper `host compile` writes here
# (this machine's tiles; the runtime's headers beside it), once per set of extra flags, on
# one core and then on all of CORES; then torch.mm the same ways, if torch is there.
#
#   bash bench/cpu/mm_micro.sh PATH/TO/host [CORES] [FLAGS ...]   (CORES: a taskset list,
#   default 2,3; FLAGS: e.g. "-DKILN_MM_KC=256")
set -euo pipefail
HOST=${1:?usage: bench/cpu/mm_micro.sh PATH/TO/host [CORES] [FLAGS ...]}
CORES=${2:-2,3}
FIRST=${CORES%%[,-]*}
ALL=$(taskset -c "$CORES" nproc)
shift $(( $# < 2 ? $# : 2 ))
HERE=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
cat > "$work/mm.toml" <<TOML
format = "kiln-graph/1"
name = "mm"
outputs = ["y"]
[[inputs]]
name = "a"
shape = [256, 256]
dtype = "float32"
[[inputs]]
name = "b"
shape = [256, 256]
dtype = "float32"
[[nodes]]
name = "y"
op = "mm"
args = ["a", "b"]
TOML
KILN_CPU_CORES=1 "$HOST" --plugins "$(dirname "$HOST")" compile "$work/mm.toml" --device cpu -o "$work/out" >/dev/null
base="-O3 -march=native -fopenmp -fno-math-errno -fno-trapping-math -std=c++17 -DKILN_MM_BLAS=0"
for flags in "" "$@"; do
  echo "## flags: ${flags:-none (the plugin tiles)}"
  # shellcheck disable=SC2086
  g++ $base $flags -DKILN_WRAPPER="\"$work/out/wrapper.cpp\"" "$HERE/mm_micro.cpp" -o "$work/micro"
  OMP_NUM_THREADS=1 taskset -c "$FIRST" "$work/micro"
  OMP_NUM_THREADS=$ALL OMP_PROC_BIND=true taskset -c "$CORES" "$work/micro"
done
if python3 -c "import torch" 2>/dev/null; then
  for cores in "$FIRST" "$CORES"; do
    threads=$(taskset -c "$cores" nproc)
    OMP_NUM_THREADS=$threads taskset -c "$cores" python3 - "$threads" <<'PY'
import sys, time, torch
threads = int(sys.argv[1])
torch.set_num_threads(threads)
for n in (1024, 2048):
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - t0)
    print(f"torch.mm {n} on {threads} thread(s): {2 * n ** 3 / min(times) * 1e-9:8.1f} GFLOP/s")
PY
  done
fi
rm -rf "$work"
