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
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_train import (leave_process_group, process_start_time, step_clock, trainer_arguments,  # noqa: E402
                        write_peer_record)


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
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    queries, documents, labels = read_labeled_pairs(args.data, args.negatives)
    torch.manual_seed(args.seed)  # the new head's initialization
    model = CrossEncoder(args.model, num_labels=1, max_length=args.max_length, device=args.device,
                         model_kwargs={"dtype": torch.float32})
    clock = step_clock(transformers, args.device)
    # BertForSequenceClassification uses every parameter (the pooler feeds the head).
    training_args = trainer_arguments(args, CrossEncoderTrainingArguments, world_size, ddp_find_unused_parameters=False)
    trainer = CrossEncoderTrainer(
        model=model, args=training_args, loss=BinaryCrossEntropyLoss(model), callbacks=[clock],
        train_dataset=datasets.Dataset.from_dict({"query": queries, "document": documents, "label": labels}))
    trainer.train()

    write_peer_record(args, rank, world_size, t_process, clock, trainer, "cross_encoder_bce", pairs_per_step=args.batch)
    if rank == 0 and not args.no_save:
        model.save(os.path.join(args.out, "final"))
    leave_process_group()


if __name__ == "__main__":
    main()
