#!/usr/bin/env python3
"""The peer scripts/bench-rerank.sh and scripts/recipe-rerank.sh measure ddp-embed's reranker
training against: what a Python user runs today to train a cross-encoder on mined hard
negatives, under torchrun.

sentence-transformers' CrossEncoderTrainer with BinaryCrossEntropyLoss on labeled pairs:
every line of the pairs JSONL ({"query", "pos", "neg": [...]}) gives (query, pos, 1) and
(query, neg_i, 0) for its first --negatives negatives (what mine_hard_negatives'
output_format="labeled-pair" gives, and what embed-train's binary_cross_entropy scores from
the same line). The model is CrossEncoder(--model, num_labels=1): the folder's encoder, a
new classification head, as embed-train's model.kind cross_encoder starts from an encoder.

The Trainer's own AdamW, linear schedule with warm-up, gradient clipping, DistributedSampler
over gloo (NCCL on a GPU), dropout on, the collator tokenizing in the main process on the CPU
(scripts/python/peer_train.py's settings, one thread a worker). --batch is the global number
of scored (query, document) pairs a step; each rank gets --batch / world size of them.
Every rank writes OUT/peer-rank{r}.json (as peer_train.py: step wall times, first step,
process start, peak RSS); rank 0 then writes OUT/final, a folder CrossEncoder(dir) loads.

    torchrun --nproc_per_node 2 peer_rerank_train.py --model DIR --data mined.jsonl \
        --out OUT --batch 64 --steps 50 --max-length 256
"""
import argparse
import json
import os
import resource
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_train import process_start_time, step_clock  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="an encoder folder (BERT) or a cross-encoder folder")
    ap.add_argument("--data", required=True, help='JSONL of {"query": str, "pos": str | [str], "neg": [str]}')
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, required=True, help="global batch: scored pairs a step, all ranks")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--max-length", type=int, required=True, help="tokens of a (query, document) pair")
    ap.add_argument("--negatives", type=int, default=3, help="hard negatives a line (its first N)")
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--warmup-steps", type=int, default=10)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--max-grad-norm", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--no-save", action="store_true", help="skip writing OUT/final")
    return ap.parse_args()


def read_labeled_pairs(path, negatives):
    """(query, document, label) rows: each line's first positive 1, its first N negatives 0."""
    queries, documents, labels = [], [], []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            pos, neg = row["pos"], row.get("neg") or []
            if len(neg) < negatives:
                raise SystemExit(f"{path}:{number}: {len(neg)} negatives, --negatives {negatives} needs that many "
                                 "(mine them: embed-train mine --num-negatives N)")
            for doc, label in [(pos[0] if isinstance(pos, list) else pos, 1.0)] + [(n, 0.0) for n in neg[:negatives]]:
                queries.append(row["query"])
                documents.append(doc)
                labels.append(label)
    return queries, documents, labels


def main():
    args = parse_args()
    t_process = process_start_time()
    import torch
    torch.set_num_threads(args.threads)
    import datasets
    import transformers
    from sentence_transformers.cross_encoder import (CrossEncoder, CrossEncoderTrainer,
                                                     CrossEncoderTrainingArguments)
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss
    datasets.disable_progress_bars()
    transformers.logging.set_verbosity_error()

    rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if args.batch % world_size:
        raise SystemExit(f"--batch {args.batch} is not a multiple of the world size {world_size}")
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    queries, documents, labels = read_labeled_pairs(args.data, args.negatives)
    torch.manual_seed(args.seed)  # the new head's initialization
    model = CrossEncoder(args.model, num_labels=1, max_length=args.max_length, device=args.device,
                         model_kwargs={"dtype": torch.float32})
    clock = step_clock(transformers, args.device)
    training_args = CrossEncoderTrainingArguments(
        output_dir=os.path.join(args.out, "trainer"),
        per_device_train_batch_size=args.batch // world_size,
        max_steps=args.steps, learning_rate=args.lr, warmup_steps=args.warmup_steps,
        lr_scheduler_type="linear", weight_decay=args.weight_decay, max_grad_norm=args.max_grad_norm,
        optim="adamw_torch", seed=args.seed, data_seed=args.seed, dataloader_drop_last=True,
        dataloader_num_workers=4 if args.device == "cuda" else 0, save_strategy="no", report_to="none",
        logging_steps=10, disable_tqdm=True, use_cpu=args.device == "cpu",
        ddp_backend="gloo" if args.device == "cpu" else "nccl",
        # BertForSequenceClassification uses every parameter (the pooler feeds the head).
        ddp_find_unused_parameters=False)
    trainer = CrossEncoderTrainer(
        model=model, args=training_args, loss=BinaryCrossEntropyLoss(model), callbacks=[clock],
        train_dataset=datasets.Dataset.from_dict({"query": queries, "document": documents, "label": labels}))
    trainer.train()

    os.makedirs(args.out, exist_ok=True)
    result = {
        "recipe": "cross_encoder_bce", "rank": rank, "world_size": world_size, "threads": torch.get_num_threads(),
        "process_start": t_process, "first_step_begin": clock.first_step_begin,
        "step_seconds": clock.step_seconds(), "pairs_per_step": args.batch,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "final_loss": next((h["train_loss"] for h in reversed(trainer.state.log_history) if "train_loss" in h), None),
        "torch": torch.__version__, "transformers": transformers.__version__, "device": args.device,
    }
    with open(os.path.join(args.out, f"peer-rank{rank}.json"), "w") as f:
        json.dump(result, f)
    if rank == 0 and not args.no_save:
        model.save(os.path.join(args.out, "final"))
    # Leave the process group before the interpreter tears down: Gloo's threads may still hold
    # work with tensors in it, and freeing those during finalization can abort a process that
    # trained and saved ("terminate called without an active exception"), which the benchmark
    # would count as a failed run. The Trainer never destroys the group it made.
    import torch.distributed as dist
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
