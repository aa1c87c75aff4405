// Helpers for the end-to-end tests: run the real binaries, write configs, read
// metrics.jsonl and model files.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../core/python_fixtures.h"
#include "../core/tolerance.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace e2e {

inline const std::string kBin = DDP_EMBED_BINARY_DIR;
inline const std::string kSrc = DDP_EMBED_SOURCE_DIR;
#ifdef DDP_EMBED_PYTHON  // the reference environment's python
inline const std::string kPython = DDP_EMBED_PYTHON;
#endif
#ifdef DDP_EMBED_MINILM_DIR  // torch_tests': all-MiniLM-L6-v2 as the reference environment
inline const std::string kMiniLM = DDP_EMBED_MINILM_DIR;  // ships it; empty: not found
#endif

struct RunResult {
  int exit_code = -1;
  std::string output;
};

// Runs a shell command, capturing stdout and stderr together.
inline RunResult run(const std::string& command) {
  RunResult r;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// The folders fresh_dir() made are removed when their test (or, for a folder made in
// SetUpTestSuite, their suite) passes; a failure keeps them to read, and KEEP_TEST_RUNS=1
// keeps every one. Why: each run writes a model of up to 90 MB, and the whole suite's
// folders together are more than a CI machine's disk holds.
class RemoveFoldersOfPassedTests : public ::testing::EmptyTestEventListener {
 public:
  // The listener, appended to gtest's on first use (gtest owns and deletes it).
  static RemoveFoldersOfPassedTests& installed() {
    static RemoveFoldersOfPassedTests* const listener = [] {
      auto* l = new RemoveFoldersOfPassedTests;
      ::testing::UnitTest::GetInstance()->listeners().Append(l);
      return l;
    }();
    return *listener;
  }
  void add(const fs::path& dir) {
    (::testing::UnitTest::GetInstance()->current_test_info() ? of_test_ : of_suite_).push_back(dir);
  }
  void OnTestEnd(const ::testing::TestInfo& test) override { remove_if(test.result()->Passed(), of_test_); }
  void OnTestSuiteEnd(const ::testing::TestSuite& suite) override { remove_if(suite.Passed(), of_suite_); }

 private:
  static void remove_if(bool passed, std::vector<fs::path>& dirs) {
    if (passed && !std::getenv("KEEP_TEST_RUNS")) {
      std::error_code ignored;  // a folder a test removed itself is fine
      for (const auto& d : dirs) fs::remove_all(d, ignored);
    }
    dirs.clear();
  }
  std::vector<fs::path> of_test_, of_suite_;
};

// An empty folder test-runs/NAME-PID, removed again when the test passes.
inline fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::path(kBin) / "test-runs" / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  RemoveFoldersOfPassedTests::installed().add(d);
  return d;
}

// A tiny BERT on the real uncased vocabulary, deterministic (no dropout), small steps.
inline json tiny_config(const fs::path& out) {
  return {{"model", {{"vocab_size", 30522}, {"hidden_size", 32}, {"num_layers", 2}, {"num_heads", 4},
                     {"intermediate_size", 64}, {"max_position", 64}, {"dropout", 0.0}, {"pooling", "mean"},
                     {"projection_dim", 16}}},
          {"tokenizer", {{"type", "wordpiece"}, {"path", kSrc + "/tests/fixtures/golden/vocab.txt"}, {"max_length", 32}}},
          {"data", {{"train", kBin + "/test-data/train.jsonl"}, {"eval", nullptr}}},
          {"loss", {{"type", "pairwise_sigmoid"}, {"temperature", 0.05}}},
          {"train", {{"batch_size", 16}, {"grad_accum_steps", 1}, {"lr", 1e-3}, {"warmup_steps", 0},
                     {"schedule", "constant"}, {"max_steps", 5}, {"seed", 7}}},
          {"dist", {{"timeout_s", 60}}},
          {"output", {{"dir", out.string()}, {"log_every", 1}, {"save_every", 0}, {"eval_every", 0},
                      {"resume", "never"}}}};
}

inline fs::path write_config(const fs::path& dir, const json& cfg) {
  fs::path p = dir / "config.json";
  std::ofstream(p) << cfg.dump(2);
  return p;
}

// One intra-op thread in every run: then a micro-batch's gradient is computed with the
// same operations in the same order whatever the world size, and runs that must agree
// differ only by the summation order of the averaging.
inline const std::string kThreads = "OMP_NUM_THREADS=1 ";

// The command line `[ENV] ddp-launch --nproc N --master-port 0 [LAUNCHER_ARGS] embed-train
// --config CONFIG`, with one intra-op thread; `env` is a list of VAR=value assignments.
inline std::string launch_command(const fs::path& config, int nproc, const std::string& env = "",
                                  const std::string& launcher_args = "") {
  return kThreads + (env.empty() ? "" : env + " ") + kBin + "/ddp-launch --nproc " + std::to_string(nproc) +
         " --master-port 0 " + (launcher_args.empty() ? "" : launcher_args + " ") + kBin +
         "/embed-train --config " + config.string();
}

// Writes dir/config.json and runs launch_command() on it.
inline RunResult train(const fs::path& dir, const json& cfg, int nproc, const std::string& env = "",
                       const std::string& launcher_args = "") {
  return run(launch_command(write_config(dir, cfg), nproc, env, launcher_args));
}

// A training run shared by the tests of a suite, which ctest starts as one process each:
// the first to get here trains, the others (also running in parallel) wait for it and
// reuse the result. `config(dir)` gives the run's config (its output.dir inside dir);
// `prepare(dir)`, when given, writes the inputs it needs. The run is redone when the
// config or the binaries change, so a test never reads a folder an older embed-train
// wrote. Returns dir; on failure `error` holds the run's output.
inline fs::path shared_run(const std::string& name, const std::function<json(const fs::path& dir)>& config,
                           std::string& error, const std::function<void(const fs::path& dir)>& prepare = {},
                           int nproc = 1) {
  // A run on another CPU kernel path (tests/cpu_paths/on_cpu_path.sh) is a run of its own.
  const char* cpu_path = std::getenv("ATEN_CPU_CAPABILITY");
  const fs::path dir =
      fs::path(kBin) / "test-runs" / ("shared-" + name + (cpu_path && *cpu_path ? std::string("-") + cpu_path : ""));
  fs::create_directories(dir.parent_path());
  const std::string lock_path = dir.string() + ".lock";
  const int lock = ::open(lock_path.c_str(), O_CREAT | O_RDWR, 0644);
  if (lock < 0 || ::flock(lock, LOCK_EX) != 0) {
    error = "cannot lock " + lock_path;
    if (lock >= 0) ::close(lock);
    return dir;
  }
  auto binary_stamp = [](const char* binary) {
    const fs::path p = fs::path(kBin) / binary;
    return std::to_string(fs::last_write_time(p).time_since_epoch().count()) + " " + std::to_string(fs::file_size(p));
  };
  const json cfg = config(dir);
  const std::string stamp = cfg.dump() + "\n" + binary_stamp("embed-train") + "\n" + binary_stamp("ddp-launch") + "\n";
  std::ostringstream old;
  old << std::ifstream(dir / "stamp").rdbuf();
  if (old.str() != stamp) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    if (prepare) prepare(dir);
    const RunResult r = run(launch_command(write_config(dir, cfg), nproc));
    if (r.exit_code == 0) std::ofstream(dir / "stamp") << stamp;
    else error = r.output;
  }
  ::flock(lock, LOCK_UN);
  ::close(lock);
  return dir;
}

// DDP_EMBED_TEST_SAMPLE_LOG=LOG's record: the pairs each step (1-based) trained on, over
// every rank, in rank order.
inline std::map<int64_t, std::vector<int64_t>> trained_pairs(const fs::path& log, int ranks) {
  std::map<int64_t, std::vector<int64_t>> out;
  for (int r = 0; r < ranks; ++r) {
    std::ifstream in(log.string() + ".rank" + std::to_string(r));
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      int64_t step, rank, index;
      fields >> step >> rank;
      while (fields >> index) out[step].push_back(index);
    }
  }
  return out;
}

inline std::vector<json> metric_lines(const fs::path& out) {
  std::vector<json> lines;
  std::ifstream in(out / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) lines.push_back(json::parse(line));
  return lines;
}

inline std::vector<double> series(const fs::path& out, const std::string& key) {
  std::vector<double> v;
  for (auto& l : metric_lines(out))
    if (l.contains(key)) v.push_back(l[key].get<double>());
  return v;
}

inline std::map<std::string, std::vector<float>> weights(const fs::path& file) {
  auto f = ddp_embed::read_safetensors(file.string());
  std::map<std::string, std::vector<float>> out;
  for (const auto& t : f.tensors()) {
    std::vector<float> v(t.nbytes / sizeof(float));
    std::memcpy(v.data(), t.data, t.nbytes);
    out[t.name] = std::move(v);
  }
  return out;
}

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// ---- runs that must train the same model: the bounds (tests/core/tolerance.h) ----------

// What a run's config says about its rounding: the longest sums of a step, the softmax's
// sensitivity, the steps and the largest learning rate.
struct RunRounding {
  int64_t sum_terms;   // a weight's gradient adds one term per token of the global batch
  double temperature;  // the loss's scores are cosines / loss.temperature
  int steps;  // train.max_steps; 0 where the config counts epochs (expect_same_model reads the run's)
  double lr;
};

inline RunRounding run_rounding(const json& cfg) {
  const json& train = cfg.at("train");
  const int64_t texts = 2 + (cfg.contains("data") ? cfg["data"].value("negatives_per_query", 0) : 0);
  const int64_t max_length = cfg.contains("tokenizer") ? cfg["tokenizer"].value("max_length", 64) : 64;
  const double temperature = cfg.contains("loss") ? cfg["loss"].value("temperature", 0.05) : 0.05;
  return {train.value("batch_size", 64) * texts * max_length, temperature, std::max(0, train.value("max_steps", 0)),
          train.value("lr", 1e-4)};
}

// How far a step's loss or gradient norm may move, relative, when its sums are added in
// another order: tolerance::step_rounding of its longest sums, times the softmax's
// sensitivity. Why the second factor: the loss ranks cosines divided by the temperature,
// so a rounding of δ in a cosine moves a score by δ/τ, and the loss and the gradients,
// which are the softmax's probabilities times 1/τ, by as much relative to their size. The
// tiny runs of tiny_config (16 pairs of up to 32 tokens, τ = 0.05): 6.1e-4. Measured on
// such a run, a step's micro-batches cut otherwise (other in-batch negatives) move each
// step's loss by 0.7% to 3.8%, a batch one pair short by 1.7% at the first step.
inline double step_bound(const RunRounding& r) {
  return tolerance::step_rounding(r.sum_terms) / std::min(1.0, r.temperature);
}
inline double step_bound(const json& cfg) { return step_bound(run_rounding(cfg)); }

// Every tensor of two model folders that trained with `cfg`'s steps, summed in other
// orders, is the same model:
//  - each value within lr·(steps·B·step_bound + t) of the other, B = tolerance::
//    adam_update_bound(steps), t = 0.05: a weight whose gradient is well above its rounding
//    gets updates whose relative difference is the gradient's (step_bound), B·lr at most a
//    step; t·lr leaves room for the next kind;
//  - but for a few "outliers" that differ by more, each within Adam's hard bound, 2·B·lr a
//    step (each run moves a value by at most B·lr a step, the two in opposite directions).
//    Why there are any: AdamW divides by √v̂, so a value whose gradient is near its own
//    rounding (the embedding row of a token one text uses in passing) moves by about
//    lr·sign(g) in the first steps whatever |g| is, and another summation order can flip
//    the sign. How many: the values whose gradient is within 1/t of its rounding (√n·u
//    of the sum's terms, n = the step's sum_terms: the expected size, not the λ = 8
//    bound, as this is a count) are moved apart by more than t·lr; with gradients spread
//    evenly about zero that is a share √n·u / t of the values a step, so at most
//    E = size·steps·√n·u/t of them, allowed E + 6√E + 1 (6 standard deviations of a
//    Poisson count). A real divergence moves almost every value by about lr: a wrong
//    micro-batch moves every value the step's texts touch (tens of thousands of
//    embedding values, all of a dense layer's) where E allows hundreds in the largest
//    tensor of tiny_config and a handful in a dense layer.
//  - key_biases_are_noise: attention key biases, whose true gradient is exactly 0 (softmax
//    ignores a shift of a row's scores), are all noise on a model whose scores vary; each
//    of their values is held to Adam's hard bound only.
inline void expect_same_model(const fs::path& a, const fs::path& b, const json& cfg,
                              bool key_biases_are_noise = false) {
  RunRounding r = run_rounding(cfg);
  if (r.steps == 0)  // epochs: the steps run A trained, from its metrics.jsonl
    for (const json& line : metric_lines(a)) r.steps = std::max(r.steps, line.value("step", 0));
  ASSERT_GT(r.steps, 0) << a << ": no steps in the config or the metrics";
  const double adam = tolerance::adam_update_bound(r.steps), t = 0.05;
  const double inlier = r.lr * (r.steps * adam * step_bound(r) + t);
  const double hard = 2 * adam * r.lr * r.steps;
  const double flip_share = std::sqrt(double(r.sum_terms)) * tolerance::kFp32Unit / t * r.steps;
  for (const char* file : {"final/model.safetensors", "final/2_Dense/model.safetensors"}) {
    if (!fs::exists(a / file) && !fs::exists(b / file)) continue;  // no projection (a cross-encoder)
    auto wa = weights(a / file), wb = weights(b / file);
    ASSERT_EQ(wa.size(), wb.size()) << file;
    for (auto& [name, va] : wa) {
      const auto& vb = wb.at(name);
      ASSERT_EQ(va.size(), vb.size()) << name;
      const auto ends_with = [&](const std::string& tail) {
        return name.size() > tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
      };
      const bool key_bias = key_biases_are_noise && (ends_with("key.bias") || ends_with(".attn.k.bias"));  // BERT's, MPNet's
      const double expected = double(va.size()) * flip_share;
      const size_t allowed = key_bias ? va.size() : size_t(expected + 6 * std::sqrt(expected) + 1);
      size_t outliers = 0;
      double worst = 0;
      std::string where;
      for (size_t i = 0; i < va.size(); ++i) {
        const double d = std::fabs(double(va[i]) - double(vb[i]));
        if (!(d <= worst)) {  // a NaN becomes the worst, and fails the hard bound below
          worst = d;
          where = "element " + std::to_string(i);
        }
        if (!(d <= inlier)) ++outliers;
      }
      // (The largest inlier is no margin: values spread evenly up to the threshold.)
      const std::string what = std::string(file) + " " + name;
      if (!key_bias) tolerance::record(what + " outliers", double(outliers), double(allowed));
      tolerance::record(what + " worst", worst, hard);
      EXPECT_LE(outliers, allowed) << what << ": " << outliers << " values differ by more than " << inlier
                                   << " (the worst by " << worst << ", " << where << ")";
      EXPECT_LE(worst, hard) << what << ": " << where << " differs by more than Adam can move it in " << r.steps
                             << " steps";
    }
  }
}

// A run stopped after its checkpoint at step 2 and resumed to step 4 ends with the model of
// `straight` (4 steps, its output.dir inside dir) run through, byte for byte: the same
// batches, dropout masks, AdamW state (`what` names the model in the message).
inline void expect_resumed_run_ends_bit_identical(const fs::path& dir, const json& straight, const std::string& what) {
  json first = straight;
  first["output"]["dir"] = (dir / "resumed").string();
  first["output"]["save_every"] = 2;
  first["train"]["max_steps"] = 2;
  json second = first;
  second["train"]["max_steps"] = 4;
  second["output"]["resume"] = "auto";
  for (const char* sub : {"s", "f", "g"}) fs::create_directories(dir / sub);
  ASSERT_EQ(train(dir / "s", straight, 1).exit_code, 0);
  const RunResult r1 = train(dir / "f", first, 1);
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  const RunResult r2 = train(dir / "g", second, 1);
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  EXPECT_NE(r2.output.find("resumed from"), std::string::npos) << r2.output;
  const std::string a = read_file(fs::path(straight["output"]["dir"].get<std::string>()) / "final/model.safetensors");
  const std::string b = read_file(dir / "resumed/final/model.safetensors");
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "the resumed " << what << " differs from the straight one";
}

// The largest change of one tensor between two model.safetensors files' weights.
inline double largest_change(const std::map<std::string, std::vector<float>>& before,
                             const std::map<std::string, std::vector<float>>& after, const std::string& name) {
  double most = 0;
  for (size_t i = 0; i < before.at(name).size(); ++i)
    most = std::max(most, double(std::fabs(before.at(name)[i] - after.at(name)[i])));
  return most;
}

// The saved models of two runs, byte for byte: runs that do the same operations on the
// same values in the same order (each test says why, on every CPU).
inline void expect_identical_models(const fs::path& a, const fs::path& b, const std::string& what) {
  for (const char* f : {"final/model.safetensors", "final/2_Dense/model.safetensors"}) {
    const std::string wa = read_file(a / f), wb = read_file(b / f);
    EXPECT_FALSE(wa.empty()) << f;
    EXPECT_TRUE(wa == wb) << f << " differs under " << what;
  }
}

// Two series of metrics.jsonl values, each within `rel` of the other (0: equal).
inline void expect_same_series(const std::vector<double>& a, const std::vector<double>& b, double rel,
                               const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  ASSERT_FALSE(a.empty()) << what;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(a[i] - b[i]) / std::max(std::fabs(b[i]), 1e-300));
    if (rel == 0) EXPECT_EQ(a[i], b[i]) << what << " at line " << i;
    else EXPECT_NEAR(a[i], b[i], rel * std::fabs(b[i])) << what << " at line " << i;
  }
  tolerance::record(what + " (relative)", worst, rel);
}

// ---- processes in the background ----------------------------------------------------

// Small random-weight models of the architectures besides BERT, as sentence-transformers
// folders made by transformers (scripts/python/make_model_fixtures.py): xlmr-cls,
// xlmr-mean, xlmr-long, e5, qwen3, qwen3-causal, qwen3-sharded, qwen3-sliding under the
// returned folder, made once (tests/core/python_fixtures.h). On failure `error` holds the script's output.
// The shipped BEIR folder's first `queries` questions with the sentences judged for them:
// the same kind of set (each question against every kept question's sentences), a
// fraction of the work.
inline fs::path trecqa_beir_subset(const fs::path& dir, size_t queries) {
  const fs::path from = kSrc + "/data/trecqa_beir";
  fs::create_directories(dir / "qrels");
  std::set<std::string> kept_queries, kept_docs;
  std::ifstream query_lines(from / "queries.jsonl");
  std::ofstream query_out(dir / "queries.jsonl");
  for (std::string line; kept_queries.size() < queries && std::getline(query_lines, line);) {
    kept_queries.insert(json::parse(line).at("_id").get<std::string>());
    query_out << line << "\n";
  }
  std::ifstream qrels(from / "qrels/test.tsv");
  std::ofstream qrels_out(dir / "qrels/test.tsv");
  std::string line;
  std::getline(qrels, line);
  qrels_out << line << "\n";
  while (std::getline(qrels, line)) {
    const std::string query = line.substr(0, line.find('\t'));
    if (!kept_queries.count(query)) continue;
    qrels_out << line << "\n";
    const size_t doc_at = line.find('\t') + 1;
    kept_docs.insert(line.substr(doc_at, line.find('\t', doc_at) - doc_at));
  }
  std::ifstream corpus(from / "corpus.jsonl");
  std::ofstream corpus_out(dir / "corpus.jsonl");
  while (std::getline(corpus, line))
    if (kept_docs.count(json::parse(line).at("_id").get<std::string>())) corpus_out << line << "\n";
  return dir;
}

inline fs::path architecture_fixtures(std::string& error) {
  const fs::path dir = fs::path(kBin) / "test-fixtures" / "architectures";
  std::string stamp;
  for (const char* script : {"make_model_fixtures.py", "make_bpe_fixtures.py", "make_unigram_fixtures.py"})
    stamp += read_file(kSrc + "/scripts/python/" + script);
  try {
    return python_fixtures::made_once(dir,
                                      python_fixtures::shell_quote(DDP_EMBED_PYTHON) + " " +
                                          python_fixtures::shell_quote(kSrc + "/scripts/python/make_model_fixtures.py") +
                                          " --out",
                                      stamp);
  } catch (const std::exception& e) {
    error = e.what();
    return dir;
  }
}

// Waits (polling a condition, no fixed sleeps) up to `limit`; true when it held.
template <class Condition>
bool wait_for(Condition done, std::chrono::seconds limit = std::chrono::seconds(120)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Starts a shell command in the background; returns its pid (the command's, via exec).
inline pid_t spawn(const std::string& command, const fs::path& output) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    // `env` so that the command may start with VAR=value assignments.
    const std::string cmd = "exec env " + command + " >" + output.string() + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// The folder rank 0 is writing for checkpoint `step` (checkpoints/step-N.tmp-<pid>), or an
// empty path when there is none (yet, or any more).
inline fs::path partial_checkpoint(const fs::path& checkpoints, int64_t step) {
  const std::string prefix = "step-" + std::to_string(step) + ".tmp-";
  std::error_code ec;
  for (auto& e : fs::directory_iterator(checkpoints, ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) return e.path();
  return {};
}

// The exit status as a shell reports it (128+N for signal N).
inline int wait_exit(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace e2e
