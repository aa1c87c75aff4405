// SPLADE pooling a chunk of tokens at a time (splade_pooling.h): a custom autograd function
// whose forward keeps the running reduction (and, for max, the token that holds it), and
// whose backward is sparse for max and recomputes each chunk for sum, as
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
  SpladeChunks(VocabularyHead h, SpladeReduce r, SpladeActivation a, int64_t c, bool b)
      : head(std::move(h)), reduce(r), act(a), chunk(c), backward(b) {}
  VocabularyHead head;
  SpladeReduce reduce;
  SpladeActivation act;
  int64_t chunk;
  bool backward;  // a gradient will be asked for: max keeps its tokens (not for encode and eval)
  // Forward's autocast (train.precision bf16 / fp16): backward runs the transform (and, for
  // sum, the whole head) again under the same casts, or its values would not be forward's.
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

// act'(x) at the logit x a pooled value y = act(x) came from, from y alone: relu's
// log(1 + x) = y gives 1 / (1 + x) = e^-y; log1p_relu's log(1 + u) = y, u = log(1 + x),
// gives 1 / (1 + u) × 1 / (1 + x) = e^-y × e^-u. 0 where y = 0 (x ≤ 0: relu's slope). In
// `dtype`.
at::Tensor activation_slope(const at::Tensor& pooled, SpladeActivation act, at::ScalarType dtype) {
  const at::Tensor y = pooled.to(dtype);
  at::Tensor slope = at::exp(-y);
  if (act == SpladeActivation::Log1pRelu) slope = slope * at::exp(-at::expm1(y));
  return slope * y.gt(0).to(dtype);
}

// Gradients in forward's order: hidden, then every tensor of `params`.
struct PoolGrads {
  at::Tensor hidden;
  std::vector<at::Tensor> params;
};

// The parameters' order in forward's inputs: the transform's, the weight, the bias.
std::vector<at::Tensor> head_params(const VocabularyHead& h) {
  std::vector<at::Tensor> p = h.transform_params;
  p.push_back(h.weight);
  if (h.bias.defined()) p.push_back(h.bias);
  return p;
}

// Max: only the token holding each entry's max gets that entry's gradient, g = upstream ×
// act'(its logit), so the logits' gradient G [T, V] is a sparse matrix of the active
// entries; the decoder's products with it are sparse, and the transform runs again.
PoolGrads max_backward(const SpladeChunks& c, const at::Tensor& hidden, const at::Tensor& pooled,
                       const at::Tensor& holder, const at::Tensor& grad) {
  const VocabularyHead& head = c.head;
  PoolGrads out;
  out.params.resize(head_params(head).size());
  // fp32 at least: the sparse products sum a text's entries in it (fp64 stays fp64).
  const at::ScalarType dtype = pooled.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor g = grad.to(dtype) * activation_slope(pooled, c.act, dtype);  // [B, V]
  const at::Tensor entries = g.ne(0).nonzero();                                 // [nnz, 2]: text, entry
  const at::Tensor text = entries.select(1, 0), entry = entries.select(1, 1);
  const at::Tensor values = g.index({text, entry});
  const at::Tensor token = holder.index({text, entry}).to(at::kLong);
  const int64_t rows = hidden.size(0), vocab = pooled.size(1);

  const bool hidden_needs_grad = hidden.requires_grad();
  const at::Tensor rows_in = hidden.detach().requires_grad_(hidden_needs_grad);
  at::Tensor transformed;
  {
    at::AutoGradMode record(true);
    compat::AutocastGuard same_casts(c.device, c.autocast);
    transformed = head.transform(rows_in);  // [T, H']
  }
  const auto opts = at::TensorOptions().dtype(dtype).device(hidden.device());
  const at::Tensor logit_grad = at::sparse_coo_tensor(at::stack({token, entry}), values, {rows, vocab}, opts);
  const size_t weight_at = head.transform_params.size();
  if (head.weight.requires_grad()) {
    const at::Tensor by_entry = at::sparse_coo_tensor(at::stack({entry, token}), values, {vocab, rows}, opts);
    out.params[weight_at] = at::mm(by_entry, transformed.detach().to(dtype)).to(head.weight.scalar_type());
  }
  if (head.bias.defined() && head.bias.requires_grad())
    out.params[weight_at + 1] =
        at::zeros({vocab}, opts).index_add_(0, entry, values).to(head.bias.scalar_type());

  variable_list wrt;
  if (hidden_needs_grad) wrt.push_back(rows_in);
  for (const auto& p : head.transform_params)
    if (p.requires_grad()) wrt.push_back(p);
  if (wrt.empty()) return out;
  const at::Tensor transformed_grad =
      at::mm(logit_grad, head.weight.detach().to(dtype)).to(transformed.scalar_type());  // [T, H']
  const variable_list grads = torch::autograd::grad({transformed}, wrt, {transformed_grad}, /*retain_graph=*/false,
                                                    /*create_graph=*/false, /*allow_unused=*/true);
  size_t next = 0;
  if (hidden_needs_grad) out.hidden = grads[next++];
  for (size_t i = 0; i < head.transform_params.size(); ++i)
    if (head.transform_params[i].requires_grad()) out.params[i] = grads[next++];
  return out;
}

// Sum: every token's logit gets its text's gradient × act'; each chunk's logits again, with
// autograd, and their gradient sent through act and the head.
PoolGrads sum_backward(const SpladeChunks& c, const at::Tensor& hidden, const at::Tensor& text_of_row,
                       const at::Tensor& grad) {
  const std::vector<at::Tensor> params = head_params(c.head);
  PoolGrads out;
  out.params.resize(params.size());
  const bool hidden_needs_grad = hidden.requires_grad();
  if (hidden_needs_grad) out.hidden = at::zeros_like(hidden);
  const int64_t rows = hidden.size(0);
  for (int64_t start = 0; start < rows; start += c.chunk) {
    const int64_t n = std::min(c.chunk, rows - start);
    const at::Tensor rows_in = hidden.narrow(0, start, n).detach().requires_grad_(hidden_needs_grad);
    at::Tensor values;
    {
      at::AutoGradMode record(true);
      compat::AutocastGuard same_casts(c.device, c.autocast);
      values = splade_activation(c.head.logits(rows_in), c.act);
    }
    variable_list wrt;
    if (hidden_needs_grad) wrt.push_back(rows_in);
    for (const auto& p : params)
      if (p.requires_grad()) wrt.push_back(p);
    if (wrt.empty()) break;
    const at::Tensor upstream = grad.index_select(0, text_of_row.narrow(0, start, n));
    const variable_list grads = torch::autograd::grad({values}, wrt, {upstream}, /*retain_graph=*/false,
                                                      /*create_graph=*/false, /*allow_unused=*/true);
    size_t next = 0;
    if (hidden_needs_grad) out.hidden.narrow(0, start, n).copy_(grads[next++]);
    for (size_t i = 0; i < params.size(); ++i) {
      if (!params[i].requires_grad()) continue;
      const at::Tensor& g = grads[next++];
      if (!g.defined()) continue;
      out.params[i] = out.params[i].defined() ? out.params[i].add_(g) : g;
    }
  }
  return out;
}

class SpladePoolFunction : public torch::autograd::Function<SpladePoolFunction> {
 public:
  // `params` are inputs only so that autograd routes their gradients through this node.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& text_of_row,
                            int64_t texts, at::TensorList /*params*/, c10::intrusive_ptr<SpladeChunks> chunks) {
    const int64_t rows = hidden.size(0);
    chunks->device = hidden.device().type();
    chunks->autocast = compat::autocast_state(chunks->device);
    const bool max = chunks->reduce == SpladeReduce::Max;
    at::Tensor pooled, holder;  // holder: max's token of each entry, a row of hidden
    for (int64_t start = 0; start < rows; start += chunks->chunk) {
      const int64_t n = std::min(chunks->chunk, rows - start);
      const at::Tensor values = splade_activation(chunks->head.logits(hidden.narrow(0, start, n)), chunks->act);
      if (!pooled.defined()) pooled = at::zeros({texts, values.size(1)}, values.options());
      const at::Tensor text = text_of_row.narrow(0, start, n);
      if (!max) {
        pooled.index_add_(0, text, values);
        continue;
      }
      // Every value is ≥ 0, so a max started at 0 is the max over the text's tokens. The
      // rows that equal it now hold it; a later row that does replaces an earlier one.
      const at::Tensor at_text = text.unsqueeze(1).expand_as(values);
      pooled.scatter_reduce_(0, at_text, values, "amax", /*include_self=*/true);
      if (!chunks->backward) continue;
      if (!holder.defined()) holder = at::zeros({texts, values.size(1)}, text.options().dtype(at::kInt));
      const at::Tensor row = at::arange(start, start + n, text.options().dtype(at::kInt)).unsqueeze(1);
      const at::Tensor holds = values.eq(pooled.index_select(0, text));
      holder.scatter_reduce_(0, at_text, at::where(holds, row, at::full({}, -1, row.options())), "amax",
                             /*include_self=*/true);
    }
    if (!pooled.defined()) throw std::invalid_argument("splade_pool: no tokens (the vocabulary size is unknown)");
    ctx->save_for_backward({hidden, text_of_row, pooled, holder});
    ctx->saved_data[kChunksKey] = c10::IValue::make_capsule(std::move(chunks));
    return pooled;
  }

  // Gradients in forward's order: hidden, none for text_of_row and texts, each parameter,
  // none for the capsule.
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const auto chunks = c10::static_intrusive_pointer_cast<SpladeChunks>(ctx->saved_data[kChunksKey].toCapsule());
    PoolGrads g = chunks->reduce == SpladeReduce::Max
                      ? max_backward(*chunks, saved[0], saved[2], saved[3], grad_outputs[0])
                      : sum_backward(*chunks, saved[0], saved[1], grad_outputs[0]);
    variable_list result{g.hidden, at::Tensor(), at::Tensor()};
    for (auto& p : g.params) result.push_back(std::move(p));
    result.push_back(at::Tensor());  // the capsule
    return result;
  }
};

}  // namespace

at::Tensor splade_pool(VocabularyHead head, const at::Tensor& hidden, const at::Tensor& offsets, SpladeReduce reduce,
                       SpladeActivation act, int64_t chunk_tokens) {
  if (hidden.dim() != 2) throw std::invalid_argument("splade_pool: hidden must be [tokens, hidden], got " + std::to_string(hidden.dim()) + " dimensions");
  if (offsets.dim() != 1 || offsets.size(0) < 2 || offsets.scalar_type() != at::kLong || !offsets.device().is_cpu())
    throw std::invalid_argument("splade_pool: offsets must be int64 [texts + 1] on the CPU");
  if (offsets[0].item<int64_t>() != 0 || offsets[-1].item<int64_t>() != hidden.size(0) ||
      (offsets.size(0) > 1 && (offsets.diff() < 0).any().item<bool>()))
    throw std::invalid_argument("splade_pool: offsets must rise from 0 to the " + std::to_string(hidden.size(0)) +
                                " rows of hidden");
  if (chunk_tokens < 1) throw std::invalid_argument("splade_pool: chunk_tokens must be at least 1");
  if (!head.transform || !head.weight.defined() || head.weight.dim() != 2)
    throw std::invalid_argument("splade_pool: the head needs a transform and a [vocabulary, hidden] weight");
  const int64_t texts = offsets.size(0) - 1;
  const at::Tensor text_of_row = text_of_rows(offsets, hidden.size(0), hidden.device());
  const std::vector<at::Tensor> params = head_params(head);
  bool backward = at::GradMode::is_enabled() && hidden.requires_grad();
  for (const auto& p : params) backward = backward || (at::GradMode::is_enabled() && p.requires_grad());
  auto chunks = c10::make_intrusive<SpladeChunks>(std::move(head), reduce, act, chunk_tokens, backward);
  return SpladePoolFunction::apply(hidden, text_of_row, texts, at::TensorList(params), std::move(chunks));
}

}  // namespace ddp_embed
