// The rules that tie keys together (config/config_rules.h): each error blamed on who gave
// the keys, the --set that gave one of them, else the file.
#include "config/config_rules.h"

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/choices.h"

namespace ddp_embed::config_detail {
namespace {

using json = nlohmann::json;

// loss.directions, loss.partition_mode, loss.hardness_* (infonce's, as sentence-transformers
// 6's MultipleNegativesRankingLoss checks them) and the two spellings of MarginMSE.
template <class OriginOf>
void check_loss_terms(const LossConfig& l, const OriginOf& origin_of, std::vector<std::string>& errors) {
  const auto has = [&](LossDirection d) { return std::count(l.directions.begin(), l.directions.end(), d); };
  if (has(LossDirection::QueryToDoc) == 0)
    errors.push_back(origin_of({"loss.directions"}) +
                     ": loss.directions must hold \"query_to_doc\" (it holds each query's positive)");
  for (const auto& spelling : ChoiceTable<LossDirection>::spellings)
    if (has(spelling.value) > 1)
      errors.push_back(origin_of({"loss.directions"}) + ": loss.directions names \"" + std::string(spelling.name) +
                       "\" twice");
  if (l.partition_mode == PartitionMode::PerDirection &&
      (has(LossDirection::QueryToQuery) > 0 || has(LossDirection::DocToDoc) > 0))
    errors.push_back(origin_of({"loss.partition_mode", "loss.directions"}) +
                     ": loss.partition_mode \"per_direction\" needs every direction's candidates to hold the "
                     "positive pair, and loss.directions' \"query_to_query\" and \"doc_to_doc\" hold only "
                     "same-type similarities (each alone would be a negative, ill-defined loss): use loss.partition_mode "
                     "\"joint\", or leave those directions out");
  if (!uses_infonce(l)) {
    const LossConfig defaults;
    const std::string why = " to loss.type \"infonce\" (or \"splade\") only, and loss.type is \"" + choice_name(l.type) + "\"";
    if (l.directions != defaults.directions)
      errors.push_back(origin_of({"loss.directions", "loss.type"}) + ": loss.directions applies" + why);
    if (l.partition_mode != defaults.partition_mode)
      errors.push_back(origin_of({"loss.partition_mode", "loss.type"}) + ": loss.partition_mode applies" + why);
    if (l.hardness_mode != defaults.hardness_mode || l.hardness_strength != defaults.hardness_strength)
      errors.push_back(origin_of({"loss.hardness_mode", "loss.hardness_strength", "loss.type"}) +
                       ": loss.hardness_mode / loss.hardness_strength apply" + why);
  }
  if (l.type == LossType::MarginMse && l.margin_mse.weight > 0)
    errors.push_back(origin_of({"loss.margin_mse.weight", "loss.type"}) +
                     ": MarginMSE is set twice: loss.type \"margin_mse\" trains on it alone, loss.margin_mse.weight "
                     "adds it beside a contrastive loss.type: keep one");
}

// Settings that would change nothing, or train nothing, without a word: each an error
// naming its keys and the fix. `negatives`: some source takes hard negatives.
template <class OriginOf>
void check_inert_settings(const LossConfig& l, bool negatives, const OriginOf& origin_of,
                          std::vector<std::string>& errors) {
  if (uses_infonce(l) && l.hardness_mode == HardnessMode::None && l.hardness_strength > 0)
    errors.push_back(origin_of({"loss.hardness_strength", "loss.hardness_mode"}) +
                     ": loss.hardness_strength weights the negatives loss.hardness_mode picks, and loss.hardness_mode "
                     "is \"none\": nothing would be weighted. Set loss.hardness_mode (\"in_batch_negatives\", "
                     "\"hard_negatives\" or \"all_negatives\"), or remove loss.hardness_strength");
  if (uses_infonce(l) && l.hardness_mode == HardnessMode::HardNegatives && !negatives)
    errors.push_back(origin_of({"loss.hardness_mode", "data.negatives_per_query"}) +
                     ": loss.hardness_mode \"hard_negatives\" weights each query's own hard negatives, and the batches "
                     "have none (data.negatives_per_query is 0): set data.negatives_per_query > 0 (with \"neg\" in "
                     "the pairs), or loss.hardness_mode \"in_batch_negatives\"");
  const GuideConfig defaults;
  if (!l.guide.model && (l.guide.margin != defaults.margin || l.guide.margin_strategy != defaults.margin_strategy))
    errors.push_back(origin_of({"loss.guide.margin", "loss.guide.margin_strategy", "loss.guide.model"}) +
                     ": loss.guide.margin / loss.guide.margin_strategy set the guide's mask, and loss.guide.model "
                     "is unset, so there is no guide: set loss.guide.model, or remove them");
  // Cosines lie in [-1, 1]: an absolute margin of 2 puts every candidate above the
  // positive's cosine less the margin, one of -2 none.
  const std::string margin = number_text(l.guide.margin);
  if (l.guide.model && l.guide.margin_strategy == GuideMargin::Absolute && l.guide.margin >= 2)
    errors.push_back(origin_of({"loss.guide.margin"}) + ": loss.guide.margin " + margin +
                     " (\"absolute\") masks every negative: the positive's cosine less " + margin + " is at most -1, "
                     "the least a cosine can be, so the contrastive loss would be constant and nothing would train. "
                     "Use a margin below 2 (0, the default, masks what the guide rates above the positive)");
  if (l.guide.model && l.guide.margin_strategy == GuideMargin::Absolute && l.guide.margin <= -2)
    errors.push_back(origin_of({"loss.guide.margin"}) + ": loss.guide.margin " + margin +
                     " (\"absolute\") masks no negative: the positive's cosine plus " + number_text(-l.guide.margin) +
                     " is at least 1, the most a cosine can be, so the guide would cost a forward a step and change "
                     "nothing. Use a margin above -2, or remove loss.guide");
}

}  // namespace

// model.kind "sparse" and loss.type "splade" go together; model.sparse and loss.sparse
// apply to them only; what a sparse run does not have yet is said, not ignored.
template <class OriginOf>
void check_sparse_kind(const Config& c, const OriginOf& origin_of, std::vector<std::string>& errors) {
  const LossConfig& l = c.loss;
  const bool sparse = c.model.kind == ModelKind::Sparse;
  if (sparse && l.type != LossType::Splade && l.type != LossType::MarginMse && l.type != LossType::None)
    errors.push_back(origin_of({"loss.type", "model.kind"}) + ": a sparse encoder (model.kind \"sparse\") trains on "
                     "loss.type \"splade\" (infonce on dot products), \"margin_mse\" (SparseMarginMSELoss) or "
                     "\"none\" with loss.distill, each with FLOPS regularization, not \"" + choice_name(l.type) +
                     "\": set loss.type \"splade\" (or a teacher's \"margin_mse\" / \"none\")");
  if (!sparse && l.type == LossType::Splade)
    errors.push_back(origin_of({"loss.type", "model.kind"}) + ": loss.type \"splade\" trains a sparse encoder: set "
                     "model.kind \"sparse\" (and model.init a BertForMaskedLM or XLMRobertaForMaskedLM folder)");
  const SparseModelConfig dm;
  const SparseLossConfig dl;
  const SparseLossConfig& sl = l.sparse;
  if (!sparse && (c.model.sparse.pooling_strategy || c.model.sparse.activation_function ||
                  c.model.sparse.chunk_tokens != dm.chunk_tokens || c.model.sparse.max_active_dims))
    errors.push_back(origin_of({"model.sparse", "model.kind"}) +
                     ": model.sparse applies to a sparse encoder: set model.kind \"sparse\", or remove model.sparse");
  if (!sparse &&
      (sl.document_regularizer_weight != dl.document_regularizer_weight ||
       sl.query_regularizer_weight != dl.query_regularizer_weight || sl.warmup_ratio != dl.warmup_ratio ||
       sl.schedule != dl.schedule || sl.document_regularizer_threshold != dl.document_regularizer_threshold ||
       sl.query_regularizer_threshold != dl.query_regularizer_threshold))
    errors.push_back(origin_of({"loss.sparse", "model.kind"}) +
                     ": loss.sparse sets a sparse encoder's FLOPS regularizers: set model.kind \"sparse\", or remove "
                     "loss.sparse");
  if (!sparse) return;
  const auto refuse = [&](bool set, std::vector<std::string> keys, const std::string& why) {
    if (set) errors.push_back(origin_of(keys) + ": " + keys.front() + " " + why);
  };
  refuse(!l.matryoshka_dims.empty(), {"loss.matryoshka_dims", "model.kind"},
         "cuts a dense embedding to its first sizes; a sparse vector's entries are vocabulary words, not ordered "
         "by importance: remove it");
  // A sparse vector has no projection: 0 (none) says so, and the default is left unread
  // (a printed config, which names every key, must load again).
  refuse(c.model.projection_dim != 0 && c.model.projection_dim != ModelConfig{}.projection_dim,
         {"model.projection_dim", "model.kind"},
         "projects a dense embedding; a sparse vector has one entry per vocabulary word: remove it");
  refuse(c.model.pooling.has_value(), {"model.pooling", "model.kind"},
         "pools a dense embedding; a sparse encoder pools the masked-LM head's logits "
         "(model.sparse.pooling_strategy): remove it");
}

// model.kind: the embedder's loss settings and the reranker's apply each to its own kind,
// and what a cross-encoder run does not have yet is said, not ignored.
template <class OriginOf>
void check_model_kind(const Config& c, const OriginOf& origin_of, std::vector<std::string>& errors) {
  const LossConfig defaults;
  const LossConfig& l = c.loss;
  check_sparse_kind(c, origin_of, errors);
  if (c.model.kind != ModelKind::CrossEncoder) {
    const CrossEncoderLossConfig& ce = l.cross_encoder;
    const CrossEncoderLossConfig d = defaults.cross_encoder;
    if (ce.type != d.type || ce.activation || ce.pos_weight != d.pos_weight || ce.scale != d.scale ||
        ce.in_batch_negatives != d.in_batch_negatives || ce.weighting != d.weighting || ce.k != d.k ||
        ce.sigma != d.sigma || ce.eps != d.eps || ce.mu != d.mu || ce.reduction_log != d.reduction_log)
      errors.push_back(origin_of({"loss.cross_encoder", "model.kind"}) +
                       ": loss.cross_encoder applies to a reranker, and model.kind is \"bi_encoder\": set model.kind "
                       "\"cross_encoder\", or remove loss.cross_encoder");
    if (c.model.num_labels != 1)
      errors.push_back(origin_of({"model.num_labels", "model.kind"}) +
                       ": model.num_labels is a cross-encoder's (model.kind \"cross_encoder\")");
    for (size_t i = 0; i < c.data.eval.choices.size(); ++i)
      if (!c.data.eval.choices[i].first_stage.empty() || c.data.eval.choices[i].top_k != 100) {
        errors.push_back(origin_of({"data.eval", "model.kind"}) + ": data.eval[" + std::to_string(i) +
                         "]: first_stage and top_k are a reranker's (model.kind \"cross_encoder\"): remove them");
        break;
      }
    return;
  }
  const auto refuse = [&](bool set, std::vector<std::string> keys, const std::string& why) {
    if (set) errors.push_back(origin_of(keys) + ": " + keys.front() + " " + why);
  };
  const std::string embedder = "is the embedder's (model.kind \"bi_encoder\"); a cross-encoder's loss is "
                               "loss.cross_encoder: remove it";
  refuse(l.type != defaults.type || l.temperature != defaults.temperature, {"loss.type", "model.kind"}, embedder);
  refuse(l.cross_rank_negatives, {"loss.cross_rank_negatives", "model.kind"},
         "is the embedder's: a cross-encoder's mnrl takes every rank's candidates by itself "
         "(loss.cross_encoder.in_batch_negatives)");
  refuse(!l.matryoshka_dims.empty(), {"loss.matryoshka_dims", "model.kind"}, embedder);
  refuse(l.distill.weight > 0 || l.margin_mse.weight > 0, {"loss.distill.weight", "loss.margin_mse.weight", "model.kind"},
         embedder + " (a reranker distills with loss.cross_encoder.type \"margin_mse\")");
  refuse(l.directions != defaults.directions || l.hardness_mode != defaults.hardness_mode,
         {"loss.directions", "loss.hardness_mode", "model.kind"}, embedder);
  refuse(bool(l.guide.model), {"loss.guide.model", "model.kind"}, embedder);
  bool negatives = c.data.negatives_per_query > 0;
  for (const auto& source : c.data.train) negatives = negatives || source.negatives_per_query.value_or(0) > 0;
  const RerankLoss t = l.cross_encoder.type;
  if (c.model.num_labels > 1) {
    // A classifier: sentence-transformers' CrossEntropyLoss on labeled pairs, each pair
    // alone with its class; nothing ranks, so neither negatives nor a BEIR evaluation.
    refuse(t != RerankLoss::CrossEntropy, {"loss.cross_encoder.type", "model.num_labels"},
           "must be \"cross_entropy\" for a classifier (model.num_labels > 1: each labeled pair's logits against "
           "its class); the other losses score a pair with one logit: set model.num_labels 1");
    refuse(negatives, {"data.negatives_per_query", "model.num_labels"},
           "must be 0 for a classifier (model.num_labels > 1): it reads each labeled pair alone, "
           "{\"query\", \"doc\", \"label\": class}");
    refuse(!c.data.eval.paths.empty(), {"data.eval", "model.num_labels"},
           "ranks by one score a pair, and a classifier (model.num_labels > 1) gives several: set data.eval to null");
    return;
  }
  for (size_t i = 0; i < c.data.eval.paths.size(); ++i)
    if (c.data.eval.choice(i).first_stage.empty()) {
      errors.push_back(origin_of({"data.eval", "model.kind"}) + ": data.eval" +
                       (c.data.eval.choices.empty() ? "" : "[" + std::to_string(i) + "]") +
                       ": a reranker is evaluated on a BEIR set by reordering an embedding model's ranking: give it "
                       "as {\"path\": BEIR_FOLDER, \"first_stage\": EMBEDDING_MODEL, \"top_k\": 100}, or set "
                       "data.eval to null");
      break;
    }
  if (l.cross_encoder.k > 0 && l.cross_encoder.type != RerankLoss::Lambda)
    errors.push_back(origin_of({"loss.cross_encoder.k", "loss.cross_encoder.type"}) +
                     ": loss.cross_encoder.k applies to \"lambda\" only");
  if (!negatives && t != RerankLoss::BinaryCrossEntropy && t != RerankLoss::Mnrl)
    errors.push_back(origin_of({"loss.cross_encoder.type", "data.negatives_per_query"}) + ": loss.cross_encoder.type \"" +
                     choice_name(t) + "\" ranks each query's positive among its hard negatives: set "
                     "data.negatives_per_query > 0 (embed-train mine gives pairs their \"neg\")");
}

// Rules that tie two keys together, each error blamed on who gave the keys: the --set
// that gave one of them, else the file.
void check_relations(const Config& c, const Reader& reader, std::vector<std::string>& errors) {
  const BertConfig& a = c.model.architecture;
  const auto origin_of = [&](std::vector<std::string> keys) { return reader.writer_of_any(keys); };
  if (a.num_heads > 0 && a.hidden_size % a.num_heads != 0) {
    errors.push_back(origin_of({"model.hidden_size", "model.num_heads"}) + ": model.hidden_size (" + std::to_string(a.hidden_size) +
                     ") must be divisible by model.num_heads (" +
                     std::to_string(a.num_heads) + ")");
  }
  // With model.init the folder's config.json says how long an input may be (checked when
  // the model is built); model.max_position shapes a model from scratch only.
  if (!c.model.init && c.tokenizer.max_length > a.max_position) {
    errors.push_back(origin_of({"tokenizer.max_length", "model.max_position"}) + ": tokenizer.max_length (" + std::to_string(c.tokenizer.max_length) +
                     ") must be <= model.max_position (" + std::to_string(a.max_position) +
                     ")");
  }
  const auto& sources = c.data.train;
  for (size_t i = 0; i < sources.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (sources[i].name == sources[j].name)
        errors.push_back(origin_of({"data.train"}) + ": data.train[" + std::to_string(i) + "] and data.train[" + std::to_string(j) +
                         "] are both named \"" + sources[i].name + "\": give each source a \"name\" of its own");
  if (c.data.mixing == Mixing::Mixed)
    for (const auto& s : sources)
      if (s.negatives_per_query.value_or(c.data.negatives_per_query) !=
          sources.front().negatives_per_query.value_or(c.data.negatives_per_query))
        errors.push_back(origin_of({"data.mixing", "data.train", "data.negatives_per_query"}) +
                         ": data.mixing \"mixed\" puts sources in one batch, so they need the same "
                         "negatives_per_query (source \"" + s.name + "\" has another)");
  const auto& dims = c.loss.matryoshka_dims;
  for (size_t i = 1; i < dims.size(); ++i)
    if (dims[i] >= dims[i - 1]) {
      errors.push_back(origin_of({"loss.matryoshka_dims"}) + ": loss.matryoshka_dims must be descending (largest first), not " +
                       json(dims).dump());
      break;
    }
  // With a projection the embedding's size is a value of the config: a larger size is
  // an error here (without one it is the model's hidden size, checked where it is built).
  const int projection = c.model.projection_dim;
  if (projection > 0 && !dims.empty() && dims.front() > projection)
    errors.push_back(origin_of({"loss.matryoshka_dims", "model.projection_dim"}) + ": loss.matryoshka_dims: " +
                     std::to_string(dims.front()) + " is larger than the embedding size " + std::to_string(projection) +
                     " (model.projection_dim): every size must be at most " + std::to_string(projection));
  if (!c.loss.matryoshka_weights.empty() && c.loss.matryoshka_weights.size() != dims.size())
    errors.push_back(origin_of({"loss.matryoshka_weights", "loss.matryoshka_dims"}) + ": loss.matryoshka_weights has " + std::to_string(c.loss.matryoshka_weights.size()) +
                     " weights for " + std::to_string(dims.size()) + " loss.matryoshka_dims");
  const std::string& best = c.output.keep_best;
  if (!best.empty() && best.rfind("eval/", 0) != 0)
    errors.push_back(origin_of({"output.keep_best"}) + ": output.keep_best \"" + best +
                     "\" is not an evaluation metric: name one as metrics.jsonl does, e.g. \"eval/NAME/ndcg@10\"");
  else if (!best.empty() && c.data.eval.empty())
    errors.push_back(origin_of({"output.keep_best", "data.eval"}) + ": output.keep_best needs an evaluation set: set data.eval");
  if (c.loss.type == LossType::None && !(c.loss.distill.weight > 0) && !(c.loss.margin_mse.weight > 0))
    errors.push_back(origin_of({"loss.type", "loss.distill.weight"}) +
                     ": loss.type \"none\" trains on distillation alone: set loss.distill.weight > 0");
  check_model_kind(c, origin_of, errors);
  if (c.model.kind == ModelKind::CrossEncoder) return;  // the embedder's loss rules below do not apply
  check_loss_terms(c.loss, origin_of, errors);
  bool negatives = c.data.negatives_per_query > 0;
  for (const auto& source : sources) negatives = negatives || source.negatives_per_query.value_or(0) > 0;
  check_inert_settings(c.loss, negatives, origin_of, errors);
  if (c.train.max_steps == 0)
    errors.push_back(origin_of({"train.max_steps"}) +
                     ": train.max_steps 0 would train nothing: -1 (the default) trains train.epochs passes over the "
                     "data, a positive number that many steps");
  // Distillation's softmax is over each query's own candidates: without hard negatives a
  // softmax over one, a constant term that trains nothing.
  if (c.loss.distill.weight > 0 && !negatives)
    errors.push_back(origin_of({"loss.distill.weight", "data.negatives_per_query"}) +
                     ": loss.distill compares each query's positive with its hard negatives under the teacher's "
                     "scores; with none it is a softmax over one candidate, a constant that trains nothing: set "
                     "data.negatives_per_query > 0 (and give the pairs \"neg\" with \"neg_scores\")");
  if (margin_mse_weight(c.loss) > 0 && !negatives)
    errors.push_back(origin_of({"loss.type", "loss.margin_mse.weight", "data.negatives_per_query"}) +
                     ": MarginMSE compares each positive with the pair's hard negatives: set "
                     "data.negatives_per_query > 0 (and give the pairs \"neg\" with \"neg_scores\")");
  if (c.loss.guide.model && (c.loss.type == LossType::None || c.loss.type == LossType::MarginMse))
    errors.push_back(origin_of({"loss.guide.model", "loss.type"}) +
                     ": loss.guide masks the contrastive loss's negatives, and loss.type \"" +
                     choice_name(c.loss.type) + "\" has none: set loss.type, or remove loss.guide");
}

}  // namespace ddp_embed::config_detail
