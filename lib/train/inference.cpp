#include "train/inference.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "data/pairs.h"
#include "parallel/process_group.h"
#include "model/model_folder.h"
#include "train/batches.h"
#include "train/evaluate.h"
#include "util/atomic_file.h"
#include "util/progress.h"

namespace ddp_embed {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// One sentence a line, or JSONL objects with a "text" field.
std::vector<std::string> read_sentences(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<std::string> out;
  std::string line;
  int64_t number = 0;
  const bool jsonl = ends_with(path, ".jsonl") || ends_with(path, ".json");
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();  // a file written on Windows
    if (!jsonl) {
      out.push_back(line);
      continue;
    }
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      throw std::runtime_error(path + ":" + std::to_string(number) + ": not valid JSON");
    }
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
      throw std::runtime_error(path + ":" + std::to_string(number) + ": expected an object with a string \"text\"");
    out.push_back(j["text"].get<std::string>());
  }
  return out;
}

// NumPy .npy, version 1.0: little-endian float32, C order, shape [rows, cols].
void write_npy(const std::string& path, const at::Tensor& m) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(m.size(0)) + ", " +
                       std::to_string(m.size(1)) + "), }";
  const size_t unpadded = 10 + header.size() + 1;
  header += std::string((64 - unpadded % 64) % 64, ' ') + "\n";
  std::ofstream out(path, std::ios::binary);
  const uint16_t len = static_cast<uint16_t>(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  out.put(char(len & 0xff));
  out.put(char(len >> 8));
  out << header;
  out.write(static_cast<const char*>(m.data_ptr()), std::streamsize(m.numel() * 4));
  if (!out) throw std::runtime_error("cannot write " + path);
}

// Unit rows, exactly as sentence-transformers' Normalize (torch's F.normalize):
// x / max(||x||, 1e-12).
at::Tensor l2_normalize(const at::Tensor& rows) { return rows / rows.norm(2, 1, true).clamp_min(1e-12); }

// On a terminal: "encode 1200/5000  24% [...] 350.2 sentences/s | 4s elapsed | ETA 11s".
void show_encode_progress(int64_t done, int64_t total, const RecentStepTimes& batch_times, int64_t batch_size,
                          double elapsed_s) {
  StatusLine& status = console_status();
  if (!status.enabled()) return;
  const double rate = double(batch_size) / batch_times.mean_seconds();
  const std::string details = std::isnan(rate) ? "" : fmt::format("{:.1f} sentences/s", rate);
  const int64_t batches_left = (total - done + batch_size - 1) / batch_size;
  status.update(format_progress_line({"encode", done, total, details, elapsed_s, batch_times.eta_seconds(batches_left)},
                                     status.width()));
}

// Not on a terminal (a log file): "encode: 640/1000" at every tenth of the work, so logs
// stay short.
class LoggedProgress {
 public:
  explicit LoggedProgress(int64_t total) : total_(total) {}
  void update(int64_t done) {
    const int64_t tenth = total_ > 0 ? done * 10 / total_ : 10;
    if (tenth > last_tenth_ || done == total_) {
      last_tenth_ = tenth;
      std::fprintf(stderr, "encode: %lld/%lld\n", static_cast<long long>(done), static_cast<long long>(total_));
    }
  }

 private:
  int64_t total_;
  int64_t last_tenth_ = 0;
};

}  // namespace

int run_encode(const EncodeOptions& o) {
  const c10::Device device(o.device);
  compat::prepare_device(device);  // before any tensor: CUDA is loaded on first use (compat/cuda_support.h)
  LoadedModel loaded = load_model_folder(o.model_dir, o.pooling);
  loaded.model->to(device);
  std::vector<std::string> sentences = read_sentences(o.input);

  // Batches of similar lengths pad less; the output keeps the input order.
  std::vector<std::vector<int32_t>> ids(sentences.size());
  for (size_t i = 0; i < sentences.size(); ++i) ids[i] = loaded.tokenizer->encode(sentences[i], loaded.max_length);
  std::vector<size_t> order(sentences.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ids[a].size() > ids[b].size(); });

  const int64_t n = int64_t(sentences.size());
  at::Tensor out = at::zeros({n, loaded.model->embedding_dim()}, at::kFloat);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  RecentStepTimes batch_times(/*warmup=*/1, /*window=*/20);
  StatusLineScope status_line;
  LoggedProgress logged(n);
  for (int64_t b = 0; b < n; b += o.batch_size) {
    const auto batch_begin = Clock::now();
    const int64_t rows = std::min<int64_t>(o.batch_size, n - b);
    TokenStore store;
    store.reserve(true, rows, 0);
    for (int64_t i = 0; i < rows; ++i) store.append(ids[order[size_t(b + i)]]);
    std::vector<int64_t> seqs(static_cast<size_t>(rows));
    std::iota(seqs.begin(), seqs.end(), int64_t{0});
    EncoderInput in = collate(store, seqs);
    in.ids = in.ids.to(device);
    in.mask = in.mask.to(device);
    at::Tensor e = loaded.model->encode_batch(in).to(at::kFloat).cpu();
    if (o.normalize || loaded.normalize) e = l2_normalize(e);
    for (int64_t i = 0; i < rows; ++i) out[int64_t(order[size_t(b + i)])].copy_(e[i]);
    batch_times.add(std::chrono::duration<double>(Clock::now() - batch_begin).count());
    show_encode_progress(b + rows, n, batch_times, o.batch_size,
                         std::chrono::duration<double>(Clock::now() - start).count());
    if (!console_status().enabled()) logged.update(b + rows);
  }
  console_status().clear();

  if (ends_with(o.output, ".npy")) {
    write_npy(o.output, out.contiguous());
  } else {
    std::ofstream f(o.output);
    const float* p = out.data_ptr<float>();
    const int64_t d = out.size(1);
    for (int64_t i = 0; i < n; ++i) {
      nlohmann::json line = {{"text", sentences[size_t(i)]},
                             {"embedding", std::vector<float>(p + i * d, p + (i + 1) * d)}};
      f << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    }
    if (!f) throw std::runtime_error("cannot write " + o.output);
  }
  spdlog::info("encode: {} embeddings of dimension {} written to {}", n, out.size(1), o.output);
  return 0;
}

namespace {

// The metrics, the task and the number of pairs as one flat JSON object:
// {"task": "retrieval", "pairs": 1000, "recall@1": 0.12, ...}.
nlohmann::json eval_json(const std::string& task, int64_t pairs, const std::map<std::string, double>& metrics) {
  nlohmann::json j = {{"task", task}, {"pairs", pairs}};
  for (const auto& [name, value] : metrics) j[name] = value;
  return j;
}

void print_table(const std::string& data, const std::string& task, int64_t pairs,
                 const std::map<std::string, double>& metrics) {
  std::printf("%s: %lld pairs, task %s\n", data.c_str(), static_cast<long long>(pairs), task.c_str());
  std::printf("  %-10s %s\n", "metric", "value");
  for (const auto& [name, value] : metrics) std::printf("  %-10s %.4f\n", name.c_str(), value);
}

}  // namespace

int run_eval(const EvalOptions& o) {
  if (o.format != "table" && o.format != "json")
    throw std::invalid_argument("--format " + o.format + ": expected table or json");
  // A Normalize module needs nothing here: evaluate() L2-normalizes every embedding the
  // same way (x / max(||x||, 1e-12)) before its cosines.
  const c10::Device device(o.device);
  compat::prepare_device(device);  // before any tensor: CUDA is loaded on first use (compat/cuda_support.h)
  LoadedModel loaded = load_model_folder(o.model_dir, o.pooling);
  loaded.model->to(device);
  PairDataset data = load_pairs({o.data}, *loaded.tokenizer, loaded.max_length, false);
  const std::string task = o.task.empty() ? (data.has_scores ? "sts" : "retrieval") : o.task;
  auto pg = ProcessGroup::single();
  const auto metrics = evaluate(loaded.model, data, *pg, o.batch_size, device, task);

  const nlohmann::json j = eval_json(task, data.size(), metrics);
  if (o.format == "json")
    std::printf("%s\n", j.dump().c_str());
  else
    print_table(o.data, task, data.size(), metrics);
  if (!o.json_out.empty()) {
    std::ofstream f(o.json_out);
    f << j.dump(2) << "\n";
    if (!f) throw std::runtime_error("cannot write " + o.json_out);
  }
  return 0;
}

int run_tokenize(const TokenizeOptions& o) {
  const FolderTokenizer folder = load_model_folder_tokenizer(o.model_dir);
  const std::vector<std::string> sentences = read_sentences(o.input);
  std::string lines;
  for (const std::string& sentence : sentences)
    lines += nlohmann::json{{"ids", folder.tokenizer->encode(sentence, folder.max_length)}}.dump() + "\n";
  write_file_atomically(o.output, lines);
  spdlog::info("tokenize: {} sentences (at most {} tokens each) written to {}", sentences.size(), folder.max_length,
               o.output);
  return 0;
}

}  // namespace ddp_embed
