// What the tests of each architecture (test_architectures.cpp, and one file an architecture
// besides) hold a fixture model to: parity with sentence-transformers and transformers
// (scripts/python/parity.py), and fine-tuning on 2 workers as on 1 with a folder that loads
// in Python with our embeddings.
#pragma once

#include <numeric>
#include <string>

#include "e2e_support.h"

namespace e2e {

// The texts parity.py runs on: the 160 hand-written hard cases (CJK, accents in both forms,
// emoji, empty and over-long lines), and the 2,000 WordNet test texts beside them. An
// encoder whose tokenizer is an engine the others already run on the WordNet texts (MPNet's
// WordPiece, ModernBERT's byte-level BPE) takes the hard cases alone: the Python reference
// of 2,000 more texts is most of such a test's time.
enum class ParityTexts { HardCasesAndWordNet, HardCases };

// scripts/python/parity.py on a model folder: every embedding within 1e-5 of
// SentenceTransformer.encode and every id equal to AutoTokenizer's, on `texts`; exit 0 and
// "parity: OK". `extra`: more parity.py arguments.
inline void expect_parity_of(const fs::path& model, const std::string& extra = "",
                             ParityTexts texts = ParityTexts::HardCasesAndWordNet) {
  const std::string wordnet = texts == ParityTexts::HardCasesAndWordNet ? kBin + "/test-data/eval.jsonl " : "";
  const RunResult r = run(kPython + " " + kSrc + "/scripts/python/parity.py --model " + model.string() +
                          " --embed-train " + kBin + "/embed-train --sentences " + kSrc +
                          "/tests/fixtures/parity/sentences.txt " + wordnet + extra + " 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("parity: OK"), std::string::npos) << r.output;
}

// A few fine-tuning steps of a fixture model on the WordNet test pairs, deterministic (no
// dropout, one thread): `chunk` > 0 is GradCache; `guide` non-empty: loss.guide.model.
inline json finetune_config(const fs::path& out, const fs::path& init, int64_t chunk = 0, const fs::path& guide = {}) {
  json c = {{"model", {{"init", init.string()}, {"dropout", 0.0}, {"projection_dim", 16}}},
          {"tokenizer", {{"max_length", 24}}},
          {"data", {{"train", kBin + "/test-data/train.jsonl"}, {"eval", nullptr}}},
          {"loss", {{"type", "infonce"}, {"temperature", 0.05}, {"cross_rank_negatives", true}}},
          {"train", {{"batch_size", 16}, {"lr", 1e-3}, {"warmup_steps", 0}, {"schedule", "constant"},
                     {"max_steps", 4}, {"seed", 5}, {"gradcache_chunk", chunk}}},
          {"dist", {{"timeout_s", 120}}},
          {"output", {{"dir", out.string()}, {"log_every", 1}, {"save_every", 0}, {"eval_every", 0},
                      {"resume", "never"}}}};
  if (!guide.empty()) c["loss"]["guide"] = {{"model", guide.string()}, {"margin", 0.01}};
  return c;
}

// 1 worker, 2 workers and 2 workers with GradCache train the same model; the 2-worker
// folder loads in sentence-transformers with our embeddings. With a guide, each run
// reports it and the runs mask the same pairs, some. `written`, when given, gets that
// 2-worker folder's path.
inline void expect_training_agrees(const fs::path& init, const std::string& name, const fs::path& guide = {},
                            fs::path* written = nullptr) {
  const fs::path one = fresh_dir(name + "-1"), two = fresh_dir(name + "-2"), cached = fresh_dir(name + "-gc");
  if (written) *written = two / "out" / "final";
  RunResult r = train(one, finetune_config(one / "out", init, 0, guide), 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = train(two, finetune_config(two / "out", init, 0, guide), 2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string two_output = r.output;
  r = train(cached, finetune_config(cached / "out", init, 8, guide), 2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("GradCache chunks of 8 sequences"), std::string::npos) << r.output;
  if (!guide.empty()) {
    EXPECT_NE(two_output.find("guide: " + guide.string()), std::string::npos) << two_output;
    EXPECT_NE(two_output.find("MB of parameters on cpu), frozen"), std::string::npos) << two_output;
    EXPECT_NE(two_output.find(" guide_masked "), std::string::npos) << two_output;
    const auto masked = series(one / "out", "guide_masked_negatives");
    EXPECT_GT(std::accumulate(masked.begin(), masked.end(), 0.0), 0);
    for (const fs::path& other : {two, cached})
      EXPECT_EQ(series(other / "out", "guide_masked_negatives"), masked) << other;
    EXPECT_EQ(series(one / "out", "guide_ms").size(), masked.size());
    // A guide of another tokenizer reads the texts in its own tokens; the starting model, the model's.
    EXPECT_EQ(two_output.find("tokenized again by the guide's tokenizer") != std::string::npos, guide != init)
        << two_output;
  }
  const json cfg = finetune_config(one / "out", init, 0, guide);
  for (const fs::path& other : {two, cached}) {
    const std::string run = other == two ? "on 2 workers" : "on 2 workers with GradCache";
    expect_same_series(series(one / "out", "loss"), series(other / "out", "loss"), step_bound(cfg), "loss " + run);
    expect_same_series(series(one / "out", "grad_norm"), series(other / "out", "grad_norm"), step_bound(cfg),
                       "grad_norm " + run);
    expect_same_model(one / "out", other / "out", cfg, /*key_biases_are_noise=*/true);
  }
  // Real training steps: the loss came down.
  const auto loss = series(one / "out", "loss");
  ASSERT_EQ(loss.size(), 4u);
  EXPECT_LT(loss.back(), loss.front());
  const fs::path model = two / "out" / "final";
  const RunResult check = run(kPython + " " + kSrc + "/scripts/check-st-load.py " + model.string() + " " + kSrc +
                              "/tests/fixtures/parity/sentences.txt --embed-train " + kBin + "/embed-train 2>&1");
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_NE(check.output.find("OK: every sentence has cosine >= 0.9999"), std::string::npos) << check.output;
}

}  // namespace e2e
