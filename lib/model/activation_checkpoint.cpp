#include "model/activation_checkpoint.h"

#include <cmath>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include <ATen/core/Generator.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "compat/torch_compat.h"
#include "model/dropout.h"

namespace ddp_embed {

// The default generator of a device (the CPU's, or one GPU's: the one dropout draws
// from), through Generator::get_state / set_state, which serve the CPU and the CUDA
// generator alike.
at::Tensor generator_state(const c10::Device& device) {
  at::Generator gen = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_generator_state(const c10::Device& device, const at::Tensor& state) {
  at::Generator gen = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

ReplayRandomness::ReplayRandomness(const c10::Device& device, const at::Tensor& replayed)
    : device_(device), resume_(generator_state(device)) {
  set_generator_state(device_, replayed);
}

ReplayRandomness::~ReplayRandomness() { set_generator_state(device_, resume_); }

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What backward needs besides the saved tensors, carried through the autograd context
// (which holds only IValues) as a capsule.
struct Recompute : torch::CustomClassHolder {
  Recompute(CheckpointedBlock b, std::vector<at::Tensor> p, c10::Device d)
      : block(std::move(b)), params(std::move(p)), device(d) {}
  CheckpointedBlock block;
  std::vector<at::Tensor> params;  // the module's parameters, in the order passed to forward
  c10::Device device;
  at::Tensor rng_state;  // the device generator's state before the forward
  compat::AutocastState autocast;
};

constexpr const char* kRecomputeKey = "recompute";

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  // `params` are inputs only so that autograd routes their gradients through this node;
  // the block reads them from its module. Autograd is off here (Function::apply).
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& bias,
                            at::TensorList /*params*/, c10::intrusive_ptr<Recompute> recompute) {
    recompute->rng_state = generator_state(recompute->device);
    recompute->autocast = compat::autocast_state(recompute->device.type());
    ctx->save_for_backward({hidden, bias});
    at::Tensor out = recompute->block(hidden, bias);
    ctx->saved_data[kRecomputeKey] = c10::IValue::make_capsule(std::move(recompute));
    return out;
  }

  // Gradients, in forward's argument order: hidden, bias (when it requires one: MPNet's
  // learned relative-position bias), each parameter, and none for the capsule.
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const auto recompute = c10::static_intrusive_pointer_cast<Recompute>(ctx->saved_data[kRecomputeKey].toCapsule());
    const bool hidden_needs_grad = saved[0].requires_grad();
    const at::Tensor hidden = saved[0].detach().requires_grad_(hidden_needs_grad);
    const bool bias_needs_grad = saved[1].requires_grad();
    const at::Tensor bias = bias_needs_grad ? saved[1].detach().requires_grad_(true) : saved[1];

    at::Tensor out;
    {
      ReplayRandomness same_masks(recompute->device, recompute->rng_state);
      compat::AutocastGuard same_casts(recompute->device.type(), recompute->autocast);
      at::AutoGradMode record(true);
      // The block gets a view, not the leaf itself: autocast caches its casts of leaves
      // that require grad (meant for weights), and a shared cast of the hidden states
      // would add the gradients of its uses in half precision, where the plain forward
      // (whose input is no leaf) adds them in fp32.
      out = recompute->block(hidden.view_as(hidden), bias_needs_grad ? bias.view_as(bias) : bias);
    }

    // Differentiate with respect to what needs a gradient; the others get none.
    variable_list wrt;
    if (hidden_needs_grad) wrt.push_back(hidden);
    if (bias_needs_grad) wrt.push_back(bias);
    for (const auto& p : recompute->params)
      if (p.requires_grad()) wrt.push_back(p);
    const variable_list grads =
        torch::autograd::grad({out}, wrt, {grad_outputs[0]}, /*retain_graph=*/false, /*create_graph=*/false,
                              /*allow_unused=*/true);

    variable_list result;
    size_t next = 0;
    result.push_back(hidden_needs_grad ? grads[next++] : at::Tensor());
    result.push_back(bias_needs_grad ? grads[next++] : at::Tensor());
    for (const auto& p : recompute->params) result.push_back(p.requires_grad() ? grads[next++] : at::Tensor());
    result.push_back(at::Tensor());  // the capsule
    return result;
  }
};

// ---- the CPU's attention --------------------------------------------------------------------

// fp32, or fp64 for fp64 inputs: the softmax's exponentials do not survive half precision.
at::ScalarType attention_dtype(const at::Tensor& q) { return q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

// q kᵀ / sqrt(D) + bias, [B, heads, Lq, Lk].
at::Tensor attention_scores(const at::Tensor& q, const at::Tensor& k, const at::Tensor& bias) {
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)).mul_(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  if (bias.numel() > 0) scores.add_(bias.to(scores.scalar_type()));  // empty: no bias
  return scores;
}

// A tensor whose last two dimensions are row-major as it is (a sequence's [heads, l, D]
// slice of a [heads, N, D] buffer: the products take its stride over heads), else a copy
// that is: the heads' views of a projection, [B, heads, L, D] over [B, L, heads, D], would
// be copied again by each of the products below (two in forward, five in backward).
at::Tensor rows_contiguous(const at::Tensor& t) {
  return t.stride(-1) == 1 && t.stride(-2) == t.size(-1) ? t : t.contiguous();
}

class RecomputedAttention : public torch::autograd::Function<RecomputedAttention> {
 public:
  // dropped: bool, broadcastable to the probabilities, or empty (no dropout); scale: what a
  // kept probability is multiplied by.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& bias, const at::Tensor& dropped, double scale) {
    compat::NoAutocast no_autocast;
    const at::ScalarType dtype = attention_dtype(q);
    const at::Tensor qc = rows_contiguous(q.to(dtype)), kc = rows_contiguous(k.to(dtype)),
                     vc = rows_contiguous(v.to(dtype));
    at::Tensor scores = attention_scores(qc, kc, bias);
    const at::Tensor lse = at::logsumexp(scores, -1, /*keepdim=*/true);
    at::Tensor probs = scores.sub_(lse).exp_();
    if (dropped.numel() > 0) probs.masked_fill_(dropped, 0.0).mul_(scale);
    ctx->save_for_backward({qc, kc, vc, bias, lse, dropped});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["dtypes"] = std::vector<int64_t>{int64_t(q.scalar_type()), int64_t(k.scalar_type()),
                                                     int64_t(v.scalar_type())};
    return at::matmul(probs, vc).to(q.scalar_type());
  }

  // softmax's backward, through the dropout and the two products; none for the bias, the
  // mask and the scale.
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    compat::NoAutocast no_autocast;
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &mask = saved[5];  // in the computation's dtype
    const double scale = ctx->saved_data["scale"].toDouble();
    const auto dtypes = ctx->saved_data["dtypes"].toIntVector();
    const at::Tensor grad = rows_contiguous(grad_outputs[0].to(q.scalar_type()));
    const at::Tensor probs = attention_scores(q, k, saved[3]).sub_(saved[4]).exp_();
    at::Tensor kept = probs, grad_probs = at::matmul(grad, v.transpose(-2, -1));
    if (mask.numel() > 0) {
      kept = probs.masked_fill(mask, 0.0).mul_(scale);
      grad_probs.masked_fill_(mask, 0.0).mul_(scale);
    }
    const at::Tensor grad_v = at::matmul(kept.transpose(-2, -1), grad);
    // d scores = probs * (d probs - sum over the row of d probs * probs), and the 1/sqrt(D).
    const at::Tensor row = (grad_probs * probs).sum(-1, /*keepdim=*/true);
    const at::Tensor grad_scores =
        grad_probs.sub_(row).mul_(probs).mul_(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
    const auto in = [&](size_t i) { return static_cast<at::ScalarType>(dtypes[i]); };
    return {at::matmul(grad_scores, k).to(in(0)), at::matmul(grad_scores.transpose(-2, -1), q).to(in(1)),
            grad_v.to(in(2)), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor checkpointed(torch::nn::Module& module, CheckpointedBlock block, const at::Tensor& hidden,
                        const at::Tensor& bias) {
  std::vector<at::Tensor> params = module.parameters();
  auto recompute = c10::make_intrusive<Recompute>(std::move(block), params, hidden.device());
  return CheckpointFunction::apply(hidden, bias, at::TensorList(params), std::move(recompute));
}

at::Tensor attention_recomputed(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& bias,
                                const DropoutMask& dropout) {
  if (!q.device().is_cpu())
    throw std::logic_error("attention_recomputed: the CPU's attention, called with q on " + q.device().str());
  // Empty tensors for none: autograd's custom functions take no undefined tensor inputs.
  const at::Tensor none = at::empty({0}, q.options());
  return RecomputedAttention::apply(q, k, v, bias.defined() ? bias : none,
                                    dropout.dropped.defined() ? dropout.dropped : none.to(at::kBool), dropout.scale);
}

}  // namespace ddp_embed
