#include "model/token_layout.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>
#include <utility>

#include <ATen/Dispatch.h>

#include "model/model_error.h"

namespace ddp_embed {
namespace {

// The real tokens of each row of a right-padded mask, read on the host.
std::vector<int64_t> lengths_of(const at::Tensor& attention_mask) {
  if (attention_mask.dim() != 2)
    throw ModelError("TokenLayout: attention_mask must be [batch, length], not of " +
                     std::to_string(attention_mask.dim()) + " dimensions");
  const at::Tensor real = attention_mask.ne(0).to(at::kCPU);
  const at::Tensor counts = real.sum(1);
  const int64_t length = real.size(1);
  const at::Tensor right_padded = at::arange(length, counts.options()).unsqueeze(0) < counts.unsqueeze(1);
  if (!at::equal(real, right_padded)) {
    const int64_t row = (real != right_padded).any(1).nonzero().min().item<int64_t>();
    throw ModelError("TokenLayout: attention_mask row " + std::to_string(row) +
                     " has padding before a real token: batches are right-padded (real tokens first)");
  }
  const at::Tensor c = counts.to(at::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

}  // namespace

TokenLayout::TokenLayout(const at::Tensor& attention_mask)
    : TokenLayout(lengths_of(attention_mask), attention_mask.size(1), attention_mask.device()) {}

TokenLayout::TokenLayout(std::vector<int64_t> sequence_lengths, int64_t padded_length, const c10::Device& device)
    : batch(static_cast<int64_t>(sequence_lengths.size())), length(padded_length), lengths(std::move(sequence_lengths)) {
  for (size_t b = 0; b < lengths.size(); ++b)
    if (lengths[b] < 0 || lengths[b] > length)
      throw ModelError("TokenLayout: sequence " + std::to_string(b) + " has " + std::to_string(lengths[b]) +
                       " real tokens, outside [0, " + std::to_string(length) + "]");
  tokens = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  longest = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  dense = tokens == batch * length;

  // Every index on the host, in one buffer (pinned for a GPU: the copy does not wait).
  const bool to_gpu = !device.is_cpu();
  const at::TensorOptions host = at::TensorOptions().pinned_memory(to_gpu);
  at::Tensor longs = at::empty({3 * tokens + 2 * batch}, host.dtype(at::kLong));
  at::Tensor starts = at::empty({2 * (batch + 1)}, host.dtype(at::kInt));
  int64_t* flat = longs.data_ptr<int64_t>();
  int64_t* pos = flat + tokens;
  int64_t* seq = pos + tokens;
  int64_t* first = seq + tokens;
  int64_t* last = first + batch;
  int32_t* cu = starts.data_ptr<int32_t>();
  if (tokens > std::numeric_limits<int32_t>::max())
    throw ModelError("TokenLayout: a batch of " + std::to_string(tokens) +
                     " real tokens; the varlen kernels' int32 starts hold at most 2^31 - 1");
  int64_t row = 0;
  for (int64_t b = 0; b < batch; ++b) {
    cu[b] = static_cast<int32_t>(row);
    first[b] = std::min(row, std::max<int64_t>(tokens - 1, 0));
    for (int64_t t = 0; t < lengths[size_t(b)]; ++t, ++row) {
      flat[row] = b * length + t;
      pos[row] = t;
      seq[row] = b;
    }
    last[b] = std::clamp<int64_t>(row - 1, 0, std::max<int64_t>(tokens - 1, 0));
  }
  cu[batch] = static_cast<int32_t>(row);
  for (int64_t b = 0; b <= batch; ++b) cu[batch + 1 + b] = static_cast<int32_t>(b);
  if (to_gpu) {
    longs = longs.to(device, /*non_blocking=*/true);
    starts = starts.to(device, /*non_blocking=*/true);
  }
  token_index = longs.narrow(0, 0, tokens);
  positions = longs.narrow(0, tokens, tokens);
  sequence_of = longs.narrow(0, 2 * tokens, tokens);
  first_index = longs.narrow(0, 3 * tokens, batch);
  last_index = longs.narrow(0, 3 * tokens + batch, batch);
  cu_seqlens = starts.narrow(0, 0, batch + 1);
  cu_one_each = starts.narrow(0, batch + 1, batch + 1);
}

at::Tensor TokenLayout::pack(const at::Tensor& padded) const {
  at::Tensor flat = padded.flatten(0, 1);
  return dense ? flat : flat.index_select(0, token_index);
}

at::Tensor TokenLayout::unpack(const at::Tensor& packed) const {
  const int64_t hidden = packed.size(-1);
  if (dense) return packed.view({batch, length, hidden});
  return at::zeros({batch * length, hidden}, packed.options()).index_copy(0, token_index, packed)
      .view({batch, length, hidden});
}

at::Tensor TokenLayout::mean(const at::Tensor& packed) const {
  const at::Tensor sums = at::zeros({batch, packed.size(-1)}, packed.options()).index_add(0, sequence_of, packed);
  const at::Tensor counts = (cu_seqlens.narrow(0, 1, batch) - cu_seqlens.narrow(0, 0, batch)).to(packed.scalar_type());
  return sums / counts.clamp_min(1).unsqueeze(1);
}

at::Tensor TokenLayout::padding_bias(const at::TensorOptions& options) const {
  double lowest = 0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, c10::typeMetaToScalarType(options.dtype()), "padding_bias",
                                  [&] { lowest = static_cast<double>(std::numeric_limits<scalar_t>::lowest()); });
  const at::Tensor counts = cu_seqlens.narrow(0, 1, batch) - cu_seqlens.narrow(0, 0, batch);
  const at::Tensor padding = at::arange(length, counts.options()).unsqueeze(0) >= counts.unsqueeze(1);
  return at::zeros({batch, 1, 1, length}, options).masked_fill_(padding.view({batch, 1, 1, length}), lowest);
}

}  // namespace ddp_embed
