// The weight gradient's kernel choice. Decision tree, first match wins:
//
//  1. float64                               -> generic  [the reference; no tensor-core kernel]
//     16-bit of an odd width: the rules below see the input (or each slice) as a copy one zero
//     column wider (widen_pays) [the kernels that read column pairs take it]
//  2. K other than 64 or 96                 -> slices of 96 filters (filter_slices_pay) + the rest for 96 (or 64), else cudnn
//     fp32 "highest", 3 channels of 64 or 96 filters on wgmma, images a third of a unit wide: the rules
//     below see ceil(N / r) copies of r images side by side (images_packed) [r images share a scale run]
//  3. 1 or 2 channels, planes_take          -> planes built for 1 | 2 channels [no zero channels copied in nor multiplied]
//  4. other than 3 channels                 -> slices of 3 (input_slices_pay) + the rest for 3, else cudnn
//     (on planes the last slice takes its own 1 or 2 channels, not zero-padded to 3)
//  5. !tc_shape                             -> cudnn    [outside the kernels' limits]
//  6. small_images (not TF32 3->64|96 wgmma) -> cudnn  [3xFP16 loses to cuDNN's fp32 there]
//  7. 16-bit input still channels_last      -> cudnn    [no 16-bit kernel reads channels_last rows well]
// float32 (3xFP16 / 3xTF32 for "highest"; "high" and "medium" take TF32):
//  8. wgmma, grad_output 16-byte aligned    -> gmma 3xFP16 | TF32  [dy staged by 16-byte copies; a channels_last
//                                                                   grad_output of 16-byte pixels read in place]
//  9.                                       -> mma.sync 3xTF32 | TF32
// bf16 / fp16:
// 10. planes_take                           -> planes  [A and B by descriptor, no gather; a channels_last grad_output
//                                                      of 16-byte pixels read in place]
// 11. wgmma, grad_output 16-byte aligned, pairs_ok    -> gmma 16-bit  [channels_last grad_output as in 8]
// 12. pairs_ok, grad_output 4-byte aligned  -> mma.sync, 4-byte pair copies
// 13.                                       -> mma.sync, register-staged, any strides
// The wgmma kernel copies input rows by 16 bytes (vec) where vec_ok, else by
// 4 (one fp32 element or a 16-bit pair).
// Up to 16 channels, the choice is a guess: the op times alexop's (own, with
// rules 2 and 4 taking slices wherever the kernels do) against cuDNN on each
// problem's first call (timed, common/timed.h).

#include "select.h"

#include "../../conv11s4.h"
#include "../common/constants.h"

#include <algorithm>
#include <cstdint>

namespace alexop::cuda::weight_grad {

// Images packed side by side (images_packed): the band each image takes, a
// multiple of 4 columns so that each band's outputs start at a whole output
// column, and wide enough that no band's windows reach the next band's
// pixels (the kernel's own padding zeros the first band's left); the packed
// width, a multiple of 4 (16-byte rows of any type).
int64_t pack_band(int64_t W, int64_t pad) { return (W + pad + 3) / 4 * 4; }
int64_t packed_width(int64_t W, int64_t pad, int64_t packed) {
  return ((packed - 1) * pack_band(W, pad) + W + 3) / 4 * 4;
}
int64_t packed_outputs(int64_t W, int64_t pad, int64_t packed) {
  return (packed_width(W, pad, packed) + 2 * pad - kKernelSize) / kStride + 1;
}

namespace {

using c10::ScalarType;

// The kernels' limits: 3 channels (tc_shape; the phase-plane kernel 1 to
// 3), 64 or 96 filters, a non-empty batch, offsets inside an image and a dy
// plane in 32 bits, a measured architecture (common/device.h), fp32 /
// 16-bit.
bool tc_limits(const Problem& p) {
  return (p.K == 64 || p.K == 96) &&
         (p.dtype == ScalarType::Float || p.dtype == ScalarType::BFloat16 || p.dtype == ScalarType::Half) &&
         p.N >= 1 && p.P >= 1 && p.Q >= 1 && p.pad >= 0 && p.pad <= (1 << 20) && p.input_stride0 <= INT32_MAX &&
         p.H * p.W * kC <= INT32_MAX &&
         p.P * p.Q <= INT32_MAX && tensor_core_kernels(p.dev);
}
bool tc_shape(const Problem& p) { return p.C == kC && tc_limits(p); }

// The phase-plane kernel serves outputs 48 to 55 wide (AlexNet's), K <= 96.
bool planes_shape(const Problem& p) { return p.K <= 96 && p.Q >= 48 && p.Q <= 55; }

// Its input pieces are 4-byte words of one column pair (dy at any
// alignment: planes.cuh).
bool planes_aligned(const Problem& p) {
  return p.pad % 2 == 0 && p.W % 2 == 0 && !p.nhwc && p.input_align >= 4;
}

// The phase-plane kernel, 16-bit: built for 1, 2 and 3 channels, so 1 or 2
// take it as they are, not zero-padded to 3.
bool planes_take(const Problem& p) {
  return p.dtype != ScalarType::Float && p.dev.sm90a && tc_limits(p) && planes_shape(p) && planes_aligned(p) &&
         planes_fit(p, p.K <= 64 ? 8 : 12);
}

// A 16-bit input of odd width reaches the kernels as a copy one zero column
// wider, so that the ones reading column pairs take it: the column sits where
// the padding's zeros were, and an odd width's span W + 2 pad - 11 is even,
// so it adds no output column (that takes span % 4 == 3). The copy costs one
// pass over the input; the strided mma.sync kernel it replaces is the slowest
// of the four (docs/design.md).
bool widen_pays(const Problem& p) { return p.dtype != ScalarType::Float && p.W % 2 != 0; }

// cuDNN's full-fp32 weight gradients ("highest"), slow at any channel count.
bool cudnn_fp32(const Problem& p) { return p.dtype == ScalarType::Float && p.math == Fp32Math::kAccurate; }

// The 3xFP16 wgmma kernel pays a scale run per unit, one output row of up to
// 64 pixels: an image a third that wide or less pays it as often as a full
// one for a fraction of the products. r images side by side in one (dy zero
// between the bands) share the runs, as many as one unit takes; only where
// r >= 3 do the runs saved outweigh the copies, and in TF32 and 16-bit the
// packed kernel barely gains on the plain one (docs/perf-history.md, S61).
int64_t images_packed(const Problem& p) {
  if (!p.whole || !cudnn_fp32(p) || p.C != kC || (p.K != 64 && p.K != 96) || !p.dev.sm90a ||
      !tensor_core_kernels(p.dev))
    return 1;
  int64_t r = 1;
  while (r < std::min<int64_t>(p.N, 8) && packed_outputs(p.W, p.pad, r + 1) <= 64) ++r;
  return r >= 3 ? r : 1;
}

// 16-bit input rows copied as 4-byte pairs: NCHW, even width, aligned.
bool pairs_ok(const Problem& p) { return !p.nhwc && p.W % 2 == 0 && p.input_align >= 4; }

// Input rows copied by 16 bytes: NCHW rows of whole 16-byte chunks, aligned.
bool vec_ok(const Problem& p) {
  const int per16 = p.dtype == ScalarType::Float ? 4 : 8;
  return !p.nhwc && p.W % per16 == 0 && p.input_align >= 16;
}

// float32 on the wgmma kernel (dy staged by 16-byte copies), else on mma.sync.
bool fp32_on_wgmma(const Problem& p) { return p.dev.sm90a && p.grad_output_align >= 16; }

// Float images of at most 256 output pixels (q: one slice's problem) go to
// cuDNN fp32-accurate, where the 3xFP16 kernel's per-unit costs outweigh
// its products and cuDNN's full-fp32 kernel is the quicker, and in TF32 but
// for 3 channels of 64 or 96 filters on wgmma: there alexop's kernel beats
// cuDNN's implicit GEMM (and its layout copy); slices, padded copies and the
// mma.sync kernel were not measured at these sizes (docs/perf-history.md,
// S59).
bool small_images(const Problem& p, const Problem& q) {
  const bool measured_tf32 = p.C == kC && p.K == q.K && fp32_on_wgmma(q);
  return q.dtype == ScalarType::Float && q.P * q.Q <= 256 && (cudnn_fp32(q) || !measured_tf32);
}

// Output pixels over the batch: the reduction's length.
int64_t pixels(const Problem& p) { return p.N * p.P * p.Q; }

// 4 to 16 channels as slices of 3, by what cuDNN runs in their place
// (docs/design.md says where that was timed); never for one small image (the
// slices' launches cost more). float32: fewer than 64 filters (a zero-padded
// filter slice) only for NCHW from 2^17 output pixels; from 64 filters
// always against cuDNN's full-fp32 kernels; against its TF32 ones 64 to 96
// filters (channels_last of 64 only from 2^17 pixels: input and
// grad_output are copied first), more (several filter slices) only for
// NCHW from 2^17 pixels. 16-bit: up to 12 channels of an even width (the
// odd width's strided kernel loses) at 64 to 192 filters, at any count from
// 64 at 7 to 9 channels (cuDNN's are slow there), under 64 at 4 or 5
// channels; beyond the older rule's up to 8 channels of 64 or 96 filters,
// only from 2^16 pixels, the fewest it was timed at.
bool many_channels_pay(const Problem& p) {
  if (p.C > kMaxSlicedChannels || one_small_image(p)) return false;
  if (p.dtype == ScalarType::Float) {
    const bool many = pixels(p) >= (1 << 17);
    if (p.K < 64) return !p.nhwc && many;
    if (cudnn_fp32(p)) return true;
    return p.K <= 96 ? !p.nhwc || p.K > 64 || many : !p.nhwc && many;
  }
  if (p.C > 12 || p.W % 2 != 0) return false;
  const bool region = p.K < 64 ? p.C <= 5 : p.K <= 192 || (p.C >= 7 && p.C <= 9);
  const bool older_rule = p.C <= 8 && (p.K == 64 || p.K == 96);
  return region && (older_rule || pixels(p) >= (1 << 16));
}

// Slices of 3 input channels: 1 or 2 channels always (cuDNN's few-channel
// weight gradients are slow), 4 to 16 where many_channels_pay (or, where
// timed, wherever the kernels take them).
bool input_slices_pay(const Problem& p, bool timed) {
  if (p.C < 1) return false;
  return p.C < kC || (timed ? p.C <= kMaxSlicedChannels : many_channels_pay(p));
}

// Slices of up to 96 filters: with 3 channels always, beside input slices
// of more as many_channels_pay decided, and for 1 or 2 channels only where
// cuDNN's kernel is not full fp32 (its fp32 ones are quick there), or where
// timed.
bool filter_slices_pay(const Problem& p, bool timed) {
  if (p.K < 1 || p.K > kMaxFilters) return false;
  return p.C >= kC || timed || !cudnn_fp32(p);
}

Choice make(Kernel k, const Problem& p, MathMode mode) {
  Choice c;
  c.kernel = k;
  c.dtype = p.dtype;
  c.mode = mode;
  c.channels = (int)p.K;
  c.input_channels = (int)p.C;
  c.vec = k == Kernel::kGmma && vec_ok(p);
  c.transposed = p.transposed;
  c.dy_nhwc = (k == Kernel::kPlanes || k == Kernel::kGmma) && p.grad_output_nhwc;
  return c;
}

Choice select_fp32(const Problem& p) {
  const bool accurate = p.math == Fp32Math::kAccurate;
  if (fp32_on_wgmma(p)) return make(Kernel::kGmma, p, accurate ? k3xFp16 : kTf32);
  return make(Kernel::kMmaSync, p, accurate ? k3xTf32 : kTf32);
}

Choice select_16(const Problem& p) {
  if (planes_take(p)) return make(Kernel::kPlanes, p, k16);
  if (p.dev.sm90a && p.grad_output_align >= 16 && pairs_ok(p)) return make(Kernel::kGmma, p, k16);
  if (pairs_ok(p) && p.grad_output_align >= 4) return make(Kernel::kMmaSyncPairs, p, k16);
  return make(Kernel::kMmaSyncStrided, p, k16);
}

constexpr const char* kModeNames[] = {"3xtf32", "tf32", "", "3xfp16"};
constexpr const char* kKernelNames[] = {"wgrad_generic", "wgrad_planes", "wgrad_gmma",
                                        "wgrad_mma",     "wgrad_mma",    "wgrad_mma", "wgrad_cudnn"};

// q's input as a fresh NCHW copy of its C channels and width, which the
// op makes (packed, widened, a slice's copy) before the kernel reads it.
void fresh_nchw_input(Problem& q) {
  q.nhwc = false;
  q.transposed = false;
  q.input_stride0 = q.C * q.H * q.W;
  q.input_align = 16;
}

// The choice, with slices for 4-16 channels by many_channels_pay or, where
// timed, wherever the kernels take them.
Choice choose(const Problem& p, bool timed) {
  Choice c;
  c.dtype = p.dtype;
  c.transposed = p.transposed;
  if (p.dtype == ScalarType::Double) return c;
  c.kernel = Kernel::kCudnn;
  Problem q = p;
  if (p.K != 64 && p.K != 96) {
    if (!filter_slices_pay(p, timed)) return c;
    q.K = filter_width(std::min(p.K, kFilterSlice));
    q.grad_output_align = 16;  // each slice a fresh copy
  }
  const int64_t packed = images_packed(p);
  if (packed > 1) {  // a fresh NCHW copy of (N / packed) images, packed wide
    q.N = (p.N + packed - 1) / packed;
    q.W = packed_width(p.W, p.pad, packed);
    q.Q = packed_outputs(p.W, p.pad, packed);
    fresh_nchw_input(q);
    q.grad_output_nhwc = false;
    q.grad_output_align = 16;
  }
  const bool widen = packed == 1 && widen_pays(p);
  if (widen) {
    q.W += 1;
    fresh_nchw_input(q);
  }
  if (p.C < kC && planes_take(q)) {
    c = make(Kernel::kPlanes, q, k16);
  } else {
    if (p.C != kC) {
      if (!input_slices_pay(p, timed)) return c;
      // each slice an NCHW view or copy (the last with zero channels added);
      // a view's image stride is larger, taken only where it fits too
      q.C = kC;
      fresh_nchw_input(q);
    }
    if (!tc_shape(q) || small_images(p, q) || (q.dtype != ScalarType::Float && q.nhwc)) return c;
    c = q.dtype == ScalarType::Float ? select_fp32(q) : select_16(q);
    if (p.C != kC) c.slices = input_slices(p.C);
  }
  c.widened = widen;
  if (packed > 1) c.packed = (int)packed;
  if (p.K != q.K) c.filter_slices = (int)((p.K + kFilterSlice - 1) / kFilterSlice);
  return c;
}

}  // namespace

Choice select(const Problem& p) { return choose(p, false); }

bool timed(const Problem& p) {
  return p.C >= 1 && p.C <= kMaxSlicedChannels && p.dtype != ScalarType::Double;
}

Choice own(const Problem& p) { return choose(p, true); }

std::string name(const Choice& c) {
  if (c.kernel == Kernel::kGeneric || c.kernel == Kernel::kCudnn) return kKernelNames[(int)c.kernel];
  std::string s = c.slices > 0 ? slices_prefix(c.slices) : c.transposed ? "nhwc3_to_nchw+" : "";
  if (c.packed > 1) s += "pack" + std::to_string(c.packed) + "+";
  if (c.widened) s += "widen+";
  if (c.filter_slices > 0) s += "kslice" + std::to_string(kFilterSlice) + "x" + std::to_string(c.filter_slices) + "+";
  s += kKernelNames[(int)c.kernel];
  s += "_";
  s += c.mode == k16 ? (c.dtype == ScalarType::Half ? "fp16" : "bf16") : kModeNames[c.mode];
  if (c.input_channels != kC) s += "_" + std::to_string(c.input_channels) + "ch";
  if (c.kernel == Kernel::kMmaSyncPairs) s += "_pairs";
  if (c.kernel == Kernel::kMmaSyncStrided) s += "_strided";
  s += "_c" + std::to_string(c.channels);
  if (c.dy_nhwc) s += "_dynhwc";
  return c.vec ? s + "_vec" : s;
}

std::string timed_name(const Problem& p) {
  const auto c = select(p);
  if (!timed(p)) return name(c);
  const auto mine = c.kernel == Kernel::kCudnn ? own(p) : c;
  if (mine.kernel == Kernel::kCudnn) return name(mine);
  const auto cudnn = name(Choice{Kernel::kCudnn});
  return cudnn_is_guess(p.dev, c.kernel == Kernel::kCudnn) ? cudnn + "|" + name(mine) : name(mine) + "|" + cudnn;
}

}  // namespace alexop::cuda::weight_grad
