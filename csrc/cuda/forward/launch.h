#pragma once
// Launching a chosen forward kernel (launch.cu). The launchers launch: the
// choice, with every feasibility test, was made by select().

#include "select.h"

#include <ATen/core/Tensor.h>

namespace alexop::cuda::forward {

// The operands as the problem describes them: input dense (NCHW or
// channels_last; or 3 channels of an NCHW tensor of more, a view of whole
// images' channel slices), weight and bias contiguous, output NCHW (or
// channels_last where any_output_layout), uninitialised unless accumulate.
struct Args {
  const at::Tensor& input;
  const at::Tensor& weight;
  const at::Tensor* bias;  // null without bias
  const at::Tensor& output;
  bool accumulate = false;  // float32: add the convolution to output's values
};

void launch(const Choice& c, const Problem& p, const Args& a);

// The families' launchers, instantiated in their own files (gather_*.cu,
// s2d.cu, planes_*.cu).
namespace gather {
template <typename T, int MODE, int NT8, int NBUF, bool GMMA, int CPS, bool STAGED>
void launch(const Problem& p, const Args& a);
template <typename T, int MODE, int NT8> void launch_s2d(const Problem& p, const Args& a);
}  // namespace gather
namespace planes {
template <typename T, int NT8, int CH> void launch(const Problem& p, const Args& a);
}  // namespace planes

}  // namespace alexop::cuda::forward
