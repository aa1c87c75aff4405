#!/usr/bin/env python3
"""Inputs of `embed-train encode` and `mine` as text and as table files, written by the real
pyarrow, for tests/torch/test_inference.cpp and tests/torch/test_mine.cpp.

    make_inference_fixtures.py --pairs TRAIN.jsonl OUT

Writes into OUT:
  sentences.txt      one sentence a line: lengths from one word to dozens of pieces, not in
                     length order, non-ASCII text among them, one repeated
  sentences.parquet  the same as the column "sentence" after an int64 column "n" (no column
                     "text": encode takes "sentence"); Zstd, row groups of 3
  sentences.csv      the same as the column "text" after "n", as pyarrow.csv writes it (quoted)
  pairs.jsonl        the first 200 lines of TRAIN.jsonl ({"query", "pos"})
  pairs.parquet      the same rows: "query" and "pos" string columns, row groups of 64
"""
import json
import os
import sys

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

SENTENCES = [
    "short",
    "a considerably longer sentence that goes on and on about the weather in the mountains in late autumn",
    "two words",
    "the quick brown fox jumps over the lazy dog",
    "short",
    "Straße, café, naïve, 東京: text that is not ASCII",
    "an extraordinarily verbose and circumlocutory formulation, replete with subordinate clauses, "
    "parenthetical remarks (such as this one), and punctuation; it is here only to be long",
    "medium length sentence here",
]


def main():
    args = sys.argv[1:]
    if len(args) != 3 or args[0] != "--pairs":
        sys.exit(__doc__)
    train, out = args[1], args[2]
    os.makedirs(out, exist_ok=True)

    with open(f"{out}/sentences.txt", "w", encoding="utf-8") as f:
        f.write("".join(s + "\n" for s in SENTENCES))
    numbers = pa.array(range(len(SENTENCES)), pa.int64())
    pq.write_table(pa.table({"n": numbers, "sentence": pa.array(SENTENCES, pa.string())}),
                   f"{out}/sentences.parquet", row_group_size=3, compression="zstd")
    pacsv.write_csv(pa.table({"n": numbers, "text": pa.array(SENTENCES, pa.string())}), f"{out}/sentences.csv")

    with open(train, encoding="utf-8") as f:
        lines = [line for _, line in zip(range(200), f)]
    with open(f"{out}/pairs.jsonl", "w", encoding="utf-8") as f:
        f.write("".join(lines))
    rows = [json.loads(line) for line in lines]
    assert all(set(r) == {"query", "pos"} and isinstance(r["pos"], str) for r in rows), "expected query/pos pairs"
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema([("query", pa.string()), ("pos", pa.string())])),
                   f"{out}/pairs.parquet", row_group_size=64)


if __name__ == "__main__":
    main()
