// libddp_embed_spm.so: sentencepiece behind the C API of spm_api.h (read there why).
// Built on its own (CMake target ddp_embed_spm), never part of embed_core; only the
// ddp_embed_spm_* functions are exported (spm_shim.map). Nothing may throw out of here.
#include "spm_api.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

struct ddp_embed_spm_model {
  sentencepiece::SentencePieceProcessor processor;
};

namespace {

void set_error(char* error, size_t cap, const std::string& message) {
  if (error == nullptr || cap == 0) return;
  const size_t n = std::min(message.size(), cap - 1);
  std::memcpy(error, message.data(), n);
  error[n] = '\0';
}

// Copies data into out if it fits; returns its size either way.
size_t copy_out(const char* data, size_t size, char* out, size_t cap) {
  if (out != nullptr && size <= cap && size > 0) std::memcpy(out, data, size);
  return size;
}

// sentencepiece's view of our sentence callback.
class CallbackSentences final : public sentencepiece::SentenceIterator {
 public:
  CallbackSentences(ddp_embed_spm_next_fn next, void* ctx) : next_(next), ctx_(ctx) { Next(); }

  bool done() const override { return done_; }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override {
    if (!failed_) return sentencepiece::util::Status();
    return sentencepiece::util::Status(sentencepiece::util::StatusCode::kInvalidArgument,
                                       "reading the training sentences failed");
  }
  void Next() override {
    if (done_) return;
    const char* text = nullptr;
    size_t size = 0;
    const int got = next_(ctx_, &text, &size);
    if (got == 1) {
      value_.assign(text, size);
      return;
    }
    done_ = true;
    failed_ = got < 0;
    value_.clear();
  }

 private:
  ddp_embed_spm_next_fn next_;
  void* ctx_;
  std::string value_;
  bool done_ = false;
  bool failed_ = false;
};

std::mutex& train_mutex() {
  static std::mutex mutex;
  return mutex;
}

}  // namespace

extern "C" {

int ddp_embed_spm_api_version(void) { return DDP_EMBED_SPM_API_VERSION; }

ddp_embed_spm_model* ddp_embed_spm_load(const char* data, size_t size, char* error,
                                        size_t error_cap) {
  try {
    auto model = std::make_unique<ddp_embed_spm_model>();
    const auto status =
        model->processor.LoadFromSerializedProto(absl::string_view(data, size));
    if (!status.ok()) {
      set_error(error, error_cap, status.ToString());
      return nullptr;
    }
    return model.release();
  } catch (const std::exception& e) {
    set_error(error, error_cap, e.what());
  } catch (...) {
    set_error(error, error_cap, "unknown error");
  }
  return nullptr;
}

void ddp_embed_spm_free(ddp_embed_spm_model* model) { delete model; }

int32_t ddp_embed_spm_vocab_size(const ddp_embed_spm_model* model) {
  return model->processor.GetPieceSize();
}

void ddp_embed_spm_special_ids(const ddp_embed_spm_model* model, int32_t out[4]) {
  out[0] = model->processor.unk_id();
  out[1] = model->processor.bos_id();
  out[2] = model->processor.eos_id();
  out[3] = model->processor.pad_id();
}

int32_t ddp_embed_spm_piece_to_id(const ddp_embed_spm_model* model, const char* piece,
                                  size_t size) {
  return model->processor.PieceToId(absl::string_view(piece, size));
}

size_t ddp_embed_spm_id_to_piece(const ddp_embed_spm_model* model, int32_t id, char* out,
                                 size_t cap) {
  if (id < 0 || id >= model->processor.GetPieceSize()) return static_cast<size_t>(-1);
  const std::string& piece = model->processor.IdToPiece(id);
  return copy_out(piece.data(), piece.size(), out, cap);
}

int64_t ddp_embed_spm_encode(const ddp_embed_spm_model* model, const char* text, size_t size,
                             int32_t* ids, size_t cap, char* error, size_t error_cap) {
  try {
    std::vector<int> pieces;
    const auto status = model->processor.Encode(absl::string_view(text, size), &pieces);
    if (!status.ok()) {
      set_error(error, error_cap, status.ToString());
      return -1;
    }
    if (pieces.size() <= cap && !pieces.empty())
      std::copy(pieces.begin(), pieces.end(), ids);
    return static_cast<int64_t>(pieces.size());
  } catch (const std::exception& e) {
    set_error(error, error_cap, e.what());
  } catch (...) {
    set_error(error, error_cap, "unknown error");
  }
  return -1;
}

size_t ddp_embed_spm_serialized(const ddp_embed_spm_model* model, char* out, size_t cap) {
  try {
    const auto bytes = model->processor.serialized_model_proto();
    return copy_out(bytes.data(), bytes.size(), out, cap);
  } catch (...) {
    return 0;
  }
}

int ddp_embed_spm_train(const char* const* keys, const char* const* values, size_t count,
                        uint32_t seed, ddp_embed_spm_next_fn next, void* next_ctx,
                        ddp_embed_spm_write_fn write, void* write_ctx, char* error,
                        size_t error_cap) {
  try {
    std::unordered_map<std::string, std::string> args;
    for (size_t i = 0; i < count; ++i) args[keys[i]] = values[i];
    std::lock_guard<std::mutex> lock(train_mutex());
    CallbackSentences sentences(next, next_ctx);
    std::string model;
    sentencepiece::SetRandomGeneratorSeed(seed);
    const auto status = sentencepiece::SentencePieceTrainer::Train(args, &sentences, &model);
    if (!status.ok()) {
      set_error(error, error_cap, status.ToString());
      return -1;
    }
    write(write_ctx, model.data(), model.size());
    return 0;
  } catch (const std::exception& e) {
    set_error(error, error_cap, e.what());
  } catch (...) {
    set_error(error, error_cap, "unknown error");
  }
  return -1;
}

}  // extern "C"
