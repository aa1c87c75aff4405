// loss.*: the contrastive loss and the terms beside it (docs/config.md; model/loss.h
// computes them). The types only; config/config.h reads and validates them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/choices.h"

namespace ddp_embed {

// loss.distill: KL(teacher || student) over each query's scored candidates (the pairs'
// teacher scores), FlagEmbedding's kl_div; weight 0 = off.
struct DistillConfig {
  double weight = 0;
  double temperature = 1;
};

// loss.margin_mse: sentence-transformers' MarginMSELoss on the teacher's margins, beside
// the contrastive term; weight 0 = off (loss.type "margin_mse" is the same term alone).
struct MarginMseConfig {
  double weight = 0;
};

// loss.guide: sentence-transformers' GISTEmbedLoss. A frozen guide encoder embeds each
// batch without gradients; a negative the guide rates as close to the query as the query's
// positive (less the margin) is masked (model/loss.h false_negative_mask, train/guide.h).
// model unset: no guide.
struct GuideConfig {
  std::optional<std::string> model;  // a model folder embed-train reads (model.init's kind)
  GuideMargin margin_strategy = GuideMargin::Absolute;
  double margin = 0;
};

// loss.cross_encoder: a reranker's loss (model.kind "cross_encoder"; model/rerank_loss.h),
// each as its sentence-transformers cross_encoder.losses class computes it. Each query's
// candidates are scored together: its positive first, then its hard negatives (and, for
// mnrl, other queries' candidates of the global batch).
struct CrossEncoderLossConfig {
  RerankLoss type = RerankLoss::BinaryCrossEntropy;
  // The loss's activation_fn on the logits; none = the loss's default (sigmoid for mnrl,
  // identity for the others).
  std::optional<ScoreActivation> activation;
  double pos_weight = 1;        // binary_cross_entropy: BCEWithLogitsLoss's pos_weight (1: none)
  double scale = 10;            // mnrl: the activated scores times this before the softmax
  int in_batch_negatives = 4;   // mnrl: other candidates of the batch drawn per query; -1: all
  LambdaWeighting weighting = LambdaWeighting::NdcgLoss2pp;  // lambda: weighting_scheme
  int k = 0;                    // lambda: only the top k of each ranking count; 0: all
  double sigma = 1;             // lambda
  double eps = 1e-10;           // lambda
  double mu = 10;               // lambda, ndcg_loss2pp: the NDCG-Loss2 weight's factor
  LambdaLog reduction_log = LambdaLog::Binary;  // lambda
};

// loss.sparse: SpladeLoss's FLOPS regularizers beside a sparse encoder's loss (model.kind
// "sparse": loss.type "splade", "margin_mse", or "none" with loss.distill): weight × sum
// over the vocabulary of (the batch's mean weight)², the documents' (positives and hard
// negatives) and the queries' apart. Each
// weight rises from 0 over the first warmup_ratio of the run's steps, as
// sentence-transformers' SpladeRegularizerWeightSchedulerCallback raises it (0: the full
// weight from the first step). A threshold > 0 leaves out of the mean (as zeros) the
// texts with that many active entries or fewer (FlopsLoss's threshold); 0: none.
struct SparseLossConfig {
  double document_regularizer_weight = 3e-5;  // sentence-transformers' trainer's default
  double query_regularizer_weight = 5e-5;     // 0: no query term
  double warmup_ratio = 1.0 / 3.0;
  RegularizerSchedule schedule = RegularizerSchedule::Quadratic;
  int64_t document_regularizer_threshold = 0;
  int64_t query_regularizer_threshold = 0;
};

struct LossConfig {
  LossType type = LossType::PairwiseSigmoid;  // None: distillation alone; MarginMse: MarginMSE alone
  double temperature = 0.05;
  bool cross_rank_negatives = false;
  // Matryoshka: the loss summed over the embedding cut to each size (descending);
  // empty = the whole embedding only. Weights: one per size, 1 each by default.
  std::vector<int64_t> matryoshka_dims;
  std::vector<double> matryoshka_weights;
  DistillConfig distill;
  MarginMseConfig margin_mse;
  // infonce only (sentence-transformers 6's MultipleNegativesRankingLoss): the score
  // blocks in the softmax (query_to_doc first and always), one softmax or one per
  // direction, and hardness weighting (strength >= 0, added after 1/temperature).
  std::vector<LossDirection> directions = {LossDirection::QueryToDoc};
  PartitionMode partition_mode = PartitionMode::Joint;
  HardnessMode hardness_mode = HardnessMode::None;
  double hardness_strength = 0;
  GuideConfig guide;
  CrossEncoderLossConfig cross_encoder;  // model.kind "cross_encoder" only
  SparseLossConfig sparse;               // model.kind "sparse" only
  // Not a key: lib/config sets it from model.kind "sparse". A sparse encoder's vectors are
  // compared by dot product in every term (SparseEncoder's similarity: the contrastive
  // term, distillation, MarginMSE), and loss.sparse's FLOPS terms are added (SpladeLoss
  // around any of them).
  bool sparse_encoder = false;
};

// loss.sparse's weights at the start of step `step` (1, 2, ...) of `total_steps`: scaled
// by (done / warm-up)² (or done / warm-up, linear) while the steps done, step - 1, are
// fewer than int(total_steps × warmup_ratio) (at least 1), as sentence-transformers'
// callback sets them at each step's beginning. The rest of `loss` as it is.
LossConfig loss_at_step(const LossConfig& loss, int64_t step, int64_t total_steps);

// Whether loss.type's contrastive term is infonce's softmax over candidates: "infonce" on
// cosines, "splade" on dot products of sparse vectors (directions, partition_mode and
// hardness apply to both).
inline bool uses_infonce(const LossConfig& loss) {
  return loss.type == LossType::Infonce || loss.type == LossType::Splade;
}

// The weight of the MarginMSE term: 1 for loss.type "margin_mse", else loss.margin_mse.weight.
double margin_mse_weight(const LossConfig& loss);
// The key that makes the loss read the pairs' teacher scores ("loss.distill.weight",
// "loss.type \"margin_mse\"", "loss.margin_mse.weight"), or "" when none does.
std::string teacher_scores_key(const LossConfig& loss);

}  // namespace ddp_embed
