#!/usr/bin/env python3
"""Parquet files written by the real pyarrow, and the same rows as JSONL, for the pieces
`embed-train prepare` cuts of a Parquet file by row groups (tests/core/test_prepared.cpp).

    make_prepared_parquet_fixtures.py OUT

Writes into OUT (the same every time):
  pairs.jsonl       300 pairs {"query", "pos": [1 or 2 texts]}, every third with "neg"
                    and teacher scores ("pos_scores", "neg_scores"), non-ASCII text among them
  pairs.parquet     the same rows (string, list<string>, list<double> columns; the others'
                    negatives and scores null), Zstd, row groups of 7 rows: 43 groups
  bad.parquet       the same, row groups of 10, the query of row 3 of row group 25 null
"""
import json
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq


def rows():
    out = []
    for i in range(1, 301):
        row = {"query": f"what is word number {i}?",
               "pos": [f"it is the {i}th word"] + ([f"also word {i % 11} café"] if i % 2 else []),
               "neg": None, "pos_scores": None, "neg_scores": None}
        if i % 3 == 0:
            row["neg"] = [f"not {i}", f"a Straße {i % 5}"]
            row["pos_scores"] = [round(0.5 + (i % 7) / 20, 3)] * len(row["pos"])
            row["neg_scores"] = [round((i % 5) / 10, 3), 0.125]
        out.append(row)
    return out


SCHEMA = pa.schema([("query", pa.string()), ("pos", pa.list_(pa.string())), ("neg", pa.list_(pa.string())),
                    ("pos_scores", pa.list_(pa.float64())), ("neg_scores", pa.list_(pa.float64()))])


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    data = rows()
    with open(os.path.join(out, "pairs.jsonl"), "w", encoding="utf-8") as f:
        for row in data:
            f.write(json.dumps({k: v for k, v in row.items() if v is not None}, ensure_ascii=False) + "\n")
    table = pa.Table.from_pylist(data, schema=SCHEMA)
    pq.write_table(table, os.path.join(out, "pairs.parquet"), row_group_size=7, compression="zstd")
    bad = list(data)
    bad[25 * 10 + 3] = dict(bad[25 * 10 + 3], query=None)
    pq.write_table(pa.Table.from_pylist(bad, schema=SCHEMA), os.path.join(out, "bad.parquet"), row_group_size=10)


if __name__ == "__main__":
    main()
