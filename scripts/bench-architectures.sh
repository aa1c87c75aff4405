#!/usr/bin/env bash
# XLM-RoBERTa and Qwen3 in numbers, in one command:
#   speed   the small XLM-R (CLS, sentencepiece.bpe.model) and Qwen3 (last token, Qwen3's
#           tokenizer) models of scripts/python/make_model_fixtures.py, each trained by
#           embed-train and by sentence-transformers' trainer (scripts/bench-vs-st.sh: the
#           same data, batch, steps, workers x threads): pairs/s, tokens/s, step time and
#           rank 0's peak RSS, one row per model and system
#   memory  a Qwen3-Embedding-0.6B-shaped model (596M parameters, random weights; made once,
#           1.2 GB) fine-tuned for 2 steps with configs/finetune-qwen3.json (bf16,
#           activation checkpointing) at dist.zero_stage 0 (1 worker), 1 and 2 (2 workers),
#           with train.optimizer_offload cpu at stages 0 and 2, and with LoRA (model.lora_rank
#           16) at stage 0: the state each worker
#           holds, as the log says, the model state a GPU would hold (weights, gradients,
#           moments unless offloaded) and rank 0's peak RSS (on the CPU, all of it)
#
#   scripts/bench-architectures.sh
#   PARTS=speed STEPS=20 scripts/bench-architectures.sh
# Env: PARTS ("speed memory"), STEPS (40, speed), MEM_BATCH (4 pairs a worker, memory),
#   MEM_ROWS (zero:workers:offload[:lora rank] rows, "0:1:none 1:2:none 2:2:none 0:1:cpu 2:2:cpu 0:1:none:16"),
#   OUT (runs/bench-architectures). The memory part needs about 21 GB of RAM (two workers of
#   ~10 GB at stage 1). Numbers only; nothing else should run on the machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
py=$root/.venv/bin/python
parts=${PARTS:-speed memory}
out=${OUT:-$root/runs/bench-architectures}
steps=${STEPS:-40}
mem_batch=${MEM_BATCH:-4}
cd "$root"
mkdir -p "$out"

models=$out/models
if [ ! -f "$models/stamp" ]; then
  "$py" scripts/python/make_model_fixtures.py --out "$models" --kinds xlmr-cls,qwen3 >/dev/null
  touch "$models/stamp"
fi

if [[ " $parts " == *" speed "* ]]; then
  printf '%-9s %-7s %8s %9s %8s %12s\n' model system pairs/s tokens/s "step ms" "peak RSS MB"
  for kind in xlmr-cls qwen3; do
    table=$(MODEL=$models/$kind SYSTEMS="ours st" SEEDS=42 STEPS=$steps EVAL=0 OUT=$out/speed-$kind \
            BUILD_DIR=$build scripts/bench-vs-st.sh 2>/dev/null)
    echo "$table" | awk -v k="$kind" '$1 == "ours" || $1 == "st" { printf "%-9s %-7s %8s %9s %8s %12s\n", k, $1, $2, $3, $4, $5 }'
  done
fi

if [[ " $parts " == *" memory "* ]]; then
  if [ ! -f "$models/qwen3-0.6b/model.safetensors" ]; then
    "$py" scripts/python/make_model_fixtures.py --out "$models" --kinds qwen3-0.6b >/dev/null
  fi
  head -400 "$build/test-data/train.jsonl" > "$out/pairs.jsonl"
  printf '%-5s %-8s %-8s %-5s %-46s %12s %15s %12s\n' zero workers offload lora "state per worker (log)" \
    "device MB" "start-up RSS MB" "peak RSS MB"
  # zero:workers:offload[:lora rank]
  for row in ${MEM_ROWS:-0:1:none 1:2:none 2:2:none 0:1:cpu 2:2:cpu 0:1:none:16}; do
    IFS=: read -r z n offload lora <<< "$row"
    lora=${lora:-0}
    log=$out/memory-z$z-n$n-$offload-lora$lora.log
    OMP_NUM_THREADS=1 "$build/ddp-launch" --nproc "$n" --master-port 0 "$build/embed-train" \
      --config configs/finetune-qwen3.json --set model.init="$models/qwen3-0.6b" --set data.train="$out/pairs.jsonl" \
      --set train.batch_size=$((mem_batch * n)) --set train.max_steps=2 --set train.warmup_steps=0 \
      --set tokenizer.max_length=32 --set dist.zero_stage="$z" --set train.optimizer_offload="$offload" \
      --set model.lora_rank="$lora" --set output.dir="$out/memory-z$z-n$n-$offload-lora$lora" \
      --set output.save_every=0 --set output.log_every=1 --set output.resume=never > "$log" 2>&1
    # The model state a device would hold (fp32 weights, gradients, and the moments unless
    # offloaded), from the log's parameter count and state line; on the CPU it is all RSS.
    params_m=$(grep -o '[0-9.]*M parameters' "$log" | head -1 | grep -o '^[0-9.]*')
    line=$(grep -o 'optimizer state: [0-9.]* MB[^;]*; gradients: [0-9.]* MB' "$log" | head -1)
    moments=$(echo "$line" | sed -E 's/optimizer state: ([0-9.]+) MB.*/\1/')
    grads=$(echo "$line" | sed -E 's/.*gradients: ([0-9.]+) MB/\1/')
    where=""; on_device=$moments
    if [[ "$line" == *"host memory"* ]]; then where=" (host)"; on_device=0; fi
    device=$(awk -v p="$params_m" -v g="$grads" -v m="$on_device" 'BEGIN { printf "%.0f", p * 4 + g + m }')
    startup=$(grep -o 'start-up took [0-9.]*s (peak RSS [0-9]* MB)' "$log" | head -1 | grep -o '[0-9]* MB' | grep -o '[0-9]*')
    peak=$(grep -o 'final (peak RSS [0-9]* MB)' "$log" | grep -o '[0-9]*')
    printf '%-5s %-8s %-8s %-5s %-46s %12s %15s %12s\n' "$z" "$n" "$offload" "$lora" \
      "moments $moments MB$where, gradients $grads MB" "$device" "$startup" "$peak"
  done
fi
