// The forward's kernel choice. Decision tree, first match wins; "fits" is
// the kernel's plan (plan.h: shared memory, tile counts in 32 bits), and a
// choice that does not fit falls through to the next rule unless marked
// "(else cudnn)":
//
//  1. empty output                                  -> none
//  2. float64                                       -> generic   [the reference; no tensor-core kernel]
//  3. wgmma, 16-bit, 4 channels, planes4            -> planes 16-bit built for 4 channels ("_4ch"), the same
//                                                      groups, channels_last in place, an odd width on a
//                                                      widened NCHW copy [no gather]
//  4. wgmma, chunks_shape: 4 to 16 channels (float32: 1 to 16 but 3; 16-bit 1 and 2 where few16_chunks_pay),
//     TF32, 16-bit or fp32-accurate (3xFP16: up to 5 channels; one small image from 4), nhwc_copy_pays,
//     tf32_groups_pay
//                                                   -> gmma chunks, groups of 64 | 96 (| 128 16-bit), channels_last
//                                                      inputs copied to NCHW [one launch over every channel]
//  5. 16-bit, 1 or 2 channels, planes_few         -> planes built to leave the missing channels zero [no padded copy],
//                                                      channels_last inputs copied to NCHW
//  6. 1 or 2, or 4 to max_sliced_channels channels -> slices of 3 (slices_pay) + the 3-channel choice [cheaper than cuDNN's few-channel kernels]
//     (one small image: the copies' launches cost more -> cudnn, rule 7)
//  7. not a tensor-core problem (tc_shape)          -> cudnn     [outside the kernels' limits or architectures]
// float32, Fp32Math::kAccurate ("highest"):
//  8. wgmma, K <= 96, tiles fill the GPU (h3_fills) -> gmma 3xFP16, one CTA of K <= 64 | 96 [twice TF32's rate]
//  9. wgmma, K > 64, the same fill (8 did not fit)  -> gmma 3xTF32, groups of 48 (else cudnn) [B big + small for 96 does not fit]
// 10. otherwise                                     -> mma.sync 3xTF32, split rule
// float32, Fp32Math::kBf16x3 ("high"):
// 11. as 8                                          -> gmma 3xFP16 [faster and more accurate than bf16x3]
// 12. otherwise                                     -> mma.sync bf16x3, split rule
// split rule: channel groups of 48, 32 or 16 where split_cost says they
//  shorten the busiest SM's queue by 10%, else all channels in one group
//  (K <= 96; groups of 48 where that does not fit)  -> mma.sync (else cudnn)
// float32, Fp32Math::kTf32 ("medium"):
// 13. wgmma, planes_shape                           -> planes TF32, groups of <= 96 [no gather: A by descriptor]
// 14. wgmma                                         -> gmma TF32, groups of 64 | 96
// 15. otherwise                                     -> mma.sync TF32, groups of 64 | 96 (else cudnn)
// bf16 / fp16 (mode: k16Pairs for NCHW of even padding, else k16):
// 16. wgmma, planes_shape, planes16_aligned         -> planes 16-bit, the same groups
//     (odd width, even padding: on a copy one zero column wider, planes_widen_pays)
//     NCHW rows not of whole 16-byte units: 17-19 on a copy of rows widened to
//     whole units where gather16_widen_pays and the widened rows take 17-18
//     (staged_fills) or 19
// 17. wgmma, staged_fills, s2d_aligned              -> space-to-depth, NCHW or channels_last [ldmatrix, no table]
// 18. wgmma, staged_fills                           -> gmma staged, one CTA of K <= 64 | 96 [stores off the MMA warps]
// 19. wgmma                                         -> gmma, two CTAs an SM, groups of 64 | 96 | 128 [one's epilogue overlaps the other's MMAs]
// 20. otherwise                                     -> mma.sync, groups of 64 | 96 | 128 (else cudnn)
// mma.sync where its groups do not fit: on unmeasured architectures narrower
// groups (mma_sync), else cudnn.
// A tensor-core choice is timed against cuDNN on each problem's first call
// (timed, common/timed.h): the guess on the architectures the rules were
// measured on, the alternative to cuDNN's guess on the others
// (measured_architecture, common/device.h).

#include "select.h"

#include "../common/constants.h"
#include "plan.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>

namespace alexop::cuda::forward {
namespace {

using c10::ScalarType;

// The tensor-core kernels' limits: up to kMaxFilters filters (in channel
// groups), padding and image sizes their 32-bit tile arithmetic holds, an
// architecture they are measured on (common/device.h), fp32 / 16-bit; and 3
// channels (tc_shape), except the chunk kernels'.
bool tc_limits(const Problem& p) {
  const int64_t P = p.P, Q = p.Q;
  return p.N >= 1 && p.K >= 1 && p.K <= kMaxFilters && p.pad >= 0 && p.pad <= 64 && p.H <= 16384 &&
         p.W <= 16384 && P * Q <= INT32_MAX / 4 && tensor_core_kernels(p.dev) &&
         (p.dtype == ScalarType::Float || p.dtype == ScalarType::BFloat16 || p.dtype == ScalarType::Half);
}
bool tc_shape(const Problem& p) { return p.C == kC && tc_limits(p); }

// fp32-accurate chunks (3xFP16): a tile's fp32 accumulators take 24 wgmma
// steps a channel, and the error grows with them (docs/precision.md): up to
// 5 channels it stays near the 3-channel kernel's; beyond, the slices, each
// slice's sum added in memory, are the more accurate.
constexpr int64_t kMaxFp16x3ChunkChannels = 5;

// The phase-plane kernels serve outputs 48 to 55 wide (AlexNet's), more
// than 96 filters in groups (planes_group_width), a grid row a group.
bool planes_shape(const Problem& p) { return p.Q >= 48 && p.Q <= 55; }

// A CTA's filters, 64 or 96, for groups as wide as planes_group_width.
int planes_nt8(int64_t K) { return planes_group_width(K) <= 64 ? 8 : 12; }

// Their 16-bit copies move aligned 4-byte words, each within one column pair.
bool planes16_aligned(const Problem& p) { return p.pad % 2 == 0 && p.W % 2 == 0 && p.input_align >= 4; }

// Channel slots of one CTA: all K channels up to 64 or 96, else groups of 96
// (float32, whose B of more leaves no room for a patch) or 128 (16-bit).
int nt8_for(int64_t K) { return K <= 64 ? 8 : K <= 96 ? 12 : 16; }
int nt8_fp32(int64_t K) { return K <= 64 ? 8 : 12; }

// A fresh NCHW copy of p's input, `width` columns wide (the columns past
// p's zeros): what the chunk kernel and the 1 or 2 channel phase planes read
// of a channels_last input, and the widened planes of any.
Problem nchw_copy_problem(const Problem& p, int64_t width) {
  Problem q = p;
  q.W = width;
  q.nhwc = false;
  q.input_align = 16;
  return q;
}

// 16-bit inputs of 1 or 2 channels take the chunk kernel (one chunk) but
// where their zero-padded 3-channel copy would run the phase-plane kernel
// from an NCHW input: the planes beat it there (planes_few, no padded copy;
// a channels_last input's NCHW copy costs either kernel the same);
// elsewhere the chunk beat the copy and the 3-channel gather kernels
// (docs/perf-history.md S26).
bool few16_chunks_pay(const Problem& p) {
  Problem q = nchw_copy_problem(p, p.W);
  q.C = kC;
  return !(planes_shape(q) && planes16_aligned(q) && planes_fit(q, planes_nt8(p.K)));
}

// The phase planes of a 16-bit input of 1 or 2 channels, NCHW (a
// channels_last one copied: nchw_copy_problem), where the chunk kernel did
// not pay: the kernel leaves the missing channels' planes zero, so no
// zero-padded copy (S26: the copy took a quarter of pad3's time).
bool planes_few(const Problem& p) {
  const Problem q = p.nhwc ? nchw_copy_problem(p, p.W) : p;
  return p.dtype != ScalarType::Float && p.dev.sm90a && p.C >= 1 && p.C < kC && tc_limits(p) &&
         planes_shape(q) && planes16_aligned(q) && planes_fit(q, planes_nt8(p.K));
}

// The chunk kernel: sm_90a, 4 to kMaxSlicedChannels channels, TF32 or
// 16-bit, or fp32-accurate ("highest": 3xFP16) up to kMaxFp16x3ChunkChannels
// (one small image only from 4 channels on: there the chunks on small tiles,
// plan.cu, beat cuDNN's quick full-fp32 kernels; at 1 and 2 channels
// cuDNN's are as quick, docs/perf-history.md S58).
// Also 1 and 2 channels, whose chunks reduce over 128 or 256 slots where the
// 3-channel kernels on a zero-padded copy reduce over 368: in float32 always,
// in 16-bit where few16_chunks_pay.
bool chunks_shape(const Problem& p) {
  const bool f32 = p.dtype == ScalarType::Float;
  const bool accurate_ok = p.math == Fp32Math::kAccurate && p.C <= kMaxFp16x3ChunkChannels &&
                           (p.C > kC || !one_small_image(p));
  return p.dev.sm90a && p.C != kC && p.C <= kMaxSlicedChannels && tc_limits(p) &&
         (p.C > kC || f32 || few16_chunks_pay(p)) && (!f32 || p.math == Fp32Math::kTf32 || accurate_ok);
}

// The chunk kernel's mode: fp32-accurate, TF32 or 16-bit.
MathMode chunks_mode(const Problem& p) {
  if (p.dtype != ScalarType::Float) return k16Chunks;
  return p.math == Fp32Math::kAccurate ? k3xFp16Chunks : kTf32Chunks;
}

// The chunk kernel reads NCHW rows, so a channels_last input is copied
// first (one pass, relayout.h). Against cuDNN's channels_last kernels
// (docs/design.md says where they were timed) the copy pays up to 5
// channels; in 16-bit up to 12, and from 13 except at 64 or 128 filters,
// where cuDNN's are quick; in TF32 up to 8 channels from 17 filters, and
// beyond only where cuDNN's are slow: 16 filters, or 65 to 96 of up to 12
// channels. Against cuDNN's full-fp32 kernels it always pays.
bool nhwc_copy_pays(const Problem& p) {
  if (!p.nhwc || p.C <= 5 || chunks_mode(p) == k3xFp16Chunks) return true;
  if (p.dtype != ScalarType::Float) return p.C <= 12 || (p.K != 64 && p.K != 128);
  if (p.C <= 8) return p.K > 16;
  return p.K <= 16 || (p.K > 64 && p.K <= 96 && p.C <= 12);
}

// In TF32 each channel group repeats the patch copies and the A gather, and
// from 9 channels on cuDNN's TF32 kernels come close to one group's time: a
// last group less than half full (128 filters: 96 + 32) lost to them, and
// from 13 channels more than two groups (256, 384 filters).
bool tf32_groups_pay(const Problem& p, int nt8) {
  const int64_t width = 8 * nt8, groups = (p.K + width - 1) / width, last = p.K - (groups - 1) * width;
  return chunks_mode(p) != kTf32Chunks || p.C <= 8 || groups == 1 ||
         (2 * last > width && (p.C <= 12 || groups <= 2));
}

// 256-pixel tiles of the batch: the heuristics' measure of the work.
int64_t tiles256(const Problem& p) { return p.N * ((p.P * p.Q + 255) / 256); }

// 3xFP16 is taken where the batch gives one 256-pixel tile per 4 SMs or more
// (its weights' one scale serves one CTA of all K <= 96 channels).
bool h3_fills_groups(const Problem& p) { return p.dev.sm90a && tiles256(p) * 4 >= p.dev.num_sms; }
bool h3_fills(const Problem& p) { return h3_fills_groups(p) && p.K <= 96; }

// Input channels the slices beat cuDNN up to, by what cuDNN runs in their
// place: its full-fp32 kernels are slow at any count; its TF32 and 16-bit
// kernels win from 3 slices on. Under "high" the slices run the
// fp32-accurate kernels against cuDNN's TF32 ones, which win from 2 slices.
int64_t max_sliced_channels(const Problem& p) {
  if (p.dtype != ScalarType::Float) return 6;
  if (p.math == Fp32Math::kBf16x3) return kC;
  return p.math == Fp32Math::kAccurate ? kMaxSlicedChannels : 6;
}

// The store warpgroup pays from two 256-pixel tiles an SM on (fewer: two
// CTAs of 128-pixel tiles spread a small batch over more SMs), K <= 96, and
// it writes 16-byte chunks of the output.
bool staged_fills(const Problem& p) {
  return p.K <= 96 && tiles256(p) >= 2 * p.dev.num_sms && p.output_align >= 16;
}

// The space-to-depth copy moves aligned 4-byte words of input values.
bool s2d_aligned(const Problem& p) { return p.pad % 2 == 0 && p.W % 2 == 0 && p.input_align >= 4; }

// A 16-bit input of odd width and even padding (227 x 227 without padding:
// Caffe's AlexNet) runs the planes on a copy one zero column wider: one pass
// over the input against the gather kernels' per-fragment work. Not a
// channels_last input that fills the staged gather kernel, which reads it in
// place where the copy also transposes it (docs/perf-history.md S43).
bool planes_widen_pays(const Problem& p) {
  return p.W % 2 != 0 && p.pad % 2 == 0 && !(p.nhwc && staged_fills(p));
}

// A 16-bit row of whole 16-byte units: padded with zero columns to this
// width, a row of W values is.
int64_t units16_width(int64_t W) { return (W + 7) / 8 * 8; }

// A 16-bit NCHW row the gather kernels copy as whole 16-byte units.
bool rows16_units(const Problem& p) { return p.W % 8 == 0 && p.input_align >= 16; }

// The 3-channel gather kernels copy other NCHW rows (odd widths, an input off
// a 16-byte boundary) element by element through registers, a load each warp
// waits for; an NCHW copy of rows widened to whole units costs one pass
// instead. Worth trying where the staged kernel fills the GPU past 64 filters
// (the copy's cost per input pixel is the same for any K, the kernel's saving
// grows with it; at 64 it lost, docs/perf-history.md S46), and where too few
// tiles for the staged kernel leave each tile's serial chain the time, on
// rows wider than 64 (at 63 the copy cost what it saved, S65). Not
// channels_last rows of 3 W values: widened, they lost (S65).
bool gather16_widen_pays(const Problem& p) {
  return !p.nhwc && !rows16_units(p) && (staged_fills(p) ? p.K > 64 : p.W > 64);
}

// Other few-channel inputs run the 3-channel kernels on copies of the
// input's slices of 3 channels (the last zero-padded), where the 3-channel
// problem gets one: the copies and the partial outputs' sum cost less than
// cuDNN's few-channel convolutions, except for one small image and beyond
// max_sliced_channels.
bool slices_pay(const Problem& p) {
  return p.C >= 1 && p.C != kC && p.C <= max_sliced_channels(p) && !one_small_image(p);
}

Choice make(Kernel k, const Problem& p, MathMode mode, int nt8) {
  Choice c;
  c.kernel = k;
  c.dtype = p.dtype;
  c.mode = mode;
  c.nt8 = nt8;
  c.groups = (int)((p.K + nt8 * 8 - 1) / (nt8 * 8));
  return c;
}

Choice generic(const Problem& p) {
  Choice c;
  c.dtype = p.dtype;
  return c;
}

Choice cudnn(const Problem& p) {
  Choice c = generic(p);
  c.kernel = Kernel::kCudnn;
  return c;
}

// 16-bit inputs of 4 channels (RGBA, RGB-D) run the phase planes built for
// 4 (K = 576; 96 filters with one set of planes: the weights take 111 KB)
// where the 3-channel ones would run: the chunk kernel's A gather kept its
// tensor cores behind. A channels_last input is read in place, a pixel
// pair a 16-byte copy, where those are aligned; an odd width (one zero
// column more, as planes_widen_pays) and a channels_last input off a
// 16-byte boundary run on an NCHW copy.
Choice planes4(const Problem& p) {
  Choice c = make(Kernel::kPlanes, p, k16, planes_nt8(p.K));
  c.input_channels = 4;
  c.widened = p.W % 2 != 0;
  c.nchw_copy = p.nhwc && !c.widened && p.input_align < 16;
  const Problem q = kernel_input_problem(c, p);
  const bool ok = p.dtype != ScalarType::Float && p.dev.sm90a && p.C == 4 && tc_limits(p) && planes_shape(q) &&
                  planes16_aligned(q) && planes_fit(q, c.nt8);
  return ok ? c : cudnn(p);
}

bool gather_fits(const Problem& p, MathMode mode, int nt8, int nbuf, bool gmma, int cps, bool staged) {
  return plan_gather(p, {mode, nt8, nbuf, gmma, cps, staged, p.dtype == ScalarType::Float ? 4 : 2}).fits;
}

// The mma.sync fp32-accurate kernels split the channels into groups of 8c
// (each its own CTAs, repeating the patch copy and gather) where that
// shortens the busiest SM's queue: one 256-pixel tile of all channels costs
// a whole SM, and a small batch has too few tiles for the GPU.
constexpr double kGroupOverhead = 0.15;  // a group's repeated copy and gather, in tiles
constexpr double kSplitMargin = 0.9;     // a split must win by 10%: the estimate is rough

// Rounds of tiles on the busiest SM, times the cost of one group's tile
// relative to a whole tile (its share of the channels plus the overhead).
double split_cost(const Problem& p, int c) {
  const int64_t K = p.K, groups = (K + 8 * c - 1) / (8 * c);
  const int64_t rounds = (tiles256(p) * groups + p.dev.num_sms - 1) / p.dev.num_sms;
  return (double)rounds * ((double)std::min<int64_t>(8 * c, K) / (double)K + (groups > 1 ? kGroupOverhead : 0.0));
}

// c = 6, 4 or 2 (groups of 48, 32, 16 channels), or 0 for no split.
int split_groups(const Problem& p) {
  int best = 0;
  double best_cost = p.K <= 96 ? kSplitMargin * split_cost(p, p.K <= 64 ? 8 : 12) : 1e30;
  for (int c : {6, 4, 2}) {
    const double cc = 8 * c < p.K ? split_cost(p, c) : 1e30;
    if (cc < best_cost) {
      best = c;
      best_cost = cc;
    }
  }
  return best;
}

// The mma.sync kernel of nt8 n8 tiles a CTA where it fits; else, on an
// architecture the rules were not measured on (common/device.h: Ada and the
// RTX 50 series hold 99 KB a block; cuDNN is the guess there, and this the
// timed alternative), the widest of the narrower groups instantiated
// (narrower: each tile in more groups, repeating the patch copy) that fits;
// else cuDNN. nbuf: the kernel's stage buffers.
Choice mma_sync(const Problem& p, MathMode mode, int nt8, int nbuf, std::initializer_list<int> narrower) {
  if (gather_fits(p, mode, nt8, nbuf, false, 1, false)) return make(Kernel::kMmaSync, p, mode, nt8);
  if (!measured_architecture(p.dev.sm)) {
    for (int n : narrower) {
      if (n < nt8 && gather_fits(p, mode, n, nbuf, false, 1, false)) return make(Kernel::kMmaSync, p, mode, n);
    }
  }
  return cudnn(p);
}

// The split rule (3xTF32, bf16x3 on mma.sync).
Choice mma_fp32_accurate(const Problem& p, MathMode mode) {
  int c = split_groups(p);
  if (c == 0) {  // K <= 96 here
    const int nt8 = nt8_for(p.K);
    if (gather_fits(p, mode, nt8, 1, false, 1, false)) return make(Kernel::kMmaSync, p, mode, nt8);
    c = 6;  // the whole weight operand did not fit
  }
  return mma_sync(p, mode, c, 1, {4, 2});
}

Choice select_fp32(const Problem& p) {
  const bool wgmma = p.dev.sm90a;
  if (p.math == Fp32Math::kAccurate || p.math == Fp32Math::kBf16x3) {
    if (h3_fills(p) && gather_fits(p, k3xFp16, nt8_for(p.K), 1, true, 1, false))
      return make(Kernel::kGmma, p, k3xFp16, nt8_for(p.K));
    if (p.math == Fp32Math::kBf16x3) return mma_fp32_accurate(p, kBf16x3);
    if (h3_fills_groups(p) && p.K > 64)
      return gather_fits(p, k3xTf32, 6, 1, true, 1, false) ? make(Kernel::kGmma, p, k3xTf32, 6) : cudnn(p);
    return mma_fp32_accurate(p, k3xTf32);
  }
  if (wgmma && planes_shape(p) && planes_fit(p, planes_nt8(p.K)))
    return make(Kernel::kPlanes, p, kTf32, planes_nt8(p.K));
  const int nt8 = nt8_fp32(p.K);
  if (wgmma && gather_fits(p, kTf32, nt8, 1, true, 1, false)) return make(Kernel::kGmma, p, kTf32, nt8);
  return mma_sync(p, kTf32, nt8, 1, {8});
}

Choice select_16(const Problem& p) {
  const bool wgmma = p.dev.sm90a;
  if (wgmma && planes_shape(p) && planes16_aligned(p) && planes_fit(p, planes_nt8(p.K)))
    return make(Kernel::kPlanes, p, k16, planes_nt8(p.K));
  if (wgmma && planes_shape(p) && planes_widen_pays(p)) {
    Choice c = make(Kernel::kPlanes, p, k16, planes_nt8(p.K));
    c.widened = true;
    if (planes_fit(kernel_input_problem(c, p), planes_nt8(p.K))) return c;
  }
  if (wgmma && gather16_widen_pays(p)) {
    // kept where the widened rows run space-to-depth or the staged kernel,
    // or, on too few tiles for it, the two-CTA kernel (where the tiles fill
    // the GPU, its two CTAs an SM hide the element copies and the copy lost,
    // S46)
    Choice c = select_16(nchw_copy_problem(p, units16_width(p.W)));
    const bool staged = c.kernel == Kernel::kS2d || c.kernel == Kernel::kGmmaStaged;
    if (staged_fills(p) ? staged : c.kernel == Kernel::kGmma2Cta) {
      c.widened = true;
      return c;
    }
  }
  const int nt8 = nt8_for(p.K);
  const MathMode mode = !p.nhwc && p.pad % 2 == 0 ? k16Pairs : k16;
  if (wgmma && staged_fills(p)) {
    if (s2d_aligned(p) && plan_s2d(p, nt8).fits) return make(Kernel::kS2d, p, p.nhwc ? k16S2dNhwc : k16S2d, nt8);
    if (gather_fits(p, mode, nt8, 2, true, 1, true)) return make(Kernel::kGmmaStaged, p, mode, nt8);
  }
  if (wgmma && gather_fits(p, mode, nt8, 1, true, 2, false)) return make(Kernel::kGmma2Cta, p, mode, nt8);
  return mma_sync(p, mode, nt8, 2, {12, 8});
}

// Names by MathMode and by Kernel (16-bit modes name the dtype).
constexpr const char* kModeNames[] = {"3xtf32", "tf32", "", "3xfp16", "bf16x3", "", "", "", "tf32", "", "3xfp16"};
constexpr const char* kKernelNames[] = {"none",          "fwd_generic", "fwd_planes",      "fwd_s2d",  "fwd_gmma_staged",
                                        "fwd_gmma_2cta", "fwd_gmma",    "fwd_mma",         "fwd_gmma_chunks", "fwd_cudnn"};

}  // namespace

int64_t planes_group_width(int64_t K) {
  const int64_t groups = (K + 95) / 96;
  return ((K + groups - 1) / groups + 7) / 8 * 8;
}

Choice select(const Problem& p) {
  if (p.N == 0) {
    Choice c;
    c.kernel = Kernel::kNone;
    c.dtype = p.dtype;
    return c;
  }
  if (p.dtype == ScalarType::Double) return generic(p);
  if (const Choice c = planes4(p); c.kernel == Kernel::kPlanes) return c;
  if (chunks_shape(p) && nhwc_copy_pays(p)) {
    const MathMode mode = chunks_mode(p);
    const int nt8 = p.dtype == ScalarType::Float ? nt8_fp32(p.K) : nt8_for(p.K);
    Choice c = make(Kernel::kGmmaChunks, p, mode, nt8);
    c.nchw_copy = p.nhwc;
    if (tf32_groups_pay(p, nt8) && gather_fits(kernel_input_problem(c, p), mode, nt8, 2, true, 1, false)) return c;
  }
  if (planes_few(p)) {
    Choice c = make(Kernel::kPlanes, p, k16, planes_nt8(p.K));
    c.input_channels = (int)p.C;
    c.nchw_copy = p.nhwc;
    return c;
  }
  if (slices_pay(p)) {
    Problem q = p;
    q.C = kC;
    q.nhwc = false;  // a slice is an NCHW view or copy, 16-byte aligned
    q.input_align = 16;
    if (p.C > kC) q.output_align = 16;  // and so is a partial output
    Choice c = select(q);
    if (c.kernel == Kernel::kCudnn) return cudnn(p);
    c.slices = input_slices(p.C);
    return c;
  }
  if (!tc_shape(p)) return cudnn(p);
  return p.dtype == ScalarType::Float ? select_fp32(p) : select_16(p);
}

Problem kernel_input_problem(const Choice& c, const Problem& p) {
  if (c.widened) return nchw_copy_problem(p, c.kernel == Kernel::kPlanes ? p.W + 1 : units16_width(p.W));
  if (!c.nchw_copy) return p;
  // the chunk kernel's 16-bit rows of whole 16-byte units
  const bool units = c.kernel == Kernel::kGmmaChunks && p.dtype != ScalarType::Float;
  return nchw_copy_problem(p, units ? units16_width(p.W) : p.W);
}

namespace {

// One of alexop's tensor-core kernels (none, the reference or cuDNN).
bool tensor_core(const Choice& c) {
  return c.kernel != Kernel::kNone && c.kernel != Kernel::kGeneric && c.kernel != Kernel::kCudnn;
}

}  // namespace

bool any_output_layout(const Choice& c) { return tensor_core(c); }

bool timed(const Choice& c) { return tensor_core(c); }

std::string timed_name(const Problem& p) {
  const Choice c = select(p);
  if (!timed(c)) return name(c);
  const std::string cudnn = kKernelNames[(int)Kernel::kCudnn];
  return cudnn_is_guess(p.dev, false) ? cudnn + "|" + name(c) : name(c) + "|" + cudnn;
}

std::string name(const Choice& c) {
  if (c.kernel == Kernel::kNone || c.kernel == Kernel::kGeneric || c.kernel == Kernel::kCudnn)
    return kKernelNames[(int)c.kernel];
  std::string s = slices_prefix(c.slices) + (c.nchw_copy ? "nchw+" : "") + (c.widened ? "widen+" : "") +
                  kKernelNames[(int)c.kernel] + "_";
  s += *kModeNames[c.mode] ? kModeNames[c.mode] : c.dtype == ScalarType::Half ? "fp16" : "bf16";
  if (c.mode == k16Pairs) s += "_pairs";
  if (c.mode == k16S2dNhwc) s += "_nhwc";
  if (c.input_channels != kC) s += "_" + std::to_string(c.input_channels) + "ch";
  const int ch = 8 * c.nt8;
  return s + (c.groups > 1 ? "_split_g" + std::to_string(ch) : "_c" + std::to_string(ch));
}

}  // namespace alexop::cuda::forward
