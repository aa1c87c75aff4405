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
echo "evaluation on the held-out pairs (runs/demo/metrics.jsonl):"
grep '"eval/' runs/demo/metrics.jsonl | sed -n '1p;$p' | sed 's/^/  /'
