#!/usr/bin/env bash
# One layer's attention on the CPU, forward and backward, on each path (packed, auto, padded)
# for batches of real text lengths, with and without dropout: the measurements behind
# model.attention auto's CPU rule (lib/model/attention.cpp, docs/models.md); then a local
# layer's window against a global layer on 2 texts of 4,096 tokens (docs/models.md).
#
#   scripts/bench-attention.sh [ROUNDS]    medians over ROUNDS rounds (default 3), build/ by default
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
[ -f "$build/CMakeCache.txt" ] || "$root/scripts/build.sh"
cmake --build "$build" --target bench-attention -j "$(nproc)" > /dev/null
OMP_NUM_THREADS=1 "$build/bench-attention" "${1:-3}"
