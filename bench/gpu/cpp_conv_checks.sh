#!/usr/bin/env bash
# Convolutions through a Triton device's C++ wrapper (`host compile --wrapper cpp`,
# Kiln's Triton convolution template) on the GPU machine, with a staged host
# (bench/gpu/ab_stage.sh NAME; carry bench/gpu/ab/NAME): the convolution test graphs
# and the ResNet and MobileNetV2 archives of tests/fixtures/models, each run by
# `host run --device cuda --check` against the host's reference, then timed
# (`--bench`), and the same archives in eager PyTorch and under Inductor on the same
# inputs' shapes, for scale.
#
#   bash bench/gpu/cpp_conv_checks.sh NAME [CALLS]
set -euo pipefail
cd "$(dirname "$0")/../.."
name=${1:?usage: cpp_conv_checks.sh NAME [CALLS]}
calls=${2:-200}
host=(bench/gpu/ab/$name/host --plugins bench/gpu/ab/$name/plugins)
for graph in conv1d_on_every_device conv2d_as_matrix_products conv2d_channels_last_16bit \
  conv2d_output_channel_lanes; do
  echo "## $graph"
  "${host[@]}" run "tests/graphs/$graph.toml" --device cuda --check
done
for model in resnet mobilenet_v2; do
  echo "## $model"
  "${host[@]}" run "tests/fixtures/models/$model.pt2" --device cuda --check
  "${host[@]}" run "tests/fixtures/models/$model.pt2" --device cuda --bench "$calls"
  python3 - "tests/fixtures/models/$model.pt2" "$calls" <<'EOF'
import sys

import torch
from triton.testing import do_bench

ep = torch.export.load(sys.argv[1])
module = ep.module().to("cuda")
args = [a.to("cuda") if isinstance(a, torch.Tensor) else a for a in ep.example_inputs[0]]
compiled = torch.compile(module)
with torch.no_grad():
    for label, fn in (("eager", module), ("inductor", compiled)):
        ms = do_bench(lambda: fn(*args), rep=max(100, int(sys.argv[2])))
        print(f"{label}: {ms * 1e3:.1f} us per call (triton.testing.do_bench, median)")
EOF
done
