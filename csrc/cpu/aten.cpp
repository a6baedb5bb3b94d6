// ATen's convolution on the CPU (aten.h). The operands ATen's backward takes
// but does not read for the gradient asked (the input for grad_input, the
// weight for grad_weight) are passed uninitialised, only their sizes count.

#include "aten.h"

#include "../conv11s4.h"

#include <ATen/ops/aminmax.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <cmath>

namespace alexop::cpu {
namespace {

constexpr int64_t kStrides[] = {kStride, kStride};
constexpr int64_t kDilation[] = {1, 1};
constexpr int64_t kNoOutputPadding[] = {0, 0};

}  // namespace

at::Tensor forward_aten(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias, int64_t padding) {
  const int64_t pad[] = {padding, padding};
  return at::convolution(input, weight, bias, kStrides, pad, kDilation, /*transposed=*/false, kNoOutputPadding,
                         /*groups=*/1)
      .contiguous(output_memory_format(input, weight));
}

at::Tensor input_grad_aten(
    const at::Tensor& grad_output, const at::Tensor& weight, at::IntArrayRef input_size, int64_t padding) {
  const int64_t pad[] = {padding, padding};
  const auto input = at::empty(input_size, grad_output.options(), grad_output.suggest_memory_format());
  return std::get<0>(at::convolution_backward(grad_output, input, weight, std::nullopt, kStrides, pad, kDilation,
                                              /*transposed=*/false, kNoOutputPadding, /*groups=*/1,
                                              {true, false, false}))
      .contiguous(output_memory_format(grad_output, weight));
}

std::tuple<at::Tensor, at::Tensor> weight_grad_aten(
    const at::Tensor& grad_output, const at::Tensor& input, int64_t K, int64_t padding, bool bias_grad) {
  const int64_t pad[] = {padding, padding};
  const int64_t bias_size[] = {K};
  const auto weight =
      at::empty({K, input.size(1), kKernelSize, kKernelSize}, input.options(), input.suggest_memory_format());
  auto [unused, grad_weight, grad_bias] = at::convolution_backward(
      grad_output, input, weight, bias_grad ? at::OptionalIntArrayRef(bias_size) : std::nullopt, kStrides, pad,
      kDilation, /*transposed=*/false, kNoOutputPadding, /*groups=*/1, {false, true, bias_grad});
  return {grad_weight.contiguous(), bias_grad ? grad_bias : at::zeros({0}, input.options())};
}

// One pass over the storage as one row (a channels_last tensor reduced in
// its own strides took 8x as long), without a float copy: a bfloat16 sum has
// float32's range, finite exactly where every element is (an overflow only
// costs the exact path); float16's would overflow, its least and greatest
// are read instead (a NaN makes both NaN).
bool finite(const at::Tensor& t) {
  if (t.numel() == 0) return true;
  const auto flat = t.is_non_overlapping_and_dense() ? t.as_strided({t.numel()}, {1}) : t;
  if (t.scalar_type() == at::kBFloat16) return std::isfinite(flat.sum().item<float>());
  const auto [lo, hi] = at::aminmax(flat);
  return std::isfinite(lo.item<float>()) && std::isfinite(hi.item<float>());
}

}  // namespace alexop::cpu
