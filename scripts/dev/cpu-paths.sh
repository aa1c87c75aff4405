#!/usr/bin/env bash
# The exactness tests on each of LibTorch's CPU kernel paths, and how much of each bound
# they used there. Why: a user's CPU may take another path than the machine a bound was
# written on (an AMD EPYC with AVX2 only; an old one with neither), and each path adds its
# sums in its own order; a bound that holds on one path only was fitted, not derived.
#
#   scripts/dev/cpu-paths.sh [--paths "default avx2 avx512"] [--all] [CTEST ARGS...]
#
# For each path: the ctest label exactness-cpu-path (tests/CMakeLists.txt), or with --all
# every test of the suite, under tests/cpu_paths/on_cpu_path.sh's settings of that path;
# then one table: each comparison the tests recorded (tests/core/tolerance.h,
# DDP_EMBED_TOLERANCE_LOG), the share of its bound it used on each path, the largest first.
# A path this CPU cannot run (avx512 on an AVX2-only CPU) is skipped and named. The build
# must exist (scripts/build.sh). Exits 1 when a test failed on any path.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build}
paths="default avx2 avx512"
all=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --paths) paths=$2; shift 2 ;;
    --all) all=1; shift ;;
    *) break ;;
  esac
done
[[ -x $build/embed-train ]] || { echo "cpu-paths: no $build/embed-train: run scripts/build.sh" >&2; exit 1; }

out=$build/cpu-paths
mkdir -p "$out"
echo "cpu-paths: this CPU: $("$root/tests/cpu_paths/on_cpu_path.sh" --describe)"
failed=0
ran=() logs=()
for path in $paths; do
  if [[ $path == avx512 ]] && ! grep -qw avx512f /proc/cpuinfo; then
    echo "cpu-paths: avx512: skipped, this CPU has no AVX-512"
    continue
  fi
  log=$out/$path.tsv
  : > "$log"
  start=$(date +%s)
  set +e
  if [[ $all == 1 ]]; then
    # Every test in one environment: on_cpu_path.sh exports the path's settings and runs
    # ctest itself (the CpuPath tests, which would pick their own path, left out).
    (cd "$build" && CPU_PATH=$path DDP_EMBED_TOLERANCE_LOG=$log "$root/tests/cpu_paths/on_cpu_path.sh" \
      ctest --output-on-failure -j "$(nproc)" --timeout 900 -E '^CpuPath\.' "$@" > "$out/$path.ctest.log" 2>&1)
  else
    (cd "$build" && CPU_PATH=$path DDP_EMBED_TOLERANCE_LOG=$log ctest --output-on-failure -j "$(nproc)" --timeout 900 -L exactness-cpu-path "$@" \
      > "$out/$path.ctest.log" 2>&1)
  fi
  status=$?
  set -e
  summary=$(grep -E 'tests passed|No tests were found' "$out/$path.ctest.log" | tail -1)
  echo "cpu-paths: $path: ${summary:-ctest said nothing} ($(( $(date +%s) - start )) s; log $out/$path.ctest.log)"
  if [[ $status != 0 ]]; then
    failed=1
    grep -E '^\s+[0-9]+ - ' "$out/$path.ctest.log" | sed 's/^/  failed: /' || true
  fi
  ran+=("$path")
  logs+=("$log")
done

# One row a comparison: the largest share of its bound over the recorded lines of each path.
if [[ ${#ran[@]} -gt 0 ]]; then
  echo
  awk -F'\t' -v paths="${ran[*]}" '
    BEGIN { n = split(paths, p, " ") }
    FNR == 1 { k = 0; for (i = 1; i <= n; i++) if (FILENAME ~ ("/" p[i] ".tsv$")) k = i }
    NF == 4 && k {
      key = $1 "  " $2
      share = ($4 > 0) ? $3 / $4 : ($3 > 0 ? 1e9 : 0)
      if (!(key in seen)) { seen[key] = 1; keys[++m] = key }
      if (share > used[key, k]) used[key, k] = share
      if (share > worst[key]) worst[key] = share
    }
    END {
      printf "%-8s", "worst"
      for (i = 1; i <= n; i++) printf " %8s", p[i]
      printf "  comparison (share of its bound used; 1 = at the bound)\n"
      # the largest share first: a selection sort, the tables are a few hundred rows
      for (a = 1; a <= m; a++) for (b = a + 1; b <= m; b++) if (worst[keys[b]] > worst[keys[a]]) { t = keys[a]; keys[a] = keys[b]; keys[b] = t }
      for (a = 1; a <= m; a++) {
        key = keys[a]
        printf "%-8.3g", worst[key]
        for (i = 1; i <= n; i++) printf " %8.3g", used[key, i]
        printf "  %s\n", key
      }
    }' "${logs[@]}" > "$out/table.txt"
  echo "cpu-paths: $(($(wc -l < "$out/table.txt") - 1)) comparisons, the table in $out/table.txt; the 25 nearest their bounds:"
  head -26 "$out/table.txt"
fi
exit $failed
