// Autograd in C++ (not torch.library.register_autograd), so that training
// works in processes without Python: TorchScript models run by libtorch.
// Every derivative is itself an alexop op, so double backward works too:
// the backward ops are linear in each argument, and their derivatives are
// the forward and the other backward op.

#include "../conv11s4.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

namespace alexop {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool defined(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined();
}

class Conv11s4Function : public torch::autograd::Function<Conv11s4Function> {
 public:
  static at::Tensor forward(
      AutogradContext* ctx,
      const at::Tensor& input,
      const at::Tensor& weight,
      const std::optional<at::Tensor>& bias,
      int64_t padding) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->saved_data["padding"] = padding;
    ctx->saved_data["has_bias"] = defined(bias);
    ctx->saved_data["input_size"] = input.sym_sizes();
    // A first layer's input needs no gradient: then the weight is not kept.
    ctx->save_for_backward(
        {weight.requires_grad() ? input : at::Tensor(),
         input.requires_grad() ? weight : at::Tensor()});
    return conv11s4(input, weight, bias, padding);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& grad = grads[0];
    const int64_t padding = ctx->saved_data["padding"].toInt();
    // needs_input_grad counts only the tensors given: an absent bias has none.
    const bool bias_grad =
        ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2);
    at::Tensor grad_input, grad_weight, grad_bias;
    if (ctx->needs_input_grad(0)) {
      grad_input = conv11s4_backward_input(
          grad, saved[1], ctx->saved_data["input_size"].toSymIntVector(),
          padding);
    }
    if (ctx->needs_input_grad(1)) {
      // The bias gradient is fused into the weight gradient's pass.
      std::tie(grad_weight, grad_bias) = conv11s4_backward_weight(
          grad, saved[0], padding, bias_grad);
      if (!bias_grad) {
        grad_bias = at::Tensor();
      }
    } else if (bias_grad) {
      grad_bias = grad.sum({0, 2, 3});
    }
    return {grad_input, grad_weight, grad_bias, at::Tensor()};
  }
};

class BackwardInputFunction
    : public torch::autograd::Function<BackwardInputFunction> {
 public:
  static at::Tensor forward(
      AutogradContext* ctx,
      const at::Tensor& grad_output,
      const at::Tensor& weight,
      c10::SymIntArrayRef input_size,
      int64_t padding) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->saved_data["padding"] = padding;
    ctx->save_for_backward({grad_output, weight});
    return conv11s4_backward_input(grad_output, weight, input_size, padding);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& grad = grads[0];
    const int64_t padding = ctx->saved_data["padding"].toInt();
    at::Tensor d_grad_output, d_weight;
    if (ctx->needs_input_grad(0)) {
      d_grad_output = conv11s4(grad, saved[1], std::nullopt, padding);
    }
    if (ctx->needs_input_grad(1)) {
      d_weight = std::get<0>(
          conv11s4_backward_weight(saved[0], grad, padding, false));
    }
    return {d_grad_output, d_weight, at::Tensor(), at::Tensor()};
  }
};

class BackwardWeightFunction
    : public torch::autograd::Function<BackwardWeightFunction> {
 public:
  static variable_list forward(
      AutogradContext* ctx,
      const at::Tensor& grad_output,
      const at::Tensor& input,
      int64_t padding,
      bool bias_grad) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->saved_data["padding"] = padding;
    ctx->saved_data["bias_grad"] = bias_grad;
    ctx->save_for_backward({grad_output, input});
    auto [grad_weight, grad_bias] =
        conv11s4_backward_weight(grad_output, input, padding, bias_grad);
    return {grad_weight, grad_bias};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const int64_t padding = ctx->saved_data["padding"].toInt();
    const bool bias_grad = ctx->saved_data["bias_grad"].toBool();
    const auto& grad_weight = grads[0];
    const auto bias = bias_grad ? std::optional<at::Tensor>(grads[1])
                                : std::optional<at::Tensor>();
    at::Tensor d_grad_output, d_input;
    if (ctx->needs_input_grad(0)) {
      d_grad_output = conv11s4(saved[1], grad_weight, bias, padding);
    }
    if (ctx->needs_input_grad(1)) {
      d_input = conv11s4_backward_input(
          saved[0], grad_weight, saved[1].sym_sizes(), padding);
    }
    return {d_grad_output, d_input, at::Tensor(), at::Tensor()};
  }
};

// Whether autograd has anything to record: a custom Function's bookkeeping
// shows on small convolutions (perf-history S20), so inference (and a
// backward pass that builds no graph) runs the ops below autograd directly.
bool records_grad(std::initializer_list<const at::Tensor*> tensors) {
  if (!at::GradMode::is_enabled()) {
    return false;
  }
  for (const auto* t : tensors) {
    if (t != nullptr && t->defined() && t->requires_grad()) {
      return true;
    }
  }
  return false;
}

at::Tensor conv11s4_autograd(
    const at::Tensor& input,
    const at::Tensor& weight,
    const std::optional<at::Tensor>& bias,
    int64_t padding) {
  if (!records_grad({&input, &weight, defined(bias) ? &*bias : nullptr})) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return conv11s4(input, weight, bias, padding);
  }
  // Checked before Function::apply, which cannot take an undefined tensor
  // (None through torch.ops): it gets the op's message, as every backend's.
  check_conv11s4(input, weight, bias, padding);
  return Conv11s4Function::apply(input, weight, bias, padding);
}

at::Tensor conv11s4_backward_input_autograd(
    const at::Tensor& grad_output,
    const at::Tensor& weight,
    c10::SymIntArrayRef input_size,
    int64_t padding) {
  if (!records_grad({&grad_output, &weight})) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return conv11s4_backward_input(grad_output, weight, input_size, padding);
  }
  check_conv11s4_backward_input(grad_output, weight, input_size, padding);
  return BackwardInputFunction::apply(
      grad_output, weight, input_size, padding);
}

std::tuple<at::Tensor, at::Tensor> conv11s4_backward_weight_autograd(
    const at::Tensor& grad_output,
    const at::Tensor& input,
    int64_t padding,
    bool bias_grad) {
  if (!records_grad({&grad_output, &input})) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return conv11s4_backward_weight(grad_output, input, padding, bias_grad);
  }
  check_conv11s4_backward_weight(grad_output, input, padding);
  const auto out =
      BackwardWeightFunction::apply(grad_output, input, padding, bias_grad);
  return {out[0], out[1]};
}

}  // namespace

TORCH_LIBRARY_IMPL(alexop, Autograd, m) {
  m.impl("conv11s4", &conv11s4_autograd);
  m.impl("conv11s4_backward_input", &conv11s4_backward_input_autograd);
  m.impl("conv11s4_backward_weight", &conv11s4_backward_weight_autograd);
}

}  // namespace alexop
