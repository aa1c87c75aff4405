// Cutting the gradients into buckets (grad_buckets.h).
#include "parallel/grad_buckets.h"

#include <algorithm>
#include <sstream>

#include <ATen/ATen.h>

namespace ddp_embed {

at::Tensor BucketLayout::slot(std::size_t i) const {
  const Bucket& b = buckets[bucket_of[i]];
  const at::Tensor& p = params[i];
  return b.flat.narrow(0, b.offsets[slot_of[i]], p.numel()).view(p.sizes());
}

bool BucketLayout::grad_is_slot(std::size_t i) const {
  const Bucket& b = buckets[bucket_of[i]];
  const at::Tensor& g = params[i].grad();
  return b.views && g.defined() &&
         g.data_ptr() == static_cast<char*>(b.flat.data_ptr()) + b.offsets[slot_of[i]] * b.flat.element_size();
}

std::string bucket_name(const Bucket& b, std::size_t index, std::size_t count, const std::string& collective) {
  std::ostringstream name;
  name << "gradient " << collective << " of bucket " << index + 1 << "/" << count << " (" << b.params.size()
       << " parameters, " << static_cast<double>(b.numel * b.value_bytes) / (1 << 20) << " MiB)";
  return name.str();
}

namespace {

// Buckets of their own: parameters in reverse registration order (≈ the order backward
// finishes their gradients, so the first buckets fill and start communicating while
// backward still works on the early layers), a new bucket whenever bucket_bytes is reached
// or the device or dtype changes.
void layout_with_copies(BucketLayout& s, std::size_t bucket_bytes) {
  std::size_t cur_bytes = 0;
  for (std::size_t k = s.params.size(); k-- > 0;) {
    const at::Tensor& p = s.params[k];
    const std::size_t bytes = static_cast<std::size_t>(p.numel()) * p.element_size();
    bool fresh = s.buckets.empty() || cur_bytes + bytes > bucket_bytes;
    if (!fresh) {
      const at::Tensor& first = s.params[s.buckets.back().params.front()];
      fresh = first.device() != p.device() || first.scalar_type() != p.scalar_type();  // one dtype per bucket
    }
    if (fresh) {
      s.buckets.emplace_back();
      cur_bytes = 0;
    }
    Bucket& b = s.buckets.back();
    b.offsets.push_back(b.params.empty() ? 0 : b.offsets.back() + s.params[b.params.back()].numel());
    b.params.push_back(k);
    cur_bytes += bytes;
  }
  for (auto& b : s.buckets) {
    const at::Tensor& first = s.params[b.params.front()];
    b.numel = b.offsets.back() + s.params[b.params.back()].numel();
    b.value_bytes = first.element_size();
    b.flat = at::zeros({b.numel}, first.options().requires_grad(false));
  }
}

// Buckets cut from the flat buffers the gradients already live in (grad_buckets.h,
// "Buckets as views"). Returns false, with nothing changed, unless every .grad is
// defined, contiguous, of its parameter's dtype, and the gradients in each buffer tile a
// stretch of it with no gap or overlap. Within a buffer, parameters go from the highest
// offset down (reverse registration order when the buffer was filled in registration
// order); buckets of all buffers are then launched in the order backward completes them:
// a bucket is complete when its earliest-registered parameter is, so by that index,
// highest first. Every rank computes the same order from the same model.
bool layout_as_views(BucketLayout& s, std::size_t bucket_bytes) {
  struct Piece {
    std::size_t param;
    int64_t offset;  // in elements, in the buffer
  };
  std::vector<const c10::StorageImpl*> buffers;  // in order of first appearance: deterministic
  std::vector<std::vector<Piece>> pieces;
  for (std::size_t i = 0; i < s.params.size(); ++i) {
    const at::Tensor& p = s.params[i];
    const at::Tensor& g = p.grad();
    if (!g.defined() || g.is_sparse() || !g.is_contiguous() || g.scalar_type() != p.scalar_type() ||
        g.sizes() != p.sizes())
      return false;
    const c10::StorageImpl* buffer = g.storage().unsafeGetStorageImpl();
    const auto at = std::find(buffers.begin(), buffers.end(), buffer);
    if (at == buffers.end()) {
      buffers.push_back(buffer);
      pieces.push_back({{i, g.storage_offset()}});
    } else {
      pieces[at - buffers.begin()].push_back({i, g.storage_offset()});
    }
  }
  std::vector<Bucket> buckets;
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    auto& in_buffer = pieces[k];
    std::sort(in_buffer.begin(), in_buffer.end(), [](const Piece& a, const Piece& b) { return a.offset > b.offset; });
    for (std::size_t j = 0; j + 1 < in_buffer.size(); ++j)  // tiled: each ends where the one above starts
      if (in_buffer[j + 1].offset + s.params[in_buffer[j + 1].param].numel() != in_buffer[j].offset) return false;
    const at::Tensor& any_grad = s.params[in_buffer.front().param].grad();
    const int64_t element = any_grad.element_size();
    int64_t lo = 0, hi = 0;  // the stretch of the bucket being filled
    for (std::size_t j = 0; j < in_buffer.size(); ++j) {
      const Piece& piece = in_buffer[j];
      const int64_t n = s.params[piece.param].numel();
      if (j == 0 || static_cast<std::size_t>((hi - piece.offset) * element) > bucket_bytes) {
        buckets.emplace_back();
        hi = piece.offset + n;
      }
      lo = piece.offset;
      Bucket& b = buckets.back();
      b.params.push_back(piece.param);
      b.offsets.push_back(piece.offset);  // made relative to the bucket below
      const bool last_of_bucket = j + 1 == in_buffer.size() ||
                                  static_cast<std::size_t>((hi - in_buffer[j + 1].offset) * element) > bucket_bytes;
      if (last_of_bucket) {
        b.flat = at::empty({0}, any_grad.options()).set_(any_grad.storage(), lo, {hi - lo}, {1});
        for (auto& o : b.offsets) o -= lo;
        b.views = true;
        b.buffer = k;
        b.lo = lo;
        b.numel = hi - lo;
        b.value_bytes = element;
      }
    }
  }
  auto earliest = [](const Bucket& b) { return *std::min_element(b.params.begin(), b.params.end()); };
  std::stable_sort(buckets.begin(), buckets.end(),
                   [&](const Bucket& a, const Bucket& b) { return earliest(a) > earliest(b); });
  s.buckets = std::move(buckets);
  s.buffers = std::move(buffers);
  return true;
}

}  // namespace

BucketLayout cut_into_buckets(std::vector<at::Tensor> params, std::size_t bucket_bytes) {
  BucketLayout s;
  s.params = std::move(params);
  at::NoGradGuard no_grad;
  if (!layout_as_views(s, bucket_bytes)) layout_with_copies(s, bucket_bytes);
  s.bucket_of.assign(s.params.size(), 0);
  s.slot_of.assign(s.params.size(), 0);
  for (std::size_t b = 0; b < s.buckets.size(); ++b) {
    Bucket& bk = s.buckets[b];
    for (std::size_t slot = 0; slot < bk.params.size(); ++slot) {
      s.bucket_of[bk.params[slot]] = b;
      s.slot_of[bk.params[slot]] = slot;
    }
    bk.pending = bk.params.size();
  }
  return s;
}

}  // namespace ddp_embed
