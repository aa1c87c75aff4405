// SPLADE pooling a chunk of tokens at a time (splade_pooling.h): a custom autograd function
// whose forward keeps the running reduction and whose backward recomputes each chunk, as
// activation_checkpoint.cpp does for a layer.
#include "model/splade_pooling.h"

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "compat/torch_compat.h"

namespace ddp_embed {

at::Tensor splade_activation(const at::Tensor& logits, SpladeActivation act) {
  at::Tensor out = at::log1p(at::relu(logits));
  return act == SpladeActivation::Log1pRelu ? at::log1p(out) : out;
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What backward needs besides the saved tensors, carried through the autograd context as a
// capsule (it holds only IValues).
struct SpladeChunks : torch::CustomClassHolder {
  SpladeChunks(VocabularyHead h, std::vector<at::Tensor> p, SpladeReduce r, SpladeActivation a, int64_t c)
      : head(std::move(h)), params(std::move(p)), reduce(r), act(a), chunk(c) {}
  VocabularyHead head;
  std::vector<at::Tensor> params;  // the module's parameters, in the order passed to forward
  SpladeReduce reduce;
  SpladeActivation act;
  int64_t chunk;
  // Forward's autocast (train.precision bf16 / fp16): backward recomputes the chunks under
  // the same casts, or their values would not match the maxima kept, and no token would
  // get its text's gradient.
  c10::DeviceType device = c10::kCPU;
  compat::AutocastState autocast;
};
constexpr const char* kChunksKey = "splade";

// The text of each row of hidden: [T] int64, on hidden's device.
at::Tensor text_of_rows(const at::Tensor& offsets, int64_t rows, const c10::Device& device) {
  const at::Tensor lengths = offsets.narrow(0, 1, offsets.size(0) - 1) - offsets.narrow(0, 0, offsets.size(0) - 1);
  return at::repeat_interleave(at::arange(lengths.size(0), offsets.options()), lengths, /*dim=*/0, /*output_size=*/rows)
      .to(device);
}

class SpladePoolFunction : public torch::autograd::Function<SpladePoolFunction> {
 public:
  // `params` are inputs only so that autograd routes their gradients through this node.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& text_of_row,
                            int64_t texts, at::TensorList /*params*/, c10::intrusive_ptr<SpladeChunks> chunks) {
    const int64_t rows = hidden.size(0);
    chunks->device = hidden.device().type();
    chunks->autocast = compat::autocast_state(chunks->device);
    at::Tensor pooled;
    for (int64_t start = 0; start < rows; start += chunks->chunk) {
      const int64_t n = std::min(chunks->chunk, rows - start);
      const at::Tensor values = splade_activation(chunks->head(hidden.narrow(0, start, n)), chunks->act);
      if (!pooled.defined()) pooled = at::zeros({texts, values.size(1)}, values.options());
      const at::Tensor text = text_of_row.narrow(0, start, n);
      // Every value is ≥ 0, so a max started at 0 is the max over the text's tokens.
      if (chunks->reduce == SpladeReduce::Max)
        pooled.scatter_reduce_(0, text.unsqueeze(1).expand_as(values), values, "amax", /*include_self=*/true);
      else
        pooled.index_add_(0, text, values);
    }
    if (!pooled.defined()) throw std::invalid_argument("splade_pool: no tokens (the vocabulary size is unknown)");
    ctx->save_for_backward({hidden, text_of_row, pooled});
    ctx->saved_data[kChunksKey] = c10::IValue::make_capsule(std::move(chunks));
    return pooled;
  }

  // Gradients in forward's order: hidden, none for text_of_row and texts, each parameter,
  // none for the capsule.
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& hidden = saved[0];
    const at::Tensor& text_of_row = saved[1];
    const at::Tensor& pooled = saved[2];
    const auto chunks = c10::static_intrusive_pointer_cast<SpladeChunks>(ctx->saved_data[kChunksKey].toCapsule());
    const at::Tensor& grad = grad_outputs[0];
    const bool hidden_needs_grad = hidden.requires_grad();
    at::Tensor grad_hidden = hidden_needs_grad ? at::zeros_like(hidden) : at::Tensor();
    std::vector<at::Tensor> grad_params(chunks->params.size());
    const int64_t rows = hidden.size(0);
    for (int64_t start = 0; start < rows; start += chunks->chunk) {
      const int64_t n = std::min(chunks->chunk, rows - start);
      const at::Tensor text = text_of_row.narrow(0, start, n);
      const at::Tensor rows_in = hidden.narrow(0, start, n).detach().requires_grad_(hidden_needs_grad);
      at::Tensor values;
      {
        at::AutoGradMode record(true);
        compat::AutocastGuard same_casts(chunks->device, chunks->autocast);
        values = splade_activation(chunks->head(rows_in), chunks->act);
      }
      at::Tensor upstream = grad.index_select(0, text);
      if (chunks->reduce == SpladeReduce::Max)  // only the tokens that hold their text's max
        upstream = upstream * values.detach().eq(pooled.index_select(0, text)).to(upstream.scalar_type());
      variable_list wrt;
      if (hidden_needs_grad) wrt.push_back(rows_in);
      for (const auto& p : chunks->params)
        if (p.requires_grad()) wrt.push_back(p);
      if (wrt.empty()) break;
      const variable_list grads = torch::autograd::grad({values}, wrt, {upstream}, /*retain_graph=*/false,
                                                        /*create_graph=*/false, /*allow_unused=*/true);
      size_t next = 0;
      if (hidden_needs_grad) grad_hidden.narrow(0, start, n).copy_(grads[next++]);
      for (size_t i = 0; i < chunks->params.size(); ++i) {
        if (!chunks->params[i].requires_grad()) continue;
        const at::Tensor& g = grads[next++];
        if (!g.defined()) continue;
        grad_params[i] = grad_params[i].defined() ? grad_params[i].add_(g) : g;
      }
    }
    variable_list result{grad_hidden, at::Tensor(), at::Tensor()};
    for (auto& g : grad_params) result.push_back(std::move(g));
    result.push_back(at::Tensor());  // the capsule
    return result;
  }
};

}  // namespace

at::Tensor splade_pool(const std::vector<at::Tensor>& params, VocabularyHead head, const at::Tensor& hidden,
                       const at::Tensor& offsets, SpladeReduce reduce, SpladeActivation act, int64_t chunk_tokens) {
  if (hidden.dim() != 2) throw std::invalid_argument("splade_pool: hidden must be [tokens, hidden], got " + std::to_string(hidden.dim()) + " dimensions");
  if (offsets.dim() != 1 || offsets.size(0) < 2 || offsets.scalar_type() != at::kLong || !offsets.device().is_cpu())
    throw std::invalid_argument("splade_pool: offsets must be int64 [texts + 1] on the CPU");
  if (offsets[0].item<int64_t>() != 0 || offsets[-1].item<int64_t>() != hidden.size(0) ||
      (offsets.size(0) > 1 && (offsets.diff() < 0).any().item<bool>()))
    throw std::invalid_argument("splade_pool: offsets must rise from 0 to the " + std::to_string(hidden.size(0)) +
                                " rows of hidden");
  if (chunk_tokens < 1) throw std::invalid_argument("splade_pool: chunk_tokens must be at least 1");
  const int64_t texts = offsets.size(0) - 1;
  const at::Tensor text_of_row = text_of_rows(offsets, hidden.size(0), hidden.device());
  auto chunks = c10::make_intrusive<SpladeChunks>(std::move(head), params, reduce, act, chunk_tokens);
  return SpladePoolFunction::apply(hidden, text_of_row, texts, at::TensorList(params), std::move(chunks));
}

}  // namespace ddp_embed
