#pragma once
// ATen's convolution for the CPU ops where select.h chooses it: what F.conv2d
// and its autograd compute, in the caller's memory layout; the results in
// the memory format alexop's other kernels give (output_memory_format), the
// weight gradient contiguous.

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

namespace alexop::cpu {

at::Tensor forward_aten(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias, int64_t padding);

at::Tensor input_grad_aten(
    const at::Tensor& grad_output, const at::Tensor& weight, at::IntArrayRef input_size, int64_t padding);

// (grad_weight, grad_bias); grad_bias of shape (0,) without bias_grad.
std::tuple<at::Tensor, at::Tensor> weight_grad_aten(
    const at::Tensor& grad_output, const at::Tensor& input, int64_t K, int64_t padding, bool bias_grad);

// Whether every element of t, a 16-bit result of ATen's, is finite: oneDNN's
// native 16-bit kernels do not place Inf and NaN where float64 F.conv2d
// does, and the ops compute such results again with alexop's kernels.
bool finite(const at::Tensor& t);

// The same of result, each element of which sums at most `terms` products of
// a's and b's elements, plus one of c's: where a, b and c hold fewer
// elements than result (a first layer's input and weights, its output), read
// from them instead, finite where they are all finite and too small for a
// sum to reach the dtype's largest value (float32 sums, as oneDNN's and
// alexop's kernels make); result's own elements where they are not.
bool finite_sums(const at::Tensor& result, const at::Tensor& a, const at::Tensor& b,
                 const std::optional<at::Tensor>& c, int64_t terms);

}  // namespace alexop::cpu
