// The config's closed choices: each an enum, its spellings in one table below.
//
// A choice (loss.type, train.precision, data.mixing ...) is parsed here once, from the
// config file, a --set or a command-line option (encode/eval --pooling), and travels as
// its enum from then on: no component compares strings, and a mistyped value is refused
// when read, naming the key, the allowed set and the nearest spelling. The same table
// prints the value back (--print-config, config_to_json, and so config_hash), and
// docs/config.md lists each table's spellings (tests/core/test_config.cpp checks that
// the two agree; scripts/dev/check-house.sh, that no spelling is compared elsewhere).
//
// Adding a spelling: one line in its table (and the switch statements the compiler then
// points at, and the docs row the test points at).
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace ddp_embed {

// ---- the choices ------------------------------------------------------------------------

// model.pooling (its "auto" is std::optional<Pooling> without a value: the init folder's
// Pooling module, else lasttoken for a decoder and cls for an encoder; config.h) and
// encode/eval --pooling. cls: the first token; mean: the mean over real tokens;
// lasttoken: the last real token (decoder embedders, whose last token has seen the text).
enum class Pooling { Cls, Mean, LastToken };
// model.attention: how the encoders attend (model/attention.h). Packed: over each sequence's
// real tokens alone (the CPU: one SDPA call a sequence; CUDA's varlen kernels); Padded: every sequence
// padded to the batch's longest, with a mask (scaled_dot_product_attention); Auto: per
// batch, the one measured faster for its lengths.
enum class AttentionMode { Auto, Packed, Padded };
// tokenizer.type: the tokenizer at tokenizer.path (tokenize/tokenizer.h).
enum class TokenizerType { SentencePiece, WordPiece };
// data.mixing: how global batches are drawn from several sources (data/batch_plan.h).
enum class Mixing { Proportional, Weighted, RoundRobin, Mixed };
// loss.type (model/loss.h); None: no contrastive term, distillation alone; MarginMse:
// sentence-transformers' MarginMSELoss alone (no contrastive term); Splade: a sparse
// encoder's SpladeLoss, infonce on dot products plus FLOPS regularization.
enum class LossType { PairwiseSigmoid, Infonce, None, MarginMse, Splade };
// model.kind: a sentence embedder (texts embedded apart, compared by cosine), a reranker
// (a query and a document read together, one score: model/cross_encoder.h), or a sparse
// encoder (a weight per vocabulary entry, compared by dot product: model/splade_pooling.h).
enum class ModelKind { BiEncoder, CrossEncoder, Sparse };
// model.sparse.pooling_strategy: SPLADE's reduction over a text's tokens.
enum class SpladeReduce { Max, Sum };
// model.sparse.activation_function: log(1 + relu(x)), or that twice (OpenSearch's encoders).
enum class SpladeActivation { Relu, Log1pRelu };
// loss.sparse.schedule: how the FLOPS weights rise from 0 over their warm-up
// (sentence-transformers' SpladeRegularizerWeightSchedulerCallback's scheduler_type).
enum class RegularizerSchedule { Quadratic, Linear };
// loss.cross_encoder.type (model/rerank_loss.h): a reranker's loss, as sentence-transformers'
// cross_encoder.losses names it (BinaryCrossEntropyLoss, CrossEntropyLoss,
// MultipleNegativesRankingLoss, LambdaLoss, ListNetLoss, MarginMSELoss).
enum class RerankLoss { BinaryCrossEntropy, CrossEntropy, Mnrl, Lambda, ListNet, MarginMse };
// loss.cross_encoder.activation: applied to the logits before the loss (each loss's
// activation_fn); "auto" (no value) is the loss's own default.
enum class ScoreActivation { Identity, Sigmoid, Tanh };
// loss.cross_encoder.weighting: LambdaLoss's weighting_scheme.
enum class LambdaWeighting { None, NdcgLoss1, NdcgLoss2, LambdaRank, NdcgLoss2pp };
// loss.cross_encoder.reduction_log: LambdaLoss's reduction_log.
enum class LambdaLog { Natural, Binary };
// loss.directions' entries (docs/architecture.md, "The losses"): which score blocks infonce's softmax holds,
// as sentence-transformers 6's MultipleNegativesRankingLoss names them.
enum class LossDirection { QueryToDoc, DocToQuery, QueryToQuery, DocToDoc };
// loss.partition_mode: one softmax over every direction's block, or one per direction averaged.
enum class PartitionMode { Joint, PerDirection };
// loss.hardness_mode: which negatives get hardness_strength * their detached cosine added
// to their logit (none: no hardness weighting).
enum class HardnessMode { None, InBatchNegatives, HardNegatives, AllNegatives };
// loss.guide.margin_strategy: how the guide's query-positive similarity is lowered before a
// candidate that the guide rates above it is masked (model/loss.h: false_negative_mask): by the margin
// (Absolute), or by |similarity| times the margin (Relative); sentence-transformers'
// GISTEmbedLoss's two strategies.
enum class GuideMargin { Absolute, Relative };
// train.lr_scaling: train.lr times the world size, its square root, or as it is.
enum class LrScaling { None, Linear, Sqrt };
// train.schedule: after warm-up (optim/lr_schedule.h).
enum class Schedule { Linear, Cosine, Constant };
// train.device: Auto = CUDA when every worker of the machine can have a GPU (train/worker.h).
enum class TrainDevice { Auto, Cpu, Cuda };
// train.precision (train/precision.h).
enum class Precision { Fp32, Bf16, Fp16 };
// train.optimizer_offload: AdamW's moments and update in host memory (optim/flat_adamw.h).
enum class OptimizerOffload { None, Cpu };
// dist.backend: Auto = NCCL on CUDA with a build that has it, else Gloo (parallel/process_group.h).
enum class DistBackend { Auto, Nccl, Gloo };
// output.resume's mode: the newest checkpoint that verifies, none, or the one at a path.
// Path has no spelling: any other text is the path (config.h: ResumeFrom).
enum class ResumeMode { Auto, Never, Path };
// output.report_to's entries: where the metrics go besides metrics.jsonl (report/tensorboard.h).
enum class ReportTo { TensorBoard };

// ---- the tables ---------------------------------------------------------------------------

template <class E>
struct Spelling {
  E value;
  std::string_view name;
};

// ChoiceTable<E>::spellings: E's spellings, in the order messages and docs list them.
// One line a spelling, `{Enum::Value, "name"},`: scripts/dev/check-house.sh reads them.
// (A type without a table has none: is_choice_v below is false for it.)
template <class E>
struct ChoiceTable {};

template <>
struct ChoiceTable<Pooling> {
  static constexpr Spelling<Pooling> spellings[] = {
      {Pooling::Cls, "cls"},
      {Pooling::Mean, "mean"},
      {Pooling::LastToken, "lasttoken"},
  };
};
template <>
struct ChoiceTable<AttentionMode> {
  static constexpr Spelling<AttentionMode> spellings[] = {
      {AttentionMode::Auto, "auto"},
      {AttentionMode::Packed, "packed"},
      {AttentionMode::Padded, "padded"},
  };
};
template <>
struct ChoiceTable<TokenizerType> {
  static constexpr Spelling<TokenizerType> spellings[] = {
      {TokenizerType::SentencePiece, "sentencepiece"},
      {TokenizerType::WordPiece, "wordpiece"},
  };
};
template <>
struct ChoiceTable<Mixing> {
  static constexpr Spelling<Mixing> spellings[] = {
      {Mixing::Proportional, "proportional"},
      {Mixing::Weighted, "weighted"},
      {Mixing::RoundRobin, "round_robin"},
      {Mixing::Mixed, "mixed"},
  };
};
template <>
struct ChoiceTable<LossType> {
  static constexpr Spelling<LossType> spellings[] = {
      {LossType::PairwiseSigmoid, "pairwise_sigmoid"},
      {LossType::Infonce, "infonce"},
      {LossType::None, "none"},
      {LossType::MarginMse, "margin_mse"},
      {LossType::Splade, "splade"},
  };
};
template <>
struct ChoiceTable<ModelKind> {
  static constexpr Spelling<ModelKind> spellings[] = {
      {ModelKind::BiEncoder, "bi_encoder"},
      {ModelKind::CrossEncoder, "cross_encoder"},
      {ModelKind::Sparse, "sparse"},
  };
};
template <>
struct ChoiceTable<SpladeReduce> {
  static constexpr Spelling<SpladeReduce> spellings[] = {
      {SpladeReduce::Max, "max"},
      {SpladeReduce::Sum, "sum"},
  };
};
template <>
struct ChoiceTable<SpladeActivation> {
  static constexpr Spelling<SpladeActivation> spellings[] = {
      {SpladeActivation::Relu, "relu"},
      {SpladeActivation::Log1pRelu, "log1p_relu"},
  };
};
template <>
struct ChoiceTable<RegularizerSchedule> {
  static constexpr Spelling<RegularizerSchedule> spellings[] = {
      {RegularizerSchedule::Quadratic, "quadratic"},
      {RegularizerSchedule::Linear, "linear"},
  };
};
template <>
struct ChoiceTable<RerankLoss> {
  static constexpr Spelling<RerankLoss> spellings[] = {
      {RerankLoss::BinaryCrossEntropy, "binary_cross_entropy"},
      {RerankLoss::CrossEntropy, "cross_entropy"},
      {RerankLoss::Mnrl, "mnrl"},
      {RerankLoss::Lambda, "lambda"},
      {RerankLoss::ListNet, "listnet"},
      {RerankLoss::MarginMse, "margin_mse"},
  };
};
template <>
struct ChoiceTable<ScoreActivation> {
  static constexpr Spelling<ScoreActivation> spellings[] = {
      {ScoreActivation::Identity, "identity"},
      {ScoreActivation::Sigmoid, "sigmoid"},
      {ScoreActivation::Tanh, "tanh"},
  };
};
template <>
struct ChoiceTable<LambdaWeighting> {
  static constexpr Spelling<LambdaWeighting> spellings[] = {
      {LambdaWeighting::None, "none"},
      {LambdaWeighting::NdcgLoss1, "ndcg_loss1"},
      {LambdaWeighting::NdcgLoss2, "ndcg_loss2"},
      {LambdaWeighting::LambdaRank, "lambdarank"},
      {LambdaWeighting::NdcgLoss2pp, "ndcg_loss2pp"},
  };
};
template <>
struct ChoiceTable<LambdaLog> {
  static constexpr Spelling<LambdaLog> spellings[] = {
      {LambdaLog::Natural, "natural"},
      {LambdaLog::Binary, "binary"},
  };
};
template <>
struct ChoiceTable<LossDirection> {
  static constexpr Spelling<LossDirection> spellings[] = {
      {LossDirection::QueryToDoc, "query_to_doc"},
      {LossDirection::DocToQuery, "doc_to_query"},
      {LossDirection::QueryToQuery, "query_to_query"},
      {LossDirection::DocToDoc, "doc_to_doc"},
  };
};
template <>
struct ChoiceTable<PartitionMode> {
  static constexpr Spelling<PartitionMode> spellings[] = {
      {PartitionMode::Joint, "joint"},
      {PartitionMode::PerDirection, "per_direction"},
  };
};
template <>
struct ChoiceTable<HardnessMode> {
  static constexpr Spelling<HardnessMode> spellings[] = {
      {HardnessMode::None, "none"},
      {HardnessMode::InBatchNegatives, "in_batch_negatives"},
      {HardnessMode::HardNegatives, "hard_negatives"},
      {HardnessMode::AllNegatives, "all_negatives"},
  };
};
template <>
struct ChoiceTable<GuideMargin> {
  static constexpr Spelling<GuideMargin> spellings[] = {
      {GuideMargin::Absolute, "absolute"},
      {GuideMargin::Relative, "relative"},
  };
};
template <>
struct ChoiceTable<LrScaling> {
  static constexpr Spelling<LrScaling> spellings[] = {
      {LrScaling::None, "none"},
      {LrScaling::Linear, "linear"},
      {LrScaling::Sqrt, "sqrt"},
  };
};
template <>
struct ChoiceTable<Schedule> {
  static constexpr Spelling<Schedule> spellings[] = {
      {Schedule::Linear, "linear"},
      {Schedule::Cosine, "cosine"},
      {Schedule::Constant, "constant"},
  };
};
template <>
struct ChoiceTable<TrainDevice> {
  static constexpr Spelling<TrainDevice> spellings[] = {
      {TrainDevice::Auto, "auto"},
      {TrainDevice::Cpu, "cpu"},
      {TrainDevice::Cuda, "cuda"},
  };
};
template <>
struct ChoiceTable<Precision> {
  static constexpr Spelling<Precision> spellings[] = {
      {Precision::Fp32, "fp32"},
      {Precision::Bf16, "bf16"},
      {Precision::Fp16, "fp16"},
  };
};
template <>
struct ChoiceTable<OptimizerOffload> {
  static constexpr Spelling<OptimizerOffload> spellings[] = {
      {OptimizerOffload::None, "none"},
      {OptimizerOffload::Cpu, "cpu"},
  };
};
template <>
struct ChoiceTable<DistBackend> {
  static constexpr Spelling<DistBackend> spellings[] = {
      {DistBackend::Auto, "auto"},
      {DistBackend::Nccl, "nccl"},
      {DistBackend::Gloo, "gloo"},
  };
};
template <>
struct ChoiceTable<ReportTo> {
  static constexpr Spelling<ReportTo> spellings[] = {
      {ReportTo::TensorBoard, "tensorboard"},
  };
};
template <>
struct ChoiceTable<ResumeMode> {
  static constexpr Spelling<ResumeMode> spellings[] = {
      {ResumeMode::Auto, "auto"},
      {ResumeMode::Never, "never"},
  };
};

// ---- reading and writing a choice ----------------------------------------------------------

template <class E, class = void>
struct IsChoice : std::false_type {};
template <class E>
struct IsChoice<E, std::void_t<decltype(ChoiceTable<E>::spellings)>> : std::true_type {};
// Whether E is one of the choices above (the config reader's overloads ask).
template <class E>
constexpr bool is_choice_v = IsChoice<E>::value;

// E's spellings, in table order.
template <class E>
std::vector<std::string> choice_names() {
  std::vector<std::string> names;
  for (const auto& s : ChoiceTable<E>::spellings) names.emplace_back(s.name);
  return names;
}

// The spelling of `value`. Throws std::logic_error for a value without one
// (ResumeMode::Path, whose text is the path).
template <class E>
std::string choice_name(E value) {
  for (const auto& s : ChoiceTable<E>::spellings)
    if (s.value == value) return std::string(s.name);
  throw std::logic_error("choice_name: a value without a spelling");
}

// The value spelled `name` exactly, or none.
template <class E>
std::optional<E> find_choice(std::string_view name) {
  for (const auto& s : ChoiceTable<E>::spellings)
    if (s.name == name) return s.value;
  return std::nullopt;
}

// "one of \"a\", \"b\"": the allowed set, as messages say it.
std::string describe_choices(const std::vector<std::string>& names);

// What to tell a user who typed `typed` (`shown`: the value as the message shows it, e.g.
// "\"infonse\"" or 3) for a key whose allowed spellings are `names`:
//   expected one of "pairwise_sigmoid", "infonce", "none", got "infonse" (did you mean "infonce"?)
// The suggestion comes only for text near one spelling (key_suggest.h: nearest_value).
std::string bad_choice_message(const std::vector<std::string>& names, const std::string& shown,
                               const std::optional<std::string>& typed);

// `typed` as a value of E; throws ConfigError "WHAT: expected one of ..., got \"x\" (did you
// mean ...?)" otherwise. For command-line options that take a config choice (`what`:
// "--pooling").
[[noreturn]] void throw_bad_choice(const std::string& what, const std::vector<std::string>& names,
                                   std::string_view typed);
template <class E>
E parse_choice(std::string_view typed, const std::string& what) {
  if (const auto value = find_choice<E>(typed)) return *value;
  throw_bad_choice(what, choice_names<E>(), typed);
}

}  // namespace ddp_embed
