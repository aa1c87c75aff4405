"""Large training sets for scripts/bench-prepare.sh: the demo pairs repeated and perturbed.

Writes SHARDS files of 1,000,000 pairs each (OUT/pairs-00000.jsonl, ...), each line a
demo pair (data/demo/train.jsonl and examples.jsonl, in turn) with one to three words
of the demo's own vocabulary put into its query and its positive at drawn places, so that
texts repeat rarely and lengths stay those of the demo. A shard that is already there
with the right number of lines is kept: 1M, 10M and 100M pairs are shards 0, 0-9, 0-99.

    python make_big_pairs.py --out DIR --shards N [--pairs-per-shard 1000000]
"""
import argparse
import json
import os
import random


def load_pairs(paths):
    pairs = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                pos = r["pos"][0] if isinstance(r["pos"], list) else r["pos"]
                pairs.append((r["query"].split(), pos.split()))
    return pairs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--shards", type=int, required=True)
    ap.add_argument("--pairs-per-shard", type=int, default=1_000_000)
    ap.add_argument("--demo", default="data/demo")
    args = ap.parse_args()
    base = load_pairs([os.path.join(args.demo, "train.jsonl"), os.path.join(args.demo, "examples.jsonl")])
    vocab = sorted({w for q, p in base for w in q + p if w.isalpha() and len(w) > 2})
    os.makedirs(args.out, exist_ok=True)
    for shard in range(args.shards):
        path = os.path.join(args.out, f"pairs-{shard:05d}.jsonl")
        if os.path.exists(path):
            with open(path, "rb") as f:
                if sum(1 for _ in f) == args.pairs_per_shard:
                    continue
        rng = random.Random(shard)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as out:
            lines = []
            for i in range(args.pairs_per_shard):
                q, p = base[(shard * args.pairs_per_shard + i) % len(base)]
                q, p = list(q), list(p)
                for words in (q, p):
                    for _ in range(rng.randint(1, 3)):
                        words.insert(rng.randint(0, len(words)), rng.choice(vocab))
                lines.append(json.dumps({"query": " ".join(q), "pos": " ".join(p)}, ensure_ascii=False))
                if len(lines) == 65536:
                    out.write("\n".join(lines) + "\n")
                    lines = []
            if lines:
                out.write("\n".join(lines) + "\n")
        os.replace(tmp, path)
        print(f"wrote {path}", flush=True)


if __name__ == "__main__":
    main()
