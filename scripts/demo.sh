#!/usr/bin/env bash
# The embedded default: fine-tune the pretrained all-MiniLM-L6-v2 (installed into .venv
# by scripts/setup.sh) on the WordNet demo pairs, on 2 worker processes through
# ddp-launch, and print held-out retrieval before and after. Builds only the programs it
# runs (not the tests). Extra arguments go to embed-train (e.g. --set train.max_steps=50).
#
#   DEMO_CONFIG=configs/scratch.json scripts/demo.sh   # the from-scratch variant
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
config=${DEMO_CONFIG:-configs/demo.json}
cd "$root"
BUILD_TARGETS="ddp-launch embed-train ddp_embed_spm" "$root/scripts/build.sh"
"$root/scripts/make-demo-data.sh"
# output.dir of the config: where the metrics and the model go.
out=$("$build/embed-train" --config "$config" --print-config | grep -o '"dir": *"[^"]*"' | head -1 | cut -d'"' -f4)
nproc=${DEMO_NPROC:-2}
start=$SECONDS
"$build/ddp-launch" --nproc "$nproc" --master-port 0 --log-dir "$out/launch-logs" \
  "$build/embed-train" --config "$config" --set output.resume=never "$@"
echo
echo "held-out retrieval (1,000 WordNet definitions against their words), before → after ($((SECONDS - start)) s):"
# The first evaluation (step 0: the starting model) against the last; the demo fails
# when recall@10 gains less than DEMO_MIN_GAIN (half the smallest gain measured over
# three seeds, README.md "Quick start").
grep '"eval/' "$out/metrics.jsonl" | sed -n '1p;$p' | awk -v min_gain="${DEMO_MIN_GAIN:-0.03}" '
  { n++; while (match($0, /"eval\/[a-z@0-9]+":[-0-9.e]+/)) { kv = substr($0, RSTART + 6, RLENGTH - 6); $0 = substr($0, RSTART + RLENGTH)
      split(kv, p, "\":"); v[n, p[1]] = p[2]; keys[p[1]] = 1 } }
  END { for (k in keys) printf("  %-10s %.3f → %.3f\n", k, v[1, k], v[2, k]) | "sort"; close("sort")
        gain = v[2, "recall@10"] - v[1, "recall@10"]
        if (n < 2 || gain < min_gain) { printf("demo: recall@10 gained %.3f, less than %.3f\n", gain, min_gain); exit 1 } }'
if [[ -f $out/metrics.svg ]]; then
  echo "figure of the run (any browser opens it): $out/metrics.svg"
fi
echo "the model, a folder sentence-transformers loads: $out/final"
