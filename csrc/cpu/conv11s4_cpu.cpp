// The CPU ops: the checks, then ATen's convolution or alexop's kernels
// (ops.h) as the selector (select.h) or its timing (timed.h) chooses.

#include "../conv11s4.h"
#include "aten.h"
#include "ops.h"
#include "select.h"
#include "timed.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/util/accumulate.h>
#include <torch/library.h>

namespace alexop {
namespace {

const at::ScalarType kCpuTypes[] = {
    at::kFloat, at::kDouble, at::kHalf, at::kBFloat16};

// Each op: where its problem is asked in float32 (select.h: in_own_dtype),
// the float32 op's result converted; else ATen's convolution where the
// selector or its timing says (a 16-bit result of ATen's with non-finite
// elements computed again: oneDNN's native 16-bit kernels do not place Inf
// and NaN where float64 F.conv2d does, alexop's do), alexop's kernels
// otherwise.

at::Tensor conv11s4_cpu(
    const at::Tensor& input,
    const at::Tensor& weight,
    const std::optional<at::Tensor>& bias_opt,
    int64_t padding) {
  const auto size = check_conv11s4(input, weight, bias_opt, padding);
  check_dtype("alexop.conv11s4", input, kCpuTypes, "CPU");
  const int64_t out_size[] = {size[0].expect_int(), size[1].expect_int(),
                              size[2].expect_int(), size[3].expect_int()};
  if (c10::multiply_integers(at::IntArrayRef(out_size)) == 0) {
    return at::empty(out_size, input.options().memory_format(output_memory_format(input, weight)));
  }
  const bool has_bias = bias_opt.has_value() && bias_opt->defined();
  const auto problem = cpu::problem(input.scalar_type(), input.sizes(), weight.size(0), padding,
                                    output_memory_format(input, weight), cpu::this_cpu());
  if (!cpu::in_own_dtype(problem)) {
    const auto bias = has_bias ? std::optional<at::Tensor>(bias_opt->to(at::kFloat)) : std::nullopt;
    return conv11s4_cpu(input.to(at::kFloat), weight.to(at::kFloat), bias, padding).to(input.scalar_type());
  }
  const auto aten = [&] { return cpu::forward_aten(input, weight, bias_opt, padding); };
  const auto own = [&] {
    return cpu::forward_alexop(input, weight, bias_opt, padding, cpu::winograd_rows_forward(problem), out_size);
  };
  if (cpu::aten_timed(Decision::kCpuForward, problem, has_bias, cpu::aten_forward(problem), aten, own)) {
    auto output = aten();
    const int64_t terms = input.size(1) * kKernelSize * kKernelSize;
    if (!cpu::is_reduced(input) || cpu::finite_sums(output, input, weight, bias_opt, terms)) return output;
  }
  return own();
}

at::Tensor conv11s4_backward_input_cpu(
    const at::Tensor& grad_output,
    const at::Tensor& weight,
    c10::SymIntArrayRef input_size_sym,
    int64_t padding) {
  check_conv11s4_backward_input(grad_output, weight, input_size_sym, padding);
  check_dtype(
      "alexop.conv11s4_backward_input", grad_output, kCpuTypes, "CPU");
  const auto input_size = C10_AS_INTARRAYREF_SLOW(input_size_sym);
  const auto format = output_memory_format(grad_output, weight);
  if (c10::multiply_integers(input_size) == 0) {
    return at::empty(input_size, grad_output.options().memory_format(format));
  }
  const auto problem = cpu::problem(grad_output.scalar_type(), input_size, weight.size(0), padding, format,
                                    cpu::this_cpu());
  if (!cpu::in_own_dtype(problem)) {
    return conv11s4_backward_input_cpu(grad_output.to(at::kFloat), weight.to(at::kFloat), input_size_sym, padding)
        .to(grad_output.scalar_type());
  }
  const auto aten = [&] { return cpu::input_grad_aten(grad_output, weight, input_size, padding); };
  const auto own = [&] { return cpu::input_grad_alexop(grad_output, weight, input_size, padding); };
  if (cpu::aten_timed(Decision::kCpuInputGrad, problem, 0, cpu::aten_input_grad(problem), aten, own)) {
    auto grad_input = aten();
    const int64_t terms = weight.size(0) * kKernelSize * kKernelSize;
    if (!cpu::is_reduced(grad_output) || cpu::finite_sums(grad_input, grad_output, weight, std::nullopt, terms)) {
      return grad_input;
    }
  }
  return own();
}

std::tuple<at::Tensor, at::Tensor> conv11s4_backward_weight_cpu(
    const at::Tensor& grad_output,
    const at::Tensor& input,
    int64_t padding,
    bool bias_grad) {
  const auto wsize =
      check_conv11s4_backward_weight(grad_output, input, padding);
  check_dtype("alexop.conv11s4_backward_weight", input, kCpuTypes, "CPU");
  const int64_t K = wsize[0].expect_int(), C = wsize[1].expect_int();
  if (input.size(0) == 0) {
    return {at::zeros({K, C, kKernelSize, kKernelSize}, input.options()),
            at::zeros({bias_grad ? K : 0}, input.options())};
  }
  const auto problem = cpu::problem(input.scalar_type(), input.sizes(), K, padding,
                                    output_memory_format(input, grad_output), cpu::this_cpu());
  if (!cpu::in_own_dtype(problem)) {
    auto [gw, gb] = conv11s4_backward_weight_cpu(grad_output.to(at::kFloat), input.to(at::kFloat), padding, bias_grad);
    return {gw.to(input.scalar_type()), gb.to(input.scalar_type())};
  }
  const auto aten = [&] { return cpu::weight_grad_aten(grad_output, input, K, padding, bias_grad); };
  const auto own = [&] { return cpu::weight_grad_alexop(grad_output, input, K, padding, bias_grad); };
  if (cpu::aten_timed(Decision::kCpuWeightGrad, problem, bias_grad, cpu::aten_weight_grad(problem), aten, own)) {
    auto [grad_weight, grad_bias] = aten();
    if (!cpu::is_reduced(input) || (cpu::finite(grad_weight) && cpu::finite(grad_bias))) return {grad_weight, grad_bias};
  }
  return own();
}

}  // namespace

TORCH_LIBRARY_IMPL(alexop, CPU, m) {
  m.impl("conv11s4", &conv11s4_cpu);
  m.impl("conv11s4_backward_input", &conv11s4_backward_input_cpu);
  m.impl("conv11s4_backward_weight", &conv11s4_backward_weight_cpu);
}

}  // namespace alexop
