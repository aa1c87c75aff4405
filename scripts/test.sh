#!/usr/bin/env bash
# Build everything and run every test (unit tests, Hugging Face parity, multi-process
# runs through ddp-launch) with ctest. Runs on CPU; a GPU is not needed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
"$root/scripts/build.sh"
cd "$build"
ctest --output-on-failure -j "$(nproc)" --timeout 900 "$@"
