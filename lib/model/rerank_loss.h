// A reranker's losses (loss.cross_encoder, model.kind "cross_encoder"), each the loss of
// sentence-transformers' class of the same name in cross_encoder.losses, computed on the
// logits the cross-encoder gave each (query, candidate) pair of a micro-batch.
//
// The pairs arrive arranged by query (RerankGroups): row i holds query i's candidates, its
// positive (or its one labeled document) in column 0, then its hard negatives (and, for
// mnrl, the other candidates of the batch drawn for it), `valid` false past its last. Every
// loss reads the same arrangement:
//
//   binary_cross_entropy  BinaryCrossEntropyLoss: BCE-with-logits of each valid pair against
//                         its label (0..1), pos_weight on the positive term; mean over pairs
//   cross_entropy         CrossEntropyLoss with each row's candidates as the classes and the
//                         positive (column 0) the class: mean over queries
//   mnrl                  MultipleNegativesRankingLoss: activation (sigmoid), × scale (0: no
//                         scaling, as its class), softmax cross-entropy with column 0 the
//                         target; mean over queries
//   lambda                LambdaLoss: pairwise lambda terms weighted by the weighting scheme,
//                         labels the relevance grades; mean over the pairs it counts (both
//                         candidates valid, the first graded higher, or any two for
//                         ndcg_loss1; with k, one of the two in the top k by the logits)
//   listnet               ListNetLoss: cross-entropy between softmax(labels) and the logits
//                         over each row's valid candidates; mean over queries
//   margin_mse            MarginMSELoss: MSE of (positive − each negative) logits against the
//                         teacher's (labels[:, 0] − labels[:, j]); mean over the margins
//
// Across ranks: each rank holds its own queries. So that W ranks train what one process
// would on the same global batch, a loss is returned as its sum over this rank's units
// (pairs, queries or margins: rerank_loss_units; lambda's pairs: rerank_lambda_units)
// divided by `divisor`, the caller passing the units of every rank / W (this rank's own
// count: the library's value on this batch).
//
// A classifier (model.num_labels C > 1) trains on one loss, sentence-transformers'
// CrossEntropyLoss as its class is made for: labeled pairs {"query", "doc", "label": class},
// each pair's C logits against its class (an integer from 0 to C − 1), softmax
// cross-entropy, mean over pairs: rerank_class_loss.
//
// rerank_loss never makes the host wait for the device (no value read back, no output
// sized by the data). The checks that read labels are apart: a training run checks its
// data's labels pair by pair before step 1 (train/rerank_batches.h check_rerank_data);
// check_rerank_labels checks groups already made, on the CPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "config/loss_config.h"
#include "model/model_error.h"

namespace ddp_embed {

struct RerankGroups {
  at::Tensor logits;  // float [n, G]: each candidate's logit (the head's one output)
  at::Tensor valid;   // bool [n, G]: true for a real candidate; column 0 always
  at::Tensor labels;  // float [n, G]: labels, grades or teacher scores (what the loss reads);
                      //   undefined for cross_entropy and mnrl (the positive is column 0)
};

// The activation the loss applies to the logits: loss.cross_encoder.activation, else the
// loss's default (sigmoid for mnrl, identity for the others).
ScoreActivation rerank_activation(const CrossEncoderLossConfig& config);
// `activation` applied to the logits (what the losses and CrossEncoder.predict apply).
at::Tensor activated(const at::Tensor& logits, ScoreActivation activation);

// The units the loss is a mean over, from each query's number of valid candidates
// (`candidates`, column 0 included): the pairs for binary_cross_entropy, the margins
// (candidates − 1 a query) for margin_mse, the queries for cross_entropy, mnrl and
// listnet. Lambda's units depend on the labels (rerank_lambda_units): ModelError.
int64_t rerank_loss_units(RerankLoss type, const std::vector<int64_t>& candidates);

// LambdaLoss's units on `groups`: the (i, j) pairs its mean counts (see above), an int64
// scalar on the device of `valid`, without a host wait. With loss.cross_encoder.k > 0
// below the row width the pairs depend on the logits' order: groups.logits is read then
// (otherwise it may be undefined). LambdaLoss divides by max(pairs, 1): so does the caller.
at::Tensor rerank_lambda_units(const RerankGroups& groups, const CrossEncoderLossConfig& config);

// The rows' losses summed over this rank's units (rerank_loss without the division): fp32
// (fp64 for fp64 logits), with gradient to the logits; inputs checked as rerank_loss does.
at::Tensor rerank_loss_sum(const RerankGroups& groups, const CrossEncoderLossConfig& config);

// The loss of `groups` (see above): rerank_loss_sum / divisor; fp32 (fp64 for fp64
// logits), with gradient to the logits, and 0 gradient past each row's last candidate.
// Throws ModelError for shapes or dtypes that do not fit (logits floating [n, G], valid
// bool [n, G], labels [n, G] where the loss reads them), a divisor <= 0. It reads no
// values: bad labels give a wrong loss, not an error, unless check_rerank_labels ran.
at::Tensor rerank_loss(const RerankGroups& groups, const CrossEncoderLossConfig& config, double divisor);

// A classifier's loss (see above): the softmax cross-entropy of each row of `logits`
// (floating [n, C], C > 1; the activation applied first) against its class (`classes`
// [n], any dtype, integral values 0..C − 1), summed over the rows and divided by
// `divisor` (every rank's pairs / the world size). fp32 (fp64 for fp64 logits), with
// gradient to the logits. ModelError for shapes that do not fit or a divisor <= 0; reads
// no values (a class out of range is the caller's to refuse: check_rerank_data).
at::Tensor rerank_class_loss(const at::Tensor& logits, const at::Tensor& classes, const CrossEncoderLossConfig& config,
                             double divisor);

// The label rules, stated once (check_rerank_labels below and the loader's check before
// step 1, train/rerank_batches.h, both ask here): what `type` takes as a candidate's label
// ("a finite number", "a label from 0 to 1", ...) when `label` is not that, "" when it is.
// A classifier (num_labels > 1) takes a whole number from 0 to num_labels - 1.
std::string rerank_label_refusal(RerankLoss type, double label, int num_labels = 1);

// Throws ModelError, naming the query row and candidate column and what the loss takes,
// for `valid` without column 0, a row without any candidate besides its positive where
// the loss needs one (every loss but binary_cross_entropy), labels missing where the loss
// reads them, non-finite labels on a valid candidate, binary_cross_entropy's labels
// outside [0, 1] and lambda's negative grades. Reads the values (a host wait on a GPU):
// meant for the CPU tensors of a batch being loaded. groups.logits is not read.
void check_rerank_labels(const RerankGroups& groups, RerankLoss type);

}  // namespace ddp_embed
