#!/usr/bin/env bash
# Makes the demo training data: data/demo/train.jsonl, data/demo/examples.jsonl (a second
# source: usage examples with the word blanked, for several-source recipes) and
# data/demo/eval.jsonl.
#
# Source: WordNet 3.0 (Debian package `wordnet-base`, /usr/share/wordnet/data.noun and
# data.verb; data.adj and data.adv only for word counts). License: the WordNet 3.0
# license (Princeton University), permissive; see data/README.md.
#
# Each line is one pair, {"query": definition, "pos": the words it defines}:
#   {"query": "an electric railway operating below the surface of the ground",
#    "pos": "tube, underground, subway system, subway"}
# query: the synset's gloss up to the first ';', without quoted examples and
#   (parenthesized) remarks, lower-cased; 3 to 24 words.
# pos: the synset's lower-case words (underscores → spaces), at most 5, in WordNet's
#   order. A word is dropped when it shares a stem with a query word (its first
#   min(5, length) letters: "annihilation" with "annihilating") — word overlap must not
#   give the answer away — or when it (each of its 3+-letter words) occurs in fewer than
#   3 glosses: the model should have a chance to have seen it. A synset with no word
#   left is dropped.
# Split: by synset, a hash of its id; eval is 1000 pairs with distinct queries and
#   distinct positives (identical positives would tie), train is the rest (minus any
#   query text that also occurs in eval). So every eval definition and its word list
#   are unseen, but the same words often appear in training: as other senses of the
#   word, or inside other definitions. That is what a model can generalize from.
#
# Usage: scripts/make-demo-data.sh [OUT_DIR]   (default: data/demo under the repo)
# Env: WORDNET_DIR (default /usr/share/wordnet), EVAL_SIZE (default 1000).
# Deterministic (same input → same bytes), about a second, bash + awk + coreutils.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-$(dirname "$here")/data/demo}
wordnet=${WORDNET_DIR:-/usr/share/wordnet}
eval_size=${EVAL_SIZE:-1000}

for f in data.noun data.verb data.adj data.adv; do
  if [ ! -r "$wordnet/$f" ]; then
    echo "make-demo-data: $wordnet/$f not found; install WordNet (apt-get install wordnet-base," \
         "or scripts/setup.sh) or set WORDNET_DIR" >&2
    exit 1
  fi
done

mkdir -p "$out"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/make-demo-data.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export LC_ALL=C  # byte order for sort: the same output on every machine

# split<TAB>order<TAB>pos<TAB>query<TAB>json, one line per kept synset.
awk -f "$here/make-demo-data.awk" \
  phase=1 "$wordnet/data.noun" "$wordnet/data.verb" "$wordnet/data.adj" "$wordnet/data.adv" \
  phase=2 "$wordnet/data.noun" "$wordnet/data.verb" > "$tmp/pairs.tsv"

# Eval: in hash order, first of each query and of each positive, EVAL_SIZE of them.
awk -F'\t' '$1 == "eval"' "$tmp/pairs.tsv" | sort -t"$(printf '\t')" -k2,2 -k3 \
  | awk -F'\t' -v want="$eval_size" \
      '!($3 in pos) && !($4 in query) && n < want { pos[$3]; query[$4]; n++; print }' \
  > "$tmp/eval.tsv"

# Train: the rest of the synsets, shuffled by hash, without eval's query texts.
awk -F'\t' '$1 == "train"' "$tmp/pairs.tsv" | sort -t"$(printf '\t')" -k2,2 -k3 \
  | awk -F'\t' 'FNR == NR { eval_query[$4]; next } !($4 in eval_query)' "$tmp/eval.tsv" - \
  > "$tmp/train.tsv"

# The license asks that its notice travel with every copy of the data.
awk '/^  [0-9]+ / { sub(/^  [0-9]+ /, ""); sub(/ +$/, ""); print }' "$wordnet/data.noun" \
  > "$tmp/LICENSE-WordNet.txt"
# The second source: usage examples of training synsets with their words blanked, shuffled
# by hash (a few examples repeat in WordNet; one copy of each is kept).
awk -F'\t' '$1 == "examples"' "$tmp/pairs.tsv" | sort -t"$(printf '\t')" -k2,2 -k3 \
  | awk -F'\t' '!($5 in seen) { seen[$5]; print }' > "$tmp/examples.tsv"
cut -f5 "$tmp/eval.tsv" > "$tmp/eval.jsonl"
cut -f5 "$tmp/train.tsv" > "$tmp/train.jsonl"
cut -f5 "$tmp/examples.tsv" > "$tmp/examples.jsonl"
# Replace the outputs only when complete.
mv "$tmp/eval.jsonl" "$out/eval.jsonl"
mv "$tmp/train.jsonl" "$out/train.jsonl"
mv "$tmp/examples.jsonl" "$out/examples.jsonl"
mv "$tmp/LICENSE-WordNet.txt" "$out/LICENSE-WordNet.txt"

echo "make-demo-data: $(wc -l < "$out/train.jsonl") train pairs -> $out/train.jsonl," \
     "$(wc -l < "$out/examples.jsonl") usage-example pairs -> $out/examples.jsonl," \
     "$(wc -l < "$out/eval.jsonl") eval pairs -> $out/eval.jsonl (WordNet 3.0, $wordnet)"
