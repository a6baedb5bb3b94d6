// The CPU ops' choice between alexop's kernels and ATen's convolution
// (select.h). Rules, first match wins:
//
//  1. float64                          -> alexop  [ATen's float64 convolution is its slow generic one]
//  2. ALEXOP_CPU_CAPABILITY is set     -> alexop  [the named kernels for every shape: tests, A/B runs]
// float32 (16-bit computes in float32):
//  3. forward: few_filters(kMinForwardFilters) or small_problem    -> ATen
//  4. weight gradient: few_filters(kMinWeightGradFilters) or small_problem -> ATen
//  5. input gradient: many_channels                           -> ATen
//  6. otherwise                                               -> alexop
//
// ATen runs in the caller's layout, as the F.conv2d alexop replaces would,
// and the thresholds are where alexop's kernels lose to that (an AVX-512
// grid against oneDNN, docs/cpu.md; other instruction sets were not
// measured): alexop's per-call work (the weights' transforms and packing)
// outweighs its faster loops on few output pixels, its 48-channel register
// blocks idle under few filters (the weight gradient's less so), and its
// space-to-depth input gradient computes 16 phase channels per input
// channel.

#include "select.h"

#include "../conv11s4.h"

#include <cstdlib>

namespace alexop::cpu {
namespace {

// Output pixels over the batch: one AlexNet image's, and the fewest at
// which alexop's forward, weight gradient and input gradient beyond 4
// channels win (docs/cpu.md).
constexpr int64_t kOneImage = 55 * 55;
constexpr int64_t kFewPixels = 512;
// Filters: one register block of the forward's micro-kernels; the weight
// gradient's accumulate over pixels and win from fewer.
constexpr int64_t kMinForwardFilters = 48;
constexpr int64_t kMinWeightGradFilters = 32;
// The input gradient's channels beyond which oneDNN's is the faster.
constexpr int64_t kMaxGradChannels = 8;

bool alexop_always(const Problem& p) {
  const char* isa = std::getenv("ALEXOP_CPU_CAPABILITY");
  return p.dtype == c10::ScalarType::Double || (isa != nullptr && *isa != '\0');
}

int64_t pixels(const Problem& p) { return p.N * p.P * p.Q; }
bool few_filters(const Problem& p, int64_t min_filters) { return p.K < min_filters; }
// Too few output pixels over the batch for the forward's and weight
// gradient's fixed costs; 1-3 channels (the least work per pixel) need
// one AlexNet image's worth.
bool small_problem(const Problem& p) { return pixels(p) < kFewPixels || (p.C < 4 && pixels(p) < kOneImage); }
bool many_channels(const Problem& p) {
  return p.C > kMaxGradChannels || (p.C > 4 && pixels(p) < kFewPixels);
}

}  // namespace

Problem problem(c10::ScalarType dtype, c10::IntArrayRef input_size, int64_t K, int64_t padding) {
  const auto out = [&](int64_t d) { return (d + 2 * padding - kKernelSize) / kStride + 1; };
  return {dtype, input_size[0], input_size[1], K, out(input_size[2]), out(input_size[3])};
}

bool aten_forward(const Problem& p) {
  return !alexop_always(p) && (few_filters(p, kMinForwardFilters) || small_problem(p));
}
bool aten_weight_grad(const Problem& p) {
  return !alexop_always(p) && (few_filters(p, kMinWeightGradFilters) || small_problem(p));
}
bool aten_input_grad(const Problem& p) { return !alexop_always(p) && many_channels(p); }

}  // namespace alexop::cpu
