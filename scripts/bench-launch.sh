#!/usr/bin/env bash
# Start-up cost of ddp-launch: runs `ddp-launch --nproc 8 /bin/true` RUNS times (10) and
# prints the median wall time in ms (goal: < 20 ms). For scale it also prints the median
# of a bare `/bin/true`, the cost of one process start on this machine.
#
#   scripts/bench-launch.sh [path/to/ddp-launch] [runs]
#
# Default binary: $DDP_LAUNCH, else build/ddp-launch, else ddp-launch on PATH.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
launcher="${1:-${DDP_LAUNCH:-}}"
if [[ -z "$launcher" ]]; then
  if [[ -x "$root/build/ddp-launch" ]]; then launcher="$root/build/ddp-launch"
  else launcher="$(command -v ddp-launch || true)"; fi
fi
runs="${2:-10}"
if [[ -z "$launcher" || ! -x "$launcher" ]]; then
  echo "bench-launch: ddp-launch not found; pass its path" >&2
  exit 2
fi

# Median wall time in ms (3 decimals) of RUNS runs of the command given.
median_ms() {
  local samples=() start end
  for ((i = 0; i < runs; i++)); do
    start=$(date +%s%N)
    "$@" >/dev/null 2>&1 || { echo "bench-launch: '$*' failed" >&2; exit 1; }
    end=$(date +%s%N)
    samples+=($(( end - start )))
  done
  printf '%s\n' "${samples[@]}" | sort -n |
    awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
                             printf "%.3f\n", m / 1e6 }'
}

"$launcher" --nproc 8 /bin/true >/dev/null 2>&1  # warm the page cache
launch_ms=$(median_ms "$launcher" --nproc 8 /bin/true)
true_ms=$(median_ms /bin/true)
echo "ddp-launch --nproc 8 /bin/true: median ${launch_ms} ms over ${runs} runs (goal < 20 ms)"
echo "bare /bin/true (one process start, for scale): median ${true_ms} ms"
