#!/usr/bin/env python3
"""The peers scripts/bench-vs-st.sh measures ddp-embed against: what a Python user runs today
to fine-tune a sentence-embedding model on pairs, under torchrun.

  --recipe mnrl   sentence-transformers' SentenceTransformerTrainer with
                  MultipleNegativesRankingLoss (scale = 1 / temperature), the model folder's
                  own modules (all-MiniLM-L6-v2: mean pooling + Normalize).
  --recipe seeds  the seeds' recipe on Hugging Face's Trainer: AutoModel (it keeps BERT's
                  pooler, hence find_unused_parameters) -> CLS -> Linear(hidden, 128), the
                  pairwise sigmoid loss computed inside the model's forward (DDP needs one
                  forward per step), the tokenizer called in the collator (padding=True).

Both use the Trainer's own AdamW, linear schedule with warm-up, gradient clipping and
DistributedSampler over gloo, the per-device batch = global batch / world size, dropout on.
With --device cuda: one GPU per rank (LOCAL_RANK), NCCL, PyTorch's SDPA attention, and
--precision bf16 / fp16 the Trainer's autocast (fp16 with its loss scaling).
Every rank writes OUT/peer-rank{r}.json: the wall time of each step (step end to step end,
data loading included, as ddp-embed's step_ms; on a GPU after a synchronize), when the
first step began, the process start, its peak RSS and, on a GPU, its peak allocated GPU
memory. Rank 0 then writes OUT/final, a folder SentenceTransformer(dir)
loads, for the held-out evaluation (scripts/python/heldout_eval.py).

    torchrun --nproc_per_node 2 peer_train.py --recipe mnrl --model DIR --data train.jsonl \
        --out OUT --batch 64 --steps 50 --max-length 64
"""
import argparse
import json
import os
import resource
import time


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", choices=["mnrl", "seeds"], required=True)
    ap.add_argument("--model", required=True, help="a sentence-transformers / BERT folder")
    ap.add_argument("--data", required=True, help='JSONL of {"query": str, "pos": str | [str]}')
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, required=True, help="global batch (pairs per step, all ranks)")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--max-length", type=int, required=True)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--warmup-steps", type=int, default=10)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--max-grad-norm", type=float, default=1.0)
    ap.add_argument("--temperature", type=float, default=0.05)
    ap.add_argument("--projection-dim", type=int, default=128, help="seeds recipe: the head's size")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    ap.add_argument("--no-save", action="store_true", help="skip writing OUT/final")
    ap.add_argument("--gradient-checkpointing", action="store_true",
                    help="the Trainer's gradient_checkpointing: each layer recomputed in backward")
    ap.add_argument("--negatives", action="store_true",
                    help="mnrl: each row's first \"neg\" joins as a hard negative (anchor, positive, negative)")
    return ap.parse_args()


def process_start_time():
    """Wall-clock time this process was created (/proc/self/stat field 22 against /proc/uptime)."""
    with open("/proc/self/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return time.time() - (uptime - start_ticks / os.sysconf("SC_CLK_TCK"))


def read_pairs(path):
    """Queries and their first positive from a pairs JSONL ({"query", "pos": str | [str]})."""
    queries, positives = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                pos = row["pos"]
                queries.append(row["query"])
                positives.append(pos[0] if isinstance(pos, list) else pos)
    return queries, positives


def read_negatives(path):
    """The first hard negative of each row of a pairs JSONL ({"neg": str | [str]})."""
    negatives = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                neg = json.loads(line).get("neg")
                if not neg:
                    raise SystemExit(f"{path}:{number}: no \"neg\" (--negatives needs one on every row)")
                negatives.append(neg[0] if isinstance(neg, list) else neg)
    return negatives


def seeds_pairwise_sigmoid_loss(q, p, temperature):
    """The seeds' loss, as their model's forward computes it (the pairwise_sigmoid of docs/config.md)."""
    import torch
    bsz = q.size(0)
    sim = torch.cosine_similarity(q.unsqueeze(1), p.unsqueeze(0), dim=-1) / temperature
    diff = sim.diag().unsqueeze(1) - sim
    diff = diff.masked_fill(torch.eye(bsz, dtype=torch.bool, device=sim.device), 1e9)
    return -torch.log(torch.sigmoid(diff)).sum() / (bsz * bsz - bsz)


def step_clock(transformers, device):
    """A callback that takes the wall time at each step's end and at the first step's begin
    (on a GPU once its queued work is done)."""
    def sync():
        if device == "cuda":
            import torch
            torch.cuda.synchronize()

    class StepClock(transformers.TrainerCallback):
        def __init__(self):
            self.first_step_begin = None
            self.step_ends = []

        def on_train_begin(self, args, state, control, **kw):
            self.train_begin = time.time()

        def on_step_begin(self, args, state, control, **kw):
            if self.first_step_begin is None:
                self.first_step_begin = time.time()

        def on_step_end(self, args, state, control, **kw):
            sync()
            self.step_ends.append(time.time())

        def step_seconds(self):
            ends = [self.train_begin] + self.step_ends
            return [b - a for a, b in zip(ends, ends[1:])]

    return StepClock()


def trainer_arguments(args, cls, world_size, **more):
    """The arguments every peer trains with (their meaning: this module's docstring): the
    Trainer's AdamW, linear schedule with warm-up, clipping, the per-device share of --batch,
    no saving, no reports; `more` adds or overrides."""
    if args.batch % world_size:
        raise SystemExit(f"--batch {args.batch} is not a multiple of the world size {world_size}")
    # The collator tokenizes. On the CPU in the main process: each system gets one thread a
    # worker, and the numbers compare only so. On a GPU in four dataloader workers, as its
    # users run it: not on one core inside the timed steps, which would leave the GPU waiting.
    settings = dict(
        output_dir=os.path.join(args.out, "trainer"),
        per_device_train_batch_size=args.batch // world_size,
        max_steps=args.steps, learning_rate=args.lr, warmup_steps=args.warmup_steps,
        lr_scheduler_type="linear", weight_decay=args.weight_decay, max_grad_norm=args.max_grad_norm,
        optim="adamw_torch", seed=args.seed, data_seed=args.seed, dataloader_drop_last=True,
        dataloader_num_workers=4 if args.device == "cuda" else 0, save_strategy="no", report_to="none",
        logging_steps=10, disable_tqdm=True, use_cpu=args.device == "cpu",
        ddp_backend="gloo" if args.device == "cpu" else "nccl")
    settings.update(more)
    return cls(**settings)


def write_peer_record(args, rank, world_size, t_process, clock, trainer, recipe, **more):
    """OUT/peer-rank{rank}.json: what the benchmarks read of a peer's run (step wall times,
    first step, process start, peak RSS, and on a GPU its peak memory); `more` adds keys."""
    import torch
    import transformers
    result = {
        "recipe": recipe, "rank": rank, "world_size": world_size, "threads": torch.get_num_threads(),
        "process_start": t_process, "first_step_begin": clock.first_step_begin,
        "step_seconds": clock.step_seconds(),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "final_loss": next((h["train_loss"] for h in reversed(trainer.state.log_history) if "train_loss" in h), None),
        "torch": torch.__version__, "transformers": transformers.__version__, "device": args.device,
    }
    result.update(more)
    if args.device == "cuda":
        result["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
        result["gpu"] = torch.cuda.get_device_name()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"peer-rank{rank}.json"), "w") as f:
        json.dump(result, f)


def leave_process_group():
    """Leave the process group before the interpreter tears down: Gloo's threads may still hold
    work with tensors in it, and freeing those during finalization can abort a process that
    trained and saved ("terminate called without an active exception"), which the benchmark
    would count as a failed run. The Trainer never destroys the group it made."""
    import torch.distributed as dist
    if dist.is_initialized():
        dist.destroy_process_group()


def training_arguments(args, cls, world_size):
    return trainer_arguments(
        args, cls, world_size, bf16=args.precision == "bf16", fp16=args.precision == "fp16",
        # Both models keep BERT's pooler (AutoModel does), which no loss uses: without this
        # DDP stops at the second step ("Expected to have finished reduction ...").
        ddp_find_unused_parameters=True, gradient_checkpointing=args.gradient_checkpointing,
        **({"remove_unused_columns": False} if args.recipe == "seeds" else {}))


def mnrl_trainer(args, datasets, queries, positives, world_size, clock):
    """sentence-transformers' own recipe: its trainer, its loss, the folder's own modules."""
    from sentence_transformers import (SentenceTransformer, SentenceTransformerTrainer,
                                       SentenceTransformerTrainingArguments)
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    import torch
    # fp32 weights whatever the folder's config.json says (Qwen3-Embedding's says bfloat16):
    # --precision is the Trainer's autocast, as it is embed-train's.
    model_kwargs = {"dtype": torch.float32}
    if args.device == "cuda":
        model_kwargs["attn_implementation"] = "sdpa"
    model = SentenceTransformer(args.model, device=args.device, model_kwargs=model_kwargs)
    model.max_seq_length = args.max_length
    loss = MultipleNegativesRankingLoss(model, scale=1.0 / args.temperature)
    # A third column is MNRL's hard negative: one more candidate for every anchor of the batch.
    columns = {"anchor": queries, "positive": positives}
    if args.negatives:
        columns["negative"] = read_negatives(args.data)
    trainer = SentenceTransformerTrainer(
        model=model, args=training_arguments(args, SentenceTransformerTrainingArguments, world_size),
        train_dataset=datasets.Dataset.from_dict(columns), loss=loss, callbacks=[clock])
    return trainer, lambda out: model.save(out)


def seeds_trainer(args, datasets, queries, positives, world_size, clock):
    """The seeds' recipe: CLS -> Linear head, pairwise sigmoid loss inside forward, HF Trainer."""
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)

    class EmbeddingModel4Loss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = transformers.AutoModel.from_pretrained(  # keeps the pooler
                args.model, **({"attn_implementation": "sdpa"} if args.device == "cuda" else {}))
            self.head = torch.nn.Linear(self.encoder.config.hidden_size, args.projection_dim)

        def embed(self, ids, mask):
            return self.head(self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0])

        def forward(self, q_ids, q_mask, p_ids, p_mask, **unused):
            q, p = self.embed(q_ids, q_mask), self.embed(p_ids, p_mask)
            return {"loss": seeds_pairwise_sigmoid_loss(q, p, args.temperature)}

    def collate(rows):
        enc = lambda key: tokenizer([r[key] for r in rows], padding=True, truncation=True,
                                    max_length=args.max_length, return_tensors="pt")
        q, p = enc("query"), enc("pos")
        return {"q_ids": q["input_ids"], "q_mask": q["attention_mask"],
                "p_ids": p["input_ids"], "p_mask": p["attention_mask"]}

    model = EmbeddingModel4Loss()
    trainer = transformers.Trainer(
        model=model, args=training_arguments(args, transformers.TrainingArguments, world_size),
        train_dataset=datasets.Dataset.from_dict({"query": queries, "pos": positives}),
        data_collator=collate, callbacks=[clock])

    def save(out):  # the same model as a sentence-transformers folder: Transformer, CLS, Dense
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.base.modules.dense import Dense
        from sentence_transformers.base.modules.transformer import Transformer
        from sentence_transformers.sentence_transformer.modules.pooling import Pooling
        encoder_dir = out + ".encoder"
        model.encoder.save_pretrained(encoder_dir)
        tokenizer.save_pretrained(encoder_dir)
        hidden = model.encoder.config.hidden_size
        st = SentenceTransformer(modules=[
            Transformer(encoder_dir, max_seq_length=args.max_length), Pooling(hidden, "cls"),
            Dense(hidden, args.projection_dim, activation_function=torch.nn.Identity(),
                  init_weight=model.head.weight.detach(), init_bias=model.head.bias.detach())], device="cpu")
        st.save(out)

    return trainer, save


def main():
    args = parse_args()
    t_process = process_start_time()
    import torch
    torch.set_num_threads(args.threads)
    import datasets
    import transformers
    datasets.disable_progress_bars()
    transformers.logging.set_verbosity_error()

    rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    queries, positives = read_pairs(args.data)
    clock = step_clock(transformers, args.device)
    if args.negatives and args.recipe != "mnrl":
        raise SystemExit("--negatives: only with --recipe mnrl")
    make = mnrl_trainer if args.recipe == "mnrl" else seeds_trainer
    trainer, save = make(args, datasets, queries, positives, world_size, clock)
    trainer.train()

    write_peer_record(args, rank, world_size, t_process, clock, trainer, args.recipe, precision=args.precision)
    if rank == 0 and not args.no_save:
        save(os.path.join(args.out, "final"))
    leave_process_group()


if __name__ == "__main__":
    main()
