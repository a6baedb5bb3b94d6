// The forward kernels' tilings, computed on the host (plan.h).

#include "plan.h"

#include "gather.cuh"
#include "planes.cuh"

#include <algorithm>
#include <cstdint>

namespace alexop::cuda::forward {

namespace {

// Column blocks tried: up to 256 columns (patch rows of about 1 KB elements).
constexpr int kMaxBlockColumns = 256;

// Tiles of mt pixels in column blocks of qb output columns (Q: whole rows),
// the last one Q - (nqb - 1) qb wide: the rows of a full block's tallest tile
// bound the patch, and the last block's tiles are cut to whole rows of it
// that fit them (mt_last pixels).
struct Blocks {
  int nqb, last, rows, mt_last;
  int ph(int P) const { return 4 * (std::min(P, rows) - 1) + kR; }
  // +1 column: k16Pairs reads the zero-weight s = 11 partner of s = 10
  int pw(int qb, int shift) const { return (4 * (qb - 1) + kR + 1 + shift + 7) / 8 * 8; }
  int64_t tiles(int P, int qb, int mt) const {
    return (int64_t)(nqb - 1) * ((P * qb + mt - 1) / mt) + (P * last + mt_last - 1) / mt_last;
  }
};
Blocks blocks_of(int P, int Q, int qb, int mt) {
  Blocks b;
  b.nqb = (Q + qb - 1) / qb;
  b.last = Q - (b.nqb - 1) * qb;
  b.rows = (qb - 1 + mt - 1) / qb + 1;
  b.mt_last = b.nqb == 1 ? mt : std::min(mt, std::max(1, b.rows - 1) * b.last);
  return b;
}

// The wgmma kernels' first tile size tried: where full tiles leave SMs
// idle, halves (down to one warpgroup's m64) while the CTAs still take an
// SM each: a problem of few tiles takes about a tile's time, so twice the
// CTAs, each with fewer of its warpgroups busy, take about half.
int first_tile(const Problem& pr, const GatherConfig& c, int mt_full, int groups) {
  const auto ctas = [&](int mt) { return pr.N * ((pr.P * pr.Q + mt - 1) / mt) * groups; };
  int mt = mt_full;
  while (c.gmma && mt > 64 && ctas(mt / 2) <= pr.dev.num_sms) mt /= 2;
  return mt;
}

}  // namespace

TilePlan plan_gather(const Problem& pr, const GatherConfig& c) {
  using namespace gather;
  TilePlan g;
  const int N = (int)pr.N, W = (int)pr.W, K = (int)pr.K, pad = (int)pr.pad;
  const int P = (int)pr.P, Q = (int)pr.Q;
  g.groups = (K + c.nt8 * 8 - 1) / (c.nt8 * 8);
  const int align = 16 / c.elem_bytes;
  g.PADL = (pad + align - 1) / align * align;
  g.shift = g.PADL - pad;
  const int el = pr.nhwc ? kC : 1;  // elements per pixel in a copied row
  // The chunk kernel's 16-bit NCHW rows of other than whole 16-byte units
  // are copied as 4-byte words (gather.cuh's word_shift): patch rows of the
  // input's parity with room for the element beside each end, channels of
  // its planes' parity with room for the one-element shift.
  const bool words = c.mode == k16Chunks && !pr.nhwc && !(W % align == 0 && pr.input_align >= 16);
  auto row_elems = [&](int pw) { return words ? pw + 2 + (W & 1) : pw; };
  auto channel_elems = [&](int ph, int pw) {
    const int e = ph * row_elems(pw);
    return words ? e + 1 + (int)((e + 1 + (pr.H & pr.W)) & 1) : e;
  };

  // CPS CTAs share an SM's shared memory, each less the per-block reserve
  const int max_smem = c.cps == 1 ? (int)pr.dev.smem_optin
                                  : (int)(pr.dev.smem_per_sm / c.cps - pr.dev.smem_reserved);
  const size_t fixed = weight_smem_bytes_of(c.mode, c.nt8, c.gmma) + kKtab * 4 + kMaxK * 4;
  const int pch = chunk_channels_of(c.mode);  // channels in a patch buffer
  auto need = [&](int ph, int pw, int mt) {
    const size_t patch_bytes = (size_t)c.nbuf * pch * channel_elems(ph, pw) * c.elem_bytes;
    // the staged rows; 3xFP16: two floats per warp for the patch's largest magnitude
    return fixed + patch_bytes + (c.staged ? (size_t)staged_bytes(c.nt8, mt, c.elem_bytes) : 0) +
           (fp16x3_of(c.mode) ? 2 * kGThreads / 32 * 4 : 0);
  };
  // Whole output rows in the largest tile that fits them; where none does,
  // column blocks of a multiple of 8 columns (aligned copies) in full tiles:
  // the width that costs the fewest copy lanes, each patch row a whole
  // number of warp-wide copies (the copies' cost is their instruction
  // issue). Blocks measured slower than whole rows in half tiles (NCHW
  // fp32: three short rows a patch row), so they are the last resort.
  const int mt_full = c.gmma ? 256 / c.cps : 256;
  const int lanes = 32 * (16 / c.elem_bytes);  // elements one warp-wide 16-byte copy moves
  for (int mt = first_tile(pr, c, mt_full, g.groups); mt >= 32 && g.MT == 0; mt /= 2) {
    const Blocks rows = blocks_of(P, Q, Q, mt);
    if (need(rows.ph(P), rows.pw(Q, g.shift), mt) <= (size_t)max_smem) {
      g.MT = mt;
      g.QB = Q;
    }
  }
  if (g.MT == 0 && !c.staged) {
    int64_t best = INT64_MAX;
    for (int qb = 8; qb < Q && qb <= kMaxBlockColumns; qb += 8) {
      const Blocks b = blocks_of(P, Q, qb, mt_full);
      const int ph = b.ph(P), pw = b.pw(qb, g.shift);
      const int64_t cost = b.tiles(P, qb, mt_full) * ph * ((pw * el + lanes - 1) / lanes);
      if (need(ph, pw, mt_full) <= (size_t)max_smem && cost < best) {
        best = cost;
        g.MT = mt_full;
        g.QB = qb;
      }
    }
  }
  if (g.MT == 0) return g;
  const Blocks b = blocks_of(P, Q, g.QB, g.MT);
  g.PW = b.pw(g.QB, g.shift);
  g.CS = channel_elems(b.ph(P), g.PW);
  g.nqb = b.nqb;
  g.MTL = b.mt_last;
  g.smem = need(b.ph(P), g.PW, g.MT);
  g.ls = g.MT + 8;
  g.stage = (int)(fixed + (size_t)c.nbuf * pch * g.CS * c.elem_bytes);
  g.cstr = pr.nhwc ? 1 : g.CS;
  g.rstr = pr.nhwc ? kC * g.PW : row_elems(g.PW);
  g.sstr = pr.nhwc ? kC : 1;
  g.wcopy = std::min(W, g.PW - g.PADL);
  // 16-byte copies: rows and (one block) the copied run whole 16-byte units;
  // a block's first column 4 q0 - PADL is a multiple of 8
  g.vec = ((W * el) % align == 0 && (g.nqb > 1 || (g.wcopy * el) % align == 0) && pr.input_align >= 16) ? 1 : 0;
  g.words = words ? 1 : 0;
  if (c.mode == k16Chunks && !g.vec && !g.words) return g;  // the kernel copies 16-byte units or words
  g.tiles_blk = (P * g.QB + g.MT - 1) / g.MT;
  const int64_t per_img = b.tiles(P, g.QB, g.MT);
  const int64_t total = (int64_t)N * per_img;
  if (total > INT32_MAX) return g;
  g.tiles_per_img = (int)per_img;
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
  s.ls = s.MT + 8;  // as in plan_gather
  const int64_t need = WB + kMaxK * 4 + 2 * kS2G * gs + staged_bytes(nt8, s.MT, 2);
  if (need > pr.dev.smem_optin) return s;  // the gather kernel takes wide images
  s.gs = (int)gs;
  s.CS = kS2G * s.gs;
  s.stage = WB + kMaxK * 4 + 2 * s.CS;
  s.tiles_per_img = (P * Q + s.MT - 1) / s.MT;
  s.QB = Q;
  s.MTL = s.MT;
  s.tiles_blk = s.tiles_per_img;
  const int64_t total = (int64_t)(int)pr.N * s.tiles_per_img;
  if (total > INT32_MAX) return s;
  s.total_tiles = (int)total;
  s.smem = (size_t)s.stage + staged_bytes(nt8, s.MT, 2);
  s.grid_x = (unsigned)std::min<int64_t>(total, pr.dev.num_sms);
  s.fits = true;
  return s;
}

bool planes_fit(const Problem& pr, int nt8) {
  using namespace planes;
  const bool f32 = pr.dtype == c10::ScalarType::Float, four = !f32 && pr.C == 4;  // the 4-slot build
  const int64_t smem = f32    ? (nt8 == 8 ? Smem<float, 8>::kBytes : Smem<float, 12>::kBytes)
                       : four ? (nt8 == 8 ? Smem<__half, 8, 4>::kBytes : Smem<__half, 12, 4>::kBytes)
                              : (nt8 == 8 ? Smem<__half, 8>::kBytes : Smem<__half, 12>::kBytes);
  if (smem > pr.dev.smem_optin) return false;
  const int tiles_per_img = ((int)pr.P * kQf + kMT - 1) / kMT;
  const int64_t total = pr.N * (int64_t)tiles_per_img;
  if (total > INT32_MAX || total < pr.dev.num_sms) return false;
  // the copies' 32-bit byte offsets within an image
  return (int64_t)(four ? 4 : kC) * (int)(pr.H * pr.W) * (f32 ? 4 : 2) <= INT32_MAX;
}

}  // namespace alexop::cuda::forward
