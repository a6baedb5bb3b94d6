// The weight gradient's input preparation (nchw_input.h).

#include "nchw_input.h"

#include "../common/relayout.h"

namespace alexop::cuda::weight_grad {

InputPrep input_prep(const at::Tensor& input) {
  if (input.is_contiguous()) return InputPrep::kAsIs;
  if (input.scalar_type() == at::kFloat)
    return input.is_contiguous(at::MemoryFormat::ChannelsLast) ? InputPrep::kAsIs : InputPrep::kContiguous;
  return nhwc3_transposable(input) ? InputPrep::kTranspose : InputPrep::kContiguous;
}

at::Tensor prepare_input(const at::Tensor& input, InputPrep prep) {
  return prep == InputPrep::kAsIs ? input : relayout(input, at::MemoryFormat::Contiguous);
}

}  // namespace alexop::cuda::weight_grad
