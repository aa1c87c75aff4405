// The training configuration: the JSON config file's keys (docs/) as typed structs.
//
// Data flows one way: load_config() reads a JSON file, applies `--set KEY=VALUE`
// overrides, validates every key and value, and returns a Config that the rest of the
// program only reads. Errors are ConfigError with a message naming the file, the key,
// the bad value and, for unknown keys and mistyped choices, the nearest valid spelling.
//
// This is the one place that parses and validates the config: a closed choice arrives as
// its enum (config/choices.h), and every rule the values alone decide is checked here,
// once. The components take their section's struct (LossConfig, DistConfig ...) as it
// is; what only the model can tell (a Matryoshka size against the embedding, the
// tokenizer's vocabulary against model.vocab_size) is checked where the model is built
// (train/setup.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

// Each section's types in a header of its own, so that a component includes only its own.
#include "config/config_error.h"
#include "config/data_config.h"
#include "config/loss_config.h"
#include "config/model_config.h"
#include "config/output_config.h"
#include "config/train_config.h"

namespace ddp_embed {

struct Config {
  ModelConfig model;
  TokenizerConfig tokenizer;
  DataConfig data;
  LossConfig loss;
  TrainConfig train;
  DistConfig dist;
  OutputConfig output;
};

// Reads `path` (JSON), applies each "dotted.key=value" override in order (value parsed as
// JSON, else taken as a string), validates, and returns the result. Keys missing from the
// file keep their defaults. Throws ConfigError.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

// The same from the text of a config file; `origin` names it in error messages.
Config parse_config(std::string_view text, const std::string& origin,
                    const std::vector<std::string>& overrides = {});

// The same from an in-memory JSON object; `origin` names it in error messages.
Config config_from_json(const nlohmann::json& j, const std::string& origin,
                        const std::vector<std::string>& overrides = {});

// The resolved configuration as JSON (every key, defaults filled in): what
// `--print-config` prints and what checkpoints and model folders record.
nlohmann::json config_to_json(const Config& c);

// A stable hash of config_to_json(c): ranks compare it to catch a rank started with a
// different configuration.
uint64_t config_hash(const Config& c);

// The keys that take a closed choice, in table order, each with the spellings it accepts
// as messages list them: {"model.pooling", {"auto", "cls", "mean", "lasttoken"}},
// {"output.resume", {"auto", "never"}} (or any other text: a checkpoint path) ...
std::vector<std::pair<std::string, std::vector<std::string>>> choice_keys();

}  // namespace ddp_embed
