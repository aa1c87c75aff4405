#!/usr/bin/env python3
"""Parquet pair files written by the real pyarrow, and the same rows as JSONL, for
tests/core/test_table_files.cpp (the Parquet reader of lib/data/table_files.h).

    make_parquet_fixtures.py OUT

Writes into OUT (seeded, so the same every time):
  a.jsonl             60 pairs {"query", "pos": [..], "neg": [..], "score", "pos_scores",
                      "neg_scores"}: one to three positives, zero to four negatives,
                      non-ASCII text among them
  a.parquet           the same rows: string, list<string>, double columns; Snappy (pyarrow's
                      default), row groups of 7 rows
  a_zstd.parquet      the same, Zstd, row groups of 16
  a_large.parquet     the same as large_string / large_list columns, the query dictionary-
                      encoded (a pandas category), no compression, one row group
  a_shards/part-0000N.parquet  the rows in three shards of 20
  a.data              a.parquet under a name without .parquet (known by its magic bytes)
  b.jsonl             60 pairs {"anchor", "positive", "negative": [3 texts]}
  b.parquet           the same as sentence-transformers' mined sets: anchor, positive,
                      negative_1 .. negative_3 (written in the order 3, 1, 2: the number
                      orders them), and an "id" column that is not read
  b_list.parquet      anchor, positive, negative (list<string>)
  b_position.parquet  question, answer, hard_1 .. hard_3: no name of ours, so by position
  b_view.parquet      anchor and positive as string_view, negative as fixed_size_list<string>[3]
  bad/                one fault a file (see bad_files below)
"""
import json
import os
import random
import sys

import pyarrow as pa
import pyarrow.parquet as pq

WORDS = ("river bank money loan stream water deposit credit fish boat interest rate account "
         "mountain valley snow ice summit trail forest pine oak leaf branch root seed grain "
         "café naïve résumé Straße 東京 données").split()


def sentence(rng, lo=3, hi=12):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))).capitalize()


def rows_a(rng):
    rows = []
    for _ in range(60):
        pos = [sentence(rng) for _ in range(rng.randint(1, 3))]
        neg = [sentence(rng) for _ in range(rng.randint(0, 4))]
        rows.append({"query": sentence(rng, 2, 6), "pos": pos, "neg": neg,
                     "score": round(rng.uniform(-1, 1), 3),
                     "pos_scores": [round(rng.uniform(0, 1), 4) for _ in pos],
                     "neg_scores": [round(rng.uniform(0, 1), 4) for _ in neg]})
    return rows


def rows_b(rng):
    return [{"anchor": sentence(rng, 2, 6), "positive": sentence(rng),
             "negative": [sentence(rng) for _ in range(3)]} for _ in range(60)]


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


def table_a(rows, large=False):
    text = pa.large_string() if large else pa.string()
    texts = pa.large_list(text) if large else pa.list_(text)
    numbers = pa.large_list(pa.float64()) if large else pa.list_(pa.float64())
    query = pa.array([r["query"] for r in rows], text)
    if large:
        query = query.dictionary_encode()
    return pa.table({
        "query": query,
        "pos": pa.array([r["pos"] for r in rows], texts),
        "neg": pa.array([r["neg"] for r in rows], texts),
        "score": pa.array([r["score"] for r in rows], pa.float64()),
        "pos_scores": pa.array([r["pos_scores"] for r in rows], numbers),
        "neg_scores": pa.array([r["neg_scores"] for r in rows], numbers),
    })


def bad_files(out):
    """bad/: each file one fault, named for it."""
    bad = os.path.join(out, "bad")
    os.makedirs(bad)

    def write(name, columns, **kwargs):
        pq.write_table(pa.table(columns), os.path.join(bad, name), **kwargs)

    write("misspelled.parquet", {"querry": ["a b"], "pos": ["c d"]})
    write("int_query.parquet", {"query": pa.array([1, 2], pa.int64()), "pos": ["a", "b"]})
    write("struct_pos.parquet", {"query": ["a"], "pos": pa.array([{"text": "b", "id": 1}])})
    # A null query in row group 1 (rows of 3), its row 2: the file's row 5.
    write("null_query.parquet", {"query": ["q0", "q1", "q2", "q3", "q4", None, "q6"],
                                 "pos": ["p"] * 7}, row_group_size=3)
    write("null_in_pos_list.parquet", {"query": ["q0", "q1"], "pos": [["p"], ["p", None]]})
    write("empty_query.parquet", {"query": ["q0", "  "], "pos": ["p", "p"]})
    write("no_rows.parquet", {"query": pa.array([], pa.string()), "pos": pa.array([], pa.string())})
    write("one_column.parquet", {"text": ["a", "b"]})
    write("label_text.parquet", {"query": ["a"], "pos": ["b"], "label": ["yes"]})
    write("scores_count.parquet", {"query": ["a"], "pos": ["b"], "neg": [["c", "d"]], "label": [[0.5, 0.1]]})
    open(os.path.join(bad, "empty.parquet"), "wb").close()
    whole = os.path.join(out, "a.parquet")
    data = open(whole, "rb").read()
    # Cut in its footer: the last bytes ("PAR1") gone.
    with open(os.path.join(bad, "cut.parquet"), "wb") as f:
        f.write(data[:len(data) - 100])
    # The footer's length (the 4 bytes before the closing "PAR1") made larger than the file.
    with open(os.path.join(bad, "corrupt_footer.parquet"), "wb") as f:
        f.write(data[:-8] + (len(data) * 2).to_bytes(4, "little") + b"PAR1")
    # The footer's Thrift bytes overwritten.
    footer_length = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - footer_length
    garbled = bytearray(data)
    for i in range(start, start + footer_length // 2):
        garbled[i] = 0xFF
    with open(os.path.join(bad, "garbled_footer.parquet"), "wb") as f:
        f.write(bytes(garbled))
    # The page header of row group 3's first column overwritten: the footer reads, row
    # groups 0 to 2 too, and row group 3 does not.
    column = pq.ParquetFile(whole).metadata.row_group(3).column(0)
    garbled = bytearray(data)
    for i in range(column.data_page_offset, column.data_page_offset + 40):
        garbled[i] = 0x5A
    with open(os.path.join(bad, "corrupt_page.parquet"), "wb") as f:
        f.write(bytes(garbled))


def main():
    out = sys.argv[1]
    rng = random.Random(46)
    a = rows_a(rng)
    write_jsonl(os.path.join(out, "a.jsonl"), a)
    pq.write_table(table_a(a), os.path.join(out, "a.parquet"), row_group_size=7)
    pq.write_table(table_a(a), os.path.join(out, "a_zstd.parquet"), row_group_size=16, compression="zstd")
    pq.write_table(table_a(a, large=True), os.path.join(out, "a_large.parquet"), compression="none")
    os.makedirs(os.path.join(out, "a_shards"))
    for k in range(3):
        pq.write_table(table_a(a[20 * k:20 * (k + 1)]), os.path.join(out, "a_shards", f"part-{k:05d}.parquet"))
    with open(os.path.join(out, "a.parquet"), "rb") as src, open(os.path.join(out, "a.data"), "wb") as dst:
        dst.write(src.read())

    b = rows_b(rng)
    write_jsonl(os.path.join(out, "b.jsonl"), b)
    anchors = [r["anchor"] for r in b]
    positives = [r["positive"] for r in b]
    negatives = [[r["negative"][k] for r in b] for k in range(3)]
    pq.write_table(pa.table({"id": list(range(len(b))), "anchor": anchors, "positive": positives,
                             "negative_3": negatives[2], "negative_1": negatives[0], "negative_2": negatives[1]}),
                   os.path.join(out, "b.parquet"))
    pq.write_table(pa.table({"anchor": anchors, "positive": positives, "negative": [r["negative"] for r in b]}),
                   os.path.join(out, "b_list.parquet"))
    pq.write_table(pa.table({"question": anchors, "answer": positives, "hard_1": negatives[0],
                             "hard_2": negatives[1], "hard_3": negatives[2]}),
                   os.path.join(out, "b_position.parquet"))
    pq.write_table(pa.table({"anchor": pa.array(anchors, pa.string_view()),
                             "positive": pa.array(positives, pa.string_view()),
                             "negative": pa.array([r["negative"] for r in b], pa.list_(pa.string(), 3))}),
                   os.path.join(out, "b_view.parquet"))
    bad_files(out)


if __name__ == "__main__":
    main()
