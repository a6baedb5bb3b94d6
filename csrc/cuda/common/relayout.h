#pragma once
// Copies between NCHW and channels_last, and NCHW copies padded with zeros:
// alexop's kernels write NCHW, a channels_last result is copied; the cuDNN
// fallbacks run either. ATen's copy between the two layouts runs at a
// fraction of the memory bandwidth (docs/design.md); a tiled transpose of
// each image's (pixels x channels) matrix through shared memory reads and
// writes whole rows, and an NCHW tensor of a few channels goes to
// channels_last a thread a pixel (its channels' loads along the rows, the
// pixel's whole 8- or 16-byte stores).

#include <ATen/core/Tensor.h>

namespace alexop::cuda {

// t (4-D, dense) in `layout`: itself if it is already, else a fresh copy.
at::Tensor relayout(const at::Tensor& t, at::MemoryFormat layout);

// x (4-D, any strides) as a fresh NCHW tensor of `channels` channels and
// `width` columns (at least x's), x's values then zeros: the inputs some
// kernels take (a zero column more, channels zero-padded to 3, a
// few-channel channels_last input in NCHW, grad_output's filter slices).
// Where a pixel's channels fit 16 bytes, one pass: one thread a pixel
// column of a band of rows reads their channels and writes one value to
// each channel's plane, so both sides run along rows even where the
// channels are a pixel's innermost dimension, which ATen's copy reads a
// channel at a time. Wider pixels take ATen's copy.
at::Tensor zero_padded_copy(const at::Tensor& x, int64_t channels, int64_t width);

// Whether zero_padded_copy moves x (no zeros added) by 16-byte loads and
// stores: a dense channels_last 3-channel 16-bit tensor, 16-byte aligned,
// of images of a multiple of 8 pixels.
bool nhwc3_transposable(const at::Tensor& x);

// t (N, C, H, W, 16- or 32-bit, any strides) as a fresh NCHW tensor of
// ceil(N / r) images of r bands side by side: band m of image g holds
// t[g r + m] from column m band, zeros elsewhere (a packed weight-gradient
// operand, weight_grad/select.h). One pass: every element written once.
at::Tensor packed_copy(const at::Tensor& t, int64_t r, int64_t band, int64_t width);

}  // namespace alexop::cuda
