// JSON → Config: one field table (visit_fields) drives reading, printing and the list of
// valid keys, so the three cannot drift apart.
//
// Two conveniences for hand-written files: // and /* */ comments are allowed, and keys
// named "_comment" (at the top or inside a section) are notes that are ignored. Every
// other unknown key is an error. All errors of a file are reported together, one a line.
#include "config/config.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "config/config_rules.h"
#include "config/key_suggest.h"
#include "config/value_reader.h"
#include "util/file_check.h"
#include "util/hash.h"
#include "util/json_input.h"
#include "util/utf8.h"

namespace ddp_embed {
namespace {

using namespace config_detail;

// ZeRO stages: 0 (none), 1 (optimizer state sharded), 2 (gradients too).
Rule stages() { Rule r; r.min = 0; r.max = 2; return r; }
// A gradient bucket, in MB: up to a TiB (its size in bytes must fit the allocator).
Rule bucket_size() {
  Rule r = positive();
  r.max = 1 << 20;
  r.shown = "a positive number of MB, at most 1048576 (a TiB)";
  return r;
}

// loss.*: the table's loss section (visit_fields below reads it in its place).
template <class Visitor>
void visit_loss_fields(LossConfig& l, Visitor& v) {
  v("loss.type", l.type, any());
  v("loss.temperature", l.temperature, temperature());
  v("loss.cross_rank_negatives", l.cross_rank_negatives, any());
  v("loss.matryoshka_dims", l.matryoshka_dims, positive_size());
  v("loss.matryoshka_weights", l.matryoshka_weights, float32(positive()));
  v("loss.distill.weight", l.distill.weight, float32(non_negative()));
  v("loss.distill.temperature", l.distill.temperature, temperature());
  v("loss.margin_mse.weight", l.margin_mse.weight, float32(non_negative()));
  v("loss.directions", l.directions, any());
  v("loss.partition_mode", l.partition_mode, any());
  v("loss.hardness_mode", l.hardness_mode, any());
  v("loss.hardness_strength", l.hardness_strength, float32(non_negative()));
  v("loss.guide.model", l.guide.model, non_empty());
  v("loss.guide.margin_strategy", l.guide.margin_strategy, any());
  v("loss.guide.margin", l.guide.margin, float32(any()));
  CrossEncoderLossConfig& ce = l.cross_encoder;
  v("loss.cross_encoder.type", ce.type, any());
  v("loss.cross_encoder.activation", ce.activation, any());
  v("loss.cross_encoder.pos_weight", ce.pos_weight, float32(positive()));
  v("loss.cross_encoder.scale", ce.scale, float32(positive()));
  v("loss.cross_encoder.in_batch_negatives", ce.in_batch_negatives, at_least(-1));
  v("loss.cross_encoder.weighting", ce.weighting, any());
  v("loss.cross_encoder.k", ce.k, non_negative());
  v("loss.cross_encoder.sigma", ce.sigma, float32(positive()));
  v("loss.cross_encoder.eps", ce.eps, float32(positive()));
  v("loss.cross_encoder.mu", ce.mu, float32(non_negative()));
  v("loss.cross_encoder.reduction_log", ce.reduction_log, any());
  SparseLossConfig& sp = l.sparse;
  v("loss.sparse.document_regularizer_weight", sp.document_regularizer_weight, float32(non_negative()));
  v("loss.sparse.query_regularizer_weight", sp.query_regularizer_weight, float32(non_negative()));
  Rule ratio;  // (0 is off)
  ratio.min = 0;
  ratio.max = 1;
  v("loss.sparse.warmup_ratio", sp.warmup_ratio, ratio);
  v("loss.sparse.schedule", sp.schedule, any());
  v("loss.sparse.document_regularizer_threshold", sp.document_regularizer_threshold, non_negative());
  v("loss.sparse.query_regularizer_threshold", sp.query_regularizer_threshold, non_negative());
}

// The single list of config keys: (dotted path, field, rule). Adding a key means adding
// one line here; reading, printing, hashing and "did you mean" all follow. A closed
// choice is an enum field: its table (config/choices.h) is its rule.
template <class Visitor>
void visit_fields(Config& c, Visitor& v) {
  ModelConfig& m = c.model;
  BertConfig& a = m.architecture;
  v("model.kind", m.kind, any());
  v("model.num_labels", m.num_labels, at_least(1));
  v("model.init", m.init, any());
  v("model.vocab_size", a.vocab_size, positive_size());
  v("model.hidden_size", a.hidden_size, positive_size());
  v("model.num_layers", a.num_layers, positive_size());
  v("model.num_heads", a.num_heads, positive_size());
  v("model.intermediate_size", a.intermediate_size, positive_size());
  Rule positions = at_least(3);
  positions.largest = std::numeric_limits<int32_t>::max();
  v("model.max_position", a.max_position, positions);
  v("model.dropout", m.dropout, fraction());
  v("model.pooling", m.pooling, any());
  v("model.attention", m.attention, any());
  v("model.projection_dim", m.projection_dim, non_negative());
  v("model.prompts", m.prompts, any());
  v("model.lora_rank", m.lora_rank, non_negative());
  v("model.lora_alpha", m.lora_alpha, float32(positive()));
  v("model.sparse.pooling_strategy", m.sparse.pooling_strategy, any());
  v("model.sparse.activation_function", m.sparse.activation_function, any());
  v("model.sparse.chunk_tokens", m.sparse.chunk_tokens, positive());
  v("model.sparse.max_active_dims", m.sparse.max_active_dims, positive());

  TokenizerConfig& t = c.tokenizer;
  v("tokenizer.type", t.type, any());
  v("tokenizer.path", t.path, non_empty());
  v("tokenizer.max_length", t.max_length, at_least(3));
  v("tokenizer.lower_case", t.lower_case, any());

  DataConfig& d = c.data;
  v("data.train", d.train, non_empty());
  v("data.mixing", d.mixing, any());
  v("data.dedupe_batches", d.dedupe_batches, any());
  v("data.prepared", d.prepared, non_empty());
  v("data.eval", d.eval, non_empty());
  v("data.shuffle", d.shuffle, any());
  v("data.drop_last", d.drop_last, any());
  v("data.negatives_per_query", d.negatives_per_query, non_negative());
  v("data.skip_bad_lines", d.skip_bad_lines, any());
  v("data.max_line_bytes", d.max_line_bytes, positive());

  visit_loss_fields(c.loss, v);

  TrainConfig& tr = c.train;
  v("train.batch_size", tr.batch_size, positive());
  v("train.grad_accum_steps", tr.grad_accum_steps, at_least(1));
  v("train.lr", tr.lr, float32(positive()));
  v("train.lr_scaling", tr.lr_scaling, any());
  v("train.warmup_steps", tr.warmup_steps, non_negative());
  v("train.schedule", tr.schedule, any());
  v("train.weight_decay", tr.weight_decay, float32(non_negative()));
  v("train.max_grad_norm", tr.max_grad_norm, float32(any()));
  v("train.epochs", tr.epochs, at_least(1));
  v("train.max_steps", tr.max_steps, at_least(-1));
  v("train.device", tr.device, any());
  v("train.precision", tr.precision, any());
  v("train.loss_scale_init", tr.loss_scale_init, float32(positive()));
  v("train.loss_scale_growth_interval", tr.loss_scale_growth_interval, at_least(1));
  v("train.activation_checkpointing", tr.activation_checkpointing, any());
  v("train.optimizer_offload", tr.optimizer_offload, any());
  v("train.gradcache_chunk", tr.gradcache_chunk, non_negative());
  v("train.seed", tr.seed, non_negative());
  v("train.max_bad_steps", tr.max_bad_steps, at_least(1));

  DistConfig& ds = c.dist;
  v("dist.backend", ds.backend, any());
  v("dist.bucket_mb", ds.bucket_mb, bucket_size());
  v("dist.timeout_s", ds.timeout_s, positive());
  v("dist.zero_stage", ds.zero_stage, stages());

  OutputConfig& o = c.output;
  v("output.dir", o.dir, non_empty());
  v("output.save_every", o.save_every, non_negative());
  v("output.keep_last", o.keep_last, at_least(1));
  v("output.log_every", o.log_every, at_least(1));
  v("output.eval_every", o.eval_every, non_negative());
  v("output.keep_best", o.keep_best, any());
  v("output.report_to", o.report_to, any());
  v("output.resume", o.resume, non_empty());
  v("output.checkpoint_on_signal", o.checkpoint_on_signal, any());
  v("output.profile_steps", o.profile_steps, non_negative());
}

// A config is sections of keys whose values are at most lists: 3 levels. Deeper text is
// refused before parsing, as nlohmann::json copies and prints values recursively.
constexpr int kMaxNesting = 32;
// Configs are written by hand, and --print-config's output is a few KB.
constexpr size_t kMaxConfigBytes = 1 << 20;


// ---- the valid keys ------------------------------------------------------------------

template <class T>
struct IsOptionalChoice : std::false_type {};
template <class E>
struct IsOptionalChoice<std::optional<E>> : std::bool_constant<is_choice_v<E>> {};

// A field that holds a closed choice: an enum, "auto" or an enum (model.pooling), or
// output.resume's mode or path.
template <class T>
struct IsChoiceList : std::false_type {};
template <class E>
struct IsChoiceList<std::vector<E>> : std::bool_constant<is_choice_v<E>> {};

// A field that holds a closed choice: an enum, "auto" or an enum (model.pooling), a list
// of enums (output.report_to), or output.resume's mode or path.
template <class T>
constexpr bool holds_choice = is_choice_v<T> || IsOptionalChoice<T>::value || IsChoiceList<T>::value ||
                              std::is_same_v<T, ResumeFrom>;

// The spellings a choice field accepts, as messages list them.
template <class T>
std::vector<std::string> spellings_of() {
  if constexpr (is_choice_v<T>) {
    return choice_names<T>();
  } else if constexpr (IsOptionalChoice<T>::value) {
    return auto_or_choice_names<typename T::value_type>();
  } else if constexpr (IsChoiceList<T>::value) {
    return choice_names<typename T::value_type>();
  } else {
    return choice_names<ResumeMode>();  // or a path
  }
}

struct KeyCollector {
  std::vector<std::string> leaves;
  std::set<std::string> textual;  // keys that hold strings (names, paths, choices)
  std::vector<std::pair<std::string, std::vector<std::string>>> choices;  // choice keys and their spellings
  template <class T>
  void operator()(const char* path, T&, const Rule&) {
    leaves.emplace_back(path);
    if constexpr (holds_choice<T>) choices.emplace_back(path, spellings_of<T>());
    if (holds_choice<T> || std::is_same_v<T, std::string> || std::is_same_v<T, std::optional<std::string>> ||
        std::is_same_v<T, std::vector<DataSource>> || std::is_same_v<T, EvalSets>)
      textual.insert(path);
  }
};

bool is_textual(const std::string& key) {
  static const std::set<std::string> keys = [] {
    Config c;
    KeyCollector k;
    visit_fields(c, k);
    return k.textual;
  }();
  return keys.count(key) > 0;
}

const std::vector<std::string>& leaf_keys() {
  static const std::vector<std::string> keys = [] {
    Config c;
    KeyCollector k;
    visit_fields(c, k);
    return k.leaves;
  }();
  return keys;
}

// Sections and leaves, in table order: the candidates for "did you mean".
const std::vector<std::string>& all_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> out;
    for (const auto& leaf : leaf_keys()) {
      const std::string section = split_path(leaf).first;
      if (std::find(out.begin(), out.end(), section) == out.end()) out.push_back(section);
    }
    out.insert(out.end(), leaf_keys().begin(), leaf_keys().end());
    return out;
  }();
  return keys;
}

bool is_section(const std::string& key) {
  for (const auto& leaf : leaf_keys())
    if (split_path(leaf).first == key) return true;
  return false;
}

bool is_leaf(const std::string& key) {
  const auto& k = leaf_keys();
  return std::find(k.begin(), k.end(), key) != k.end();
}

// A key that holds keys below a section ("loss.distill"): an object in the JSON.
bool is_group(const std::string& key) {
  if (key.find('.') == std::string::npos) return false;
  for (const auto& leaf : leaf_keys())
    if (leaf.rfind(key + ".", 0) == 0) return true;
  return false;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

std::string unknown_key_message(const std::string& key) {
  const std::string msg = "unknown key \"" + key + "\"";
  const std::string near = nearest_key(key, all_keys());
  if (!near.empty()) return msg + " (did you mean \"" + near + "\"?)";
  // Nothing close: list what is valid there instead of guessing.
  std::vector<std::string> sections, names;
  const std::string section = split_path(key).first;
  for (const auto& k : all_keys()) {
    const auto [sec, name] = split_path(k);
    if (name.empty()) sections.push_back(sec);
    else if (sec == section) names.push_back(name);
  }
  if (key.find('.') == std::string::npos) return msg + " (valid sections: " + join(sections) + ")";
  if (!names.empty()) return msg + " (valid keys in \"" + section + "\": " + join(names) + ")";
  return msg + " (valid sections: " + join(sections) + ")";
}

// The keys inside a section or group ("loss.distill"): leaves, or groups that hold more.
void check_group(const std::string& prefix, const json& body, const Reader& reader, std::vector<std::string>& errors) {
  for (const auto& item : body.items()) {
    const std::string key = prefix + "." + item.key();
    if (item.key() == kCommentKey || is_leaf(key)) continue;
    if (!is_group(key)) {
      errors.push_back(reader.writer_of(key) + ": " + unknown_key_message(key));
    } else if (!item.value().is_object()) {
      errors.push_back(reader.where(key) + ": expected an object, got " + show(item.value()));
    } else {
      check_group(key, item.value(), reader, errors);
    }
  }
}

// Unknown keys and sections that are not objects, in the order they appear.
void check_structure(const json& root, const Reader& reader, std::vector<std::string>& errors) {
  for (const auto& [section, body] : root.items()) {
    if (section == kCommentKey) continue;
    if (!is_section(section)) {
      errors.push_back(reader.writer_of(section) + ": " + unknown_key_message(section));
      continue;
    }
    if (!body.is_object()) {
      errors.push_back(reader.where(section) + ": expected an object, got " + show(body));
      continue;
    }
    check_group(section, body, reader, errors);
  }
}

// ---- --set ---------------------------------------------------------------------------------

// Applies "a.b=value" to `root`; returns the key it set.
std::string apply_override(json& root, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError("--set " + assignment + ": expected KEY=VALUE (e.g. train.lr=3e-5)");
  }
  const std::string key = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  if (!is_leaf(key) && !is_section(key) && !is_group(key)) {
    throw ConfigError("--set " + assignment + ": " + unknown_key_message(key));
  }
  // Kept as a string when it is not JSON, the value must still be text that JSON can hold.
  if (!utf8::is_valid(text.data(), text.data() + text.size()))
    throw ConfigError("--set " + key + ": the value is not valid UTF-8");
  if (json_nesting_depth(text) > kMaxNesting)
    throw ConfigError("--set " + key + ": the value nests deeper than " + std::to_string(kMaxNesting) + " levels");
  // JSON if it parses (numbers, true, null, lists, objects), else the text as a string.
  json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) value = text;
  // A number JSON cannot hold (1e999, NaN, inf, -Infinity) is no number a key takes; said
  // as such rather than as a string of the wrong type.
  if (value.is_string() && !is_textual(key)) {
    char* end = nullptr;
    const double number = std::strtod(text.c_str(), &end);
    if (!text.empty() && end == text.c_str() + text.size() && !std::isfinite(number))
      throw ConfigError("--set " + assignment + ": " + text + " is not a finite number: give one");
  }
  // A path or name that happens to read as a number or boolean ("output.dir=2024")
  // is still the text the user typed.
  if (is_textual(key) && (value.is_number() || value.is_boolean())) value = text;

  json* at = &root;
  const std::vector<std::string> parts = path_parts(key);
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (!at->contains(parts[i]) || !(*at)[parts[i]].is_object()) (*at)[parts[i]] = json::object();
    at = &(*at)[parts[i]];
  }
  (*at)[parts.back()] = std::move(value);
  return key;
}

// nlohmann reports the byte count read when the error was found (1-based); editors want
// line:column of that byte.
std::pair<size_t, size_t> line_and_column(std::string_view text, size_t byte) {
  size_t line = 1, column = 1;
  const size_t end = std::min(byte > 0 ? byte - 1 : 0, text.size());
  for (size_t i = 0; i < end; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {line, column};
}

// ---- printing ------------------------------------------------------------------------------

struct Writer {
  json out = json::object();
  template <class T>
  void operator()(const std::string& path, const T& field, const Rule&) {
    json* at = &out;
    for (const auto& part : path_parts(path)) at = &(*at)[part];
    *at = to_json_value(field);
  }
  template <class T>
  static json to_json_value(const T& v) {
    if constexpr (is_choice_v<T>)
      return choice_name(v);
    else
      return json(v);
  }
  static json to_json_value(const std::optional<std::string>& v) {
    return v ? json(*v) : json(nullptr);
  }
  static json to_json_value(const std::optional<int64_t>& v) { return v ? json(*v) : json(kAutoChoice); }
  template <class E>
  static json to_json_value(const std::optional<E>& v) {
    static_assert(is_choice_v<E>);
    return v ? choice_name(*v) : std::string(kAutoChoice);
  }
  // As it is usually written: null, a path, or a list of them; a set with a choice an object.
  static json to_json_value(const EvalSets& e) {
    if (e.paths.empty()) return json(nullptr);
    bool plain = true;
    for (size_t i = 0; i < e.paths.size(); ++i) plain = plain && e.choice(i).empty();
    if (plain) return e.paths.size() == 1 ? json(e.paths.front()) : json(e.paths);
    json list = json::array();
    for (size_t i = 0; i < e.paths.size(); ++i) {
      const EvalSets::Choice c = e.choice(i);
      if (c.empty()) {
        list.push_back(e.paths[i]);
        continue;
      }
      json o = {{"path", e.paths[i]}};
      add_dataset_choice(o, c.config, c.split, "", c.columns);
      if (!c.first_stage.empty()) o["first_stage"] = c.first_stage;
      if (c.top_k != 100) o["top_k"] = c.top_k;
      list.push_back(o);
    }
    return list;
  }
  // "config", "split" (unless `default_split`) and "columns", where they are not the defaults:
  // a config written before they were keys prints (and hashes) as it did.
  static void add_dataset_choice(json& o, const std::string& config, const std::string& split,
                                 const std::string& default_split, const ColumnChoice& columns) {
    if (!config.empty()) o["config"] = config;
    if (split != default_split) o["split"] = split;
    if (columns.empty()) return;
    json c = json::object();
    for (const auto& [key, name] : {std::pair<const char*, const std::string&>{"query", columns.query},
                                    {"pos", columns.pos}, {"score", columns.score}})
      if (!name.empty()) c[key] = name;
    if (!columns.neg.empty()) c["neg"] = columns.neg.size() == 1 ? json(columns.neg.front()) : json(columns.neg);
    o["columns"] = c;
  }
  template <class E>
  static json to_json_value(const std::vector<E>& list) {
    json out = json::array();
    for (const E& e : list) out.push_back(to_json_value(e));
    return out;
  }
  static json to_json_value(const ResumeFrom& r) {
    return r.mode == ResumeMode::Path ? r.path : choice_name(r.mode);
  }
  // The plain form as a list of paths, as it is usually written; sources as objects.
  static json to_json_value(const std::vector<DataSource>& sources) {
    if (sources.size() == 1 && sources.front().plain()) return json(sources.front().paths);
    json list = json::array();
    for (const auto& s : sources) {
      json o = {{"name", s.name}, {"path", s.paths}, {"weight", s.weight}, {"query_prompt", s.query_prompt},
                {"passage_prompt", s.passage_prompt}};
      o["negatives_per_query"] = s.negatives_per_query ? json(*s.negatives_per_query) : json(nullptr);
      add_dataset_choice(o, s.config, s.split, "train", s.columns);
      list.push_back(o);
    }
    return list;
  }
};

}  // namespace

bool DataSource::plain() const {
  return name == "train" && weight == 1 && query_prompt.empty() && passage_prompt.empty() && !negatives_per_query &&
         config.empty() && split == "train" && columns.empty();
}

std::vector<std::string> source_paths(const std::vector<DataSource>& sources) {
  std::vector<std::string> paths;
  for (const auto& s : sources) paths.insert(paths.end(), s.paths.begin(), s.paths.end());
  return paths;
}

Config config_from_json(const nlohmann::json& j, const std::string& origin,
                        const std::vector<std::string>& overrides) {
  if (!j.is_object()) {
    throw ConfigError(origin + ": expected a JSON object at the top level, got " + show(j));
  }
  json root = j;
  std::set<std::string> overridden;
  for (const auto& assignment : overrides) overridden.insert(apply_override(root, assignment));

  Config c;
  Reader reader(root, origin, overridden);
  std::vector<std::string> errors;
  check_structure(root, reader, errors);
  visit_fields(c, reader);
  // A sparse encoder's defaults: loss.type "splade", whose contrastive term scales dot
  // products by 1 (sentence-transformers' SparseMultipleNegativesRankingLoss), not cosines by 20.
  if (c.model.kind == ModelKind::Sparse && !reader.given("loss.type")) c.loss.type = LossType::Splade;
  // Its vectors are compared by dot product in every term, whichever loss.type.
  c.loss.sparse_encoder = c.model.kind == ModelKind::Sparse;
  if (c.loss.sparse_encoder && !reader.given("loss.temperature")) c.loss.temperature = 1.0;
  // The demo's evaluation set is a file of pairs; a sparse encoder is evaluated on BEIR folders.
  if (c.model.kind == ModelKind::Sparse && !reader.given("data.eval")) c.data.eval = EvalSets{};
  errors.insert(errors.end(), reader.errors.begin(), reader.errors.end());
  if (errors.empty()) check_relations(c, reader, errors);

  if (!errors.empty()) {
    std::string msg;
    for (const auto& e : errors) msg += (msg.empty() ? "" : "\n") + e;
    throw ConfigError(msg);
  }
  return c;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  if (const std::string folder = folder_not_file(path, "a config file (JSON)"); !folder.empty())
    throw ConfigError(folder);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot open the config file");
  // Read one byte past the limit: enough to tell a file that is too large.
  std::string text(kMaxConfigBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxConfigBytes)
    throw ConfigError(path + ": larger than " + std::to_string(kMaxConfigBytes >> 20) + " MiB: not a config file");
  return parse_config(text, path, overrides);
}

Config parse_config(std::string_view text, const std::string& origin,
                    const std::vector<std::string>& overrides) {
  // Comments (// and /* */) are allowed: configs are written by hand.
  const bool comments = true;
  if (json_nesting_depth(text, comments) > kMaxNesting)
    throw ConfigError(origin + ": nests deeper than " + std::to_string(kMaxNesting) + " levels: not a config");
  json j;
  try {
    j = json::parse(text, nullptr, /*allow_exceptions=*/true, comments);
  } catch (const json::exception&) {
    const JsonTextError error = find_json_error(text, comments);
    const auto [line, column] = line_and_column(text, error.byte);
    throw ConfigError(origin + ":" + std::to_string(line) + ":" + std::to_string(column) +
                      ": invalid JSON: " + error.reason);
  }
  return config_from_json(j, origin, overrides);
}

nlohmann::json config_to_json(const Config& c) {
  Config copy = c;  // visit_fields takes a mutable Config; printing does not change it
  Writer w;
  visit_fields(copy, w);
  return w.out;
}

std::vector<std::pair<std::string, std::vector<std::string>>> choice_keys() {
  Config c;
  KeyCollector k;
  visit_fields(c, k);
  return k.choices;
}

uint64_t config_hash(const Config& c) {
  // FNV-1a over the compact dump; nlohmann::json keeps object keys sorted, so the text
  // depends only on the values.
  return fnv1a64(config_to_json(c).dump(), kFnv1a64ShortOffset);
}

}  // namespace ddp_embed
