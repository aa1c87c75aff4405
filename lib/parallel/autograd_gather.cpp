// all_gather_with_grad (process_group.h): the all-gather that autograd sees through.
//
// Why backward is "all-reduce SUM, then take my slice":
// Each rank r computes a loss L_r from the gathered G = [x_0; ...; x_{W-1}] (rows of all
// ranks). The objective is the mean loss L = (1/W) Σ_r L_r. Rank k's rows x_k influence
// every L_r, so dL/dx_k = (1/W) Σ_r (dL_r/dG)[slice k]. Rank r's autograd only sees its
// own L_r and produces dL_r/dG ([W*B, D]); summing these over ranks and keeping slice k on
// rank k gives Σ_r dL_r/dx_k — rank k's own L_k included exactly once, since the gathered
// copy of x_k is what L_k used. Backward then continues locally from x_k into rank k's
// parameters, and the gradient averaging of data parallelism (÷W) supplies the 1/W:
// every rank ends with exactly the gradient a single process would get for the mean loss
// over the concatenated batch.
#include "parallel/process_group.h"

#include <cstdint>

#include <torch/csrc/autograd/custom_function.h>

namespace ddp_embed {
namespace {

struct AllGatherWithGradFn : public torch::autograd::Function<AllGatherWithGradFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, ProcessGroup* pg,
                            std::vector<int64_t> rows) {
    // The group outlives any backward through it (it lives for the whole run).
    ctx->saved_data["pg"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(pg));
    ctx->saved_data["rows"] = x.size(0);
    int64_t start = int64_t(pg->rank()) * x.size(0);  // all ranks alike
    if (!rows.empty()) {
      start = 0;
      for (int r = 0; r < pg->rank(); ++r) start += rows[size_t(r)];
    }
    ctx->saved_data["start"] = start;
    return pg->all_gather_rows(x, rows);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* pg = reinterpret_cast<ProcessGroup*>(static_cast<intptr_t>(ctx->saved_data["pg"].toInt()));
    const int64_t rows = ctx->saved_data["rows"].toInt(), start = ctx->saved_data["start"].toInt();
    // A fresh buffer: the collective writes in place, and the incoming gradient may be
    // shared with other nodes of the graph.
    at::Tensor g = grads[0].defined() ? grads[0].contiguous().clone() : at::Tensor();
    if (!g.defined()) throw DistError("all_gather_with_grad: backward received no gradient");
    pg->allreduce_sum_(g);
    return {g.narrow(0, start, rows), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor all_gather_with_grad(ProcessGroup& pg, const at::Tensor& x, const std::vector<int64_t>& rows) {
  if (x.dim() == 0) throw DistError("all_gather_with_grad needs a tensor with a batch dimension");
  if (!pg.communicates()) return x;
  return AllGatherWithGradFn::apply(x, &pg, rows);
}

}  // namespace ddp_embed
