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

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
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

// The largest of n 16-bit floats' magnitudes, as bits (the sign cleared): at
// least the exponent's bits where one is Inf or NaN. A mask and a maximum a
// lane, which the compiler vectorizes for the widest vectors the CPU has; an
// ATen reduction converted each element.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
uint16_t largest_bits(const uint16_t* p, int64_t n) {
  uint16_t largest = 0;
  for (int64_t i = 0; i < n; ++i) {
    largest = std::max<uint16_t>(largest, p[i] & 0x7fff);
  }
  return largest;
}

// The same of t (16-bit, dense): one pass over its storage as one row (a
// channels_last tensor read in its own strides was the slower), on all
// threads.
uint16_t largest_bits(const at::Tensor& t) {
  const auto* p = static_cast<const uint16_t*>(t.const_data_ptr());
  return at::parallel_reduce(
      int64_t{0}, t.numel(), kFiniteGrain, uint16_t{0},
      [&](int64_t begin, int64_t end, uint16_t largest) {
        return std::max(largest, largest_bits(p + begin, end - begin));
      },
      [](uint16_t a, uint16_t b) { return std::max(a, b); });
}

uint16_t exponent_bits(at::ScalarType type) { return type == at::kBFloat16 ? 0x7f80 : 0x7c00; }

// The magnitude whose bits largest_bits gave.
double magnitude(uint16_t bits, at::ScalarType type) {
  return type == at::kBFloat16 ? (float)c10::BFloat16(bits, c10::BFloat16::from_bits())
                               : (float)c10::Half(bits, c10::Half::from_bits());
}

}  // namespace

bool finite(const at::Tensor& t) {
  if (t.numel() == 0) return true;
  const auto dense = t.is_non_overlapping_and_dense() ? t : t.contiguous();
  return largest_bits(dense) < exponent_bits(t.scalar_type());
}

bool finite_sums(const at::Tensor& result, const at::Tensor& a, const at::Tensor& b,
                 const std::optional<at::Tensor>& c, int64_t terms) {
  const bool has_c = c.has_value() && c->defined();
  const int64_t operands = a.numel() + b.numel() + (has_c ? c->numel() : 0);
  const bool dense = a.is_non_overlapping_and_dense() && b.is_non_overlapping_and_dense() &&
                     (!has_c || c->is_non_overlapping_and_dense());
  if (operands < result.numel() && dense) {
    const auto type = result.scalar_type();
    const uint16_t exponent = exponent_bits(type);
    const uint16_t ma = largest_bits(a), mb = largest_bits(b), mc = has_c ? largest_bits(*c) : 0;
    // half the dtype's largest finite value: past float32's rounding of the partial sums
    const double limit = magnitude(exponent - 1, type) / 2;
    if (ma < exponent && mb < exponent && mc < exponent &&
        terms * magnitude(ma, type) * magnitude(mb, type) + magnitude(mc, type) <= limit) {
      return true;
    }
  }
  return finite(result);
}

}  // namespace alexop::cpu
