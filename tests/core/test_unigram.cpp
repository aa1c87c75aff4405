// The XLM-R (Unigram) tokenizer against transformers 5: every reference line that
// scripts/python/make_unigram_fixtures.py writes (AutoTokenizer ids for the parity
// sentences, edge cases and a fuzz set, at several max_length, for four folder kinds), the
// charsmap normalizer against tokenizers' own, save() read back by AutoTokenizer, the
// special ids, and the errors for files it must refuse.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "python_fixtures.h"
#include "tokenize/grapheme.h"
#include "tokenize/precompiled_charsmap.h"
#include "tokenize/spm_model_file.h"
#include "tokenize/tokenizer.h"

namespace ddp_embed {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using python_fixtures::read_text;
using python_fixtures::shell_quote;

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

int run(const std::string& command, std::string& output) { return python_fixtures::run_command(command, output); }

// The generator's folders and references (tests/core/python_fixtures.h: made once for the
// script's and its inputs' contents).
const fs::path& fixtures() {
  static const fs::path dir = [] {
    const fs::path source = DDP_EMBED_SOURCE_DIR;
    const fs::path script = source / "scripts/python/make_unigram_fixtures.py";
    return python_fixtures::made_once(fs::path(DDP_EMBED_BINARY_DIR) / "test-fixtures" / "unigram",
                                      shell_quote(DDP_EMBED_PYTHON) + " " + shell_quote(script.string()),
                                      read_text(script) + read_text(source / "tests/fixtures/unigram/corpus.txt") +
                                          read_text(source / "tests/fixtures/parity/sentences.txt"));
  }();
  return dir;
}

struct Reference {
  std::string text;
  int max_length;
  std::vector<int32_t> ids;
};

const std::map<std::string, std::vector<Reference>>& references() {
  static const auto refs = [] {
    std::map<std::string, std::vector<Reference>> out;
    std::ifstream in(fixtures() / "refs.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      const json row = json::parse(line);
      out[row["folder"].get<std::string>()].push_back(
          {row["text"].get<std::string>(), row["max_length"].get<int>(), row["ids"].get<std::vector<int32_t>>()});
    }
    return out;
  }();
  return refs;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size() && i < 40; ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + (ids.size() > 40 ? ",... (" + std::to_string(ids.size()) + ")]" : "]");
}

// Every reference line of `folder` through `tok`; the count of lines compared.
size_t expect_references(const Tokenizer& tok, const std::string& folder) {
  const auto& refs = references().at(folder);
  size_t bad = 0;
  for (const auto& r : refs) {
    const auto got = tok.encode(r.text, r.max_length);
    if (got != r.ids && ++bad <= 5)
      ADD_FAILURE() << folder << ": max_length " << r.max_length << " text " << json(r.text).dump()
                    << "\n  transformers " << show(r.ids) << "\n  ours         " << show(got);
  }
  EXPECT_EQ(bad, 0u) << folder << ": " << bad << " of " << refs.size() << " lines differ";
  return refs.size();
}

void expect_folder(const std::string& name) {
  const fs::path dir = fixtures() / name;
  EXPECT_EQ(detect_tokenizer_type(dir.string()), "unigram");
  const auto tok = load_tokenizer("auto", dir.string());
  EXPECT_EQ(tok->type(), "unigram");
  const size_t n = expect_references(*tok, name);
  EXPECT_GT(n, 9000u);
}

TEST(Unigram, SentencepieceModelFolderEqualsTransformers) { expect_folder("spm"); }
TEST(Unigram, TokenizerJsonFolderEqualsTransformers) { expect_folder("json"); }
TEST(Unigram, LegacyJsonUnderXlmrClassEqualsTransformers) { expect_folder("legacy"); }
TEST(Unigram, LegacyJsonUnderGenericClassRunsTheFilesPipeline) { expect_folder("generic"); }
TEST(Unigram, ByteFallbackUnderGenericClassEqualsTransformers) { expect_folder("generic_bytes"); }
TEST(Unigram, NormalizedLstripMaskEqualsTransformers) { expect_folder("json_mask"); }
TEST(Unigram, AddedTokensDecoderOfTheConfigEqualsTransformers) { expect_folder("spm_mask"); }
TEST(Unigram, LargeVocabularyEqualsTransformers) { expect_folder("big"); }

TEST(Unigram, GraphemeClustersEqualRegexModule) {
  std::ifstream in(fixtures() / "graphemes.jsonl");
  std::string line;
  size_t n = 0, bad = 0;
  while (std::getline(in, line)) {
    const json row = json::parse(line);
    const std::string text = row["text"].get<std::string>();
    std::vector<size_t> got;
    for (const char* p = text.data(); p < text.data() + text.size();) {
      got.push_back(grapheme::cluster_length(p, text.data() + text.size()));
      p += got.back();
    }
    ++n;
    if (got != row["lengths"].get<std::vector<size_t>>() && ++bad <= 5)
      ADD_FAILURE() << "text " << row["text"].dump() << "\n  regex " << row["lengths"].dump() << "\n  ours  "
                    << json(got).dump();
  }
  EXPECT_GT(n, 2500u);
  EXPECT_EQ(bad, 0u);
}

TEST(Unigram, CharsmapEqualsTokenizersPrecompiledNormalizer) {
  const fs::path model_path = fixtures() / "spm" / "sentencepiece.bpe.model";
  const SpmModelFile model = parse_spm_model(read_text(model_path), model_path.string());
  const PrecompiledCharsmap charsmap(model.precompiled_charsmap, "charsmap");
  ASSERT_FALSE(charsmap.empty());
  std::ifstream in(fixtures() / "normalize.jsonl");
  std::string line;
  size_t n = 0, bad = 0;
  while (std::getline(in, line)) {
    const json row = json::parse(line);
    std::string got;
    charsmap.normalize(row["text"].get<std::string>(), got);
    ++n;
    if (got != row["normalized"].get<std::string>() && ++bad <= 5)
      ADD_FAILURE() << "text " << row["text"].dump() << "\n  tokenizers " << row["normalized"].dump()
                    << "\n  ours       " << json(got).dump();
  }
  EXPECT_GT(n, 3000u);
  EXPECT_EQ(bad, 0u);
}

TEST(Unigram, SpecialIdsAreXlmrs) {
  for (const std::string name : {"spm", "json", "legacy", "json_mask", "spm_mask"}) {
    const auto tok = load_tokenizer("unigram", (fixtures() / name).string());
    const SpecialIds s = tok->special();
    EXPECT_EQ(s.cls, 0) << name;
    EXPECT_EQ(s.pad, 1) << name;
    EXPECT_EQ(s.sep, 2) << name;
    EXPECT_EQ(s.unk, 3) << name;
    EXPECT_EQ(s.mask, tok->vocab_size() - 1) << name;
    EXPECT_EQ(tok->model_max_length(), 512) << name;
    EXPECT_EQ(tok->encode("", 512), (std::vector<int32_t>{0, 2})) << name;
    EXPECT_EQ(tok->encode(" \t\u3000", 512), (std::vector<int32_t>{0, 2})) << name;
    EXPECT_EQ(tok->encode("<mask>", 512), (std::vector<int32_t>{0, s.mask, 2})) << name;
  }
  // The .model folder's vocabulary is the spm pieces + 2 (<pad>, <mask>), as fairseq's.
  const fs::path model_path = fixtures() / "spm" / "sentencepiece.bpe.model";
  const auto model = parse_spm_model(read_text(model_path), model_path.string());
  EXPECT_EQ(load_tokenizer("auto", (fixtures() / "spm").string())->vocab_size(), int32_t(model.pieces.size() + 2));
}

TEST(Unigram, EncodeIsThreadSafeAndTakesIllFormedText) {
  const auto tok = load_tokenizer("auto", (fixtures() / "json").string());
  const auto& refs = references().at("json");
  std::vector<std::thread> threads;
  std::vector<size_t> bad(4, 0);
  for (size_t t = 0; t < bad.size(); ++t)
    threads.emplace_back([&, t] {
      for (size_t i = t; i < refs.size(); i += 3)
        if (tok->encode(refs[i].text, refs[i].max_length) != refs[i].ids) ++bad[t];
    });
  for (auto& th : threads) th.join();
  for (size_t b : bad) EXPECT_EQ(b, 0u);
  // Ill-formed UTF-8 is read as Python's errors="replace" would: U+FFFD.
  EXPECT_EQ(tok->encode("a\xff" "b", 512), tok->encode("a\xEF\xBF\xBD" "b", 512));
}

// save() writes files that load_tokenizer and AutoTokenizer both read back to the same ids.
TEST(Unigram, SaveRoundTripsThroughOursAndTransformers) {
  const fs::path out = fixtures().parent_path() / ("unigram-save-" + std::to_string(::getpid()));
  fs::remove_all(out);
  std::vector<std::string> texts;
  for (const auto& r : references().at("spm"))
    if (r.max_length == 512 && texts.size() < 400) texts.push_back(r.text);
  json folders = json::array();
  for (const std::string name : {"spm", "json", "generic"}) {
    const auto tok = load_tokenizer("auto", (fixtures() / name).string());
    const fs::path saved = out / name;
    tok->save(saved.string());
    EXPECT_TRUE(fs::exists(saved / (name == "spm" ? "sentencepiece.bpe.model" : "tokenizer.json"))) << name;
    const auto back = load_tokenizer("auto", saved.string());
    EXPECT_EQ(back->special().mask, tok->special().mask);
    json expected = json::array();
    for (const auto& t : texts) {
      const auto ids = tok->encode(t, 512);
      EXPECT_EQ(back->encode(t, 512), ids) << name << ": " << json(t).dump();
      expected.push_back(ids);
    }
    folders.push_back({{"dir", saved.string()}, {"ids", expected}});
  }
  write_text(out / "check.json", json({{"texts", texts}, {"folders", folders}}).dump());
  const std::string check =
      "import json, sys\n"
      "from transformers import AutoTokenizer\n"
      "c = json.load(open(sys.argv[1]))\n"
      "for f in c['folders']:\n"
      "    tok = AutoTokenizer.from_pretrained(f['dir'])\n"
      "    got = tok(c['texts'], truncation=True, max_length=512)['input_ids']\n"
      "    bad = [i for i, (a, b) in enumerate(zip(got, f['ids'])) if a != b]\n"
      "    print(f['dir'], type(tok).__name__, len(bad), 'of', len(got), 'differ')\n"
      "    for i in bad[:3]: print(repr(c['texts'][i]), got[i], f['ids'][i])\n"
      "    assert not bad\n";
  write_text(out / "check.py", check);
  std::string output;
  const int rc = run("HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error " + shell_quote(DDP_EMBED_PYTHON) + " " +
                         shell_quote((out / "check.py").string()) + " " + shell_quote((out / "check.json").string()),
                     output);
  EXPECT_EQ(rc, 0) << output;
  EXPECT_NE(output.find("XLMRobertaTokenizer 0 of"), std::string::npos) << output;
  fs::remove_all(out);
}

// The message of the TokenizerError that loading `dir` throws ("" when none).
std::string load_error(const fs::path& dir) {
  try {
    load_tokenizer("auto", dir.string());
  } catch (const TokenizerError& e) {
    return e.what();
  }
  return "";
}

TEST(Unigram, RefusesWhatItCannotRead) {
  const fs::path bad = fixtures() / "bad";
  std::string e = load_error(bad / "bpe_type");
  EXPECT_NE(e.find((bad / "bpe_type" / "sentencepiece.bpe.model").string()), std::string::npos) << e;
  EXPECT_NE(e.find("model_type is 2"), std::string::npos) << e;
  e = load_error(bad / "layout");
  EXPECT_NE(e.find((bad / "layout" / "sentencepiece.bpe.model").string()), std::string::npos) << e;
  EXPECT_NE(e.find("unk 1, bos 0, eos 2"), std::string::npos) << e;

  const fs::path tmp = fixtures().parent_path() / ("unigram-bad-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  const std::string model = read_text(fixtures() / "spm" / "sentencepiece.bpe.model");
  // Cut short (inside a piece, before trainer_spec), cut at every of a few points, garbage.
  for (const size_t cut : {size_t(7), model.size() / 3, model.size() / 2, model.size() - 3}) {
    const fs::path dir = tmp / ("cut" + std::to_string(cut));
    fs::create_directories(dir);
    write_text(dir / "sentencepiece.bpe.model", model.substr(0, cut));
    e = load_error(dir);
    EXPECT_NE(e.find((dir / "sentencepiece.bpe.model").string()), std::string::npos) << cut << ": " << e;
    EXPECT_NE(e.find("not a sentencepiece model"), std::string::npos) << cut << ": " << e;
  }
  fs::create_directories(tmp / "garbage");
  write_text(tmp / "garbage" / "sentencepiece.bpe.model", "\x0f\xff\xff\xff garbage, not a proto");
  e = load_error(tmp / "garbage");
  EXPECT_NE(e.find("garbage/sentencepiece.bpe.model: not a sentencepiece model"), std::string::npos) << e;

  // A generic-class tokenizer.json whose normalizer is not implemented; an unknown class.
  json tj = json::parse(read_text(fixtures() / "generic" / "tokenizer.json"));
  tj["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "NFKC"}}})}};
  fs::create_directories(tmp / "nfkc");
  write_text(tmp / "nfkc" / "tokenizer.json", tj.dump());
  write_text(tmp / "nfkc" / "tokenizer_config.json", R"({"tokenizer_class": "PreTrainedTokenizerFast"})");
  e = load_error(tmp / "nfkc");
  EXPECT_NE(e.find((tmp / "nfkc" / "tokenizer.json").string() + ": normalizer.normalizers[0]: normalizer \"NFKC\""),
            std::string::npos)
      << e;
  write_text(tmp / "nfkc" / "tokenizer_config.json", R"({"tokenizer_class": "T5Tokenizer"})");
  e = load_error(tmp / "nfkc");
  EXPECT_NE(e.find((tmp / "nfkc" / "tokenizer_config.json").string() + ": tokenizer_class \"T5Tokenizer\""),
            std::string::npos)
      << e;
  // A vocabulary entry that is not a [piece, score] pair.
  tj = json::parse(read_text(fixtures() / "json" / "tokenizer.json"));
  tj["model"]["vocab"][5] = "piece";
  fs::create_directories(tmp / "vocab");
  write_text(tmp / "vocab" / "tokenizer.json", tj.dump());
  e = load_error(tmp / "vocab");
  EXPECT_NE(e.find((tmp / "vocab" / "tokenizer.json").string() + ": model.vocab[5] is not a [piece, score] pair"),
            std::string::npos)
      << e;
  // A broken charsmap.
  tj = json::parse(read_text(fixtures() / "json" / "tokenizer.json"));
  tj["normalizer"]["precompiled_charsmap"] = "AAAA*AAA";
  fs::create_directories(tmp / "charsmap");
  write_text(tmp / "charsmap" / "tokenizer.json", tj.dump());
  fs::copy_file(fixtures() / "json" / "tokenizer_config.json", tmp / "charsmap" / "tokenizer_config.json");
  e = load_error(tmp / "charsmap");
  EXPECT_NE(e.find((tmp / "charsmap" / "tokenizer.json").string() + ": normalizer.precompiled_charsmap"),
            std::string::npos)
      << e;
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace ddp_embed
