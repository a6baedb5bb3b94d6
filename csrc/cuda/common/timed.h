#pragma once
// Choices timed on the GPU (../../timed.h): cuDNN's NCHW against its
// channels_last kernels (the cuDNN fallbacks' layout), and alexop's
// gradients of more than 3 channels against cuDNN, each way timed as it
// would run, copies included. During CUDA graph capture (nothing may
// synchronize) a problem not yet timed takes the guess.

#include "../../timed.h"

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace alexop::cuda {

// A problem's key: the decision; the device and dtype of x (the operand the
// op reads, as given); the precision (whether cuDNN may use TF32, or for the
// forward's kernel alexop's float32 math); the input's sizes, the filter
// count and the padding; x's layout, and the result's layout with whether a
// bias (gradient) is made.
TimedKey timed_key(Decision op, const at::Tensor& x, at::IntArrayRef size, int64_t K, int64_t padding,
                   int64_t precision, bool bias, at::MemoryFormat format);

// The index in runs of the fastest, each run the whole op in one way
// (timed_choice: the guess where timing is not allowed or fails).
int fastest(const TimedKey& key, int guess, const std::vector<std::function<void()>>& runs);

}  // namespace alexop::cuda
