#pragma once
// The shape the tensor-core kernels are built for: AlexNet's first layer,
// 3 input channels and 11 x 11 filters at stride 4.

#include <cstdint>

namespace alexop::cuda {

constexpr int kC = 3;                // input channels (RGB)
constexpr int kR = 11;               // filter rows and columns
constexpr int kKred = kC * kR * kR;  // 363 taps: the forward's reduction
// The most filters the tensor-core kernels take (in channel groups): the
// range measured against cuDNN.
constexpr int64_t kMaxFilters = 384;

// Other channel counts, up to kMaxSlicedChannels, reach the kernels as
// slices of 3 channels (the last zero-padded), one problem a slice.
constexpr int64_t kMaxSlicedChannels = 16;
inline int input_slices(int64_t C) { return (int)((C + kC - 1) / kC); }

}  // namespace alexop::cuda
