// Two texts as one input (tokenize/pair_template.h) against transformers' tokenizer(a, b,
// truncation=True, max_length=N): scripts/python/make_pair_fixtures.py writes seven
// tokenizer folders (MiniLM's WordPiece, a small XLM-R Unigram in both forms, Qwen3's
// byte-level BPE with its own post-processor, Qwen3-Embedding's template, RobertaProcessing
// and BertProcessing) and the ids and token types transformers gives for 148 pairs at six
// max lengths; every one must match. Plus LongestFirst's table, the templates, joining
// stored pieces as training does, and the errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "python_fixtures.h"
#include "temp_dir.h"
#include "tokenize/pair_template.h"
#include "tokenize/tokenizer.h"

namespace ddp_embed {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The generator's folders and references (tests/core/python_fixtures.h: made once for the
// script's, the scripts it imports' and its inputs' contents).
const fs::path& pair_fixtures() {
  static const fs::path dir = [] {
    const fs::path source(DDP_EMBED_SOURCE_DIR);
    const fs::path scripts = source / "scripts/python";
    std::string stamp;
    for (const char* name : {"make_pair_fixtures.py", "make_bpe_fixtures.py", "make_unigram_fixtures.py"})
      stamp += python_fixtures::read_text(scripts / name);
    stamp += python_fixtures::read_text(source / "tests/fixtures/parity/sentences.txt") +
             python_fixtures::read_text(source / "tests/fixtures/unigram/corpus.txt");
    return python_fixtures::made_once(fs::path(DDP_EMBED_BINARY_DIR) / "test-fixtures/pairs",
                                      python_fixtures::shell_quote(DDP_EMBED_PYTHON) + " " +
                                          python_fixtures::shell_quote((scripts / "make_pair_fixtures.py").string()),
                                      stamp);
  }();
  return dir;
}

struct PairRef {
  std::string a, b;
  int max_length;
  std::vector<int32_t> ids, types;
};

const std::map<std::string, std::vector<PairRef>>& pair_refs() {
  static const auto refs = [] {
    std::map<std::string, std::vector<PairRef>> out;
    std::ifstream in(pair_fixtures() / "refs.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      const json row = json::parse(line);
      out[row["folder"]].push_back({row["a"], row["b"], row["max_length"], row["ids"].get<std::vector<int32_t>>(),
                                    row["types"].get<std::vector<int32_t>>()});
    }
    return out;
  }();
  return refs;
}

std::unique_ptr<Tokenizer> load_folder(const std::string& folder) {
  return load_tokenizer("auto", (pair_fixtures() / folder).string());
}

std::string show(const std::vector<int32_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size() && i < 40; ++i) s += (i ? " " : "") + std::to_string(v[i]);
  return s + (v.size() > 40 ? " ... (" + std::to_string(v.size()) + ")]" : "]");
}

// Every reference line of `folder`; the first mismatches are printed whole.
void expect_transformers_pairs(const std::string& folder) {
  const auto tokenizer = load_folder(folder);
  const auto& lines = pair_refs().at(folder);
  ASSERT_EQ(lines.size(), 148u * 6u) << folder;
  size_t bad = 0;
  std::set<int> lengths;
  for (const PairRef& r : lines) {
    lengths.insert(r.max_length);
    const PairIds got = encode_pair(*tokenizer, r.a, r.b, r.max_length);
    if (got.ids == r.ids && got.types == r.types) continue;
    if (++bad <= 5)
      ADD_FAILURE() << folder << " max_length " << r.max_length << " a " << json(r.a.substr(0, 200)).dump() << " b "
                    << json(r.b.substr(0, 200)).dump() << "\n  transformers ids " << show(r.ids) << " types "
                    << show(r.types) << "\n  ours         ids " << show(got.ids) << " types " << show(got.types);
  }
  EXPECT_EQ(bad, 0u) << folder << ": " << bad << " of " << lines.size() << " pairs differ";
  EXPECT_EQ(lengths, (std::set<int>{8, 9, 16, 17, 128, 512}));
}

TEST(PairTemplate, WordPieceIdsAndTypesEqualTransformers) { expect_transformers_pairs("minilm"); }

TEST(PairTemplate, XlmrUnigramIdsAndTypesEqualTransformers) {
  expect_transformers_pairs("xlmr");
  expect_transformers_pairs("xlmr-spm");
}

TEST(PairTemplate, Qwen3BpeIdsAndTypesEqualTransformers) {
  expect_transformers_pairs("qwen3");
  expect_transformers_pairs("qwen3-emb");
}

TEST(PairTemplate, RobertaAndBertProcessingIdsAndTypesEqualTransformers) {
  expect_transformers_pairs("qwen3-roberta");
  expect_transformers_pairs("qwen3-bert");
}

// The references hold every shape LongestFirst has: at max_length 8 and 9 most pairs are
// cut, both texts and one of them, with odd and even budgets.
TEST(PairTemplate, ReferencesCoverEveryTruncationCase) {
  const auto tokenizer = load_folder("minilm");
  std::set<std::string> seen;
  for (const PairRef& r : pair_refs().at("minilm")) {
    const auto a = tokenizer->encode(r.a, 1 << 20), b = tokenizer->encode(r.b, 1 << 20);
    const size_t na = a.size() - 2, nb = b.size() - 2, budget = size_t(r.max_length) - 3;
    if (na + nb <= budget) { seen.insert("whole"); continue; }
    const char* parity = budget % 2 ? " odd" : " even";
    if (na == 0 || nb == 0) seen.insert(std::string("one empty") + parity);
    else if (2 * std::min(na, nb) <= budget) seen.insert(std::string("longer cut") + parity);
    else seen.insert(std::string(na == nb ? "both cut, equal" : na > nb ? "both cut, first longer" : "both cut, second longer") + parity);
  }
  for (const char* c : {"whole", "one empty odd", "one empty even", "longer cut odd", "longer cut even",
                        "both cut, equal odd", "both cut, equal even", "both cut, first longer odd",
                        "both cut, first longer even", "both cut, second longer odd", "both cut, second longer even"})
    EXPECT_TRUE(seen.count(c)) << "no reference pair for the case \"" << c << "\"";
}

// The tokenizers library's own table (its truncation tests, budget 7) and more budgets.
TEST(PairTemplate, LongestFirstKeepsWhatTheTokenizersLibraryKeeps) {
  struct Case {
    size_t na, nb, budget, first, second;
  };
  const Case cases[] = {
      {0, 0, 7, 0, 0}, {0, 2, 7, 0, 2}, {0, 4, 7, 0, 4}, {0, 8, 7, 0, 7}, {2, 0, 7, 2, 0}, {2, 2, 7, 2, 2},
      {2, 4, 7, 2, 4}, {2, 8, 7, 2, 5}, {4, 0, 7, 4, 0}, {4, 2, 7, 4, 2}, {4, 4, 7, 3, 4}, {4, 8, 7, 3, 4},
      {8, 0, 7, 7, 0}, {8, 2, 7, 5, 2}, {8, 4, 7, 4, 3}, {8, 8, 7, 3, 4},
      // even budgets: halves; equal lengths: the second gets the odd one
      {10, 10, 8, 4, 4}, {10, 12, 8, 4, 4}, {12, 10, 8, 4, 4}, {10, 10, 9, 4, 5}, {10, 12, 9, 4, 5},
      {12, 10, 9, 5, 4}, {5, 5, 9, 4, 5}, {5, 6, 9, 4, 5}, {6, 5, 9, 5, 4},
      // the shorter fits in half: it stays whole
      {4, 100, 9, 4, 5}, {100, 4, 9, 5, 4}, {4, 100, 8, 4, 4}, {3, 100, 8, 3, 5}, {1, 1, 1, 0, 1}, {3, 2, 2, 1, 1}};
  for (const Case& c : cases) {
    const PairLengths got = longest_first(c.na, c.nb, c.budget);
    EXPECT_EQ(std::make_pair(got.first, got.second), std::make_pair(c.first, c.second))
        << "lengths " << c.na << ", " << c.nb << " budget " << c.budget;
  }
}

TEST(PairTemplate, EachTokenizerGivesItsTemplate) {
  const PairTemplate bert = pair_template(*load_folder("minilm"));
  EXPECT_EQ(bert.before_first, std::vector<int32_t>{101});
  EXPECT_EQ(bert.between, std::vector<int32_t>{102});
  EXPECT_EQ(bert.after_second, std::vector<int32_t>{102});
  EXPECT_EQ(std::make_pair(bert.first_type, bert.second_type), std::make_pair(0, 1));
  for (const char* folder : {"xlmr", "xlmr-spm"}) {
    const PairTemplate xlmr = pair_template(*load_folder(folder));
    EXPECT_EQ(xlmr.before_first, std::vector<int32_t>{0}) << folder;
    EXPECT_EQ(xlmr.between, (std::vector<int32_t>{2, 2})) << folder;
    EXPECT_EQ(xlmr.after_second, std::vector<int32_t>{2}) << folder;
    EXPECT_EQ(std::make_pair(xlmr.first_type, xlmr.second_type), std::make_pair(0, 0)) << folder;
  }
  const PairTemplate qwen = pair_template(*load_folder("qwen3"));
  EXPECT_EQ(qwen.specials(), 0u);
  EXPECT_EQ(std::make_pair(qwen.first_type, qwen.second_type), std::make_pair(0, 1));
  const PairTemplate emb = pair_template(*load_folder("qwen3-emb"));
  EXPECT_TRUE(emb.before_first.empty());
  EXPECT_EQ(emb.between, std::vector<int32_t>{151643});
  EXPECT_EQ(emb.after_second, std::vector<int32_t>{151643});
  EXPECT_EQ(std::make_pair(emb.single_before, emb.single_after), std::make_pair(size_t{0}, size_t{1}));
}

// A model trained by embed-train tokenizer: BERT's form with its own [CLS]=2 and [SEP]=3.
TEST(PairTemplate, SentencePieceModelsTakeBertsFormWithTheirIds) {
  const testing::TempDir scratch("pair_spm");
  const fs::path dir = scratch / "model";
  const std::vector<std::string> words = {"river", "stone", "bright", "morning", "quiet", "garden", "window", "paper"};
  size_t next = 0;
  train_sentencepiece(
      [&](std::string& sentence) {
        if (next >= 400) return false;
        sentence = words[next % 8] + " " + words[(next / 8) % 8] + " " + words[(next * 7 + 3) % 8] + ".";
        ++next;
        return true;
      },
      30, dir.string(), "generated sentences");
  const auto tokenizer = load_tokenizer("sentencepiece", dir.string());
  const PairTemplate t = pair_template(*tokenizer);
  EXPECT_EQ(t.before_first, std::vector<int32_t>{2});
  EXPECT_EQ(t.between, std::vector<int32_t>{3});
  EXPECT_EQ(t.after_second, std::vector<int32_t>{3});
  const auto a = tokenizer->encode("river stone", 64), b = tokenizer->encode("quiet paper", 64);
  std::vector<int32_t> want(a.begin(), a.end());
  want.insert(want.end(), b.begin() + 1, b.end());
  const PairIds got = encode_pair(*tokenizer, "river stone", "quiet paper", 64);
  EXPECT_EQ(got.ids, want);
  std::vector<int32_t> types(a.size(), 0);
  types.resize(want.size(), 1);
  EXPECT_EQ(got.types, types);
}

TEST(PairTemplate, PieceRangeLeavesOutTheSpecialIds) {
  const auto bert = load_folder("minilm");
  const auto ids = bert->encode("hello world", 64);  // [CLS] hello world [SEP]
  const PieceRange r = piece_range(*bert, ids.data(), ids.size());
  EXPECT_EQ(std::make_pair(r.begin, r.end), std::make_pair(size_t{1}, ids.size() - 1));
  const auto emb = load_folder("qwen3-emb");  // pieces... <|endoftext|>
  const auto e = emb->encode("hello world", 64);
  const PieceRange re = piece_range(*emb, e.data(), e.size());
  EXPECT_EQ(std::make_pair(re.begin, re.end), std::make_pair(size_t{0}, e.size() - 1));
  const auto qwen = load_folder("qwen3");
  const auto q = qwen->encode("hello world", 64);
  const PieceRange rq = piece_range(*qwen, q.data(), q.size());
  EXPECT_EQ(std::make_pair(rq.begin, rq.end), std::make_pair(size_t{0}, q.size()));
}

// Training joins pairs from texts tokenized one at a time (stored at a single max_length):
// join_pair of those pieces equals transformers' pair (so encode_pair) whenever neither text
// was cut there.
TEST(PairTemplate, JoiningStoredPiecesEqualsEncodePairWhenNeitherTextWasCut) {
  const int stored_length = 48;
  for (const char* folder : {"minilm", "xlmr", "qwen3", "qwen3-emb", "qwen3-roberta"}) {
    const auto tokenizer = load_folder(folder);
    const PairTemplate tmpl = pair_template(*tokenizer);
    const size_t single_room = size_t(stored_length) - tmpl.single_before - tmpl.single_after;
    size_t compared = 0, bad = 0;
    for (const PairRef& r : pair_refs().at(folder)) {
      const auto a = tokenizer->encode(r.a, stored_length), b = tokenizer->encode(r.b, stored_length);
      const PieceRange ra = piece_range(*tokenizer, a.data(), a.size()), rb = piece_range(*tokenizer, b.data(), b.size());
      if (ra.end - ra.begin >= single_room || rb.end - rb.begin >= single_room) continue;  // may have been cut
      const PairIds joined =
          join_pair(tmpl, a.data() + ra.begin, ra.end - ra.begin, b.data() + rb.begin, rb.end - rb.begin, r.max_length);
      ++compared;
      if (joined.ids != r.ids || joined.types != r.types) ++bad;
    }
    EXPECT_EQ(bad, 0u) << folder;
    EXPECT_GT(compared, 148u * 6u * 3u / 4u) << folder << ": too few pairs were short enough to compare";
  }
}

// Where they can differ: both texts cut by their own encode and an odd pair budget. The
// longer text gets the odd piece, and the stored pieces no longer say which was longer.
TEST(PairTemplate, JoiningStoredPiecesLosesWhichTextWasLongerWhenBothWereCut) {
  const auto tokenizer = load_folder("minilm");
  std::string a_text, b_text;  // 30 pieces and 20
  for (int i = 0; i < 30; ++i) a_text += "word ";
  for (int i = 0; i < 20; ++i) b_text += "word ";
  const int stored_length = 12, pair_length = 10;  // 10 pieces each stored; a pair budget of 7
  const auto a = tokenizer->encode(a_text, stored_length), b = tokenizer->encode(b_text, stored_length);
  const PieceRange ra = piece_range(*tokenizer, a.data(), a.size()), rb = piece_range(*tokenizer, b.data(), b.size());
  ASSERT_EQ(ra.end - ra.begin, rb.end - rb.begin);
  const PairIds joined = join_pair(pair_template(*tokenizer), a.data() + ra.begin, ra.end - ra.begin,
                                   b.data() + rb.begin, rb.end - rb.begin, pair_length);
  const PairIds exact = encode_pair(*tokenizer, a_text, b_text, pair_length);
  const std::vector<int32_t> types_exact = {0, 0, 0, 0, 0, 0, 1, 1, 1, 1};   // a (longer) keeps 4, b 3
  const std::vector<int32_t> types_joined = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1};  // equal as stored: a 3, b 4
  EXPECT_EQ(exact.types, types_exact);
  EXPECT_EQ(joined.types, types_joined);
  EXPECT_NE(joined.ids, exact.ids);
}

TEST(PairTemplate, TooSmallMaxLengthIsRefusedNamingTheLeastThatFits) {
  const auto xlmr = load_folder("xlmr");
  try {
    encode_pair(*xlmr, "a", "b", 5);
    FAIL() << "max_length 5 with 4 special ids was taken";
  } catch (const TokenizerError& e) {
    EXPECT_NE(std::string(e.what()).find("at least 6"), std::string::npos) << e.what();
  }
  EXPECT_EQ(encode_pair(*xlmr, "a", "b", 6).ids.size(), 6u);
}

TEST(PairTemplate, PostProcessorsWithoutAPairFormAreRefusedNamingTheKey) {
  const json reversed = json::parse(R"({"type": "TemplateProcessing",
      "single": [{"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [{"Sequence": {"id": "B", "type_id": 1}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "special_tokens": {}})");
  const json no_pair = json::parse(R"({"type": "TemplateProcessing",
      "single": [{"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {}})");
  const json mixed_types = json::parse(R"({"type": "TemplateProcessing",
      "single": [{"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 1}},
               {"Sequence": {"id": "B", "type_id": 1}}],
      "special_tokens": {"[SEP]": {"id": "[SEP]", "ids": [5], "tokens": ["[SEP]"]}}})");
  const json three = json::parse(R"({"type": "TemplateProcessing",
      "single": [{"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
               {"Sequence": {"id": "A", "type_id": 0}}],
      "special_tokens": {}})");
  const std::pair<const json*, const char*> cases[] = {
      {&reversed, "tok.json: post_processor.pair[0]"}, {&no_pair, "tok.json: post_processor.pair: missing"},
      {&mixed_types, "tok.json: post_processor.pair[1]"}, {&three, "tok.json: post_processor.pair[2]"}};
  for (const auto& [p, where] : cases) {
    try {
      pair_template_of_post_processor(*p, "tok.json: post_processor");
      ADD_FAILURE() << "taken: " << p->dump();
    } catch (const TokenizerError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(where, 0), 0u) << e.what();
    }
  }
}

}  // namespace
}  // namespace ddp_embed
