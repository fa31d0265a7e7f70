#!/usr/bin/env bash
# Convolutions through a Triton device's C++ wrapper (`host compile --wrapper cpp`,
# Kiln's Triton convolution template) on the GPU machine, with a staged host
# (bench/gpu/ab_stage.sh NAME; carry bench/gpu/ab/NAME): the convolution test graphs
# and the ResNet and MobileNetV2 archives of tests/fixtures/models, each run by
# `host run --device cuda --check` against the host's reference; the archives are then
# timed (`--bench`, copies in and out included). They are small (batch 2, 64x64): a
# check that the kernels run and match, not a measure of their speed.
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
done
