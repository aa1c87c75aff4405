// loss.guide: the frozen guide encoder of guided negatives (sentence-transformers'
// GISTEmbedLoss and CachedGISTEmbedLoss).
//
// A guide is any model folder embed-train reads (the starting model is the common
// choice), loaded as model.init is (model/model_folder.h) onto the model's device, in
// eval mode (no dropout), and never trained: it is no part of the model under training,
// so it is in no optimizer, checkpoint or gradient all-reduce. Each micro-batch, before
// the model's forward, it embeds the batch's queries, positives and hard negatives
// without autograd — `chunk` sequences a forward under GradCache, as the model's first
// pass does — and leaves the embeddings in the batch's CandidateLabels, where the loss
// gathers them across ranks as it gathers the candidates and masks what the guide rates
// as close as the positive (model/loss.h false_negative_mask).
//
// Tokens: a guide whose folder is the model's own tokenizer's (model.init, or the same
// folder, with the same max length) reads the batch's tokens; any other reads the same
// texts tokenized by its own tokenizer to its own max length, kept beside the model's
// (PairDataset::guide_tokens, filled at load: guide_token_store below).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/pairs.h"
#include "model/model_folder.h"
#include "train/batches.h"
#include "train/precision.h"

namespace ddp_embed {

// Whether the guide reads the model's tokens: its folder is model.init's (the same
// directory), and the model's tokenizer and max length are that folder's (tokenizer.path
// the folder or unset, tokenizer.max_length the folder's). Conservative: when unsure,
// the guide gets tokens of its own (a load-time cost only).
bool guide_reads_model_tokens(const Config& cfg);

// The guide's token store for `sources` (the same lines, prompts and bad-line rules as
// the model's, so the same sequence numbers), tokenized by the guide folder's tokenizer
// to its max length; checked to hold exactly `model_tokens`' number of sequences.
// Throws std::runtime_error naming loss.guide.model for a folder without a tokenizer.
TokenStore guide_token_store(const Config& cfg, const std::vector<SourceInput>& sources,
                             const TokenStore& model_tokens, int threads);

class GuideEncoder {
 public:
  // Loads loss.guide.model onto `device`, frozen. Throws std::runtime_error
  // "loss.guide.model: DIR is not a model folder embed-train reads: ..." for a folder
  // that is none (missing, without config.json, an architecture not read).
  GuideEncoder(const GuideConfig& guide, const c10::Device& device, Precision precision);

  // Fills batch.labels.guide_queries [n, G] and guide_candidates [n + k, G] (fp32, no
  // gradient) from the guide's tokens when the batch has them (PairBatch::guide_*), else
  // from the model's; `chunk` > 0 embeds that many sequences a forward. Returns the
  // milliseconds it took (the device synchronized, so the number is the guide's own).
  double embed_into(PairBatch& batch, int64_t chunk);

  // The guide's parameters and buffers, in bytes, and the start-up line that says them.
  int64_t parameter_bytes() const;
  std::string describe() const;

 private:
  at::Tensor embed(const EncoderInput& input, int64_t chunk);

  std::string dir_;
  LoadedModel loaded_;
  c10::Device device_;
  Precision precision_;
};

}  // namespace ddp_embed
