// embed-train: one training worker (started by ddp-launch, torchrun, srun or by hand),
// plus the prepare / encode / eval / rerank / tokenize / mine / tokenizer / plot tools. Parses the
// command line and calls lib/: main dispatches to one function per subcommand, each owning
// its options and its run.
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli_checks.h"
#include "config/config.h"
#include "data/pairs.h"
#include "data/text_corpus.h"
#include "io/manifest.h"
#include "io/safetensors.h"
#include "model/model_error.h"
#include "report/metrics_plot.h"
#include "tokenize/tokenizer.h"
#include "train/build_info.h"
#include "train/inference.h"
#include "train/mine.h"
#include "train/prepare.h"
#include "train/rerank_inference.h"
#include "train/trainer.h"
#include "util/log.h"
#include "util/exit_status.h"
#include "util/malloc_tuning.h"

namespace {

using namespace ddp_embed;

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

// A subcommand: its options, registered on the app, and its run once the command line is
// parsed. The options live as long as `run` (each add_* function keeps them in a shared
// struct the two capture).
struct Subcommand {
  CLI::App* command;
  std::function<int()> run;
};

const char* const kModelFolder =
    "model folder (ours, sentence-transformers or Hugging Face: BERT, XLM-RoBERTa, MPNet, ModernBERT, Qwen3)";
const char* const kPoolingHelp =
    "cls, mean or lasttoken (default: the folder's Pooling module; for a plain Hugging Face folder cls, lasttoken for "
    "a decoder)";

Subcommand add_train(CLI::App& app) {
  struct Options {
    std::string config_path;
    std::vector<std::string> overrides;
    bool print_config = false;
    int64_t profile_steps = -1;
  };
  auto o = std::make_shared<Options>();
  auto* train = app.add_subcommand("train", "train a model (the default subcommand)");
  // Checked after parsing, not with required(): CLI11 checks requirements before unknown
  // options, so a mistyped "--confgi" would be reported as a missing --config.
  train->add_option("--config", o->config_path, "JSON config file (required)");
  train->add_option("--set", o->overrides, "override a config key: KEY=VALUE (repeatable)");
  train->add_flag("--print-config", o->print_config, "print the resolved config and exit");
  train->add_option("--profile", o->profile_steps,
                    "record N steps with LibTorch's profiler on rank 0 (output.profile_steps): "
                    "OUTPUT_DIR/profile-rank0.json, a Chrome trace, and the top ops in the log")
      ->check(cli::non_negative_integer());
  return {train, [o] {
            if (o->config_path.empty()) {
              std::fprintf(stderr, "--config FILE is required\nRun with --help for more information.\n");
              return 2;
            }
            if (o->profile_steps >= 0) o->overrides.push_back("output.profile_steps=" + std::to_string(o->profile_steps));
            const Config config = load_config(o->config_path, o->overrides);
            if (o->print_config) {
              std::printf("%s\n", config_to_json(config).dump(2).c_str());
              return 0;
            }
            return run_training(config);
          }};
}

Subcommand add_prepare(CLI::App& app) {
  struct Options {
    std::string config_path, output;
    std::vector<std::string> overrides;
  };
  auto o = std::make_shared<Options>();
  auto* prepare = app.add_subcommand(
      "prepare", "tokenize data.train once into a prepared folder that runs memory-map (data.prepared, or data.train "
                 "naming it); alone or under ddp-launch, the workers sharing the work");
  prepare->add_option("--config", o->config_path, "the run's JSON config: its data.train, tokenizer and max_length")
      ->required();
  prepare->add_option("--set", o->overrides, "override a config key: KEY=VALUE (repeatable)");
  prepare->add_option("--output", o->output, "the prepared folder (default: the config's data.prepared)");
  return {prepare, [o] {
            const Config config = load_config(o->config_path, o->overrides);
            if (o->output.empty() && !config.data.prepared)
              throw std::invalid_argument("prepare: give --output DIR, or data.prepared in " + o->config_path);
            return run_prepare(config, o->output.empty() ? *config.data.prepared : o->output);
          }};
}

Subcommand add_encode(CLI::App& app) {
  struct Options {
    EncodeOptions encode;
    OptionalValue<std::string> prompt_name, prompt;
  };
  auto o = std::make_shared<Options>();
  EncodeOptions& enc = o->encode;
  auto* encode = app.add_subcommand("encode", "embed sentences with a trained model");
  encode->add_option("--model", enc.model_dir, kModelFolder)->required();
  encode->add_option("--input", enc.input, "text file (one sentence a line) or JSONL (\"text\")")->required();
  encode->add_option("--output", enc.output, "output: .jsonl or .npy")->required();
  encode->add_option("--batch-size", enc.batch_size, "sentences per batch")
      ->check(cli::positive_integer())
      ->capture_default_str();
  encode->add_option("--device", enc.device, "cpu or cuda[:N]")->capture_default_str();
  encode->add_option("--pooling", enc.pooling, kPoolingHelp);
  encode->add_flag("--normalize", enc.normalize,
                   "L2-normalize the embeddings (always done for a folder with a Normalize module)");
  auto* prompt_name_option = add_optional(encode, "--prompt-name", o->prompt_name,
                                          "put the folder's prompt of this name before each sentence (default: the "
                                          "folder's default_prompt_name, if any)");
  add_optional(encode, "--prompt", o->prompt, "put this text before each sentence (\"\": none)")
      ->excludes(prompt_name_option);
  encode->add_option("--max-active-dims", enc.max_active_dims,
                     "a sparse encoder: keep each vector's largest K entries (default: as the folder says)")
      ->check(cli::positive_integer());
  return {encode, [o] {
            init_console_log();
            o->prompt_name.into(o->encode.prompt_name);
            o->prompt.into(o->encode.prompt);
            return run_encode(o->encode);
          }};
}

Subcommand add_eval(CLI::App& app) {
  auto ev = std::make_shared<EvalOptions>();
  auto* eval = app.add_subcommand(
      "eval", "evaluate a model on a JSONL pair file or a BEIR folder (with --first-stage: a reranker on one)");
  eval->add_option("--model", ev->model_dir, kModelFolder)->required();
  auto* data = eval->add_option("--data", ev->data, "JSONL pairs (query/pos, or text1/text2/score)");
  auto* beir = eval->add_option("--beir", ev->beir, "a BEIR folder: corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv");
  data->excludes(beir);
  eval->add_option("--split", ev->split, "--beir: the qrels to read, qrels/SPLIT.tsv (default: test, or the only one)")
      ->needs(beir);
  eval->add_option("--save-embeddings", ev->embeddings_out,
                   "--beir: also write the ranked embeddings (unit rows) to this folder as queries.npy and corpus.npy")
      ->needs(beir);
  eval->add_option("--query-prompt", ev->query_prompt, "--beir: text put before each query")->needs(beir);
  eval->add_option("--corpus-prompt", ev->corpus_prompt, "--beir: text put before each document")->needs(beir);
  eval->add_option("--task", ev->task, "retrieval or sts (default: sts when pairs have scores)")
      ->check(CLI::IsMember({"retrieval", "sts"}));
  eval->add_option("--batch-size", ev->batch_size, "sentences per batch")
      ->check(cli::positive_integer())
      ->capture_default_str();
  eval->add_option("--device", ev->device, "cpu or cuda[:N]")->capture_default_str();
  eval->add_option("--pooling", ev->pooling, kPoolingHelp);
  eval->add_option("--format", ev->format, "stdout: a table, or one JSON object")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  eval->add_option("--json", ev->json_out, "also write the metrics as JSON to this file");
  eval->add_option("--max-active-dims", ev->max_active_dims,
                   "--beir, a sparse encoder: keep each vector's largest K entries (default: as the folder says)")
      ->check(cli::positive_integer())
      ->needs(beir);
  auto* first_stage = eval->add_option("--first-stage", ev->first_stage,
                                       "--beir: a bi-encoder folder ranks the corpus; --model, a cross-encoder "
                                       "folder, reranks each query's top k (both metric sets reported)")
                          ->needs(beir);
  eval->add_option("--top-k", ev->top_k, "--first-stage: the documents of each query reranked")
      ->check(cli::positive_integer())
      ->needs(first_stage)
      ->capture_default_str();
  eval->add_option("--output", ev->rerank_out,
                   "--first-stage: write each query's reranked top k as JSONL ({\"query_id\", \"ranking\"})")
      ->needs(first_stage);
  first_stage->excludes(eval->get_option("--save-embeddings"));
  first_stage->excludes(eval->get_option("--max-active-dims"));  // the first stage is dense
  return {eval, [ev] {
            if (ev->data.empty() == ev->beir.empty())
              throw CLI::RequiredError("eval needs --data FILE or --beir DIR (one of them)");
            init_console_log();
            return run_eval(*ev);
          }};
}

Subcommand add_rerank(CLI::App& app) {
  auto rr = std::make_shared<RerankOptions>();
  auto* rerank = app.add_subcommand("rerank", "score (query, document) pairs with a cross-encoder folder");
  rerank->add_option("--model", rr->model_dir,
                     "cross-encoder folder (ours, or sentence-transformers' CrossEncoder: BERT, XLM-RoBERTa)")
      ->required();
  rerank->add_option("--input", rr->input,
                     "JSONL: {\"query\", \"doc\"} a line (or \"document\", \"passage\"; or \"text1\", \"text2\")")
      ->required();
  rerank->add_option("--output", rr->output,
                     "JSONL: {\"score\": s} a line ({\"scores\": [...]} for several labels), in input order")
      ->required();
  rerank->add_option("--batch-size", rr->batch_size, "pairs per batch")
      ->check(cli::positive_integer())
      ->capture_default_str();
  rerank->add_option("--max-length", rr->max_length, "tokens of a joined pair (default: the folder's)")
      ->check(cli::positive_integer());
  rerank->add_option("--device", rr->device, "cpu or cuda[:N]")->capture_default_str();
  return {rerank, [rr] {
            init_console_log();
            return run_rerank(*rr);
          }};
}

Subcommand add_tokenize(CLI::App& app) {
  auto tk = std::make_shared<TokenizeOptions>();
  auto* tokenize = app.add_subcommand("tokenize", "write the token ids encode would feed the model, as JSONL");
  tokenize->add_option("--model", tk->model_dir, kModelFolder)->required();
  tokenize->add_option("--input", tk->input, "text file (one sentence a line) or JSONL (\"text\")")->required();
  tokenize->add_option("--output", tk->output, "JSONL: {\"ids\": [...]} a line, in input order")->required();
  return {tokenize, [tk] {
            init_console_log();
            return run_tokenize(*tk);
          }};
}

Subcommand add_mine(CLI::App& app) {
  struct Options {
    MineOptions mine;
    OptionalValue<int64_t> range_max;
    OptionalValue<double> max_score, min_score, absolute_margin, relative_margin;
    OptionalValue<std::string> query_prompt_name, query_prompt, corpus_prompt_name, corpus_prompt;
  };
  auto o = std::make_shared<Options>();
  MineOptions& mn = o->mine;
  auto* mine = app.add_subcommand(
      "mine", "mine hard negatives for JSONL pairs with a model (sentence-transformers' mine_hard_negatives, "
              "sampling top, n-tuple output); alone or under ddp-launch");
  mine->add_option("--model", mn.model_dir, kModelFolder)->required();
  mine->add_option("--input", mn.input, "JSONL pairs (query/pos, anchor/positive or text1/text2)")->required();
  mine->add_option("--output", mn.output, "JSONL {\"query\", \"pos\", \"neg\": [...]} a line, written atomically")
      ->required();
  mine->add_option("--corpus", mn.corpus,
                   "more candidate negatives: a text file (one a line) or JSONL (\"text\"); the positives always are");
  mine->add_option("--num-negatives", mn.num_negatives, "negatives a line")
      ->check(cli::positive_integer())
      ->capture_default_str();
  mine->add_option("--range-min", mn.range_min, "skip this many best candidates left after the filters")
      ->check(cli::non_negative_integer())
      ->capture_default_str();
  add_optional(mine, "--range-max", o->range_max,
               "candidates ranked at most this far (default: range-min + num-negatives + the most positives of a "
               "query; 10 x num-negatives with a margin or max-score)")
      ->check(cli::positive_integer());
  add_optional(mine, "--max-score", o->max_score, "skip candidates scoring above this")->check(cli::finite_number());
  add_optional(mine, "--min-score", o->min_score, "skip candidates scoring below this")->check(cli::finite_number());
  add_optional(mine, "--absolute-margin", o->absolute_margin,
               "skip candidates scoring above the query's lowest positive score minus this")
      ->check(cli::finite_number());
  add_optional(mine, "--relative-margin", o->relative_margin,
               "skip candidates scoring above the lowest positive score minus its magnitude times this (0.05: 5%)")
      ->check(cli::finite_number());
  auto* qpn = add_optional(mine, "--query-prompt-name", o->query_prompt_name,
                           "the folder's prompt before each query (default: its \"query\" prompt, if any)");
  add_optional(mine, "--query-prompt", o->query_prompt, "this text before each query (\"\": none)")->excludes(qpn);
  auto* cpn = add_optional(mine, "--corpus-prompt-name", o->corpus_prompt_name,
                           "the folder's prompt before each corpus text (default: its \"document\" prompt, if any)");
  add_optional(mine, "--corpus-prompt", o->corpus_prompt, "this text before each corpus text (\"\": none)")
      ->excludes(cpn);
  mine->add_flag("--output-scores", mn.output_scores,
                 "also write the model's scores of each line's positives and negatives (\"pos_scores\", "
                 "\"neg_scores\"): teacher scores for loss.distill");
  mine->add_option("--batch-size", mn.batch_size, "sentences per batch")
      ->check(cli::positive_integer())
      ->capture_default_str();
  mine->add_option("--device", mn.device, "cpu, cuda (each worker its local rank's GPU) or cuda:N")
      ->capture_default_str();
  return {mine, [o] {
            init_console_log();
            MineOptions& options = o->mine;
            o->range_max.into(options.range_max);
            o->max_score.into(options.max_score);
            o->min_score.into(options.min_score);
            o->absolute_margin.into(options.absolute_margin);
            o->relative_margin.into(options.relative_margin);
            o->query_prompt_name.into(options.query_prompt_name);
            o->query_prompt.into(options.query_prompt);
            o->corpus_prompt_name.into(options.corpus_prompt_name);
            o->corpus_prompt.into(options.corpus_prompt);
            return run_mine(options);
          }};
}

Subcommand add_tokenizer(CLI::App& app) {
  struct Options {
    std::vector<std::string> inputs;
    int vocab_size = 8000;
    std::string output;
    std::string config, split = "train";  // a dataset folder's
  };
  auto o = std::make_shared<Options>();
  auto* tokenizer = app.add_subcommand("tokenizer", "train a sentencepiece tokenizer");
  tokenizer->add_option("--input", o->inputs,
                        "files of pairs or texts (JSONL, Parquet, Arrow, CSV, TSV, plain text; globs), or dataset "
                        "folders (--config, --split)")
      ->required();
  tokenizer->add_option("--config", o->config, "a dataset folder's config (default: as datasets chooses it)");
  tokenizer->add_option("--split", o->split, "a dataset folder's split")->capture_default_str();
  tokenizer->add_option("--vocab-size", o->vocab_size, "vocabulary size")->required()->check(cli::positive_integer());
  tokenizer->add_option("--output", o->output, "output folder")->required();
  return {tokenizer, [o] {
            init_console_log();
            // Files, globs and dataset folders (--config, --split) as data.train names them.
            DatasetChoice choice{o->config, {o->split}, "tokenizer", /*command_line=*/true};
            TextCorpus corpus({{resolve_data_files(o->inputs, choice).files, {}, ""}});
            std::string origin;
            for (const auto& input : o->inputs) origin += (origin.empty() ? "" : ", ") + input;
            train_sentencepiece([&corpus](std::string& sentence) { return corpus.next(sentence); }, o->vocab_size,
                                o->output, origin);
            spdlog::info("tokenizer written to {}", o->output);
            return 0;
          }};
}

Subcommand add_plot(CLI::App& app) {
  struct Options {
    std::string metrics, output;
  };
  auto o = std::make_shared<Options>();
  auto* plot = app.add_subcommand("plot", "draw a run's metrics.jsonl as an SVG figure");
  plot->add_option("--metrics", o->metrics, "metrics.jsonl of a training run")->required();
  plot->add_option("--output", o->output, "SVG file (default: metrics.svg beside the metrics file)");
  return {plot, [o] {
            init_console_log();
            const auto summary = plot_metrics_file(o->metrics, o->output);
            spdlog::info("{} training steps and {} evaluations drawn to {}", summary.training_steps, summary.eval_steps,
                         summary.output);
            return 0;
          }};
}

// `embed-train --config x` means `embed-train train --config x`: the arguments with
// "train" put first when they name no subcommand (nor --help or --version).
std::vector<char*> with_default_subcommand(int argc, char** argv, const std::vector<Subcommand>& subcommands) {
  std::vector<char*> args(argv, argv + argc);
  if (argc < 2) return args;
  for (const Subcommand& s : subcommands)
    if (s.command->get_name() == argv[1]) return args;
  for (const char* flag : {"--help", "-h", "--version"})
    if (std::strcmp(argv[1], flag) == 0) return args;
  static char train_word[] = "train";
  args.insert(args.begin() + 1, train_word);
  return args;
}

// Errors of the input, which the same command meets again however often it runs: their
// exit status tells ddp-launch not to restart (util/exit_status.h). Anything else (a lost
// peer, a network error, a killed process) may pass, and exits 1.
bool is_bad_input(const std::exception& e) {
  return dynamic_cast<const ddp_embed::ConfigError*>(&e) || dynamic_cast<const ddp_embed::DataError*>(&e) ||
         dynamic_cast<const ddp_embed::TokenizerError*>(&e) || dynamic_cast<const ddp_embed::ModelError*>(&e) ||
         dynamic_cast<const ddp_embed::SafetensorsError*>(&e) || dynamic_cast<const ddp_embed::ManifestError*>(&e);
}

}  // namespace

int main(int argc, char** argv) {
  // Before any thread starts: where glibc's malloc serves (no tcmalloc), keep tensor-sized
  // allocations on the heap (util/malloc_tuning.h).
  ddp_embed::tune_malloc_for_tensors();
  CLI::App app{"embed-train: contrastive sentence-embedding training (BERT, XLM-RoBERTa or Qwen3 encoders, "
               "optional projection)"};
  // --version: what LibTorch, CUDA and NCCL this build has, and the CUDA devices it sees.
  app.set_version_flag("--version", [] { return ddp_embed::build_info(); });
  app.require_subcommand(1);
  const std::vector<Subcommand> subcommands = {add_train(app),    add_prepare(app),  add_encode(app),
                                               add_eval(app),     add_rerank(app),   add_tokenize(app),
                                               add_mine(app),     add_tokenizer(app), add_plot(app)};

  std::vector<char*> args = with_default_subcommand(argc, argv, subcommands);
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (const Subcommand& s : subcommands)
      if (*s.command) return s.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "embed-train: error: %s\n", e.what());
    // A training (what ddp-launch restarts) says which failures a restart cannot mend.
    return app.got_subcommand("train") && is_bad_input(e) ? ddp_embed::kExitBadInput : 1;
  }
  return 0;
}
