#!/usr/bin/env bash
# The embedded default: build, make the demo data (WordNet definitions → words), and
# train configs/demo.json on 2 worker processes through ddp-launch. Prints the
# evaluation before and after training. Extra arguments go to embed-train
# (e.g. --set train.max_steps=50).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
cd "$root"
"$root/scripts/build.sh"
"$root/scripts/make-demo-data.sh"
nproc=${DEMO_NPROC:-2}
"$build/ddp-launch" --nproc "$nproc" --master-port 0 --log-dir runs/demo/launch-logs \
  "$build/embed-train" --config configs/demo.json --set output.resume=never "$@"
echo
echo "held-out retrieval (1,000 WordNet definitions against their words), untrained → trained:"
grep '"eval/' runs/demo/metrics.jsonl | sed -n '1p;$p' | awk '
  { n++; while (match($0, /"eval\/[a-z@0-9]+":[-0-9.e]+/)) { kv = substr($0, RSTART + 6, RLENGTH - 6); $0 = substr($0, RSTART + RLENGTH)
      split(kv, p, "\":"); v[n, p[1]] = p[2]; keys[p[1]] = 1 } }
  END { for (k in keys) printf("  %-10s %.3f → %.3f\n", k, v[1, k], v[2, k]) }' | sort
if [[ -f runs/demo/metrics.svg ]]; then
  echo "figure of the run (any browser opens it): runs/demo/metrics.svg"
fi
