#include "train/prepare.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "parallel/worker_env.h"
#include "train/inference.h"
#include "train/setup.h"
#include "train/worker.h"
#include "util/log.h"
#include "util/process_info.h"

// tcmalloc's, where embed-train links it (CMakeLists.txt, DDP_EMBED_TCMALLOC); null else.
extern "C" int MallocExtension_GetNumericProperty(const char* property, size_t* value) __attribute__((weak));
extern "C" int MallocExtension_SetNumericProperty(const char* property, size_t value) __attribute__((weak));

namespace ddp_embed {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// A piece is about this much text: a minute or so of one rank's work, little memory.
constexpr int64_t kPieceBytes = 64ll << 20;

std::string piece_dir(const std::string& parts, size_t i) {
  char name[32];
  std::snprintf(name, sizeof name, "piece-%06zu", i);
  return (fs::path(parts) / name).string();
}

// What the pieces in DIR.parts were made for: pieces of another plan are not reused.
std::string plan_key(const PreparedManifest& expected, const std::vector<PrepareItem>& items, const Config& cfg) {
  nlohmann::json j = nlohmann::json::object();
  j["skip_bad_lines"] = cfg.data.skip_bad_lines;
  j["max_line_bytes"] = cfg.data.max_line_bytes;
  j["tokenizer"] = expected.tokenizer.fingerprint;
  j["max_length"] = expected.max_length;
  j["teacher_scores_required"] = expected.teacher_scores_required;
  for (const auto& s : expected.sources) {
    nlohmann::json files = nlohmann::json::array();
    for (const auto& f : s.files) files.push_back({f.path, f.size, f.mtime_ns, f.sample_hash});
    j["sources"].push_back({s.name, s.query_prompt, s.passage_prompt, files});
  }
  for (const auto& item : items) j["pieces"].push_back({item.source, item.piece.file, item.piece.begin, item.piece.end});
  return j.dump();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Rank 0: DIR.parts ready for this plan (kept when it was made for it, else emptied).
void ready_parts(const std::string& parts, const std::string& key) {
  const std::string plan = (fs::path(parts) / "plan.json").string();
  if (fs::exists(parts) && read_text(plan) != key) {
    spdlog::info("prepare: {} holds pieces of another prepare; starting over", parts);
    fs::remove_all(parts);
  }
  fs::create_directories(parts);
  if (!fs::exists(plan)) {
    std::ofstream out(plan + ".tmp");
    out << key;
    out.close();
    if (!out) throw DataError("cannot write " + plan);
    fs::rename(plan + ".tmp", plan);
  }
}

void wait_for(const std::vector<std::string>& dirs, const std::string& what) {
  auto last_log = Clock::now();
  for (size_t i = 0; i < dirs.size();) {
    if (is_prepared_folder(dirs[i])) {
      ++i;
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (Clock::now() - last_log > std::chrono::seconds(60)) {
      spdlog::info("prepare: waiting for {} ({} of {} there)", what, i, dirs.size());
      last_log = Clock::now();
    }
  }
}

// Every file gives some pairs (as when a run reads it): a file without any is an error.
void check_files_have_pairs(const std::vector<PrepareItem>& items, const std::vector<std::string>& pieces) {
  std::map<std::string, int64_t> pairs;
  for (size_t i = 0; i < items.size(); ++i) pairs[items[i].piece.file] += read_manifest(pieces[i]).pairs;
  for (const auto& item : items)
    if (pairs[item.piece.file] == 0) throw DataError(item.piece.file + ": no pairs");
}

// Test hook: DDP_EMBED_TEST_DIE_AFTER_PIECES=R:N, rank R kills itself (SIGKILL, as a
// crash or a lost machine would) after writing N pieces of a prepare. -1 when unset or
// another rank's.
int64_t die_after_pieces(int rank) {
  const char* v = std::getenv("DDP_EMBED_TEST_DIE_AFTER_PIECES");
  const char* colon = v ? std::strchr(v, ':') : nullptr;
  if (!colon || std::atoi(v) != rank) return -1;
  return std::atoll(colon + 1);
}

// While it lives, tcmalloc gives what is freed back to the system at once. A piece's
// arrays grow by doubling, and tcmalloc keeps the blocks they leave, which the next
// pieces' arrays do not all fit: the resident set would grow piece after piece, where it
// must stay that of one piece (10 M pairs of Parquet on one rank: 270 MB after the first
// piece, 310 MB from the second on; 240 MB with this, in the same time).
class FreedMemoryReturned {
 public:
  FreedMemoryReturned() {
    if (!MallocExtension_GetNumericProperty || !MallocExtension_SetNumericProperty) return;
    set_ = MallocExtension_GetNumericProperty(kProperty, &before_) &&
           MallocExtension_SetNumericProperty(kProperty, 1);
  }
  ~FreedMemoryReturned() {
    if (set_) MallocExtension_SetNumericProperty(kProperty, before_);
  }
  FreedMemoryReturned(const FreedMemoryReturned&) = delete;
  FreedMemoryReturned& operator=(const FreedMemoryReturned&) = delete;

 private:
  static constexpr const char* kProperty = "tcmalloc.aggressive_memory_decommit";
  size_t before_ = 0;
  bool set_ = false;
};

// Test hook: DDP_EMBED_TEST_PIECE_BYTES=N plans pieces of N bytes instead of kPieceBytes,
// so that a test's small files are cut into many pieces as large ones are.
int64_t piece_bytes() {
  const char* v = std::getenv("DDP_EMBED_TEST_PIECE_BYTES");
  return v && std::atoll(v) > 0 ? std::atoll(v) : kPieceBytes;
}

std::string describe(const std::vector<std::string>& differences) {
  std::string out;
  for (const auto& d : differences) out += "\n  " + d;
  return out;
}

}  // namespace

PreparedManifest expected_manifest(const std::vector<SourceInput>& sources, const Tokenizer& tokenizer,
                                   const Config& cfg, const PreparedManifest* found) {
  PreparedManifest m;
  m.tokenizer = stamp_tokenizer(tokenizer);
  m.max_length = cfg.tokenizer.max_length;
  m.teacher_scores_required = !teacher_scores_key(cfg.loss).empty();
  for (size_t i = 0; i < sources.size(); ++i) {
    const SourceInput& s = sources[i];
    PreparedSource source{s.name, s.query_prompt, s.passage_prompt, s.columns.key(), {}, 0, 0};
    const PreparedSource* before = found && i < found->sources.size() ? &found->sources[i] : nullptr;
    // A folder's source files may be gone (it was copied to where it trains): those are
    // taken as the folder recorded them, where the source names plain paths (a glob is
    // expanded: what it matches now is what the run would read).
    auto glob = [](const std::string& f) { return f.find_first_of("*?[") != std::string::npos; };
    const bool copied_away = before && before->files.size() == s.files.size() &&
                             std::none_of(s.files.begin(), s.files.end(), glob) &&
                             std::any_of(s.files.begin(), s.files.end(), [](const auto& f) { return !fs::exists(f); });
    if (copied_away) {
      for (size_t k = 0; k < s.files.size(); ++k)
        source.files.push_back(fs::exists(s.files[k]) ? stamp_file(s.files[k]) : before->files[k]);
    } else {
      for (const auto& file : resolve_data_files(s.files, s.dataset).files)
        source.files.push_back(stamp_file(file.path));
    }
    m.sources.push_back(std::move(source));
  }
  return m;
}

namespace {

// prepare_folder under the lock: `dir` normalized.
void prepare_locked(const std::string& dir, const std::vector<SourceInput>& sources, const Tokenizer& tokenizer,
                    const Config& cfg, ProcessGroup& pg, int threads, bool replace_stale) {
  const PreparedManifest expected = expected_manifest(sources, tokenizer, cfg);
  const bool there = is_prepared_folder(dir);
  std::error_code ec;
  if (!there && fs::exists(dir) && !fs::is_empty(dir, ec))
    throw DataError(dir + " exists and is not a prepared folder (no manifest.json): a prepare would replace it; "
                    "name a new or empty folder");
  std::vector<std::string> differences;
  if (there) {
    try {
      differences = manifest_differences(read_manifest(dir), expected);
    } catch (const DataError& e) {
      if (!replace_stale) throw;
      differences = {e.what()};  // an older format or a damaged manifest: made again below
    }
    if (differences.empty()) {
      spdlog::info("prepare: {} is up to date", dir);
      return;
    }
    if (!replace_stale)
      throw DataError("data.prepared " + dir + " was prepared from other data:" + describe(differences) +
                      "\nprepare it again (embed-train prepare --config ... --output " + dir +
                      ") or name another folder");
  }
  const auto started = Clock::now();
  const std::vector<PrepareItem> items = plan_prepare(sources, piece_bytes());
  const std::string parts = dir + ".parts";
  const int rank = pg.rank(), world = pg.world_size();
  pg.barrier();  // every rank has read what was there before rank 0 replaces it
  if (rank == 0) {
    if (there) spdlog::info("prepare: {} was prepared from other data; preparing it again", dir);
    size_t files = 0;
    for (size_t i = 0; i < items.size(); ++i) files += i == 0 || items[i].piece.file != items[i - 1].piece.file;
    spdlog::info("prepare: {} piece{} of {} file{}", items.size(), items.size() > 1 ? "s" : "", files,
                 files > 1 ? "s" : "");
    fs::remove_all(dir);
    ready_parts(parts, plan_key(expected, items, cfg));
  }
  pg.barrier();  // DIR.parts is ready and no old DIR is left

  int64_t mine = 0, done = 0, resumed = 0, pairs = 0, bytes = 0;
  for (size_t i = size_t(rank); i < items.size(); i += size_t(world)) ++mine;
  WorkProgress progress("prepare", "pieces", mine, 1, rank == 0);
  std::vector<std::string> pieces;
  std::vector<int> piece_source;
  for (size_t i = 0; i < items.size(); ++i) {
    pieces.push_back(piece_dir(parts, i));
    piece_source.push_back(items[i].source);
  }
  const int64_t die_after = die_after_pieces(rank);
  int64_t written = 0;
  const FreedMemoryReturned returned;
  for (size_t i = size_t(rank); i < items.size(); i += size_t(world)) {
    if (written == die_after) ::raise(SIGKILL);
    const auto t0 = Clock::now();
    if (is_prepared_folder(pieces[i])) {
      ++resumed;
    } else {
      const PrepareItem& item = items[i];
      const SourceInput& source = sources[size_t(item.source)];
      const PairDataset data = load_piece(source, item.piece, tokenizer, cfg.tokenizer.max_length,
                                          cfg.data.skip_bad_lines, threads, cfg.data.max_line_bytes);
      PreparedManifest piece = expected;
      piece.sources = {expected.sources[size_t(item.source)]};
      piece.piece_of = dir;
      write_prepared(data, piece, pieces[i]);
      ++written;
      pairs += data.size();
      bytes += item.bytes;
    }
    progress.step_done(++done, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  // Its peak memory so far: reading and tokenizing pieces, before rank 0 joins them.
  spdlog::info("prepare: rank {}: {} pieces ({} kept from before), {} pairs, {:.1f} MB in {:.1f}s: {:.0f} pairs/s on "
               "{} thread{}, peak RSS {:.0f} MB",
               rank, mine, resumed, pairs, double(bytes) / 1e6, seconds, double(pairs) / std::max(seconds, 1e-9),
               threads, threads > 1 ? "s" : "", peak_rss_mb());

  if (rank == 0) {
    wait_for(pieces, "the other ranks' pieces");
    check_files_have_pairs(items, pieces);
    concatenate_prepared(pieces, piece_source, expected, dir);
    fs::remove_all(parts);
    const PreparedManifest m = read_manifest(dir);
    spdlog::info("prepare: {}: {} pairs, {} sequences, {} token ids ({}-bit), {} sources, in {:.1f}s", dir, m.pairs,
                 m.sequences, m.ids, m.wide ? 32 : 16, m.sources.size(),
                 std::chrono::duration<double>(Clock::now() - started).count());
  } else {
    wait_for({dir}, dir);
  }
}

}  // namespace

void prepare_folder(const std::string& folder, const std::vector<SourceInput>& sources, const Tokenizer& tokenizer,
                    const Config& cfg, ProcessGroup& pg, int threads, bool replace_stale) {
  const std::string dir = folder_path(folder);  // "out/prep/" is out/prep: DIR.parts beside it, not in it
  // Rank 0 holds DIR.lock for the whole prepare (data/prepared.h): no rank looks at DIR
  // before it holds it, and none returns (to open DIR, which takes it shared) before it
  // let go. The last barrier comes right after DIR is published, well within dist.timeout_s.
  std::optional<PreparedFolderLock> lock;
  if (pg.rank() == 0) lock.emplace(dir, PreparedFolderLock::Mode::Prepare);
  pg.barrier();
  prepare_locked(dir, sources, tokenizer, cfg, pg, threads, replace_stale);
  lock.reset();
  pg.barrier();
}

PairDataset open_training_folder(const std::string& folder, const std::vector<SourceInput>& sources,
                                 const Tokenizer& tokenizer, const Config& cfg, const VerifyShare& share) {
  const std::string dir = folder_path(folder);
  // Shared, until the arrays are mapped and verified: a prepare does not replace DIR meanwhile.
  const PreparedFolderLock reading(dir, PreparedFolderLock::Mode::Read);
  const PreparedManifest found = read_manifest(dir);
  // One piece of a prepare that did not finish is a sliver of the data, not a data set.
  if (!found.piece_of.empty())
    throw DataError(dir + ": one piece of an unfinished prepare of " + found.piece_of +
                    ", not a whole data set: run the prepare again to finish it (embed-train prepare --config ... "
                    "--output " + found.piece_of + "), then train on " + found.piece_of);
  PreparedManifest expected;
  if (sources.empty()) {  // the folder is the data: its sources are what they are
    expected = found;
    expected.tokenizer = stamp_tokenizer(tokenizer);
    expected.max_length = cfg.tokenizer.max_length;
    expected.teacher_scores_required = !teacher_scores_key(cfg.loss).empty();
  } else {
    expected = expected_manifest(sources, tokenizer, cfg, &found);
  }
  // Made from other data: said before its arrays are read through.
  const auto differences = manifest_differences(found, expected);
  if (!differences.empty())
    throw DataError(dir + " was prepared from other data than this run's:" + describe(differences) +
                    "\nprepare it again (embed-train prepare --config ... --output " + dir + ")");
  const auto started = Clock::now();
  PairDataset data = open_prepared(dir, nullptr, /*random_access=*/true, share);
  int64_t bytes = 0;
  for (const auto& file : expected_files(found)) bytes += file.second;
  spdlog::info("data: {} verified ({:.2f} GB{}) in {:.2f}s on {} thread{}", dir, double(bytes) / 1e9,
               share.parts > 1 ? fmt::format(", this worker's share 1/{}", share.parts) : std::string(),
               std::chrono::duration<double>(Clock::now() - started).count(), share.threads,
               share.threads > 1 ? "s" : "");
  return data;
}

int run_prepare(const Config& cfg, const std::string& output) {
  const WorkerEnv env = read_worker_env();
  init_console_log(env.rank);
  const int threads = choose_threads(env);
  auto pg = ProcessGroup::init(env, DistBackend::Gloo, /*cuda=*/false, std::chrono::seconds(cfg.dist.timeout_s));
  const SourceSetup setup = set_up_sources(cfg, *pg);
  spdlog::info("prepare: {} source{} into {}, {} worker{} x {} thread{}, {} tokenizer ({} tokens), max_length {}",
               setup.sources.size(), setup.sources.size() > 1 ? "s" : "", output, pg->world_size(),
               pg->world_size() > 1 ? "s" : "", threads, threads > 1 ? "s" : "", setup.tokenizer->type(),
               setup.tokenizer->vocab_size(), cfg.tokenizer.max_length);
  prepare_folder(output, setup.sources, *setup.tokenizer, cfg, *pg, threads, /*replace_stale=*/true);
  return 0;
}

}  // namespace ddp_embed
