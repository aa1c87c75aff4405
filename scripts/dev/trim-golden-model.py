#!/usr/bin/env python3
"""Shrinks a golden BERT fixture for the repository (a developer tool, run once).

A golden model as transformers saved it (GOLDEN_DIR/model/model.safetensors, beside its
expected.jsonl and tokens.jsonl; tests/fixtures/golden/README.md says how they were made)
carries the whole 30522-row word-embedding table, though the golden texts use a few
hundred of its rows and no other row can change their outputs. This writes a copy in
which that table is replaced by the used rows ("embeddings.word_embeddings.weight.rows",
F32 [n, hidden]) and their token ids ("embeddings.word_embeddings.weight.ids", I64 [n]);
every other tensor is unchanged. golden_model_dir() in tests/core/golden_fixture.h
scatters the rows back into a zero table of the original shape before the tests load it.

Usage: trim-golden-model.py GOLDEN_DIR OUT_FILE   (standard library only)
"""
import json
import struct
import sys


def main(golden_dir, out_file):
    ids = set()
    for name in ("expected.jsonl", "tokens.jsonl"):
        with open(f"{golden_dir}/{name}") as f:
            for line in f:
                ids.update(json.loads(line)["input_ids"])
    ids = sorted(ids)
    with open(f"{golden_dir}/model/model.safetensors", "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    tensors = []  # (name, dtype, shape, bytes)
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        tensors.append((name, info["dtype"], info["shape"], data[b:e]))
    out = []
    for name, dtype, shape, blob in tensors:
        if name == "embeddings.word_embeddings.weight":
            vocab, hidden = shape
            row = 4 * hidden
            rows = b"".join(blob[i * row:(i + 1) * row] for i in ids)
            out.append((name + ".rows", "F32", [len(ids), hidden], rows))
            out.append((name + ".ids", "I64", [len(ids)], struct.pack(f"<{len(ids)}q", *ids)))
            meta = {"format": "pt", "trimmed_vocab_size": str(vocab)}
        else:
            out.append((name, dtype, shape, blob))
    out.sort()
    head, offset, body = {"__metadata__": meta}, 0, []
    for name, dtype, shape, blob in out:
        head[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        body.append(blob)
    text = json.dumps(head, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(out_file, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(body))


if __name__ == "__main__":
    main(*sys.argv[1:3])
