#!/usr/bin/env bash
# Fuzz the readers of untrusted input with libFuzzer (clang, AddressSanitizer, UBSan).
#
#   scripts/fuzz.sh [--time SECONDS] [TARGET...]
#
# TARGET: safetensors pairs config wordpiece vocab manifest prepared tokenizer_json rendezvous (default: all, one after the
# other), each run for SECONDS (default 60). The harnesses are tests/fuzz/fuzz_<target>.cpp.
#
# Builds build-fuzz/ (FUZZ_BUILD_DIR to change it) with -DDDP_EMBED_FUZZ=ON: embed_core
# and the fuzz executables only, no LibTorch. Each target starts from a scratch corpus,
# build-fuzz/corpus/<target>/, that the seeds of tests/fuzz/corpus/<target>/ are copied
# into and that keeps what earlier runs found (delete it to start over); the repository's
# corpus never grows by itself. Prints one line per target: executions, exec/s, coverage
# (cov and ft of libFuzzer's last status line), corpus size, crashes; the full output is
# in build-fuzz/logs/<target>.log. Exits 1 if any target crashed, leaked, hit a sanitizer
# report, a timeout or the memory limit, naming the input that did it: reproduce with
#   build-fuzz/fuzz_<target> INPUT
# and once fixed, keep the input in tests/fuzz/regressions/<target>/ (the unit tests
# replay it). Extra libFuzzer flags: FUZZ_ARGS="-max_len=8192 ...".
# Needs clang++ and libFuzzer (Debian: clang-14 libclang-rt-14-dev), installed if missing.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
all_targets=(safetensors pairs config wordpiece vocab manifest prepared tokenizer_json rendezvous)
seconds=60
targets=()

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit "${1:-2}"; }

while [ $# -gt 0 ]; do
  case $1 in
    --time) [ $# -ge 2 ] || usage; seconds=$2; shift 2 ;;
    --time=*) seconds=${1#--time=}; shift ;;
    -h|--help) usage 0 ;;
    -*) echo "fuzz: unknown option $1" >&2; usage ;;
    *) targets+=("$1"); shift ;;
  esac
done
[[ $seconds =~ ^[0-9]+$ ]] && [ "$seconds" -gt 0 ] || { echo "fuzz: --time wants a number of seconds, not '$seconds'" >&2; exit 2; }
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $t "* ]] || { echo "fuzz: unknown target '$t' (targets: ${all_targets[*]})" >&2; exit 2; }
done

# ---- clang with libFuzzer ---------------------------------------------------------------
find_clang() {
  for c in clang++ clang++-14 clang++-15 clang++-16; do
    command -v "$c" >/dev/null && { command -v "$c"; return; }
  done
}

libfuzzer_links() {
  local dir; dir=$(mktemp -d)
  printf '#include <cstddef>\n#include <cstdint>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' >"$dir/t.cpp"
  "$1" -fsanitize=fuzzer,address,undefined "$dir/t.cpp" -o "$dir/t" >/dev/null 2>&1
  local ok=$?
  rm -rf "$dir"
  return $ok
}

cxx=$(find_clang || true)
if [ -z "$cxx" ] || ! libfuzzer_links "$cxx"; then
  echo "fuzz: clang++ with libFuzzer not found: installing clang-14 libclang-rt-14-dev" >&2
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    clang-14 libclang-rt-14-dev >/dev/null
  cxx=$(find_clang || true)
  [ -n "$cxx" ] && libfuzzer_links "$cxx" || { echo "fuzz: libFuzzer still does not link with ${cxx:-clang++}" >&2; exit 1; }
fi

# ---- build ------------------------------------------------------------------------------
echo "fuzz: building ${targets[*]} in $build with $cxx" >&2
mkdir -p "$build"
cmake -S "$root" -B "$build" -DDDP_EMBED_FUZZ=ON -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log" >&2; exit 1; }
cmake --build "$build" -j "${FUZZ_JOBS:-2}" --target "${targets[@]/#/fuzz_}" >"$build/build.log" 2>&1 ||
  { tail -n 40 "$build/build.log" >&2; exit 1; }

# ---- run --------------------------------------------------------------------------------
# The last libFuzzer status line ("#N ... cov: C ft: F corp: K/S ...") and the final stats.
field() { sed -n "s/.*[[:space:]]$1: \{0,1\}\([0-9]*\).*/\1/p" | tail -n 1; }
stat() { sed -n "s/^stat::$1:[[:space:]]*\([0-9]*\).*/\1/p" "$2" | tail -n 1; }

crashed=()
mkdir -p "$build/logs"
for t in "${targets[@]}"; do
  corpus=$build/corpus/$t
  artifacts=$build/crashes/$t/
  log=$build/logs/$t.log
  mkdir -p "$corpus" "$artifacts"
  cp "$root/tests/fuzz/corpus/$t/"* "$corpus/"
  dict=()
  [ -f "$root/tests/fuzz/dict/$t.dict" ] && dict=(-dict="$root/tests/fuzz/dict/$t.dict")
  echo "fuzz: $t for ${seconds}s (log: $log)" >&2
  status=0
  # shellcheck disable=SC2086  # FUZZ_ARGS is a list of flags
  "$build/fuzz_$t" "$corpus" "${dict[@]}" -max_total_time="$seconds" -print_final_stats=1 \
    -rss_limit_mb=2048 -malloc_limit_mb=256 -timeout=10 -artifact_prefix="$artifacts" \
    ${FUZZ_ARGS:-} >"$log" 2>&1 || status=$?

  status_line=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
  execs=$(stat number_of_executed_units "$log")
  rate=$(stat average_exec_per_sec "$log")
  cov=$(field cov <<<"$status_line")
  ft=$(field ft <<<"$status_line")
  corp=$(sed -n 's/.* corp: \([0-9]*\)\/.*/\1/p' <<<"$status_line")
  crashes=0
  if [ "$status" -ne 0 ]; then
    crashes=1
    input=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
    reason=$(grep -m1 -E '^==[0-9]+==ERROR|^SUMMARY|runtime error|ALARM|out-of-memory|fuzz check failed|terminate called' "$log" || echo "exit status $status")
    crashed+=("$t: $reason"$'\n'"    input: ${input:-none written, see $log}")
  fi
  printf '%-12s execs %-10s exec/s %-7s cov %-6s ft %-6s corpus %-6s crashes %s\n' \
    "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$crashes"
done

if [ ${#crashed[@]} -gt 0 ]; then
  echo >&2
  for c in "${crashed[@]}"; do echo "fuzz: CRASH in $c" >&2; done
  echo "fuzz: reproduce with build-fuzz/fuzz_<target> INPUT; once fixed, keep INPUT in tests/fuzz/regressions/<target>/" >&2
  exit 1
fi
