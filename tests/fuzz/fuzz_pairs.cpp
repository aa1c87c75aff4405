// load_pairs() on arbitrary bytes as a JSONL pair file, tokenized with BERT's vocabulary:
// a DataError naming the file, or a dataset whose index and token store agree.
#include <spdlog/spdlog.h>

#include <sstream>
#include <string>

#include "data/pair_record.h"
#include "data/pairs.h"
#include "fuzz_targets.h"
#include "tokenize/wordpiece.h"

namespace ddp_embed::fuzz {
namespace {

constexpr int kMaxLength = 12;  // short: truncation is exercised with small texts
const char* const kPairsOrigin = "fuzz.jsonl";

const WordPieceTokenizer& bert() {
  static const WordPieceTokenizer tokenizer(bert_vocab(), WordPieceOptions{});
  return tokenizer;
}

void check_sequence(const TokenStore& tokens, int64_t seq) {
  check(seq >= 0 && seq < tokens.num_sequences(), "sequence index out of range");
  const std::vector<int32_t> ids = tokens.ids(seq);
  if (ids.size() < 2 || ids.size() > static_cast<size_t>(kMaxLength))
    fail("sequence length " + std::to_string(ids.size()) + " outside [2, max_length]");
  check(ids.front() == bert().special().cls && ids.back() == bert().special().sep,
        "sequence does not run from [CLS] to [SEP]");
  for (int32_t id : ids) check(id >= 0 && id < bert().vocab_size(), "token id out of range");
}

void check_dataset(const PairDataset& data) {
  check(data.size() + data.skipped == data.lines, "pairs + skipped != non-blank lines");
  int64_t next = 0;  // sequences are stored pair by pair: query, positives, negatives
  for (const PairIndex& pair : data.pairs) {
    check(pair.query == next && pair.pos_begin == pair.query + 1 &&
              pair.neg_begin == pair.pos_begin + pair.pos_count,
          "pair index does not follow the token store");
    check(pair.pos_count >= 1 && pair.neg_count >= 0, "a pair without a positive");
    next = pair.neg_begin + pair.neg_count;
    for (int64_t seq = pair.query; seq < next; ++seq) check_sequence(data.tokens, seq);
  }
  check(next == data.tokens.num_sequences(), "the token store holds sequences no pair uses");
}

// skip_bad_lines warns about the first bad lines: noise at thousands of inputs a second.
class QuietLog {
 public:
  QuietLog() : level_(spdlog::get_level()) { spdlog::set_level(spdlog::level::off); }
  ~QuietLog() { spdlog::set_level(level_); }

 private:
  spdlog::level::level_enum level_;
};

// Each line on its own: a record has a non-blank query and at least one positive.
void check_records(const std::string& text) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    PairRecord record;
    if (!parse_pair_record(line, record).empty()) continue;
    check(record.query.find_first_not_of(" \t\r\n") != std::string::npos, "blank query accepted");
    check(!record.pos.empty(), "record without a positive accepted");
  }
}

}  // namespace

int fuzz_pairs(const uint8_t* data, size_t size) {
  const QuietLog quiet;
  const std::string text(reinterpret_cast<const char*>(data), size);
  check_records(text);
  for (const bool skip_bad_lines : {false, true}) {
    std::istringstream in(text);
    try {
      check_dataset(load_pairs(in, kPairsOrigin, bert(), kMaxLength, skip_bad_lines, /*threads=*/1));
    } catch (const DataError& e) {
      const std::string message = e.what();
      if (message.rfind(std::string(kPairsOrigin) + ":", 0) != 0) fail("error without the file name: " + message);
    }
  }
  return 0;
}

}  // namespace ddp_embed::fuzz
