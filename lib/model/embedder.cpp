#include "model/embedder.h"

#include <tuple>
#include <vector>

#include <c10/util/StringUtil.h>

#include "model/loss.h"

namespace ddp_embed {
namespace {

void check_input(const EncoderInput& in, const char* what) {
  if (!in.ids.defined() || !in.mask.defined())
    throw ModelError(std::string("SentenceEmbedder::") + what + ": the ids or the mask is missing");
  if (in.ids.dim() != 2 || in.mask.sizes() != in.ids.sizes())
    throw ModelError(c10::str("SentenceEmbedder::", what, ": ids ", in.ids.sizes(), " and mask ", in.mask.sizes(),
                              " must be of one [n, L] shape"));
}

// Puts a module back into training mode when the scope ends, if it was in it.
class RestoreTraining {
 public:
  explicit RestoreTraining(torch::nn::Module& m) : module_(m), was_training_(m.is_training()) {}
  ~RestoreTraining() { module_.train(was_training_); }

 private:
  torch::nn::Module& module_;
  bool was_training_;
};

}  // namespace

namespace {

std::vector<DenseShape> one_projection(const EncoderConfig& config, int64_t projection_dim) {
  if (projection_dim < 0)
    throw ModelError("SentenceEmbedder: model.projection_dim must be >= 0 (0: no projection), not " +
                     std::to_string(projection_dim));
  if (projection_dim == 0) return {};
  return {DenseShape{config.hidden_size(), projection_dim, true}};
}

}  // namespace

SentenceEmbedderImpl::SentenceEmbedderImpl(const EncoderConfig& config, int64_t projection_dim, Pooling pooling)
    : SentenceEmbedderImpl(config, one_projection(config, projection_dim), pooling) {}

SentenceEmbedderImpl::SentenceEmbedderImpl(const EncoderConfig& config, const std::vector<DenseShape>& shapes,
                                           Pooling pooling)
    : pooling_(pooling) {
  register_encoder(config);
  // PyTorch's default Linear init, as sentence-transformers' Dense and the reference
  // recipe's head use. The first layer keeps the name a lone projection always had.
  int64_t width = config.hidden_size();
  for (size_t k = 0; k < shapes.size(); ++k) {
    const DenseShape& d = shapes[k];
    if (d.in_features != width || d.out_features <= 0)
      throw ModelError("SentenceEmbedder: Dense layer " + std::to_string(k + 1) + " is " +
                       std::to_string(d.in_features) + " -> " + std::to_string(d.out_features) +
                       " but takes " + std::to_string(width) + " values (the " +
                       (k == 0 ? "encoder's hidden size" : "layer before's out_features") + ")");
    const std::string name = k == 0 ? "projection" : "projection_" + std::to_string(k + 1);
    dense.push_back(register_module(
        name, torch::nn::Linear(torch::nn::LinearOptions(d.in_features, d.out_features).bias(d.bias))));
    width = d.out_features;
  }
}

SentenceEmbedderImpl::SentenceEmbedderImpl(const EncoderConfig& config, CrossEncoderShape shape)
    : pooling_(config.is_decoder() ? Pooling::LastToken : Pooling::Cls) {
  if (config.is_modernbert())
    throw ModelError("a ModernBERT cross-encoder is not implemented (ModernBertForSequenceClassification's head: "
                     "dense, activation, norm on classifier_pooling's token): model.kind must be bi_encoder");
  if (config.is_gemma3())
    throw ModelError("a Gemma 3 cross-encoder is not implemented (embed-train's Gemma 3 is an embedder's encoder)");
  register_encoder(config);
  head = register_module("head", RerankHead(config, shape.num_labels, config.is_decoder() ? 0.0 : config.bert.hidden_dropout));
}

SentenceEmbedderImpl::SentenceEmbedderImpl(const EncoderConfig& config, SparseShape shape)
    : pooling_(Pooling::Cls), sparse_(shape) {
  if (config.is_decoder() || config.is_mpnet() || config.is_modernbert() || config.is_gemma3())
    throw ModelError("a sparse encoder (model.kind \"sparse\") is implemented for BERT and XLM-RoBERTa: their "
                     "masked-language-model heads (BertForMaskedLM, XLMRobertaForMaskedLM)");
  if (shape.chunk_tokens < 1)
    throw ModelError("SentenceEmbedder: model.sparse.chunk_tokens must be >= 1, not " + std::to_string(shape.chunk_tokens));
  register_encoder(config);
  mlm = register_module("mlm", MlmHead(config, bert->embeddings->word_embeddings->weight));
}

void SentenceEmbedderImpl::register_encoder(const EncoderConfig& config) {
  if (config.is_decoder()) {
    qwen3 = register_module("qwen3", Qwen3Model(config.qwen3));
    encoder_ = qwen3.ptr();
  } else if (config.is_mpnet()) {
    mpnet = register_module("mpnet", MPNetModel(config.mpnet));
    encoder_ = mpnet.ptr();
  } else if (config.is_modernbert()) {
    modernbert = register_module("modernbert", ModernBertModel(config.modernbert));
    encoder_ = modernbert.ptr();
  } else if (config.is_gemma3()) {
    gemma3 = register_module("gemma3", Gemma3Model(config.gemma3));
    encoder_ = gemma3.ptr();
  } else {
    bert = register_module("bert", BertModel(config.bert));
    encoder_ = bert.ptr();
  }
}

int64_t SentenceEmbedderImpl::embedding_dim() const {
  if (mlm) return encoder_->encoder_config().vocab_size();
  return dense.empty() ? encoder_->encoder_config().hidden_size() : dense.back()->options.out_features();
}

at::Tensor SentenceEmbedderImpl::embed(const EncoderInput& input) {
  check_input(input, "embed");
  if (mlm) return embed_sparse(input);
  // cls and lasttoken pooling need the last layer for one token alone: forward_pooled skips the rest.
  at::Tensor e = encoder_->forward_pooled(input.ids, input.mask, pooling_);
  for (auto& layer : dense) e = layer(e);
  return e;
}

at::Tensor SentenceEmbedderImpl::embed_sparse(const EncoderInput& input) {
  const at::Tensor hidden = encoder_->forward(input.ids, input.mask);  // [n, L, H]
  // The real tokens in order, text after text (right padding: each text's first);
  // offsets on the CPU, as splade_pool takes them.
  const at::Tensor real = input.mask.ne(0);
  const at::Tensor lengths = real.sum(1).to(at::kCPU, at::kLong);
  const at::Tensor rows = real.reshape({-1}).nonzero().squeeze(1);
  const at::Tensor packed = hidden.reshape({-1, hidden.size(2)}).index_select(0, rows);
  const at::Tensor offsets = at::cat({at::zeros({1}, lengths.options()), lengths.cumsum(0)});
  return splade_pool(mlm->vocabulary_head(), packed, offsets, sparse_.reduce, sparse_.activation, sparse_.chunk_tokens);
}

PairLoss SentenceEmbedderImpl::forward(const EncoderInput& query, const EncoderInput& pos, const EncoderInput& neg,
                                       const LossConfig& loss, const CandidateExchange& exchange,
                                       const CandidateLabels& labels) {
  if (head) throw ModelError("SentenceEmbedder::forward: a cross-encoder trains through forward_rerank");
  check_input(query, "forward (queries)");
  check_input(pos, "forward (positives)");
  if (pos.ids.size(0) != query.ids.size(0))
    throw ModelError("SentenceEmbedder::forward: " + std::to_string(query.ids.size(0)) + " queries but " +
                     std::to_string(pos.ids.size(0)) + " positives (one positive a query)");
  std::vector<EncoderInput> parts = {query, pos};
  if (neg.defined()) {
    check_input(neg, "forward (hard negatives)");
    parts.push_back(neg);
  }

  // On a GPU, one encoder call for all the sequences when they have the same length:
  // fewer, larger kernels. Not on the CPU: measured on BERT-small (batch 32 × 64, one
  // thread), one call of 64 sequences costs as much as two of 32 with malloc tuned
  // (malloc_tuning.h) and 1.6× more without, the working set of each op being twice as big.
  std::vector<at::Tensor> embedded;
  bool one_call = !query.ids.device().is_cpu();
  for (const auto& p : parts) one_call = one_call && p.ids.size(1) == query.ids.size(1);
  if (one_call) {
    std::vector<at::Tensor> ids, masks;
    std::vector<int64_t> counts;
    for (const auto& p : parts) {
      ids.push_back(p.ids);
      masks.push_back(p.mask);
      counts.push_back(p.ids.size(0));
    }
    embedded = embed({at::cat(ids), at::cat(masks)}).split_with_sizes(counts);
  } else {
    for (const auto& p : parts) embedded.push_back(embed(p));
  }

  return loss_of_embeddings(embedded[0], embedded[1], neg.defined() ? embedded[2] : at::Tensor(), loss, exchange,
                            labels);
}

PairLoss SentenceEmbedderImpl::loss_of_embeddings(const at::Tensor& q, const at::Tensor& pos, const at::Tensor& neg,
                                                  const LossConfig& loss, const CandidateExchange& exchange,
                                                  const CandidateLabels& labels) {
  return pair_loss(q, pos, neg, labels, loss, exchange);
}

at::Tensor SentenceEmbedderImpl::score(const EncoderInput& pairs) {
  if (!head) throw ModelError("SentenceEmbedder::score: an embedder has no classification head (model.kind)");
  check_input(pairs, "score");
  if (pairs.types.defined() && pairs.types.sizes() != pairs.ids.sizes())
    throw ModelError(c10::str("SentenceEmbedder::score: token types ", pairs.types.sizes(), " and ids ",
                              pairs.ids.sizes(), " must be of one shape"));
  if (!qwen3) return head(encoder_->forward_pooled(pairs.ids, pairs.mask, Pooling::Cls, pairs.types));
  // Qwen3ForSequenceClassification reads the last token whose id is not pad_token_id. Its
  // attention is causal, so that token's state is the one of the sequence cut after it:
  // the last real token of a mask that ends there.
  const int64_t pad = qwen3->encoder_config().qwen3.pad_token_id;
  if (pad < 0) return head(encoder_->forward_pooled(pairs.ids, pairs.mask, Pooling::LastToken));
  const at::Tensor positions = at::arange(pairs.ids.size(1), pairs.ids.options());
  const at::Tensor counted = pairs.ids.ne(pad).logical_and(pairs.mask.ne(0)).to(at::kLong);
  const at::Tensor last = (positions.unsqueeze(0) * counted).argmax(1, /*keepdim=*/true);
  const at::Tensor mask = positions.unsqueeze(0).le(last).to(pairs.mask.scalar_type());
  return head(encoder_->forward_pooled(pairs.ids, mask, Pooling::LastToken));
}

at::Tensor SentenceEmbedderImpl::score_batch(const EncoderInput& pairs) {
  RestoreTraining restore(*this);
  eval();
  at::NoGradGuard no_grad;
  return score(pairs);
}

at::Tensor SentenceEmbedderImpl::forward_rerank(const EncoderInput& pairs, const at::Tensor& group_rows,
                                                const at::Tensor& labels, const CrossEncoderLossConfig& loss,
                                                double divisor, const CandidateExchange& exchange) {
  if (!head) throw ModelError("SentenceEmbedder::forward_rerank: a bi-encoder trains through forward");
  return rerank_loss_of_logits(score(pairs).squeeze(1), group_rows, labels, loss, divisor, exchange);
}

at::Tensor SentenceEmbedderImpl::rerank_loss_of_logits(const at::Tensor& logits, const at::Tensor& group_rows,
                                                       const at::Tensor& labels, const CrossEncoderLossConfig& loss,
                                                       double divisor, const CandidateExchange& exchange) {
  if (logits.dim() == 2 && group_rows.dim() == 2 && group_rows.size(1) == 1) {
    // A classifier: one labeled pair a row, its C logits against its class.
    if (loss.type != RerankLoss::CrossEntropy || !labels.defined() || labels.dim() != 2)
      throw ModelError("SentenceEmbedder::forward_rerank: a cross-encoder of several labels trains on "
                       "cross_entropy with each pair's class (labels [pairs, 1])");
    return rerank_class_loss(logits.index_select(0, group_rows.select(1, 0)), labels.select(1, 0), loss, divisor);
  }
  if (group_rows.dim() != 2 || logits.dim() != 1)
    throw ModelError(c10::str("SentenceEmbedder::forward_rerank: group_rows must be [queries, G] and the logits [pairs] ",
                              "(or [pairs, labels] for a classifier, G 1), not ", group_rows.sizes(), " and ",
                              logits.sizes()));
  const at::Tensor valid = group_rows.ge(0);
  // Every group's rows gathered at once; a slot past a row's last reads pair 0, masked out.
  const at::Tensor grouped = logits.index_select(0, group_rows.clamp_min(0).flatten()).view(group_rows.sizes());
  const RerankGroups groups{grouped, valid, labels};
  if (divisor > 0) return rerank_loss(groups, loss, divisor);
  // lambda with a top k: the pairs it counts follow the logits' order, known here alone;
  // every rank's summed, over the world size, as the divisor is.
  at::Tensor units = rerank_lambda_units(groups, loss).view({1});
  if (exchange.all_gather_ids) {
    const at::Tensor every_rank = exchange.all_gather_ids(units, {});
    units = every_rank.sum().clamp_min(1).to(grouped.scalar_type()) / double(every_rank.numel());
  } else {
    units = units.sum().clamp_min(1).to(grouped.scalar_type());
  }
  return rerank_loss_sum(groups, loss) / units;
}

at::Tensor SentenceEmbedderImpl::encode_batch(const EncoderInput& input) {
  RestoreTraining restore(*this);
  eval();
  at::NoGradGuard no_grad;
  const at::Tensor out = embed(input);
  const int64_t k = sparse_.max_active_dims;
  if (!is_sparse() || k <= 0 || k >= out.size(1)) return out;
  // sentence-transformers' select_max_active_dims: the top k by magnitude (SPLADE's
  // weights are >= 0), the rest 0.
  const at::Tensor top = std::get<1>(out.abs().topk(k, 1));
  return at::zeros_like(out).scatter_(1, top, out.gather(1, top));
}

}  // namespace ddp_embed
