#!/usr/bin/env python3
"""The peer scripts/bench-sparse.sh measures ddp-embed's sparse encoder training against: what
a Python user runs today to train a SPLADE model, under torchrun.

sentence-transformers' SparseEncoderTrainer with SpladeLoss around
SparseMultipleNegativesRankingLoss (scale 1, its default), FLOPS weights --document-weight and
--query-weight, and the trainer's own SpladeRegularizerWeightSchedulerCallback (added by the
trainer: the weights rise over the first third of the steps), on (anchor, positive) columns
from a pairs JSONL ({"query", "pos": str | [str]}) and, with --negatives, each row's first
"neg" as a third column. The model is SparseEncoder([Transformer(--model, fill-mask),
SpladePooling(max, relu)]): a *ForMaskedLM folder's encoder and head, as embed-train's
model.kind sparse starts from one.

The Trainer's own AdamW, linear schedule with warm-up, gradient clipping, DistributedSampler
over gloo (NCCL on a GPU), dropout on, the collator tokenizing in the main process on the CPU
(scripts/python/peer_train.py's settings, one thread a worker). --batch is the global number
of pairs a step; each rank gets --batch / world size of them. Every rank writes
OUT/peer-rank{r}.json (as peer_train.py: step wall times, first step, process start, peak
RSS); rank 0 then writes OUT/final, a folder SparseEncoder(dir) loads.

    torchrun --nproc_per_node 2 peer_sparse_train.py --model MLM_DIR --data pairs.jsonl \
        --out OUT --batch 32 --steps 30 --max-length 128
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_train import (leave_process_group, process_start_time, read_negatives, read_pairs, step_clock,  # noqa: E402
                        trainer_arguments, write_peer_record)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a BertForMaskedLM / XLMRobertaForMaskedLM folder")
    ap.add_argument("--data", required=True, help='JSONL of {"query": str, "pos": str | [str], "neg": [str]}')
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, required=True, help="global batch: pairs a step, all ranks")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--max-length", type=int, required=True, help="tokens of a text")
    ap.add_argument("--negatives", action="store_true", help="each row's first \"neg\" as a hard negative")
    ap.add_argument("--document-weight", type=float, default=3e-5)
    ap.add_argument("--query-weight", type=float, default=5e-5)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--warmup-steps", type=int, default=10)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--max-grad-norm", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--no-save", action="store_true", help="skip writing OUT/final")
    return ap.parse_args()


def main():
    args = parse_args()
    t_process = process_start_time()
    import torch
    torch.set_num_threads(args.threads)
    import datasets
    import transformers
    from sentence_transformers import SparseEncoder, SparseEncoderTrainer, SparseEncoderTrainingArguments
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sparse_encoder.losses import SparseMultipleNegativesRankingLoss, SpladeLoss
    from sentence_transformers.sparse_encoder.modules import SpladePooling
    datasets.disable_progress_bars()
    transformers.logging.set_verbosity_error()

    rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    queries, positives = read_pairs(args.data)
    columns = {"anchor": queries, "positive": positives}
    if args.negatives:
        columns["negative"] = read_negatives(args.data)
    model = SparseEncoder(modules=[Transformer(args.model, transformer_task="fill-mask", max_seq_length=args.max_length,
                                               model_kwargs={"dtype": torch.float32}),
                                   SpladePooling(pooling_strategy="max", activation_function="relu")],
                          device=args.device)
    loss = SpladeLoss(model, SparseMultipleNegativesRankingLoss(model),
                      document_regularizer_weight=args.document_weight, query_regularizer_weight=args.query_weight)
    clock = step_clock(transformers, args.device)
    training_args = trainer_arguments(args, SparseEncoderTrainingArguments, world_size, ddp_find_unused_parameters=False)
    trainer = SparseEncoderTrainer(model=model, args=training_args, loss=loss, callbacks=[clock],
                                   train_dataset=datasets.Dataset.from_dict(columns))
    trainer.train()

    write_peer_record(args, rank, world_size, t_process, clock, trainer, "splade", pairs_per_step=args.batch)
    if rank == 0 and not args.no_save:
        model.save(os.path.join(args.out, "final"))
    leave_process_group()


if __name__ == "__main__":
    main()
