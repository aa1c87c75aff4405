// The pieces rerank_loss (rerank_loss.cpp) shares with LambdaLoss's own file
// (rerank_loss_lambda.cpp): for lib/model/rerank_loss*.cpp only.
#pragma once

#include <ATen/ATen.h>

#include "config/loss_config.h"

namespace ddp_embed::rerank_parts {

// The logits as the loss reads them: in the loss dtype (fp32, fp64 for fp64 logits), with
// the activation (rerank_activation) applied.
at::Tensor activated_scores(const at::Tensor& logits, const CrossEncoderLossConfig& config);

// LambdaLoss summed over its pairs (not divided): `scores` the activated logits [n, G] in
// the loss dtype, `valid` bool [n, G], `labels` [n, G] in the loss dtype (any value where
// not valid).
at::Tensor lambda_sum(const at::Tensor& scores, const at::Tensor& valid, const at::Tensor& labels,
                      const CrossEncoderLossConfig& config);

}  // namespace ddp_embed::rerank_parts
