#!/usr/bin/env bash
# The cpu matrix product's speed for other register tiles and vector widths than the
# plugin picks: `host run --bench` of a 2048² mm on pinned cores, with KILN_MM_* and
# -mprefer-vector-width given through KILN_CXXFLAGS. For choosing the cpu plugin's
# tile rules on a new machine; bench/cpu/inductor.py gives torch's time for the same mm.
#
#   bash bench/cpu/mm_tiles.sh PATH/TO/host [CORES]      (CORES: a taskset list, default 0,1)
set -euo pipefail
HOST=${1:?usage: bench/cpu/mm_tiles.sh PATH/TO/host [CORES]}
CORES=${2:-0,1}
N=${N:-2048}
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-$(mktemp -d)}
export OMP_NUM_THREADS=$(taskset -c "$CORES" nproc)
export KILN_CPU_CORES=$OMP_NUM_THREADS
graph=$(mktemp --suffix=.toml)
cat > "$graph" <<TOML
format = "kiln-graph/1"
name = "mm"
outputs = ["y"]
[[inputs]]
name = "a"
shape = [$N, $N]
dtype = "float32"
[[inputs]]
name = "b"
shape = [$N, $N]
dtype = "float32"
[[nodes]]
name = "y"
op = "mm"
args = ["a", "b"]
TOML
base="-O3 -march=native -fopenmp -fno-math-errno -fno-trapping-math"
"$HOST" compile "$graph" --device cpu -o "$KILN_CACHE_DIR/mm" >/dev/null
echo "the plugin's tiles: $(grep -o 'define KILN_MM_[A-Z]* [0-9]*' "$KILN_CACHE_DIR/mm/wrapper.cpp" | awk '{print $2"="$3}' | tr '\n' ' ')"
for width in 256 512; do
  for tiles in "" "-DKILN_MM_MR=6" "-DKILN_MM_MR=8" "-DKILN_MM_MR=12" "-DKILN_MM_MR=14" "-DKILN_MM_KC=256" \
               "-DKILN_MM_KC=384" "-DKILN_MM_NC=512" "-DKILN_MM_MC=2040"; do
    # KILN_KEEP_VECTOR_WIDTH: the plugin's header would otherwise ask for 512 bits itself.
    flags="$base -DKILN_KEEP_VECTOR_WIDTH -mprefer-vector-width=$width $tiles"
    ms=$(KILN_CXXFLAGS="$flags" taskset -c "$CORES" "$HOST" run "$graph" --device cpu --bench 5 2>&1 \
         | grep -o "median of 5 runs [0-9.]* ms" | awk '{print $5}')
    gf=$(python3 -c "print(f'{2*$N**3/($ms*1e-3)/1e9:.0f}')")
    echo "width $width ${tiles:-(plugin tiles)}: $ms ms, $gf GFLOP/s"
  done
done
