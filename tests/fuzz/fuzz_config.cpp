// parse_config() on arbitrary bytes, with the lines that start with "--set " applied as
// `--set KEY=VALUE` overrides: a ConfigError, or a config that survives printing
// (--print-config) and reading back unchanged.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"
#include "fuzz_targets.h"

namespace ddp_embed::fuzz {
namespace {

constexpr std::string_view kSetPrefix = "--set ";

struct ConfigInput {
  std::string text;  // the file, with each override line left empty (line numbers hold)
  std::vector<std::string> overrides;
};

ConfigInput split_overrides(std::string_view bytes) {
  ConfigInput input;
  size_t begin = 0;
  while (begin <= bytes.size()) {
    size_t end = bytes.find('\n', begin);
    if (end == std::string_view::npos) end = bytes.size();
    const std::string_view line = bytes.substr(begin, end - begin);
    if (line.substr(0, kSetPrefix.size()) == kSetPrefix)
      input.overrides.emplace_back(line.substr(kSetPrefix.size()));
    else
      input.text += line;
    if (end < bytes.size()) input.text += '\n';
    begin = end + 1;
  }
  return input;
}

void check_round_trip(const Config& config) {
  const nlohmann::json printed = config_to_json(config);
  const Config back = parse_config(printed.dump(2), "printed.json");
  check(config_hash(back) == config_hash(config), "the printed config reads back different");
  check(config_to_json(back) == printed, "the printed config prints differently");
}

}  // namespace

int fuzz_config(const uint8_t* data, size_t size) {
  const ConfigInput input = split_overrides(std::string_view(reinterpret_cast<const char*>(data), size));
  Config config;
  try {
    config = parse_config(input.text, "fuzz.json", input.overrides);
  } catch (const ConfigError& e) {
    check(*e.what() != '\0', "an empty error message");
    return 0;
  }
  check_round_trip(config);
  return 0;
}

}  // namespace ddp_embed::fuzz
