// "Did you mean ...?" for misspelled dotted keys (config keys, --set, command options).
#pragma once

#include <string>
#include <vector>

namespace ddp_embed {

// Optimal-string-alignment distance: insertions, deletions, substitutions and swaps of
// two neighbouring characters each cost 1 ("tempreature" is 1 from "temperature").
size_t edit_distance(const std::string& a, const std::string& b);

// The key in `valid` that `unknown` most plausibly meant, or "" when none is close.
// Keys are dotted paths ("train.lr"); the last part is compared, a key in the same
// section wins over one elsewhere, and common spellings from other tools count as exact
// ("learning_rate" → "lr", "num_hidden_layers" → "num_layers", "warmup" →
// "warmup_steps"). Among equals the earlier key in `valid` wins.
std::string nearest_key(const std::string& unknown, const std::vector<std::string>& valid);

// The spelling in `valid` that a mistyped value of a closed choice most plausibly meant
// ("infonse" → "infonce", "Round-Robin" → "round_robin"), or "" when none is close. Values
// are short words, most of them a letter or two from each other ("gpu" / "cpu", "max" /
// "mean"): case, '-' and ' ' aside, a quarter of the typed length may differ, so a word
// of three letters is suggested only when it differs in case or separators alone. Among
// equals the earlier spelling wins.
std::string nearest_value(const std::string& typed, const std::vector<std::string>& valid);

}  // namespace ddp_embed
