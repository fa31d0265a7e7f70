#!/usr/bin/env bash
# Fuzz one of Kiln's importers with libFuzzer (cargo-fuzz, nightly toolchain).
#
#   fuzz/run.sh TARGET [SECONDS] [extra libFuzzer flags...]
#
# TARGET is toml_graph (the kiln-graph/1 TOML reader), pt2_archive (a whole .pt2
# file: the zip structure) or pt2_member (a valid .pt2 with one member, such as
# models/model.json or a weight file, replaced by the fuzzer's bytes). SECONDS
# defaults to 600. The corpus under fuzz/corpus/TARGET starts from the repository's
# own examples, regression graphs, generated graphs and fixture archives; a crash,
# a timeout (10 s per input) or an allocation over 512 MiB is written to
# fuzz/artifacts/TARGET/. Copy each one that you fix into fuzz/regressions/TARGET/:
# tests/fuzz_importers.rs replays them on every test run.
#
# Needs: rustup's nightly toolchain and `cargo install cargo-fuzz`.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: fuzz/run.sh toml_graph|pt2_archive|pt2_member [SECONDS] [libFuzzer flags]}
seconds=${2:-600}
shift $(( $# >= 2 ? 2 : 1 ))
corpus=fuzz/corpus/$target
if [ ! -d "$corpus" ] || [ -z "$(ls -A "$corpus")" ]; then
    mkdir -p "$corpus"
    case $target in
    toml_graph)
        cp examples/*.toml tests/graphs/*.toml "$corpus"/
        cargo build -q -p kiln-tests --bin graphgen
        for seed in $(seq 0 49); do target/debug/graphgen show "$seed" >"$corpus/g$seed.toml"; done
        ;;
    pt2_archive)
        cp tests/fixtures/pt2/mlp.pt2 tests/fixtures/pt2/mlp_core.pt2 \
            tests/fixtures/pt2/ln_softmax.pt2 tests/fixtures/pt2/ln_softmax_core.pt2 "$corpus"/
        ;;
    pt2_member)
        # One seed per (base archive, member): the selector byte, then the member's
        # bytes (the layout kiln_tests::importers::member_input writes).
        python3 - "$corpus" <<'PY'
import sys, zipfile
members = ["models/model.json", "data/weights/model_weights_config.json",
           "data/constants/model_constants_config.json", "data/weights/weight_0",
           "archive_format", "archive_version", "byteorder"]
bases = ["tests/fixtures/pt2/mlp.pt2", "tests/fixtures/pt2/ln_softmax_core.pt2"]
for b, path in enumerate(bases):
    z = zipfile.ZipFile(path)
    by_rest = {n.split("/", 1)[1]: n for n in z.namelist()}
    for m, member in enumerate(members):
        body = z.read(by_rest[member])
        open(f"{sys.argv[1]}/b{b}_{member.replace('/', '_')}", "wb").write(bytes([m * 2 + b]) + body)
PY
        ;;
    *) echo "unknown target $target" >&2; exit 2 ;;
    esac
fi
exec cargo +nightly fuzz run --fuzz-dir fuzz "$target" "$corpus" -- \
    -max_total_time="$seconds" -timeout=10 -malloc_limit_mb=512 -rss_limit_mb=2048 -print_final_stats=1 "$@"
