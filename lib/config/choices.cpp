#include "config/choices.h"

#include <nlohmann/json.hpp>

#include "config/config_error.h"
#include "config/key_suggest.h"

namespace ddp_embed {

std::string describe_choices(const std::vector<std::string>& names) {
  std::string s = "one of ";
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", \"" : "\"") + names[i] + "\"";
  return s;
}

std::string bad_choice_message(const std::vector<std::string>& names, const std::string& shown,
                               const std::optional<std::string>& typed) {
  std::string msg = "expected " + describe_choices(names) + ", got " + shown;
  const std::string near = typed ? nearest_value(*typed, names) : "";
  if (!near.empty()) msg += " (did you mean \"" + near + "\"?)";
  return msg;
}

void throw_bad_choice(const std::string& what, const std::vector<std::string>& names, std::string_view typed) {
  const std::string text(typed);
  // As the config reader shows a value: JSON, so that "" and odd characters are visible.
  const std::string shown = nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  throw ConfigError(what + ": " + bad_choice_message(names, shown, text));
}

}  // namespace ddp_embed
