"""sentence-transformers' SpladeLoss on the first batch of a sparse encoder's run.

    python scripts/python/splade_train_reference.py --mlm MLM_DIR --train-pairs FILE --teacher ST_DIR \
        --cases JSON OUT

Writes into OUT:
  init/         a SparseEncoder folder, [Transformer(MLM_DIR, fill-mask), SpladePooling(max,
                relu)] as SparseEncoder.save() writes it: the runs of both libraries start from it
  plain.jsonl   8 pairs, each a query, its positive and 3 hard negatives (the positives of 24
                further pairs of the file: 32 distinct documents), with a teacher's scores of
                the four (pos_scores, neg_scores: 20 × the cosine of the SentenceTransformer
                at --teacher), which the cases without a teacher term do not read
  losses.json   {case: SpladeLoss's total (the sum of its terms) on the 8 pairs as one batch}
  active.json   {"queries": [...], "documents": [...]}: each text's active entries, so that a
                case's thresholds can be checked to leave some texts out and keep others

Each case (--cases, JSON text: a list of {"name", "negatives", "pooling", "loss"}) is the
first step of embed-train's run from OUT/init on OUT/plain.jsonl with train.batch_size 8,
data.shuffle false and data.negatives_per_query `negatives` (0 or 3): the same texts in the
same batch. "loss" is embed-train's loss object: type (splade, the default; margin_mse; none),
temperature (the scale is its inverse), directions, margin_mse.weight, distill.{weight,
temperature}, sparse.{document,query}_regularizer_{weight,threshold}, sparse.warmup_ratio.
The terms, each SpladeLoss's base loss around which it adds the FLOPS terms:
  splade        SparseMultipleNegativesRankingLoss
  margin_mse    SparseMarginMSELoss (loss.type "margin_mse"; loss.margin_mse.weight w beside
                splade: w × its value added)
  distill       SparseDistillKLDivLoss at student temperature T = loss.temperature and
                teacher temperature loss.distill.temperature, which is T² × KL(teacher ||
                student); embed-train's term is FlagEmbedding's cross-entropy, KL plus the
                teacher's entropy H (the same gradient but for T²): the case's value is
                weight × (theirs / T² + H), H computed here from the teacher's scores.
"pooling" is [pooling_strategy, activation_function]. The model is in eval mode here (no
dropout there: model.dropout 0).

The warm-up is sentence-transformers' SpladeRegularizerWeightSchedulerCallback's: at the
beginning of the first step (global_step 0) it sets both weights to 0, whatever the ratio
(a positive one); with warmup_ratio 0 the weights are the configured ones (no callback).
"""
import argparse
import json
import os
import sys

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
from sentence_transformers import SentenceTransformer, SparseEncoder  # noqa: E402
from sentence_transformers.base.modules import Transformer  # noqa: E402
from sentence_transformers.sparse_encoder.losses import (  # noqa: E402
    SparseDistillKLDivLoss, SparseMarginMSELoss, SparseMultipleNegativesRankingLoss, SpladeLoss)
from sentence_transformers.sparse_encoder.modules import SpladePooling  # noqa: E402


def make_data(train_pairs, teacher_dir, out):
    # 8 pairs and 24 other pairs' positives as their negatives: every document of the batch
    # a distinct text, so that embed-train's same-text mask (a candidate with a query's
    # positive's text is no negative of it) leaves nothing out here, as the reference
    # loss does not.
    rows, seen = [], set()
    with open(train_pairs) as f:
        for line in f:
            r = json.loads(line)
            pos = r["pos"] if isinstance(r["pos"], str) else r["pos"][0]
            if pos in seen:
                continue
            seen.add(pos)
            rows.append((r["query"], pos))
            if len(rows) == 32:
                break
    plain = [{"query": q, "pos": p, "neg": [rows[8 + 3 * i + k][1] for k in range(3)]}
             for i, (q, p) in enumerate(rows[:8])]
    teacher = SentenceTransformer(teacher_dir, device="cpu")
    with torch.no_grad():
        for r in plain:
            e = teacher.encode([r["query"], r["pos"]] + r["neg"], convert_to_tensor=True, normalize_embeddings=True)
            scores = (20 * (e[1:] @ e[0])).tolist()
            r["pos_scores"], r["neg_scores"] = scores[:1], scores[1:]
    with open(os.path.join(out, "plain.jsonl"), "w") as f:
        for r in plain:
            f.write(json.dumps(r) + "\n")
    return plain


def features(model, texts):
    return model.tokenize(texts)


def case_loss(init, pooling, rows, negatives, loss):
    strategy, activation = pooling
    transformer = Transformer(init, transformer_task="fill-mask")
    model = SparseEncoder(modules=[transformer, SpladePooling(pooling_strategy=strategy,
                                                              activation_function=activation)], device="cpu")
    model.eval()
    sparse = loss.get("sparse", {})
    warm = sparse.get("warmup_ratio", 1 / 3) > 0
    doc_weight = 0.0 if warm else sparse.get("document_regularizer_weight", 3e-5)
    query_weight = 0.0 if warm else sparse.get("query_regularizer_weight", 5e-5)
    kind = loss.get("type", "splade")
    temperature = loss.get("temperature", 1.0)
    distill = loss.get("distill", {})
    if kind == "splade":
        base = SparseMultipleNegativesRankingLoss(model, scale=1.0 / temperature,
                                                  directions=tuple(loss.get("directions", ["query_to_doc"])))
    elif kind == "margin_mse":
        base = SparseMarginMSELoss(model)
    else:
        base = SparseDistillKLDivLoss(model, student_temperature=temperature,
                                      teacher_temperature=distill.get("temperature", 1.0))

    def splade_around(base_loss):
        return SpladeLoss(model, base_loss, document_regularizer_weight=doc_weight,
                          query_regularizer_weight=query_weight if query_weight > 0 else None,
                          document_regularizer_threshold=sparse.get("document_regularizer_threshold") or None,
                          query_regularizer_threshold=sparse.get("query_regularizer_threshold") or None)

    columns = [[r["query"] for r in rows], [r["pos"] for r in rows]]
    for k in range(negatives):
        columns.append([r["neg"][k] for r in rows])
    teacher = torch.tensor([r["pos_scores"] + r["neg_scores"][:negatives] for r in rows])
    with torch.no_grad():
        features_list = [features(model, c) for c in columns]
        terms = splade_around(base)(features_list, teacher if kind != "splade" else None)
        total = sum(t.item() for t in terms.values())
        if kind == "none":
            # theirs T^2 KL -> ours weight x (KL + H)
            kl = terms["base_loss"].item() / temperature ** 2
            p = torch.softmax(teacher / distill.get("temperature", 1.0), dim=1)
            entropy = float(-(p * torch.log(p)).sum(1).mean())
            total += -terms["base_loss"].item() + distill.get("weight", 0.0) * (kl + entropy)
        margin_weight = loss.get("margin_mse", {}).get("weight", 0.0)
        if kind == "splade" and margin_weight > 0:
            embeddings = [model(f)["sentence_embedding"] for f in features_list]
            total += margin_weight * SparseMarginMSELoss(model).compute_loss_from_embeddings(embeddings, teacher).item()
    return float(total), model, columns


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mlm", required=True)
    ap.add_argument("--train-pairs", required=True)
    ap.add_argument("--teacher", required=True)
    ap.add_argument("--cases", required=True)
    ap.add_argument("out")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    rows = make_data(a.train_pairs, a.teacher, a.out)
    init = os.path.join(a.out, "init")
    SparseEncoder(modules=[Transformer(a.mlm, transformer_task="fill-mask"), SpladePooling("max", "relu")],
                  device="cpu").save(init)
    losses = {}
    active = None
    for case in json.loads(a.cases):
        value, model, columns = case_loss(init, case.get("pooling", ["max", "relu"]), rows, case["negatives"],
                                          case["loss"])
        losses[case["name"]] = value
        if active is None:
            with torch.no_grad():
                q = model.encode(columns[0], convert_to_tensor=True, convert_to_sparse_tensor=False)
                d = model.encode([r["pos"] for r in rows], convert_to_tensor=True, convert_to_sparse_tensor=False)
            active = {"queries": (q != 0).sum(1).tolist(), "documents": (d != 0).sum(1).tolist()}
    with open(os.path.join(a.out, "losses.json"), "w") as f:
        json.dump(losses, f, indent=1)
    with open(os.path.join(a.out, "active.json"), "w") as f:
        json.dump(active, f)
    print("splade_train_reference:", json.dumps(losses), "active", json.dumps(active))


if __name__ == "__main__":
    main(sys.argv[1:])
