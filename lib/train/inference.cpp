#include "train/inference.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <stdexcept>

#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "data/pairs.h"
#include "data/table_file.h"
#include "eval/metrics.h"
#include "parallel/process_group.h"
#include "model/model_folder.h"
#include "train/batches.h"
#include "train/evaluate.h"
#include "train/rerank_eval.h"
#include "train/rerank_inference.h"
#include "train/sparse_eval.h"
#include "util/atomic_file.h"
#include "util/file_check.h"
#include "util/progress.h"
#include "util/text.h"

namespace ddp_embed {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// NumPy .npy, version 1.0: little-endian float32, C order, shape [rows, cols], as bytes.
std::string npy_bytes(const at::Tensor& m) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(m.size(0)) + ", " +
                       std::to_string(m.size(1)) + "), }";
  const size_t unpadded = 10 + header.size() + 1;
  header += std::string((64 - unpadded % 64) % 64, ' ') + "\n";
  const uint16_t len = static_cast<uint16_t>(header.size());
  std::string out("\x93NUMPY\x01\x00", 8);
  out += char(len & 0xff);
  out += char(len >> 8);
  out += header;
  out.append(static_cast<const char*>(m.data_ptr()), size_t(m.numel()) * 4);
  return out;
}

// JSONL {"embedding": [...], "text": ...} a line, in input order.
std::string embeddings_jsonl(const std::vector<std::string>& sentences, const at::Tensor& m) {
  std::string out;
  const float* p = m.data_ptr<float>();
  const int64_t d = m.size(1);
  for (size_t i = 0; i < sentences.size(); ++i) {
    const nlohmann::json line = {{"text", sentences[i]},
                                 {"embedding", std::vector<float>(p + int64_t(i) * d, p + (int64_t(i) + 1) * d)}};
    out += line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }
  return out;
}

// Unit rows, exactly as sentence-transformers' Normalize (torch's F.normalize):
// x / max(||x||, 1e-12).
at::Tensor l2_normalize(const at::Tensor& rows) { return rows / rows.norm(2, 1, true).clamp_min(1e-12); }

}  // namespace

namespace {

// The column a table file's texts are read from: "text", else "sentence", else the first
// text column. Throws DataError naming the file and its columns when none holds text.
int sentence_column(const TableFile& table) {
  const std::vector<TableColumn>& columns = table.columns();
  auto is_text = [](const TableColumn& c) { return c.kind == DDP_EMBED_ARROW_TEXT || c.text_readable; };
  for (const char* name : {"text", "sentence"})
    for (size_t c = 0; c < columns.size(); ++c)
      if (columns[c].name == name) {
        if (!is_text(columns[c]))
          throw DataError(table.path() + ": the column \"" + name + "\" holds " + columns[c].type +
                          ", not text: write the texts to encode there");
        return static_cast<int>(c);
      }
  for (size_t c = 0; c < columns.size(); ++c)
    if (is_text(columns[c])) return static_cast<int>(c);
  std::string names;
  for (const TableColumn& c : columns)
    names += (names.empty() ? "" : ", ") + json_quoted_cut(c.name, 40) + " " + c.type;
  throw DataError(table.path() + ": no text column (the texts are read from \"text\", \"sentence\" or the first "
                  "column of text); its columns: " + (names.empty() ? "none" : names));
}

// A table file's texts, in its rows' order; a null is an error naming its row.
std::vector<std::string> read_table_sentences(const std::string& path, TableFormat format) {
  TableFile table(path, format);
  const int column = sentence_column(table);
  spdlog::info("{}: the texts of its column \"{}\"", path, table.columns()[size_t(column)].name);
  table.select({column}, {true}, 8192);
  std::vector<std::string> out;
  for (int64_t rows; (rows = table.next_batch()) > 0;) {
    for (int64_t r = 0; r < rows; ++r) {
      std::string_view text;
      if (table.text(0, r, text) != 1)
        throw DataError(path + ": " + table.where(r) + ": the text is null (every row needs one)");
      out.emplace_back(text);
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> read_sentences(const std::string& path) {
  if (const std::string folder = folder_not_file(path, "a file of texts (one a line, JSONL, or a table)");
      !folder.empty())
    throw std::runtime_error(folder);
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path + (std::filesystem::exists(path) ? "" : ": no such file"));
  if (const TableFormat format = table_format_of(path); format != TableFormat::Jsonl)
    return read_table_sentences(path, format);
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

std::string resolve_prompt(const LoadedModel& model, const std::optional<std::string>& prompt,
                           const std::optional<std::string>& prompt_name, const std::string& flag,
                           const std::optional<std::string>& fallback_name) {
  std::string text;
  if (prompt) {
    text = *prompt;
  } else if (prompt_name) {
    const auto it = model.prompts.find(*prompt_name);
    if (it == model.prompts.end()) {
      std::string known;
      for (const auto& [name, value] : model.prompts)
        known += (known.empty() ? "" : ", ") + nlohmann::json(name).dump() + " (" + nlohmann::json(value).dump() + ")";
      throw std::invalid_argument(flag + " " + *prompt_name + ": the model folder has no prompt of that name; " +
                                  (known.empty() ? "it has no prompts (config_sentence_transformers.json)"
                                                 : "its prompts: " + known));
    }
    text = it->second;
  } else if (fallback_name && model.prompts.count(*fallback_name)) {
    text = model.prompts.at(*fallback_name);
  }
  // A prompt that takes every token leaves all embeddings the same; one that takes more
  // than half leaves the text's tail cut (said, as training says it).
  if (!text.empty()) {
    const int left = tokens_left_after_prompt(*model.tokenizer, text, model.max_length);
    if (left <= 0)
      throw std::invalid_argument("the prompt " + json_quoted_cut(text) + " takes " +
                                  std::to_string(model.max_length - left) + " tokens of the model's " +
                                  std::to_string(model.max_length) +
                                  ": no token of the text would be left, every embedding the same; shorten it");
    if (left < model.max_length / 2)
      spdlog::warn("the prompt {} leaves {} of the model's {} tokens for the text", json_quoted_cut(text), left,
                   model.max_length);
  }
  if (!text.empty() && !model.prompt_excluded_by.empty())
    throw std::invalid_argument(model.prompt_excluded_by + ": include_prompt false (the prompt's tokens left out of " +
                                "the pooling) is not implemented; embed-train pools the prompt " +
                                nlohmann::json(text).dump() + " with the text");
  return text;
}

WorkProgress::WorkProgress(std::string label, std::string unit, int64_t total, int64_t step_size, bool shown)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), step_size_(step_size), shown_(shown) {}

void WorkProgress::step_done(int64_t done, double step_seconds) {
  if (!shown_) return;
  step_times_.add(step_seconds);
  const double rate = double(step_size_) / step_times_.mean_seconds();
  const double eta = done >= total_ ? 0.0 : step_times_.eta_seconds((total_ - done + step_size_ - 1) / step_size_);
  StatusLine& status = console_status();
  if (status.enabled()) {
    const std::string details = std::isnan(rate) ? "" : fmt::format("{:.1f} {}/s", rate, unit_);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    status.update(format_progress_line({label_, done, total_, details, elapsed, eta}, status.width()));
    return;
  }
  const int64_t tenth = total_ > 0 ? done * 10 / total_ : 10;
  if (tenth <= last_tenth_ && done != total_) return;
  last_tenth_ = tenth;
  spdlog::info("{}: {}/{} {}{}, ETA {}", label_, done, total_, unit_,
               std::isnan(rate) ? "" : fmt::format(", {:.1f} a second", rate), format_duration(eta));
}

at::Tensor embed_texts(LoadedModel& loaded, const std::vector<std::string>& texts, const std::string& prompt,
                       const EmbedSettings& settings, ProcessGroup& pg) {
  // Every rank tokenizes every text: the batches are cut from the order of all lengths.
  const int64_t n = int64_t(texts.size());
  std::vector<std::vector<int32_t>> ids(texts.size());
  at::parallel_for(0, n, 256, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      ids[size_t(i)] = loaded.tokenizer->encode(prompt.empty() ? texts[size_t(i)] : prompt + texts[size_t(i)],
                                                loaded.max_length);
  });
  // Batches of similar lengths pad less; the output keeps the input order.
  std::vector<int64_t> order(texts.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return ids[a].size() > ids[b].size(); });

  // This rank's contiguous run of whole batches.
  const int64_t batch = settings.batch_size;
  const int64_t batches = (n + batch - 1) / batch;
  const int64_t begin = std::min(n, batches * pg.rank() / pg.world_size() * batch);
  const int64_t end = std::min(n, batches * (pg.rank() + 1) / pg.world_size() * batch);

  std::vector<at::Tensor> parts;
  WorkProgress progress(settings.label, "sentences", end - begin, batch, pg.rank() == 0);
  StatusLineScope status_line;
  for (int64_t b = begin; b < end; b += batch) {
    const auto batch_begin = std::chrono::steady_clock::now();
    const int64_t rows = std::min(batch, end - b);
    TokenStore store;
    store.reserve(true, rows, 0);
    for (int64_t i = 0; i < rows; ++i) store.append(ids[size_t(order[size_t(b + i)])]);
    std::vector<int64_t> seqs(static_cast<size_t>(rows));
    std::iota(seqs.begin(), seqs.end(), int64_t{0});
    EncoderInput in = collate(store, seqs);
    in.ids = in.ids.to(settings.device);
    in.mask = in.mask.to(settings.device);
    at::Tensor e = loaded.model->encode_batch(in).to(at::kFloat);
    if (settings.normalize || loaded.normalize) e = l2_normalize(e);
    parts.push_back(e.cpu());
    progress.step_done(b + rows - begin,
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - batch_begin).count());
  }
  at::Tensor mine = parts.empty() ? at::zeros({0, loaded.model->embedding_dim()}, at::kFloat) : at::cat(parts, 0);
  at::Tensor sorted = pg.communicates() ? pg.all_gather_varsize(mine.to(pg.device())).data.cpu() : mine;
  at::Tensor out = at::empty_like(sorted);
  out.index_copy_(0, at::tensor(order, at::kLong), sorted);
  return out;
}

namespace {

// encode/eval --pooling: none when not given, else one of model.pooling's spellings.
std::optional<Pooling> pooling_option(const std::string& typed) {
  if (typed.empty()) return std::nullopt;
  return parse_choice<Pooling>(typed, "--pooling");
}

// An output that would overwrite the input it is made from.
void refuse_output_over_input(const std::string& output, const std::string& input) {
  if (same_file(output, input))
    throw std::invalid_argument("--output " + output + " is the --input file (" + input +
                                "): writing it would overwrite what is read; name another file");
}

}  // namespace

namespace {

// A sparse encoder's vectors as JSON lines, {"text": ..., "sparse": {"TOKEN_ID": weight, ...}}
// with the non-zero entries in id order (what SparseEncoder.decode lists, by id). Texts
// go through embed_texts a block at a time: a block's dense [texts, vocabulary] rows are
// the largest thing held (4096 × 30,522 floats, 500 MB; XLM-R's 250,002: a block of 512).
int write_sparse_encoding(const EncodeOptions& o, LoadedModel& loaded, const std::vector<std::string>& sentences,
                          const std::string& prompt, const c10::Device& device, ProcessGroup& single) {
  if (ends_with(o.output, ".npy"))
    throw std::invalid_argument("--output " + o.output + ": " + o.model_dir + " is a sparse encoder, whose vectors " +
                                "have one entry per vocabulary word (" + std::to_string(loaded.model->embedding_dim()) +
                                "), almost all 0: write them as JSON lines (--output FILE.jsonl), each text's "
                                "non-zero entries as {\"token_id\": weight}");
  if (o.normalize)
    throw std::invalid_argument("--normalize: a sparse encoder's vectors are compared by dot product, as they are "
                                "(sentence-transformers' SparseEncoder does not normalize them): leave it out");
  const int64_t block = std::max<int64_t>(o.batch_size, int64_t(125000000) / loaded.model->embedding_dim());
  std::string out;
  double active = 0;
  for (size_t start = 0; start < sentences.size(); start += size_t(block)) {
    const std::vector<std::string> texts(sentences.begin() + start,
                                         sentences.begin() + std::min(sentences.size(), start + size_t(block)));
    SparseRows rows;
    rows.append_dense(embed_texts(loaded, texts, prompt, {o.batch_size, device, false, "encode"}, single));
    for (int64_t i = 0; i < rows.rows(); ++i) {
      nlohmann::ordered_json entries = nlohmann::ordered_json::object();
      for (int64_t k = rows.offsets[size_t(i)]; k < rows.offsets[size_t(i + 1)]; ++k)
        entries[std::to_string(rows.terms[size_t(k)])] = rows.weights[size_t(k)];
      const nlohmann::ordered_json line = {{"text", texts[size_t(i)]}, {"sparse", entries}};
      out += line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    }
    active += double(rows.terms.size());
  }
  write_file_atomically(o.output, out);
  spdlog::info("encode: {} sparse vectors over {} vocabulary entries, {:.1f} active a text, written to {}",
               sentences.size(), loaded.model->embedding_dim(),
               sentences.empty() ? 0.0 : active / double(sentences.size()), o.output);
  return 0;
}

// --max-active-dims k > 0: a sparse encoder's vectors keep their top k, whatever the
// folder says (SparseEncoder.encode(max_active_dims=k)); 0 leaves the folder's setting.
void override_max_active_dims(LoadedModel& loaded, int64_t k, const std::string& model_dir) {
  if (k <= 0) return;
  if (!loaded.model->is_sparse())
    throw std::invalid_argument("--max-active-dims: " + model_dir + " is not a sparse encoder (SpladePooling); its "
                                "embeddings are dense: leave it out");
  loaded.model->set_max_active_dims(k);
}

}  // namespace

int run_encode(const EncodeOptions& o) {
  refuse_output_over_input(o.output, o.input);
  const c10::Device device(o.device);
  compat::prepare_device(device);  // before any tensor: CUDA is loaded on first use (compat/cuda_support.h)
  const std::vector<std::string> sentences = read_sentences(o.input);
  LoadedModel loaded = load_model_folder(o.model_dir, pooling_option(o.pooling));
  require_bi_encoder(loaded, o.model_dir, "encode");
  override_max_active_dims(loaded, o.max_active_dims, o.model_dir);
  // As SentenceTransformer.encode: the folder's default prompt when none is asked for.
  const std::string prompt = resolve_prompt(loaded, o.prompt, o.prompt_name, "--prompt-name", loaded.default_prompt_name);
  if (!prompt.empty()) spdlog::info("encode: the prompt {} before each sentence", nlohmann::json(prompt).dump());
  loaded.model->to(device);

  auto single = ProcessGroup::single();
  if (loaded.model->is_sparse()) return write_sparse_encoding(o, loaded, sentences, prompt, device, *single);
  const at::Tensor out = embed_texts(loaded, sentences, prompt, {o.batch_size, device, o.normalize, "encode"}, *single)
                             .contiguous();
  write_file_atomically(o.output, ends_with(o.output, ".npy") ? npy_bytes(out) : embeddings_jsonl(sentences, out));
  spdlog::info("encode: {} embeddings of dimension {} written to {}", out.size(0), out.size(1), o.output);
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

namespace {

// eval --beir's output: the metrics as a table or JSON on stdout, and --json's file.
int report_beir_metrics(const EvalOptions& o, const BeirSet& set, const std::map<std::string, double>& metrics) {
  nlohmann::json j = {{"task", "beir"},          {"name", set.name},
                      {"split", set.split},        {"queries", set.num_queries()},
                      {"documents", set.num_docs()}};
  for (const auto& [name, value] : metrics) j[name] = value;
  if (o.format == "json") {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s (%s): %lld queries, %lld documents\n", set.name.c_str(), set.split.c_str(),
                static_cast<long long>(set.num_queries()), static_cast<long long>(set.num_docs()));
    std::printf("  %-12s %s\n", "metric", "value");
    for (const std::string& name : ir_metric_names())  // the cuts in their order: @1, @3, @5, @10
      std::printf("  %-12s %.4f\n", name.c_str(), metrics.at(name));
    for (const auto& [name, value] : metrics)  // a sparse encoder's sparsity, after them
      if (std::find(ir_metric_names().begin(), ir_metric_names().end(), name) == ir_metric_names().end())
        std::printf("  %-21s %.4f\n", name.c_str(), value);
  }
  if (!o.json_out.empty()) write_file_atomically(o.json_out, j.dump(2) + "\n");
  return 0;
}

// eval --beir: the folder's metrics as a table or JSON; with --save-embeddings, the
// embeddings ranked (unit rows).
int run_eval_beir(const EvalOptions& o, LoadedModel& loaded, c10::Device device) {
  const BeirSet set = load_beir(o.beir, o.split, *loaded.tokenizer, loaded.max_length, o.query_prompt, o.corpus_prompt);
  auto pg = ProcessGroup::single();
  const auto t0 = std::chrono::steady_clock::now();
  if (loaded.model->is_sparse()) {
    if (!o.embeddings_out.empty())
      throw std::invalid_argument("--save-embeddings: " + o.model_dir + " is a sparse encoder, whose vectors have "
                                  "one entry per vocabulary word: write them with embed-train encode (JSON lines "
                                  "of {\"token_id\": weight})");
    const auto metrics = evaluate_sparse_beir(loaded.model, set, *pg, o.batch_size, device);
    spdlog::info("eval: {} queries against {} documents of {} ({}) through an inverted index in {:.2f}s",
                 set.num_queries(), set.num_docs(), set.name, set.split,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return report_beir_metrics(o, set, metrics);
  }
  const auto [queries, corpus] = embed_beir(loaded.model, set, *pg, o.batch_size, device);
  const auto metrics = beir_metrics(queries, corpus, set, *pg);
  spdlog::info("eval: {} queries against {} documents of {} ({}) in {:.2f}s", set.num_queries(), set.num_docs(),
               set.name, set.split,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  if (!o.embeddings_out.empty()) {
    std::filesystem::create_directories(o.embeddings_out);
    auto unit = [](const at::Tensor& x) { return (x / x.norm(2, 1, true).clamp_min(1e-12)).contiguous(); };
    write_file_atomically(o.embeddings_out + "/queries.npy", npy_bytes(unit(queries)));
    write_file_atomically(o.embeddings_out + "/corpus.npy", npy_bytes(unit(corpus)));
  }
  return report_beir_metrics(o, set, metrics);
}

}  // namespace

int run_eval(const EvalOptions& o) {
  if (o.format != "table" && o.format != "json")
    throw std::invalid_argument("--format " + o.format + ": expected table or json");
  if (!o.json_out.empty() && same_file(o.json_out, o.data))
    throw std::invalid_argument("--json " + o.json_out + " is the --data file (" + o.data +
                                "): writing the metrics would overwrite the pairs; name another file");
  if (!o.first_stage.empty()) return run_eval_rerank(o);
  // A Normalize module needs nothing here: evaluate() L2-normalizes every embedding the
  // same way (x / max(||x||, 1e-12)) before its cosines.
  const c10::Device device(o.device);
  compat::prepare_device(device);  // before any tensor: CUDA is loaded on first use (compat/cuda_support.h)
  LoadedModel loaded = load_model_folder(o.model_dir, pooling_option(o.pooling));
  require_bi_encoder(loaded, o.model_dir, "eval without --first-stage");
  override_max_active_dims(loaded, o.max_active_dims, o.model_dir);
  if (loaded.model->is_sparse() && o.beir.empty())
    throw std::invalid_argument(o.model_dir + " is a sparse encoder (SpladePooling): it is evaluated on a BEIR folder "
                                "(--beir DIR: each query against the whole corpus through an inverted index), not on "
                                "pairs");
  loaded.model->to(device);
  if (!o.beir.empty()) return run_eval_beir(o, loaded, device);
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
    write_file_atomically(o.json_out, j.dump(2) + "\n");
  }
  return 0;
}

int run_tokenize(const TokenizeOptions& o) {
  refuse_output_over_input(o.output, o.input);
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
