#!/usr/bin/env python3
"""`embed-train rerank` and `eval --first-stage` against sentence-transformers' CrossEncoder.

    python scripts/python/rerank_reference.py folders --minilm DIR OUT
    python scripts/python/rerank_reference.py test --minilm DIR --embed-train BIN --beir FOLDER
        [--work DIR] [--top-k 20]

folders: two cross-encoder folders made from all-MiniLM-L6-v2 by CrossEncoder(DIR,
num_labels=N).save (a BertForSequenceClassification, its classifier random from a seeded
torch): OUT/one_label (N = 1, sigmoid scores) and OUT/three_labels (N = 3, identity).

test:
 (a) CrossEncoder(folder).predict on hand-written hard pairs (texts beyond the max length,
     one or both; unicode; an empty document, an empty query) equals embed-train rerank
     within 1e-5 (max abs), for both folders, at the folder's max length and at 32 tokens
     (CrossEncoder(folder, max_length=32)).
 (b) On the BEIR folder: embed-train eval --model one_label --beir FOLDER --first-stage
     MINILM --top-k K. Its "first_stage/" metrics equal embed-train eval --beir of MINILM
     exactly; its top K of each query are the K best of the first stage's cosines (computed
     here from the embeddings that eval saves, ties by id) and its scores (of every third
     query) CrossEncoder's predict of the (query, "title text" stripped) pairs within 1e-5. Then
     CrossEncoderRerankingEvaluator (at_k 10, always_rerank_positives False) is run on the
     same candidates: each query's documents the whole corpus in first-stage order, its
     positives the qrels' ids with score > 0, and a model whose predict gives the top K
     embed-train's scores and every other document a score below them in first-stage order
     (the reranked ranking's convention: the tail keeps its first-stage order). Its
     mrr@10 and ndcg@10 equal the "reranked/" ones within 1e-6, and its base_mrr@10 and
     base_ndcg@10 the "first_stage/" ones. Its map (average precision over the whole
     ranking) equals map@100 where every relevant document is in the top 100: it is
     compared, reranked and base, with the mean of those queries' map@100 in eval's
     --output (whose per-query metrics must average to the reported ones). The other
     metrics have no counterpart there; they come from the code of eval --beir's, which
     beir_reference.py holds to InformationRetrievalEvaluator.

 (c) A reranker embed-train trains (3 steps from one_label, binary_cross_entropy on pairs
     with a hard negative each), and a classifier (3 steps from three_labels, cross_entropy
     on labeled pairs, each label a class of three), each writes a folder that CrossEncoder loads without a word
     about its weights (no MISSING, UNEXPECTED or newly initialized tensor) and whose
     predict equals embed-train rerank on it as (a) holds them.

Exit status: 0 agreement; 1 a disagreement; 2 a usage or running problem.
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

FOLDERS = {"one_label": (1, 0), "three_labels": (3, 1)}  # name: (num_labels, seed)

LONG = ("The committee reviewed every clause of the agreement, line by line, before the vote; " * 40).strip()
HARD_PAIRS = [
    ("what is a cat", "A cat is a small domesticated carnivorous mammal."),
    ("naïve café – 東京の天気は？", "Ünïcödé text with emoji 🎉, accents (résumé) and Ελληνικά."),
    ("an empty document", ""),
    ("", "an empty query"),
    ("a long document", LONG),
    (LONG, "a long query"),
    (LONG + " first", "second " + LONG),
    ("   padded   ", "\ttabs and\nnew lines  "),
]


def make_folders(minilm, out):
    from sentence_transformers import CrossEncoder
    for name, (labels, seed) in FOLDERS.items():
        torch.manual_seed(seed)
        CrossEncoder(minilm, num_labels=labels).save(os.path.join(out, name))


def run(command):
    r = subprocess.run(command, capture_output=True, text=True)
    if r.returncode != 0:
        print(" ".join(command), r.stdout, r.stderr, sep="\n", file=sys.stderr)
        raise RuntimeError(f"{command[0]} {command[1]} failed (status {r.returncode})")
    return r.stdout


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def check_predict(a, folders):
    """(a): embed-train rerank == CrossEncoder.predict on the hard pairs; True when all agree."""
    from sentence_transformers import CrossEncoder
    pairs_file = os.path.join(a.work, "hard-pairs.jsonl")
    with open(pairs_file, "w", encoding="utf-8") as f:
        for i, (q, d) in enumerate(HARD_PAIRS):  # every spelling of a pair the input takes
            key = ["doc", "document", "passage", "text2"][i % 4]
            f.write(json.dumps({"text1" if key == "text2" else "query": q, key: d}, ensure_ascii=i % 2 == 0) + "\n")
    ok = True
    for name in folders:
        for max_length in (None, 32):
            out = os.path.join(a.work, f"scores-{name}-{max_length}.jsonl")
            run([a.embed_train, "rerank", "--model", folders[name], "--input", pairs_file, "--output", out,
                 "--batch-size", "3"] + (["--max-length", str(max_length)] if max_length else []))
            lines = read_jsonl(out)
            ours = np.array([[line["score"]] if "score" in line else line["scores"] for line in lines])
            model = CrossEncoder(folders[name], device="cpu", max_length=max_length)
            theirs = np.asarray(model.predict(HARD_PAIRS, batch_size=4)).reshape(len(HARD_PAIRS), -1)
            diff = float(np.abs(ours - theirs).max()) if ours.shape == theirs.shape else float("inf")
            single = all(("score" in line) == (theirs.shape[1] == 1) for line in lines)
            good = diff <= 1e-5 and single
            ok &= good
            print(f"rerank {name} max_length {max_length or model.max_seq_length}: {len(lines)} pairs, "
                  f"max |embed-train - CrossEncoder.predict| {diff:.3g} (tolerance 1e-5)"
                  f"{'' if single else ', wrong output key'}{'' if good else '   <-- differs'}")
    return ok


def train_ours(a, folders, classifier=False):
    """(c)'s folders: embed-train trains a reranker from one_label for 3 steps (binary
    cross-entropy on pairs with a negative), or with `classifier` one from three_labels
    (cross_entropy on labeled pairs, each label a class of three)."""
    work = os.path.join(a.work, "trained-classifier" if classifier else "trained")
    os.makedirs(work, exist_ok=True)
    texts = [q for q, d in HARD_PAIRS if q.strip()] + [d for q, d in HARD_PAIRS if d.strip()]
    with open(os.path.join(work, "pairs.jsonl"), "w", encoding="utf-8") as f:
        for i in range(16):
            query, doc = f"question {i}: {texts[i % len(texts)][:80]}", texts[(i + 1) % len(texts)]
            row = ({"query": query, "doc": doc, "label": i % 3} if classifier else
                   {"query": query, "pos": doc, "neg": [texts[(i + 2) % len(texts)]]})
            f.write(json.dumps(row) + "\n")
    config = {"model": {"kind": "cross_encoder", "init": folders["three_labels" if classifier else "one_label"],
                        "num_labels": 3 if classifier else 1},
              "tokenizer": {"max_length": 64},
              "data": {"train": os.path.join(work, "pairs.jsonl"), "eval": None,
                       "negatives_per_query": 0 if classifier else 1},
              "loss": {"cross_encoder": {"type": "cross_entropy" if classifier else "binary_cross_entropy"}},
              "train": {"batch_size": 8, "lr": 1e-4, "max_steps": 3, "seed": 3},
              "output": {"dir": os.path.join(work, "out"), "resume": "never"}}
    with open(os.path.join(work, "config.json"), "w") as f:
        json.dump(config, f)
    run([a.embed_train, "train", "--config", os.path.join(work, "config.json")])
    return os.path.join(work, "out", "final")


def check_quiet_load(folder):
    """(c): CrossEncoder(folder) says nothing about missing, unexpected or new weights. Loaded
    in this process (a second Python costs ~10 s of imports) with everything it writes to
    file descriptors 1 and 2 captured: transformers' load report is a logger.warning, which
    it writes every time (not once a process)."""
    import tempfile
    from sentence_transformers import CrossEncoder
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    error = None
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as captured:
        os.dup2(captured.fileno(), 1)
        os.dup2(captured.fileno(), 2)
        try:
            CrossEncoder(folder, device="cpu")
        except Exception as e:  # a folder that does not load fails the check, saying why
            error = f"{type(e).__name__}: {e}"
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        captured.seek(0)
        said_text = captured.read()
    said = [w for w in ("MISSING", "UNEXPECTED", "newly initialized", "not used") if w in said_text]
    good = error is None and not said
    print(f"CrossEncoder({folder}) loads "
          f"{'quietly' if good else 'with: ' + (error or ', '.join(said)) + chr(10) + said_text[-500:]}")
    return good


def read_beir(folder):
    """The queries, documents ("title text", stripped as BEIR's reranking strips) and positives."""
    queries = {str(r["_id"]): r["text"] for r in read_jsonl(os.path.join(folder, "queries.jsonl"))}
    corpus = {}
    for r in read_jsonl(os.path.join(folder, "corpus.jsonl")):
        corpus[str(r["_id"])] = ((r.get("title") or "") + " " + (r.get("text") or "")).strip(" \t\n\r\f\v")
    positives = {}
    with open(os.path.join(folder, "qrels", "test.tsv"), encoding="utf-8") as f:
        next(f)
        for line in f:
            qid, did, score = line.rstrip("\n").split("\t")
            if int(score) > 0:
                positives.setdefault(qid, []).append(did)
    return queries, corpus, positives


class Scored:
    """A stand-in CrossEncoder whose predict returns given scores of (query id, doc id)."""

    class NoCard:
        def set_evaluation_metrics(self, *args, **kwargs):
            pass

    def __init__(self, scores):
        self.scores = scores
        self.model_card_data = Scored.NoCard()

    def predict(self, pairs, **kwargs):
        return np.array([self.scores[(q, d)] for q, d in pairs], dtype=np.float64)


TOL = 1e-6  # --tol


def compare(label, ours, theirs, tol=None):
    tol = TOL if tol is None else tol
    diff = abs(ours - theirs)
    print(f"{label:34s} embed-train {ours:.9f}  sentence-transformers {theirs:.9f}"
          f"{'' if diff <= tol else '   <-- differs'}")
    return diff <= tol


def first_stage_order(work, corpus_ids):
    """Each query's documents by cosine of eval's saved unit embeddings, descending, ties by id."""
    q = torch.from_numpy(np.load(os.path.join(work, "queries.npy")))
    c = torch.from_numpy(np.load(os.path.join(work, "corpus.npy")))
    by_id = np.argsort(np.array(corpus_ids), kind="stable")
    id_rank = np.empty(len(corpus_ids), dtype=np.int64)
    id_rank[by_id] = np.arange(len(corpus_ids))
    sim = (q @ c.T).numpy()
    return [np.lexsort((id_rank, -row)) for row in sim]


def two_stage(a, folders, beir, work):
    """embed-train eval --first-stage on `beir`: its JSON and each query's reranked top K."""
    rankings = os.path.join(work, "reranked.jsonl")
    two = json.loads(run([a.embed_train, "eval", "--model", folders["one_label"], "--beir", beir, "--first-stage",
                          a.minilm, "--top-k", str(a.top_k), "--format", "json", "--output", rankings])
                     .strip().splitlines()[-1])
    return two, read_jsonl(rankings)


def evaluator_inputs(a, ranked, first_stage, positives):
    """The evaluator's samples (ids for texts: relevance by id) and the scores its model
    returns, from embed-train's reranked top K and each query's first-stage order (ids)."""
    scores, samples = {}, []
    same_candidates = True
    for line in ranked:
        qid, top = line["query_id"], line["ranking"]
        first = first_stage[qid]
        same_candidates &= sorted(d["id"] for d in top) == sorted(first[:a.top_k])
        for d in top:
            scores[(qid, d["id"])] = d["score"]
        floor = min(d["score"] for d in top) - 1.0
        for r, did in enumerate(first[a.top_k:]):
            scores[(qid, did)] = floor - r
        samples.append({"query": qid, "positive": positives[qid], "documents": first})
    return samples, scores, same_candidates


def run_evaluator(samples, scores):
    from sentence_transformers.cross_encoder.evaluation import CrossEncoderRerankingEvaluator
    return CrossEncoderRerankingEvaluator(samples, at_k=10, always_rerank_positives=False, write_csv=False)(
        Scored(scores))


def check_rerank_eval(a, folders):
    """(b): eval --first-stage against eval --beir and CrossEncoderRerankingEvaluator."""
    from sentence_transformers import CrossEncoder
    emb = os.path.join(a.work, "first-stage")
    today = json.loads(run([a.embed_train, "eval", "--model", a.minilm, "--beir", a.beir, "--format", "json",
                            "--save-embeddings", emb]).strip().splitlines()[-1])
    two, ranked = two_stage(a, folders, a.beir, a.work)
    names = [k for k in today if "@" in k]
    ok = len(names) == 15 and all(two[f"first_stage/{k}"] == today[k] for k in names)
    print(f"first stage: {len(names)} metrics {'equal' if ok else 'NOT equal'} to eval --beir's")

    queries, corpus, positives = read_beir(a.beir)
    corpus_ids = list(corpus)
    order = first_stage_order(emb, corpus_ids)
    assert len(ranked) == len(order) == two["queries"], "the evaluated queries differ"
    first_stage = {line["query_id"]: [corpus_ids[j] for j in order[i]] for i, line in enumerate(ranked)}
    samples, scores, same_candidates = evaluator_inputs(a, ranked, first_stage, positives)
    ok &= same_candidates
    print(f"candidates: each query's top {a.top_k} {'are' if same_candidates else 'are NOT'} the first stage's")

    # Every third query's candidates (the time of CrossEncoder.predict on all of them is
    # half the test's; (a) holds the scoring's hard cases).
    some = ranked[::3]
    pairs = [(queries[line["query_id"]], corpus[d["id"]]) for line in some for d in line["ranking"]]
    ours = [d["score"] for line in some for d in line["ranking"]]
    predicted = CrossEncoder(folders["one_label"], device="cpu").predict(pairs, batch_size=64)
    diff = float(np.abs(np.asarray(ours) - np.asarray(predicted)).max())
    ok &= diff <= 1e-5
    print(f"scores: {len(pairs)} pairs of {len(some)} queries, max |embed-train - CrossEncoder.predict| {diff:.3g} "
          f"(tolerance 1e-5)")

    theirs = run_evaluator(samples, scores)
    for metric in ("mrr@10", "ndcg@10"):
        ok &= compare(f"reranked/{metric}", two[f"reranked/{metric}"], theirs[metric])
        ok &= compare(f"first_stage/{metric}", two[f"first_stage/{metric}"], theirs[f"base_{metric}"])
    # The per-query metrics of --output average to the reported ones.
    for stage in ("first_stage", "reranked"):
        ok &= all(abs(float(np.mean([line[stage][k] for line in ranked])) - two[f"{stage}/{k}"]) <= 1e-12
                  for k in names)
    return check_map(ranked, samples, scores) and ok


def check_map(ranked, samples, scores):
    """The evaluator's map (average precision over the whole ranking) against map@100, on the
    queries whose relevant documents all rank in the top 100 of both rankings (where the two
    are one number): the mean of those queries' map@100 in embed-train's --output."""
    whole = set()
    for s in samples:
        final = sorted(s["documents"], key=lambda d: -scores[(s["query"], d)])
        if all(final.index(p) < 100 and s["documents"].index(p) < 100 for p in s["positive"]):
            whole.add(s["query"])
    print(f"map: {len(whole)} of {len(samples)} queries have every relevant document in the top 100 of both "
          f"rankings; map compared on them")
    theirs = run_evaluator([s for s in samples if s["query"] in whole], scores)
    ok = True
    for stage, key in (("reranked", "map"), ("first_stage", "base_map")):
        ours = float(np.mean([line[stage]["map@100"] for line in ranked if line["query_id"] in whole]))
        ok &= compare(f"{stage}/map@100 ({len(whole)} queries)", ours, theirs[key], TOL)
    return ok


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    f = sub.add_parser("folders")
    f.add_argument("--minilm", required=True)
    f.add_argument("out")
    t = sub.add_parser("test")
    t.add_argument("--minilm", required=True)
    t.add_argument("--embed-train", required=True)
    t.add_argument("--beir", required=True)
    t.add_argument("--work", default="rerank-reference")
    t.add_argument("--top-k", type=int, default=20)
    t.add_argument("--tol", type=float, default=1e-6)
    a = p.parse_args()
    global TOL
    TOL = getattr(a, "tol", TOL)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    if a.command == "folders":
        make_folders(a.minilm, a.out)
        return 0
    os.makedirs(a.work, exist_ok=True)
    folders_dir = os.path.join(a.work, "folders")
    if not all(os.path.isdir(os.path.join(folders_dir, n)) for n in FOLDERS):
        make_folders(a.minilm, folders_dir)
    folders = {n: os.path.join(folders_dir, n) for n in FOLDERS}
    try:
        ok = check_predict(a, folders)
        ours = train_ours(a, folders)
        ok &= check_quiet_load(ours)
        ok &= check_predict(a, {"trained_by_embed_train": ours})
        classifier = train_ours(a, folders, classifier=True)
        ok &= check_quiet_load(classifier)
        ok &= check_predict(a, {"classifier_trained_by_embed_train": classifier})
        ok &= check_rerank_eval(a, folders)
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 2
    print("agreement" if ok else "DISAGREEMENT")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
