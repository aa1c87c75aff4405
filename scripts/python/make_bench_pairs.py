"""Training pairs of three length profiles for the speed benchmarks (scripts/bench-vs-st.sh),
made from the STS Benchmark's English dev set that the repository ships (data/stsb_en):

  stsb.jsonl     each line's two sentences as query and positive: real lengths (1,500 pairs,
                 13 wordpiece tokens a text on average, 3 to 60)
  fixed.jsonl    every text past 80 words (the line's sentences and those of the lines after
                 it): at max_length 64 each one fills all 64 tokens, no padding in any batch
  skewed.jsonl   stsb.jsonl, with one pair in twenty made long as in fixed.jsonl: most texts
                 short, a few near the maximum length (what real training sets look like)
  long.jsonl     64 pairs of texts past 4,000 words each (the sentences of many lines): every
                 text fills a max_length of 4,096 tokens, for the long-context memory rows

They measure speed only: the held-out STS-B score of a model trained on them is not a fair
one (bench-vs-st.sh with EVAL=0). Deterministic: the same file gives the same bytes.

    python make_bench_pairs.py [--sts data/stsb_en/sts-dev.csv] --out DIR
"""
import argparse
import csv
import json
import os

LONG_WORDS = 80  # > 64 wordpiece tokens with [CLS] and [SEP] for any English text here
LONG_CONTEXT_WORDS = 4000  # > 4,096 tokens for any tokenizer here


def read_sts(path):
    pairs = []
    with open(path, encoding="utf-8") as f:
        for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            if len(row) >= 7:
                pairs.append((row[5].strip(), row[6].strip()))
    if not pairs:
        raise SystemExit(f"make_bench_pairs: no sentence pairs in {path} (tab-separated, columns 5 and 6)")
    return pairs


def long_text(sentences, start, length=LONG_WORDS):
    """Sentences from `start` on (wrapping around) until the text has `length` words."""
    words, i = [], start
    while len(words) < length:
        words += sentences[i % len(sentences)].split()
        i += 1
    return " ".join(words)


def write(path, pairs):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        for q, p in pairs:
            out.write(json.dumps({"query": q, "pos": p}, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sts", default=os.path.join(os.path.dirname(__file__), "..", "..", "data", "stsb_en", "sts-dev.csv"))
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    pairs = read_sts(args.sts)
    firsts = [q for q, _ in pairs]
    seconds = [p for _, p in pairs]
    os.makedirs(args.out, exist_ok=True)
    write(os.path.join(args.out, "stsb.jsonl"), pairs)
    fixed = [(long_text(firsts, i), long_text(seconds, i)) for i in range(len(pairs))]
    write(os.path.join(args.out, "fixed.jsonl"), fixed)
    skewed = [fixed[i] if i % 20 == 0 else pairs[i] for i in range(len(pairs))]
    write(os.path.join(args.out, "skewed.jsonl"), skewed)
    long_pairs = [(long_text(firsts, 37 * i, LONG_CONTEXT_WORDS), long_text(seconds, 37 * i, LONG_CONTEXT_WORDS))
                  for i in range(64)]
    write(os.path.join(args.out, "long.jsonl"), long_pairs)
    print(f"make_bench_pairs: {len(pairs)} pairs each: stsb.jsonl, fixed.jsonl, skewed.jsonl; "
          f"{len(long_pairs)} in long.jsonl; in {args.out}")


if __name__ == "__main__":
    main()
