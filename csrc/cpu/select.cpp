// The CPU ops' choice between alexop's kernels and ATen's convolution
// (select.h). Rules, first match wins:
//
//  1. float64                          -> alexop  [ATen's float64 convolution is its slow generic one]
//  2. ALEXOP_CPU_CAPABILITY is set     -> alexop  [the named kernels for every shape: tests, A/B runs]
// float32 (16-bit computes in float32):
//  3. forward, weight gradient: few_filters or small_problem -> ATen
//  4. input gradient: many_channels                          -> ATen
//  5. otherwise                                              -> alexop
//
// ATen runs in the caller's layout, as the F.conv2d alexop replaces would.
// alexop's per-call work (the weights' transforms and packing) and its
// 48-channel register blocks are what lose on small problems; the
// thresholds come from an AVX-512 grid against oneDNN in the same layout
// (docs/cpu.md). Other instruction sets were not measured.

#include "select.h"

#include "../conv11s4.h"

#include <cstdlib>

namespace alexop::cpu {
namespace {

constexpr int64_t kOneImage = 55 * 55;    // output pixels of one AlexNet image
constexpr int64_t kSmallImage = 32 * 32;  // and of a small one
// Filters below one block of the micro-kernels' 48 output channels.
constexpr int64_t kMinFilters = 48;
// The input gradient's space-to-depth form computes 16 phase channels per
// input channel: beyond 8 channels oneDNN's is faster, beyond 4 already
// where the pixels are few.
constexpr int64_t kMaxGradChannels = 8;
constexpr int64_t kFewPixelGradChannels = 4;

bool alexop_always(const Problem& p) {
  const char* isa = std::getenv("ALEXOP_CPU_CAPABILITY");
  return p.dtype == c10::ScalarType::Double || (isa != nullptr && *isa != '\0');
}

int64_t pixels(const Problem& p) { return p.N * p.P * p.Q; }
bool few_filters(const Problem& p) { return p.K < kMinFilters; }
// Output pixels over the batch too few for the forward's and weight
// gradient's fixed costs: under a small image, or under one AlexNet image
// with 1-3 channels (whose work per pixel is the least).
bool small_problem(const Problem& p) {
  return pixels(p) < kSmallImage || (p.C < 4 && pixels(p) < kOneImage);
}
bool many_channels(const Problem& p) {
  return p.C > kMaxGradChannels || (p.C > kFewPixelGradChannels && pixels(p) < kSmallImage);
}

}  // namespace

Problem problem(c10::ScalarType dtype, c10::IntArrayRef input_size, int64_t K, int64_t padding) {
  const auto out = [&](int64_t d) { return (d + 2 * padding - kKernelSize) / kStride + 1; };
  return {dtype, input_size[0], input_size[1], K, out(input_size[2]), out(input_size[3])};
}

bool aten_forward(const Problem& p) { return !alexop_always(p) && (few_filters(p) || small_problem(p)); }
bool aten_weight_grad(const Problem& p) { return aten_forward(p); }
bool aten_input_grad(const Problem& p) { return !alexop_always(p) && many_channels(p); }

}  // namespace alexop::cpu
