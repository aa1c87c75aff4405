#!/usr/bin/env python3
"""Make data/trecqa_beir/ (a BEIR folder) from TrecQA's test split.

Usage: make-trecqa-beir.py TEST_CSV OUT_DIR

TEST_CSV: data/anssel/wang/test.csv of https://github.com/brmson/dataset-sts (columns
qtext, label, atext). Each distinct question is a query, each distinct answer sentence a
document of the corpus (the candidates of every question pooled), and each (question,
sentence) row a qrels line with its label as the score: 1 answers the question, 0 is a
judged non-answer. Ids are numbered in order of first appearance, so the same CSV gives
the same bytes.
"""
import csv
import json
import os
import sys


def main(test_csv: str, out: str) -> None:
    queries, corpus, qrels = {}, {}, {}
    with open(test_csv, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            q = queries.setdefault(row["qtext"], f"q{len(queries) + 1:03d}")
            d = corpus.setdefault(row["atext"], f"d{len(corpus) + 1:04d}")
            qrels[(q, d)] = max(qrels.get((q, d), 0), int(row["label"]))
    os.makedirs(os.path.join(out, "qrels"), exist_ok=True)
    with open(os.path.join(out, "queries.jsonl"), "w", encoding="utf-8") as f:
        for text, qid in queries.items():
            f.write(json.dumps({"_id": qid, "text": text}, ensure_ascii=False) + "\n")
    with open(os.path.join(out, "corpus.jsonl"), "w", encoding="utf-8") as f:
        for text, did in corpus.items():
            f.write(json.dumps({"_id": did, "title": "", "text": text}, ensure_ascii=False) + "\n")
    with open(os.path.join(out, "qrels", "test.tsv"), "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for (qid, did), score in qrels.items():
            f.write(f"{qid}\t{did}\t{score}\n")
    relevant = sum(1 for s in qrels.values() if s > 0)
    with_answer = len({q for (q, _), s in qrels.items() if s > 0})
    print(f"{len(queries)} queries ({with_answer} with an answer), {len(corpus)} documents, "
          f"{len(qrels)} judgements ({relevant} relevant)")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
