"""sentence-transformers' own reranking losses on the first batch of a cross-encoder run.

Writes, into the folder given last:
  init/          a cross-encoder folder, CrossEncoder(MiniLM, num_labels=1) with a seeded head,
                 as CrossEncoder.save() writes it: the runs of both libraries start from it
  init-xlmr/     the same from a small XLM-RoBERTa (--xlmr): XLMRobertaForSequenceClassification
  init-qwen3/    the same from a small Qwen3 (--qwen3): Qwen3ForSequenceClassification, read in
                 float32 here as embed-train reads it, without its chat template (through one,
                 sentence-transformers 6 renders a pair as chat messages; embed-train joins the
                 two texts as the tokenizer does, tokenizer(query, document))
  plain.jsonl    8 pairs, each a query, its positive and 3 hard negatives (other pairs' positives)
  scored.jsonl   the same with a teacher's grades (pos_scores, neg_scores: 0 to 3)
  labeled.jsonl  8 labeled pairs {"query", "doc", "label"}: a positive or a negative, soft labels
  classes.jsonl  the same 8 pairs, each label a class of three (0, 1, 2)
  init-3labels/  CrossEncoder(MiniLM, num_labels=3), seeded: a classifier (CrossEntropyLoss on classes.jsonl)
  losses.json    {case: the loss of sentence-transformers' class on all 8 pairs as one batch}

Each case (--cases, JSON text: a list of {"name", "data", "loss", "init"}, init "init",
"init-3labels", "init-xlmr" or "init-qwen3", "loss" as loss.cross_encoder
writes it) is the first step of embed-train's run on the same folder and file with
train.batch_size 8, data.shuffle false, model.dropout 0: the same pairs, the same
candidates, the model in eval mode here (no dropout there).
"""
import argparse
import json
import os
import random
import shutil
import sys

import torch
from torch import nn

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from sentence_transformers.cross_encoder import CrossEncoder  # noqa: E402
from sentence_transformers.cross_encoder import losses as ce_losses  # noqa: E402
from sentence_transformers.cross_encoder.losses import lambda_loss  # noqa: E402

ACTIVATIONS = {"identity": nn.Identity(), "sigmoid": nn.Sigmoid(), "tanh": nn.Tanh()}
SCHEMES = {
    "none": lambda c: lambda_loss.NoWeightingScheme(),
    "ndcg_loss1": lambda c: lambda_loss.NDCGLoss1Scheme(),
    "ndcg_loss2": lambda c: lambda_loss.NDCGLoss2Scheme(),
    "lambdarank": lambda c: lambda_loss.LambdaRankScheme(),
    "ndcg_loss2pp": lambda c: lambda_loss.NDCGLoss2PPScheme(mu=c.get("mu", 10.0)),
}


def make_data(train_pairs, out):
    rows = []
    with open(train_pairs) as f:
        for line in f:
            r = json.loads(line)
            pos = r["pos"] if isinstance(r["pos"], str) else r["pos"][0]
            rows.append((r["query"], pos))
            if len(rows) == 8:
                break
    rng = random.Random(5)
    plain, scored = [], []
    for i, (q, p) in enumerate(rows):
        negs = [rows[(i + k) % len(rows)][1] for k in (1, 2, 3)]
        plain.append({"query": q, "pos": p, "neg": negs})
        scored.append({"query": q, "pos": p, "neg": negs, "pos_scores": [3.0],
                       "neg_scores": [float(rng.randint(0, 2)) for _ in negs]})
    labeled = [{"query": r["query"], "doc": r["pos"] if i % 2 == 0 else r["neg"][0],
                "label": [0.9, 0.1, 0.75, 0.3, 1.0, 0.0, 0.6, 0.45][i]} for i, r in enumerate(plain)]
    classes = [dict(r, label=[2, 0, 1, 0, 2, 1, 1, 0][i]) for i, r in enumerate(labeled)]
    for name, data in (("plain", plain), ("scored", scored), ("labeled", labeled), ("classes", classes)):
        with open(os.path.join(out, name + ".jsonl"), "w") as f:
            for r in data:
                f.write(json.dumps(r) + "\n")
    return {"plain": plain, "scored": scored, "labeled": labeled, "classes": classes}


def without_chat_template(folder, out):
    """A copy of a model folder whose tokenizer has no chat template."""
    shutil.copytree(folder, out)
    for name in os.listdir(out):
        if name.startswith("chat_template"):
            os.remove(os.path.join(out, name))
    path = os.path.join(out, "tokenizer_config.json")
    with open(path) as f:
        config = json.load(f)
    config.pop("chat_template", None)
    with open(path, "w") as f:
        json.dump(config, f, indent=1)
    return out


def activation(cfg, default):
    return ACTIVATIONS[cfg.get("activation", default)]


def st_loss(model, cfg, rows):
    if "doc" in rows[0] and cfg.get("type") == "cross_entropy":  # a classifier: each pair's class
        loss = ce_losses.CrossEntropyLoss(model, activation_fn=activation(cfg, "identity"))
        return loss([[r["query"] for r in rows], [r["doc"] for r in rows]],
                    torch.tensor([r["label"] for r in rows], dtype=torch.long))
    if "doc" in rows[0]:  # labeled pairs: BinaryCrossEntropyLoss on (query, doc) against each label
        pw = cfg.get("pos_weight", 1.0)
        loss = ce_losses.BinaryCrossEntropyLoss(model, activation_fn=activation(cfg, "identity"),
                                                pos_weight=None if pw == 1.0 else torch.tensor(pw))
        return loss([[r["query"] for r in rows], [r["doc"] for r in rows]], torch.tensor([r["label"] for r in rows]))
    queries = [r["query"] for r in rows]
    positives = [r["pos"] for r in rows]
    k = len(rows[0]["neg"])
    neg_columns = [[r["neg"][j] for r in rows] for j in range(k)]
    docs = [[r["pos"]] + r["neg"] for r in rows]
    scored = "pos_scores" in rows[0]
    grades = [torch.tensor(r["pos_scores"] + r["neg_scores"]) if scored else
              torch.tensor([1.0] + [0.0] * len(r["neg"])) for r in rows]
    t = cfg.get("type", "binary_cross_entropy")
    if t == "binary_cross_entropy":
        pw = cfg.get("pos_weight", 1.0)
        loss = ce_losses.BinaryCrossEntropyLoss(model, activation_fn=activation(cfg, "identity"),
                                                pos_weight=None if pw == 1.0 else torch.tensor(pw))
        pairs_q = [q for q, d in zip(queries, docs) for _ in d]
        pairs_d = [x for d in docs for x in d]
        return loss([pairs_q, pairs_d], torch.cat(grades))
    if t == "cross_entropy":
        # CrossEntropyLoss with each query's candidates as its classes, the positive first.
        loss = ce_losses.CrossEntropyLoss(model, activation_fn=activation(cfg, "identity"))
        pairs = [(q, x) for q, d in zip(queries, docs) for x in d]
        inputs = model.preprocess(pairs)
        logits = model(inputs)["scores"].view(len(rows), -1)
        return loss.ce_loss(loss.activation_fn(logits), torch.zeros(len(rows), dtype=torch.long))
    if t == "mnrl":
        n = cfg.get("in_batch_negatives", 4)
        loss = ce_losses.MultipleNegativesRankingLoss(model, num_negatives=None if n < 0 else n,
                                                      scale=cfg.get("scale", 10.0),
                                                      activation_fn=activation(cfg, "sigmoid"))
        return loss([queries, positives] + neg_columns, None)
    if t == "lambda":
        loss = ce_losses.LambdaLoss(model, weighting_scheme=SCHEMES[cfg.get("weighting", "ndcg_loss2pp")](cfg),
                                    k=cfg.get("k") or None, sigma=cfg.get("sigma", 1.0), eps=cfg.get("eps", 1e-10),
                                    reduction_log=cfg.get("reduction_log", "binary"),
                                    activation_fn=activation(cfg, "identity"))
        return loss([queries, docs], grades)
    if t == "listnet":
        loss = ce_losses.ListNetLoss(model, activation_fn=activation(cfg, "identity"))
        return loss([queries, docs], grades)
    if t == "margin_mse":
        loss = ce_losses.MarginMSELoss(model, activation_fn=activation(cfg, "identity"))
        return loss([queries, positives] + neg_columns, torch.stack(grades))
    raise SystemExit("unknown loss type " + t)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--minilm", required=True)
    p.add_argument("--train-pairs", required=True)
    p.add_argument("--xlmr", required=True, help="a small XLM-RoBERTa folder")
    p.add_argument("--qwen3", required=True, help="a small Qwen3 folder")
    p.add_argument("--cases", required=True, help="JSON text: a list of {name, data, loss}")
    p.add_argument("out")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    data = make_data(a.train_pairs, a.out)
    torch.manual_seed(0)
    model = CrossEncoder(a.minilm, num_labels=1)
    model.save(os.path.join(a.out, "init"))
    torch.manual_seed(3)
    CrossEncoder(a.minilm, num_labels=3).save(os.path.join(a.out, "init-3labels"))
    torch.manual_seed(1)
    CrossEncoder(a.xlmr, num_labels=1).save(os.path.join(a.out, "init-xlmr"))
    torch.manual_seed(2)
    float32 = {"dtype": torch.float32}
    qwen3 = without_chat_template(a.qwen3, os.path.join(a.out, "qwen3-plain"))
    CrossEncoder(qwen3, num_labels=1, model_kwargs=float32).save(os.path.join(a.out, "init-qwen3"))
    models = {}
    for init in ("init", "init-3labels", "init-xlmr", "init-qwen3"):
        models[init] = CrossEncoder(os.path.join(a.out, init), model_kwargs=float32)
        models[init].eval()
    results = {}
    cases = json.loads(a.cases)
    with torch.no_grad():
        for case in cases:
            results[case["name"]] = float(st_loss(models[case.get("init", "init")], case["loss"], data[case["data"]]))
    with open(os.path.join(a.out, "losses.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
