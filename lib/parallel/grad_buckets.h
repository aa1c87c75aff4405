// The buckets of the gradient sync (grad_sync.h): which parameters' gradients travel
// together, where each lies in its bucket, and the order in which buckets are sent.
// Private to lib/parallel.
//
// Parameters are grouped into flat buckets of about bucket_bytes, in reverse registration
// order (roughly the order in which backward produces their gradients, so the first
// buckets fill and start communicating while backward still works on the early layers).
//
// Buckets as views of the gradients (PyTorch's gradient_as_bucket_view). When every
// parameter's .grad is already a view of a flat buffer (FlatAdamW makes them so: one
// buffer per parameter group), the buckets are cut from those buffers instead of being
// buffers of their own: autograd accumulates straight into the bucket, nothing is copied
// in or out, and a model-sized buffer (91 MB for MiniLM-L6) and two passes over it per
// step are saved. A bucket is then a run of parameters that lie side by side in one
// buffer; the layout is checked, and a parameter whose .grad was replaced later (no
// longer the bucket's memory) is copied as with buckets of their own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "parallel/process_group.h"

namespace ddp_embed {

struct Bucket {
  at::Tensor flat;                  // all gradients of the bucket, one after the other
  int64_t numel = 0;                // flat's length
  int64_t value_bytes = 4;          // flat's element size
  std::vector<std::size_t> params;  // indices into BucketLayout::params
  std::vector<int64_t> offsets;     // element offset of each in flat
  bool views = false;               // flat is the parameters' gradients themselves
  std::size_t buffer = 0;           // with views: the flat gradient buffer it is cut from,
  int64_t lo = 0;                   //   and where: [lo, lo + numel)
  std::string name;                 // names the bucket's collective in errors

  // This step's state.
  std::size_t pending = 0;              // parameters whose gradient is not in flat yet
  bool launched = false;
  std::vector<PendingCollective> work;  // its collectives in flight
};

struct BucketLayout {
  std::vector<at::Tensor> params;                // the synchronized parameters, each once
  std::vector<Bucket> buckets;                   // in launch order, the same on every rank
  std::vector<std::size_t> bucket_of, slot_of;   // per parameter
  std::vector<const c10::StorageImpl*> buffers;  // with views: the flat gradient buffers, by first appearance

  // Parameter i's stretch of its bucket, shaped like the parameter.
  at::Tensor slot(std::size_t i) const;
  // Whether .grad of parameter i is its slot (a view layout, .grad not replaced since).
  bool grad_is_slot(std::size_t i) const;
};

// The buckets of `params` (leaves that require grad, each listed once), about
// bucket_bytes each: views of the gradients' flat buffers where they lie in some, else
// zero-filled buffers of their own. Every rank computes the same layout from the same model.
BucketLayout cut_into_buckets(std::vector<at::Tensor> params, std::size_t bucket_bytes);

// "gradient all-reduce of bucket 3/7 (12 parameters, 24.1 MiB)", for errors and timeouts.
std::string bucket_name(const Bucket& b, std::size_t index, std::size_t count, const std::string& collective);

}  // namespace ddp_embed
