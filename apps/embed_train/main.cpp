// embed-train: one training worker (started by ddp-launch, torchrun, srun or by hand),
// plus the encode / eval / tokenize / mine / tokenizer / plot tools. Parses the command line and calls lib/.
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "config/config.h"
#include "report/metrics_plot.h"
#include "tokenize/tokenizer.h"
#include "train/build_info.h"
#include "train/inference.h"
#include "train/mine.h"
#include "train/prepare.h"
#include "train/trainer.h"
#include "util/log.h"
#include "util/malloc_tuning.h"

namespace {

// An option whose value goes into `target` only when it is given: CLI11 2.1 has no
// std::optional options.
template <class T>
struct OptionalValue {
  T value{};
  CLI::Option* option = nullptr;
  void into(std::optional<T>& target) const {
    if (option->count() > 0) target = value;
  }
};

template <class T>
CLI::Option* add_optional(CLI::App* app, const std::string& name, OptionalValue<T>& v, const std::string& help) {
  v.option = app->add_option(name, v.value, help);
  return v.option;
}

bool is_subcommand(const char* arg) {
  for (const char* name : {"train", "prepare", "encode", "eval", "tokenize", "mine", "tokenizer", "plot"})
    if (std::strcmp(arg, name) == 0) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  // Before any thread starts: keep tensor-sized allocations on the heap (see the header).
  ddp_embed::tune_malloc_for_tensors();
  // `embed-train --config x` means `embed-train train --config x`.
  std::vector<char*> args(argv, argv + argc);
  static char train_word[] = "train";
  if (argc > 1 && !is_subcommand(argv[1]) && std::strcmp(argv[1], "--help") != 0 &&
      std::strcmp(argv[1], "-h") != 0 && std::strcmp(argv[1], "--version") != 0)
    args.insert(args.begin() + 1, train_word);

  CLI::App app{"embed-train: contrastive sentence-embedding training (BERT + projection)"};
  // --version: what LibTorch, CUDA and NCCL this build has, and the CUDA devices it sees.
  app.set_version_flag("--version", [] { return ddp_embed::build_info(); });
  app.require_subcommand(1);

  auto* train = app.add_subcommand("train", "train a model (the default subcommand)");
  std::string config_path;
  std::vector<std::string> overrides;
  bool print_config = false;
  // Checked after parsing, not with required(): CLI11 checks requirements before unknown
  // options, so a mistyped "--confgi" would be reported as a missing --config.
  train->add_option("--config", config_path, "JSON config file (required)");
  train->add_option("--set", overrides, "override a config key: KEY=VALUE (repeatable)");
  train->add_flag("--print-config", print_config, "print the resolved config and exit");
  int64_t profile_steps = -1;
  train->add_option("--profile", profile_steps,
                    "record N steps with LibTorch's profiler on rank 0 (output.profile_steps): "
                    "OUTPUT_DIR/profile-rank0.json, a Chrome trace, and the top ops in the log");

  auto* prepare = app.add_subcommand(
      "prepare", "tokenize data.train once into a prepared folder that runs memory-map (data.prepared, or data.train "
                 "naming it); alone or under ddp-launch, the workers sharing the work");
  std::string prepare_config, prepare_output;
  std::vector<std::string> prepare_overrides;
  prepare->add_option("--config", prepare_config, "the run's JSON config: its data.train, tokenizer and max_length")
      ->required();
  prepare->add_option("--set", prepare_overrides, "override a config key: KEY=VALUE (repeatable)");
  prepare->add_option("--output", prepare_output, "the prepared folder (default: the config's data.prepared)");

  auto* encode = app.add_subcommand("encode", "embed sentences with a trained model");
  ddp_embed::EncodeOptions enc;
  encode->add_option("--model", enc.model_dir, "model folder (ours or Hugging Face BERT)")->required();
  encode->add_option("--input", enc.input, "text file (one sentence a line) or JSONL (\"text\")")->required();
  encode->add_option("--output", enc.output, "output: .jsonl or .npy")->required();
  encode->add_option("--batch-size", enc.batch_size, "sentences per batch")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  encode->add_option("--device", enc.device, "cpu or cuda[:N]")->capture_default_str();
  encode->add_option("--pooling", enc.pooling,
                     "cls, mean or lasttoken (default: the folder's Pooling module; for a plain Hugging Face folder cls, lasttoken for a decoder)");
  encode->add_flag("--normalize", enc.normalize,
                   "L2-normalize the embeddings (always done for a folder with a Normalize module)");
  OptionalValue<std::string> enc_prompt_name, enc_prompt;
  auto* prompt_name_option = add_optional(encode, "--prompt-name", enc_prompt_name,
                                          "put the folder's prompt of this name before each sentence (default: the "
                                          "folder's default_prompt_name, if any)");
  add_optional(encode, "--prompt", enc_prompt, "put this text before each sentence (\"\": none)")
      ->excludes(prompt_name_option);

  auto* eval = app.add_subcommand("eval", "evaluate a model on a JSONL pair file");
  ddp_embed::EvalOptions ev;
  eval->add_option("--model", ev.model_dir, "model folder (ours or Hugging Face BERT)")->required();
  eval->add_option("--data", ev.data, "JSONL pairs (query/pos, or text1/text2/score)")->required();
  eval->add_option("--task", ev.task, "retrieval or sts (default: sts when pairs have scores)")
      ->check(CLI::IsMember({"retrieval", "sts"}));
  eval->add_option("--batch-size", ev.batch_size, "sentences per batch")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  eval->add_option("--device", ev.device, "cpu or cuda[:N]")->capture_default_str();
  eval->add_option("--pooling", ev.pooling,
                   "cls, mean or lasttoken (default: the folder's Pooling module; for a plain Hugging Face folder cls, lasttoken for a decoder)");
  eval->add_option("--format", ev.format, "stdout: a table, or one JSON object")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  eval->add_option("--json", ev.json_out, "also write the metrics as JSON to this file");

  auto* tokenize = app.add_subcommand("tokenize", "write the token ids encode would feed the model, as JSONL");
  ddp_embed::TokenizeOptions tk;
  tokenize->add_option("--model", tk.model_dir, "model folder (ours, sentence-transformers or Hugging Face BERT)")
      ->required();
  tokenize->add_option("--input", tk.input, "text file (one sentence a line) or JSONL (\"text\")")->required();
  tokenize->add_option("--output", tk.output, "JSONL: {\"ids\": [...]} a line, in input order")->required();

  auto* mine = app.add_subcommand(
      "mine", "mine hard negatives for JSONL pairs with a model (sentence-transformers' mine_hard_negatives, "
              "sampling top, n-tuple output); alone or under ddp-launch");
  ddp_embed::MineOptions mn;
  mine->add_option("--model", mn.model_dir, "model folder (ours, sentence-transformers or Hugging Face BERT)")
      ->required();
  mine->add_option("--input", mn.input, "JSONL pairs (query/pos, anchor/positive or text1/text2)")->required();
  mine->add_option("--output", mn.output, "JSONL {\"query\", \"pos\", \"neg\": [...]} a line, written atomically")
      ->required();
  mine->add_option("--corpus", mn.corpus,
                   "more candidate negatives: a text file (one a line) or JSONL (\"text\"); the positives always are");
  mine->add_option("--num-negatives", mn.num_negatives, "negatives a line")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  mine->add_option("--range-min", mn.range_min, "skip this many best candidates left after the filters")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  OptionalValue<int64_t> range_max;
  add_optional(mine, "--range-max", range_max,
               "candidates ranked at most this far (default: range-min + num-negatives + the most positives of a "
               "query; 10 x num-negatives with a margin or max-score)")
      ->check(CLI::PositiveNumber);
  OptionalValue<double> max_score, min_score, absolute_margin, relative_margin;
  add_optional(mine, "--max-score", max_score, "skip candidates scoring above this");
  add_optional(mine, "--min-score", min_score, "skip candidates scoring below this");
  add_optional(mine, "--absolute-margin", absolute_margin,
               "skip candidates scoring above the query's lowest positive score minus this");
  add_optional(mine, "--relative-margin", relative_margin,
               "skip candidates scoring above the lowest positive score minus its magnitude times this (0.05: 5%)");
  OptionalValue<std::string> query_prompt_name, query_prompt, corpus_prompt_name, corpus_prompt;
  auto* qpn = add_optional(mine, "--query-prompt-name", query_prompt_name,
                           "the folder's prompt before each query (default: its \"query\" prompt, if any)");
  add_optional(mine, "--query-prompt", query_prompt, "this text before each query (\"\": none)")->excludes(qpn);
  auto* cpn = add_optional(mine, "--corpus-prompt-name", corpus_prompt_name,
                           "the folder's prompt before each corpus text (default: its \"document\" prompt, if any)");
  add_optional(mine, "--corpus-prompt", corpus_prompt, "this text before each corpus text (\"\": none)")
      ->excludes(cpn);
  mine->add_flag("--output-scores", mn.output_scores,
                 "also write the model's scores of each line's positives and negatives (\"pos_scores\", "
                 "\"neg_scores\"): teacher scores for loss.distill");
  mine->add_option("--batch-size", mn.batch_size, "sentences per batch")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  mine->add_option("--device", mn.device, "cpu, cuda (each worker its local rank's GPU) or cuda:N")
      ->capture_default_str();

  auto* tok = app.add_subcommand("tokenizer", "train a sentencepiece tokenizer");
  std::vector<std::string> tok_inputs;
  int vocab_size = 8000;
  std::string tok_output;
  tok->add_option("--input", tok_inputs, "JSONL pair files or text files")->required();
  tok->add_option("--vocab-size", vocab_size, "vocabulary size")->required();
  tok->add_option("--output", tok_output, "output folder")->required();

  auto* plot = app.add_subcommand("plot", "draw a run's metrics.jsonl as an SVG figure");
  std::string plot_metrics, plot_output;
  plot->add_option("--metrics", plot_metrics, "metrics.jsonl of a training run")->required();
  plot->add_option("--output", plot_output, "SVG file (default: metrics.svg beside the metrics file)");

  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (*train && config_path.empty()) {
    std::fprintf(stderr, "--config FILE is required\nRun with --help for more information.\n");
    return 2;
  }

  try {
    if (*train) {
      if (profile_steps >= 0) overrides.push_back("output.profile_steps=" + std::to_string(profile_steps));
      ddp_embed::Config config = ddp_embed::load_config(config_path, overrides);
      if (print_config) {
        std::printf("%s\n", ddp_embed::config_to_json(config).dump(2).c_str());
        return 0;
      }
      return ddp_embed::run_training(config);
    }
    if (*prepare) {
      const ddp_embed::Config config = ddp_embed::load_config(prepare_config, prepare_overrides);
      if (prepare_output.empty() && !config.data.prepared)
        throw std::invalid_argument("prepare: give --output DIR, or data.prepared in " + prepare_config);
      return ddp_embed::run_prepare(config, prepare_output.empty() ? *config.data.prepared : prepare_output);
    }
    ddp_embed::init_console_log();
    if (*encode) {
      enc_prompt_name.into(enc.prompt_name);
      enc_prompt.into(enc.prompt);
      return ddp_embed::run_encode(enc);
    }
    if (*mine) {
      range_max.into(mn.range_max);
      max_score.into(mn.max_score);
      min_score.into(mn.min_score);
      absolute_margin.into(mn.absolute_margin);
      relative_margin.into(mn.relative_margin);
      query_prompt_name.into(mn.query_prompt_name);
      query_prompt.into(mn.query_prompt);
      corpus_prompt_name.into(mn.corpus_prompt_name);
      corpus_prompt.into(mn.corpus_prompt);
      return ddp_embed::run_mine(mn);
    }
    if (*eval) return ddp_embed::run_eval(ev);
    if (*tokenize) return ddp_embed::run_tokenize(tk);
    if (*tok) {
      ddp_embed::train_sentencepiece(tok_inputs, vocab_size, tok_output);
      spdlog::info("tokenizer written to {}", tok_output);
      return 0;
    }
    if (*plot) {
      const auto summary = ddp_embed::plot_metrics_file(plot_metrics, plot_output);
      spdlog::info("{} training steps and {} evaluations drawn to {}", summary.training_steps, summary.eval_steps,
                   summary.output);
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "embed-train: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
