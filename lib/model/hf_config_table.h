// One Hugging Face config.json described once. Every encoder (model/bert.cpp, model/qwen3.cpp
// and the others) lists its config.json keys in a table: where each value lives in its
// config struct and what it must be (an integer, positive ...), and the keys whose other
// values it does not implement. Reading, validating and writing back walk that one table,
// so a key read is a key written, a refusal names the file and the key, and a new
// architecture is a table and a model, not another hand-written reader.
//
// What no table says stays code beside it: defaults that depend on another key
// (num_key_value_heads = num_attention_heads), nested objects (rope_parameters), lists
// (layer_types), and rules across keys (heads divide the hidden size).
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model_error.h"

namespace ddp_embed {

// What a number must be, besides its kind (the member's type says integer, number or bool).
enum class HfBound { Any, Positive, NonNegative };

// One key, read into and written from one member of the config struct C.
template <typename C>
struct HfField {
  const char* key;
  std::variant<int64_t C::*, double C::*, bool C::*, std::string C::*> member;
  HfBound bound = HfBound::Any;
};

// A key whose value must be `value` (what this encoder implements): absent or null means
// transformers' default, which must be it too. Written back as `value`.
struct HfFixed {
  const char* key;
  nlohmann::json value;
  const char* why;  // "Qwen3's feed-forward is SwiGLU" ... ends the refusal
};

template <typename C>
struct HfConfigTable {
  std::vector<HfField<C>> fields;
  std::vector<HfFixed> fixed;
};

namespace hf_table_detail {

template <typename T>
void check_bound(T v, HfBound bound, const std::string& where) {
  if (bound == HfBound::Positive && !(v > 0))
    throw ModelError(where + " must be positive, not " + nlohmann::json(v).dump());
  if (bound == HfBound::NonNegative && !(v >= 0))
    throw ModelError(where + " must not be negative, not " + nlohmann::json(v).dump());
}

}  // namespace hf_table_detail

// The fields of `table` from j into c (c holds transformers' defaults for absent or null
// keys). Throws ModelError "origin: key ..." for a value of the wrong kind or a fixed key
// with another value. Bounds are check_hf_fields', called by the encoder's validation, which
// a config made in code passes through too.
template <typename C>
void read_hf_fields(const nlohmann::json& j, const HfConfigTable<C>& table, C& c, const std::string& origin) {
  if (!j.is_object()) throw ModelError(origin + ": a config must be a JSON object");
  for (const HfFixed& f : table.fixed) {
    const auto it = j.find(f.key);
    if (it == j.end() || it->is_null() || *it == f.value) continue;
    throw ModelError(origin + ": " + f.key + " " + it->dump() + " is not implemented (" + f.why + ")");
  }
  for (const HfField<C>& f : table.fields) {
    const std::string where = origin + ": " + f.key;
    const auto it = j.find(f.key);
    const bool present = it != j.end() && !it->is_null();
    std::visit(
        [&](auto member) {
          using T = std::remove_cv_t<std::remove_reference_t<decltype(c.*member)>>;
          if constexpr (std::is_same_v<T, bool>) {
            if (present && !it->is_boolean()) throw ModelError(where + " must be true or false, not " + it->dump());
            if (present) c.*member = it->template get<bool>();
          } else if constexpr (std::is_same_v<T, std::string>) {
            if (present && !it->is_string()) throw ModelError(where + " must be a string, not " + it->dump());
            if (present) c.*member = it->template get<std::string>();
          } else {
            if (present && !(std::is_integral_v<T> ? it->is_number_integer() : it->is_number()))
              throw ModelError(where + " must be " + (std::is_integral_v<T> ? "an integer" : "a number") +
                               ", not " + it->dump());
            if (present) c.*member = it->template get<T>();
          }
        },
        f.member);
  }
}

// Every field's bound (vocab_size positive ...), on a config read or made in code (a model
// trained from scratch). Throws ModelError "origin: key must be positive, not 0".
template <typename C>
void check_hf_fields(const HfConfigTable<C>& table, const C& c, const std::string& origin) {
  for (const HfField<C>& f : table.fields)
    std::visit(
        [&](auto member) {
          using T = std::remove_cv_t<std::remove_reference_t<decltype(c.*member)>>;
          if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
            hf_table_detail::check_bound(c.*member, f.bound, origin + ": " + f.key);
        },
        f.member);
}

// Every field and fixed key of `table` as config.json holds them; the caller adds what the
// table does not say (model_type, architectures, nested objects).
template <typename C>
nlohmann::json write_hf_fields(const HfConfigTable<C>& table, const C& c) {
  nlohmann::json j = nlohmann::json::object();
  for (const HfField<C>& f : table.fields) std::visit([&](auto member) { j[f.key] = c.*member; }, f.member);
  for (const HfFixed& f : table.fixed) j[f.key] = f.value;
  return j;
}

}  // namespace ddp_embed
