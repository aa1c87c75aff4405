"""JSONL pair shards as one Parquet file, as the Hugging Face Hub keeps such a set: for
scripts/bench-prepare.sh (MODE=parquet), which prepares the same rows from both.

Reads the shards one at a time (pyarrow's JSON reader: columns as the lines give them,
"query" and "pos" strings for make_big_pairs.py's shards) and appends each to one Parquet
file in row groups of ROWS rows, Zstd-compressed: memory is that of one shard, whatever
the number of shards. A file that is already there with the right number of rows is kept.

    python pairs_to_parquet.py --out FILE.parquet [--row-group-rows 100000] SHARD.jsonl...
"""
import argparse
import os

import pyarrow.json as pj
import pyarrow.parquet as pq


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--row-group-rows", type=int, default=100_000)
    ap.add_argument("shards", nargs="+")
    args = ap.parse_args()
    if os.path.exists(args.out):
        rows = sum(1 for shard in args.shards for _ in open(shard, "rb"))
        if pq.ParquetFile(args.out).metadata.num_rows == rows:
            return
    tmp = args.out + ".tmp"
    writer = None
    try:
        for shard in args.shards:
            table = pj.read_json(shard)
            if writer is None:
                writer = pq.ParquetWriter(tmp, table.schema, compression="zstd")
            writer.write_table(table, row_group_size=args.row_group_rows)
            del table
    finally:
        if writer is not None:
            writer.close()
    os.replace(tmp, args.out)
    meta = pq.ParquetFile(args.out).metadata
    print(f"wrote {args.out}: {meta.num_rows} rows in {meta.num_row_groups} row groups", flush=True)


if __name__ == "__main__":
    main()
