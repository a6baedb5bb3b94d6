// The CPU ops' choice between alexop's kernels and ATen's convolution
// (select.h). Rules, first match wins:
//
//  1. float64                          -> alexop  [ATen's float64 convolution is its slow generic one]
//  2. ALEXOP_CPU_CAPABILITY is set     -> alexop  [the named kernels for every shape: tests, A/B runs]
// float16 / bfloat16 the CPU multiplies natively (native_16bit):
//  3. forward, weight gradient         -> ATen in that dtype  [oneDNN's 16-bit kernels beat alexop's float32 ones]
//  4. input gradient: many_channels_16 -> ATen in that dtype
// float32 (other 16-bit computes in float32, and these rules are asked of its float32 problem):
//  5. forward: few_filters(kMinForwardFilters), small_problem, small_forward,
//     small_sliver or small_nhwc                              -> ATen
//  6. weight gradient: few_filters(kMinWeightGradFilters), small_problem,
//     thin_weight_grad or small_sliver (channels_last, or more than 8
//     channels)                                               -> ATen
//  7. input gradient: many_channels                           -> ATen
//  8. otherwise                                               -> alexop
//
// ATen runs in the caller's layout, as the F.conv2d alexop replaces would,
// and the thresholds are where alexop's kernels lose to that (an AVX-512
// grid against oneDNN, docs/cpu.md; other instruction sets were not
// measured): alexop's per-call work (the weights' transforms and packing)
// outweighs its faster loops on few output pixels, its 48-channel register
// blocks idle under few filters (the weight gradient's less so), and its
// space-to-depth input gradient computes 16 phase channels per input
// channel, and oneDNN's channels_last forward takes many channels well.
// Against oneDNN's native 16-bit kernels only the input gradient of 1-4
// channels keeps its lead.

#include "select.h"

#include "../conv11s4.h"

#include <cstdlib>
#include <utility>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

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
// Channels beyond which oneDNN's input gradient is the faster, and its NCHW
// weight gradient where small_sliver.
constexpr int64_t kManyChannels = 8;
// The fewest output pixels at which alexop's forward of 4 or more channels
// wins (docs/cpu.md: between 8 images of 14 x 14 outputs and of 15 x 15).
constexpr int64_t kManyChannelForwardPixels = 1600;
// The fewest output pixels at which alexop's input gradient of 3-4 channels
// beats oneDNN's native 16-bit one.
constexpr int64_t k16Pixels = 1024;

// float16 / bfloat16 multiplied natively: AVX512-BF16 dot products for
// bfloat16, AVX512-FP16 arithmetic for float16 (CPUID leaf 7; the AVX-512
// state enabled by the OS, as avx512f says). There ATen's convolution runs
// oneDNN's 16-bit kernels; elsewhere it converts, or runs its slow generic
// one, and alexop's float32 kernels win.
bool native_16bit(c10::ScalarType dtype) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const auto flags = [] {
    unsigned a = 0, b = 0, c = 0, d = 0, a1 = 0;
    __builtin_cpu_init();
    const bool avx512 = __builtin_cpu_supports("avx512f") && __get_cpuid_count(7, 0, &a, &b, &c, &d);
    const bool fp16 = avx512 && (d >> 23 & 1);
    const bool bf16 = avx512 && a >= 1 && __get_cpuid_count(7, 1, &a1, &b, &c, &d) && (a1 >> 5 & 1);
    return std::pair<bool, bool>{bf16, fp16};
  }();
  return dtype == c10::ScalarType::BFloat16 ? flags.first : dtype == c10::ScalarType::Half && flags.second;
#else
  return false;
#endif
}

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
// Under one AlexNet image's output pixels at 4 or more channels, a last
// register block of 48 filters a third full or less (64 filters: 48 + 16)
// costs more than oneDNN's kernels take (docs/cpu.md; 64 was measured,
// 112, 160 and the like follow by the same block arithmetic).
bool small_sliver(const Problem& p) {
  const int64_t last = p.K % kMinForwardFilters;
  return p.C >= 4 && pixels(p) < kOneImage && last != 0 && last <= kMinForwardFilters / 3;
}
// The forward of 4 or more channels on few output pixels: the weights'
// transform and the bands' packing halo outweigh the products.
bool small_forward(const Problem& p) { return p.C >= 4 && pixels(p) < kManyChannelForwardPixels; }
// The weight gradient of 1-3 channels from NCHW at 49-64 filters: its
// second 48-filter block a third used, where oneDNN's NCHW weight gradient
// of so few channels is quick (from 4 channels it is slow; docs/cpu.md).
bool thin_weight_grad(const Problem& p) {
  return !p.channels_last && p.C < 4 && p.K > kMinForwardFilters && p.K <= kMinForwardFilters * 4 / 3;
}
// oneDNN's channels_last forward of 8 or more channels up to one AlexNet
// image's output pixels.
bool small_nhwc(const Problem& p) { return p.channels_last && p.C >= 8 && pixels(p) <= kOneImage; }
bool many_channels(const Problem& p) {
  return p.C > kManyChannels || (p.C > 4 && pixels(p) < kFewPixels);
}
// Against oneDNN's native 16-bit input gradient alexop's wins at 1-2
// channels, and at 3-4 from k16Pixels output pixels over the batch.
bool many_channels_16(const Problem& p) { return p.C > 4 || (p.C > 2 && pixels(p) < k16Pixels); }
bool is_16bit(const Problem& p) {
  return p.dtype == c10::ScalarType::Half || p.dtype == c10::ScalarType::BFloat16;
}

}  // namespace

Problem problem(
    c10::ScalarType dtype, c10::IntArrayRef input_size, int64_t K, int64_t padding, c10::MemoryFormat format) {
  const auto out = [&](int64_t d) { return (d + 2 * padding - kKernelSize) / kStride + 1; };
  return {dtype,          input_size[0], input_size[1], K, out(input_size[2]), out(input_size[3]),
          format == c10::MemoryFormat::ChannelsLast};
}

bool aten_forward(const Problem& p) {
  if (alexop_always(p)) return false;
  if (is_16bit(p)) return native_16bit(p.dtype);
  return few_filters(p, kMinForwardFilters) || small_problem(p) || small_forward(p) || small_sliver(p) ||
         small_nhwc(p);
}
bool aten_weight_grad(const Problem& p) {
  if (alexop_always(p)) return false;
  if (is_16bit(p)) return native_16bit(p.dtype);
  return few_filters(p, kMinWeightGradFilters) || small_problem(p) || thin_weight_grad(p) ||
         (small_sliver(p) && (p.channels_last || p.C > kManyChannels));
}
bool aten_input_grad(const Problem& p) {
  if (alexop_always(p)) return false;
  if (is_16bit(p)) return native_16bit(p.dtype) && many_channels_16(p);
  return many_channels(p);
}

}  // namespace alexop::cpu
