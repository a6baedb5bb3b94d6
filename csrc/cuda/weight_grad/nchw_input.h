#pragma once
// How the weight gradient receives its input. The 16-bit kernels read NCHW
// rows (in pairs), so a 16-bit channels_last input is transposed first: for
// the 3-channel images they are built for by a kernel of its own
// (nhwc3_to_nchw, one pass of 16-byte loads and stores, faster than
// PyTorch's generic copy); any other non-NCHW layout by relayout. fp32
// inputs are taken as they are when dense (NCHW or channels_last).

#include <ATen/core/Tensor.h>

namespace alexop::cuda::weight_grad {

enum class InputPrep {
  kAsIs,        // the input itself
  kContiguous,  // relayout(input, Contiguous): a fresh NCHW copy
  kTranspose,   // nhwc3_to_nchw: a fresh NCHW copy
};

InputPrep input_prep(const at::Tensor& input);
at::Tensor prepare_input(const at::Tensor& input, InputPrep prep);

}  // namespace alexop::cuda::weight_grad
