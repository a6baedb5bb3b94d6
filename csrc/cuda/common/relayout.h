#pragma once
// Copies between NCHW and channels_last: alexop's kernels write NCHW, a
// channels_last result is copied; the cuDNN fallbacks run either. ATen's
// copy between the two layouts runs at a fraction of the memory bandwidth
// (docs/design.md); a tiled transpose of each image's (pixels x channels)
// matrix through shared memory reads and writes whole rows.

#include <ATen/core/Tensor.h>

namespace alexop::cuda {

// t (4-D, dense) in `layout`: itself if it is already, else a fresh copy.
at::Tensor relayout(const at::Tensor& t, at::MemoryFormat layout);

}  // namespace alexop::cuda
