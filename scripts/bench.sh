#!/usr/bin/env bash
# Training throughput on this machine (its CPU; its GPUs with DEVICE=cuda): pairs/s,
# tokens/s, step time, exposed communication, peak RSS and start-up time, for BERT-small
# and BERT-base at 1 and 2 threads / workers. Prints one table row per run. Not a test:
# numbers only.
#
#   scripts/bench.sh            # BERT-small: 1x1, 1x2 threads, 2 workers x 1 thread
#   scripts/bench.sh base       # BERT-base as well (slow: 19 s a step in fp32 on one core,
#                               # docs/precision-and-memory.md)
#   STEPS=20 scripts/bench.sh   # timed steps per run (after 3 untimed)
#   PRECISION=bf16 scripts/bench.sh          # train.precision (fp32 | bf16 | fp16), default fp32
#   DEVICE=cuda CHECKPOINTING=true scripts/bench.sh   # train.device, activation checkpointing
# On GPUs the rss_MB column is the host's (metrics.jsonl also has peak_gpu_mb), the thread
# counts do not matter, and a 2-worker row needs 2 GPUs (NCCL: one GPU per worker).
#
# Every sequence is exactly max_length tokens (the pairs are long WordNet texts cut at
# max_length), so tokens/s compares with fixed-length benchmarks (every text max_length
# tokens long), such as a plain PyTorch training loop at sequence length 64.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
steps=${STEPS:-20}
precision=${PRECISION:-fp32}
device=${DEVICE:-auto}
checkpointing=${CHECKPOINTING:-false}
warm=3
work=$root/runs/bench
mkdir -p "$work"
cd "$root"
[ -f data/demo/train.jsonl ] || scripts/make-demo-data.sh >/dev/null

# Long pairs: 12 definitions in a row form a query; their 12 word lists followed by the
# definitions again a positive. Both are longer than max_length, so cut to exactly it.
long=$work/long-pairs-v2.jsonl
if [ ! -f "$long" ]; then
  awk -F'"' '{ q = q " " $4; p = p " " $8; if (NR % 12 == 0) { printf("{\"query\": \"%s\", \"pos\": \"%s %s\"}\n", q, p, q); q = ""; p = "" } }' \
    data/demo/train.jsonl > "$long"
fi
[ -d "$work/spm-8000" ] || "$build/embed-train" tokenizer --input data/demo/train.jsonl --vocab-size 8000 --output "$work/spm-8000" >/dev/null 2>&1

printf '%-40s %9s %9s %9s %9s %9s %8s\n' run pairs/s tokens/s step_ms comm_ms rss_MB start_s
run() {  # name workers threads config per-rank-batch seq tokenizer-args...
  local name="$1 $precision" workers=$2 threads=$3 config=$4 batch=$5 seq=$6; shift 6
  [ "$checkpointing" = true ] && name="$name ckpt"
  local out=$work/${name// /-}
  rm -rf "$out"
  OMP_NUM_THREADS=$threads "$build/ddp-launch" --nproc "$workers" --master-port 0 "$build/embed-train" \
    --config "$config" --set output.dir="$out" --set data.train="$long" --set data.eval=null \
    --set train.batch_size=$((batch * workers)) --set train.max_steps=$((steps + warm)) \
    --set tokenizer.max_length="$seq" --set output.log_every=1 --set output.save_every=0 \
    --set output.resume=never --set train.precision="$precision" --set train.device="$device" \
    --set train.activation_checkpointing="$checkpointing" "$@" >"$out.log" 2>&1 ||
    { echo "$name failed: see $out.log"; return; }
  # Medians over the timed steps (after the warm-up ones).
  awk -v warm=$warm -v name="$name" '
    function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
    function num(key,   m) { if (match($0, "\"" key "\":[-0-9.e+]+")) return substr($0, RSTART + length(key) + 3, RLENGTH - length(key) - 3); return "" }
    /"loss"/ { s = num("step"); if (num("startup_s") != "") st = num("startup_s"); if (s + 0 > warm) { n++; p[n] = num("pairs_per_s"); t[n] = num("tokens_per_s"); ms[n] = num("step_ms"); c[n] = num("comm_wait_ms") } rss = num("peak_rss_mb") }
    END { printf("%-40s %9.1f %9.0f %9.0f %9.1f %9.0f %8.2f\n", name, med(p, n), med(t, n), med(ms, n), med(c, n), rss, st) }' \
    "$out/metrics.jsonl"
}

small=configs/bert-small.json
run "bert-small 1 worker x 1 thread" 1 1 $small 32 64 --set tokenizer.path="$work/spm-8000"
run "bert-small 1 worker x 2 threads" 1 2 $small 32 64 --set tokenizer.path="$work/spm-8000"
run "bert-small 2 workers x 1 thread" 2 1 $small 32 64 --set tokenizer.path="$work/spm-8000"
if [ "${1:-}" = base ]; then
  vocab=$root/tests/fixtures/golden/vocab.txt  # the real uncased BERT vocabulary (30522)
  run "bert-base 1 worker x 2 threads" 1 2 configs/bert-base.json 8 128 \
    --set tokenizer.type=wordpiece --set tokenizer.path="$vocab" --set model.vocab_size=30522
  run "bert-base 2 workers x 1 thread" 2 1 configs/bert-base.json 8 128 \
    --set tokenizer.type=wordpiece --set tokenizer.path="$vocab" --set model.vocab_size=30522
fi
