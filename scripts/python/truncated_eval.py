#!/usr/bin/env python3
"""Retrieval metrics of a model folder loaded by sentence-transformers with truncate_dim:
the independent truth for embed-train's per-size evaluation ("eval/d64/recall@10",
tests/torch/test_loss_recipes.cpp).

    truncated_eval.py MODEL_DIR EVAL.jsonl DIM

Loads SentenceTransformer(MODEL_DIR, truncate_dim=DIM), embeds each line's query and first
positive, ranks every query's positive among all positives by cosine similarity (a tie
counts against the query, as docs/formats.md says), and prints one JSON object:
{"recall@1": ..., "recall@5": ..., "recall@10": ..., "mrr@10": ..., "ndcg@10": ...}.
"""
import json
import math
import sys

import torch
from sentence_transformers import SentenceTransformer


def main():
    model_dir, eval_file, dim = sys.argv[1], sys.argv[2], int(sys.argv[3])
    queries, positives = [], []
    with open(eval_file, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                queries.append(row["query"])
                positives.append(row["pos"] if isinstance(row["pos"], str) else row["pos"][0])
    model = SentenceTransformer(model_dir, device="cpu", truncate_dim=dim)
    q = model.encode(queries, convert_to_tensor=True).double()
    p = model.encode(positives, convert_to_tensor=True).double()
    assert q.size(1) == dim, q.shape
    sim = torch.nn.functional.normalize(q, dim=1) @ torch.nn.functional.normalize(p, dim=1).T
    right = sim.diag().unsqueeze(1)
    ranks = ((sim >= right).sum(1)).tolist()  # 1 + the others scored at least as high
    n = len(ranks)
    out = {f"recall@{k}": sum(r <= k for r in ranks) / n for k in (1, 5, 10)}
    out["mrr@10"] = sum(1 / r for r in ranks if r <= 10) / n
    out["ndcg@10"] = sum(1 / math.log2(r + 1) for r in ranks if r <= 10) / n
    print(json.dumps(out))


if __name__ == "__main__":
    main()
