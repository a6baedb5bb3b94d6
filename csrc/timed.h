#pragma once
// Choices made by timing, on any device. Which of two ways to run one
// problem is faster can flip with shape, dtype and precision in ways no rule
// follows, and a rule measured on one GPU or CPU need not hold on another.
// The first call of each problem times every way and the process keeps the
// fastest. Under torch.backends.cudnn.deterministic or
// torch.use_deterministic_algorithms every problem takes the guess: what
// runs must not depend on a timing. Each device times its own way
// (cuda/common/timed.h, cpu/timed.h).

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

namespace alexop {

// What is chosen, the first entry of a key.
enum class Decision : int64_t {
  kForwardLayout,  // CUDA: cuDNN's way: NCHW or channels_last, direct or on the space-to-depth view
  kInputGradLayout,
  kWeightGradLayout,
  kWeightGradKernel,  // CUDA: alexop's weight-gradient slices or cuDNN
  kInputGradKernel,   // CUDA: alexop's input gradient or cuDNN
  kForwardKernel,     // CUDA: alexop's forward or cuDNN
  kCpuForward,        // CPU: alexop's kernels or ATen's convolution
  kCpuInputGrad,
  kCpuWeightGrad,
};

// A problem: the decision, then the op's device, dtype, precision, the
// operands' sizes and layouts (each op fills what it has).
using TimedKey = std::array<int64_t, 12>;

// Whether choices may be timed: neither deterministic flag is set.
bool timing_allowed();

// The choice for key: the one cached for it; else the guess where timing is
// not allowed, or where may_time is false (not cached); else the index of
// the least of times() (each way's time, in any unit), kept for the process.
// Another way than the guess must be 3% faster to be kept: within the
// timings' noise the guess stands. Where times() throws (the extra memory
// of timing may not fit where the guess's does) the guess is kept.
int timed_choice(const TimedKey& key, int guess, bool may_time, const std::function<std::vector<double>()>& times);

}  // namespace alexop
