#!/usr/bin/env python3
"""`embed-train eval --beir` against sentence-transformers' InformationRetrievalEvaluator.

    python scripts/python/beir_reference.py --model DIR --embed-train BIN --beir FOLDER
        [--mteb FOLDER] [--work DIR] [--tol 1e-6]

embed-train evaluates the folder and writes the embeddings it ranked (--save-embeddings).
The evaluator is then given the same folder (queries, corpus as "title text", qrels with
score > 0) and those embeddings: its queries through a model whose encode_query returns
them, its corpus as corpus_embeddings. Every metric it reports (accuracy, precision and
recall @1/3/5/10, mrr@10, ndcg@10, map@100) must equal embed-train's within --tol. That
the embeddings are the model's is checked too: SentenceTransformer(DIR).encode of the
same texts within 1e-5 (max abs) of them.

With --mteb FOLDER (the same set in MTEB's Hub layout: scripts/python/make_beir_fixtures.py
writes one), embed-train evaluates that folder too: its split, counts and every metric must
equal the BEIR folder's exactly, and so must the embeddings it ranked.

Exit status: 0 agreement; 1 a disagreement; 2 a usage or running problem.
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator
from sentence_transformers.util import cos_sim


def read_folder(folder):
    """BEIR's files as embed-train reads them (data/beir.h)."""
    def jsonl(name):
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    queries = {str(r["_id"]): r["text"] for r in jsonl("queries.jsonl")}
    corpus = {}
    for r in jsonl("corpus.jsonl"):
        title, text = r.get("title") or "", r["text"]
        corpus[str(r["_id"])] = f"{title} {text}" if title and text else (title or text)
    relevant = {}
    with open(os.path.join(folder, "qrels", "test.tsv"), encoding="utf-8") as f:
        next(f)
        for line in f:
            qid, did, score = line.rstrip("\n").split("\t")
            if int(score) > 0:
                relevant.setdefault(qid, set()).add(did)
    return queries, corpus, relevant


class Embedded:
    """A stand-in model whose queries' embeddings are given (embed-train's)."""

    def __init__(self, query_embeddings):
        self.query_embeddings = query_embeddings

    def encode_query(self, sentences, **kwargs):
        assert len(sentences) == len(self.query_embeddings)
        return self.query_embeddings


def evaluate(a, folder, work):
    """embed-train eval --beir FOLDER: its JSON, the ranked embeddings in WORK; None on failure."""
    run = subprocess.run([a.embed_train, "eval", "--model", a.model, "--beir", folder, "--format", "json",
                          "--save-embeddings", work], capture_output=True, text=True)
    if run.returncode != 0:
        print(run.stdout, run.stderr, file=sys.stderr)
        return None
    return json.loads(run.stdout.strip().splitlines()[-1])


def mteb_agrees(a, ours, q, c):
    """The MTEB folder's numbers equal the BEIR folder's (`ours`, embeddings q and c) exactly."""
    work = os.path.join(a.work, "mteb")
    os.makedirs(work, exist_ok=True)
    theirs = evaluate(a, a.mteb, work)
    if theirs is None:
        return None
    differ = sorted(k for k in set(ours) | set(theirs) if k != "name" and ours.get(k) != theirs.get(k))
    for k in differ:
        print(f"{k:14s} BEIR folder {ours.get(k)!r}  MTEB folder {theirs.get(k)!r}   <-- differs")
    metrics = [k for k in ours if "@" in k]
    same_embeddings = (torch.equal(q, torch.from_numpy(np.load(os.path.join(work, "queries.npy")))) and
                       torch.equal(c, torch.from_numpy(np.load(os.path.join(work, "corpus.npy")))))
    print(f"MTEB folder {a.mteb}: split {theirs.get('split')}, {theirs.get('queries')} queries, "
          f"{theirs.get('documents')} documents; {len(metrics)} metrics, {len(differ)} values differ; "
          f"embeddings {'equal' if same_embeddings else 'differ'}")
    return not differ and len(metrics) == 15 and same_embeddings


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--embed-train", required=True)
    p.add_argument("--beir", required=True)
    p.add_argument("--work", default="beir-reference")
    p.add_argument("--mteb", help="the same set in MTEB's layout: must evaluate to the same numbers")
    p.add_argument("--tol", type=float, default=1e-6)
    a = p.parse_args()

    os.makedirs(a.work, exist_ok=True)
    ours = evaluate(a, a.beir, a.work)
    if ours is None:
        return 2
    q = torch.from_numpy(np.load(os.path.join(a.work, "queries.npy")))
    c = torch.from_numpy(np.load(os.path.join(a.work, "corpus.npy")))
    same_as_mteb = True
    if a.mteb:
        same_as_mteb = mteb_agrees(a, ours, q, c)
        if same_as_mteb is None:
            return 2

    queries, corpus, relevant = read_folder(a.beir)
    evaluator = InformationRetrievalEvaluator(queries, corpus, relevant, score_functions={"cosine": cos_sim},
                                              write_csv=False)
    assert len(evaluator.queries) == q.shape[0] == ours["queries"], "the evaluated queries differ"
    assert c.shape[0] == len(corpus) == ours["documents"], "the corpus differs"
    theirs = evaluator.compute_all_metrics(Embedded(q), corpus_embeddings=c)["cosine"]

    worst = 0.0
    compared = 0
    for metric, by_k in theirs.items():
        for k, value in by_k.items():
            name = metric.replace("@k", f"@{k}")
            diff = abs(float(value) - ours[name])
            worst = max(worst, diff)
            compared += 1
            flag = "" if diff <= a.tol else "   <-- differs"
            print(f"{name:14s} embed-train {ours[name]:.9f}  sentence-transformers {float(value):.9f}{flag}")
    print(f"{compared} metrics, max |difference| {worst:.3g} (tolerance {a.tol:g})")

    # The embeddings ranked are the model's own.
    model = SentenceTransformer(a.model, device="cpu")
    st_q = model.encode(evaluator.queries, convert_to_tensor=True, normalize_embeddings=True)
    st_c = model.encode(list(corpus.values()), convert_to_tensor=True, normalize_embeddings=True)
    emb = max((st_q - q).abs().max().item(), (st_c - c).abs().max().item())
    print(f"embeddings: max |embed-train - SentenceTransformer.encode| {emb:.3g} (tolerance 1e-5)")
    return 0 if worst <= a.tol and compared == 15 and emb <= 1e-5 and same_as_mteb else 1


if __name__ == "__main__":
    sys.exit(main())
