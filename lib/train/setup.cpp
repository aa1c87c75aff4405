#include "train/setup.h"

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "config/key_suggest.h"
#include "data/text_corpus.h"
#include "model/attention.h"
#include "model/lora.h"
#include "model/weights.h"
#include "train/guide.h"
#include "train/prepare.h"
#include "train/eval_sets.h"
#include "util/log.h"
#include "util/text.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace ddp_embed {
namespace {

// ---- the tokenizer and data -------------------------------------------------------------

// model.projection_dim against the init folder's Dense layers: they are trained further
// when projection_dim is the last one's out_features, never dropped or replaced silently.
void check_projection_against_init(const Config& cfg, const ModelFolderLayout& init) {
  if (init.dense.empty()) return;
  const std::string dense_config = (fs::path(init.dense.back().dir) / "config.json").string();
  const int64_t out = init.dense.back().out_features;
  if (cfg.model.projection_dim == 0)
    throw ConfigError("model.init has a Dense layer (" + dense_config + ", out_features " + std::to_string(out) +
                             ") but model.projection_dim is 0, which would drop it: set model.projection_dim=" +
                             std::to_string(out) + " to keep it (and train it further)");
  if (cfg.model.projection_dim != out)
    throw ConfigError(dense_config + ": model.init's Dense layer has out_features " + std::to_string(out) +
                             " but model.projection_dim is " + std::to_string(cfg.model.projection_dim) +
                             ": set model.projection_dim=" + std::to_string(out) +
                             " to train it further (a projection of another size would replace it)");
}

// model.init, read once before anything is loaded: a Hugging Face folder (BERT,
// XLM-RoBERTa, Qwen3) or a sentence-transformers folder around one (model/model_folder.h). Its problems, and a
// model.projection_dim that does not fit its Dense layer, are errors naming its files
// before any data is read.
std::optional<ModelFolderLayout> read_init_folder(const Config& cfg) {
  if (!cfg.model.init) return std::nullopt;
  ModelFolderLayout init = read_model_folder_layout(*cfg.model.init);
  const bool cross = cfg.model.kind == ModelKind::CrossEncoder;
  if (init.cross_encoder && !cross)
    throw ConfigError("model.init " + *cfg.model.init + " is a cross-encoder (a " +
                      std::to_string(init.num_labels) + "-label *ForSequenceClassification), and model.kind is "
                      "\"bi_encoder\": set model.kind \"cross_encoder\" to train it further as a reranker");
  if (cross && init.cross_encoder && init.num_labels != cfg.model.num_labels)
    throw ConfigError("model.init " + *cfg.model.init + " has a head of " + std::to_string(init.num_labels) +
                      " labels and model.num_labels is " + std::to_string(cfg.model.num_labels) +
                      ": set model.num_labels " + std::to_string(init.num_labels) + " to train that head further");
  const bool sparse = cfg.model.kind == ModelKind::Sparse;
  if (init.sparse && !sparse)
    throw ConfigError("model.init " + *cfg.model.init + " is a sparse encoder (SpladePooling), and model.kind is \"" +
                      choice_name(cfg.model.kind) + "\": set model.kind \"sparse\" (and loss.type \"splade\") to "
                      "train it further");
  if (sparse && (init.cross_encoder || !init.masked_lm))
    throw ConfigError("model.init " + *cfg.model.init + ": a sparse encoder starts from a folder with a masked-language-"
                      "model head, and " + (fs::path(init.transformer_dir) / "config.json").string() +
                      " names no *ForMaskedLM architecture: give a BertForMaskedLM or XLMRobertaForMaskedLM folder "
                      "(transformers' AutoModelForMaskedLM.from_pretrained(NAME).save_pretrained(DIR) writes one) or "
                      "a SparseEncoder folder");
  if (!cross && !sparse) check_projection_against_init(cfg, init);
  return init;
}

// data.train's sources as training reads them (defined below, beside the prompts it uses).
std::vector<SourceInput> training_sources(const Config& cfg, const std::map<std::string, std::string>& prompts);

// A sentencepiece model trained on the texts of data.train's files, each source's resolved
// and its columns mapped as training reads them (data/text_corpus.h), into tokenizer.path.
void train_tokenizer_on_data(const Config& cfg) {
  std::vector<TextSource> texts;
  for (const SourceInput& source : training_sources(cfg, {}))  // prompts are not trained on
    texts.push_back({resolve_data_files(source.files, source.dataset).files, source.columns,
                     source.dataset.key + ".columns"});
  TextCorpus corpus(std::move(texts));
  train_sentencepiece([&corpus](std::string& sentence) { return corpus.next(sentence); },
                      cfg.model.architecture.vocab_size, cfg.tokenizer.path, "data.train");
}

std::unique_ptr<Tokenizer> prepare_tokenizer(const Config& cfg, const std::optional<ModelFolderLayout>& init,
                                             ProcessGroup& pg) {
  // The init folder's tokenizer (its Transformer's vocab.txt or spiece.model); its
  // tokenizer_config.json decides lower-casing, else tokenizer.lower_case (a folder
  // without one may hold a cased vocabulary); sentence_bert_config.json's do_lower_case
  // lower-cases the text first.
  if (init) return load_folder_tokenizer(*init, cfg.tokenizer.lower_case);
  const bool missing = !fs::exists(cfg.tokenizer.path);
  if (missing && cfg.tokenizer.type == TokenizerType::SentencePiece) {
    // Convenience for a first run: train the tokenizer on the training data (rank 0),
    // the others wait for it.
    if (pg.rank() == 0) {
      spdlog::info("tokenizer: {} does not exist; training a sentencepiece model (vocab {}) on data.train",
                   cfg.tokenizer.path, cfg.model.architecture.vocab_size);
      train_tokenizer_on_data(cfg);
    }
    pg.barrier();
  }
  return load_tokenizer(cfg.tokenizer.type, cfg.tokenizer.path, cfg.tokenizer.lower_case);
}

// The prompts of the run: the init folder's, and model.prompts beside them (a name in
// both takes the config's text, as the log says).
std::map<std::string, std::string> training_prompts(const Config& cfg, const std::optional<ModelFolderLayout>& init) {
  std::map<std::string, std::string> prompts = init ? init->prompts : std::map<std::string, std::string>{};
  for (const auto& [name, text] : cfg.model.prompts) {
    const auto it = prompts.find(name);
    if (it != prompts.end() && it->second != text)
      spdlog::warn("model.prompts.{} {} replaces the prompt of that name in {} ({}): the config's wins", name,
                   nlohmann::json(text).dump(), init->dir, nlohmann::json(it->second).dump());
    prompts[name] = text;
  }
  return prompts;
}

// A source's query_prompt / passage_prompt: the text of the prompt of that name, else the
// value itself as the text ("" = none).
std::string prompt_text(const std::string& value, const std::map<std::string, std::string>& prompts) {
  const auto it = prompts.find(value);
  return it == prompts.end() ? value : it->second;
}

// Distillation needs the teacher's scores on every training pair: a pair without them
// is an error naming its file and line when the data is read, not a NaN loss later.
// A Pooling module with include_prompt false leaves a prompt's tokens out of the mean;
// ours pools every token, so training with prompts would not be the model it writes.
void check_prompts_are_pooled(const Config& cfg, const std::optional<ModelFolderLayout>& init,
                              const std::map<std::string, std::string>& prompts) {
  if (!init || init->include_prompt) return;
  for (size_t i = 0; i < cfg.data.train.size(); ++i)
    for (const std::string* value : {&cfg.data.train[i].query_prompt, &cfg.data.train[i].passage_prompt})
      if (!prompt_text(*value, prompts).empty())
        throw ConfigError(init->pooling_config + ": include_prompt is false (the prompt's tokens are left out "
                                 "of the pooling), which ddp-embed does not implement; data.train[" +
                                 std::to_string(i) + "] has a prompt: train without prompts, or from a folder "
                                 "whose Pooling includes them");
}

// Each source's prompts against the run's prompt names and tokenizer.max_length:
//  - a value that is no prompt's name is the prompt's text itself; one a letter or two
//    from a name ("qeury") is most likely that name mistyped, and warned;
//  - a prompt that takes all of tokenizer.max_length leaves no token of the text, so
//    every input would be the same: an error. One that leaves less than half of it for
//    the text is warned with what remains (it may be meant: a long instruction before
//    short queries), since the text's tail is cut to make room.
void check_prompts(const Config& cfg, const std::map<std::string, std::string>& prompts, const Tokenizer& tokenizer) {
  std::vector<std::string> names;
  for (const auto& item : prompts) names.push_back(item.first);
  const int max_length = cfg.tokenizer.max_length;
  for (size_t i = 0; i < cfg.data.train.size(); ++i)
    for (const auto& [key, value] : {std::pair<const char*, const std::string&>{"query_prompt", cfg.data.train[i].query_prompt},
                                     {"passage_prompt", cfg.data.train[i].passage_prompt}}) {
      const std::string where = "data.train[" + std::to_string(i) + "]." + key;
      const bool a_name = prompts.count(value) > 0;
      const bool a_text = std::any_of(prompts.begin(), prompts.end(), [&](const auto& p) { return p.second == value; });
      if (!a_name && !a_text && value.find_first_of(" \t:") == std::string::npos)
        if (const std::string near = nearest_value(value, names); !near.empty())
          spdlog::warn("{} \"{}\" is no prompt's name, so it is put before each text as it is: did you mean the "
                       "prompt \"{}\" ({})?", where, value, near, json_quoted_cut(prompts.at(near)));
      const std::string text = prompt_text(value, prompts);
      const int left = tokens_left_after_prompt(tokenizer, text, max_length);
      if (left <= 0)
        throw ConfigError(where + ": the prompt " + json_quoted_cut(text) + " takes " +
                                 std::to_string(max_length - left) + " tokens (with the special tokens), and "
                                 "tokenizer.max_length is " + std::to_string(max_length) +
                                 ": no token of the text would be left, every input the same. Shorten the prompt "
                                 "or raise tokenizer.max_length");
      if (!text.empty() && left < max_length / 2)
        spdlog::warn("{}: the prompt {} leaves {} of tokenizer.max_length's {} tokens for the text", where,
                     json_quoted_cut(text), left, max_length);
    }
}

std::vector<SourceInput> training_sources(const Config& cfg, const std::map<std::string, std::string>& prompts) {
  std::vector<SourceInput> out;
  for (size_t i = 0; i < cfg.data.train.size(); ++i) {
    const DataSource& s = cfg.data.train[i];
    const std::string key =
        cfg.data.train.size() == 1 && s.plain() ? "data.train" : "data.train[" + std::to_string(i) + "]";
    out.push_back({s.name, s.paths, prompt_text(s.query_prompt, prompts), prompt_text(s.passage_prompt, prompts),
                   !teacher_scores_key(cfg.loss).empty(), teacher_scores_key(cfg.loss),
                   DatasetChoice{s.config, {s.split}, key}, column_names(s.columns)});
  }
  return out;
}

// ---- the model --------------------------------------------------------------------------

// model.pooling: cls, mean or lasttoken as set; "auto" (none) = the init folder's Pooling
// module, else lasttoken for a decoder and cls for an encoder.
Pooling training_pooling(const Config& cfg, const std::optional<ModelFolderLayout>& init) {
  if (cfg.model.pooling) return *cfg.model.pooling;
  if (init && init->pooling) return *init->pooling;
  return init && init->encoder.is_decoder() ? Pooling::LastToken : Pooling::Cls;
}

SentenceEmbedder build_model(const Config& cfg, const Tokenizer& tokenizer,
                             const std::optional<ModelFolderLayout>& init) {
  // The architecture: the init folder's config.json, else the config's model section.
  EncoderConfig arch = init ? init->encoder : encoder_config(cfg.model.architecture);
  if (arch.is_decoder() || arch.is_gemma3()) {
    if (cfg.model.dropout > 0)
      spdlog::info("model.dropout {:g} does not apply: {} has no dropout", cfg.model.dropout,
                   arch.is_gemma3() ? "Gemma 3" : "Qwen3");
  } else if (arch.is_mpnet()) {
    arch.mpnet.hidden_dropout = arch.mpnet.attention_dropout = cfg.model.dropout;
  } else if (arch.is_modernbert()) {
    if (cfg.model.dropout > 0)
      spdlog::info("model.dropout {:g} does not apply: ModernBERT keeps its config.json's embedding_dropout, "
                   "attention_dropout and mlp_dropout", cfg.model.dropout);
  } else {
    // The config's sizes were checked when it was read (lib/config), init's when its
    // config.json was (model/bert.h); the model's constructor holds them as preconditions.
    arch.bert.hidden_dropout = arch.bert.attention_dropout = cfg.model.dropout;
  }
  if (tokenizer.vocab_size() > arch.vocab_size())
    throw ConfigError("the tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                             " tokens but model.vocab_size is " + std::to_string(arch.vocab_size()) +
                             ": set model.vocab_size >= " + std::to_string(tokenizer.vocab_size()));
  if (cfg.tokenizer.max_length > arch.max_length())
    throw ConfigError("tokenizer.max_length " + std::to_string(cfg.tokenizer.max_length) + " exceeds the " +
                      std::to_string(arch.max_length()) + " positions of the model" +
                      (init ? " (" + (fs::path(init->transformer_dir) / "config.json").string() + ")" : std::string()) +
                      ": set tokenizer.max_length <= " + std::to_string(arch.max_length()));
  torch::manual_seed(cfg.train.seed);
  // A cross-encoder: the encoder and a classification head (model/cross_encoder.h), the
  // head the init folder's when it is a cross-encoder's, else new (and BERT's pooler).
  // A sparse encoder: the encoder, its masked-LM head, SPLADE pooling as model.sparse says,
  // else as the init folder's SpladePooling does, else max and relu.
  const bool init_sparse = init && init->sparse;
  const SentenceEmbedderImpl::SparseShape sparse{
      cfg.model.sparse.pooling_strategy.value_or(init_sparse ? init->splade_reduce : SpladeReduce::Max),
      cfg.model.sparse.activation_function.value_or(init_sparse ? init->splade_activation : SpladeActivation::Relu),
      cfg.model.sparse.chunk_tokens,
      cfg.model.sparse.max_active_dims.value_or(init_sparse ? init->max_active_dims : 0)};
  SentenceEmbedder model =
      cfg.model.kind == ModelKind::Sparse ? SentenceEmbedder(std::make_shared<SentenceEmbedderImpl>(arch, sparse))
      : cfg.model.kind == ModelKind::CrossEncoder
          ? SentenceEmbedder(std::make_shared<SentenceEmbedderImpl>(
                arch, SentenceEmbedderImpl::CrossEncoderShape{cfg.model.num_labels}))
      : init && !init->dense.empty()
          ? SentenceEmbedder(std::make_shared<SentenceEmbedderImpl>(arch, dense_shapes(*init),
                                                                     training_pooling(cfg, init)))
          : SentenceEmbedder(arch, cfg.model.projection_dim, training_pooling(cfg, init));
  if (init) {
    // The BERT, and the Dense layers when the folder has them (read_init_folder made sure
    // that model.projection_dim is the last one's size); a cross-encoder's head.
    auto report = load_folder_weights(model, *init);
    if (!report.unused.empty())
      spdlog::info("model.init: {} tensors of the checkpoint are not used (e.g. {})", report.unused.size(),
                   report.unused.front());
  }
  return model;
}


// loss.matryoshka_dims against the embedding the model gives: a size beyond it is an
// error now, not at the first step; a largest size below it leaves the whole embedding
// untrained (sentence-transformers warns the same).
void check_matryoshka_dims(const Config& cfg, const SentenceEmbedder& model) {
  const auto& dims = cfg.loss.matryoshka_dims;
  if (dims.empty()) return;
  const int64_t size = model->embedding_dim();
  const std::string whence = cfg.model.projection_dim > 0 ? "model.projection_dim" : "the model's hidden size";
  for (int64_t d : dims)
    if (d > size)
      throw ConfigError("loss.matryoshka_dims: " + std::to_string(d) + " is larger than the embedding size " +
                               std::to_string(size) + " (" + whence + "): every size must be at most " +
                               std::to_string(size));
  if (dims.front() < size)
    spdlog::warn("loss.matryoshka_dims {} leaves out the whole embedding ({} values): it is not trained as a whole; "
                 "put {} first to train it", nlohmann::json(dims).dump(), size, size);
}

// Hard negatives and what uses them, against the data: a source that takes hard negatives
// (data.negatives_per_query) and has none is said; loss.hardness_mode "hard_negatives"
// with none at all would weight nothing, silently, so it is an error (lib/config refuses
// it where no source takes any; here the data is known). A mode without strength is said.
void check_hard_negatives(const Config& cfg, const PairDataset& train) {
  const LossConfig& loss = cfg.loss;
  if (loss.hardness_mode != HardnessMode::None && loss.hardness_strength == 0)
    spdlog::warn("loss.hardness_mode \"{}\" is set but loss.hardness_strength is 0, so hardness weighting has no "
                 "effect: set loss.hardness_strength to a positive value to enable it",
                 choice_name(loss.hardness_mode));
  const std::vector<int> taken = negatives_per_source(cfg, train.sources.size());
  bool any = false;
  for (size_t s = 0; s < train.sources.size(); ++s) {
    if (taken[s] == 0) continue;
    bool some = false;
    for (int64_t i = train.sources[s].begin; !some && i < train.sources[s].end; ++i)
      some = train.pairs[size_t(i)].neg_count > 0;
    if (!some)
      spdlog::warn("data.negatives_per_query {}: no pair of source \"{}\" has hard negatives (\"neg\"), so its "
                   "batches hold in-batch negatives only", taken[s], train.sources[s].name);
    any = any || some;
  }
  if (!any && loss.type == LossType::Infonce && loss.hardness_mode == HardnessMode::HardNegatives)
    throw ConfigError("loss.hardness_mode \"hard_negatives\" weights each query's own hard negatives, and no training "
                      "pair has any (\"neg\") in a source that takes them (data.negatives_per_query): give the pairs "
                      "\"neg\" (embed-train mine makes them), or set loss.hardness_mode \"in_batch_negatives\"");
}

// train.lr scaled by train.lr_scaling for `world` workers.
double scaled_lr(const TrainConfig& t, int world) {
  switch (t.lr_scaling) {
    case LrScaling::None: break;
    case LrScaling::Linear: return t.lr * world;
    case LrScaling::Sqrt: return t.lr * std::sqrt(double(world));
  }
  return t.lr;
}

LossScaler make_loss_scaler(Precision precision, const TrainConfig& t) {
  if (precision != Precision::Fp16) return LossScaler();
  return LossScaler(t.loss_scale_init, t.loss_scale_growth_interval);
}

}  // namespace

// AdamW groups: no weight decay on biases and norm parameters, named as transformers'
// Trainer finds them (get_decay_parameter_names, in lower case): BERT's LayerNorm, Qwen3's
// input_layernorm / post_attention_layernorm / q_norm / k_norm and its final "norm"; "bias"
// anywhere in a name, as there (MPNet's relative_attention_bias.weight is spared too).
std::vector<FlatAdamW::Group> optimizer_groups(SentenceEmbedder& model, double weight_decay) {
  FlatAdamW::Group decay{{}, weight_decay}, no_decay{{}, 0.0};
  for (auto& item : model->named_parameters()) {
    if (!item.value().requires_grad()) continue;  // frozen (LoRA): no gradient, no state
    const std::string name = ascii_lower(item.key());
    const bool exempt = name.find("layernorm") != std::string::npos || name.find("rmsnorm") != std::string::npos ||
                        name.find("_norm") != std::string::npos || name.find(".norm.") != std::string::npos ||
                        name.rfind("norm.", 0) == 0 || name.find("bias") != std::string::npos;
    (exempt ? no_decay : decay).params.push_back(item.value());
  }
  return {decay, no_decay};
}

// A fine-tuned model keeps its init folder's input length (its positions were pretrained
// that far, whatever length this run trained on), text lower-casing, Normalize module and
// default prompt, so that SentenceTransformer(dir) treats input as it did the model
// training started from; a model trained from scratch takes tokenizer.max_length, the
// longest input it has seen. Both carry the run's prompts.
ModelFolderOptions output_folder_options(const Config& cfg, const Inputs& in) {
  const auto& init = in.init_folder;
  ModelFolderOptions options;
  options.max_length = init ? folder_max_length(*init) : cfg.tokenizer.max_length;
  if (init) {
    options.lower_case_text = init->lower_case_text;
    options.normalize = init->normalize;
    options.default_prompt_name = init->default_prompt_name;
    // BertForMaskedLM has no pooler: a sparse folder carries none.
    if (cfg.model.kind != ModelKind::Sparse) options.carried = carried_init_tensors(*init);
    if (init->cross_encoder) options.activation = init->activation;  // a reranker scores as it did
  }
  options.prompts = in.prompts;
  return options;
}

SourceSetup set_up_sources(const Config& cfg, ProcessGroup& pg) {
  SourceSetup s;
  s.init_folder = read_init_folder(cfg);
  s.tokenizer = prepare_tokenizer(cfg, s.init_folder, pg);
  s.prompts = training_prompts(cfg, s.init_folder);
  check_prompts_are_pooled(cfg, s.init_folder, s.prompts);
  check_prompts(cfg, s.prompts, *s.tokenizer);
  s.sources = training_sources(cfg, s.prompts);
  return s;
}

// A prepared folder's check, shared among the workers of this machine (they read the
// same files): each its local rank's share, on its threads.
namespace {
VerifyShare verify_share(const Worker& w) {
  VerifyShare share;
  share.threads = w.threads;
  share.part = w.env.local_rank;
  share.parts = w.env.local_world_size;
  return share;
}
}  // namespace

// The training pairs: tokenized now from data.train's files (the default), or mapped from
// a prepared folder — data.prepared (prepared first, by every rank, when it is not
// there), or data.train naming one.
PairDataset load_training_pairs(const Config& cfg, const Worker& w, const SourceSetup& s) {
  if (cfg.data.prepared) {
    const std::string& dir = *cfg.data.prepared;
    if (!is_prepared_folder(dir)) {
      spdlog::info("data.prepared: {} is not there: preparing data.train into it first", dir);
      prepare_folder(dir, s.sources, *s.tokenizer, cfg, *w.pg, w.threads, /*replace_stale=*/false);
    }
    return open_training_folder(dir, s.sources, *s.tokenizer, cfg, verify_share(w));
  }
  if (const auto& only = cfg.data.train.front(); cfg.data.train.size() == 1 && only.paths.size() == 1 &&
                                                  is_prepared_folder(only.paths.front()))
    return open_training_folder(only.paths.front(), {}, *s.tokenizer, cfg, verify_share(w));
  return load_sources(s.sources, *s.tokenizer, cfg.tokenizer.max_length, cfg.data.skip_bad_lines, w.threads,
                      cfg.data.max_line_bytes);
}

namespace {

// loss.guide with a tokenizer of its own: data.train's texts again, in its tokens
// (train/guide.h). A prepared folder holds the model's tokens only, not the texts.
void add_guide_tokens(const Config& cfg, const Worker& w, const SourceSetup& s, PairDataset& train) {
  if (train.mapped())
    throw ConfigError("loss.guide.model " + *cfg.loss.guide.model +
                             " tokenizes differently from the model, and a prepared folder holds the model's tokens "
                             "only: name data.train's JSONL files (without data.prepared), or use model.init's folder "
                             "(with a tokenizer.max_length within its own) as the guide");
  const auto start = Clock::now();
  train.guide_tokens = guide_token_store(cfg, s.sources, train.tokens, w.threads);
  spdlog::info("data: data.train tokenized again by the guide's tokenizer ({}) in {:.1f}s ({:.1f} MB)",
               *cfg.loss.guide.model, std::chrono::duration<double>(Clock::now() - start).count(),
               double(train.guide_tokens.memory_bytes()) / 1e6);
}

}  // namespace

Inputs load_inputs(const Config& cfg, const Worker& w) {
  Inputs in;
  // loss.guide: a folder that is no model is said now, before the data is read.
  const bool guide_tokens = cfg.loss.guide.model && !guide_reads_model_tokens(cfg);
  SourceSetup setup = set_up_sources(cfg, *w.pg);
  in.init_folder = std::move(setup.init_folder);
  const auto t_data = Clock::now();
  in.train = load_training_pairs(cfg, w, setup);
  if (guide_tokens) add_guide_tokens(cfg, w, setup, in.train);
  in.prompts = std::move(setup.prompts);
  in.tokenizer = std::move(setup.tokenizer);
  in.eval = load_eval_sets(cfg, w, training_sources(cfg, in.prompts).front(), *in.tokenizer);
  const bool mapped = in.train.tokens.offsets().mapped();
  spdlog::info("data: {} training pairs{}, {}, {} in {:.1f}s ({:.1f} MB of token ids in memory)",
               in.train.size(), in.train.skipped ? fmt::format(" ({} bad lines skipped)", in.train.skipped) : "",
               evaluation_size(in.eval), mapped ? "training pairs mapped from their prepared folder" : "tokenized",
               std::chrono::duration<double>(Clock::now() - t_data).count(),
               double(in.train.tokens.memory_bytes()) / 1e6);
  // data.train naming a prepared folder: the folder's sources, with the prompts it was made with.
  const bool own_sources = in.train.sources.size() == cfg.data.train.size();
  if (in.train.sources.size() > 1 || !cfg.data.train.front().plain())
    for (size_t i = 0; i < in.train.sources.size(); ++i) {
      const SourceInput resolved = own_sources ? training_sources(cfg, in.prompts)[i] : SourceInput{};
      spdlog::info("data: source \"{}\": {} pairs{}{}", in.train.sources[i].name, in.train.sources[i].size(),
                   resolved.query_prompt.empty() ? "" : ", query prompt " + nlohmann::json(resolved.query_prompt).dump(),
                   resolved.passage_prompt.empty() ? ""
                                                   : ", passage prompt " + nlohmann::json(resolved.passage_prompt).dump());
    }
  return in;
}

BatchPlan make_batch_plan(const Config& cfg, const PairDataset& train, int world_size) {
  std::vector<double> weights;
  // data.train naming a prepared folder of several sources: weight 1 each.
  for (size_t i = 0; i < train.sources.size(); ++i)
    weights.push_back(train.sources.size() == cfg.data.train.size() ? cfg.data.train[i].weight : 1.0);
  PlanSettings settings;
  settings.global_batch = cfg.train.batch_size;
  settings.world_size = world_size;
  settings.accum_steps = cfg.train.grad_accum_steps;
  settings.shuffle = cfg.data.shuffle;
  settings.drop_last = cfg.data.drop_last;
  settings.seed = cfg.train.seed;
  settings.mixing = cfg.data.mixing;
  std::optional<PairKeys> keys;
  if (cfg.data.dedupe_batches) keys = query_and_positive_keys(train);
  return BatchPlan(plan_sources(train.sources, weights), settings, std::move(keys));
}

std::vector<int> negatives_per_source(const Config& cfg, size_t sources) {
  if (sources != cfg.data.train.size())  // data.train naming a prepared folder of several sources
    return std::vector<int>(sources, cfg.data.negatives_per_query);
  std::vector<int> out;
  for (const DataSource& s : cfg.data.train) out.push_back(s.negatives_per_query.value_or(cfg.data.negatives_per_query));
  return out;
}

ModelUnderTraining build_model_under_training(const Config& cfg, const Worker& w, const Inputs& in,
                                              int64_t total_steps, int64_t micro_batch) {
  ProcessGroup& pg = *w.pg;
  SentenceEmbedder model = build_model(cfg, *in.tokenizer, in.init_folder);
  check_matryoshka_dims(cfg, model);
  check_hard_negatives(cfg, in.train);
  model->encoder().set_activation_checkpointing(cfg.train.activation_checkpointing);
  model->encoder().set_attention_mode(cfg.model.attention);
  spdlog::info("{}", describe_attention_mode(cfg.model.attention, w.device));
  if (cfg.model.lora_rank > 0) {
    if (!cfg.model.init)
      spdlog::warn("model.lora_rank {} without model.init: LoRA freezes the encoder, and this one is random "
                   "(a model from scratch); only the adapters and the {} will train", cfg.model.lora_rank,
                   model->is_cross_encoder() ? "head" : model->is_sparse() ? "masked-LM head" : "projection");
    const LoraSummary lora = apply_lora(model->encoder(), cfg.model.lora_rank, cfg.model.lora_alpha);
    spdlog::info("LoRA: rank {} (alpha {:g}) on {} linear layers of the encoder: {:.3g}M values train, the "
                 "encoder's {:.3g}M are frozen", cfg.model.lora_rank, cfg.model.lora_alpha, lora.layers,
                 double(lora.trainable) / 1e6, double(lora.frozen) / 1e6);
  }
  model->to(w.device);
  FlatAdamW optimizer(optimizer_groups(model, cfg.train.weight_decay));
  if (cfg.train.optimizer_offload == OptimizerOffload::Cpu) optimizer.offload_to_host();
  model->encoder().set_sparse_word_gradient(true);  // every .grad is now a dense view of the optimizer's buffer
  auto data_parallel = std::make_unique<DataParallel>(*model, optimizer, pg, cfg.dist);
  const double peak_lr = scaled_lr(cfg.train, pg.world_size());
  const EncoderConfig& arch = model->encoder().encoder_config();
  int64_t all_parameters = 0;
  for (const auto& p : model->parameters()) all_parameters += p.numel();
  const std::string trained = optimizer.num_parameters() == all_parameters
                                  ? ""
                                  : fmt::format(", {:.3g}M of them trained", double(optimizer.num_parameters()) / 1e6);
  // A reranker's head in place of the embedder's pooling and projection.
  const std::string head = model->is_cross_encoder()
                               ? fmt::format("a cross-encoder ({} head of {} label{}, loss {})",
                                             model->head->architecture(), model->head->num_labels(),
                                             model->head->num_labels() == 1 ? "" : "s",
                                             choice_name(cfg.loss.cross_encoder.type))
                           : model->is_sparse()
                               ? fmt::format("a sparse encoder ({} head over {} entries, SPLADE {} of {}; FLOPS "
                                             "weights {:g} documents, {:g} queries)",
                                             model->mlm->architecture(), model->embedding_dim(),
                                             choice_name(model->sparse_shape().reduce),
                                             choice_name(model->sparse_shape().activation),
                                             cfg.loss.sparse.document_regularizer_weight,
                                             cfg.loss.sparse.query_regularizer_weight)
                               : fmt::format("pooling {}, projection {}", choice_name(model->pooling()),
                                             cfg.model.projection_dim);
  spdlog::info("model: {} {:.2f}M parameters{} (hidden {}, {} layers, {} heads), {}; "
               "{} steps of {} pairs ({} per rank x {} accumulation), lr {:g}{}",
               architecture_name(arch.architecture), double(all_parameters) / 1e6, trained, arch.hidden_size(),
               arch.num_layers(), arch.num_heads(), head, total_steps, cfg.train.batch_size, micro_batch, cfg.train.grad_accum_steps,
               peak_lr,
               cfg.train.lr_scaling == LrScaling::None ? "" : " (" + choice_name(cfg.train.lr_scaling) + "-scaled)");
  return ModelUnderTraining{model, std::move(optimizer), std::move(data_parallel),
                            make_loss_scaler(w.precision, cfg.train), peak_lr};
}

TrainPosition resume(const Config& cfg, ProcessGroup& pg, ModelUnderTraining& t) {
  TrainPosition pos;
  const ResumeFrom& from = cfg.output.resume;
  if (from.mode != ResumeMode::Never) {
    const std::vector<std::string> candidates = from.mode == ResumeMode::Auto
                                                    ? list_checkpoints(cfg.output.dir + "/checkpoints")
                                                    : std::vector<std::string>{from.path};
    for (const auto& c : candidates) {
      try {
        nlohmann::json info;
        pos = load_checkpoint(c, t.model, t.optimizer, &info);
        // The fp16 loss scale continues where it was, if the checkpoint's run had one (its
        // config as config_to_json wrote it).
        const std::string saved_precision = info.value("config", nlohmann::json::object())
                                                .value("train", nlohmann::json::object())
                                                .value("precision", "");
        if (t.loss_scaler.enabled() && find_choice<Precision>(saved_precision) == Precision::Fp16)
          t.loss_scaler.load_state({pos.loss_scale, pos.loss_scale_good_steps});
        const int saved_world = info.value("world_size", pg.world_size());
        spdlog::info("resumed from {} (step {}, epoch {}, batch {} of the epoch){}", c, pos.step, pos.epoch,
                     pos.step_in_epoch,
                     saved_world != pg.world_size()
                         ? fmt::format("; it was written at world size {}, now {}: the batch plan re-shards by "
                                       "global batch position", saved_world, pg.world_size())
                         : "");
        break;
      } catch (const std::exception& e) {
        if (from.mode != ResumeMode::Auto) throw;
        spdlog::warn("skipping checkpoint {}: {}", c, e.what());
      }
    }
  }
  pg.check_same(uint64_t(pos.step), "the resume step (ranks found different checkpoints)");
  return pos;
}

}  // namespace ddp_embed
