#pragma once
// The bias gradient beside a cuDNN weight gradient: grad_output summed over
// its images and pixels. ATen's sum over dims (0, 2, 3), which
// convolution_backward runs, reads a channels_last grad_output at a
// fraction of the memory's rate; these kernels read either dense layout
// along its rows, sum in float in a fixed order (the same bits each run) and
// return grad_output's dtype.

#include <ATen/core/Tensor.h>

namespace alexop::cuda::weight_grad {

// (K,) from grad_output (N, K, P, Q) of any strides; float32, bf16 and fp16
// dense in NCHW or channels_last on the kernels, anything else on ATen's sum.
at::Tensor bias_grad(const at::Tensor& grad_output);

}  // namespace alexop::cuda::weight_grad
