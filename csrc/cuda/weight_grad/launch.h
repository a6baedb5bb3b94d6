#pragma once
// Launching a chosen weight-gradient kernel (launch.cu). The launchers
// launch: the choice, with every feasibility test, was made by select().

#include "select.h"

#include <ATen/core/Tensor.h>

namespace alexop::cuda::weight_grad {

// The operands as the problem describes them.
struct Args {
  const at::Tensor& grad_output;  // NCHW contiguous
  const at::Tensor& input;        // dense, NCHW or channels_last
  const at::Tensor& grad_weight;  // (K, C, 11, 11) contiguous, uninitialised
  const at::Tensor* grad_bias;    // (K,) contiguous, uninitialised, or null
};

void launch(const Choice& c, const Problem& p, const Args& a);

// The families' launchers, instantiated in their own files (instances.h).
namespace ring {
template <int MODE, int MT> void launch_f32(const Problem& p, const Args& a);
template <typename T, int MT> void launch_pairs(const Problem& p, const Args& a);
template <typename T, int MT> void launch_strided(const Problem& p, const Args& a);
template <typename T, int MODE, int NT8, bool VEC, bool DYL> void launch_gmma(const Problem& p, const Args& a);
}  // namespace ring
namespace planes {
template <typename T, int NT8, int CH, bool DYL> void launch(const Problem& p, const Args& a);
}  // namespace planes

}  // namespace alexop::cuda::weight_grad
