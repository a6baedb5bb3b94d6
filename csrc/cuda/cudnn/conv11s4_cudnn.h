#pragma once
// The three ops through ATen's own convolution (cuDNN on CUDA), for the
// problems where none of alexop's kernels is faster: a named choice of the
// selectors, so that alexop is never slower than the F.conv2d it replaces.
// Each takes the precision alexop promises for float32 (allow_tf32 only where
// torch.set_float32_matmul_precision allows TF32) and returns its result in
// `format` (output_memory_format, as every alexop kernel does; the weight
// gradient contiguous).

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

namespace alexop::cuda {

at::Tensor conv11s4_cudnn(
    const at::Tensor& input,
    const at::Tensor& weight,
    const std::optional<at::Tensor>& bias,
    int64_t padding,
    bool allow_tf32,
    at::MemoryFormat format);

at::Tensor conv11s4_backward_input_cudnn(
    const at::Tensor& grad_output,
    const at::Tensor& weight,
    at::IntArrayRef input_size,
    int64_t padding,
    bool allow_tf32,
    at::MemoryFormat format);

// grad_bias is an empty (0,) tensor unless bias_grad.
std::tuple<at::Tensor, at::Tensor> conv11s4_backward_weight_cudnn(
    const at::Tensor& grad_output,
    const at::Tensor& input,
    int64_t out_channels,
    int64_t padding,
    bool bias_grad,
    bool allow_tf32);

}  // namespace alexop::cuda
