// open_prepared() on a prepared folder made of arbitrary bytes: a DataError naming a file
// of the folder, or a data set whose every pair and sequence reads within the folder, with
// ids in the vocabulary and finite scores.
//
// The bytes are a folder image: manifest.json's text up to the first NUL byte, then the
// arrays back to back in the order of the manifest's files (ids, offsets, pairs, text
// hashes, teacher scores), each taking the size the manifest's counts give it from what is
// left (the last ones come out short when the bytes run out). Random bytes almost never
// match a checksum, which would stop every input at the first check; so when the image's
// manifest says "region_bytes": 4096, the target writes the arrays' true checksums into it
// first, and then (where it has one) the manifest's true checksum of itself, and the
// fuzzer reaches the manifest's ranges and the records behind them. Images with other
// region sizes keep what they say: they reach the check of the manifest against itself.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/prepared.h"
#include "fuzz_targets.h"
#include "util/hash.h"

namespace ddp_embed::fuzz {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// This process's folder, made once (libFuzzer runs the target in one process).
const fs::path& image_folder() {
  static const fs::path dir = [] {
    const fs::path d = fs::temp_directory_path() / ("ddp-embed-fuzz-prepared-" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

void write(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

const char* const kArrays[] = {"ids.u16", "ids.i32", "offsets.i64", "pairs.bin", "text_hashes.u64",
                               "teacher_scores.f32"};

// A count of the manifest, 0 when it is not a small non-negative integer.
int64_t count(const json& m, const char* key) {
  const auto it = m.find(key);
  if (it == m.end() || !it->is_number_integer()) return 0;
  const int64_t v = it->get<int64_t>();
  return v >= 0 && v < (int64_t(1) << 24) ? v : 0;
}

// The arrays' sizes as the manifest's counts give them, in the folder's order.
std::vector<std::pair<std::string, int64_t>> sizes(const json& m) {
  const bool wide = m.value("id_bits", 16) == 32;
  const int64_t sequences = count(m, "sequences"), ids = count(m, "ids"), pairs = count(m, "pairs");
  std::vector<std::pair<std::string, int64_t>> out = {{wide ? "ids.i32" : "ids.u16", ids * (wide ? 4 : 2)},
                                                      {"offsets.i64", (sequences + 1) * 8},
                                                      {"pairs.bin", pairs * 40},
                                                      {"text_hashes.u64", sequences * 8}};
  if (m.value("teacher_scores", false) == true) out.emplace_back("teacher_scores.f32", sequences * 4);
  return out;
}

std::string hex(uint64_t h) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

}  // namespace

int fuzz_prepared(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const size_t nul = bytes.find('\0');
  std::string manifest(bytes.substr(0, nul));
  std::string_view rest = nul == std::string_view::npos ? std::string_view() : bytes.substr(nul + 1);
  const fs::path& dir = image_folder();
  for (const char* name : kArrays) fs::remove(dir / name);

  json m = json::parse(manifest, nullptr, /*allow_exceptions=*/false);
  if (m.is_object()) {
    const auto checksums = m.find("checksums");
    const bool restamp = checksums != m.end() && checksums->is_object() && checksums->value("region_bytes", 0) == 4096;
    for (const auto& [name, bytes_wanted] : sizes(m)) {
      const std::string_view part = rest.substr(0, std::min<size_t>(rest.size(), size_t(bytes_wanted)));
      write(dir / name, part);
      rest.remove_prefix(part.size());
      if (restamp) {
        json list = json::array();
        for (size_t at = 0; at < part.size(); at += 4096)
          list.push_back(hex(xxh3_64(part.data() + at, std::min<size_t>(4096, part.size() - at))));
        (*checksums)["files"][name] = list;
      }
    }
    if (restamp && m.contains("manifest_xxh3")) m["manifest_xxh3"] = manifest_self_checksum(m);
    manifest = m.dump();
  }
  write(dir / "manifest.json", manifest);

  PairDataset set;
  try {
    set = open_prepared(dir.string());
  } catch (const DataError& e) {
    if (std::string(e.what()).find(dir.string()) == std::string::npos)
      fail(std::string("an error that names no file of the folder: ") + e.what());
    return 0;
  }
  // Opened: every pair's sequences read, within the vocabulary.
  const int64_t sequences = set.tokens.num_sequences();
  std::vector<int64_t> ids(4096);
  for (int64_t i = 0; i < set.size(); ++i) {
    const PairIndex& p = set.pairs[size_t(i)];
    check(p.query >= 0 && p.pos_count >= 1 && p.neg_count >= 0 && p.neg_begin + p.neg_count <= sequences,
          "a pair names sequences outside the folder");
    for (int64_t s : {p.query, p.pos_begin, p.neg_begin + p.neg_count - 1}) {
      if (s < p.query) continue;
      const int32_t length = set.tokens.length(s);
      check(length >= 0, "a sequence of a negative length");
      if (size_t(length) > ids.size()) ids.resize(size_t(length));
      set.tokens.copy(s, ids.data());
    }
    if (set.has_scores) check(std::isfinite(p.score), "a non-finite score opened");
  }
  for (size_t s = 0; s < set.teacher_scores.size(); ++s)
    check(!std::isinf(set.teacher_scores[s]), "an infinite teacher score opened");
  int64_t covered = 0;
  for (const auto& source : set.sources) {
    check(source.begin == covered && source.end >= source.begin, "sources do not tile the pairs");
    covered = source.end;
  }
  check(covered == set.size(), "sources do not cover the pairs");
  return 0;
}

}  // namespace ddp_embed::fuzz
