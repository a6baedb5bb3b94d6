#pragma once
// Choices made by timing. Which of two ways to run one problem is faster
// can flip with shape, dtype and precision in ways no rule follows, and a
// rule measured on one GPU need not hold on another: cuDNN's NCHW against
// its channels_last kernels (the cuDNN fallbacks' layout), and alexop's
// weight-gradient slices against cuDNN at 4-16 channels. The first call of
// each problem times every way (copies included) and the process keeps the
// fastest. Under torch.backends.cudnn.deterministic or
// torch.use_deterministic_algorithms every problem takes the guess (what
// runs must not depend on a timing); during CUDA graph capture (nothing may
// synchronize) a problem not yet timed does.

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

namespace alexop::cuda {

// What is chosen, the first entry of a key.
enum class Decision : int64_t { kForwardLayout, kInputGradLayout, kWeightGradLayout, kWeightGradKernel };

// A problem: the decision, then the op's device, dtype, precision, the
// operands' sizes and layouts (each op fills what it has).
using TimedKey = std::array<int64_t, 12>;

// The index in runs of the fastest, each run the whole op in one way; guess
// where timing is not allowed or a run fails (the extra copies and workspace
// of timing may not fit where the guess's do).
int fastest(const TimedKey& key, int guess, const std::vector<std::function<void()>>& runs);

}  // namespace alexop::cuda
