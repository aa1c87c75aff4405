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
};

// The weight of the MarginMSE term: 1 for loss.type "margin_mse", else loss.margin_mse.weight.
double margin_mse_weight(const LossConfig& loss);
// The key that makes the loss read the pairs' teacher scores ("loss.distill.weight",
// "loss.type \"margin_mse\"", "loss.margin_mse.weight"), or "" when none does.
std::string teacher_scores_key(const LossConfig& loss);

}  // namespace ddp_embed
