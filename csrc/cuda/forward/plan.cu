// The forward kernels' tilings, computed on the host (plan.h).

#include "plan.h"

#include "gather.cuh"
#include "planes.cuh"

#include <algorithm>
#include <cstdint>

namespace alexop::cuda::forward {

TilePlan plan_gather(const Problem& pr, const GatherConfig& c) {
  using namespace gather;
  TilePlan g;
  const int N = (int)pr.N, W = (int)pr.W, K = (int)pr.K, pad = (int)pr.pad;
  const int P = (int)pr.P, Q = (int)pr.Q;
  g.groups = (K + c.nt8 * 8 - 1) / (c.nt8 * 8);
  const int align = 16 / c.elem_bytes;
  g.PADL = (pad + align - 1) / align * align;
  g.shift = g.PADL - pad;
  // +1 column: k16Pairs reads the zero-weight s = 11 partner of s = 10
  g.PW = (4 * (Q - 1) + kR + 1 + g.shift + 7) / 8 * 8;
  g.wcopy = std::min(W, g.PW - g.PADL);
  const int el = pr.nhwc ? kC : 1;  // elements per pixel in a copied row
  g.vec = ((W * el) % align == 0 && (g.wcopy * el) % align == 0 && pr.input_align >= 16) ? 1 : 0;

  // CPS CTAs share an SM's shared memory, each less the per-block reserve
  const int max_smem = c.cps == 1 ? (int)pr.dev.smem_optin
                                  : (int)(pr.dev.smem_per_sm / c.cps - pr.dev.smem_reserved);
  const int WB = wfrag_bytes_of(c.mode, c.nt8, c.gmma);
  const size_t fixed = WB + kKtab * 4 + kMaxK * 4;
  for (int mt = (c.gmma ? 256 / c.cps : 256); mt >= 32; mt /= 2) {
    const int rows = std::min(P, (Q - 1 + mt - 1) / Q + 1);
    const int ph = 4 * (rows - 1) + kR;
    const int cs = ph * g.PW;
    const size_t patch_bytes = (size_t)c.nbuf * kC * cs * c.elem_bytes;
    // staged rows of MT pixels, + 8: a stride of an odd number of 16-byte
    // units keeps stmatrix and the 16-byte read-back free of bank conflicts
    const int ls = mt + 8;
    // 3xFP16: two floats per warp for the patch's largest magnitude
    const size_t need = fixed + patch_bytes + (c.staged ? (size_t)c.nt8 * 8 * ls * c.elem_bytes : 0) +
                        (c.mode == k3xFp16 ? 2 * kGThreads / 32 * 4 : 0);
    if (need <= (size_t)max_smem) {
      g.MT = mt;
      g.smem = need;
      g.CS = cs;
      g.ls = ls;
      g.stage = (int)(fixed + patch_bytes);
      g.cstr = pr.nhwc ? 1 : cs;
      g.rstr = pr.nhwc ? kC * g.PW : g.PW;
      g.sstr = pr.nhwc ? kC : 1;
      break;
    }
  }
  if (g.MT == 0) return g;
  g.tiles_per_img = (P * Q + g.MT - 1) / g.MT;
  const int64_t total = (int64_t)N * g.tiles_per_img;
  if (total > INT32_MAX) return g;
  g.total_tiles = (int)total;
  g.grid_x = (unsigned)std::min<int64_t>(total, std::max(1, pr.dev.num_sms * c.cps / g.groups));
  g.fits = true;
  return g;
}

TilePlan plan_s2d(const Problem& pr, int nt8) {
  using namespace gather;
  TilePlan s;
  const int P = (int)pr.P, Q = (int)pr.Q;
  s.PW = Q + 2;  // blocks per patch row: outputs q read blocks q .. q + 2
  const int WB = wfrag_bytes_of(k16S2d, nt8, true);
  s.MT = 256;
  const int srows = std::min(P, (Q - 1 + s.MT - 1) / Q + 1) + 2;
  const int64_t gs = (int64_t)srows * s.PW * 16;
  s.ls = s.MT + 8;  // as in plan_gather: an odd number of 16-byte units
  const int64_t need = WB + kMaxK * 4 + 2 * kS2G * gs + (int64_t)nt8 * 8 * s.ls * 2;
  if (need > pr.dev.smem_optin) return s;  // the gather kernel takes wide images
  s.gs = (int)gs;
  s.CS = kS2G * s.gs;
  s.stage = WB + kMaxK * 4 + 2 * s.CS;
  s.tiles_per_img = (P * Q + s.MT - 1) / s.MT;
  const int64_t total = (int64_t)(int)pr.N * s.tiles_per_img;
  if (total > INT32_MAX) return s;
  s.total_tiles = (int)total;
  s.smem = (size_t)s.stage + (size_t)nt8 * 8 * s.ls * 2;
  s.grid_x = (unsigned)std::min<int64_t>(total, pr.dev.num_sms);
  s.fits = true;
  return s;
}

bool planes_fit(const Problem& pr, int nt8) {
  using namespace planes;
  const bool f32 = pr.dtype == c10::ScalarType::Float;
  const int64_t smem = f32 ? (nt8 == 8 ? Smem<float, 8>::kBytes : Smem<float, 12>::kBytes)
                           : (nt8 == 8 ? Smem<__half, 8>::kBytes : Smem<__half, 12>::kBytes);
  if (smem > pr.dev.smem_optin) return false;
  const int tiles_per_img = ((int)pr.P * kQf + kMT - 1) / kMT;
  const int64_t total = pr.N * (int64_t)tiles_per_img;
  if (total > INT32_MAX || total < pr.dev.num_sms) return false;
  // the copies' 32-bit byte offsets within an image
  return (int64_t)kC * (int)(pr.H * pr.W) * (f32 ? 4 : 2) <= INT32_MAX;
}

}  // namespace alexop::cuda::forward
