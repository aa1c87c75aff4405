#include "tokenize/sentencepiece_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <initializer_list>
#include <utility>
#include <nlohmann/json.hpp>

#include "tokenize/hf_files.h"
#include "tokenize/spm_library.h"
#include "util/utf8.h"

namespace ddp_embed {

namespace fs = std::filesystem;

namespace {

fs::path find_model_file(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return path;
  if (fs::exists(fs::path(path) / "spiece.model", ec)) return fs::path(path) / "spiece.model";
  std::vector<fs::path> models;
  for (const auto& entry : fs::directory_iterator(path, ec))
    if (entry.path().extension() == ".model") models.push_back(entry.path());
  if (models.empty()) throw TokenizerError(path + ": no sentencepiece .model file in this folder");
  std::sort(models.begin(), models.end());
  return models.front();
}

}  // namespace

void SentencePieceTokenizer::ModelDeleter::operator()(ddp_embed_spm_model* model) const {
  library->free(model);
}

SentencePieceTokenizer::SentencePieceTokenizer(const spm::Library& library, ModelPtr model,
                                               const std::string& source)
    : lib_(library), model_(std::move(model)), source_(source) {
  vocab_size_ = lib_.vocab_size(model_.get());
  // The id of the first of `pieces` that the model has, else -1.
  auto find = [&](std::initializer_list<const char*> pieces) -> int32_t {
    for (const char* text : pieces) {
      const std::string_view piece_text(text);
      const int32_t id = lib_.piece_to_id(model_.get(), piece_text.data(), piece_text.size());
      if (id >= 0 && id < vocab_size_ && piece(id) == piece_text) return id;
    }
    return -1;
  };
  auto first_of = [](std::initializer_list<int32_t> ids) -> int32_t {
    for (int32_t id : ids)
      if (id >= 0) return id;
    return -1;
  };
  int32_t own[4];  // the model's unk, bos, eos, pad ids
  lib_.special_ids(model_.get(), own);
  special_.unk = first_of({find({"[UNK]", "<unk>"}), own[0]});
  special_.cls = first_of({find({"[CLS]", "<cls>", "<s>"}), own[1]});
  special_.sep = first_of({find({"[SEP]", "<sep>", "</s>"}), own[2]});
  special_.pad = first_of({find({"[PAD]", "<pad>"}), own[3], special_.unk});
  special_.mask = first_of({find({"[MASK]", "<mask>"}), special_.unk});
  if (special_.unk < 0) throw TokenizerError(source + ": the model has no unknown piece");
  if (special_.cls < 0) throw TokenizerError(source + ": the model has no [CLS], <s> or BOS piece");
  if (special_.sep < 0)
    throw TokenizerError(source + ": the model has no [SEP], </s> or EOS piece");
  for (int32_t id : {special_.unk, special_.cls, special_.sep, special_.pad, special_.mask}) {
    std::string text = piece(id);
    if (!text.empty() && std::none_of(special_texts_.begin(), special_texts_.end(),
                                      [&](const auto& known) { return known.first == text; }))
      special_texts_.emplace_back(std::move(text), id);
  }
  for (const auto& known : special_texts_)
    if (special_starts_.find(known.first.front()) == std::string::npos)
      special_starts_ += known.first.front();
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::from_serialized(
    const std::string& model, const std::string& source) {
  const spm::Library& library = spm::library();
  char error[512];
  ModelPtr handle(library.load(model.data(), model.size(), error, sizeof error),
                  ModelDeleter{&library});
  if (!handle)
    throw TokenizerError(source + ": not a sentencepiece model (" + error + ")");
  return std::unique_ptr<SentencePieceTokenizer>(
      new SentencePieceTokenizer(library, std::move(handle), source));
}

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::load(const std::string& path) {
  const fs::path file = find_model_file(path);
  auto tokenizer = from_serialized(hf_files::read_file(file), file.string());
  if (auto config = hf_files::read_json_if_exists(file.parent_path() / "tokenizer_config.json"))
    tokenizer->set_model_max_length(hf_files::max_length_setting(*config, 512));
  // A Hugging Face folder of Gemma's kind: its tokenizer.json (the same model converted) is
  // what transformers loads, with its class and special tokens in tokenizer_config.json;
  // save() writes these back as they are rather than an ALBERT tokenizer of the model.
  if (file.filename() == "tokenizer.model" && fs::exists(file.parent_path() / "tokenizer.json"))
    for (const char* name : {"tokenizer.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                             "added_tokens.json"})
      if (fs::exists(file.parent_path() / name))
        tokenizer->folder_files_.emplace_back(name, hf_files::read_file(file.parent_path() / name));
  return tokenizer;
}

void SentencePieceTokenizer::encode_plain(std::string_view text, std::vector<int32_t>& ids) const {
  std::string replaced;
  const char* end = text.data() + text.size();
  if (!utf8::is_valid(text.data(), end)) {
    // As Python's decode(errors="replace") would hand it to Hugging Face's tokenizer.
    replaced = utf8::replace_ill_formed(text.data(), end);
    text = replaced;
  }
  // The ids go straight into `ids`: room for one a byte (and then some) is nearly always
  // enough; where normalization makes more pieces than that, a second call gets them all.
  const size_t start = ids.size();
  size_t room = text.size() + 8;
  for (;;) {
    ids.resize(start + room);
    char error[256];
    const int64_t count = lib_.encode(model_.get(), text.data(), text.size(), ids.data() + start,
                                      room, error, sizeof error);
    if (count < 0) {
      ids.resize(start);
      throw TokenizerError(source_ + ": cannot encode text: " + error);
    }
    if (static_cast<size_t>(count) <= room) {
      ids.resize(start + static_cast<size_t>(count));
      return;
    }
    room = static_cast<size_t>(count);
  }
}

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text, int max_length) const {
  std::vector<int32_t> ids;
  ids.push_back(special_.cls);
  // Cut out the special tokens' text (PreTrainedTokenizer.tokenize does the same); each
  // piece of text between them is encoded on its own.
  size_t segment = 0;
  for (size_t at = 0; at < text.size();) {
    size_t found_len = 0;
    int32_t found_id = -1;
    for (const auto& [special_text, id] : special_texts_) {
      if (special_text.size() > found_len &&
          text.compare(at, special_text.size(), special_text) == 0) {
        found_len = special_text.size();
        found_id = id;
      }
    }
    if (found_id < 0) {
      at = text.find_first_of(special_starts_, at + 1);
      if (at == std::string_view::npos) break;
      continue;
    }
    if (at > segment) encode_plain(text.substr(segment, at - segment), ids);
    ids.push_back(found_id);
    at += found_len;
    segment = at;
  }
  if (segment < text.size()) encode_plain(text.substr(segment), ids);
  if (max_length > 0) {
    const size_t keep = static_cast<size_t>(std::max(max_length, 2)) - 1;  // with [CLS]
    if (ids.size() > keep) ids.resize(keep);
  }
  ids.push_back(special_.sep);
  return ids;
}

std::string SentencePieceTokenizer::piece(int32_t id) const {
  if (id < 0 || id >= vocab_size_) return std::string();
  std::string out(32, '\0');
  size_t size = lib_.id_to_piece(model_.get(), id, out.data(), out.size());
  if (size == static_cast<size_t>(-1)) return std::string();
  if (size > out.size()) {
    out.resize(size);
    size = lib_.id_to_piece(model_.get(), id, out.data(), out.size());
  }
  out.resize(size);
  return out;
}

void SentencePieceTokenizer::save(const std::string& dir) const {
  const fs::path folder = dir;
  hf_files::make_dir(folder);
  if (!folder_files_.empty()) {
    for (const auto& [name, bytes] : folder_files_) {
      if (name != "tokenizer_config.json") {
        hf_files::write_file(folder / name, bytes);
        continue;
      }
      nlohmann::ordered_json config = nlohmann::ordered_json::parse(bytes, nullptr, false);
      if (!config.is_object()) throw TokenizerError(source_ + ": tokenizer_config.json beside it is not a JSON object");
      config["model_max_length"] = model_max_length_;
      hf_files::write_json(folder / name, config);
    }
    return;
  }
  std::string model(lib_.serialized(model_.get(), nullptr, 0), '\0');
  model.resize(lib_.serialized(model_.get(), model.data(), model.size()));
  if (model.empty()) throw TokenizerError(source_ + ": cannot serialize the model");
  hf_files::write_file(folder / "spiece.model", model);

  nlohmann::ordered_json tokens;
  tokens["bos_token"] = piece(special_.cls);
  tokens["eos_token"] = piece(special_.sep);
  tokens["unk_token"] = piece(special_.unk);
  tokens["sep_token"] = piece(special_.sep);
  tokens["pad_token"] = piece(special_.pad);
  tokens["cls_token"] = piece(special_.cls);
  tokens["mask_token"] = piece(special_.mask);

  // Hugging Face has no plain "sentencepiece + [CLS]/[SEP]" tokenizer class. ALBERT's is
  // the closest: it reads spiece.model, encodes one text as [CLS] pieces [SEP] (slow and
  // fast versions alike), takes the special tokens by name, and with do_lower_case false,
  // keep_accents true and remove_space true adds no normalization of its own beyond the
  // model's (whitespace runs collapse there too). What it still does differently: it
  // turns `` and '' into ", and re-splits pieces like "▁9," into digits and comma.
  // Alternatives were worse: T5 appends </s> without [CLS]; XLNet puts <cls> last;
  // DeBERTa-v2 wants the file named spm.model; CamemBERT hard-codes its own specials.
  nlohmann::ordered_json config;
  config["tokenizer_class"] = "AlbertTokenizer";
  config["do_lower_case"] = false;
  config["keep_accents"] = true;
  config["remove_space"] = true;
  hf_files::write_tokenizer_config(folder, std::move(config), model_max_length_, tokens);
}

}  // namespace ddp_embed
