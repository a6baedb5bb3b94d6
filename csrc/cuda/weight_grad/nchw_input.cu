// The weight gradient's input preparation (nchw_input.h).

#include "nchw_input.h"

#include "../common/launch.h"
#include "../common/relayout.h"

#include <ATen/ops/empty.h>

#include <cstdint>
#include <cstring>

namespace alexop::cuda::weight_grad {
namespace {

constexpr int kThreads = 256;

// A channels_last 3-channel image of 16-bit values to NCHW, 8 pixels per
// thread: three 16-byte loads of (pixel, channel) pairs, three 16-byte
// stores of one channel's 8 pixels. hw8: pixels per image / 8.
__global__ void nhwc3_to_nchw_kernel(const uint4* __restrict__ x, uint4* __restrict__ y, int64_t groups,
                                     int64_t hw8) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < groups;
       i += int64_t{gridDim.x} * blockDim.x) {
    const uint4 in[3] = {x[3 * i], x[3 * i + 1], x[3 * i + 2]};
    uint16_t v[24];
    memcpy(v, in, sizeof(in));
    const int64_t n = i / hw8, g = i - n * hw8;
    for (int c = 0; c < 3; ++c) {
      uint16_t o[8];
      for (int p = 0; p < 8; ++p) o[p] = v[3 * p + c];
      uint4 out;
      memcpy(&out, o, sizeof(out));
      y[(n * 3 + c) * hw8 + g] = out;
    }
  }
}

}  // namespace

InputPrep input_prep(const at::Tensor& input) {
  if (input.is_contiguous()) return InputPrep::kAsIs;
  if (input.scalar_type() == at::kFloat)
    return input.is_contiguous(at::MemoryFormat::ChannelsLast) ? InputPrep::kAsIs : InputPrep::kContiguous;
  const int64_t hw = input.size(2) * input.size(3);
  const bool transposable = input.size(1) == 3 && input.element_size() == 2 &&
                            input.is_contiguous(at::MemoryFormat::ChannelsLast) && hw % 8 == 0 &&
                            reinterpret_cast<uintptr_t>(input.const_data_ptr()) % 16 == 0;
  return transposable ? InputPrep::kTranspose : InputPrep::kContiguous;
}

at::Tensor prepare_input(const at::Tensor& input, InputPrep prep) {
  if (prep == InputPrep::kAsIs) return input;
  if (prep == InputPrep::kContiguous) return relayout(input, at::MemoryFormat::Contiguous);
  const int64_t hw = input.size(2) * input.size(3);
  auto out = at::empty(input.sizes(), input.options());
  const int64_t groups = input.numel() / 24;
  if (groups > 0) {
    nhwc3_to_nchw_kernel<<<grid_stride_blocks(groups, kThreads), kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        static_cast<const uint4*>(input.const_data_ptr()), static_cast<uint4*>(out.mutable_data_ptr()), groups,
        hw / 8);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return out;
}

}  // namespace alexop::cuda::weight_grad
