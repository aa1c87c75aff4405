// A reranker's losses on its rows of candidates (model/rerank_loss.h): each written as its
// sentence-transformers class computes it on equal rows, with `valid` in the place of the
// class's padding, and summed rather than averaged so that the caller divides by the
// units of the whole global batch. Everything here runs on the device as queued kernels:
// entries past a row's last candidate are masked by where/masked_fill (never selected by
// value), and labels there are replaced before use, so a NaN there reaches nothing,
// neither the loss nor a gradient.
#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "compat/torch_compat.h"
#include "model/rerank_loss.h"
#include "model/rerank_loss_parts.h"

namespace ddp_embed {
namespace {

constexpr double kRerankLossInf = std::numeric_limits<double>::infinity();

std::string rerank_loss_sizes(const at::Tensor& t) {
  if (!t.defined()) return "(none)";
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

bool rerank_loss_reads_labels(RerankLoss type) { return type != RerankLoss::CrossEntropy && type != RerankLoss::Mnrl; }

bool rerank_loss_needs_negative(RerankLoss type) { return type != RerankLoss::BinaryCrossEntropy; }

// Throws ModelError unless the shapes and dtypes fit the loss: reads no values.
void rerank_loss_check_shapes(const RerankGroups& g, RerankLoss type) {
  const std::string name = choice_name(type);
  if (!g.logits.defined() || g.logits.dim() != 2 || !at::isFloatingType(g.logits.scalar_type()) ||
      g.logits.size(0) < 1 || g.logits.size(1) < 1)
    throw ModelError("rerank loss " + name + " needs floating logits [n, G] (n queries, G candidates a query), got " +
                     rerank_loss_sizes(g.logits));
  if (!g.valid.defined() || g.valid.scalar_type() != at::kBool || g.valid.sizes() != g.logits.sizes())
    throw ModelError("rerank loss " + name + " needs valid bool " + rerank_loss_sizes(g.logits) + " like the logits, got " +
                     rerank_loss_sizes(g.valid));
  if (rerank_loss_needs_negative(type) && g.logits.size(1) < 2)
    throw ModelError("rerank loss " + name + " ranks each query's candidates: it needs at least 2 columns (the " +
                     "positive and a negative), got logits " + rerank_loss_sizes(g.logits));
  if (rerank_loss_reads_labels(type) && (!g.labels.defined() || g.labels.sizes() != g.logits.sizes() ||
                                    !at::isFloatingType(g.labels.scalar_type())))
    throw ModelError("rerank loss " + name + " reads each candidate's label: it needs floating labels " +
                     rerank_loss_sizes(g.logits) + ", got " + rerank_loss_sizes(g.labels));
}

// Labels where valid, 0 elsewhere, in the loss dtype and without gradient.
at::Tensor rerank_loss_labels(const RerankGroups& g, const at::Tensor& scores) {
  const at::Tensor labels = g.labels.detach().to(scores.scalar_type());
  return at::where(g.valid, labels, at::zeros({}, scores.options()));
}

// BCEWithLogitsLoss (pos_weight) of each valid pair, summed.
at::Tensor rerank_loss_bce_sum(const at::Tensor& scores, const RerankGroups& g, const CrossEncoderLossConfig& c) {
  const at::Tensor pos_weight = at::full({1}, c.pos_weight, scores.options());
  const at::Tensor each =
      at::binary_cross_entropy_with_logits(scores, rerank_loss_labels(g, scores), {}, pos_weight, at::Reduction::None);
  return at::where(g.valid, each, at::zeros({}, scores.options())).sum();
}

// Softmax cross-entropy of each row over its valid entries, column 0 the target, summed.
at::Tensor rerank_loss_first_column_ce_sum(const at::Tensor& scores, const at::Tensor& valid) {
  const at::Tensor masked = scores.masked_fill(~valid, -kRerankLossInf);
  return (at::logsumexp(masked, {1}) - scores.select(1, 0)).sum();
}

// ListNetLoss: -sum_j softmax(labels)_j · log_softmax(scores)_j over each row's valid
// entries, summed over the rows.
at::Tensor rerank_loss_listnet_sum(const at::Tensor& scores, const RerankGroups& g) {
  const at::Tensor zero = at::zeros({}, scores.options());
  const at::Tensor target = at::softmax(rerank_loss_labels(g, scores).masked_fill(~g.valid, -kRerankLossInf), 1);
  const at::Tensor log_p = at::log_softmax(scores.masked_fill(~g.valid, -kRerankLossInf), 1);
  return -at::where(g.valid, target * log_p, zero).sum();
}

// MarginMSELoss: ((s_0 − s_j) − (t_0 − t_j))² over the valid negatives j >= 1, summed.
at::Tensor rerank_loss_margin_mse_sum(const at::Tensor& scores, const RerankGroups& g) {
  const int64_t negatives = scores.size(1) - 1;
  const at::Tensor teacher = rerank_loss_labels(g, scores);
  const at::Tensor margins = scores.narrow(1, 0, 1) - scores.narrow(1, 1, negatives);
  const at::Tensor targets = teacher.narrow(1, 0, 1) - teacher.narrow(1, 1, negatives);
  const at::Tensor squares = (margins - targets).square();
  return at::where(g.valid.narrow(1, 1, negatives), squares, at::zeros({}, scores.options())).sum();
}

// One row's or entry's place in an error: "query row 2, candidate 3".
std::string rerank_loss_place(int64_t row, int64_t column) {
  return "query row " + std::to_string(row) + ", candidate " + std::to_string(column);
}

}  // namespace

at::Tensor activated(const at::Tensor& logits, ScoreActivation activation) {
  switch (activation) {
    case ScoreActivation::Identity:
      return logits;
    case ScoreActivation::Sigmoid:
      return at::sigmoid(logits);
    case ScoreActivation::Tanh:
      return at::tanh(logits);
  }
  throw ModelError("unknown score activation");
}

namespace rerank_parts {

at::Tensor activated_scores(const at::Tensor& logits, const CrossEncoderLossConfig& config) {
  return activated(logits.to(logits.scalar_type() == at::kDouble ? at::kDouble : at::kFloat), rerank_activation(config));
}

}  // namespace rerank_parts

ScoreActivation rerank_activation(const CrossEncoderLossConfig& config) {
  if (config.activation) return *config.activation;
  return config.type == RerankLoss::Mnrl ? ScoreActivation::Sigmoid : ScoreActivation::Identity;
}

int64_t rerank_loss_units(RerankLoss type, const std::vector<int64_t>& candidates) {
  int64_t units = 0;
  for (const int64_t c : candidates) {
    switch (type) {
      case RerankLoss::BinaryCrossEntropy:
        units += c;
        break;
      case RerankLoss::MarginMse:
        units += c > 0 ? c - 1 : 0;
        break;
      case RerankLoss::CrossEntropy:
      case RerankLoss::Mnrl:
      case RerankLoss::ListNet:
        units += 1;
        break;
      case RerankLoss::Lambda:
        throw ModelError("rerank_loss_units: lambda's mean is over the pairs of candidates its grades order, "
                         "not a count of candidates: take rerank_lambda_units");
    }
  }
  return units;
}

at::Tensor rerank_loss_sum(const RerankGroups& groups, const CrossEncoderLossConfig& config) {
  rerank_loss_check_shapes(groups, config.type);
  compat::NoAutocast no_autocast;
  const at::Tensor scores = rerank_parts::activated_scores(groups.logits, config);
  switch (config.type) {
    case RerankLoss::BinaryCrossEntropy:
      return rerank_loss_bce_sum(scores, groups, config);
    case RerankLoss::CrossEntropy:
      return rerank_loss_first_column_ce_sum(scores, groups.valid);
    case RerankLoss::Mnrl:  // its class skips a scale of 0
      return rerank_loss_first_column_ce_sum(config.scale != 0 ? scores * config.scale : scores, groups.valid);
    case RerankLoss::Lambda:
      return rerank_parts::lambda_sum(scores, groups.valid, groups.labels.detach().to(scores.scalar_type()), config);
    case RerankLoss::ListNet:
      return rerank_loss_listnet_sum(scores, groups);
    case RerankLoss::MarginMse:
      return rerank_loss_margin_mse_sum(scores, groups);
  }
  throw ModelError("loss.cross_encoder.type: unknown loss");
}

at::Tensor rerank_loss(const RerankGroups& groups, const CrossEncoderLossConfig& config, double divisor) {
  if (!(divisor > 0) || !std::isfinite(divisor))
    throw ModelError("rerank_loss: the divisor (every rank's units / the world size) must be positive, not " +
                     std::to_string(divisor));
  return rerank_loss_sum(groups, config) / divisor;
}

at::Tensor rerank_class_loss(const at::Tensor& logits, const at::Tensor& classes, const CrossEncoderLossConfig& config,
                             double divisor) {
  if (!logits.defined() || logits.dim() != 2 || !at::isFloatingType(logits.scalar_type()) || logits.size(1) < 2)
    throw ModelError("rerank loss cross_entropy as a classifier needs floating logits [n, C] with C > 1 labels, got " +
                     rerank_loss_sizes(logits));
  if (!classes.defined() || classes.dim() != 1 || classes.size(0) != logits.size(0))
    throw ModelError("rerank loss cross_entropy as a classifier needs one class a row, [" +
                     std::to_string(logits.size(0)) + "], got " + rerank_loss_sizes(classes));
  if (!(divisor > 0) || !std::isfinite(divisor))
    throw ModelError("rerank_class_loss: the divisor (every rank's pairs / the world size) must be positive, not " +
                     std::to_string(divisor));
  compat::NoAutocast no_autocast;
  const at::Tensor scores = rerank_parts::activated_scores(logits, config);
  const at::Tensor target = classes.detach().to(scores.device(), at::kLong);
  return at::cross_entropy_loss(scores, target, {}, at::Reduction::Sum) / divisor;
}

void check_rerank_labels(const RerankGroups& groups, RerankLoss type) {
  const std::string name = choice_name(type);
  const at::Tensor& valid = groups.valid;
  if (!valid.defined() || valid.dim() != 2 || valid.scalar_type() != at::kBool || valid.size(0) < 1 ||
      valid.size(1) < 1)
    throw ModelError("rerank loss " + name + " needs valid bool [n, G], got " + rerank_loss_sizes(valid));
  const at::Tensor v = valid.cpu();
  const auto ok = v.accessor<bool, 2>();
  for (int64_t i = 0; i < v.size(0); ++i) {
    int64_t candidates = 0;
    for (int64_t j = 0; j < v.size(1); ++j) candidates += ok[i][j] ? 1 : 0;
    if (!ok[i][0])
      throw ModelError("rerank loss " + name + ": " + rerank_loss_place(i, 0) + " is not valid: column 0 holds each " +
                       "query's positive (or its one labeled document) and is always there");
    if (rerank_loss_needs_negative(type) && candidates < 2)
      throw ModelError("rerank loss " + name + ": query row " + std::to_string(i) + " has no candidate besides its " +
                       "positive; the loss ranks each query's candidates: give it a negative (data.*, a `neg` " +
                       "list) or train with binary_cross_entropy");
  }
  if (!rerank_loss_reads_labels(type)) return;
  if (!groups.labels.defined() || groups.labels.sizes() != valid.sizes())
    throw ModelError("rerank loss " + name + " reads each candidate's label: it needs labels " + rerank_loss_sizes(valid) +
                     ", got " + rerank_loss_sizes(groups.labels));
  const at::Tensor labels = groups.labels.detach().cpu().to(at::kDouble);
  const auto y = labels.accessor<double, 2>();
  for (int64_t i = 0; i < v.size(0); ++i)
    for (int64_t j = 0; j < v.size(1); ++j) {
      if (!ok[i][j]) continue;
      const double label = y[i][j];
      std::ostringstream shown;
      shown << label;
      const std::string takes = rerank_label_refusal(type, label);
      if (!takes.empty())
        throw ModelError("rerank loss " + name + ": " + rerank_loss_place(i, j) + " has label " + shown.str() +
                         ", which is not what it takes (" + takes + ")");
    }
}

std::string rerank_label_refusal(RerankLoss type, double label, int num_labels) {
  if (!std::isfinite(label)) return "a finite number";
  if (num_labels > 1 && (label < 0 || label >= num_labels || label != std::floor(label)))
    return "a class from 0 to " + std::to_string(num_labels - 1) + ", model.num_labels " + std::to_string(num_labels);
  if (type == RerankLoss::BinaryCrossEntropy && (label < 0 || label > 1)) return "a label from 0 to 1";
  if (type == RerankLoss::Lambda && label < 0) return "a relevance grade of 0 or more";
  return "";
}

}  // namespace ddp_embed
