#pragma once
// Choices timed on the GPU (../../timed.h): cuDNN's NCHW against its
// channels_last kernels (the cuDNN fallbacks' layout), and alexop's
// gradients of more than 3 channels against cuDNN, each way timed as it
// would run, copies included. During CUDA graph capture (nothing may
// synchronize) a problem not yet timed takes the guess.

#include "../../timed.h"

#include <functional>
#include <vector>

namespace alexop::cuda {

// The index in runs of the fastest, each run the whole op in one way
// (timed_choice: the guess where timing is not allowed or fails).
int fastest(const TimedKey& key, int guess, const std::vector<std::function<void()>>& runs);

}  // namespace alexop::cuda
