// The command line's numbers, checked as CLI11 reads them, with messages a person reads:
// "--batch-size: expected a positive integer, got 0" rather than CLI11's ranges, whose
// bounds print as 309-digit numbers, and which let NaN through (a comparison with NaN is
// false, so "not in range" never fires): a NaN margin silently filters nothing.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

namespace ddp_embed::cli {

// A check of a number option: `ok` on the value, `expected` said when it fails. The text
// must be a number (CLI11 converts it after the check, with its own error for the type).
inline CLI::Validator number_check(const std::string& expected, std::function<bool(double)> ok, bool integer) {
  return CLI::Validator(
      [expected, ok, integer](std::string& input) -> std::string {
        const char* text = input.c_str();
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(text, &end);
        const bool number = end != text && *end == '\0';
        if (!number || !std::isfinite(v) || (integer && v != std::floor(v)) || !ok(v))
          return "expected " + expected + ", got " + input;
        return "";
      },
      expected, "");
}

inline CLI::Validator positive_integer() {
  return number_check("a positive integer", [](double v) { return v > 0; }, true);
}
inline CLI::Validator non_negative_integer() {
  return number_check("a non-negative integer", [](double v) { return v >= 0; }, true);
}
// Any finite number: scores and margins (NaN and the infinities are no bound).
inline CLI::Validator finite_number() {
  return number_check("a finite number", [](double) { return true; }, false);
}

}  // namespace ddp_embed::cli
