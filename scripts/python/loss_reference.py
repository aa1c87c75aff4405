#!/usr/bin/env python3
"""The peers' losses on given embeddings, with their gradients: the independent truth for
ddp-embed's losses (tests/torch/test_loss_reference.cpp).

Reads IN.safetensors (float64 embeddings; the scalars "rank", "temperature", ...) and
writes OUT.safetensors with, for each case it can compute from the inputs given, the loss
("<case>.loss") and its gradients with respect to the inputs ("<case>.grad_<input>").

sentence-transformers' own classes, on fixed embeddings:
  mnrl            MultipleNegativesRankingLoss (its compute_loss_from_embeddings) on
                  [q, p], scale = 1 / temperature
  mnrl_hard       the same on [q, p, n]: the hard negatives join every query's candidates
  mnrl_gathered   what MNRL computes on rank `rank` with gather_across_devices=True:
                  local queries against all ranks' positives c, the positive at
                  rank * B + i. Without a process group here, the candidates are rotated
                  so that rank's block comes first; the softmax does not depend on the
                  candidates' order.
  matryoshka, matryoshka_hard, matryoshka_gathered
                  MatryoshkaLoss(model, MultipleNegativesRankingLoss(model), dims,
                  weights) on [q, p], on [q, p, n], and on q against every rank's
                  [positives; hard negatives] blocks ch (rotated as above). The model is
                  FixedEmbeddings: its "features" are the embeddings themselves, so the
                  class truncates, re-normalizes and sums exactly as in training.
  seeds           the seeds' pairwise sigmoid loss (peer_train.seeds_pairwise_sigmoid_loss)

FlagEmbedding's knowledge distillation (not installed: its formula is written out below,
function by function, from AbsEmbedderModel and BiEncoderOnlyEmbedderModel):
  flag            its in-batch loss with kd_loss_type "kl_div": kl_div + cross-entropy
  flag_kd         kl_div alone, teacher scores divided by teacher_temperature first
  ragged_kd       the same formula query by query, each over its own number of candidates

sentence-transformers' GISTEmbedLoss (its class; but for the last two, contrast_anchors=False,
contrast_positives=False: the query-to-document loss), on fixed embeddings and fixed guide
embeddings (gq, gp, gn; its module's embed_columns is patched to hand them over):
  gist_<strategy>_<margin>[_hard]
                  strategy absolute | relative, margin "m0" (0) or "m" (guide_margin),
                  on [q, p] or on [q, p, n]
  gist_<strategy>_contrast
                  its default contrast_anchors and contrast_positives, margin guide_margin
  gist_default    GISTEmbedLoss(model, guide) with every default (temperature 0.01)
  gist_gathered   gather_across_devices=True on rank `rank`: q against every rank's
                  positives c, guided by gc (all_gather_with_grad and get_rank patched
                  in its module to hand over the other ranks' rows)

The same-text mask (no peer has it; written from its definition):
  masked_infonce, masked_sigmoid
                  every rank's queries dq against every rank's candidates dc (rows dpos
                  the positives, hashes dhash): the loss one process would compute on the
                  whole global batch, a candidate with the text of a query's positive
                  left out of that query's negatives
  recipe          on one rank: sum over Matryoshka sizes of weight * (masked infonce +
                  distill_weight * kl_div), with hashes hash1 and teacher scores

sentence-transformers 6's MultipleNegativesRankingLoss with directions, partitions and
hardness, and its MarginMSELoss (inputs xq, xp, xn1, xn2: every query's second hard
negative in xn2, as its n-tuple columns hold them):
  dir_<set>, dir_<set>_hard
                  the directions of DIRECTION_SETS on [q, p] and on [q, p, n1, n2]
  hardness_<mode> the default direction with hardness_mode <mode>, strength 5, on
                  [q, p, n1, n2]
  xrank_<case>    CROSS_RANK's cases with gather_across_devices=True on every rank of
                  a world of xranks (global inputs gq, gp, gn1, gn2: rank r's rows r*B..),
                  the ranks' losses averaged as data parallelism averages them. Without
                  a process group, the module's all_gather_with_grad and get_rank are
                  replaced by what they return on rank r: the global rows with rank r's
                  own (differentiable) rows in place
  margin1, margin2
                  MarginMSELoss on [q, p, n1] with teacher scores mteacher1 [B, 2], and
                  on [q, p, n1, n2] with mteacher2 [B, 3], the embeddings normalized first
                  (our models end in Normalize); margin2_matryoshka: MatryoshkaLoss around
                  it (dims, weights)
"""
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_train import seeds_pairwise_sigmoid_loss  # noqa: E402
import sentence_transformers.sentence_transformer.losses.multiple_negatives_ranking as mnrl_module  # noqa: E402
from sentence_transformers.sentence_transformer.losses import (  # noqa: E402
    GISTEmbedLoss, MarginMSELoss, MatryoshkaLoss, MultipleNegativesRankingLoss)
from sentence_transformers.sentence_transformer.losses import gist_embed  # noqa: E402

Q2D, D2Q, Q2Q, D2D = "query_to_doc", "doc_to_query", "query_to_query", "doc_to_doc"
DIRECTION_SETS = {
    "q2d": ((Q2D,), "joint"),
    "sym_per": ((Q2D, D2Q), "per_direction"),
    "sym_joint": ((Q2D, D2Q), "joint"),
    "gte": ((Q2D, Q2Q, D2Q, D2D), "joint"),
}
HARDNESS_STRENGTH = 5.0
# name: (directions, partition, hardness mode or None)
CROSS_RANK = {
    "gte_hard": ((Q2D, Q2Q, D2Q, D2D), "joint", None),
    "sym_per_all_negatives": ((Q2D, D2Q), "per_direction", "all_negatives"),
    "q2d_in_batch_negatives": ((Q2D,), "joint", "in_batch_negatives"),
}


class NoModel(torch.nn.Module):
    """MNRL keeps a reference to the model; on given embeddings it never calls it."""


class FixedEmbeddings(torch.nn.Module):
    """A stand-in for SentenceTransformer whose features are the sentence embeddings:
    MatryoshkaLoss patches its forward to cut and re-normalize them, MNRL calls it."""

    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, features):
        return {"sentence_embedding": features["embedding"]}

    def get_embedding_dimension(self):
        return self.dim


def with_grads(name, fn, inputs, out):
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in inputs.items()}
    loss = fn(**leaves)
    loss.backward()
    out[f"{name}.loss"] = loss.detach().reshape(1)
    for k, v in leaves.items():
        out[f"{name}.grad_{k}"] = v.grad if v.grad is not None else torch.zeros_like(v)


# ---- sentence-transformers' GISTEmbedLoss -------------------------------------------------

class TokenizedStub(torch.nn.Module):
    """GISTEmbedLoss asks its model and guide for a transformers tokenizer (to decide
    whether the guide must retokenize); one tiny in-memory tokenizer serves both, so it
    does not. The embeddings themselves come from the features (embed_columns below)."""

    def __init__(self, tokenizer):
        super().__init__()
        self.tokenizer = tokenizer
        self.max_seq_length = 64


def gist_losses(t, temperature, out):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")))
    model, guide = TokenizedStub(tokenizer), TokenizedStub(tokenizer)
    # Each feature dict holds a column's embedding and its guide embedding.
    gist_embed.embed_columns = lambda m, features: [f["guide" if m is guide else "embedding"] for f in features]
    margin = float(t["guide_margin"])

    def gist(strategy, m, gather=False, contrast=False):
        return GISTEmbedLoss(model, guide, temperature=temperature, margin_strategy=strategy, margin=m,
                             contrast_anchors=contrast, contrast_positives=contrast, gather_across_devices=gather)

    for strategy in ("absolute", "relative"):
        for tag, m in (("m0", 0.0), ("m", margin)):
            loss = gist(strategy, m)
            name = f"gist_{strategy}_{tag}"
            with_grads(name, lambda q, p: loss([{"embedding": q, "guide": t["guide_q"]}, {"embedding": p, "guide": t["guide_p"]}],
                                               None), {"q": t["q"], "p": t["p"]}, out)
            with_grads(name + "_hard",
                       lambda q, p, n: loss([{"embedding": q, "guide": t["guide_q"]}, {"embedding": p, "guide": t["guide_p"]},
                                             {"embedding": n, "guide": t["guide_n"]}], None),
                       {"q": t["q"], "p": t["p"], "n": t["n"]}, out)

    # GISTEmbedLoss's default, anchors and positives contrasted too: on pairs, our
    # query_to_doc + query_to_query + doc_to_doc, joint.
    for strategy in ("absolute", "relative"):
        loss = gist(strategy, margin, contrast=True)
        with_grads(f"gist_{strategy}_contrast",
                   lambda q, p: loss([{"embedding": q, "guide": t["guide_q"]}, {"embedding": p, "guide": t["guide_p"]}],
                                     None), {"q": t["q"], "p": t["p"]}, out)

    # GISTEmbedLoss(model, guide) as it comes (temperature 0.01, margin 0 absolute, anchors
    # and positives contrasted): the config docs/recipes.md gives for it.
    as_it_comes = GISTEmbedLoss(model, guide)
    with_grads("gist_default",
               lambda q, p: as_it_comes([{"embedding": q, "guide": t["guide_q"]}, {"embedding": p, "guide": t["guide_p"]}],
                                        None), {"q": t["q"], "p": t["p"]}, out)

    rank, b = int(t["rank"]), t["q"].size(0)

    def gathered(q, c):
        # The gather hands back every rank's rows: c for the model's positives, guide_c for the guide's.
        everything = [c, t["guide_c"]]
        gist_embed.all_gather_with_grad = lambda local: everything.pop(0)
        gist_embed.get_rank = lambda: rank
        local = c[rank * b:(rank + 1) * b]
        return gist("absolute", margin, gather=True)(
            [{"embedding": q, "guide": t["guide_q"]}, {"embedding": local, "guide": t["guide_c"][rank * b:(rank + 1) * b]}], None)

    with_grads("gist_gathered", gathered, {"q": t["q"], "c": t["c"]}, out)


# ---- FlagEmbedding's distillation -------------------------------------------------------

def flag_get_local_score(q_reps, p_reps, all_scores):
    """AbsEmbedderModel.get_local_score: each query's scores of its own group (its
    positive, then its negatives), out of the in-batch score matrix."""
    group_size = p_reps.size(0) // q_reps.size(0)
    indices = torch.arange(0, q_reps.size(0)) * group_size
    specific_scores = [all_scores[torch.arange(q_reps.size(0)), indices + i] for i in range(group_size)]
    return torch.stack(specific_scores, dim=1).view(q_reps.size(0), -1)


def flag_kl_div(teacher_targets, student_scores):
    """AbsEmbedderModel.distill_loss("kl_div", ...): minus the mean over queries of
    sum_j teacher_j * log_softmax(student)_j — a cross-entropy, KL plus the teacher's entropy."""
    return -torch.mean(torch.sum(torch.log_softmax(student_scores, dim=-1) * teacher_targets, dim=-1))


def flag_in_batch_losses(q, p, n, teacher_scores, temperature, teacher_temperature):
    """AbsEmbedderModel._compute_in_batch_neg_loss with kd_loss_type "kl_div" for
    BiEncoderOnlyEmbedderModel(normalize_embeddings=True): returns (kl_div, cross-entropy).

    The passages are grouped per query, [p_i, n_i1 .. n_iK] (n holds query i's K
    negatives at rows i*K ..); compute_score = normalized q @ normalized passages.T /
    temperature; teacher_targets = softmax(teacher_scores) as AbsEmbedderModel.forward
    computes them, the scores divided by teacher_temperature first (FlagEmbedding has no
    such temperature: it is ours, and 1 gives FlagEmbedding's exactly)."""
    b = q.size(0)
    k = n.size(0) // b
    passages = torch.cat([p.unsqueeze(1), n.view(b, k, -1)], 1).reshape(b * (1 + k), -1)
    q_reps, p_reps = F.normalize(q, dim=-1), F.normalize(passages, dim=-1)
    scores = torch.matmul(q_reps, p_reps.transpose(0, 1)) / temperature
    teacher_targets = F.softmax(teacher_scores.view(b, -1).detach() / teacher_temperature, dim=-1)
    student_scores = flag_get_local_score(q_reps, p_reps, scores)
    kd = flag_kl_div(teacher_targets, student_scores)
    targets = torch.arange(b) * (1 + k)
    return kd, F.cross_entropy(scores, targets)


def ragged_kd(q, cands, groups, teacher_scores, temperature, teacher_temperature):
    """flag_kl_div query by query, each over its own candidates (groups[i] >= 0)."""
    losses = []
    for i in range(q.size(0)):
        rows = groups[i][groups[i] >= 0]
        student = F.normalize(cands[rows], dim=-1) @ F.normalize(q[i], dim=-1) / temperature
        teacher = F.softmax(teacher_scores[i][: rows.numel()] / teacher_temperature, dim=-1)
        losses.append(-(teacher * torch.log_softmax(student, dim=-1)).sum())
    return torch.stack(losses).mean()


# ---- the same-text mask -----------------------------------------------------------------

def same_text(hashes, pos_rows):
    """[Q, M]: candidate j has the text of query i's positive and is not that positive."""
    mask = hashes.unsqueeze(0) == hashes[pos_rows].unsqueeze(1)
    mask[torch.arange(pos_rows.numel()), pos_rows] = False
    return mask


def masked_infonce(q, c, pos_rows, hashes, temperature):
    s = F.normalize(q, dim=-1) @ F.normalize(c, dim=-1).T / temperature
    return F.cross_entropy(s.masked_fill(same_text(hashes, pos_rows), float("-inf")), pos_rows)


def masked_sigmoid(q, c, pos_rows, hashes, temperature):
    """The mean of softplus(s_ij - s_iP(i)) over the pairs (i, j) that are negatives:
    j != P(i) and not of P(i)'s text."""
    s = F.normalize(q, dim=-1) @ F.normalize(c, dim=-1).T / temperature
    rows = torch.arange(pos_rows.numel())
    negative = ~same_text(hashes, pos_rows)
    negative[rows, pos_rows] = False
    return F.softplus(s - s[rows, pos_rows].unsqueeze(1))[negative].mean()


# ---- MNRL's directions and hardness, MarginMSE ---------------------------------------------

def mnrl6(temperature, directions, partition, hardness=None, gather=False):
    return MultipleNegativesRankingLoss(NoModel(), scale=1.0 / temperature, directions=directions,
                                        partition_mode=partition, hardness_mode=hardness,
                                        hardness_strength=HARDNESS_STRENGTH if hardness else 0.0,
                                        gather_across_devices=gather)


def on_rank(loss, rank, ranks, globals_):
    """loss.compute_loss_from_embeddings as rank `rank` of `ranks` runs it with
    gather_across_devices: its columns are its rows of the global tensors, and the gather
    gives back the global rows with those very (differentiable) rows in place."""
    b = globals_[0].size(0) // ranks
    local = [g[rank * b:(rank + 1) * b] for g in globals_]
    gathered = {id(x): torch.cat([g[:rank * b], x, g[(rank + 1) * b:]]) for x, g in zip(local, globals_)}
    saved = mnrl_module.all_gather_with_grad, mnrl_module.get_rank
    mnrl_module.all_gather_with_grad, mnrl_module.get_rank = (lambda x: gathered[id(x)]), (lambda: rank)
    try:
        return loss.compute_loss_from_embeddings(local, None)
    finally:
        mnrl_module.all_gather_with_grad, mnrl_module.get_rank = saved


def directions_cases(t, temperature, out):
    pairs = {"q": t["xq"], "p": t["xp"]}
    hard = dict(pairs, n1=t["xn1"], n2=t["xn2"])
    for name, (directions, partition) in DIRECTION_SETS.items():
        loss = mnrl6(temperature, directions, partition)
        with_grads(f"dir_{name}", lambda q, p: loss.compute_loss_from_embeddings([q, p], None), pairs, out)
        with_grads(f"dir_{name}_hard", lambda q, p, n1, n2: loss.compute_loss_from_embeddings([q, p, n1, n2], None),
                   hard, out)
    for mode in ("in_batch_negatives", "hard_negatives", "all_negatives"):
        loss = mnrl6(temperature, (Q2D,), "joint", mode)
        with_grads(f"hardness_{mode}", lambda q, p, n1, n2: loss.compute_loss_from_embeddings([q, p, n1, n2], None),
                   hard, out)
    ranks = int(t["xranks"])
    for name, (directions, partition, mode) in CROSS_RANK.items():
        loss = mnrl6(temperature, directions, partition, mode, gather=True)
        with_grads(f"xrank_{name}",
                   lambda gq, gp, gn1, gn2: sum(on_rank(loss, r, ranks, [gq, gp, gn1, gn2]) for r in range(ranks)) / ranks,
                   {"gq": t["gq"], "gp": t["gp"], "gn1": t["gn1"], "gn2": t["gn2"]}, out)

    margin = MarginMSELoss(NoModel())
    unit = lambda *xs: [F.normalize(x, dim=-1) for x in xs]  # noqa: E731
    with_grads("margin1", lambda q, p, n1: margin.compute_loss_from_embeddings(unit(q, p, n1), t["mteacher1"]),
               {"q": t["xq"], "p": t["xp"], "n1": t["xn1"]}, out)
    with_grads("margin2", lambda q, p, n1, n2: margin.compute_loss_from_embeddings(unit(q, p, n1, n2), t["mteacher2"]),
               hard, out)
    model = FixedEmbeddings(t["xq"].size(1))
    matryoshka = MatryoshkaLoss(model, MarginMSELoss(model), t["dims"].tolist(), t["weights"].tolist())
    with_grads("margin2_matryoshka",
               lambda q, p, n1, n2: matryoshka([{"embedding": x} for x in (q, p, n1, n2)], t["mteacher2"]),
               hard, out)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    t = load_file(src)
    temperature = float(t["temperature"])
    out = {}
    labels = None  # MNRL ignores the labels

    if "q" in t:
        rank = int(t["rank"])
        b = t["q"].size(0)
        mnrl = MultipleNegativesRankingLoss(NoModel(), scale=1.0 / temperature)
        with_grads("mnrl", lambda q, p: mnrl.compute_loss_from_embeddings([q, p], labels),
                   {"q": t["q"], "p": t["p"]}, out)
        with_grads("mnrl_hard", lambda q, p, n: mnrl.compute_loss_from_embeddings([q, p, n], labels),
                   {"q": t["q"], "p": t["p"], "n": t["n"]}, out)
        with_grads("mnrl_gathered",
                   lambda q, c: mnrl.compute_loss_from_embeddings([q, torch.roll(c, -rank * b, 0)], labels),
                   {"q": t["q"], "c": t["c"]}, out)
        with_grads("seeds", lambda q, p: seeds_pairwise_sigmoid_loss(q, p, temperature),
                   {"q": t["q"], "p": t["p"]}, out)

    if "dims" in t:
        dims, weights = t["dims"].tolist(), t["weights"].tolist()
        model = FixedEmbeddings(t["q"].size(1))
        matryoshka = MatryoshkaLoss(model, MultipleNegativesRankingLoss(model, scale=1.0 / temperature), dims, weights)
        features = lambda *xs: [{"embedding": x} for x in xs]  # noqa: E731
        with_grads("matryoshka", lambda q, p: matryoshka(features(q, p), labels), {"q": t["q"], "p": t["p"]}, out)
        with_grads("matryoshka_hard", lambda q, p, n: matryoshka(features(q, p, n), labels),
                   {"q": t["q"], "p": t["p"], "n": t["n"]}, out)
        block = t["ch"].size(0) // int(t["ranks"])
        with_grads("matryoshka_gathered",
                   lambda q, ch: matryoshka(features(q, torch.roll(ch, -int(t["rank"]) * block, 0)), labels),
                   {"q": t["q"], "ch": t["ch"]}, out)

    if "teacher" in t:
        tt = float(t["teacher_temperature"])
        w = float(t["distill_weight"])

        def flag(q, p, n):
            kd, ce = flag_in_batch_losses(q, p, n, t["teacher"], temperature, 1.0)
            return kd + ce

        with_grads("flag", flag, {"q": t["q"], "p": t["p"], "n": t["n"]}, out)
        with_grads("flag_kd", lambda q, p, n: w * flag_in_batch_losses(q, p, n, t["teacher"], temperature, tt)[0],
                   {"q": t["q"], "p": t["p"], "n": t["n"]}, out)
        with_grads("ragged_kd",
                   lambda q, c: w * ragged_kd(q, c, t["rgroups"], t["rteacher"], temperature, tt),
                   {"q": t["q"], "c": t["rc"]}, out)

    if "guide_q" in t:
        gist_losses(t, temperature, out)

    if "dq" in t:
        for name, fn in (("masked_infonce", masked_infonce), ("masked_sigmoid", masked_sigmoid)):
            with_grads(name, lambda dq, dc: fn(dq, dc, t["dpos"], t["dhash"], temperature),
                       {"dq": t["dq"], "dc": t["dc"]}, out)

    if "hash1" in t:
        dims, weights = t["dims"].tolist(), t["weights"].tolist()
        w, tt = float(t["distill_weight"]), float(t["teacher_temperature"])
        b = t["q"].size(0)

        def recipe(q, p, n):
            total = 0.0
            for d, weight in zip(dims, weights):
                qd, pd, nd = q[:, :d], p[:, :d], n[:, :d]
                ce = masked_infonce(qd, torch.cat([pd, nd]), torch.arange(b), t["hash1"], temperature)
                kd, _ = flag_in_batch_losses(qd, pd, nd, t["teacher"], temperature, tt)
                total = total + weight * (ce + w * kd)
            return total

        with_grads("recipe", recipe, {"q": t["q"], "p": t["p"], "n": t["n"]}, out)

    if "xq" in t:
        directions_cases(t, temperature, out)

    save_file({k: v.contiguous() for k, v in out.items()}, dst)


if __name__ == "__main__":
    main()
