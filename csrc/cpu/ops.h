#pragma once
// CPU kernels on register-blocked micro-kernels (kernels.h). A task is a
// band of output rows of one image, packed zero-padded (so borders and any
// input strides cost nothing in the inner loops), handed to threads as they
// come free. Stride 4 is taken apart by space-to-depth: input channel c at
// row phase a and column phase b is channel 16c + 4a + b of a stride-1
// convolution with 3x3 taps. With AVX-512, the float32 forward and weight
// gradient are Winograd F(2x2, 3x3) on that view (0.53x the multiplies);
// otherwise the forward sums the 11x11 taps into blocks of output channels x
// pixels held in registers and the weight gradient sums over pixels. The
// input gradient is the row micro-kernel on the same view of grad_output.
// Weight gradients sum into per-slice partials added in a fixed order:
// deterministic, and the same for any thread count up to 4. float16 and
// bfloat16 (what CPU autocast produces) are computed in float32, or by ATen
// where the CPU multiplies them natively (select.h).
//
// Each function takes the op's operands and returns its results in the
// memory format of output_memory_format (conv11s4.h), as aten.h's do.

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

namespace alexop::cpu {

// rows: the Winograd forward with tiles in lanes (select.h:
// winograd_rows_forward), where the instruction set has it.
at::Tensor forward_alexop(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                          int64_t padding, bool rows, at::IntArrayRef out_size);

at::Tensor input_grad_alexop(
    const at::Tensor& grad_output, const at::Tensor& weight, at::IntArrayRef input_size, int64_t padding);

// (grad_weight, grad_bias); grad_bias of shape (0,) without bias_grad.
std::tuple<at::Tensor, at::Tensor> weight_grad_alexop(
    const at::Tensor& grad_output, const at::Tensor& input, int64_t K, int64_t padding, bool bias_grad);

// float16 and bfloat16, which alexop's kernels compute in float32.
inline bool is_reduced(const at::Tensor& t) {
  return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
}

}  // namespace alexop::cpu
