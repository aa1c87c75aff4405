#!/usr/bin/env python3
"""Make data/trecqa_train/questions.jsonl, reranker training data, from TrecQA's train and dev splits.

Usage: make-trecqa-train.py TRAIN_CSV[,DEV_CSV...] BEIR_DIR OUT_DIR

TRAIN_CSV, DEV_CSV: data/anssel/wang/train.csv and dev.csv of
https://github.com/brmson/dataset-sts (columns qtext, label, atext), read in the order
given. One line per question, in CSV order:
{"query": question, "pos": [its answer sentences], "neg": [its judged non-answers]}, each
list in CSV order, duplicates dropped (scripts/recipe-rerank.sh trains on one line per
answer, each with the question's non-answers: `expand` below writes them). Questions without a positive are skipped.
Questions whose text is one of BEIR_DIR/queries.jsonl's (the test questions) are dropped,
so that training never sees a question it is judged on. Text is unchanged, so the same
CSV gives the same bytes.
"""
import csv
import json
import os
import sys


def main(csv_files: str, beir_dir: str, out: str) -> None:
    with open(os.path.join(beir_dir, "queries.jsonl"), encoding="utf-8") as f:
        test_questions = {json.loads(line)["text"] for line in f if line.strip()}
    answers, non_answers = {}, {}
    for csv_file in csv_files.split(","):
        with open(csv_file, newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                label = {"0": non_answers, "1": answers}[row["label"]]
                sentences = label.setdefault(row["qtext"], [])
                if row["atext"] not in sentences:
                    sentences.append(row["atext"])
    questions = list(dict.fromkeys(list(answers) + list(non_answers)))
    overlap = [q for q in questions if q in test_questions]
    lines = 0
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "questions.jsonl"), "w", encoding="utf-8") as f:
        for question in questions:
            if question in test_questions or question not in answers:
                continue
            f.write(json.dumps({"query": question, "pos": answers[question], "neg": non_answers.get(question, [])},
                               ensure_ascii=False) + "\n")
            lines += len(answers[question])
    kept = [q for q in questions if q not in test_questions and q in answers]
    print(f"{len(questions)} questions, {len(overlap)} also test questions (dropped), {len(kept)} with an "
          f"answer kept: {lines} answers, {sum(len(non_answers.get(q, [])) for q in kept)} judged non-answers")


def expand(questions: str, out: str) -> None:
    """One line per answer: {"query", "pos": answer, "neg": the question's non-answers}."""
    with open(questions, encoding="utf-8") as f, open(out, "w", encoding="utf-8") as w:
        for line in f:
            q = json.loads(line)
            for answer in q["pos"]:
                w.write(json.dumps({"query": q["query"], "pos": answer, "neg": q["neg"]}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "expand":
        expand(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4:
        main(sys.argv[1], sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__ + "\n       make-trecqa-train.py expand QUESTIONS_JSONL OUT_JSONL")
