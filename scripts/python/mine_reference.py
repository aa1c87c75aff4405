#!/usr/bin/env python3
"""`embed-train mine` against sentence-transformers' own util.mine_hard_negatives.

    python scripts/python/mine_reference.py test --model DIR --embed-train BIN --pairs FILE
        [--limit 2000] [--work DIR] [--cases defaults,range,...] [--tol 1e-5]
    python scripts/python/mine_reference.py st --model DIR --pairs FILE --out FILE --cache DIR [PARAMETERS]
    python scripts/python/mine_reference.py compare --model DIR --pairs FILE --ours FILE --st FILE
        --cache DIR [PARAMETERS] [--tol 1e-5]

PARAMETERS are embed-train mine's flags, given to both sides: --corpus FILE,
--num-negatives N, --range-min N, --range-max N, --max-score S, --min-score S,
--absolute-margin M, --relative-margin M, --query-prompt TEXT, --corpus-prompt TEXT.

st: mine_hard_negatives(dataset, SentenceTransformer(DIR), ..., sampling_strategy="top",
  output_format="n-tuple") on the pairs (a line with several positives is one row per
  positive, as embed-train reads it), written as embed-train writes its output:
  {"query", "pos", "neg": [...]} a line. It caches its embeddings in --cache
  (mine_hard_negatives' cache_folder), which compare reads.

compare: the rows of both files, keyed by (query, positive). A row is
  - identical: the same negatives in the same order, or dropped by both;
  - differing by ties: every negative on which the two disagree (in one list and not the
    other, or at a position where they differ) scores, by sentence-transformers'
    embeddings, within --tol of another negative of the two lists; or some candidate of
    the query scores within --tol of a threshold (--max-score, --min-score, a margin's
    bound), where float noise decides whether it is skipped and so shifts the rest. A
    row kept by one side and dropped by the other is explained only by the second kind;
  - differing otherwise: anything else, and always a negative that is one of the query's
    positives, or repeated.
  Prints the counts; exit 1 when a row differs otherwise or no row was mined.

test: the cases below on the first --limit pairs, each mined by both sides and compared
  (CI's Reference.MineMatchesSentenceTransformers). One SentenceTransformer serves all of
  them, and embeddings are cached between cases that share queries or corpus.

Exit status: 0 agreement; 1 a disagreement; 2 a usage or running problem.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TQDM_DISABLE", "1")  # mine_hard_negatives' progress bars, in a test log

EXIT_OK, EXIT_MISMATCH, EXIT_PROBLEM = 0, 1, 2

# name -> embed-train mine flags ("{corpus}": a corpus file the test writes).
CASES = {
    "defaults": [],
    "range": ["--range-min", "2", "--range-max", "12", "--num-negatives", "4"],
    "relative-margin": ["--relative-margin", "0.05"],
    "scores": ["--absolute-margin", "0.1", "--max-score", "0.6", "--min-score", "0.25", "--num-negatives", "2"],
    "corpus": ["--corpus", "{corpus}", "--num-negatives", "2"],
    "query-prompt": ["--query-prompt", "query: ", "--num-negatives", "1"],
}


class Problem(Exception):
    """A usage or running problem: exit status 2."""


# ---------------------------------------------------------------------------------------
# The parameters: embed-train's flags -> mine_hard_negatives' keyword arguments


def add_parameters(parser):
    parser.add_argument("--corpus")
    parser.add_argument("--num-negatives", type=int, default=3)
    parser.add_argument("--range-min", type=int, default=0)
    parser.add_argument("--range-max", type=int)
    for name in ("--max-score", "--min-score", "--absolute-margin", "--relative-margin"):
        parser.add_argument(name, type=float)
    parser.add_argument("--query-prompt")
    parser.add_argument("--corpus-prompt")


def parse_parameters(flags):
    parser = argparse.ArgumentParser(prog="parameters")
    add_parameters(parser)
    return parser.parse_args(flags)


def st_kwargs(p):
    return dict(num_negatives=p.num_negatives, range_min=p.range_min, range_max=p.range_max,
                max_score=p.max_score, min_score=p.min_score, absolute_margin=p.absolute_margin,
                relative_margin=p.relative_margin, query_prompt=p.query_prompt, corpus_prompt=p.corpus_prompt)


# ---------------------------------------------------------------------------------------
# Reading: pairs as embed-train reads them, a corpus file, mined rows


def read_pairs(path):
    """(query, [positives]) per non-blank line: query/pos, anchor/positive or text1/text2."""
    pairs = []
    with open(path, encoding="utf-8-sig") as f:
        for line in f:
            if not line.strip():
                continue
            obj = json.loads(line)
            for q, p in (("query", "pos"), ("anchor", "positive"), ("text1", "text2")):
                if q in obj:
                    pos = obj[p]
                    pairs.append((obj[q], [pos] if isinstance(pos, str) else list(pos)))
                    break
    return pairs


def read_corpus(path):
    """One text a line, blank lines skipped (JSONL: the "text" of each line)."""
    with open(path, encoding="utf-8") as f:
        lines = [line.rstrip("\n").removesuffix("\r") for line in f]
    if path.endswith((".jsonl", ".json")):
        lines = [json.loads(line)["text"] for line in lines if line.strip()]
    return [line for line in lines if line.strip()]


def read_mined(path):
    """{(query, positive): [negatives]} of a file of {"query", "pos", "neg"} lines."""
    rows = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            obj = json.loads(line)
            pos = [obj["pos"]] if isinstance(obj["pos"], str) else obj["pos"]
            for p in pos:
                key = (obj["query"], p)
                if key in rows and rows[key] != obj["neg"]:
                    raise Problem(f"{path}:{number}: {key} has other negatives than on an earlier line")
                rows[key] = obj["neg"]
    return rows


# ---------------------------------------------------------------------------------------
# sentence-transformers' side


def load_model(model_dir):
    from sentence_transformers import SentenceTransformer
    return SentenceTransformer(model_dir, device="cpu")


def st_mine(model, pairs, p, cache, out_path):
    """mine_hard_negatives on the pairs, written as {"query", "pos", "neg"} lines."""
    import datasets
    from sentence_transformers.util import mine_hard_negatives
    rows = [(q, pos) for q, positives in pairs for pos in positives]
    dataset = datasets.Dataset.from_dict({"query": [q for q, _ in rows], "pos": [pos for _, pos in rows]})
    corpus = read_corpus(p.corpus) if p.corpus else None
    mined = mine_hard_negatives(dataset, model, corpus=corpus, sampling_strategy="top", output_format="n-tuple",
                                batch_size=32, verbose=False, cache_folder=cache, **st_kwargs(p))
    negative_columns = [c for c in mined.column_names if c.startswith("negative_")]
    with open(out_path, "w", encoding="utf-8") as f:
        for row in mined:
            f.write(json.dumps({"query": row["query"], "pos": row["pos"],
                                "neg": [row[c] for c in negative_columns]}, ensure_ascii=False) + "\n")
    return len(mined)


def cached_embeddings(model, cache, kind, prompt, texts):
    """The embeddings mine_hard_negatives cached (its file names: a hash of the model
    name, the prompt and the texts)."""
    import numpy as np
    model_name = model.model_card_data.base_model or ""
    digest = hashlib.sha256(repr((model_name, prompt, None, texts)).encode(), usedforsecurity=False).hexdigest()
    path = os.path.join(cache, f"{kind}_embeddings_{digest}.npy")
    if not os.path.exists(path):
        raise Problem(f"no cached {kind} embeddings {path}: run `st` with the same --cache and parameters first")
    return np.load(path)


# ---------------------------------------------------------------------------------------
# The comparison


class QueryView:
    """One query as sentence-transformers' embeddings see it: the score of any corpus text,
    its positives, the thresholds of the filters and its best candidates."""

    def __init__(self, scores, corpus_index, positives, p, candidates):
        import numpy as np
        self.scores, self.index = scores, corpus_index
        self.positives = set(positives)
        lowest = min(self.score(t) for t in positives)
        self.thresholds = [t for t in (
            p.max_score, p.min_score,
            None if p.absolute_margin is None else lowest - p.absolute_margin,
            None if p.relative_margin is None else lowest - abs(lowest) * p.relative_margin) if t is not None]
        self.best = np.argsort(-scores, kind="stable")[:candidates]

    def score(self, text):
        return float(self.scores[self.index[text]])

    def near_threshold(self, tol):
        return any(abs(float(self.scores[c]) - t) <= tol for c in self.best for t in self.thresholds)


def classify(st, ours, view, tol):
    """'identical', 'ties' or 'otherwise' for one row (st, ours: the negatives, or None)."""
    if ours is not None and (len(set(ours)) != len(ours) or view.positives & set(ours)):
        return "otherwise"
    if st == ours:
        return "identical"
    if view.near_threshold(tol):
        return "ties"
    if st is None or ours is None:
        return "otherwise"
    disputed = set(st) ^ set(ours)
    disputed |= {x for a, b in zip(st, ours) if a != b for x in (a, b)}
    listed = set(st) | set(ours)
    for x in disputed:
        if not any(y != x and abs(view.score(x) - view.score(y)) <= tol for y in listed):
            return "otherwise"
    return "ties"


def compare(model, pairs, p, cache, st_path, ours_path, tol, show=5):
    """The agreement counts of two mined files of the same pairs and parameters."""
    import numpy as np
    queries = list(dict.fromkeys(q for q, _ in pairs))
    positives_of = {}
    for q, positives in pairs:
        positives_of.setdefault(q, []).extend(positives)
    all_positives = [pos for _, positives in pairs for pos in positives]
    corpus = list(dict.fromkeys((read_corpus(p.corpus) if p.corpus else []) + all_positives))
    corpus_index = {t: i for i, t in enumerate(corpus)}
    q_emb = cached_embeddings(model, cache, "query", p.query_prompt, queries)
    c_emb = cached_embeddings(model, cache, "corpus", p.corpus_prompt, corpus)
    scores = model.similarity(q_emb, c_emb).numpy()
    max_positives = max(len(v) for v in positives_of.values())
    filtered = p.absolute_margin is not None or p.relative_margin is not None or p.max_score is not None
    range_max = p.range_max or p.range_min + (10 if filtered else 1) * p.num_negatives + max_positives
    candidates = range_max + max_positives

    st_rows, our_rows = read_mined(st_path), read_mined(ours_path)
    counts = {"identical": 0, "ties": 0, "otherwise": 0, "dropped_by_both": 0}
    shown = []
    keys = list(dict.fromkeys((q, pos) for q, positives in pairs for pos in positives))
    unknown = set(our_rows) - set(keys)
    if unknown:
        raise Problem(f"{ours_path} has rows of no input pair, e.g. {next(iter(unknown))}")
    for qi, q in enumerate(queries):
        view = QueryView(scores[qi], corpus_index, positives_of[q], p, candidates)
        for pos in dict.fromkeys(positives_of[q]):
            st, ours = st_rows.get((q, pos)), our_rows.get((q, pos))
            kind = classify(st, ours, view, tol)
            counts[kind] += 1
            counts["dropped_by_both"] += st is None and ours is None
            if kind != "identical" and len(shown) < show:
                detail = lambda negs: None if negs is None else [(n, round(view.score(n), 7)) for n in negs]
                shown.append(f"    {kind}: {q!r} / {pos!r}\n      st:   {detail(st)}\n      ours: {detail(ours)}")
    return counts, len(st_rows), len(our_rows), shown


# ---------------------------------------------------------------------------------------
# Commands


def run_ours(args, pairs_file, flags, out_path):
    command = [args.embed_train, "mine", "--model", args.model, "--input", pairs_file, "--output", out_path] + flags
    started = time.monotonic()
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        raise Problem(f"`{' '.join(command)}` failed ({result.returncode}):\n{result.stdout}")
    return time.monotonic() - started


def command_test(args):
    os.makedirs(args.work, exist_ok=True)
    pairs_file = os.path.join(args.work, "pairs.jsonl")
    with open(args.pairs, encoding="utf-8") as f:
        head = [line for _, line in zip(range(args.limit), f)]
    with open(pairs_file, "w", encoding="utf-8") as f:
        f.writelines(head)
    # The --corpus case: the positives of the next pairs of the file and this file's queries
    # (a query text among the candidates, as a real corpus may have), less some positives.
    corpus_file = os.path.join(args.work, "corpus.txt")
    with open(args.pairs, encoding="utf-8") as f:
        more = [json.loads(line)["pos"] for line in list(f)[args.limit:args.limit + 1000]]
    pairs = read_pairs(pairs_file)
    with open(corpus_file, "w", encoding="utf-8") as f:
        f.writelines(t + "\n" for t in more + [q for q, _ in pairs[:300]] + [ps[0] for _, ps in pairs[:50]])

    model = load_model(args.model)
    cache = os.path.join(args.work, "st-cache")
    failed = False
    for name in args.cases.split(","):
        if name not in CASES:
            raise Problem(f"unknown case {name}: one of {', '.join(CASES)}")
        flags = [f.replace("{corpus}", corpus_file) for f in CASES[name]]
        p = parse_parameters(flags)
        ours_path = os.path.join(args.work, f"{name}.ours.jsonl")
        st_path = os.path.join(args.work, f"{name}.st.jsonl")
        ours_s = run_ours(args, pairs_file, flags, ours_path)
        started = time.monotonic()
        st_mine(model, pairs, p, cache, st_path)
        st_s = time.monotonic() - started
        counts, st_n, ours_n, shown = compare(model, pairs, p, cache, st_path, ours_path, args.tol)
        bad = counts["otherwise"] > 0 or st_n == 0 or ours_n == 0
        failed |= bad
        print(f"{'FAIL' if bad else 'ok  '} {name:26s} {' '.join(flags) or '(defaults)'}: rows st {st_n}, ours "
              f"{ours_n}; identical {counts['identical']} ({counts['dropped_by_both']} of them dropped by both), differing by ties (<= {args.tol:g}) {counts['ties']}, "
              f"otherwise {counts['otherwise']}  [ours {ours_s:.1f}s, st {st_s:.1f}s]")
        for line in shown:
            print(line)
    return EXIT_MISMATCH if failed else EXIT_OK


def command_st(args):
    p = parse_parameters(args.flags)
    model = load_model(args.model)
    n = st_mine(model, read_pairs(args.pairs), p, args.cache, args.out)
    print(f"mine_hard_negatives: {n} rows written to {args.out}", file=sys.stderr)
    return EXIT_OK


def command_compare(args):
    p = parse_parameters(args.flags)
    counts, st_n, ours_n, shown = compare(load_model(args.model), read_pairs(args.pairs), p, args.cache, args.st,
                                          args.ours, args.tol)
    print(json.dumps({"st_rows": st_n, "ours_rows": ours_n, **counts}))
    for line in shown:
        print(line, file=sys.stderr)
    return EXIT_MISMATCH if counts["otherwise"] or not st_n or not ours_n else EXIT_OK


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    test = sub.add_parser("test", help="the CI cases: embed-train mine and mine_hard_negatives, compared")
    test.add_argument("--model", required=True)
    test.add_argument("--embed-train", required=True)
    test.add_argument("--pairs", required=True, help="a pairs JSONL with at least --limit + 1000 lines")
    test.add_argument("--limit", type=int, default=2000)
    test.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "mine-reference"))
    test.add_argument("--cases", default=",".join(CASES))
    test.add_argument("--tol", type=float, default=1e-5)
    st = sub.add_parser("st", help="mine with sentence-transformers")
    st.add_argument("--model", required=True)
    st.add_argument("--pairs", required=True)
    st.add_argument("--out", required=True)
    st.add_argument("--cache", required=True)
    cmp = sub.add_parser("compare", help="the agreement of two mined files")
    for name in ("--model", "--pairs", "--ours", "--st", "--cache"):
        cmp.add_argument(name, required=True)
    cmp.add_argument("--tol", type=float, default=1e-5)
    args, rest = parser.parse_known_args(argv)
    args.flags = rest
    if args.command == "test" and rest:
        parser.error(f"unknown arguments {rest}")
    try:
        return {"test": command_test, "st": command_st, "compare": command_compare}[args.command](args)
    except Problem as e:
        print(f"mine_reference: {e}", file=sys.stderr)
        return EXIT_PROBLEM


if __name__ == "__main__":
    sys.exit(main())
