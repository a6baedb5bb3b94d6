// Meta kernels: shapes only, in SymInts, so FakeTensor tracing (torch.compile,
// torch.export, AOTInductor) works with dynamic batch and image sizes. The
// outputs have the memory format every real kernel gives them
// (output_memory_format).

#include "../conv11s4.h"

#include <ATen/ops/empty.h>
#include <torch/library.h>

namespace alexop {
namespace {

at::Tensor conv11s4_meta(
    const at::Tensor& input,
    const at::Tensor& weight,
    const std::optional<at::Tensor>& bias,
    int64_t padding) {
  const auto size = check_conv11s4(input, weight, bias, padding);
  return at::empty_symint(size, input.options().memory_format(output_memory_format(input, weight)));
}

at::Tensor conv11s4_backward_input_meta(
    const at::Tensor& grad_output,
    const at::Tensor& weight,
    c10::SymIntArrayRef input_size,
    int64_t padding) {
  check_conv11s4_backward_input(grad_output, weight, input_size, padding);
  return at::empty_symint(
      input_size, grad_output.options().memory_format(output_memory_format(grad_output, weight)));
}

std::tuple<at::Tensor, at::Tensor> conv11s4_backward_weight_meta(
    const at::Tensor& grad_output,
    const at::Tensor& input,
    int64_t padding,
    bool bias_grad) {
  const auto size = check_conv11s4_backward_weight(grad_output, input, padding);
  const c10::SymInt bias_size = bias_grad ? size[0] : c10::SymInt(0);
  return {
      at::empty_symint(size, input.options()),
      at::empty_symint({bias_size}, input.options())};
}

}  // namespace

TORCH_LIBRARY_IMPL(alexop, Meta, m) {
  m.impl("conv11s4", &conv11s4_meta);
  m.impl("conv11s4_backward_input", &conv11s4_backward_input_meta);
  m.impl("conv11s4_backward_weight", &conv11s4_backward_weight_meta);
}

}  // namespace alexop
