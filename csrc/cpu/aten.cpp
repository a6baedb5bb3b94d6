// ATen's convolution on the CPU (aten.h). The operands ATen's backward takes
// but does not read for the gradient asked (the input for grad_input, the
// weight for grad_weight) are passed uninitialised, only their sizes count.

#include "aten.h"

#include "../conv11s4.h"

#include <ATen/Parallel.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace alexop::cpu {
namespace {

constexpr int64_t kStrides[] = {kStride, kStride};
constexpr int64_t kDilation[] = {1, 1};
constexpr int64_t kNoOutputPadding[] = {0, 0};
// Elements a thread scans for non-finite values at least: 64 KB.
constexpr int64_t kFiniteGrain = 32768;

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

namespace {

// The least of ~v & exponent over n 16-bit floats: 0 where one has every
// exponent bit set (Inf or NaN). A mask and a minimum a lane, which the
// compiler vectorizes for the widest vectors the CPU has; an ATen sum
// converted each element and added it.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
int16_t least_exponent_gap(const uint16_t* p, int64_t n, uint16_t exponent) {
  int16_t least = 0x7fff;
  for (int64_t i = 0; i < n; ++i) {
    least = std::min<int16_t>(least, (int16_t)(~p[i] & exponent));
  }
  return least;
}

}  // namespace

// One pass over the storage as one row, on all threads (reading a
// channels_last tensor in its own strides was the slower).
bool finite(const at::Tensor& t) {
  if (t.numel() == 0) return true;
  const auto dense = t.is_non_overlapping_and_dense() ? t : t.contiguous();
  const auto* p = static_cast<const uint16_t*>(dense.const_data_ptr());
  const uint16_t exponent = t.scalar_type() == at::kBFloat16 ? 0x7f80 : 0x7c00;
  std::atomic<bool> all{true};
  at::parallel_for(0, dense.numel(), kFiniteGrain, [&](int64_t begin, int64_t end) {
    if (least_exponent_gap(p + begin, end - begin, exponent) == 0) all = false;
  });
  return all;
}

}  // namespace alexop::cpu
