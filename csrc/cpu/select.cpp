// The CPU ops' choice between alexop's kernels and ATen's convolution
// (select.h). Rules, first match wins:
//
//  1. float64, or ALEXOP_CPU_CAPABILITY set -> alexop  [ATen's float64 convolution is its slow
//                                              generic one; the variable names alexop's kernels
//                                              for every shape: tests, A/B runs]
// float16 / bfloat16 the CPU multiplies natively, outputs wider than one_column:
//  2. forward, weight gradient         -> ATen in that dtype  [oneDNN's 16-bit kernels beat alexop's float32 ones]
//  3. input gradient: AMX tiles or many_channels_16 -> ATen in that dtype
// float32 (other 16-bit computes in float32, and these rules are asked of its float32 problem),
// by the instruction set of alexop's kernels, each against oneDNN's kernels of the same set:
//  4. AVX-512 (Winograd forward and weight gradient):
//     forward: few_forward_filters, small_problem, small_forward, small_sliver,
//     small_nhwc or narrow; weight gradient: few_weight_grad_filters, small_problem or
//     small_nhwc_weight_grad;
//     input gradient: many_channels                           -> ATen
//  5. AVX2 (Winograd forward and weight gradient): forward: few_pixels or
//     nhwc_few_filters; weight gradient: few_pixels, tiny or
//     nhwc_small_weight_grad; input gradient: many_channels_avx2 -> ATen
//  6. no AVX2 (portable, e.g. aarch64): forward: many_portable_filters; weight gradient:
//     many_portable_weight_grad_filters; input gradient: many_portable_filters or
//     many_channels_direct                                    -> ATen
//  7. otherwise                                               -> alexop
//
// Up to kTimedFlops, the first call of each problem times both and keeps
// the faster (timed): the rules are the guess, and the thresholds below
// were measured on one CPU.
//
// ATen runs in the caller's layout, as the F.conv2d alexop replaces would,
// and the thresholds are where alexop's kernels lose to that (grids against
// oneDNN, docs/cpu.md: AVX-512 measured; AVX2 and the portable kernels
// measured on the same CPU with oneDNN held to AVX2 / SSE4.1, not on aarch64):
// alexop's per-call work (the weights' transforms and packing) outweighs its
// faster loops on few output pixels, its 48-channel register blocks idle
// under few filters (the weight gradient's less so), and its space-to-depth
// input gradient computes 16 phase channels per input channel, and oneDNN's
// channels_last kernels take many channels well. The portable (direct)
// kernels win only under few filters, where oneDNN's 4-lane kernels are
// weak. Against oneDNN's native 16-bit kernels only the input gradient of
// 1-4 channels keeps its lead, and not against its AMX ones.

#include "select.h"

#include "../conv11s4.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <string>

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
// Filters: one register block of the forward's micro-kernels (from NCHW
// inputs of kFewChannels or more, where oneDNN's forward is slower, half a
// block); the weight gradient's accumulate over pixels and win from fewer,
// from fewer still on NCHW inputs of kFewChannels to kNchwWeightGradChannels
// channels (where oneDNN's NCHW weight gradient is slowest).
constexpr int64_t kMinForwardFilters = 48;
constexpr int64_t kMinNchwForwardFilters = 24;
constexpr int64_t kMinWeightGradFilters = 24;
constexpr int64_t kMinNchwWeightGradFilters = 16;
constexpr int64_t kNchwWeightGradChannels = 12;
// Channels beyond which oneDNN's input gradient is the faster: its
// channels_last one, and its NCHW one.
constexpr int64_t kManyChannels = 8;
constexpr int64_t kNchwManyChannels = 12;
// The fewest output pixels at which alexop's input gradient of 7-8
// channels beats oneDNN's, NCHW (there 9-10 channels too) and channels_last
// (docs/cpu.md).
constexpr int64_t kEightChannelPixels = 576;
constexpr int64_t kNhwcEightChannelPixels = 961;
// The fewest output pixels at which alexop's forward of 4 or more channels
// wins (docs/cpu.md: between 8 images of 14 x 14 outputs and of 15 x 15).
constexpr int64_t kManyChannelForwardPixels = 1600;
// The fewest output pixels at which alexop's input gradient of 3-4 channels
// beats oneDNN's native 16-bit one.
constexpr int64_t k16Pixels = 1024;
// The fewest output pixels at which alexop's weight gradient of 8 or more
// channels beats oneDNN's channels_last one (between 882 and 900).
constexpr int64_t kNhwcWeightGradPixels = 900;
// Channels: the direct input gradient (AVX2, portable) loses to oneDNN's
// from 4 on few output pixels (the portable one from kManyChannels on any);
// from NCHW inputs of 4 or more, oneDNN's AVX-512 forward and weight
// gradient are slow.
constexpr int64_t kFewChannels = 4;
// oneDNN's AVX2 kernels' block of channels (a register of float32), and the
// channels beyond which its channels_last input gradient wins at any count.
constexpr int64_t kAvx2Channels = 8;
constexpr int64_t kNhwcAvx2Channels = 11;
// Filters: where oneDNN's SSE4.1 kernels are weakest (one block of the
// portable kernels), and the fewest at which alexop's AVX2 forward from
// channels_last inputs of many channels wins on few output pixels.
constexpr int64_t kFewFilters = 16;
constexpr int64_t kNhwcAvx2ForwardFilters = 32;
// Output columns: under 12 Winograd tiles a row the forward's groups of up
// to 8 tiles a row leave its register blocks part empty (and winograd_rows'
// bands hold few tiles); under 4 tiles, even 2-3 channels' products do not
// pay for it.
constexpr int64_t kNarrowColumns = 24;
constexpr int64_t kFewColumns = 6;
// The fewest output columns at which alexop's forward of problems larger
// than a timed one keeps up from NCHW inputs (9 tiles a row).
constexpr int64_t kLargeNarrowColumns = 18;
// Channels beyond which oneDNN's forward on few columns is the faster in
// either layout (its channels_last one of up to 3 is slow at any width).
constexpr int64_t kFewNarrowChannels = 3;

// The most floating-point operations of a timed problem: its first call
// runs the op 9 times, which costs little once at this size (docs/cpu.md),
// and the rules' margins are wide beyond it.
constexpr double kTimedFlops = 2e9;

// What ATen's 16-bit convolution runs on this CPU (CPUID leaf 7; the
// AVX-512 state enabled by the OS, as avx512f says, and for AMX the tile
// state in XCR0). bfloat16: oneDNN's native kernels with AVX512-BF16 dot
// products, on AMX tiles where the CPU has AMX-BF16. float16: native only
// with AMX-FP16; with AVX512-FP16 alone oneDNN's float16 forward ran at
// half the speed of alexop's float32 path and its weight gradient two
// orders of magnitude slower (docs/cpu.md), so float16 computes in float32
// there, as on CPUs without native 16-bit arithmetic. The isa and forced
// fields are this_cpu's to set.
Cpu native_16bit() {
  Cpu cpu{Isa::kDefault, false, false, false, false};
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  unsigned a = 0, b = 0, c = 0, d = 0, a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || !__get_cpuid_count(7, 0, &a, &b, &c, &d) || a < 1 ||
      !__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) {
    return cpu;
  }
  unsigned xcr0 = 0, xcr0_high = 0;
  __asm__("xgetbv" : "=a"(xcr0), "=d"(xcr0_high) : "c"(0));
  const bool tiles = (d >> 24 & 1) && (xcr0 >> 17 & 3) == 3;  // AMX-TILE, XTILECFG and XTILEDATA enabled
  cpu.bf16 = a1 >> 5 & 1;                                      // AVX512-BF16
  cpu.amx = cpu.bf16 && tiles && (d >> 22 & 1);                // AMX-BF16
  cpu.fp16 = cpu.amx && (a1 >> 21 & 1);                        // AMX-FP16
#endif
  return cpu;
}

bool native(const Problem& p) {
  return p.dtype == c10::ScalarType::BFloat16 ? p.cpu.bf16 : p.dtype == c10::ScalarType::Half && p.cpu.fp16;
}
// oneDNN's native 16-bit kernels return wrong values, finite or not, for
// outputs one column wide (ATen 2.11 and 2.14: channels_last weight
// gradients of inputs narrower than the padding with AVX512-BF16, forwards
// with AMX; docs/cpu.md): those compute in float32.
bool one_column(const Problem& p) { return p.Q == 1; }
bool native_aten(const Problem& p) { return native(p) && !one_column(p); }
bool alexop_always(const Problem& p) { return p.dtype == c10::ScalarType::Double || p.cpu.forced; }

int64_t pixels(const Problem& p) { return p.N * p.P * p.Q; }
double flops(const Problem& p) { return 2.0 * kKernelSize * kKernelSize * (double)pixels(p) * p.C * p.K; }
// More floating-point operations than a timed problem: the rules alone decide.
bool large(const Problem& p) { return flops(p) > kTimedFlops; }
// Too few output pixels over the batch for the forward's and weight
// gradient's fixed costs; 1-3 channels (the least work per pixel) need
// one AlexNet image's worth.
bool small_problem(const Problem& p) { return pixels(p) < kFewPixels || (p.C < 4 && pixels(p) < kOneImage); }
// Under one AlexNet image's output pixels at 4 or more channels, 64 filters
// lost to oneDNN's kernels (docs/cpu.md: measured at 64 only; 112, 160 and
// the like, the same count past a multiple of 48, are taken to follow).
bool small_sliver(const Problem& p) {
  const int64_t last = p.K % kMinForwardFilters;
  return p.C >= 4 && pixels(p) < kOneImage && last != 0 && last <= kMinForwardFilters / 3;
}
// The forward of 4 or more channels on few output pixels: the weights'
// transform and the bands' packing halo outweigh the products.
bool small_forward(const Problem& p) { return p.C >= 4 && pixels(p) < kManyChannelForwardPixels; }
// The forward of outputs under kNarrowColumns wide (large ones from NCHW
// inputs under kLargeNarrowColumns): 4 or more channels, one NCHW channel,
// 2-3 NCHW channels up to kFewColumns (docs/cpu.md).
bool narrow(const Problem& p) {
  if (p.Q >= (large(p) && !p.channels_last ? kLargeNarrowColumns : kNarrowColumns)) return false;
  if (p.C > kFewNarrowChannels) return true;
  return !p.channels_last && (p.C == 1 || p.Q <= kFewColumns);
}
// oneDNN's channels_last forward of 8 or more channels up to one AlexNet
// image's output pixels.
bool small_nhwc(const Problem& p) { return p.channels_last && p.C >= kManyChannels && pixels(p) <= kOneImage; }
// Its weight gradient, on fewer pixels.
bool small_nhwc_weight_grad(const Problem& p) {
  return p.channels_last && p.C >= kManyChannels && pixels(p) < kNhwcWeightGradPixels;
}
// oneDNN's weight gradient of few filters (alexop's register blocks of 48
// mostly idle), but from NCHW inputs of a few channels, where oneDNN's is
// slowest.
bool few_weight_grad_filters(const Problem& p) {
  if (!p.channels_last && p.C >= kFewChannels && p.C <= kNchwWeightGradChannels) {
    return p.K < kMinNchwWeightGradFilters;
  }
  return p.K < kMinWeightGradFilters;
}
// oneDNN's forward under one block of filters, from NCHW inputs of 4 or
// more channels under half a block.
bool few_forward_filters(const Problem& p) {
  return p.K < (!p.channels_last && p.C >= kFewChannels ? kMinNchwForwardFilters : kMinForwardFilters);
}
// oneDNN's input gradient: from channels_last inputs beyond 8 channels, at
// 7-8 under kNhwcEightChannelPixels; from NCHW ones beyond 12, at 11-12 under
// one AlexNet image's output pixels, at 7-10 under kEightChannelPixels; at
// 5-6 under kFewPixels.
bool many_channels(const Problem& p) {
  const int64_t px = pixels(p);
  if (p.channels_last) {
    if (p.C > kManyChannels) return true;
    if (p.C > kManyChannels - 2) return px < kNhwcEightChannelPixels;
  } else {
    if (p.C > kNchwManyChannels) return true;
    if (p.C > kNchwManyChannels - 2) return px < kOneImage;
    if (p.C > kManyChannels - 2) return px < kEightChannelPixels;
  }
  return p.C > 4 && px < kFewPixels;
}
// Against oneDNN's native 16-bit input gradient alexop's wins at 1-2
// channels, and at 3-4 from k16Pixels output pixels over the batch (against
// its AMX one at none: docs/cpu.md, 1-4 channels, 3025-32258 pixels).
bool many_channels_16(const Problem& p) { return p.C > 4 || (p.C > 2 && pixels(p) < k16Pixels); }
bool is_16bit(const Problem& p) {
  return p.dtype == c10::ScalarType::Half || p.dtype == c10::ScalarType::BFloat16;
}

// Few output pixels of 3 or more channels and a full block of filters,
// where the per-call packing outweighs the products (the portable kernels,
// and the AVX2 Winograd weight gradient).
bool tiny(const Problem& p) { return pixels(p) < kFewPixels && p.C >= 3 && p.K >= kMinForwardFilters; }
// With AVX2 the Winograd kernels lose to oneDNN's AVX2 ones on small
// problems only (docs/cpu.md): under kFewPixels output pixels at 4 or more
// channels (their transforms and packing outweigh the products); from
// channels_last inputs, the forward of 8 or more channels under
// kNhwcAvx2ForwardFilters and the weight gradient up to one AlexNet image's
// output pixels.
bool few_pixels(const Problem& p) { return p.C >= kFewChannels && pixels(p) < kFewPixels; }
bool nhwc_few_filters(const Problem& p) {
  return p.channels_last && p.C >= kManyChannels && p.K < kNhwcAvx2ForwardFilters && pixels(p) <= kOneImage;
}
bool nhwc_small_weight_grad(const Problem& p) { return p.channels_last && pixels(p) < kOneImage; }
// oneDNN's input gradient against the direct kernels' (16 phase channels
// per input channel): from 4 channels on few output pixels; with the
// portable kernels from 8.
bool many_channels_direct(const Problem& p) {
  return p.C >= kManyChannels || (p.C >= kFewChannels && pixels(p) < kFewPixels);
}
// With AVX2, oneDNN computes channels in blocks of 8 and pads the last:
// its input gradient wins where the blocks are full (8, 16) and beyond 16,
// and from channels_last inputs beyond kNhwcAvx2Channels; from NCHW inputs
// beyond kNchwManyChannels, but past 2e9 FLOP only where the blocks are full
// (docs/cpu.md).
bool many_channels_avx2(const Problem& p) {
  if (p.C >= kFewChannels && pixels(p) < kFewPixels) return true;
  if (p.C % kAvx2Channels == 0 || p.C > 2 * kAvx2Channels) return true;
  if (p.channels_last) return p.C > kNhwcAvx2Channels;
  return p.C > kNchwManyChannels && !large(p);
}
// The portable kernels win against oneDNN's 4-lane (SSE4.1) ones where
// those are weak: the forward and input gradient up to kFewFilters filters,
// the weight gradient up to two 48-filter blocks (one on few output pixels).
bool many_portable_filters(const Problem& p) { return p.K > kFewFilters; }
bool many_portable_weight_grad_filters(const Problem& p) {
  return p.K > 2 * kMinForwardFilters || (tiny(p) && p.K > kMinForwardFilters);
}

}  // namespace

Cpu this_cpu() {
  static const Cpu native = native_16bit();
  Cpu cpu = native;
  cpu.isa = cpu_isa();
  const char* isa = std::getenv("ALEXOP_CPU_CAPABILITY");
  cpu.forced = isa != nullptr && *isa != '\0';
  return cpu;
}

Cpu named_cpu(std::string_view name) {
  if (name == "default") return {Isa::kDefault, false, false, false, false};
  if (name == "avx2") return {Isa::kAvx2, false, false, false, false};
  if (name == "avx512") return {Isa::kAvx512, false, false, false, false};
  if (name == "avx512_bf16") return {Isa::kAvx512, true, false, false, false};
  if (name == "amx_bf16") return {Isa::kAvx512, true, false, true, false};
  if (name == "amx_fp16") return {Isa::kAvx512, true, true, true, false};
  TORCH_CHECK(false, "alexop._kernel_for_cpu: expected cpu to be \"default\", \"avx2\", \"avx512\", ",
              "\"avx512_bf16\", \"amx_bf16\" or \"amx_fp16\", but got \"", std::string(name), "\"");
}

Problem problem(
    c10::ScalarType dtype, c10::IntArrayRef input_size, int64_t K, int64_t padding, c10::MemoryFormat format,
    const Cpu& cpu) {
  const auto out = [&](int64_t d) { return (d + 2 * padding - kKernelSize) / kStride + 1; };
  return {dtype,
          input_size[0],
          input_size[1],
          K,
          out(input_size[2]),
          out(input_size[3]),
          format == c10::MemoryFormat::ChannelsLast,
          cpu,
          input_size[2],
          input_size[3],
          padding};
}

bool in_own_dtype(const Problem& p) { return !is_16bit(p) || native_aten(p); }

bool aten_forward(const Problem& p) {
  if (alexop_always(p)) return false;
  if (is_16bit(p)) return native_aten(p);
  switch (p.cpu.isa) {
    case Isa::kAvx512:
      return few_forward_filters(p) || small_problem(p) || small_forward(p) || small_sliver(p) ||
             small_nhwc(p) || narrow(p);
    case Isa::kAvx2:
      return few_pixels(p) || nhwc_few_filters(p);
    case Isa::kDefault:
      return many_portable_filters(p);
  }
  return false;
}
bool aten_weight_grad(const Problem& p) {
  if (alexop_always(p)) return false;
  if (is_16bit(p)) return native_aten(p);
  switch (p.cpu.isa) {
    case Isa::kAvx512:
      return few_weight_grad_filters(p) || small_problem(p) || small_nhwc_weight_grad(p);
    case Isa::kAvx2:
      return few_pixels(p) || tiny(p) || nhwc_small_weight_grad(p);
    case Isa::kDefault:
      return many_portable_weight_grad_filters(p);
  }
  return false;
}
bool aten_input_grad(const Problem& p) {
  if (alexop_always(p)) return false;
  if (is_16bit(p)) return native_aten(p) && (p.cpu.amx || many_channels_16(p));
  switch (p.cpu.isa) {
    case Isa::kAvx512:
      return many_channels(p);
    case Isa::kAvx2:
      return many_channels_avx2(p);
    case Isa::kDefault:
      return many_portable_filters(p) || many_channels_direct(p);
  }
  return false;
}

bool timed(const Problem& p) { return !alexop_always(p) && in_own_dtype(p) && !large(p); }

// With one channel (16 products a tile per output channel) the output
// transform and the transposition of output channels in lanes into NCHW
// planes cost as much as the products; with tiles in lanes each output
// channel's pixels come out in rows (docs/cpu.md).
bool winograd_rows_forward(const Problem& p) { return !p.channels_last && p.C == 1; }

}  // namespace alexop::cpu
