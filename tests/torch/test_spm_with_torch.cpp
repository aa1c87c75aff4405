// sentencepiece in a program that links LibTorch. Debian's libsentencepiece carries its own
// protobuf (3.14) and LibTorch the system's (3.21): linked together they crashed before
// main(). Here sentencepiece lives in libddp_embed_spm.so, loaded into a link namespace of
// its own (tokenize/spm_library.h): training, loading, encoding and sentencepiece's own
// logging must all work beside LibTorch.
#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <torch/types.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tokenize/sentencepiece_tokenizer.h"
#include "tokenize/spm_library.h"
#include "tokenize/tokenizer.h"
#include "../core/temp_dir.h"

using namespace ddp_embed;

namespace {

namespace fs = std::filesystem;

using ddp_embed::testing::TempDir;

std::vector<std::string> sentences() {
  const char* who[] = {"The farmer", "A small child", "My sister", "The old captain",
                       "Every teacher", "The quiet neighbour"};
  const char* what[] = {"reads", "paints", "repairs", "sells", "carries", "forgets"};
  const char* thing[] = {"a red bicycle", "the morning paper", "an apple basket",
                         "the garden gate", "three blue boxes", "a winter jacket",
                         "the kitchen table"};
  std::vector<std::string> out;
  for (const char* a : who)
    for (const char* b : what)
      for (const char* c : thing) out.push_back(std::string(a) + " " + b + " " + c + ".");
  return out;
}

TEST(SentencePieceWithTorch, TrainLoadEncodeBesideLibTorch) {
  // LibTorch is loaded and works.
  EXPECT_FLOAT_EQ(at::ones({2, 3}).sum().item<float>(), 6.0f);

  TempDir dir;
  const std::vector<std::string> corpus = sentences();
  size_t given = 0;
  train_sentencepiece(
      [&](std::string& sentence) {
        if (given == corpus.size()) return false;
        sentence = corpus[given++];
        return true;
      },
      60, (dir.path / "tok").string(), "the test's sentences");
  ASSERT_TRUE(fs::exists(dir.path / "tok" / "spiece.model"));

  const auto tokenizer = load_tokenizer("sentencepiece", (dir.path / "tok").string());
  EXPECT_EQ(tokenizer->vocab_size(), 60);
  const SpecialIds special = tokenizer->special();
  EXPECT_EQ(std::vector<int32_t>({special.pad, special.unk, special.cls, special.sep,
                                  special.mask}),
            std::vector<int32_t>({0, 1, 2, 3, 4}));
  const auto& sp = dynamic_cast<const SentencePieceTokenizer&>(*tokenizer);
  EXPECT_EQ(sp.piece(2), "[CLS]");
  EXPECT_EQ(sp.piece(4), "[MASK]");

  const auto texts = sentences();
  std::vector<std::vector<int32_t>> expected;
  for (const auto& text : texts) {
    expected.push_back(tokenizer->encode(text, 0));
    const auto& ids = expected.back();
    ASSERT_GE(ids.size(), 3u);
    EXPECT_EQ(ids.front(), 2);
    EXPECT_EQ(ids.back(), 3);
    for (size_t i = 1; i + 1 < ids.size(); ++i) EXPECT_GE(ids[i], 5) << text;
  }
  // The ids feed a tensor; several threads encode at once, with the same results.
  const auto& first = expected.front();
  const at::Tensor t = at::tensor(std::vector<int64_t>(first.begin(), first.end()));
  EXPECT_EQ(t.size(0), static_cast<int64_t>(first.size()));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int w = 0; w < 4; ++w)
    threads.emplace_back([&, w] {
      for (int round = 0; round < 20; ++round)
        for (size_t i = 0; i < texts.size(); ++i)
          if (tokenizer->encode(texts[i], 0) != expected[i]) ++mismatches[w];
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));

  // sentencepiece stays out of this program's namespace (its protobuf with it).
  EXPECT_EQ(dlopen("libsentencepiece.so.0", RTLD_LAZY | RTLD_NOLOAD), nullptr);
}

// sentencepiece's log lines go to std::cerr: in its namespace that is a working stream of
// its own libstdc++ (with RTLD_DEEPBIND it was this program's unconstructed one: SIGSEGV).
TEST(SentencePieceWithTorch, SentencepieceCanLog) {
  TempDir dir;
  const spm::Library& lib = spm::library();
  struct Corpus {
    std::vector<std::string> text = sentences();
    size_t next = 0;
  } corpus;
  auto next = [](void* ctx, const char** text, size_t* size) noexcept -> int {
    auto& c = *static_cast<Corpus*>(ctx);
    if (c.next == c.text.size()) return 0;
    *text = c.text[c.next].data();
    *size = c.text[c.next].size();
    ++c.next;
    return 1;
  };
  std::string model;
  auto write = [](void* ctx, const char* data, size_t size) noexcept {
    static_cast<std::string*>(ctx)->assign(data, size);
  };
  const char* keys[] = {"model_type", "vocab_size", "minloglevel", "num_threads"};
  const char* values[] = {"unigram", "60", "0", "2"};  // minloglevel 0: every INFO line

  // Catch stderr (fd 2) in a file while sentencepiece logs.
  const std::string log = (dir.path / "stderr.txt").string();
  fflush(stderr);
  const int saved = dup(2);
  const int file = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(file, 0);
  dup2(file, 2);
  char error[256] = "";
  const int status =
      lib.train(keys, values, 4, 42, next, &corpus, write, &model, error, sizeof error);
  dup2(saved, 2);
  close(saved);
  close(file);

  EXPECT_EQ(status, 0) << error;
  EXPECT_FALSE(model.empty());
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("LOG(INFO)"), std::string::npos) << text.str();
}

}  // namespace
