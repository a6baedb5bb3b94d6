#pragma once
// Entry points of the tensor-core kernels. The generic CUDA kernels in
// conv11s4_cuda.cu validate every argument, allocate the outputs and then
// offer the problem to these; each returns false, writing nothing, when the
// problem lies outside its fast path, and the generic kernel runs instead.

#include "common/precision.h"

#include <ATen/core/Tensor.h>

#include <optional>

namespace alexop::cuda {

// Preconditions, established by the caller: all tensors on the same
// (current) CUDA device, one floating dtype; input (N, C, H, W) contiguous in
// either NCHW or channels_last format.

// The 16-bit weight gradient on phase planes (conv11s4_backward_weight_planes.cu):
// sm_90a, bf16 / fp16, input NCHW contiguous with even width and padding,
// grad_output NCHW contiguous and 16-byte aligned, outputs 48 to 55 pixels
// wide, K <= 96; outputs as for conv11s4_backward_weight_fast, which offers
// it 16-bit problems first.
bool conv11s4_backward_weight_planes(
    const at::Tensor& grad_output,
    const at::Tensor& input,
    int64_t padding,
    const at::Tensor& grad_weight,
    const std::optional<at::Tensor>& grad_bias);

// grad_output NCHW contiguous; input as above; grad_weight (K, C, 11, 11)
// contiguous and grad_bias (K,) contiguous when given, both uninitialised.
bool conv11s4_backward_weight_fast(
    const at::Tensor& grad_output,
    const at::Tensor& input,
    int64_t padding,
    Fp32Math math,
    const at::Tensor& grad_weight,
    const std::optional<at::Tensor>& grad_bias);

// grad_output NCHW contiguous; weight as above; grad_input (N, C, H, W) NCHW
// contiguous, uninitialised.
bool conv11s4_backward_input_fast(
    const at::Tensor& grad_output,
    const at::Tensor& weight,
    int64_t padding,
    Fp32Math math,
    const at::Tensor& grad_input);

}  // namespace alexop::cuda
