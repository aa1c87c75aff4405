#!/usr/bin/env python3
"""Hugging Face dataset folders written by the real `datasets`, and the same rows as JSONL,
for tests/core/test_dataset_files.cpp and tests/torch/test_training_parquet.cpp (the
resolution of lib/data/dataset_files.h).

    make_dataset_fixtures.py OUT [ROWS.jsonl]

ROWS.jsonl: the training rows, each {"query", "pos", "neg"} with text values (seeded rows
of its own when not given). Writes into OUT:
  train.jsonl, validation.jsonl   the rows of each split as JSONL ({"query", "pos", "neg"})
  one.parquet                     the train rows, Dataset.to_parquet
  rows.csv                        the train rows, Dataset.to_csv
  saved/                          Dataset.save_to_disk(num_shards=2): state.json, 2 .arrow streams
  saved_dict/                     DatasetDict({train, validation}).save_to_disk, train in 2 shards
  hub/                            push_to_hub's layout: data/train-0000N-of-00002.parquet,
                                  data/validation-00000-of-00001.parquet, README.md whose
                                  configs block push_to_hub's own code wrote (config "default")
  hub_configs/                    two configs as push_to_hub(config_name=...) leaves them:
                                  pair/{train,dev}-*.parquet (set_default=True) and
                                  swapped/{train,dev}-*.parquet (query and pos exchanged)
  by_folder/train/rows.parquet, by_folder/test/rows.parquet   splits by folder names
  by_name/train-part.parquet, by_name/dev.parquet, by_name/notes.txt   splits by file names
  bad_missing_shard/              save_to_disk with its second shard removed
  bad_no_file/                    hub/ whose README's configs name "data/missing-*"
  bad_yaml/                       hub/ whose README's configs hold a flow map {split, path}
"""
import json
import os
import random
import shutil
import sys

import datasets
from datasets.arrow_dataset import _get_updated_dataset_card
from datasets.splits import SplitInfo
from fsspec.implementations.dirfs import DirFileSystem

WORDS = "river bank money loan stream water deposit credit fish boat café naïve 東京 données".split()


def sentence(rng, lo=3, hi=9):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))).capitalize()


def seeded_rows(rng, n):
    return [{"query": sentence(rng, 2, 5), "pos": sentence(rng), "neg": sentence(rng)} for _ in range(n)]


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as out:
        for r in rows:
            out.write(json.dumps(r, ensure_ascii=False) + "\n")


def to_parquet_shards(ds, folder, split, shards):
    """The files push_to_hub uploads: contiguous shards named {split}-0000N-of-0000M.parquet."""
    os.makedirs(folder, exist_ok=True)
    for i in range(shards):
        ds.shard(num_shards=shards, index=i, contiguous=True).to_parquet(
            os.path.join(folder, f"{split}-{i:05d}-of-{shards:05d}.parquet"))


def write_card(root, config_name, splits, features, set_default):
    """README.md as push_to_hub writes it (datasets' own _get_updated_dataset_card)."""
    fs = DirFileSystem(path=root)
    infos = [SplitInfo(name=name, num_bytes=0, num_examples=len(ds)) for name, ds in splits.items()]
    card, _ = _get_updated_dataset_card(fs, config_name, infos, features, "data" if config_name == "default"
                                        else config_name, set_default, [0] * len(infos), [], False)
    body = "" if "# A test dataset" in str(card) else "\n# A test dataset\n\nWritten by make_dataset_fixtures.py.\n"
    with open(os.path.join(root, "README.md"), "w", encoding="utf-8") as out:
        out.write(str(card) + body)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = random.Random(46)
    train_rows = ([json.loads(line) for line in open(sys.argv[2], encoding="utf-8")] if len(sys.argv) > 2
                  else seeded_rows(rng, 24))
    validation_rows = seeded_rows(rng, 6)
    write_jsonl(os.path.join(out, "train.jsonl"), train_rows)
    write_jsonl(os.path.join(out, "validation.jsonl"), validation_rows)
    train = datasets.Dataset.from_list(train_rows)
    validation = datasets.Dataset.from_list(validation_rows)

    train.to_parquet(os.path.join(out, "one.parquet"))
    train.to_csv(os.path.join(out, "rows.csv"))
    train.save_to_disk(os.path.join(out, "saved"), num_shards=2)
    datasets.DatasetDict({"train": train, "validation": validation}).save_to_disk(
        os.path.join(out, "saved_dict"), num_shards={"train": 2, "validation": 1})

    hub = os.path.join(out, "hub")
    to_parquet_shards(train, os.path.join(hub, "data"), "train", 2)
    to_parquet_shards(validation, os.path.join(hub, "data"), "validation", 1)
    write_card(hub, "default", {"train": train, "validation": validation}, train.features, None)

    configs = os.path.join(out, "hub_configs")
    swap = {"query": "pos", "pos": "query"}
    swapped = {"train": train.rename_columns(swap), "dev": validation.rename_columns(swap)}
    for name, splits, default in (("pair", {"train": train, "dev": validation}, True), ("swapped", swapped, None)):
        for split, ds in splits.items():
            to_parquet_shards(ds, os.path.join(configs, name), split, 2 if split == "train" else 1)
        write_card(configs, name, splits, splits["train"].features, default)

    os.makedirs(os.path.join(out, "by_folder", "train"))
    os.makedirs(os.path.join(out, "by_folder", "test"))
    train.to_parquet(os.path.join(out, "by_folder", "train", "rows.parquet"))
    validation.to_parquet(os.path.join(out, "by_folder", "test", "rows.parquet"))
    os.makedirs(os.path.join(out, "by_name"))
    train.to_parquet(os.path.join(out, "by_name", "train-part.parquet"))
    validation.to_parquet(os.path.join(out, "by_name", "dev.parquet"))
    with open(os.path.join(out, "by_name", "notes.txt"), "w") as notes:
        notes.write("not a data file\n")

    missing = os.path.join(out, "bad_missing_shard")
    train.save_to_disk(missing, num_shards=2)
    os.remove(os.path.join(missing, "data-00001-of-00002.arrow"))
    for bad, old, new in (("bad_no_file", "path: data/train-*", "path: data/missing-*"),
                          ("bad_yaml", "  - split: train\n    path: data/train-*\n",
                           "  - {split: train, path: data/train-*}\n")):
        shutil.copytree(hub, os.path.join(out, bad))
        readme = os.path.join(out, bad, "README.md")
        text = open(readme, encoding="utf-8").read()
        assert old in text, f"{bad}: the card has no {old!r}"
        open(readme, "w", encoding="utf-8").write(text.replace(old, new))
    # A check that the fixtures are what datasets itself reads: the Hub layout's default
    # config and split are the train rows.
    loaded = datasets.load_dataset(hub, split="train")
    assert loaded["query"] == [r["query"] for r in train_rows], "datasets reads hub/ differently"
    loaded = datasets.load_dataset(configs, split="train")
    assert loaded["query"] == [r["query"] for r in train_rows], "datasets reads hub_configs/ differently"


if __name__ == "__main__":
    main()
