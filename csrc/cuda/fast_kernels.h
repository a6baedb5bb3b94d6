#pragma once
// Entry point of the input gradient's tensor-core kernels. conv11s4_cuda.cu
// validates every argument, allocates the output and then offers the problem
// to it; it returns false, writing nothing, when the problem lies outside its
// fast path, and the reference kernel runs instead.

#include "common/precision.h"

#include <ATen/core/Tensor.h>

#include <optional>

namespace alexop::cuda {

// All tensors on the same (current) CUDA device, one floating dtype;
// grad_output NCHW contiguous; weight (K, C, 11, 11) contiguous; grad_input
// (N, C, H, W) NCHW contiguous, uninitialised.
bool conv11s4_backward_input_fast(
    const at::Tensor& grad_output,
    const at::Tensor& weight,
    int64_t padding,
    Fp32Math math,
    const at::Tensor& grad_input);

}  // namespace alexop::cuda
