#!/usr/bin/env python3
"""BEIR sets in MTEB's Parquet layout, written by the real pyarrow and read back by the real `datasets`, and the
same sets as BEIR's own JSONL/TSV folders, for tests/core/test_beir.cpp (lib/data/beir.h)
and the Reference test of scripts/python/beir_reference.py.

    make_beir_fixtures.py [--beir FOLDER] OUT

MTEB publishes a BEIR set as a Hugging Face dataset of three configs (the README's
`configs:` block): `corpus` ("_id", "title", "text"), `queries` ("_id", "text") and
`default`, the qrels ("query-id", "corpus-id", "score"), one split each of test/train/dev.
Every folder written here is read back with datasets.load_dataset(folder, config), so it is
a layout that `datasets` itself reads.

Writes into OUT:
  mini/                   BEIR's folder: queries.jsonl, corpus.jsonl, qrels/test.tsv, qrels/dev.tsv
  mini_mteb/              the same set in MTEB's layout: corpus/test-00000-of-00001.parquet,
                          queries/..., qrels/test-... and qrels/dev-... (config `default`),
                          row groups of 2 rows
  mini_mteb_qrels_config/ the same with the qrels config named `qrels` (MTEB's newer sets)
  mini_mteb_int_ids/      ids as int64 columns, the score a whole float64 (MTEB casts both)
  mini_mteb_jsonl/        MTEB's older layout: corpus.jsonl, queries.jsonl, qrels/test.jsonl
                          named by the README's configs
  pair_shards/            a Hub folder of pair shards (config default, data/train-*): no BEIR set
  trecqa_mteb/            with --beir FOLDER: FOLDER (a BEIR folder) in MTEB's Parquet layout,
                          qrels split test; Zstd, row groups of 100 rows
  bad/NAME/               mini_mteb with one fault (see BAD below)
"""
import json
import os
import sys
import tempfile

import datasets
import pyarrow as pa
import pyarrow.parquet as pq

QUERIES = [{"_id": "q1", "text": "a question"}, {"_id": "q2", "text": "another question"},
           {"_id": "q3", "text": "a third question, never judged"}]
CORPUS = [{"_id": "d1", "title": "t", "text": "an answer"}, {"_id": "d2", "title": "", "text": "a second answer"},
          {"_id": "d3", "title": "Straße", "text": "café naïve 東京"}]
QRELS = {"test": [("q1", "d1", 1), ("q2", "d2", 2), ("q2", "d3", 0)],
         "dev": [("q1", "d3", 1)]}


def readme(configs):
    """A README.md whose `configs:` block is `configs`: [(name, [(split, path), ...])]."""
    lines = ["---", "configs:"]
    for name, files in configs:
        lines += [f"- config_name: {name}", "  data_files:"]
        for split, path in files:
            lines += [f"  - split: {split}", f"    path: {path}"]
    return "\n".join(lines + ["---", "", "# A BEIR set in MTEB's layout (test fixture)", ""])


def write_parquet(rows, path, schema, row_group_size, compression="snappy"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=schema)
    pq.write_table(table, path, row_group_size=row_group_size, compression=compression)


TEXT = pa.string()
CORPUS_SCHEMA = pa.schema([("_id", TEXT), ("title", TEXT), ("text", TEXT)])
QUERIES_SCHEMA = pa.schema([("_id", TEXT), ("text", TEXT)])
QRELS_SCHEMA = pa.schema([("query-id", TEXT), ("corpus-id", TEXT), ("score", pa.int64())])


def qrels_rows(judgements):
    return [{"query-id": q, "corpus-id": d, "score": s} for q, d, s in judgements]


def write_mteb(folder, queries, corpus, qrels, row_group_size=2, qrels_config="default",
               schemas=(CORPUS_SCHEMA, QUERIES_SCHEMA, QRELS_SCHEMA), compression="snappy"):
    """`datasets.Dataset.to_parquet` files, as push_to_hub names them, and the README."""
    corpus_schema, queries_schema, qrels_schema = schemas
    name = "-00000-of-00001.parquet"
    write_parquet(corpus, f"{folder}/corpus/test{name}", corpus_schema, row_group_size, compression)
    write_parquet(queries, f"{folder}/queries/test{name}", queries_schema, row_group_size, compression)
    for split, judgements in qrels.items():
        rows = judgements if judgements and isinstance(judgements[0], dict) else qrels_rows(judgements)
        write_parquet(rows, f"{folder}/qrels/{split}{name}", qrels_schema, row_group_size, compression)
    with open(f"{folder}/README.md", "w", encoding="utf-8") as f:
        f.write(readme([("corpus", [("test", "corpus/test-*")]),
                        (qrels_config, [(split, f"qrels/{split}-*") for split in qrels]),
                        ("queries", [("test", "queries/test-*")])]))


# datasets' cache of what it reads, made in main() and removed at its end.
CACHE = None


def check_with_datasets(folder, qrels_config="default"):
    """The folder as `datasets` reads it: the configs load, with MTEB's columns."""
    corpus = datasets.load_dataset(folder, "corpus", cache_dir=CACHE)
    queries = datasets.load_dataset(folder, "queries", cache_dir=CACHE)
    qrels = datasets.load_dataset(folder, qrels_config, cache_dir=CACHE)
    assert {"_id", "text"} <= set(next(iter(corpus.values())).column_names), folder
    assert {"_id", "text"} <= set(next(iter(queries.values())).column_names), folder
    assert {"query-id", "corpus-id", "score"} <= set(next(iter(qrels.values())).column_names), folder


def write_beir(folder, queries, corpus, qrels):
    os.makedirs(f"{folder}/qrels", exist_ok=True)
    for name, rows in (("queries", queries), ("corpus", corpus)):
        with open(f"{folder}/{name}.jsonl", "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    for split, judgements in qrels.items():
        with open(f"{folder}/qrels/{split}.tsv", "w", encoding="utf-8") as f:
            f.write("query-id\tcorpus-id\tscore\n")
            for q, d, s in judgements:
                f.write(f"{q}\t{d}\t{s}\n")


def read_beir(folder):
    def jsonl(name):
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    with open(os.path.join(folder, "qrels", "test.tsv"), encoding="utf-8") as f:
        next(f)
        qrels = [tuple(line.rstrip("\n").split("\t")) for line in f if line.strip()]
    return (jsonl("queries.jsonl"), [{"_id": r["_id"], "title": r.get("title") or "", "text": r["text"]}
                                     for r in jsonl("corpus.jsonl")],
            {"test": [(q, d, int(s)) for q, d, s in qrels]})


# Each a fault of mini_mteb: (name, queries, corpus, qrels, schemas).
def bad_sets():
    q, c = QUERIES, CORPUS
    test = QRELS["test"]
    no_id = pa.schema([("doc_id", TEXT), ("title", TEXT), ("text", TEXT)])
    float_score = pa.schema([("query-id", TEXT), ("corpus-id", TEXT), ("score", pa.float64())])
    return [
        # the third judgement (row group 1, row 0) names a document that is not there
        ("unknown_corpus_id", q, c, {"test": test[:2] + [("q1", "d9", 1)]}, None),
        ("unknown_query_id", q, c, {"test": test + [("q7", "d1", 1)]}, None),
        # a corpus whose id column is not "_id"
        ("corpus_without_id", q, [{"doc_id": r["_id"], "title": r["title"], "text": r["text"]} for r in c],
         {"test": test}, (no_id, QUERIES_SCHEMA, QRELS_SCHEMA)),
        # d1 again at row group 1, row 1
        ("duplicate_corpus_id", q, c + [dict(c[0])], {"test": test}, None),
        ("fractional_score", q, c, {"test": [{"query-id": "q1", "corpus-id": "d1", "score": 0.5}]},
         (CORPUS_SCHEMA, QUERIES_SCHEMA, float_score)),
        # a null text at row group 1, row 0
        ("null_text", q, c[:2] + [{"_id": "d3", "title": None, "text": None}], {"test": test}, None),
        ("nothing_relevant", q, c, {"test": [("q1", "d1", 0)]}, None),
    ]


def main():
    global CACHE
    args = sys.argv[1:]
    beir = None
    if len(args) == 3 and args[0] == "--beir":
        beir, args = args[1], args[2:]
    if len(args) != 1:
        sys.exit(__doc__)
    out = args[0]
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as cache:
        CACHE = cache
        write_all(out, beir)


def write_all(out, beir):
    write_beir(f"{out}/mini", QUERIES, CORPUS, QRELS)
    write_mteb(f"{out}/mini_mteb", QUERIES, CORPUS, QRELS)
    check_with_datasets(f"{out}/mini_mteb")
    write_mteb(f"{out}/mini_mteb_qrels_config", QUERIES, CORPUS, QRELS, qrels_config="qrels")
    check_with_datasets(f"{out}/mini_mteb_qrels_config", "qrels")

    # Whole-number ids (MTEB casts "_id" to string) and a whole float score (MTEB: int(score)).
    def number(id_):
        return int(id_[1:])
    int_schemas = (pa.schema([("_id", pa.int64()), ("title", TEXT), ("text", TEXT)]),
                   pa.schema([("_id", pa.int64()), ("text", TEXT)]),
                   pa.schema([("query-id", pa.int64()), ("corpus-id", pa.int64()), ("score", pa.float64())]))
    write_mteb(f"{out}/mini_mteb_int_ids", [dict(r, _id=number(r["_id"])) for r in QUERIES],
               [dict(r, _id=number(r["_id"])) for r in CORPUS],
               {split: [{"query-id": number(qq), "corpus-id": number(d), "score": float(s)} for qq, d, s in j]
                for split, j in QRELS.items()}, schemas=int_schemas)
    check_with_datasets(f"{out}/mini_mteb_int_ids")

    # MTEB's older layout: BEIR's JSONL files, the qrels as JSONL, named by the README.
    old = f"{out}/mini_mteb_jsonl"
    write_beir(old, QUERIES, CORPUS, {})
    os.makedirs(f"{old}/qrels", exist_ok=True)
    for split, judgements in QRELS.items():
        with open(f"{old}/qrels/{split}.jsonl", "w", encoding="utf-8") as f:
            for row in qrels_rows(judgements):
                f.write(json.dumps(row) + "\n")
    with open(f"{old}/README.md", "w", encoding="utf-8") as f:
        f.write(readme([("default", [(s, f"qrels/{s}.jsonl") for s in QRELS]),
                        ("corpus", [("corpus", "corpus.jsonl")]), ("queries", [("queries", "queries.jsonl")])]))
    check_with_datasets(old)

    # A Hub folder of training pairs: not a BEIR set.
    shards = f"{out}/pair_shards"
    pairs = [{"anchor": f"question {i}", "positive": f"answer {i}"} for i in range(6)]
    for i in range(2):
        write_parquet(pairs[i * 3:(i + 1) * 3], f"{shards}/data/train-0000{i}-of-00002.parquet",
                      pa.schema([("anchor", TEXT), ("positive", TEXT)]), 2)
    with open(f"{shards}/README.md", "w", encoding="utf-8") as f:
        f.write(readme([("default", [("train", "data/train-*")])]))
    datasets.load_dataset(shards, cache_dir=CACHE)

    for name, queries, corpus, qrels, schemas in bad_sets():
        write_mteb(f"{out}/bad/{name}", queries, corpus, qrels,
                   schemas=schemas or (CORPUS_SCHEMA, QUERIES_SCHEMA, QRELS_SCHEMA))

    if beir:
        queries, corpus, qrels = read_beir(beir)
        write_mteb(f"{out}/trecqa_mteb", queries, corpus, qrels, row_group_size=100, compression="zstd")
        check_with_datasets(f"{out}/trecqa_mteb")


if __name__ == "__main__":
    main()
