#!/usr/bin/env python3
"""Held-out scores of sentence-embedding model folders, all measured by one judge:
sentence-transformers loads each folder (SentenceTransformer(dir)) and encodes.

  STS:        Spearman correlation between cos(a, b) and the gold score, over an STS-B
              style file (tab-separated, score in column 5, sentences in 6 and 7).
  retrieval:  every query of a pairs JSONL ({"query", "pos"}) against all its positives;
              one relevant document per query: recall@10, nDCG@10 (= 1 / log2(1 + rank)
              when the positive ranks in the top 10), MRR@10.

Prints one JSON line per folder: {"model": dir, "sts_spearman": ..., "ndcg@10": ...}.
With --truncate-dim D [D ...], one line per folder and size, each scored with
SentenceTransformer(dir, truncate_dim=D) ("dim": D in the line). With --prompts, a folder
that has prompts named "query" and "passage" (config_sentence_transformers.json) is fed as
it was trained: queries with prompt_name="query", positives with "passage", both STS
sentences with "query" (the symmetric convention of E5-style prompts).

    heldout_eval.py --sts sts-dev.csv --pairs eval.jsonl [--truncate-dim 384 128 64] [--prompts] DIR [DIR ...]
"""
import argparse
import csv
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_train import read_pairs  # noqa: E402  (the one reader of pairs JSONL here)


def read_sts(path):
    a, b, gold = [], [], []
    with open(path, encoding="utf-8") as f:
        for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            if len(row) >= 7:
                gold.append(float(row[4]))
                a.append(row[5])
                b.append(row[6])
    return a, b, gold


def scores(model_dir, sts, pairs, batch, truncate_dim=None, prompts=False):
    import numpy as np
    import torch
    from scipy.stats import spearmanr
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(model_dir, device="cpu", truncate_dim=truncate_dim)
    use = lambda name: name if prompts and name in (model.prompts or {}) else None
    encode = lambda texts, name=None: model.encode(texts, batch_size=batch, convert_to_tensor=True,
                                                   normalize_embeddings=True, show_progress_bar=False,
                                                   prompt_name=use(name))
    out = {"model": model_dir}
    if truncate_dim:
        out["dim"] = truncate_dim
    if sts:
        a, b, gold = sts
        cos = (encode(a, "query") * encode(b, "query")).sum(-1).numpy()
        out["sts_spearman"] = float(spearmanr(cos, np.asarray(gold)).statistic)
    if pairs:
        queries, positives = pairs
        sim = encode(queries, "query") @ encode(positives, "passage").T
        # Rank of the right positive: how many documents score strictly higher, plus one.
        rank = (sim > sim.diag().unsqueeze(1)).sum(1) + 1
        top10 = rank <= 10
        out["recall@10"] = float(top10.float().mean())
        out["ndcg@10"] = float(torch.where(top10, 1.0 / torch.log2(rank.double() + 1), 0.0).mean())
        out["mrr@10"] = float(torch.where(top10, 1.0 / rank.double(), 0.0).mean())
        out["recall@1"] = float((rank == 1).float().mean())
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sts", help="STS-B style TSV (score in column 5, sentences in 6 and 7)")
    ap.add_argument("--pairs", help="pairs JSONL for retrieval")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--truncate-dim", type=int, nargs="+", default=[None])
    ap.add_argument("--prompts", action="store_true", help='use the folder\'s "query"/"passage" prompts')
    ap.add_argument("models", nargs="+")
    args = ap.parse_args()
    import torch
    torch.set_num_threads(args.threads)
    sts = read_sts(args.sts) if args.sts else None
    pairs = read_pairs(args.pairs) if args.pairs else None
    for m in args.models:
        for dim in args.truncate_dim:
            print(json.dumps(scores(m, sts, pairs, args.batch, dim, args.prompts)), flush=True)


if __name__ == "__main__":
    main()
