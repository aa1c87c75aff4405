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
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../core/python_fixtures.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace e2e {

inline const std::string kBin = DDP_EMBED_BINARY_DIR;
inline const std::string kSrc = DDP_EMBED_SOURCE_DIR;

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
  const fs::path dir = fs::path(kBin) / "test-runs" / ("shared-" + name);
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

// Every tensor of two model folders equal within `rel` of the tensor's scale, plus 5% of
// one step's largest update (lr). Why the second term: Adam divides by sqrt(v) + eps, so
// a parameter whose true gradient is ~0 (attention key biases: softmax ignores a shift;
// embeddings of tokens barely used) turns rounding-level gradient differences (another
// summation order) into update differences far above float precision — but still a
// small fraction of lr. A wrong micro-batch or a summed gradient changes almost every
// parameter by about lr, and changes grad_norm, which is compared at 1e-5 separately.
// How far that amplification goes depends on the CPU's kernels (an AVX-512 machine's MKL
// rounds otherwise than an AVX2 one's): a lone element of a barely-used embedding row has
// been seen at 0.08 lr. So a tensor may hold a few such elements — at most one in 100,000
// of its values, at least one — each still within one lr (Adam's bound on one step's
// update), and the test says where they are; a real divergence moves far more values.
// key_bias_steps > 0: attention key biases, whose true gradient is exactly 0 (softmax
// ignores a shift of every score of a row), are only held to Adam's bound, one lr a step
// for that many steps: on a model whose scores vary, rounding noise of either sign is all
// their gradient, and Adam turns its sign into a full step.
inline void expect_same_model(const fs::path& a, const fs::path& b, double rel, double lr = 1e-3,
                              int key_bias_steps = 0) {
  for (const char* file : {"final/model.safetensors", "final/2_Dense/model.safetensors"}) {
    auto wa = weights(a / file), wb = weights(b / file);
    ASSERT_EQ(wa.size(), wb.size()) << file;
    for (auto& [name, va] : wa) {
      const auto& vb = wb.at(name);
      ASSERT_EQ(va.size(), vb.size()) << name;
      double scale = 0;
      for (float x : vb) scale = std::max(scale, double(std::fabs(x)));
      const bool key_bias = key_bias_steps > 0 && name.size() > 8 && name.compare(name.size() - 8, 8, "key.bias") == 0;
      const double bound = key_bias ? 1.01 * lr * key_bias_steps : rel * scale + 0.05 * lr;
      const size_t allowed = std::max<size_t>(1, va.size() / 100000);
      size_t outliers = 0;
      double worst_outlier = 0;
      std::string where;
      for (size_t i = 0; i < va.size(); ++i) {
        const double d = std::fabs(double(va[i]) - double(vb[i]));
        if (d <= bound) continue;
        ++outliers;
        if (!(d <= worst_outlier)) {  // a NaN becomes the worst, and fails the lr bound below
          worst_outlier = d;
          where = "element " + std::to_string(i);
        }
      }
      if (key_bias) {
        EXPECT_EQ(outliers, 0u) << file << " " << name << ": " << where << " differs by " << worst_outlier;
        continue;
      }
      EXPECT_LE(outliers, allowed) << file << " " << name << ": " << outliers << " values differ by more than " << bound
                                   << " (the worst by " << worst_outlier << ", " << where << ")";
      EXPECT_LE(worst_outlier, lr) << file << " " << name << ": " << where << " differs by more than one step's lr";
    }
  }
}

inline void expect_same_series(const std::vector<double>& a, const std::vector<double>& b, double rel,
                        const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  ASSERT_FALSE(a.empty()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], rel * std::fabs(b[i]) + 1e-9) << what << " at line " << i;
}

// ---- processes in the background ----------------------------------------------------

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// Small random-weight models of the architectures besides BERT, as sentence-transformers
// folders made by transformers (scripts/python/make_model_fixtures.py): xlmr-cls,
// xlmr-mean, xlmr-long, e5, qwen3, qwen3-causal, qwen3-sharded under the returned folder,
// made once (tests/core/python_fixtures.h). On failure `error` holds the script's output.
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
