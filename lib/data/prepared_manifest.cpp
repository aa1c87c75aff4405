// manifest.json of a prepared folder (data/prepared.h): written, read back, and checked
// against its own checksum.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "data/prepared.h"
#include "data/prepared_check.h"
#include "util/hash.h"

namespace ddp_embed {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kPreparedFormat = "ddp-embed prepared pairs";
// Version 2 added the checksums (and "piece_of"), version 3 the manifest's checksum of
// itself ("manifest_xxh3"). An older folder is refused: nothing tells its damage (or an
// edit) from its data, and preparing again is one command.
constexpr int kPreparedVersion = 3;
constexpr const char* kChecksumAlgorithm = "xxh3-64";
constexpr const char* kSelfChecksumKey = "manifest_xxh3";

json file_json(const PreparedFile& f) {
  return {{"path", f.path}, {"size", f.size}, {"mtime_ns", f.mtime_ns}, {"sample_hash", hash_hex(f.sample_hash)}};
}

json checksums_json(const PreparedManifest& m) {
  json files = json::object();
  for (const auto& [name, hashes] : m.checksums) {
    json list = json::array();
    for (uint64_t h : hashes) list.push_back(hash_hex(h));
    files[name] = list;
  }
  return {{"algorithm", kChecksumAlgorithm}, {"region_bytes", m.region_bytes}, {"files", files}};
}

json manifest_json(const PreparedManifest& m) {
  json sources = json::array();
  for (const auto& s : m.sources) {
    json files = json::array();
    for (const auto& f : s.files) files.push_back(file_json(f));
    sources.push_back({{"name", s.name},
                       {"query_prompt", s.query_prompt},
                       {"passage_prompt", s.passage_prompt},
                       {"pairs", {s.begin, s.end}},
                       {"files", files}});
    if (!s.columns.empty()) sources.back()["columns"] = s.columns;  // absent: none (and folders made before it)
  }
  return {{"format", kPreparedFormat},
          {"version", kPreparedVersion},
          {"tokenizer",
           {{"type", m.tokenizer.type}, {"vocab_size", m.tokenizer.vocab_size}, {"fingerprint", m.tokenizer.fingerprint}}},
          {"max_length", m.max_length},
          {"teacher_scores_required", m.teacher_scores_required},
          {"sequences", m.sequences},
          {"ids", m.ids},
          {"pairs", m.pairs},
          {"lines", m.lines},
          {"skipped", m.skipped},
          {"id_bits", m.wide ? 32 : 16},
          {"has_scores", m.has_scores},
          {"all_teacher_scored", m.all_teacher_scored},
          {"teacher_scores", m.teacher_scores},
          {"piece_of", m.piece_of.empty() ? json(nullptr) : json(m.piece_of)},
          {"checksums", checksums_json(m)},
          {"sources", sources}};
}
}  // namespace

std::string manifest_self_checksum(const json& manifest) {
  json rest = manifest;
  if (rest.is_object()) rest.erase(kSelfChecksumKey);
  const std::string text = rest.dump();
  return hash_hex(xxh3_64(text.data(), text.size()));
}

std::string prepared_manifest_text(const PreparedManifest& m) {
  json j = manifest_json(m);
  j[kSelfChecksumKey] = manifest_self_checksum(j);
  return j.dump(2) + "\n";
}

bool is_prepared_folder(const std::string& dir) { return fs::is_regular_file(fs::path(dir) / kPreparedManifestName); }

PreparedManifest read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / kPreparedManifestName).string();
  std::ifstream in(path);
  if (!in) throw DataError("cannot read " + path + ": " + std::strerror(errno));
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw DataError(path + ": not JSON (" + e.what() + "): the folder is damaged; prepare it again");
  }
  std::string key;
  try {
    auto get = [&](const json& o, const char* name) -> const json& {
      key = name;
      return o.at(name);
    };
    if (!j.is_object() || j.value("format", "") != kPreparedFormat)
      throw DataError(path + ": not a prepared data set's manifest (\"format\" is not \"" + kPreparedFormat + "\")");
    if (get(j, "version").get<int>() != kPreparedVersion)
      throw DataError(path + ": version " + j["version"].dump() +
                      (j["version"] == 1   ? " (prepared by an older embed-train, without checksums)"
                       : j["version"] == 2 ? " (prepared by an older embed-train, without the manifest's checksum of "
                                             "itself)"
                                           : "") +
                      ", this build reads version " + std::to_string(kPreparedVersion) + ": prepare it again (embed-train "
                      "prepare --config ... --output " + folder_path(dir) + ")");
    PreparedManifest m;
    const json& t = get(j, "tokenizer");
    m.tokenizer.type = get(t, "type").get<std::string>();
    m.tokenizer.vocab_size = get(t, "vocab_size").get<int32_t>();
    m.tokenizer.fingerprint = get(t, "fingerprint").get<std::string>();
    m.max_length = get(j, "max_length").get<int>();
    m.teacher_scores_required = get(j, "teacher_scores_required").get<bool>();
    m.sequences = get(j, "sequences").get<int64_t>();
    m.ids = get(j, "ids").get<int64_t>();
    m.pairs = get(j, "pairs").get<int64_t>();
    m.lines = get(j, "lines").get<int64_t>();
    m.skipped = get(j, "skipped").get<int64_t>();
    m.wide = get(j, "id_bits").get<int>() == 32;
    m.has_scores = get(j, "has_scores").get<bool>();
    m.all_teacher_scored = get(j, "all_teacher_scored").get<bool>();
    m.teacher_scores = get(j, "teacher_scores").get<bool>();
    for (const json& s : get(j, "sources")) {
      PreparedSource source;
      source.name = get(s, "name").get<std::string>();
      source.query_prompt = get(s, "query_prompt").get<std::string>();
      source.passage_prompt = get(s, "passage_prompt").get<std::string>();
      if (s.contains("columns")) source.columns = get(s, "columns").get<std::string>();
      const json& range = get(s, "pairs");
      source.begin = range.at(0).get<int64_t>();
      source.end = range.at(1).get<int64_t>();
      for (const json& f : get(s, "files"))
        source.files.push_back({get(f, "path").get<std::string>(), get(f, "size").get<int64_t>(),
                                get(f, "mtime_ns").get<int64_t>(),
                                std::stoull(get(f, "sample_hash").get<std::string>(), nullptr, 16)});
      m.sources.push_back(std::move(source));
    }
    const json& piece_of = get(j, "piece_of");
    if (!piece_of.is_null()) m.piece_of = piece_of.get<std::string>();
    const json& checksums = get(j, "checksums");
    if (get(checksums, "algorithm").get<std::string>() != kChecksumAlgorithm)
      throw DataError(path + ": checksums.algorithm " + checksums["algorithm"].dump() + ", this build checks " +
                      kChecksumAlgorithm + ": prepare it again");
    m.region_bytes = get(checksums, "region_bytes").get<int64_t>();
    for (const auto& [name, list] : get(checksums, "files").items()) {
      key = "checksums.files." + name;
      for (const json& h : list) {
        const std::string hex = h.get<std::string>();
        if (hex.size() != 16 || hex.find_first_not_of("0123456789abcdef") != std::string::npos)
          throw DataError(path + ": checksums.files." + name + ": " + h.dump() +
                          " is not 16 hex digits: the folder is damaged; prepare it again");
        m.checksums[name].push_back(std::stoull(hex, nullptr, 16));
      }
    }
    check_manifest_numbers(m, path);
    // Last, so that a count or range that is wrong in itself is named as such: an edit
    // that leaves the manifest consistent (max_length, the tokenizer's fingerprint, a
    // prompt, a flag) would otherwise make a run train on data made for other settings.
    key = kSelfChecksumKey;
    const std::string recorded = get(j, kSelfChecksumKey).get<std::string>();
    if (const std::string actual = manifest_self_checksum(j); recorded != actual)
      throw DataError(path + ": edited or damaged since it was written (its \"manifest_xxh3\" " + recorded +
                      " is not the XXH3-64 of the rest of it, " + actual + "), so nothing it says about the folder can "
                      "be trusted: prepare the folder again (embed-train prepare --config ... --output " +
                      folder_path(dir) + ")");
    return m;
  } catch (const DataError&) {
    throw;
  } catch (const std::exception& e) {
    throw DataError(path + ": key \"" + key + "\": missing or of the wrong type (" + e.what() +
                    "): the folder is damaged; prepare it again");
  }
}

}  // namespace ddp_embed
