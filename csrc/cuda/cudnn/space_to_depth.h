#pragma once
// The space-to-depth view of the convolution, for cuDNN. The padded input
// cut into 4 x 4 pixel blocks, block (i, j) of image n as the 16C channels
// 16c + 4a + b = x[n][c][4i + a - padding][4j + b - padding] (zero outside
// the image), turns the 11 x 11 stride-4 convolution into a 3 x 3 stride-1
// one without padding over 16C channels, with the weights zero-padded to
// 12 x 12 and cut alike: tap (4u + a, 4v + b) of channel c becomes tap
// (u, v) of channel 16c + 4a + b. For few input channels cuDNN's 3 x 3
// kernels on that view do the same products (and the padded taps' zeros)
// at a far higher rate than its 11 x 11 stride-4 kernels.

#include <ATen/core/Tensor.h>

namespace alexop::cuda {

// Whether the view's copies take an input of these sizes (N, C, H, W) and
// dtype: float, half or bfloat16, 16 channels at most (a block row's input
// rows are staged in shared memory), an image's elements counted in 32 bits.
bool space_to_depth_fits(at::IntArrayRef input_size, at::ScalarType dtype);

// x (N, C, H, W; NCHW or channels_last, float, half or bfloat16) as its
// (N, 16C, rows, cols) blocks in `layout`, from the padding's top-left
// corner: the view of a forward of rows - 2 x cols - 2 outputs. Blocks past
// the image hold zeros; image rows and columns past the last block (which
// no window reaches) are left out.
at::Tensor space_to_depth(const at::Tensor& x, int64_t padding, int64_t rows, int64_t cols, at::MemoryFormat layout);

// The input gradient from the view's: v (N, 16C, rows, cols; NCHW or
// channels_last) back to (N, C, height, width) in `layout`, each pixel the
// view's value at its place, zero where no block of the view reaches it.
at::Tensor depth_to_space(const at::Tensor& v, int64_t padding, int64_t height, int64_t width,
                          at::MemoryFormat layout);

// The (K, C, 11, 11) weight (or its gradient) on the view: (K, 16C, 3, 3)
// in `layout`, and back.
at::Tensor space_to_depth_weight(const at::Tensor& w, at::MemoryFormat layout);
at::Tensor depth_to_space_weight(const at::Tensor& w);

}  // namespace alexop::cuda
