// The training configuration: the JSON config file's keys (docs/) as typed structs.
//
// Data flows one way: load_config() reads a JSON file, applies `--set KEY=VALUE`
// overrides, validates every key and value, and returns a Config that the rest of the
// program only reads. Errors are ConfigError with a message naming the file, the key,
// the bad value and, for unknown keys and mistyped choices, the nearest valid spelling.
//
// This is the one place that parses and validates the config: a closed choice arrives as
// its enum (config/choices.h), and every rule the values alone decide is checked here,
// once. The components take their section's struct (LossConfig, DistConfig ...) as it
// is; what only the model can tell (a Matryoshka size against the embedding, the
// tokenizer's vocabulary against model.vocab_size) is checked where the model is built
// (train/trainee.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "config/bert_config.h"
#include "config/choices.h"

namespace ddp_embed {

struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ModelConfig {
  std::optional<std::string> init;  // a Hugging Face BERT folder; its architecture wins
  BertConfig architecture;          // model.vocab_size ... model.max_position: a model from scratch
  double dropout = 0.1;             // both of the architecture's dropouts, pretrained or not
  // "auto" is no value: model.init's Pooling module, else cls (lasttoken for a decoder).
  std::optional<Pooling> pooling;
  AttentionMode attention = AttentionMode::Auto;  // model/attention.h
  int projection_dim = 128;     // 0 = no projection
  // Named texts put before inputs ("query" -> "query: "), written into the model folder
  // (config_sentence_transformers.json) beside those model.init brings; a name here wins.
  std::map<std::string, std::string> prompts;
  // > 0: LoRA (model/lora.h): adapters of this rank on every linear layer of the encoder,
  // which is otherwise frozen; the saved model has them merged. 0: a full fine-tune.
  int lora_rank = 0;
  double lora_alpha = 16;  // the adapters' scale is lora_alpha / lora_rank
};

struct TokenizerConfig {
  TokenizerType type = TokenizerType::SentencePiece;
  std::string path = "runs/demo/tokenizer";
  int max_length = 64;
  bool lower_case = true;  // wordpiece only; a vocab folder's tokenizer_config.json wins
};

// One source of training pairs (data.train). The plain form, a path or a list of paths,
// is one source named "train"; a list of objects gives each source its own settings.
struct DataSource {
  std::string name = "train";      // in the log and metrics.jsonl; the first file's stem by default
  std::vector<std::string> paths;  // JSONL files, read in order ("path": one or a list)
  double weight = 1;               // data.mixing "weighted": its share of the steps
  std::string query_prompt;        // before each query: a prompt's name (model.prompts, or the
  std::string passage_prompt;      //   init folder's) or the text itself; "" = none
  std::optional<int> negatives_per_query;  // hard negatives per query; else data.negatives_per_query
  // Written back as a list of paths: a single source with nothing but paths.
  bool plain() const;
};

// Every file of every source, in order.
std::vector<std::string> source_paths(const std::vector<DataSource>& sources);

// data.eval: the evaluation sets, each a pair file (JSONL, docs/formats.md) or a BEIR folder
// (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv: data/beir.h). Written as null (none), a
// path, or a list of paths; each set is reported under its name (train/eval_sets.h).
struct EvalSets {
  std::vector<std::string> paths;
  bool empty() const { return paths.empty(); }
};

struct DataConfig {
  std::vector<DataSource> train = {DataSource{"train", {"data/demo/train.jsonl"}, 1, "", "", std::nullopt}};
  // How global batches are drawn from several sources (data/batch_plan.h): each from one
  // source, in proportion to the sources' sizes, to their weights, or in turn; or
  // "mixed", every batch from all of them.
  Mixing mixing = Mixing::Proportional;
  bool dedupe_batches = false;  // no text twice as a query or positive in one global batch
  // data.train's prepared folder (data/prepared.h): tokenized once and memory-mapped, made
  // by the run's ranks when it is not there; null = read and tokenize data.train at start.
  std::optional<std::string> prepared;
  EvalSets eval = {{"data/demo/eval.jsonl"}};
  bool shuffle = true;
  bool drop_last = true;
  int negatives_per_query = 0;
  bool skip_bad_lines = false;
  // A longer line is a bad line (a lost newline, a binary file), not a pair to truncate.
  int64_t max_line_bytes = 1 << 20;
};

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
};

// The weight of the MarginMSE term: 1 for loss.type "margin_mse", else loss.margin_mse.weight.
double margin_mse_weight(const LossConfig& loss);
// The key that makes the loss read the pairs' teacher scores ("loss.distill.weight",
// "loss.type \"margin_mse\"", "loss.margin_mse.weight"), or "" when none does.
std::string teacher_scores_key(const LossConfig& loss);

struct TrainConfig {
  int64_t batch_size = 64;  // global pairs per optimizer step
  int grad_accum_steps = 1;
  double lr = 1e-4;
  LrScaling lr_scaling = LrScaling::None;
  int64_t warmup_steps = 50;
  Schedule schedule = Schedule::Linear;
  double weight_decay = 0.01;
  double max_grad_norm = 1.0;  // <= 0: no clipping
  int epochs = 1;
  int64_t max_steps = -1;  // > 0 overrides epochs
  TrainDevice device = TrainDevice::Auto;  // Auto: CUDA when available, else the CPU
  Precision precision = Precision::Fp32;   // Fp16 needs CUDA
  double loss_scale_init = 65536;           // fp16: the first dynamic loss scale
  int64_t loss_scale_growth_interval = 2000;  // fp16: finite steps before the scale doubles
  bool activation_checkpointing = false;
  OptimizerOffload optimizer_offload = OptimizerOffload::None;  // Cpu: AdamW's moments and update in host memory
  int64_t gradcache_chunk = 0;  // > 0: GradCache, this many sequences per forward (train/gradcache.h)
  uint64_t seed = 42;
  int max_bad_steps = 5;  // non-finite steps in a row before the run stops
};

struct DistConfig {
  DistBackend backend = DistBackend::Auto;
  double bucket_mb = 25;
  int timeout_s = 600;
  int zero_stage = 0;  // 0: replicated; 1: AdamW state sharded; 2: gradients too (parallel/data_parallel.h)
};

// output.resume: "auto" | "never" | a checkpoint path.
struct ResumeFrom {
  ResumeMode mode = ResumeMode::Auto;
  std::string path;  // mode Path: the checkpoint folder
};

struct OutputConfig {
  std::string dir = "runs/demo";
  int64_t save_every = 200;  // 0 = no checkpoints (final/ is still written)
  int keep_last = 2;
  int64_t log_every = 10;
  int64_t eval_every = 200;  // 0 = only before the first step and at the end
  // An evaluation metric as metrics.jsonl names it ("eval/scifact/ndcg@10"); "" = off.
  // The model of the evaluation that scored it highest is kept in OUTPUT_DIR/best and
  // written as final/ (train/best_model.h).
  std::string keep_best;
  // Where the metrics go besides metrics.jsonl: ["tensorboard"] = event files in
  // OUTPUT_DIR/tensorboard (rank 0; report/tensorboard.h); [] = nowhere else.
  std::vector<ReportTo> report_to;
  ResumeFrom resume;
  bool checkpoint_on_signal = true;
  int64_t profile_steps = 0;  // > 0: rank 0 records this many steps with LibTorch's profiler
};

struct Config {
  ModelConfig model;
  TokenizerConfig tokenizer;
  DataConfig data;
  LossConfig loss;
  TrainConfig train;
  DistConfig dist;
  OutputConfig output;
};

// Reads `path` (JSON), applies each "dotted.key=value" override in order (value parsed as
// JSON, else taken as a string), validates, and returns the result. Keys missing from the
// file keep their defaults. Throws ConfigError.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

// The same from the text of a config file; `origin` names it in error messages.
Config parse_config(std::string_view text, const std::string& origin,
                    const std::vector<std::string>& overrides = {});

// The same from an in-memory JSON object; `origin` names it in error messages.
Config config_from_json(const nlohmann::json& j, const std::string& origin,
                        const std::vector<std::string>& overrides = {});

// The resolved configuration as JSON (every key, defaults filled in): what
// `--print-config` prints and what checkpoints and model folders record.
nlohmann::json config_to_json(const Config& c);

// A stable hash of config_to_json(c): ranks compare it to catch a rank started with a
// different configuration.
uint64_t config_hash(const Config& c);

// The keys that take a closed choice, in table order, each with the spellings it accepts
// as messages list them: {"model.pooling", {"auto", "cls", "mean", "lasttoken"}},
// {"output.resume", {"auto", "never"}} (or any other text: a checkpoint path) ...
std::vector<std::pair<std::string, std::vector<std::string>>> choice_keys();

}  // namespace ddp_embed
