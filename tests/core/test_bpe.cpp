// BPE (tokenize/bpe.h) against transformers 5's AutoTokenizer: the generator
// scripts/python/make_bpe_fixtures.py writes ten tokenizer folders (byte-level: Qwen3's real
// one, the Qwen3-Embedding form, small trained ones in Qwen, GPT-4 and GPT-2 style;
// sentencepiece-style, characters with byte fallback: Gemma's tokenizer.json under its class
// and the generic one, two Metaspace forms with an unknown character's unk fused and not)
// with the ids AutoTokenizer gives for ~3,250 texts at max_length 4, 16, 512 (and 262144
// where 512 truncates); every one must match. Plus
// save() round trips, special ids and the errors for files we do not read.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "python_fixtures.h"
#include "tokenize/tokenizer.h"
#include "temp_dir.h"

namespace ddp_embed {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const char* const kKinds[] = {"qwen3",       "qwen3-emb", "trained",   "llama3",         "gpt2",
                              "gpt2-class", "gemma-class", "fallback", "metaspace", "metaspace-split"};

using python_fixtures::read_text;

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The generator's folders and references (tests/core/python_fixtures.h: made once for the
// script's and its inputs' contents).
fs::path fixtures() {
  static const fs::path dir = [] {
    const fs::path source(DDP_EMBED_SOURCE_DIR);
    const fs::path script = source / "scripts/python/make_bpe_fixtures.py";
    return python_fixtures::made_once(
        fs::path(DDP_EMBED_BINARY_DIR) / "test-fixtures/bpe",
        python_fixtures::shell_quote(DDP_EMBED_PYTHON) + " " + python_fixtures::shell_quote(script.string()),
        read_text(script) + read_text(source / "tests/fixtures/bpe/corpus.txt") +
            read_text(source / "tests/fixtures/parity/sentences.txt"));
  }();
  return dir;
}

struct Ref {
  std::string text;
  int max_length;
  std::vector<int32_t> ids;
};

std::vector<Ref> refs(const std::string& kind) {
  std::vector<Ref> out;
  std::ifstream in(fixtures() / kind / "refs.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const json row = json::parse(line);
    out.push_back({row["text"], row["max_length"], row["ids"].get<std::vector<int32_t>>()});
  }
  return out;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size() && i < 40; ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  return s + (ids.size() > 40 ? " ... (" + std::to_string(ids.size()) + " ids)]" : "]");
}

// Every reference line; the first mismatches are printed with the text and both id lists.
void expect_parity(const Tokenizer& tokenizer, const std::vector<Ref>& lines, const std::string& kind) {
  size_t bad = 0;
  for (const Ref& r : lines) {
    const auto ids = tokenizer.encode(r.text, r.max_length);
    if (ids == r.ids) continue;
    if (++bad <= 5)
      ADD_FAILURE() << kind << " max_length " << r.max_length << " text " << json(r.text.substr(0, 300)).dump()
                    << "\n  transformers " << show(r.ids) << "\n  ours         " << show(ids);
  }
  EXPECT_EQ(bad, 0u) << kind << ": " << bad << " of " << lines.size() << " lines differ";
}

class Bpe : public ::testing::TestWithParam<const char*> {};

TEST_P(Bpe, IdsEqualAutoTokenizer) {
  const std::string kind = GetParam();
  const auto lines = refs(kind);
  ASSERT_GT(lines.size(), 9700u);
  EXPECT_EQ(detect_tokenizer_type((fixtures() / kind).string()), "bpe");
  const auto tokenizer = load_tokenizer("auto", (fixtures() / kind).string());
  EXPECT_EQ(tokenizer->type(), "bpe");
  expect_parity(*tokenizer, lines, kind);
}

// encode() is const and thread-safe: four threads over the same lines give the same ids.
TEST(Bpe, SameIdsOnFourThreads) {
  const auto tokenizer = load_tokenizer("auto", (fixtures() / "qwen3-emb").string());
  const auto lines = refs("qwen3-emb");
  std::vector<size_t> bad(4, 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (size_t i = t; i < lines.size(); i += 2)  // overlapping halves: the caches are shared by nothing
        if (tokenizer->encode(lines[i].text, lines[i].max_length) != lines[i].ids) ++bad[t];
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad, std::vector<size_t>(4, 0));
}

INSTANTIATE_TEST_SUITE_P(Folders, Bpe, ::testing::ValuesIn(kKinds),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

TEST(Bpe, SpecialIdsOfEachFolder) {
  const auto qwen = load_tokenizer("bpe", (fixtures() / "qwen3").string());
  EXPECT_EQ(qwen->vocab_size(), 151669);
  EXPECT_EQ(qwen->special().cls, -1);
  EXPECT_EQ(qwen->special().sep, -1);
  EXPECT_EQ(qwen->special().pad, 151643);
  EXPECT_EQ(qwen->model_max_length(), 131072);
  const auto emb = load_tokenizer("bpe", (fixtures() / "qwen3-emb").string());
  EXPECT_EQ(emb->special().cls, -1);
  EXPECT_EQ(emb->special().sep, 151643);
  EXPECT_EQ(emb->special().pad, 151643);
  EXPECT_EQ(emb->encode("one two three four five six seven", 4), (std::vector<int32_t>{603, 1378, 2326, 151643}));
  const auto llama = load_tokenizer("bpe", (fixtures() / "llama3").string());
  EXPECT_EQ(llama->special().cls, 0);
  EXPECT_EQ(llama->special().sep, 1);
  const auto gpt2 = load_tokenizer("bpe", (fixtures() / "gpt2").string());
  EXPECT_EQ(gpt2->special().cls, 0);
  EXPECT_EQ(gpt2->special().sep, 2);
  EXPECT_EQ(gpt2->special().pad, 1);
  EXPECT_EQ(gpt2->special().unk, 3);
  // Ill-formed UTF-8 reads as U+FFFD, as Python's errors="replace".
  EXPECT_EQ(gpt2->encode("a\xff b", 64), gpt2->encode("a\xef\xbf\xbd b", 64));
  // Gemma's class: <bos> first and <eos> last from the file's template, <unk> 3, <pad> 0,
  // and its <mask>, which the vocabulary lacks, added after it as transformers adds it.
  const auto gemma = load_tokenizer("auto", (fixtures() / "gemma-class").string());
  EXPECT_EQ(gemma->special().cls, 2);
  EXPECT_EQ(gemma->special().sep, 1);
  EXPECT_EQ(gemma->special().unk, 3);
  EXPECT_EQ(gemma->special().pad, 0);
  EXPECT_EQ(gemma->special().mask, 1200);
  EXPECT_EQ(gemma->vocab_size(), 1201);
}

using ddp_embed::testing::TempDir;

// save() writes tokenizer.json unchanged and tokenizer_config.json unchanged but for
// model_max_length, so AutoTokenizer reads the same tokenizer back; ours does too.
TEST(Bpe, SaveRoundTrips) {
  for (const char* kind : {"qwen3-emb", "gpt2-class", "llama3", "gemma-class"}) {
    TempDir dir(std::string("save_") + kind);
    const auto original = load_tokenizer("auto", (fixtures() / kind).string());
    const_cast<Tokenizer&>(*original).set_model_max_length(300);
    original->save(dir.path.string());
    EXPECT_EQ(read_text(dir.path / "tokenizer.json"), read_text(fixtures() / kind / "tokenizer.json")) << kind;
    json config = json::parse(read_text(fixtures() / kind / "tokenizer_config.json"));
    config["model_max_length"] = 300;
    EXPECT_EQ(json::parse(read_text(dir.path / "tokenizer_config.json")), config) << kind;
    const auto again = load_tokenizer("bpe", dir.path.string());
    EXPECT_EQ(again->model_max_length(), 300);
    auto lines = refs(kind);
    lines.resize(2000);
    expect_parity(*again, lines, std::string("saved ") + kind);
  }
}

// A copy of the trained folder with its tokenizer.json (or config) edited.
void expect_refused(const std::string& name, const std::function<void(json&, json&)>& edit,
                    const std::string& file, const std::string& says) {
  TempDir dir("bad_" + name);
  json tok = json::parse(read_text(fixtures() / "trained/tokenizer.json"));
  json config = json::parse(read_text(fixtures() / "trained/tokenizer_config.json"));
  edit(tok, config);
  write_text(dir.path / "tokenizer.json", tok.dump());
  write_text(dir.path / "tokenizer_config.json", config.dump());
  try {
    load_tokenizer("bpe", dir.path.string());
    ADD_FAILURE() << name << ": loaded";
  } catch (const TokenizerError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find((dir.path / file).string()), std::string::npos) << name << ": " << what;
    EXPECT_NE(what.find(says), std::string::npos) << name << ": " << what;
  }
}

TEST(Bpe, ErrorsNameTheFileAndWhat) {
  expect_refused("regex", [](json& t, json&) { t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+|\\s+"; },
                 "tokenizer.json", "pre_tokenizer.pretokenizers[0].pattern.Regex: unsupported pre-tokenizer regex");
  expect_refused("merge", [](json& t, json&) { t["model"]["merges"][5] = json::array({"Ġ", "no-such-token"}); },
                 "tokenizer.json", "model.merges[5]: token \"no-such-token\" is not in model.vocab");
  expect_refused("pair", [](json& t, json&) { t["model"]["merges"][7] = json::array({"a", "b", "c"}); }, "tokenizer.json",
                 "model.merges[7]: neither \"a b\" nor [\"a\", \"b\"]");
  expect_refused("string", [](json& t, json&) { t["model"]["merges"][0] = "a  b"; }, "tokenizer.json",
                 "model.merges[0]: \"a  b\" is not two tokens separated by one space");
  expect_refused("id", [](json& t, json&) { t["model"]["vocab"]["zz"] = "7"; }, "tokenizer.json",
                 "model.vocab[\"zz\"]: \"7\" is not a non-negative 32-bit id");
  expect_refused("json", [](json& t, json&) { t = "{\"model\": "; }, "tokenizer.json", "not a JSON object");
  expect_refused("model", [](json& t, json&) { t["model"]["type"] = "WordLevel"; }, "tokenizer.json",
                 "model.type: \"WordLevel\" is not BPE");
  expect_refused("normalizer", [](json& t, json&) { t["normalizer"] = {{"type", "NFKC"}}; }, "tokenizer.json",
                 "normalizer: normalizer \"NFKC\" is not supported");
  expect_refused("class", [](json&, json& c) { c["tokenizer_class"] = "CodeGenTokenizer"; }, "tokenizer_config.json",
                 "tokenizer_class \"CodeGenTokenizer\" is not supported");
  expect_refused("fallback", [](json& t, json&) { t["model"]["byte_fallback"] = true; }, "tokenizer.json",
                 "model.byte_fallback: true with a ByteLevel pre-tokenizer");
  expect_refused("split", [](json& t, json&) { t["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Contiguous"}}; },
                 "tokenizer.json", "pre_tokenizer.behavior: only \"MergedWithPrevious\" and \"Isolated\" are supported");
  expect_refused("metaspace", [](json& t, json&) { t["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "sometimes"}}; },
                 "tokenizer.json", "pre_tokenizer.prepend_scheme: \"sometimes\" is not always, first or never");
  expect_refused("prefix", [](json& t, json&) { t["model"]["continuing_subword_prefix"] = "##"; }, "tokenizer.json",
                 "model.continuing_subword_prefix: must be empty");
  TempDir dir("bad_detect");
  json tok = json::parse(read_text(fixtures() / "trained/tokenizer.json"));
  tok["model"]["type"] = "WordLevel";
  write_text(dir.path / "tokenizer.json", tok.dump());
  EXPECT_THROW(detect_tokenizer_type(dir.path.string()), TokenizerError);
}

}  // namespace
}  // namespace ddp_embed
