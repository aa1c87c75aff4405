#!/usr/bin/env python3
"""The peers' losses on given embeddings, with their gradients: the independent truth for
ddp-embed's contrastive_loss (tests/torch/test_loss_reference.cpp).

Reads IN.safetensors with float64 tensors q [B, D], p [B, D] and optionally n [K*B, D]
(hard negatives) and c [W*B, D] (every rank's positives, for cross-rank negatives) plus
the scalar "rank" and "temperature"; writes OUT.safetensors with, for each case, the
loss and its gradients with respect to the inputs:

  mnrl            sentence-transformers' MultipleNegativesRankingLoss (its own class, its
                  compute_loss_from_embeddings) on [q, p], scale = 1 / temperature
  mnrl_hard       the same on [q, p, n]: the hard negatives join every query's candidates
  mnrl_gathered   what MNRL computes on rank `rank` with gather_across_devices=True:
                  local queries against all ranks' positives, the positive at rank * B + i.
                  Without a process group here, the candidates are rotated so that rank's
                  block comes first; the softmax does not depend on the candidates' order.
  seeds           the seeds' pairwise sigmoid loss (peer_train.seeds_pairwise_sigmoid_loss)
"""
import os
import sys

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_train import seeds_pairwise_sigmoid_loss  # noqa: E402
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss  # noqa: E402


class NoModel(torch.nn.Module):
    """MNRL keeps a reference to the model; on given embeddings it never calls it."""


def with_grads(name, fn, inputs, out):
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in inputs.items()}
    loss = fn(**leaves)
    loss.backward()
    out[f"{name}.loss"] = loss.detach().reshape(1)
    for k, v in leaves.items():
        out[f"{name}.grad_{k}"] = v.grad


def main():
    src, dst = sys.argv[1], sys.argv[2]
    t = load_file(src)
    temperature = float(t["temperature"])
    rank = int(t["rank"])
    mnrl = MultipleNegativesRankingLoss(NoModel(), scale=1.0 / temperature)
    labels = None  # MNRL ignores the labels
    out = {}
    with_grads("mnrl", lambda q, p: mnrl.compute_loss_from_embeddings([q, p], labels),
               {"q": t["q"], "p": t["p"]}, out)
    with_grads("mnrl_hard", lambda q, p, n: mnrl.compute_loss_from_embeddings([q, p, n], labels),
               {"q": t["q"], "p": t["p"], "n": t["n"]}, out)
    b = t["q"].size(0)
    with_grads("mnrl_gathered",
               lambda q, c: mnrl.compute_loss_from_embeddings([q, torch.roll(c, -rank * b, 0)], labels),
               {"q": t["q"], "c": t["c"]}, out)
    with_grads("seeds", lambda q, p: seeds_pairwise_sigmoid_loss(q, p, temperature), {"q": t["q"], "p": t["p"]}, out)
    save_file({k: v.contiguous() for k, v in out.items()}, dst)


if __name__ == "__main__":
    main()
