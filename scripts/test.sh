#!/usr/bin/env bash
# Build everything and run every test (unit tests, Hugging Face parity, multi-process
# runs through ddp-launch) with ctest. Runs on CPU; a GPU is not needed.
#
#   scripts/test.sh [CTEST ARGS...]             the tests, in build/
#   scripts/test.sh --sanitize [CTEST ARGS...]  the same sources built with AddressSanitizer
#                                               and UndefinedBehaviorSanitizer in
#                                               build-sanitize/: the unit tests, the bad-input
#                                               catalogue and short multi-worker trainings;
#                                               any report fails the run
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

if [[ ${1:-} == --sanitize ]]; then
  shift
  build=${BUILD_DIR:-$root/build-sanitize}
  BUILD_DIR=$build "$root/scripts/build.sh" -DSANITIZE=address,undefined -DCMAKE_BUILD_TYPE=RelWithDebInfo
  # halt_on_error: a UBSan finding fails the test like an ASan one. LibTorch's own
  # allocations that live until exit are not ours to fix: no leak checking.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=0:halt_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
  cd "$build"
  if [[ $# -eq 0 ]]; then
    # Everything without LibTorch, and the LibTorch tests that run the real programs on
    # bad input and in short 2-worker trainings.
    set -- -R '^(Launch|Config|Pair|Sampler|Tokeni|WordPiece|Sentence|Safetensors|Metrics|Corpus|Hostile\.|Bert\.Embedder|Training\.(OneProcess|TwoWorkers|OneWorker|TwoLaunchers|CrossRank|Evaluation|ARank|ASurviving))'
  fi
  ctest --output-on-failure -j "$(nproc)" --timeout 1800 "$@"
  exit
fi

build=${BUILD_DIR:-$root/build}
# The CPU first, so that a report of a failed run carries it: LibTorch picks its kernels
# by the CPU's vector extensions, and each path rounds its sums its own way.
echo "test: CPU: $("$root/tests/cpu_paths/on_cpu_path.sh" --describe)"
"$root/scripts/build.sh"
# CI builds what the GPU machines run: the CUDA LibTorch with the NCCL process group.
if [[ -n ${CI:-} ]] && ! "$build/embed-train" --version | grep -q '^NCCL: compiled in'; then
  echo "test: CI needs the CUDA LibTorch with NCCL compiled in; embed-train --version says:" >&2
  "$build/embed-train" --version >&2
  exit 1
fi
# ... and with the malloc it ships with (scripts/setup.sh installs tcmalloc).
if [[ -n ${CI:-} ]] && ! "$build/embed-train" --version | grep -q '^memory allocator: tcmalloc'; then
  echo "test: CI builds embed-train with tcmalloc; embed-train --version says:" >&2
  "$build/embed-train" --version >&2
  exit 1
fi
echo "test: $("$build/embed-train" --version | grep '^CPU kernels')" \
  "(the CpuPath tests run the exactness tests again on another path: tests/cpu_paths/on_cpu_path.sh)"
cd "$build"
# The tests' Python server (build/test-python) ends with the tests, not a minute later.
trap '"$build/test-python" --stop-reference-server >/dev/null 2>&1 || true' EXIT
ctest --output-on-failure -j "$(nproc)" --timeout 900 "$@"
