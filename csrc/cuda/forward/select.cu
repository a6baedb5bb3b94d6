// The forward's kernel choice. Decision tree, first match wins; "fits" is
// the kernel's plan (plan.h: shared memory, tile counts in 32 bits), and a
// rule whose kernel does not fit falls through to the next one, or to the
// reference kernel where it says "else generic". [why]
//
//  1. empty output                        -> none
//  2. !tc_shape                           -> generic  [outside the kernels' limits]
// float32, Fp32Math::kAccurate ("highest"):
//  3. wgmma, h3_fills                     -> gmma 3xFP16, K <= 64 | 96 in one CTA  [twice TF32's rate]
//  4. wgmma, h3_fills, K > 64             -> gmma 3xTF32, groups of 48, else generic  [3xFP16 did not fit]
//  5.                                     -> split rule, 3xTF32
// float32, Fp32Math::kBf16x3 ("high"):
//  6. wgmma, h3_fills                     -> gmma 3xFP16  [faster and more accurate than bf16x3]
//  7.                                     -> split rule, bf16x3
// split rule (split_groups): channel groups of 48, 32 or 16 where they shorten the busiest SM's
//    queue by 10%, else all K <= 96 channels in one CTA, else groups of 48 -> mma.sync, else generic
// float32, Fp32Math::kTf32 ("medium"):
//  8. wgmma, planes_shape                 -> planes TF32  [A by descriptor, no gather]
//  9. K > 96                              -> generic  [fp32 weights of K > 96 leave no room for a patch]
// 10. wgmma                               -> gmma TF32
// 11.                                     -> mma.sync TF32, else generic
// bf16 / fp16 (mode k16Pairs for NCHW of even padding: a k pair per patch word; else k16):
// 12. wgmma, planes_shape, planes16_aligned -> planes 16-bit
// 13. wgmma, staged_fills, s2d_aligned    -> space-to-depth, NCHW or channels_last  [ldmatrix, no table]
// 14. wgmma, staged_fills                 -> gmma staged, K <= 64 | 96  [stores off the MMA warps]
// 15. wgmma                               -> gmma, two CTAs an SM, K <= 64 | 96 | 128  [one's epilogue
//                                            overlaps the other's MMAs]
// 16.                                     -> mma.sync, else generic

#include "select.h"

#include "../common/constants.h"
#include "plan.h"

#include <algorithm>
#include <cstdint>

namespace alexop::cuda::forward {
namespace {

using c10::ScalarType;

// The tensor-core kernels' limits: 3 channels, at most 128 filters, padding
// and image sizes their 32-bit tile arithmetic holds, sm_80+, fp32 / 16-bit.
bool tc_shape(const Problem& p) {
  const int64_t P = p.P, Q = p.Q;
  return p.C == kC && p.N >= 1 && p.K >= 1 && p.K <= 128 && p.pad >= 0 && p.pad <= 64 && p.H <= 16384 &&
         p.W <= 16384 && P * Q <= INT32_MAX / 4 && p.dev.sm >= 80 &&
         (p.dtype == ScalarType::Float || p.dtype == ScalarType::BFloat16 || p.dtype == ScalarType::Half);
}

// 256-pixel tiles of the batch: the heuristics' measure of the work.
int64_t tiles256(const Problem& p) { return p.N * ((p.P * p.Q + 255) / 256); }

// 3xFP16 is taken where the batch gives one 256-pixel tile per 4 SMs or more.
bool h3_fills(const Problem& p) { return p.dev.sm90a && p.K <= 96 && tiles256(p) * 4 >= p.dev.num_sms; }

// The phase-plane kernels serve outputs 48 to 55 wide (AlexNet's) and K <= 96.
bool planes_shape(const Problem& p) { return p.K <= 96 && p.Q >= 48 && p.Q <= 55; }

// Their 16-bit copies move aligned 4-byte words, each within one column pair.
bool planes16_aligned(const Problem& p) { return p.pad % 2 == 0 && p.W % 2 == 0 && p.input_align >= 4; }

// The store warpgroup pays from two 256-pixel tiles an SM on (fewer: two
// CTAs of 128-pixel tiles spread a small batch over more SMs), K <= 96, and
// it writes 16-byte chunks of the output.
bool staged_fills(const Problem& p) {
  return p.K <= 96 && tiles256(p) >= 2 * p.dev.num_sms && p.output_align >= 16;
}

// The space-to-depth copy moves aligned 4-byte words of input values.
bool s2d_aligned(const Problem& p) { return p.pad % 2 == 0 && p.W % 2 == 0 && p.input_align >= 4; }

// Channel slots of one CTA holding all K channels: 64, 96 or (16-bit) 128.
int nt8_for(int64_t K) { return K <= 64 ? 8 : K <= 96 ? 12 : 16; }

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

// The split rule (3xTF32, bf16x3 on mma.sync).
Choice mma_fp32_accurate(const Problem& p, MathMode mode) {
  int c = split_groups(p);
  if (c == 0) {  // K <= 96 here
    const int nt8 = nt8_for(p.K);
    if (gather_fits(p, mode, nt8, 1, false, 1, false)) return make(Kernel::kMmaSync, p, mode, nt8);
    c = 6;  // the whole weight operand did not fit
  }
  return gather_fits(p, mode, c, 1, false, 1, false) ? make(Kernel::kMmaSync, p, mode, c) : generic(p);
}

Choice select_fp32(const Problem& p) {
  const bool wgmma = p.dev.sm90a;
  if (p.math == Fp32Math::kAccurate || p.math == Fp32Math::kBf16x3) {
    if (h3_fills(p) && gather_fits(p, k3xFp16, nt8_for(p.K), 1, true, 1, false))
      return make(Kernel::kGmma, p, k3xFp16, nt8_for(p.K));
    if (p.math == Fp32Math::kBf16x3) return mma_fp32_accurate(p, kBf16x3);
    if (h3_fills(p) && p.K > 64)
      return gather_fits(p, k3xTf32, 6, 1, true, 1, false) ? make(Kernel::kGmma, p, k3xTf32, 6) : generic(p);
    return mma_fp32_accurate(p, k3xTf32);
  }
  if (wgmma && planes_shape(p) && planes_fit(p, nt8_for(p.K))) return make(Kernel::kPlanes, p, kTf32, nt8_for(p.K));
  if (p.K > 96) return generic(p);
  if (wgmma && gather_fits(p, kTf32, nt8_for(p.K), 1, true, 1, false))
    return make(Kernel::kGmma, p, kTf32, nt8_for(p.K));
  if (gather_fits(p, kTf32, nt8_for(p.K), 1, false, 1, false)) return make(Kernel::kMmaSync, p, kTf32, nt8_for(p.K));
  return generic(p);
}

Choice select_16(const Problem& p) {
  const bool wgmma = p.dev.sm90a;
  const int nt8 = nt8_for(p.K);
  if (wgmma && planes_shape(p) && planes16_aligned(p) && planes_fit(p, nt8)) return make(Kernel::kPlanes, p, k16, nt8);
  const MathMode mode = !p.nhwc && p.pad % 2 == 0 ? k16Pairs : k16;
  if (wgmma && staged_fills(p)) {
    if (s2d_aligned(p) && plan_s2d(p, nt8).fits) return make(Kernel::kS2d, p, p.nhwc ? k16S2dNhwc : k16S2d, nt8);
    if (gather_fits(p, mode, nt8, 2, true, 1, true)) return make(Kernel::kGmmaStaged, p, mode, nt8);
  }
  if (wgmma && gather_fits(p, mode, nt8, 1, true, 2, false)) return make(Kernel::kGmma2Cta, p, mode, nt8);
  if (gather_fits(p, mode, nt8, 2, false, 1, false)) return make(Kernel::kMmaSync, p, mode, nt8);
  return generic(p);
}

// Names by MathMode and by Kernel (16-bit modes name the dtype).
constexpr const char* kModeNames[] = {"3xtf32", "tf32", "", "3xfp16", "bf16x3", "", "", ""};
constexpr const char* kKernelNames[] = {"none",           "fwd_generic",   "fwd_planes", "fwd_s2d",
                                        "fwd_gmma_staged", "fwd_gmma_2cta", "fwd_gmma",   "fwd_mma"};

}  // namespace

Choice select(const Problem& p) {
  if (p.N == 0) {
    Choice c;
    c.kernel = Kernel::kNone;
    c.dtype = p.dtype;
    return c;
  }
  if (!tc_shape(p)) return generic(p);
  return p.dtype == ScalarType::Float ? select_fp32(p) : select_16(p);
}

std::string name(const Choice& c) {
  if (c.kernel == Kernel::kNone || c.kernel == Kernel::kGeneric) return kKernelNames[(int)c.kernel];
  std::string s = std::string(kKernelNames[(int)c.kernel]) + "_";
  s += *kModeNames[c.mode] ? kModeNames[c.mode] : c.dtype == ScalarType::Half ? "fp16" : "bf16";
  if (c.mode == k16Pairs) s += "_pairs";
  if (c.mode == k16S2dNhwc) s += "_nhwc";
  const int ch = 8 * c.nt8;
  return s + (c.groups > 1 ? "_split_g" + std::to_string(ch) : "_c" + std::to_string(ch));
}

}  // namespace alexop::cuda::forward
