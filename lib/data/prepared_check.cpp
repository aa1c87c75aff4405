#include "data/prepared_check.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "util/hash.h"

namespace ddp_embed {

namespace fs = std::filesystem;

namespace {

constexpr const char* kDamaged = ": the folder is damaged; prepare it again";
// A region is hashed and its records checked in chunks of this size, so that the records
// are checked while the chunk is still in the cache.
constexpr size_t kCheckChunkBytes = size_t(1) << 20;

// The first problem found, by kind (a checksum first: it says the most) and then by
// place, whichever thread finds it.
class Findings {
 public:
  enum Kind { Checksum = 0, Record = 1 };
  void report(Kind kind, size_t file, int64_t offset, std::string message) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto key = std::make_tuple(int(kind), file, offset);
    if (!message_.empty() && key >= key_) return;
    key_ = key;
    message_ = std::move(message);
  }
  bool any() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return !message_.empty();
  }
  void raise() const {
    if (!message_.empty()) throw DataError(message_);
  }

 private:
  mutable std::mutex mutex_;
  std::tuple<int, size_t, int64_t> key_{INT_MAX, 0, 0};
  std::string message_;
};

// Checks the records of a file whose first byte lies in [begin, end); "" when they hold,
// else what is wrong (the file's path is put before it).
using RecordCheck = std::function<std::string(size_t begin, size_t end)>;

template <class T>
const T* as(const MappedFile& f) {
  return static_cast<const T*>(f.data());
}

// Records of `size` bytes whose first byte is in [begin, end): [first, last).
std::pair<size_t, size_t> records_in(size_t begin, size_t end, size_t size) {
  return {(begin + size - 1) / size, (end + size - 1) / size};
}

template <class Id>
RecordCheck token_ids(const MappedFile& file, int32_t vocab) {
  return [&file, vocab](size_t begin, size_t end) -> std::string {
    const Id* ids = as<Id>(file);
    const auto [first, last] = records_in(begin, end, sizeof(Id));
    for (size_t i = first; i < last; ++i)
      if (int64_t(ids[i]) < 0 || int64_t(ids[i]) >= vocab)
        return "token id " + std::to_string(int64_t(ids[i])) + " at position " + std::to_string(i) +
               ", outside the tokenizer's vocabulary of " + std::to_string(vocab) + kDamaged;
    return "";
  };
}

RecordCheck offsets_in_order(const MappedFile& file, int64_t ids) {
  return [&file, ids](size_t begin, size_t end) -> std::string {
    const int64_t* o = as<int64_t>(file);
    const auto [first, last] = records_in(begin, end, 8);
    for (size_t s = first; s < last; ++s) {
      const bool ok = o[s] >= 0 && o[s] <= ids && (s == 0 ? o[s] == 0 : o[s] >= o[s - 1]);
      if (!ok)
        return "offset " + std::to_string(s) + " is " + std::to_string(o[s]) +
               (s > 0 ? " after " + std::to_string(o[s - 1]) : std::string()) + ": offsets must rise from 0 to the " +
               std::to_string(ids) + " token ids" + kDamaged;
    }
    return "";
  };
}

RecordCheck finite_scores(const MappedFile& file) {
  return [&file](size_t begin, size_t end) -> std::string {
    const float* scores = as<float>(file);
    const auto [first, last] = records_in(begin, end, 4);
    for (size_t s = first; s < last; ++s)
      if (std::isinf(scores[s]))
        return "sequence " + std::to_string(s) + " has the teacher score " + std::to_string(scores[s]) +
               " (scores are finite, NaN where there is none)" + kDamaged;
    return "";
  };
}

// Pair k's sequences are the next ones after pair k - 1's: its query, pos_count >= 1
// positives, then neg_count negatives; the last pair ends at the last sequence.
RecordCheck pair_layout(const MappedFile& file, const PreparedManifest& m, const MappedFile* teacher) {
  return [&file, &m, teacher](size_t begin, size_t end) -> std::string {
    const PairIndex* pairs = as<PairIndex>(file);
    const auto [first, last] = records_in(begin, end, sizeof(PairIndex));
    const int64_t sequences = m.sequences;
    for (size_t k = first; k < last; ++k) {
      const PairIndex& p = pairs[k];
      auto bad = [&](const std::string& what) {
        return "pair " + std::to_string(k) + " (query " + std::to_string(p.query) + ", " + std::to_string(p.pos_count) +
               " positives from " + std::to_string(p.pos_begin) + ", " + std::to_string(p.neg_count) +
               " negatives from " + std::to_string(p.neg_begin) + "): " + what + kDamaged;
      };
      const int64_t start = k == 0 ? 0 : pairs[k - 1].neg_begin + int64_t(pairs[k - 1].neg_count);
      const bool previous_sound = k == 0 || (pairs[k - 1].neg_begin >= 0 && pairs[k - 1].neg_begin <= sequences &&
                                             pairs[k - 1].neg_count >= 0);
      if (previous_sound && p.query != start)
        return bad("it should begin at sequence " + std::to_string(start) + ", where the pair before it ends");
      if (p.query < 0 || p.query >= sequences)
        return bad("the folder has " + std::to_string(sequences) + " sequences");
      if (p.pos_count < 1) return bad("a pair has at least one positive");
      if (p.neg_count < 0) return bad("a negative count");
      if (p.pos_begin != p.query + 1 || p.neg_begin != p.pos_begin + p.pos_count)
        return bad("its positives follow its query and its negatives its positives");
      const int64_t pair_end = p.neg_begin + int64_t(p.neg_count);
      if (pair_end > sequences) return bad("it runs past the folder's " + std::to_string(sequences) + " sequences");
      if (k + 1 == size_t(m.pairs) && pair_end != sequences)
        return bad("the last pair ends at sequence " + std::to_string(pair_end) + " of " + std::to_string(sequences));
      if (m.has_scores && !std::isfinite(p.score)) return bad("its score is " + std::to_string(p.score));
      if (teacher && m.all_teacher_scored) {
        const float* scores = as<float>(*teacher);
        for (int64_t c = p.pos_begin; c < pair_end; ++c)
          if (std::isnan(scores[c]))
            return bad("candidate " + std::to_string(c) + " has no teacher score, though the manifest says every "
                       "pair has them (all_teacher_scored)");
      }
    }
    return "";
  };
}

struct Region {
  size_t file;  // index into the files checked
  int64_t index;
};

}  // namespace

void check_manifest_numbers(const PreparedManifest& m, const std::string& path) {
  auto fail = [&](const std::string& key, const std::string& what) {
    throw DataError(path + ": \"" + key + "\" " + what + kDamaged);
  };
  // Each count's bytes must fit an int64: 2^58 of anything is beyond any disk.
  constexpr int64_t kMost = int64_t(1) << 58;
  for (const auto& [key, value] : {std::pair<const char*, int64_t>{"sequences", m.sequences},
                                   {"ids", m.ids}, {"pairs", m.pairs}, {"lines", m.lines}, {"skipped", m.skipped}})
    if (value < 0 || value > kMost) fail(key, "is " + std::to_string(value));
  if (m.pairs > 0 && m.sequences < 2 * m.pairs)
    fail("sequences", "is " + std::to_string(m.sequences) + ", fewer than a query and a positive for each of the " +
                          std::to_string(m.pairs) + " pairs");
  if (m.tokenizer.vocab_size <= 0) fail("tokenizer.vocab_size", "is " + std::to_string(m.tokenizer.vocab_size));
  if (!m.wide && m.tokenizer.vocab_size > 65536)
    fail("id_bits", "is 16 for a vocabulary of " + std::to_string(m.tokenizer.vocab_size) + " tokens");
  if (m.max_length < 1) fail("max_length", "is " + std::to_string(m.max_length));
  int64_t next = 0;
  for (const auto& s : m.sources) {
    if (s.begin != next || s.end < s.begin || s.end > m.pairs)
      fail("sources", "has source \"" + s.name + "\" with pairs [" + std::to_string(s.begin) + ", " +
                          std::to_string(s.end) + "), but the sources must cover the folder's " +
                          std::to_string(m.pairs) + " pairs in order" +
                          (next > 0 ? ", this one from pair " + std::to_string(next) : std::string()));
    next = s.end;
  }
  if (next != m.pairs)
    fail("sources", "cover " + std::to_string(next) + " of the folder's " + std::to_string(m.pairs) + " pairs");
  if (m.region_bytes < 4096 || m.region_bytes > (int64_t(1) << 32) || m.region_bytes % 4096 != 0)
    fail("checksums.region_bytes", "is " + std::to_string(m.region_bytes) + " (a multiple of 4096 up to 4 GiB)");
  for (const auto& [name, bytes] : expected_files(m)) {
    const auto it = m.checksums.find(name);
    const int64_t regions = (bytes + m.region_bytes - 1) / m.region_bytes;
    if (it == m.checksums.end()) fail("checksums", "has none for " + name);
    if (int64_t(it->second.size()) != regions)
      fail("checksums", "has " + std::to_string(it->second.size()) + " for " + name + ", whose " +
                            std::to_string(bytes) + " bytes make " + std::to_string(regions) + " regions");
  }
}

void verify_prepared_files(const std::string& dir, const PreparedManifest& m,
                           const std::map<std::string, std::shared_ptr<const MappedFile>>& files,
                           const VerifyShare& share) {
  const std::vector<std::pair<std::string, int64_t>> names = expected_files(m);
  const MappedFile* teacher = m.teacher_scores ? files.at("teacher_scores.f32").get() : nullptr;
  std::vector<RecordCheck> checks;
  for (const auto& [name, bytes] : names) {
    const MappedFile& f = *files.at(name);
    if (name == "ids.u16") checks.push_back(token_ids<uint16_t>(f, m.tokenizer.vocab_size));
    else if (name == "ids.i32") checks.push_back(token_ids<int32_t>(f, m.tokenizer.vocab_size));
    else if (name == "offsets.i64") checks.push_back(offsets_in_order(f, m.ids));
    else if (name == "pairs.bin") checks.push_back(pair_layout(f, m, teacher));
    else if (name == "teacher_scores.f32") checks.push_back(finite_scores(f));
    else checks.push_back(nullptr);
  }
  std::vector<Region> regions;
  const size_t parts = size_t(std::max(share.parts, 1)), part = size_t(std::max(share.part, 0)) % parts;
  for (size_t i = 0, counted = 0; i < names.size(); ++i)
    for (int64_t r = 0; r < int64_t(m.checksums.at(names[i].first).size()); ++r)
      if (counted++ % parts == part) regions.push_back({i, r});

  Findings findings;
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t t; (t = next.fetch_add(1)) < regions.size() && !findings.any();) {
      const Region& region = regions[t];
      const auto& [name, bytes] = names[region.file];
      const MappedFile& file = *files.at(name);
      const std::string path = (fs::path(dir) / name).string();
      const size_t begin = size_t(region.index * m.region_bytes);
      const size_t end = std::min(size_t(bytes), begin + size_t(m.region_bytes));
      file.prefetch_range(begin, end - begin);
      Xxh3Stream hash;
      bool records_ok = true;
      for (size_t at = begin; at < end; at += kCheckChunkBytes) {
        const size_t chunk_end = std::min(end, at + kCheckChunkBytes);
        hash.update(static_cast<const char*>(file.data()) + at, chunk_end - at);
        if (records_ok && checks[region.file]) {
          const std::string problem = checks[region.file](at, chunk_end);
          if (!problem.empty()) {
            findings.report(Findings::Record, region.file, int64_t(at), path + ": " + problem);
            records_ok = false;
          }
        }
      }
      const uint64_t want = m.checksums.at(name)[size_t(region.index)], got = hash.digest();
      if (got != want)
        findings.report(Findings::Checksum, region.file, int64_t(begin),
                        path + ": bytes " + std::to_string(begin) + ".." + std::to_string(end) +
                            " do not match their checksum in manifest.json (XXH3-64 " + hash_hex(got) +
                            ", recorded " + hash_hex(want) +
                            "): the file was changed or damaged after it was prepared; prepare the folder again");
      file.release_range(begin, end - begin);
    }
  };
  const int n = std::max(1, std::min<int>(share.threads, int(regions.size())));
  std::exception_ptr error;
  std::mutex error_mutex;
  auto guarded = [&] {
    try {
      work();
    } catch (...) {
      const std::lock_guard<std::mutex> lock(error_mutex);
      error = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (int i = 1; i < n; ++i) pool.emplace_back(guarded);
  guarded();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  findings.raise();
}

}  // namespace ddp_embed
