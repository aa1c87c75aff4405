// Resolving a data path into files, following what datasets 5.2 does for the same folder
// (datasets.load_from_disk, datasets.load_dataset on a local folder), so that a folder the
// user downloaded or saved is read as the Python tools they know would read it.
#include "data/dataset_files.h"

#include <fnmatch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/input_files.h"
#include "data/pairs.h"
#include "data/yaml_subset.h"
#include "util/file_check.h"

namespace ddp_embed {
namespace {

namespace fs = std::filesystem;

// One split's files, in the order read, and the patterns that named them (for messages).
struct SplitFiles {
  std::string name;
  std::vector<std::string> patterns;
};

// A folder's files: paths relative to it with '/', sorted, hidden ones (a name that begins
// with '.', as huggingface-cli's .cache) and datasets' metadata files left out.
std::vector<std::string> dataset_folder_listing(const fs::path& folder) {
  static const char* const kIgnored[] = {"README.md",          "config.json",    "dataset_info.json",
                                         "dataset_infos.json", "dummy_data.zip", "dataset_dict.json",
                                         "state.json"};
  std::vector<std::string> out;
  std::error_code ec;
  fs::recursive_directory_iterator it(folder, fs::directory_options::follow_directory_symlink, ec), end;
  if (ec) throw DataError("cannot list " + folder.string() + ": " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) throw DataError("cannot list " + folder.string() + ": " + ec.message());
    const std::string name = it->path().filename().string();
    if (!name.empty() && name[0] == '.') {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file(ec)) continue;
    if (std::find(std::begin(kIgnored), std::end(kIgnored), name) != std::end(kIgnored)) continue;
    out.push_back(it->path().lexically_relative(folder).generic_string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The files read as data; a folder's other files (a script, a licence, .json metadata) not.
bool data_file_name(const std::string& path) {
  for (const char* ext : {".parquet", ".arrow", ".csv", ".tsv", ".jsonl", ".jsonl.gz"})
    if (ends_with(path, ext)) return true;
  return false;
}

// fsspec's glob on relative paths: "*" within a name, "**" as a whole part any number of
// folders (none too), [0-9] classes.
bool glob_matches(const std::vector<std::string>& pattern, size_t p, const std::vector<std::string>& parts, size_t i) {
  if (p == pattern.size()) return i == parts.size();
  if (pattern[p] == "**") {
    for (size_t k = i; k <= parts.size(); ++k)
      if (glob_matches(pattern, p + 1, parts, k)) return true;
    return false;
  }
  return i < parts.size() && fnmatch(pattern[p].c_str(), parts[i].c_str(), 0) == 0 &&
         glob_matches(pattern, p + 1, parts, i + 1);
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::stringstream in(path);
  for (std::string part; std::getline(in, part, '/');)
    if (!part.empty() && part != ".") parts.push_back(part);
  return parts;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// The first of `wanted` among `have`; else a DataError listing them.
std::string choose_split(const std::vector<std::string>& have, const DatasetChoice& choice, const std::string& where) {
  for (const auto& w : choice.splits)
    if (std::find(have.begin(), have.end(), w) != have.end()) return w;
  const std::string asked = choice.splits.size() == 1 ? "no split \"" + choice.splits.front() + "\""
                                                      : "none of the splits " + joined(choice.splits);
  throw DataError(where + " has " + asked + "; its splits: " + joined(have) + ". Name one with " + choice.setting("split"));
}

// ---- datasets' default split patterns (datasets/data_files.py), for a folder without configs.

bool split_separator(char c) { return c == '-' || c == '.' || c == '_' || c == ' ' || (c >= '0' && c <= '9'); }

// `name` is the keyword, or holds it after a separator, before one or at its end
// (`at_end`: a folder's name may end with it; a file's name goes on past it).
bool keyword_in_name(const std::string& name, const std::string& keyword, bool at_end) {
  for (size_t at = name.find(keyword); at != std::string::npos; at = name.find(keyword, at + 1)) {
    const bool before = at == 0 || split_separator(name[at - 1]);
    const size_t after = at + keyword.size();
    const bool behind = after == name.size() ? at_end : split_separator(name[after]);
    if (before && behind) return true;
  }
  return false;
}

const std::vector<std::pair<std::string, std::vector<std::string>>>& split_keywords() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> keywords = {
      {"train", {"train", "training"}},
      {"validation", {"validation", "valid", "dev", "val"}},
      {"test", {"test", "testing", "eval", "evaluation"}}};
  return keywords;
}

// "data/{split}-00000-of-00002*.*", push_to_hub's names: the split, or "".
std::string sharded_split(const std::string& path) {
  const std::vector<std::string> parts = split_path(path);
  if (parts.size() != 2 || parts[0] != "data") return "";
  const std::string& name = parts[1];
  for (size_t at = name.find("-of-"); at != std::string::npos; at = name.find("-of-", at + 1)) {
    if (at < 6 || name.size() < at + 9 || name[at - 6] != '-') continue;
    auto digits = [&](size_t from) {
      return std::all_of(name.begin() + long(from), name.begin() + long(from + 5),
                         [](char c) { return c >= '0' && c <= '9'; });
    };
    if (digits(at - 5) && digits(at + 4) && name.find('.', at + 9) != std::string::npos && at > 6)
      return name.substr(0, at - 6);
  }
  return "";
}

// The splits of a folder's data files by datasets' default patterns, in datasets' order.
std::vector<std::pair<std::string, std::vector<std::string>>> default_splits(const std::vector<std::string>& files) {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  auto add = [&out](const std::string& split, const std::string& file) {
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& s) { return s.first == split; });
    if (it == out.end()) it = out.insert(out.end(), {split, {}});
    it->second.push_back(file);
  };
  std::map<std::string, std::vector<std::string>> sharded;
  for (const auto& f : files)
    if (const std::string split = sharded_split(f); !split.empty()) sharded[split].push_back(f);
  if (!sharded.empty()) {
    for (const auto& [split, keywords] : split_keywords())
      if (sharded.count(split)) out.emplace_back(split, sharded[split]);
    for (const auto& [split, list] : sharded)
      if (split != "train" && split != "validation" && split != "test") out.emplace_back(split, list);
    return out;
  }
  for (const bool by_folder : {true, false}) {
    for (const auto& [split, keywords] : split_keywords())
      for (const auto& f : files) {
        const std::vector<std::string> parts = split_path(f);
        const bool match = std::any_of(keywords.begin(), keywords.end(), [&](const std::string& k) {
          if (!by_folder) return keyword_in_name(parts.back(), k, false);
          return std::any_of(parts.begin(), parts.end() - 1,
                             [&](const std::string& d) { return keyword_in_name(d, k, true); });
        });
        if (match) add(split, f);
      }
    if (!out.empty()) return out;
  }
  if (!files.empty()) out.emplace_back("train", files);
  return out;
}

std::string count_text(size_t n, const char* what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); }

std::vector<DataFile> as_data_files(const fs::path& folder, const std::vector<std::string>& relative) {
  std::vector<DataFile> out;
  for (const auto& r : relative) {
    const std::string path = (folder / r).string();
    out.push_back(DataFile{path, table_format_of(path)});
  }
  return out;
}

// A folder of data files without a configs block: datasets' default patterns.
std::vector<DataFile> plain_folder_files(const fs::path& folder, const DatasetChoice& choice,
                                         const std::string& config_name, std::string& note) {
  std::vector<std::string> files = dataset_folder_listing(folder);
  files.erase(std::remove_if(files.begin(), files.end(), [](const std::string& f) { return !data_file_name(f); }),
              files.end());
  if (files.empty())
    throw DataError(folder.string() +
                    " is a folder without data files (.parquet, .arrow, .csv, .tsv, .jsonl, "
                    ".jsonl.gz), state.json (save_to_disk) or dataset_dict.json; nor is it a prepared folder, "
                    "which holds manifest.json (a prepare that did not finish, or a copy that lost it?): name the "
                    "files in it, or prepare it again");
  const auto splits = default_splits(files);
  std::vector<std::string> names;
  for (const auto& s : splits) names.push_back(s.first);
  const std::string split =
      choose_split(names, choice, folder.string() + (config_name.empty() ? "" : " (config \"" + config_name + "\")"));
  const auto& chosen =
      std::find_if(splits.begin(), splits.end(), [&](const auto& s) { return s.first == split; })->second;
  note = (config_name.empty() ? "" : "config " + config_name + ", ") + "split " + split + ": " +
         count_text(chosen.size(), "file");
  return as_data_files(folder, chosen);
}

// ---- save_to_disk folders.

nlohmann::json read_json_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError("cannot open " + path.string());
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw DataError(path.string() + ": not JSON (" + e.what() + "): a save_to_disk folder cut short?");
  }
}

std::vector<DataFile> saved_dataset_files(const fs::path& folder, std::string& note) {
  const fs::path state_path = folder / "state.json";
  const nlohmann::json state = read_json_file(state_path);
  const auto list = state.is_object() ? state.find("_data_files") : state.end();
  if (!state.is_object() || list == state.end() || !list->is_array() || list->empty())
    throw DataError(state_path.string() + ": no \"_data_files\" list of shards (is this a save_to_disk folder?)");
  std::vector<DataFile> out;
  for (const auto& entry : *list) {
    const auto name = entry.is_object() ? entry.find("filename") : entry.end();
    if (!entry.is_object() || name == entry.end() || !name->is_string())
      throw DataError(state_path.string() + ": \"_data_files\" holds " + entry.dump() + ", not {\"filename\": ...}");
    const fs::path shard = folder / name->get<std::string>();
    std::error_code ec;
    if (!fs::is_regular_file(shard, ec))
      throw DataError(state_path.string() + " lists the shard " + name->get<std::string>() + ", and " + shard.string() +
                      " is not there: copy the whole folder that save_to_disk wrote");
    out.push_back(DataFile{shard.string(), table_format_of(shard.string())});
  }
  note = "save_to_disk folder: " + count_text(out.size(), "shard");
  return out;
}

std::vector<DataFile> saved_dataset_dict_files(const fs::path& folder, const DatasetChoice& choice, std::string& note) {
  const fs::path dict_path = folder / "dataset_dict.json";
  const nlohmann::json dict = read_json_file(dict_path);
  const auto list = dict.is_object() ? dict.find("splits") : dict.end();
  std::vector<std::string> splits;
  if (list != dict.end() && list->is_array())
    for (const auto& s : *list)
      if (s.is_string()) splits.push_back(s.get<std::string>());
  if (splits.empty()) throw DataError(dict_path.string() + ": no \"splits\" list (is this a save_to_disk folder?)");
  const std::string split = choose_split(splits, choice, folder.string() + " (save_to_disk of a DatasetDict)");
  std::error_code ec;
  if (!fs::is_regular_file(folder / split / "state.json", ec))
    throw DataError(dict_path.string() + " lists the split " + split + ", and " +
                    (folder / split / "state.json").string() +
                    " is not there: copy the whole folder that save_to_disk wrote");
  std::vector<DataFile> files = saved_dataset_files(folder / split, note);
  note = "split " + split + ", " + note;
  return files;
}

// ---- Hub snapshots: README.md's configs block.

// The lines of README.md's `configs:` block (from its "configs:" line), and the number of
// that line; empty when the front matter has none.
std::vector<std::string> readme_configs_block(const fs::path& readme, int& first_line) {
  std::ifstream in(readme, std::ios::binary);
  std::string line;
  if (!std::getline(in, line) || (line != "---" && line != "---\r")) return {};
  std::vector<std::string> block;
  bool inside = false;
  for (int number = 2; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line == "---" || line == "...") break;
    const bool top_level = !line.empty() && line[0] != ' ' && line[0] != '#' && line[0] != '-';
    if (top_level) inside = line.compare(0, 8, "configs:") == 0;
    if (top_level && inside) first_line = number;
    if (inside) block.push_back(line);
  }
  return block;
}

struct HubConfig {
  std::string name;
  bool is_default = false;
  std::string data_dir;
  std::vector<SplitFiles> splits;  // empty: datasets' default patterns (in data_dir)
  int line = 0;
};

[[noreturn]] void configs_error(const fs::path& readme, int line, const std::string& what) {
  throw DataError(readme.string() + ":" + std::to_string(line) + ": configs: " + what +
                  " (as datasets reads it: docs/data.md, \"Hugging Face dataset folders\")");
}

// data_files: a pattern or a list of them (split "train"), or a list of {split, path}.
std::vector<SplitFiles> config_data_files(const YamlNode& node, const fs::path& readme) {
  auto patterns = [&](const YamlNode& n) {
    std::vector<std::string> out;
    if (n.kind == YamlNode::Kind::Scalar && !n.scalar.empty()) return std::vector<std::string>{n.scalar};
    if (n.kind == YamlNode::Kind::List)
      for (const auto& item : n.items) {
        if (item.kind != YamlNode::Kind::Scalar || item.scalar.empty())
          configs_error(readme, item.line, "a pattern must be a non-empty string");
        out.push_back(item.scalar);
      }
    if (out.empty()) configs_error(readme, n.line, "expected a pattern or a list of patterns");
    return out;
  };
  const bool split_list =
      node.kind == YamlNode::Kind::List && std::any_of(node.items.begin(), node.items.end(),
                                                       [](const YamlNode& i) { return i.kind == YamlNode::Kind::Map; });
  if (!split_list) return {SplitFiles{"train", patterns(node)}};
  std::vector<SplitFiles> out;
  for (const auto& item : node.items) {
    const YamlNode* split = item.kind == YamlNode::Kind::Map ? item.find("split") : nullptr;
    const YamlNode* path = item.kind == YamlNode::Kind::Map ? item.find("path") : nullptr;
    if (!split || !path || item.map.size() != 2 || split->kind != YamlNode::Kind::Scalar || split->scalar.empty())
      configs_error(readme, item.line, "each item of data_files must be {split: NAME, path: PATTERN or a list}");
    std::vector<std::string> list = patterns(*path);
    auto it = std::find_if(out.begin(), out.end(), [&](const SplitFiles& s) { return s.name == split->scalar; });
    if (it == out.end()) it = out.insert(out.end(), SplitFiles{split->scalar, {}});
    it->patterns.insert(it->patterns.end(), list.begin(), list.end());
  }
  return out;
}

std::vector<HubConfig> readme_configs(const fs::path& readme) {
  int first_line = 0;
  const std::vector<std::string> block = readme_configs_block(readme, first_line);
  if (block.empty()) return {};
  const YamlNode top = parse_yaml_block(block, first_line, readme.string());
  const YamlNode* list = top.find("configs");
  if (!list || list->kind != YamlNode::Kind::List || list->items.empty())
    configs_error(readme, first_line, "expected a list of configs, each with config_name");
  std::vector<HubConfig> out;
  for (const YamlNode& item : list->items) {
    const YamlNode* name = item.kind == YamlNode::Kind::Map ? item.find("config_name") : nullptr;
    if (!name || name->kind != YamlNode::Kind::Scalar || name->scalar.empty())
      configs_error(readme, item.line, "each config needs config_name");
    HubConfig config{name->scalar, false, "", {}, item.line};
    if (const YamlNode* d = item.find("default")) {
      if (d->kind != YamlNode::Kind::Scalar || (d->scalar != "true" && d->scalar != "false"))
        configs_error(readme, d->line, "default: expected true or false");
      config.is_default = d->scalar == "true";
    }
    if (const YamlNode* dir = item.find("data_dir")) {
      if (dir->kind != YamlNode::Kind::Scalar) configs_error(readme, dir->line, "data_dir: expected a folder name");
      config.data_dir = dir->scalar;
    }
    if (const YamlNode* files = item.find("data_files")) config.splits = config_data_files(*files, readme);
    for (const auto& other : out)
      if (other.name == config.name) configs_error(readme, item.line, "config \"" + config.name + "\" is given twice");
    out.push_back(std::move(config));
  }
  return out;
}

// The config datasets.load_dataset takes: the one named, else the default one
// (MetadataConfigs.get_default_config_name).
const HubConfig& choose_config(const std::vector<HubConfig>& configs, const DatasetChoice& choice,
                               const fs::path& readme) {
  std::vector<std::string> names;
  for (const auto& c : configs) names.push_back(c.name);
  if (!choice.config.empty()) {
    for (const auto& c : configs)
      if (c.name == choice.config) return c;
    throw DataError(readme.string() + " has no config \"" + choice.config + "\"; its configs: " + joined(names) +
                    ". Name one with " + choice.setting("config"));
  }
  const HubConfig* chosen = nullptr;
  for (const auto& c : configs)
    if (configs.size() == 1 || c.name == "default" || c.is_default) {
      if (chosen)
        throw DataError(readme.string() + ": configs \"" + chosen->name + "\" and \"" + c.name +
                        "\" are both the "
                        "default (datasets refuses it too): name one with " +
                        choice.setting("config"));
      chosen = &c;
    }
  if (!chosen)
    throw DataError(readme.string() + " has several configs and none is the default: name one with " + choice.setting("config") +
                    " (its configs: " + joined(names) + ")");
  return *chosen;
}

std::vector<DataFile> hub_config_files(const fs::path& folder, const std::vector<HubConfig>& configs,
                                       const DatasetChoice& choice, std::string& note) {
  const fs::path readme = folder / "README.md";
  const HubConfig& config = choose_config(configs, choice, readme);
  if (config.splits.empty())  // no data_files: datasets' default patterns, in data_dir
    return plain_folder_files(folder / config.data_dir, choice, config.name, note);
  std::vector<std::string> names;
  for (const auto& s : config.splits) names.push_back(s.name);
  const std::string split = choose_split(names, choice, readme.string() + " (config \"" + config.name + "\")");
  const SplitFiles& chosen =
      *std::find_if(config.splits.begin(), config.splits.end(), [&](const SplitFiles& s) { return s.name == split; });
  const fs::path base = folder / config.data_dir;
  const std::vector<std::string> listing = dataset_folder_listing(base);
  std::vector<std::string> files;
  for (const std::string& pattern : chosen.patterns) {
    const std::vector<std::string> parts = split_path(pattern);
    size_t found = 0;
    for (const std::string& f : listing)
      if (data_file_name(f) && glob_matches(parts, 0, split_path(f), 0)) {
        ++found;
        if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
      }
    if (found == 0)
      throw DataError(readme.string() + ": config \"" + config.name + "\", split " + split + ": the pattern \"" +
                      pattern + "\" matches no data file in " + base.string() +
                      " (a partial download? fetch the whole snapshot)");
  }
  note = "config " + config.name + ", split " + split + ": " + count_text(files.size(), "file");
  return as_data_files(base, files);
}

std::vector<DataFile> folder_files(const fs::path& folder, const DatasetChoice& choice, std::string& note) {
  std::error_code ec;
  const bool saved = fs::exists(folder / "state.json", ec), saved_dict = fs::exists(folder / "dataset_dict.json", ec);
  if ((saved || saved_dict) && !choice.config.empty())
    throw DataError(folder.string() + " is a save_to_disk folder, which has no configs: remove " + choice.setting("config"));
  if (saved) return saved_dataset_files(folder, note);
  if (saved_dict) return saved_dataset_dict_files(folder, choice, note);
  if (fs::exists(folder / "README.md", ec))
    if (const std::vector<HubConfig> configs = readme_configs(folder / "README.md"); !configs.empty())
      return hub_config_files(folder, configs, choice, note);
  if (!choice.config.empty())
    throw DataError(folder.string() + " has no configs (no README.md with a configs block): remove " + choice.setting("config"));
  return plain_folder_files(folder, choice, "", note);
}

}  // namespace

std::vector<DatasetConfig> dataset_configs(const std::string& folder) {
  std::error_code ec;
  const fs::path readme = fs::path(folder) / "README.md";
  if (!fs::exists(readme, ec)) return {};
  std::vector<DatasetConfig> out;
  for (const HubConfig& config : readme_configs(readme)) {
    DatasetConfig listed{config.name, config.is_default, {}};
    for (const SplitFiles& split : config.splits) listed.splits.push_back(split.name);
    if (config.splits.empty()) {  // datasets' default patterns over the config's files
      std::vector<std::string> files = dataset_folder_listing(fs::path(folder) / config.data_dir);
      files.erase(std::remove_if(files.begin(), files.end(), [](const std::string& f) { return !data_file_name(f); }),
                  files.end());
      for (const auto& [split, names] : default_splits(files)) listed.splits.push_back(split);
    }
    out.push_back(std::move(listed));
  }
  return out;
}

ResolvedData resolve_data_files(const std::vector<std::string>& paths, const DatasetChoice& choice) {
  ResolvedData out;
  std::vector<std::string> named_by;  // the path or pattern that named each file
  auto add = [&](const DataFile& file, const std::string& by) {
    for (size_t i = 0; i < out.files.size(); ++i)
      if (same_file(out.files[i].path, file.path))
        throw DataError(file.path + " is named twice: by \"" + named_by[i] + "\" and by \"" + by +
                        "\"; its pairs would be read twice: name each file once");
    out.files.push_back(file);
    named_by.push_back(by);
  };
  for (const std::string& path : paths) {
    std::error_code ec;
    if (path.find_first_of("*?[") == std::string::npos && fs::is_directory(path, ec)) {
      std::string note;
      for (const DataFile& f : folder_files(path, choice, note)) add(f, path);
      out.choices.push_back(path + ": " + note);
      continue;
    }
    if (!choice.config.empty())
      throw DataError(choice.setting("config") + " \"" + choice.config + "\" chooses a config of a dataset folder, and " +
                      path + " is a file: remove " + choice.setting("config") + ", or name the dataset's folder");
    for (const std::string& file : expand_input_paths({path})) add(DataFile{file, table_format_of(file)}, path);
  }
  return out;
}

}  // namespace ddp_embed
