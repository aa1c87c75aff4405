"""The peer of `embed-train prepare`'s tokenizing: Hugging Face `tokenizers` (what
sentence-transformers and transformers run) batch-encoding the same texts with the same
tokenizer.json, truncated to the same length, on RAYON_NUM_THREADS threads.

Prints one JSON line: pairs, texts, seconds of encode_batch alone (the JSON is read
before the clock starts), pairs per second and per thread.

    RAYON_NUM_THREADS=1 python bench_hf_tokenize.py --tokenizer DIR/tokenizer.json --input pairs.jsonl --max-length 32
"""
import argparse
import json
import os
import time

from tokenizers import Tokenizer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--max-length", type=int, default=32)
    ap.add_argument("--batch", type=int, default=8192)
    args = ap.parse_args()
    tok = Tokenizer.from_file(args.tokenizer)
    tok.enable_truncation(args.max_length)
    tok.no_padding()
    texts = []
    with open(args.input, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            texts.append(r["query"])
            texts.append(r["pos"] if isinstance(r["pos"], str) else r["pos"][0])
    start = time.perf_counter()
    ids = 0
    for i in range(0, len(texts), args.batch):
        for enc in tok.encode_batch(texts[i:i + args.batch]):
            ids += len(enc.ids)
    seconds = time.perf_counter() - start
    threads = int(os.environ.get("RAYON_NUM_THREADS", os.cpu_count()))
    pairs = len(texts) // 2
    print(json.dumps({"pairs": pairs, "texts": len(texts), "ids": ids, "seconds": round(seconds, 2),
                      "pairs_per_s": round(pairs / seconds), "pairs_per_s_per_thread": round(pairs / seconds / threads),
                      "threads": threads}))


if __name__ == "__main__":
    main()
