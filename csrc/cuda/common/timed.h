#pragma once
// Choices timed on the GPU (../../timed.h): cuDNN's NCHW against its
// channels_last kernels (the cuDNN fallbacks' layout), and alexop's
// gradients of more than 3 channels against cuDNN, each way timed as it
// would run, copies included. During CUDA graph capture (nothing may
// synchronize) a problem not yet timed takes the guess.

#include "../../timed.h"

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
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

// alexop's way (0) or cuDNN's (1) for key, as fastest, each run the whole op
// returning its result (the weight gradient's, not the bias's). Before the
// timing each runs once, and where alexop's result is not near cuDNN's
// (relative L2 over the elements finite in both), cuDNN is kept for the
// problem with a warning naming alexop's kernel (what(), asked only then): a
// kernel run on a GPU it was never measured on must not be kept for a speed
// it gets by being wrong.
int mine_or_cudnn(const TimedKey& key, int guess, const std::function<std::string()>& what,
                  const std::function<at::Tensor()>& mine, const std::function<at::Tensor()>& cudnn);

}  // namespace alexop::cuda
