#pragma once
// Launching a chosen input-gradient kernel (launch.cu). The launchers
// launch: the choice, with every feasibility test, was made by select().

#include "select.h"

#include <ATen/core/Tensor.h>

namespace alexop::cuda::input_grad {

struct Args {
  const at::Tensor& grad_output;  // (N, K, P, Q) contiguous
  const at::Tensor& weight;       // (K, C, 11, 11) contiguous
  // (N, C, H, W) NCHW, uninitialised; for the phase kernels also a view of
  // 3 channels of an NCHW tensor of more (images further apart)
  const at::Tensor& grad_input;
};

void launch(const Choice& c, const Problem& p, const Args& a);

namespace phase {
template <typename T, int MODE> void launch_mma(const Problem& p, const Args& a);  // mma_sync.cu
template <typename T> void launch_gmma(const Problem& p, const Args& a);  // gmma.cu
void launch_x3(const Problem& p, const Args& a);    // x3.cu
}  // namespace phase

}  // namespace alexop::cuda::input_grad
