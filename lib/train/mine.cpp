#include "train/mine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "compat/cuda_support.h"
#include "data/pair_record.h"
#include "data/pairs.h"
#include "data/table_files.h"
#include "model/model_folder.h"
#include "parallel/process_group.h"
#include "parallel/worker_env.h"
#include "train/inference.h"
#include "train/rerank_inference.h"
#include "train/worker.h"
#include "util/atomic_file.h"
#include "util/file_check.h"
#include "util/log.h"
#include "util/utf8.h"

namespace fs = std::filesystem;

namespace ddp_embed {
namespace {

// ---- the input: lines, unique queries, the corpus -----------------------------------------

// What mine_hard_negatives makes of a dataset of (anchor, positive) rows; a pairs line
// with several positives stands for one row per positive.
struct MiningInput {
  struct Line {
    int64_t query = 0;              // into `queries`
    std::vector<std::string> pos;   // as written on the line
  };
  std::vector<Line> lines;
  std::vector<std::string> queries;             // unique, in order of first appearance
  std::vector<std::string> corpus;              // --corpus's texts, then the positives: unique, first appearance
  std::vector<std::vector<int64_t>> positives;  // per query: its positives' corpus indices, unique, in order
  // The most rows (query, positive) of one query, repeated ones counted, as
  // sentence-transformers counts them (pandas' groupby().count()) for range_max.
  int64_t max_positives = 0;
  int64_t corpus_file_texts = 0, corpus_blank_lines = 0;
};

// Every row of a table file of pairs (data/table_files.h: its columns by the names of
// data.train), checked; "FILE: row group G, row R: what is wrong" for a bad one.
std::vector<PairRecord> read_pair_rows(const std::string& path, TableFormat format) {
  std::vector<PairRecord> records;
  const std::string columns = read_table_pairs(path, format, {}, 8192, [&](std::vector<TableRow>& rows) {
    for (TableRow& row : rows) {
      if (!row.error.empty()) throw DataError(path + ": " + row.where + ": " + row.error);
      records.push_back(std::move(row.record));
    }
  });
  spdlog::info("mine: {}: {}", path, columns);
  if (records.empty()) throw DataError(path + ": no pairs in it");
  return records;
}

// Every line of the pairs file, checked; "FILE:LINE: what is wrong" for a bad one.
std::vector<PairRecord> read_pair_lines(const std::string& path) {
  const std::string folder = folder_not_file(path, "a file of pairs (JSONL), nor a table file of them (Parquet, ...)");
  if (!folder.empty()) throw std::runtime_error("--input " + folder);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("--input " + path + ": cannot open" + (fs::exists(path) ? "" : ": no such file"));
  if (const TableFormat format = table_format_of(path); format != TableFormat::Jsonl)
    return read_pair_rows(path, format);
  std::vector<PairRecord> records;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (number == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // a UTF-8 byte-order mark
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t\r\n\f\v") == std::string::npos) continue;
    records.emplace_back();
    const std::string error = parse_pair_record(line, records.back());
    if (!error.empty()) throw std::runtime_error(path + ":" + std::to_string(number) + ": " + error);
  }
  if (records.empty()) throw std::runtime_error(path + ": no pairs in it");
  return records;
}

// --corpus: one text a line (blank lines skipped), or JSONL "text"s. Output is JSON, so
// every text must be UTF-8 (JSONL texts are: the parser checks them).
std::vector<std::string> read_corpus(const std::string& path, int64_t& blank_lines) {
  if (!fs::exists(path)) throw std::runtime_error("--corpus " + path + ": no such file");
  const std::vector<std::string> lines = read_sentences(path);
  std::vector<std::string> texts;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& text = lines[i];
    if (text.find_first_not_of(" \t\r\n\f\v") == std::string::npos) {
      ++blank_lines;
      continue;
    }
    if (!utf8::is_valid(text.data(), text.data() + text.size()))
      throw std::runtime_error(path + ":" + std::to_string(i + 1) + ": not valid UTF-8");
    texts.push_back(text);
  }
  return texts;
}

MiningInput read_mining_input(const std::string& pairs_path, const std::string& corpus_path) {
  MiningInput in;
  std::unordered_map<std::string, int64_t> query_index, corpus_index, rows_of_query;
  auto corpus_entry = [&](const std::string& text) {
    const auto [it, added] = corpus_index.emplace(text, int64_t(in.corpus.size()));
    if (added) in.corpus.push_back(text);
    return it->second;
  };
  if (!corpus_path.empty()) {
    for (const std::string& text : read_corpus(corpus_path, in.corpus_blank_lines)) {
      corpus_entry(text);
      ++in.corpus_file_texts;
    }
  }
  for (PairRecord& record : read_pair_lines(pairs_path)) {
    const auto [it, added] = query_index.emplace(record.query, int64_t(in.queries.size()));
    if (added) {
      in.queries.push_back(record.query);
      in.positives.emplace_back();
    }
    std::vector<int64_t>& positives = in.positives[size_t(it->second)];
    for (const std::string& text : record.pos) {
      const int64_t c = corpus_entry(text);
      if (std::find(positives.begin(), positives.end(), c) == positives.end()) positives.push_back(c);
    }
    in.max_positives = std::max(in.max_positives, rows_of_query[record.query] += int64_t(record.pos.size()));
    in.lines.push_back({it->second, std::move(record.pos)});
  }
  return in;
}

// ---- the parameters, resolved and checked as sentence-transformers does ---------------------

struct Selection {
  int64_t num_negatives = 0, range_min = 0, range_max = 0;
  int64_t candidates = 0;  // scores kept per query: range_max + max_positives, at most the corpus
  // As float32, as sentence-transformers compares float32 scores with them.
  std::optional<float> absolute_margin, relative_margin, max_score, min_score;
};

std::optional<float> as_float(const std::optional<double>& v) {
  return v ? std::optional<float>(static_cast<float>(*v)) : std::nullopt;
}

Selection resolve_selection(const MineOptions& o, const MiningInput& in) {
  Selection s;
  s.num_negatives = o.num_negatives;
  s.range_min = o.range_min;
  // Room for the positives among the candidates, and ten times the negatives when a
  // filter may skip some (min_score does not count: mine_hard_negatives counts it only
  // with a cross-encoder).
  const bool filtered = o.absolute_margin || o.relative_margin || o.max_score;
  s.range_max = o.range_max.value_or(o.range_min + (filtered ? 10 : 1) * o.num_negatives + in.max_positives);
  if (!o.range_max) spdlog::info("mine: --range-max {} from the other parameters", s.range_max);
  if (s.range_min >= s.range_max)
    throw std::invalid_argument("--range-min " + std::to_string(s.range_min) + " must be smaller than --range-max " +
                                std::to_string(s.range_max));
  if (s.num_negatives > s.range_max - s.range_min)
    throw std::invalid_argument("--num-negatives " + std::to_string(s.num_negatives) + " do not fit: only " +
                                std::to_string(s.range_max - s.range_min) + " candidates remain after skipping the " +
                                "first --range-min " + std::to_string(s.range_min) + " of --range-max " +
                                std::to_string(s.range_max));
  s.candidates = std::min<int64_t>(s.range_max + in.max_positives, int64_t(in.corpus.size()));
  s.absolute_margin = as_float(o.absolute_margin);
  s.relative_margin = as_float(o.relative_margin);
  s.max_score = as_float(o.max_score);
  s.min_score = as_float(o.min_score);
  return s;
}

// ---- one query's negatives ------------------------------------------------------------------

// Per query, what goes back to rank 0: the chosen corpus indices (-1: not enough
// negatives), then how many candidates each filter skipped.
enum Counter : int64_t { kAbsoluteMargin, kRelativeMargin, kMaxScore, kMinScore, kCounters };

// The corpus indices of the k highest of `scores`, best first; equal scores by corpus
// order. One pass keeping the k best in a heap whose front is the worst of them.
void top_k(const float* scores, int64_t n, int64_t k, std::vector<int64_t>& best) {
  const auto better = [scores](int64_t a, int64_t b) { return scores[a] > scores[b] || (scores[a] == scores[b] && a < b); };
  best.clear();
  for (int64_t i = 0; i < n; ++i) {
    if (int64_t(best.size()) < k) {
      best.push_back(i);
      std::push_heap(best.begin(), best.end(), better);
    } else if (better(i, best.front())) {
      std::pop_heap(best.begin(), best.end(), better);
      best.back() = i;
      std::push_heap(best.begin(), best.end(), better);
    }
  }
  std::sort_heap(best.begin(), best.end(), better);
}

// mine_hard_negatives' steps for one query, in its order: the best `candidates` scores;
// the query's positives out; the absolute margin, the relative margin, max_score and
// min_score, each counting what it removes of what is left; then, of the candidates
// left, best first, skip range_min and take num_negatives. The margins compare with the
// lowest score of the query's positives (the hardest positive). Arithmetic in float32,
// as there.
void select_negatives(const float* scores, int64_t n, const std::vector<int64_t>& positives, const Selection& s,
                      std::vector<int64_t>& scratch, int64_t* out) {
  std::fill(out, out + s.num_negatives + kCounters, 0);
  std::fill(out, out + s.num_negatives, -1);
  int64_t* skipped = out + s.num_negatives;
  float lowest_positive = std::numeric_limits<float>::infinity();
  for (const int64_t p : positives) lowest_positive = std::min(lowest_positive, scores[p]);
  top_k(scores, n, s.candidates, scratch);
  int64_t kept = 0;
  for (const int64_t c : scratch) {
    if (std::find(positives.begin(), positives.end(), c) != positives.end()) continue;
    const float score = scores[c];
    if (s.absolute_margin && score + *s.absolute_margin > lowest_positive) {
      ++skipped[kAbsoluteMargin];
      continue;
    }
    if (s.relative_margin && score > lowest_positive - std::fabs(lowest_positive) * *s.relative_margin) {
      ++skipped[kRelativeMargin];
      continue;
    }
    if (s.max_score && score > *s.max_score) {
      ++skipped[kMaxScore];
      continue;
    }
    if (s.min_score && score < *s.min_score) {
      ++skipped[kMinScore];
      continue;
    }
    if (kept >= s.range_min && kept < s.range_min + s.num_negatives) out[kept - s.range_min] = c;
    ++kept;
  }
}

// This rank's share of the queries against the whole corpus, in fixed chunks of queries
// (the chunk size depends only on the corpus size) so that every score is computed by the
// same matrix product at any world size: [its queries, num_negatives + kCounters].
at::Tensor select_for_queries(const at::Tensor& queries, const at::Tensor& corpus, const MiningInput& in,
                              const Selection& s, c10::Device device, const ProcessGroup& pg) {
  const int64_t nq = queries.size(0), nc = corpus.size(0);
  // At most 2^25 scores (128 MB) at a time.
  const int64_t chunk = std::clamp<int64_t>((int64_t{1} << 25) / std::max<int64_t>(nc, 1), 1, 4096);
  const int64_t chunks = (nq + chunk - 1) / chunk;
  const int64_t begin = std::min(nq, chunks * pg.rank() / pg.world_size() * chunk);
  const int64_t end = std::min(nq, chunks * (pg.rank() + 1) / pg.world_size() * chunk);
  const int64_t width = s.num_negatives + kCounters;
  at::Tensor out = at::empty({end - begin, width}, at::kLong);
  int64_t* result = out.data_ptr<int64_t>();
  const at::Tensor corpus_t = corpus.to(device).t();
  WorkProgress progress("mine: scores", "queries", end - begin, chunk, pg.rank() == 0);
  for (int64_t b = begin; b < end; b += chunk) {
    const auto started = std::chrono::steady_clock::now();
    const int64_t rows = std::min(chunk, end - b);
    const at::Tensor scores =
        at::matmul(queries.narrow(0, b, rows).to(device), corpus_t).to(at::kFloat).cpu().contiguous();
    const float* score_rows = scores.data_ptr<float>();
    at::parallel_for(0, rows, 1, [&](int64_t r0, int64_t r1) {
      std::vector<int64_t> scratch;
      for (int64_t r = r0; r < r1; ++r)
        select_negatives(score_rows + r * nc, nc, in.positives[size_t(b + r)], s, scratch,
                         result + (b - begin + r) * width);
    });
    progress.step_done(b + rows - begin, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }
  return out;
}

// ---- the output -------------------------------------------------------------------------------

// The pairs file with "neg" filled, one line per input line whose query got its negatives.
// Returns the text and the number of lines dropped.
// With `scores` (unit-vector embeddings of the queries and the corpus), each line also
// carries its positives' and negatives' cosine scores.
struct Embedded {
  at::Tensor queries, corpus;
};

std::string mined_pairs(const MiningInput& in, const at::Tensor& chosen, int64_t num_negatives,
                        const std::optional<Embedded>& scores, int64_t& dropped) {
  std::unordered_map<std::string, int64_t> corpus_index;
  if (scores)
    for (size_t i = 0; i < in.corpus.size(); ++i) corpus_index.emplace(in.corpus[i], int64_t(i));
  auto score = [&](int64_t query, int64_t candidate) {
    return double(at::dot(scores->queries[query], scores->corpus[candidate]).item<float>());
  };
  std::string text;
  dropped = 0;
  const int64_t* rows = chosen.data_ptr<int64_t>();
  const int64_t width = chosen.size(1);
  for (const MiningInput::Line& line : in.lines) {
    const int64_t* negatives = rows + line.query * width;
    if (std::any_of(negatives, negatives + num_negatives, [](int64_t c) { return c < 0; })) {
      ++dropped;
      continue;
    }
    nlohmann::ordered_json j;
    j["query"] = in.queries[size_t(line.query)];
    j["pos"] = line.pos.size() == 1 ? nlohmann::ordered_json(line.pos[0]) : nlohmann::ordered_json(line.pos);
    j["neg"] = nlohmann::ordered_json::array();
    for (int64_t i = 0; i < num_negatives; ++i) j["neg"].push_back(in.corpus[size_t(negatives[i])]);
    if (scores) {
      j["pos_scores"] = nlohmann::ordered_json::array();
      for (const std::string& pos : line.pos) j["pos_scores"].push_back(score(line.query, corpus_index.at(pos)));
      j["neg_scores"] = nlohmann::ordered_json::array();
      for (int64_t i = 0; i < num_negatives; ++i) j["neg_scores"].push_back(score(line.query, negatives[i]));
    }
    text += j.dump() + "\n";
  }
  return text;
}

// "relative_margin 0.05 skipped 2,345 of the 40,000 candidates; ..." for the log.
std::string skipped_summary(const at::Tensor& chosen, const MineOptions& o, int64_t num_negatives) {
  const at::Tensor totals = chosen.narrow(1, num_negatives, kCounters).sum(0);
  const std::pair<const char*, std::optional<double>> filters[] = {{"--absolute-margin", o.absolute_margin},
                                                                   {"--relative-margin", o.relative_margin},
                                                                   {"--max-score", o.max_score},
                                                                   {"--min-score", o.min_score}};
  std::string out;
  for (int64_t f = 0; f < kCounters; ++f) {
    if (!filters[f].second) continue;
    out += fmt::format("{}{} {} skipped {} candidates", out.empty() ? "" : "; ", filters[f].first, *filters[f].second,
                       totals[f].item<int64_t>());
  }
  return out;
}

// --output's folder must exist before any work is done: a typo found after an hour of
// encoding would waste the hour.
void check_output_path(const std::string& output) {
  const fs::path path(output);
  if (fs::is_directory(path)) throw std::invalid_argument("--output " + output + " is a folder, not a file");
  const fs::path folder = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  if (!fs::is_directory(folder))
    throw std::invalid_argument("--output " + output + ": the folder " + folder.string() + " does not exist");
}

// cpu, cuda:N, or cuda: the local rank's device among the visible ones.
c10::Device mining_device(const std::string& wanted, const WorkerEnv& env) {
  c10::Device device(wanted);
  if (device.is_cuda() && !device.has_index()) {
    const int visible = std::max(1, compat::cuda_device_count());
    device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank % visible));
  }
  return device;
}

}  // namespace

int run_mine(const MineOptions& o) {
  const WorkerEnv env = read_worker_env();
  init_console_log(env.rank);
  at::set_num_threads(choose_threads(env));  // as training: the node's cores shared among its workers
  if (env.rank == 0) check_output_path(o.output);
  for (const auto& [flag, path] : {std::pair<const char*, const std::string&>{"--input", o.input}, {"--corpus", o.corpus}})
    if (!path.empty() && same_file(o.output, path))
      throw std::invalid_argument("--output " + o.output + " is the file " + flag + " names (" + path +
                                  "): mining would overwrite what it reads; write the mined pairs to another file");
  const MiningInput in = read_mining_input(o.input, o.corpus);
  spdlog::info("mine: {} lines of {}: {} unique queries, {} corpus texts ({}{} unique positives), at most {} positive{} "
               "a query",
               in.lines.size(), o.input, in.queries.size(), in.corpus.size(),
               o.corpus.empty() ? "" : fmt::format("{} texts of {} and the ", in.corpus_file_texts, o.corpus),
               o.corpus.empty() ? "the" : "", in.max_positives, in.max_positives > 1 ? "s" : "");
  if (in.corpus_blank_lines > 0) spdlog::info("mine: {} blank lines of {} skipped", in.corpus_blank_lines, o.corpus);
  const Selection selection = resolve_selection(o, in);

  const c10::Device device = mining_device(o.device, env);
  compat::prepare_device(device);  // before any tensor: CUDA is loaded on first use (compat/cuda_support.h)
  LoadedModel loaded = load_model_folder(o.model_dir);
  require_dense_embedder(loaded, o.model_dir, "mine");
  // As SentenceTransformer.encode_query / encode_document choose their prompts.
  const std::string query_prompt =
      resolve_prompt(loaded, o.query_prompt, o.query_prompt_name, "--query-prompt-name", std::string("query"));
  const std::string corpus_prompt =
      resolve_prompt(loaded, o.corpus_prompt, o.corpus_prompt_name, "--corpus-prompt-name", std::string("document"));
  for (const auto& [what, prompt] : {std::pair{"query", query_prompt}, std::pair{"corpus", corpus_prompt}})
    if (!prompt.empty()) spdlog::info("mine: the prompt {} before each {} text", nlohmann::json(prompt).dump(), what);
  loaded.model->to(device);

  auto pg = ProcessGroup::init(env, DistBackend::Auto, device.is_cuda(), std::chrono::seconds(600));
  spdlog::info("mine: {} worker{} x {} thread{}, device {}; {} negatives a query from rank {} on of its best {} "
               "candidates left",
               pg->world_size(), pg->world_size() > 1 ? "s" : "", at::get_num_threads(),
               at::get_num_threads() > 1 ? "s" : "", device.str(), selection.num_negatives, selection.range_min,
               selection.range_max);

  // Unit vectors: their dot products are the cosine similarities.
  const auto started = std::chrono::steady_clock::now();
  const at::Tensor corpus =
      embed_texts(loaded, in.corpus, corpus_prompt, {o.batch_size, device, true, "mine: corpus"}, *pg);
  const at::Tensor queries =
      embed_texts(loaded, in.queries, query_prompt, {o.batch_size, device, true, "mine: queries"}, *pg);
  spdlog::info("mine: {} corpus texts and {} queries embedded in {:.1f}s", corpus.size(0), queries.size(0),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());

  const at::Tensor mine = select_for_queries(queries, corpus, in, selection, device, *pg);
  const at::Tensor chosen = pg->communicates() ? pg->all_gather_varsize(mine.to(pg->device())).data.cpu() : mine;
  if (pg->rank() != 0) return 0;

  int64_t dropped = 0;
  const std::optional<Embedded> scores =
      o.output_scores ? std::optional<Embedded>(Embedded{queries.cpu(), corpus.cpu()}) : std::nullopt;
  write_file_atomically(o.output, mined_pairs(in, chosen, selection.num_negatives, scores, dropped));
  spdlog::info("mine: {} lines with {} negatives each written to {}; {} lines dropped without enough negatives",
               int64_t(in.lines.size()) - dropped, selection.num_negatives, o.output, dropped);
  const std::string skipped = skipped_summary(chosen, o, selection.num_negatives);
  if (!skipped.empty()) spdlog::info("mine: {}", skipped);
  return 0;
}

}  // namespace ddp_embed
