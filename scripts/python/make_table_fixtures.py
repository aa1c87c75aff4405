#!/usr/bin/env python3
"""Arrow IPC, CSV and TSV pair files written by the real pyarrow (and datasets), and the
same rows as JSONL, for tests/core/test_table_files.cpp (lib/data/table_file.h).

    make_table_fixtures.py OUT

The rows are make_parquet_fixtures.py's (the same seed). Writes into OUT:
  a.jsonl              60 pairs with lists of positives and negatives, scores, teacher scores
  a.arrow              the same as an IPC stream (pyarrow.ipc.new_stream), record batches of 7
  a_file.arrow         the same as an IPC file ("ARROW1") named .arrow, record batches of 16
  a.feather            the same by pyarrow.feather.write_feather: Zstd buffers, batches of 16
  a_saved/             datasets.Dataset.save_to_disk of the rows (data-00000-of-00001.arrow)
  b.jsonl              60 pairs {"anchor", "positive", "negative": [3 texts]}
  b.csv, b.tsv         anchor, positive, negative_1 .. negative_3 by pyarrow.csv.write_csv
                       (strings quoted; the TSV with a tab between fields)
  b_named.arrow        the same as an IPC stream with columns of no name of ours (id, premise,
                       hypothesis, c1 .. c3): mapped by explicit column names
  c.jsonl, c.csv, c.tsv  60 pairs {"query", "pos", "neg", "score"} whose texts hold commas,
                       tabs, double quotes and (one) a line break, quoted as write_csv quotes
  c.csv.gz             c.csv through gzip
  ids.jsonl, ids.csv   queries that look like numbers ("007", "12", "3.50"), unquoted
  big.csv              40000 rows (about 3 MB, three blocks of Arrow's reader), line 39002 with
                       a field too many
  bad/                 one fault a file: fields.csv (line 5 has 3 fields for a header of 2),
                       cut.arrow (a.arrow cut inside record batch 4), unended.arrow (a.arrow
                       without its end-of-stream marker), empty.csv (0 bytes), not_arrow.arrow,
                       empty_pos.csv (line 3's positive an empty field), late_score.csv
                       (scores that are numbers for 1.2 MB, then "abc" on line 60001)
"""
import gzip
import os
import sys

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.feather as feather
import pyarrow.ipc as ipc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_parquet_fixtures as parquet_fixtures  # noqa: E402  (the same rows)

import random  # noqa: E402


def write_jsonl(path, rows):
    parquet_fixtures.write_jsonl(path, rows)


def write_stream(path, table, chunk):
    with ipc.new_stream(path, table.schema) as writer:
        writer.write_table(table, max_chunksize=chunk)


def rows_c(rng):
    """Texts that CSV must quote: commas, tabs, double quotes; one with a line break."""
    rows = []
    for i in range(60):
        query = parquet_fixtures.sentence(rng, 2, 6)
        pos = parquet_fixtures.sentence(rng) + ', "quoted", and\tmore'
        neg = parquet_fixtures.sentence(rng)
        if i == 30:
            pos = "first line\nsecond line, " + pos
        rows.append({"query": query, "pos": [pos], "neg": [neg], "score": round(rng.uniform(-1, 1), 3)})
    return rows


def table_c(rows):
    return pa.table({"query": [r["query"] for r in rows], "pos": [r["pos"][0] for r in rows],
                     "neg": [r["neg"][0] for r in rows], "score": [r["score"] for r in rows]})


def table_b(rows):
    return pa.table({"anchor": [r["anchor"] for r in rows], "positive": [r["positive"] for r in rows],
                     "negative_1": [r["negative"][0] for r in rows], "negative_2": [r["negative"][1] for r in rows],
                     "negative_3": [r["negative"][2] for r in rows]})


def write_ids(out):
    queries = ["007", "12", "3.50", "1e3", "42", "0"]
    rows = [{"query": q, "pos": [f"the passage of {q}"]} for q in queries]
    write_jsonl(os.path.join(out, "ids.jsonl"), rows)
    pcsv.write_csv(pa.table({"query": queries, "pos": [r["pos"][0] for r in rows]}), os.path.join(out, "ids.csv"),
                   pcsv.WriteOptions(quoting_style="none"))


def write_big(out):
    rows = 40000
    queries = [f"query number {i} about rivers and banks" for i in range(rows)]
    passages = [f"passage number {i}, which is about money and loans" for i in range(rows)]
    path = os.path.join(out, "big.csv")
    pcsv.write_csv(pa.table({"query": queries, "pos": passages}), path)
    lines = open(path, encoding="utf-8").read().split("\n")
    lines[39001] += ",an extra field"  # line 39002 of the file (the header is line 1)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def bad_files(out):
    bad = os.path.join(out, "bad")
    os.makedirs(bad)
    with open(os.path.join(bad, "fields.csv"), "w", encoding="utf-8") as f:
        f.write("query,pos\na,b\nc,d\ne,f\ng,h,i\nj,k\n")
    open(os.path.join(bad, "empty.csv"), "wb").close()
    with open(os.path.join(bad, "empty_pos.csv"), "w", encoding="utf-8") as f:
        f.write("query,pos\na,b\nc,\ne,f\n")
    with open(os.path.join(bad, "late_score.csv"), "w", encoding="utf-8") as f:
        f.write("query,pos,score\n" + "".join(f"q{i},p{i},{i}.5\n" for i in range(59999)) + "q,p,abc\n")
    with open(os.path.join(bad, "not_arrow.arrow"), "w", encoding="utf-8") as f:
        f.write('{"query": "a", "pos": "b"}\n')
    data = open(os.path.join(out, "a.arrow"), "rb").read()
    # Message offsets of a.arrow's record batches, to cut inside batch 4 and between batches.
    reader = ipc.open_stream(data)
    offsets = []
    position = reader.schema.serialize().size
    source = pa.BufferReader(data)
    source.seek(position)
    message_reader = ipc.MessageReader.open_stream(source)
    for message in message_reader:
        offsets.append((position, source.tell()))
        position = source.tell()
    begin, end = offsets[4]
    with open(os.path.join(bad, "cut.arrow"), "wb") as f:
        f.write(data[:(begin + end) // 2])
    with open(os.path.join(bad, "unended.arrow"), "wb") as f:
        f.write(data[:offsets[-1][1]])  # whole batches, the end-of-stream marker gone


def main():
    out = sys.argv[1]
    rng = random.Random(46)  # as make_parquet_fixtures.py: the same rows a and b
    a = parquet_fixtures.rows_a(rng)
    write_jsonl(os.path.join(out, "a.jsonl"), a)
    table = parquet_fixtures.table_a(a)
    write_stream(os.path.join(out, "a.arrow"), table, 7)
    with ipc.new_file(os.path.join(out, "a_file.arrow"), table.schema) as writer:
        writer.write_table(table, max_chunksize=16)
    feather.write_feather(table, os.path.join(out, "a.feather"), compression="zstd", chunksize=16)
    import datasets  # only here: its import is slow
    datasets.Dataset.from_list(a).save_to_disk(os.path.join(out, "a_saved"))

    b = parquet_fixtures.rows_b(rng)
    write_jsonl(os.path.join(out, "b.jsonl"), b)
    pcsv.write_csv(table_b(b), os.path.join(out, "b.csv"))
    pcsv.write_csv(table_b(b), os.path.join(out, "b.tsv"), pcsv.WriteOptions(delimiter="\t"))
    named = table_b(b).rename_columns(["premise", "hypothesis", "c1", "c2", "c3"])
    named = named.add_column(0, "id", pa.array(range(len(b))))
    write_stream(os.path.join(out, "b_named.arrow"), named, 1000)

    c = rows_c(random.Random(4646))
    write_jsonl(os.path.join(out, "c.jsonl"), c)
    pcsv.write_csv(table_c(c), os.path.join(out, "c.csv"))
    pcsv.write_csv(table_c(c), os.path.join(out, "c.tsv"), pcsv.WriteOptions(delimiter="\t"))
    with open(os.path.join(out, "c.csv"), "rb") as src, gzip.open(os.path.join(out, "c.csv.gz"), "wb") as dst:
        dst.write(src.read())
    write_ids(out)
    write_big(out)
    bad_files(out)


if __name__ == "__main__":
    main()
