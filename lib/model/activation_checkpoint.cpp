#include "model/activation_checkpoint.h"

#include <mutex>
#include <utility>
#include <vector>

#include <ATen/core/Generator.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "compat/torch_compat.h"

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

  // Gradients, in forward's argument order: hidden, bias (none), each parameter, and
  // none for the capsule.
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const auto recompute = c10::static_intrusive_pointer_cast<Recompute>(ctx->saved_data[kRecomputeKey].toCapsule());
    const bool hidden_needs_grad = saved[0].requires_grad();
    const at::Tensor hidden = saved[0].detach().requires_grad_(hidden_needs_grad);

    at::Tensor out;
    {
      ReplayRandomness same_masks(recompute->device, recompute->rng_state);
      compat::AutocastGuard same_casts(recompute->device.type(), recompute->autocast);
      at::AutoGradMode record(true);
      // The block gets a view, not the leaf itself: autocast caches its casts of leaves
      // that require grad (meant for weights), and a shared cast of the hidden states
      // would add the gradients of its uses in half precision, where the plain forward
      // (whose input is no leaf) adds them in fp32.
      out = recompute->block(hidden.view_as(hidden), saved[1]);
    }

    // Differentiate with respect to what needs a gradient; the others get none.
    variable_list wrt;
    if (hidden_needs_grad) wrt.push_back(hidden);
    for (const auto& p : recompute->params)
      if (p.requires_grad()) wrt.push_back(p);
    const variable_list grads =
        torch::autograd::grad({out}, wrt, {grad_outputs[0]}, /*retain_graph=*/false, /*create_graph=*/false,
                              /*allow_unused=*/true);

    variable_list result;
    size_t next = 0;
    result.push_back(hidden_needs_grad ? grads[next++] : at::Tensor());
    result.push_back(at::Tensor());  // bias: a constant of the mask
    for (const auto& p : recompute->params) result.push_back(p.requires_grad() ? grads[next++] : at::Tensor());
    result.push_back(at::Tensor());  // the capsule
    return result;
  }
};

// What attention's backward needs besides q, k, v and the bias.
struct AttentionReplay : torch::CustomClassHolder {
  AttentionReplay(double p, c10::Device d) : dropout_p(p), device(d) {}
  double dropout_p;
  c10::Device device;
  at::Tensor rng_state;
  compat::AutocastState autocast;
};

class RecomputedAttention : public torch::autograd::Function<RecomputedAttention> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& bias, c10::intrusive_ptr<AttentionReplay> replay) {
    replay->rng_state = generator_state(replay->device);
    replay->autocast = compat::autocast_state(replay->device.type());
    ctx->save_for_backward({q, k, v, bias});
    at::Tensor out = compat::scaled_dot_product_attention(q, k, v, bias, replay->dropout_p);
    ctx->saved_data[kRecomputeKey] = c10::IValue::make_capsule(std::move(replay));
    return out;
  }

  // Gradients for q, k and v; none for the bias and the capsule.
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const auto replay = c10::static_intrusive_pointer_cast<AttentionReplay>(ctx->saved_data[kRecomputeKey].toCapsule());
    variable_list qkv;
    for (int i = 0; i < 3; ++i) qkv.push_back(saved[i].detach().requires_grad_(true));
    at::Tensor out;
    {
      ReplayRandomness same_mask(replay->device, replay->rng_state);
      compat::AutocastGuard same_casts(replay->device.type(), replay->autocast);
      at::AutoGradMode record(true);
      out = compat::scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], saved[3], replay->dropout_p);
    }
    variable_list grads = torch::autograd::grad({out}, qkv, {grad_outputs[0]}, /*retain_graph=*/false,
                                                /*create_graph=*/false);
    grads.push_back(at::Tensor());  // bias: a constant of the mask
    grads.push_back(at::Tensor());  // the capsule
    return grads;
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
                                double dropout_p) {
  auto replay = c10::make_intrusive<AttentionReplay>(dropout_p, q.device());
  return RecomputedAttention::apply(q, k, v, bias, std::move(replay));
}

}  // namespace ddp_embed
