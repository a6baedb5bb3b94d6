#pragma once
// The reference kernels (reference.cu): every shape and dtype, launched
// where the selectors choose kGeneric.

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace alexop::cuda::reference {

// input any layout; weight (K, C, 11, 11) and bias (K,) contiguous; output
// (N, K, P, Q) NCHW, uninitialised, not empty.
void forward(const at::Tensor& input, const at::Tensor& weight, const at::Tensor* bias, int64_t padding,
             const at::Tensor& output);

// grad_output (N, K, P, Q) and weight contiguous; grad_input (N, C, H, W)
// NCHW, uninitialised, not empty: cuBLAS GEMMs and a fold.
void backward_input(const at::Tensor& grad_output, const at::Tensor& weight, int64_t padding,
                    const at::Tensor& grad_input);

// grad_output contiguous, input any layout; grad_weight (K, C, 11, 11) and
// grad_bias (K,) (or null) contiguous, uninitialised. An empty batch writes
// zeros.
void backward_weight(const at::Tensor& grad_output, const at::Tensor& input, int64_t padding,
                     const at::Tensor& grad_weight, const at::Tensor* grad_bias);

}  // namespace alexop::cuda::reference
