#!/usr/bin/env python3
"""`embed-train eval --beir` of a sparse encoder against sentence-transformers'
SparseInformationRetrievalEvaluator.

    python scripts/python/sparse_beir_reference.py --model DIR --embed-train BIN --beir FOLDER --out OUT.json

embed-train evaluates the folder through its inverted index; the evaluator is given
SparseEncoder(DIR) and the same folder (queries, corpus as "title text", qrels with score
> 0), and computes its own vectors and dot products. OUT.json holds both sides' metrics by
embed-train's names (accuracy@1 ... map@100, query_active_dims, query_sparsity_ratio,
corpus_active_dims, corpus_sparsity_ratio, avg_flops) as {"ours": {...}, "theirs": {...}},
and prints them side by side.

Exit status: 0 both ran; 2 a usage or running problem. The comparison is the caller's.
"""
import argparse
import json
import os
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from beir_reference import read_folder  # noqa: E402

SPARSITY = ("query_active_dims", "query_sparsity_ratio", "corpus_active_dims", "corpus_sparsity_ratio", "avg_flops")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--embed-train", required=True)
    p.add_argument("--beir", required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()

    run = subprocess.run([a.embed_train, "eval", "--model", a.model, "--beir", a.beir, "--format", "json"],
                         capture_output=True, text=True)
    if run.returncode != 0:
        print(run.stdout, run.stderr, file=sys.stderr)
        return 2
    ours = json.loads(run.stdout.strip().splitlines()[-1])

    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.evaluation import SparseInformationRetrievalEvaluator
    queries, corpus, relevant = read_folder(a.beir)
    model = SparseEncoder(a.model, device="cpu")
    evaluator = SparseInformationRetrievalEvaluator(queries, corpus, relevant, write_csv=False, batch_size=64)
    raw = evaluator(model)
    score = model.similarity_fn_name  # "dot": the metrics' prefix
    theirs = {}
    for key, value in raw.items():
        name = key[len(score) + 1:] if key.startswith(score + "_") else key
        if "@" in name or name in SPARSITY:
            theirs[name] = float(value)
    with open(a.out, "w") as f:
        json.dump({"ours": ours, "theirs": theirs}, f, indent=1)
    for name in sorted(theirs):
        print(f"{name:22s} embed-train {ours.get(name, float('nan')):.9f}  sentence-transformers {theirs[name]:.9f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
