#include "util/slurm_nodelist.h"

#include <stdexcept>

namespace ddp_embed::slurm {
namespace {

// A runaway range such as node[0-999999999] must fail, not exhaust memory.
constexpr size_t kMaxHosts = 1u << 20;

[[noreturn]] void malformed(const std::string& nodelist, const std::string& why) {
  throw std::invalid_argument("malformed SLURM node list '" + nodelist + "': " + why);
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

std::string zero_pad(unsigned long value, size_t width) {
  std::string digits = std::to_string(value);
  if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
  return digits;
}

// The numbers inside one bracket group: "01-04,07" -> 01 02 03 04 07.
std::vector<std::string> expand_bracket(const std::string& inside, const std::string& whole) {
  std::vector<std::string> values;
  size_t start = 0;
  while (start <= inside.size()) {
    size_t comma = inside.find(',', start);
    std::string item = inside.substr(start, comma == std::string::npos ? comma : comma - start);
    size_t dash = item.find('-');
    std::string low = item.substr(0, dash);
    std::string high = dash == std::string::npos ? low : item.substr(dash + 1);
    if (!all_digits(low) || !all_digits(high) || low.size() > 18 || high.size() > 18)
      malformed(whole, "bad range '" + item + "'");
    unsigned long a = std::stoul(low), b = std::stoul(high);
    if (a > b) malformed(whole, "range '" + item + "' runs backwards");
    if (b - a >= kMaxHosts) malformed(whole, "range '" + item + "' is too large");
    for (unsigned long v = a; v <= b; ++v) values.push_back(zero_pad(v, low.size()));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return values;
}

// One host expression, possibly with several bracket groups: "r[1-2]n[3-4]" gives
// r1n3 r1n4 r2n3 r2n4 (the product, first group outermost, as SLURM orders them).
void expand_host(const std::string& expr, const std::string& whole,
                 std::vector<std::string>& out) {
  std::vector<std::string> partial{""};
  size_t pos = 0;
  while (pos < expr.size()) {
    size_t open = expr.find('[', pos);
    std::string literal = expr.substr(pos, open == std::string::npos ? open : open - pos);
    if (literal.find(']') != std::string::npos) malformed(whole, "unbalanced ']'");
    for (auto& p : partial) p += literal;
    if (open == std::string::npos) break;
    size_t close = expr.find(']', open);
    if (close == std::string::npos) malformed(whole, "unbalanced '['");
    std::string inside = expr.substr(open + 1, close - open - 1);
    if (inside.find('[') != std::string::npos) malformed(whole, "nested '['");
    std::vector<std::string> numbers = expand_bracket(inside, whole);
    if (partial.size() * numbers.size() > kMaxHosts) malformed(whole, "too many hosts");
    std::vector<std::string> next;
    next.reserve(partial.size() * numbers.size());
    for (const auto& p : partial)
      for (const auto& n : numbers) next.push_back(p + n);
    partial.swap(next);
    pos = close + 1;
  }
  if (out.size() + partial.size() > kMaxHosts) malformed(whole, "too many hosts");
  out.insert(out.end(), partial.begin(), partial.end());
}

}  // namespace

std::vector<std::string> expand_nodelist(const std::string& nodelist) {
  if (nodelist.empty()) malformed(nodelist, "empty");
  std::vector<std::string> hosts;
  // Split on the commas outside brackets.
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= nodelist.size(); ++i) {
    char c = i < nodelist.size() ? nodelist[i] : ',';
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) malformed(nodelist, "unbalanced ']'");
    if (c == ',' && depth == 0) {
      std::string expr = nodelist.substr(start, i - start);
      if (expr.empty()) malformed(nodelist, "empty host name");
      if (expr.find_first_of(" \t\n") != std::string::npos)
        malformed(nodelist, "white space in host name");
      expand_host(expr, nodelist, hosts);
      start = i + 1;
    }
  }
  if (depth != 0) malformed(nodelist, "unbalanced '['");
  return hosts;
}

}  // namespace ddp_embed::slurm
