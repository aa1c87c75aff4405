// How the distributed layer's errors word durations, lists of ranks and LibTorch's own
// messages (shared by process_group.cpp and rendezvous.cpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <sstream>
#include <string>
#include <vector>

namespace ddp_embed {

// "2.5 s".
inline std::string seconds_str(std::chrono::milliseconds ms) {
  std::ostringstream s;
  s << static_cast<double>(ms.count()) / 1000.0 << " s";
  return s.str();
}

// "1, 2, 5", at most 16 of them, then "and N more".
inline std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream s;
  const size_t shown = std::min<size_t>(ranks.size(), 16);
  for (size_t i = 0; i < shown; ++i) s << (i ? ", " : "") << ranks[i];
  if (ranks.size() > shown) s << " and " << ranks.size() - shown << " more";
  return s.str();
}

// c10 errors append "Exception raised from ..." and a backtrace: keep the message.
inline std::string first_line(const std::string& s) { return s.substr(0, std::min(s.find('\n'), size_t{600})); }

}  // namespace ddp_embed
