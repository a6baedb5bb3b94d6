#pragma once
// The memory layout a cuDNN fallback runs in. Which of cuDNN's NCHW and
// channels_last kernels is faster for one convolution flips with shape,
// dtype and precision (docs/design.md), and a rule measured on one GPU need
// not hold on another: the first call of each problem times both layouts
// (the copies into and out of them included) and the process keeps the
// faster. A problem not yet timed takes the guess where timing is not
// allowed: during CUDA graph capture (nothing may synchronize) and under
// torch.backends.cudnn.deterministic or torch.use_deterministic_algorithms
// (a run's layout must not depend on a timing).

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <functional>

namespace alexop::cuda {

// What the choice is cached by: the op, device, dtype, precision, the
// operands' sizes and layouts (each op fills what it has).
using LayoutKey = std::array<int64_t, 12>;

// run(layout) runs the op in that layout, copies included.
at::MemoryFormat faster_layout(
    const LayoutKey& key, at::MemoryFormat guess, const std::function<void(at::MemoryFormat)>& run);

}  // namespace alexop::cuda
