#pragma once
// How the weight gradient receives its input. The 16-bit kernels read NCHW
// rows (in pairs), so a 16-bit channels_last input is copied to NCHW first
// (relayout): the 3-channel images they are built for by 16-byte loads and
// stores (nhwc3_transposable, "nhwc3_to_nchw+"), others by relayout's
// kernels or ATen's copy. fp32 inputs are taken as they are when dense
// (NCHW or channels_last).

#include <ATen/core/Tensor.h>

namespace alexop::cuda::weight_grad {

enum class InputPrep {
  kAsIs,        // the input itself
  kContiguous,  // a fresh NCHW copy (relayout)
  kTranspose,   // a fresh NCHW copy by 16-byte transposes (nhwc3_transposable)
};

InputPrep input_prep(const at::Tensor& input);
at::Tensor prepare_input(const at::Tensor& input, InputPrep prep);

}  // namespace alexop::cuda::weight_grad
