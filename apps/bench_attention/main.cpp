// bench-attention: one layer's attention on the CPU, forward and backward, on each path, for
// batches of real text lengths — the measurements behind model.attention auto's CPU rule
// (lib/model/attention.cpp). Not built by default: scripts/bench-attention.sh builds and runs it.
//
//   bench-attention [ROUNDS]   prints ms a call (median over ROUNDS rounds of 10 calls each);
//                              then long texts under a window (ModernBERT's local layers)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "model/attention.h"

using namespace ddp_embed;

namespace {

// ms a call of attention() with `mode`, forward and backward, 12 heads of `dims` (MiniLM's
// 32 by default); `window`: AttentionCall's window_left and window_right (-1: none).
double ms_a_call(const std::vector<int64_t>& lengths, AttentionMode mode, double dropout, bool one_query,
                 int64_t window = -1, int64_t dims = 32, int calls = 10) {
  const int64_t heads = 12;
  const TokenLayout layout(lengths, *std::max_element(lengths.begin(), lengths.end()), at::kCPU);
  const at::Tensor q = at::randn({one_query ? layout.batch : layout.tokens, heads, dims}).requires_grad_(true);
  const at::Tensor k = at::randn({layout.tokens, heads, dims}).requires_grad_(true);
  const at::Tensor v = at::randn({layout.tokens, heads, dims}).requires_grad_(true);
  AttentionCall call;
  call.dropout_p = dropout;
  call.mode = mode;
  call.recompute_padded = true;  // as training runs it
  call.one_query_per_sequence = one_query;
  call.window_left = call.window_right = window;
  const auto once = [&] { attention(q, k, v, layout, call).sum().backward(); };
  for (int i = 0; i < std::min(calls, 3); ++i) once();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) once();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / calls;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 3;
  at::set_num_threads(1);
  std::mt19937 rng(5);
  const auto draw = [&](int64_t lo, int64_t hi, int every_long = 0) {
    std::vector<int64_t> out;
    std::uniform_int_distribution<int64_t> length(lo, hi);
    for (int i = 0; i < 64; ++i) out.push_back(every_long && i % every_long == 7 ? 64 : length(rng));
    return out;
  };
  // 64 texts each: two STS-B batches as MiniLM's tokenizer counts them, skewed, uniform.
  const std::vector<std::pair<std::string, std::vector<int64_t>>> sets = {
      {"STS-B lengths (8-37 tokens)",
       {9, 29, 13, 12, 10, 19, 20, 28, 11, 26, 14, 9, 22, 9, 23, 14, 23, 9, 10, 28, 16, 15, 13, 37, 10, 33, 8, 9,
        11, 13, 23, 8, 25, 13, 13, 26, 12, 10, 30, 20, 17, 28, 31, 14, 20, 11, 13, 10, 19, 18, 8, 22, 35, 11, 10, 17,
        12, 8, 10, 13, 17, 15, 13, 21}},
      {"STS-B's short pairs (7-13)",
       {11, 10, 12, 9, 9, 9, 11, 9, 8, 9, 7, 9, 11, 12, 9, 8, 9, 9, 8, 7, 8, 9, 9, 9, 8, 9, 11, 10, 7, 7, 11, 10,
        11, 9, 12, 8, 9, 8, 11, 9, 10, 9, 7, 9, 11, 13, 9, 8, 9, 8, 9, 7, 8, 9, 11, 8, 8, 9, 8, 12, 10, 7, 11, 8}},
      {"skewed (1 in 20 at 64, 4-20)", draw(4, 20, 20)},
      {"uniform 8-64", draw(8, 64)},
  };
  std::printf("one layer's attention, forward and backward, 64 texts, 12 heads of 32, fp32, one thread;\n"
              "ms a call, median of %d rounds of 10 calls (auto with dropout: grouped; without: packed)\n\n", rounds);
  std::printf("%-30s %8s %9s %8s %8s | one query a text: %6s %7s\n", "lengths", "dropout", "packed", "auto", "padded",
              "packed", "auto");
  for (const double dropout : {0.1, 0.0}) {
    for (const auto& [name, lengths] : sets) {
      std::vector<double> packed, automatic, padded, one_packed, one_auto;
      for (int r = 0; r < rounds; ++r) {
        packed.push_back(ms_a_call(lengths, AttentionMode::Packed, dropout, false));
        automatic.push_back(ms_a_call(lengths, AttentionMode::Auto, dropout, false));
        padded.push_back(ms_a_call(lengths, AttentionMode::Padded, dropout, false));
        one_packed.push_back(ms_a_call(lengths, AttentionMode::Packed, dropout, true));
        one_auto.push_back(ms_a_call(lengths, AttentionMode::Auto, dropout, true));
      }
      std::printf("%-30s %8.1f %9.2f %8.2f %8.2f | %25.2f %7.2f\n", name.c_str(), dropout, median(packed),
                  median(automatic), median(padded), median(one_packed), median(one_auto));
    }
  }
  // Long texts: a local layer's window (ModernBERT's 128 tokens, 64 each side) against a
  // global layer, 2 texts of 4,096 tokens, 12 heads of 64 (ModernBERT-base), no dropout.
  std::printf("\n2 texts of 4,096 tokens, 12 heads of 64, fp32, one thread, forward and backward, ms a call "
              "(median of %d rounds of 2 calls)\n%-44s %9s\n", rounds, "layer", "ms");
  const std::vector<int64_t> long_texts{4096, 4096};
  const std::vector<std::pair<std::string, std::pair<AttentionMode, int64_t>>> rows = {
      {"global (every key)", {AttentionMode::Auto, -1}},
      {"local, window (64, 64): auto (its band)", {AttentionMode::Auto, 64}},
      {"local, window (64, 64): padded (masked keys)", {AttentionMode::Padded, 64}},
  };
  for (const auto& [name, row] : rows) {
    std::vector<double> ms;
    for (int r = 0; r < rounds; ++r) ms.push_back(ms_a_call(long_texts, row.first, 0.0, false, row.second, 64, 2));
    std::printf("%-44s %9.1f\n", name.c_str(), median(ms));
  }
  return 0;
}
