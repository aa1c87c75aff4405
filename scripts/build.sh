#!/usr/bin/env bash
# Configure and build ddp-embed into build/ (Release). Extra arguments go to CMake, e.g.
#   scripts/build.sh -DTorch_DIR=/path/to/libtorch/share/cmake/Torch
# Set BUILD_DIR to build elsewhere.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
