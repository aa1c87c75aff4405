#!/usr/bin/env python3
"""The table of scripts/bench-vs-st.sh: reads each run's own record (ddp-embed's
metrics.jsonl, the peers' peer-rank0.json, heldout.json) and prints, per system, the median
and [min, max] over the seeds; the medians also go to OUT/table.json. With --device cuda two
columns more: rank 0's peak GPU memory (allocated) and MFU, the model FLOPs per second
(6 N + 12 L h s per real token: N the encoder's non-embedding parameters, L layers, h
hidden, s the mean real tokens of a sequence) over --peak-tflops (0: a card whose peak is not
known, MFU "-"). Numbers only; the runs are made by the shell script."""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_train import read_pairs  # noqa: E402


def ours_record(path):
    """Per-step wall times (log_every = 1: one line per step), start-up, peak RSS (and GPU memory)."""
    steps, startup, rss, gpu = [], None, None, None
    with open(path) as f:
        for line in f:
            m = json.loads(line)
            if "step_ms" in m:
                steps.append(m["step_ms"] / 1000.0)
                startup = m.get("startup_s", startup)
                rss = m["peak_rss_mb"]
                gpu = m.get("peak_gpu_mb", gpu)
    return {"step_seconds": steps, "startup_s": startup, "peak_rss_mb": rss, "peak_gpu_mb": gpu}


def peer_record(path):
    with open(path) as f:
        r = json.load(f)
    return {"step_seconds": r["step_seconds"], "startup_s": r["first_step_begin"] - r["process_start"],
            "peak_rss_mb": r["peak_rss_mb"], "peak_gpu_mb": r.get("peak_gpu_mb")}


def flops_per_token(model, tokens_per_sequence):
    """Training FLOPs per real token: 6 N (forward and backward of the encoder's matrices) plus
    12 L h s (attention's two products over a sequence of s tokens, three passes)."""
    with open(os.path.join(model, "config.json")) as f:
        c = json.load(f)
    layers, hidden, inner = c["num_hidden_layers"], c["hidden_size"], c["intermediate_size"]
    n = layers * (4 * hidden * hidden + 2 * hidden * inner)
    return 6 * n + 12 * layers * hidden * tokens_per_sequence, n


def mean_tokens_per_pair(model, train, max_length):
    """Real tokens of query + positive as the model's tokenizer cuts them (no padding)."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model)
    queries, positives = read_pairs(train)
    n = lambda texts: sum(len(ids) for ids in tok(texts, truncation=True, max_length=max_length)["input_ids"])
    return (n(queries) + n(positives)) / len(queries)


def cell(values, fmt):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) == 1:
        return fmt.format(med)
    return f"{fmt.format(med)} [{fmt.format(min(values))}, {fmt.format(max(values))}]"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--systems", required=True)
    ap.add_argument("--seeds", required=True)
    ap.add_argument("--warm", type=int, required=True)
    ap.add_argument("--global-batch", type=int, required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--train", required=True)
    ap.add_argument("--max-length", type=int, required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--peak-tflops", type=float, default=800.0, help="the GPU's dense bf16 peak, for MFU")
    args = ap.parse_args()

    tokens_per_pair = mean_tokens_per_pair(args.model, args.train, args.max_length)
    gpu = args.device != "cpu"
    flops, params = flops_per_token(args.model, tokens_per_pair / 2) if gpu else (None, None)
    columns = ["system", "pairs/s", "tokens/s", "step ms", "peak RSS MB", "start-up s",
               "STS Spearman", "recall@10", "nDCG@10"] + (["peak GPU MB", "MFU %"] if gpu else [])
    rows = []
    pretrained = os.path.join(args.out, "pretrained.json")
    if os.path.exists(pretrained):
        with open(pretrained) as f:
            h = json.loads(f.readline())
        rows.append(["pretrained (no training)", "", "", "", "", "", f"{h['sts_spearman']:.4f}",
                     f"{h['recall@10']:.4f}", f"{h['ndcg@10']:.4f}"] + (["", ""] if gpu else []))
    medians = []
    for system in args.systems.split():
        per_seed = []
        for seed in args.seeds.split():
            d = os.path.join(args.out, f"{system}-seed{seed}")
            rec = ours_record(os.path.join(d, "metrics.jsonl")) if system.startswith("ours") else \
                peer_record(os.path.join(d, "peer-rank0.json"))
            timed = rec["step_seconds"][args.warm:]
            rec["pairs_per_s"] = args.global_batch * len(timed) / sum(timed) if timed else None
            rec["step_ms"] = 1000 * statistics.median(timed) if timed else None
            held = os.path.join(d, "heldout.json")
            if os.path.exists(held):
                with open(held) as f:
                    rec.update(json.loads(f.readline()))
            per_seed.append(rec)
        col = lambda key: [r.get(key) for r in per_seed]
        tokens = [p * tokens_per_pair if p else None for p in col("pairs_per_s")]
        mfu = [t * flops / (args.peak_tflops * 1e12) if t and args.peak_tflops > 0 else None
               for t in tokens] if gpu else []
        rows.append([system, cell(col("pairs_per_s"), "{:.1f}"), cell(tokens, "{:.0f}"),
                     cell(col("step_ms"), "{:.0f}"), cell(col("peak_rss_mb"), "{:.0f}"),
                     cell(col("startup_s"), "{:.2f}"), cell(col("sts_spearman"), "{:.4f}"),
                     cell(col("recall@10"), "{:.4f}"), cell(col("ndcg@10"), "{:.4f}")]
                    + ([cell(col("peak_gpu_mb"), "{:.0f}"), cell([100 * m if m else None for m in mfu], "{:.1f}")]
                       if gpu else []))
        med = lambda values: statistics.median([v for v in values if v is not None]) \
            if any(v is not None for v in values) else None
        medians.append({"system": system, "pairs_per_s": med(col("pairs_per_s")), "tokens_per_s": med(tokens),
                        "step_ms": med(col("step_ms")), "peak_rss_mb": med(col("peak_rss_mb")),
                        "peak_gpu_mb": med(col("peak_gpu_mb")), "mfu": med(mfu) if gpu else None})
    with open(os.path.join(args.out, "table.json"), "w") as f:
        json.dump({"device": args.device, "tokens_per_pair": tokens_per_pair, "flops_per_token": flops,
                   "rows": medians}, f, indent=1)
    widths = [max(len(str(r[i])) for r in rows + [columns]) for i in range(len(columns))]
    print(f"# medians [min, max] over seeds {args.seeds}; tokens/s = pairs/s x {tokens_per_pair:.1f} "
          f"real tokens per pair")
    if gpu:
        print(f"# MFU: {flops / 1e9:.3f} GFLOP per real token (6 x {params / 1e6:.1f}M + attention at "
              f"{tokens_per_pair / 2:.1f} tokens a sequence) against "
              + (f"{args.peak_tflops:g} TFLOP/s" if args.peak_tflops > 0 else "no peak (the card's is not known)"))
    for r in [columns] + rows:
        print("  ".join(str(v).ljust(w) if i == 0 else str(v).rjust(w) for i, (v, w) in enumerate(zip(r, widths))))


if __name__ == "__main__":
    main()
