"""The table of scripts/bench-rerank.sh and scripts/bench-sparse.sh: ours against one peer
(st), each run's step times (ours: metrics.jsonl, st: peer-rank0.json) and its workers' peak
RSS (maxrss-kb.rank<R>, from GNU time around each worker), medians [min, max] over the seeds,
then ours / st; the medians also go to OUT/table.json. A run the script marked FAILED (its
KEEP_GOING) is left out; a system without any run is a row of "failed"."""
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_table import cell, ours_record, peer_record  # noqa: E402

KEYS = ("pairs_per_s", "tokens_per_s", "step_ms", "rss_sum_mb", "peak_rss_mb", "startup_s")


def workers_rss_mb(name, d, workers):
    files = sorted(glob.glob(os.path.join(d, "maxrss-kb.rank*")))
    if len(files) != workers:
        raise SystemExit(f"{name}: {d}: {len(files)} maxrss-kb.rank* files, expected {workers}")
    return sum(int(open(f).read().split()[-1]) for f in files) / 1024.0


def run_record(name, d, system, warm, pairs_per_step, workers, tokens_per_pair):
    rec = ours_record(os.path.join(d, "metrics.jsonl")) if system == "ours" else \
        peer_record(os.path.join(d, "peer-rank0.json"))
    timed = rec["step_seconds"][warm:]
    rec["pairs_per_s"] = pairs_per_step * len(timed) / sum(timed) if timed else None
    rec["tokens_per_s"] = rec["pairs_per_s"] * tokens_per_pair if timed else None
    rec["step_ms"] = 1000 * statistics.median(timed) if timed else None
    rec["rss_sum_mb"] = workers_rss_mb(name, d, workers)
    return rec


def print_table(name, out, systems, seeds, warm, pairs_per_step, workers, tokens_per_pair, what):
    """`what`: what pairs_per_step counts and what a pair's tokens are, for the header."""
    columns = ["system", "pairs/s", "tokens/s", "step ms", "peak RSS MB (sum)", "rank 0 RSS MB", "start-up s"]
    rows, medians = [], {}
    for system in systems:
        recs = [run_record(name, os.path.join(out, f"{system}-seed{seed}"), system, warm, pairs_per_step, workers,
                           tokens_per_pair)
                for seed in seeds if not os.path.exists(os.path.join(out, f"{system}-seed{seed}", "FAILED"))]
        if not recs:
            rows.append([system] + ["failed"] * (len(columns) - 1))
            continue
        col = lambda key: [r.get(key) for r in recs]  # noqa: E731
        rows.append([system, cell(col("pairs_per_s"), "{:.1f}"), cell(col("tokens_per_s"), "{:.0f}"),
                     cell(col("step_ms"), "{:.0f}"), cell(col("rss_sum_mb"), "{:.0f}"),
                     cell(col("peak_rss_mb"), "{:.0f}"), cell(col("startup_s"), "{:.2f}")])
        medians[system] = {k: statistics.median([v for v in col(k) if v is not None] or [float("nan")]) for k in KEYS}
    if "ours" in medians and "st" in medians:
        o, s = medians["ours"], medians["st"]
        rows.append(["ours / st"] + [f"{o[k] / s[k]:.2f}x" for k in KEYS])
    with open(os.path.join(out, "table.json"), "w") as f:
        json.dump({"pairs_per_step": pairs_per_step, "tokens_per_pair": tokens_per_pair, "rows": medians}, f, indent=1)
    widths = [max(len(str(r[i])) for r in rows + [columns]) for i in range(len(columns))]
    print(f"# medians [min, max] over seeds {' '.join(seeds)}; {what.format(pairs_per_step=pairs_per_step, tokens_per_pair=tokens_per_pair)}; "
          f"peak RSS: the sum over {workers} workers")
    for r in [columns] + rows:
        print("  ".join(str(v).ljust(w) if i == 0 else str(v).rjust(w) for i, (v, w) in enumerate(zip(r, widths))))
