#pragma once
// The forward's space-to-depth kernel (sm_90a; 16-bit, NCHW or
// channels_last, even padding and width).
//
// The gather kernels gather every A element from the patch through an offset
// table: per k step and warp, 4-8 shared loads and the table reads. Here the
// padded input is viewed as blocks of 4 x 4 pixels: block (P', Q') holds the
// 48 values (c, a, b) = x[c][4P' + a - pad][4Q' + b - pad], and output (p, q)
// is a 3 x 3 stride-1 convolution over blocks (p + i, q + j), i, j < 3, with
// weight w[c][4i + a][4j + b] (zero where 4i + a or 4j + b passes 10): K = 9
// x 48 = 432 instead of 368 (17% more MMA), but each k16 step (tap (i, j),
// channel c) of 16 pixels is 16 rows of 16 contiguous bytes: one
// ldmatrix.x4 per warp, no table.
//
// The patch holds the tile's block rows p_lo .. p_hi + 2 as 6 planes (one per
// 8-channel group g = (c, a / 2)) of [block][8 halves]; a lane's ldmatrix row
// is its pixel's block, moved by the tap: (i * PW + j) blocks further. Rows of
// 8 consecutive pixels are 128 contiguous bytes (no bank conflicts except
// where a pixel row wraps). The copy writes each 4-byte word of an input row
// pair with its own cp.async (zero-filled outside the image: the padding;
// with pad = 2 the words are only 4-byte aligned), 8 blocks x 16 bytes per
// warp instruction, and the MMA warps issue the next tile's copy one
// instruction per k step, between their wgmmas, into the second buffer.
// Everything else is the staged path of the wgmma gather kernel: a
// persistent CTA of four MMA warpgroups (m64n{64,96}k16 wgmma, B resident)
// and a store warpgroup, the same tiles of MT consecutive pixels. The copy
// and the store warps share the LSU/MIO pipe with the MMA warps' ldmatrix
// and stmatrix: that, not the gather alone, bounds both kernels.

#include "gmma_shared.cuh"

namespace alexop::cuda::forward::gather {

// The copy of one tile's block rows into the patch, one warp instruction (8
// blocks of one 8-channel plane row) per step, so that the MMA warps can
// spread it over the k steps of the tile before (faster than issuing it all
// before the MMAs). Warp w takes the plane rows u = w, w + NWARPS, ...
// (u = block row sr x 6 + plane g). The branches of a step make ptxas wait
// for each wgmma before the next (its C7513 note); a branch-free step that
// computes the next plane row's addresses every time avoids that but ran
// slower: the MMA warps' instruction issue, not wgmma overlap, is the limit
// (four warpgroups keep the tensor cores fed while each waits for its own
// wgmma).
//
// Channels_last (k16S2dNhwc): a block row is 4 pixels x 3 channels = 12
// contiguous values, so with k = (a, b, c) inside a block, planes 3G .. 3G +
// 2 are the block's input rows 2G and 2G + 1 in memory order, and every
// 4-byte word is still one aligned cp.async: the same copy and MMA loop,
// other source addresses. A word never straddles the image edge, because the
// edge falls on an even pixel of the block (pad and W even), i.e. a multiple
// of 6 values.
template <typename T, int NWARPS, int MODE>
struct S2dCopy {
  static constexpr int kPix = MODE == k16S2dNhwc ? kC : 1;  // elements per pixel step along a row
  const T* x;    // the image
  const T* src;  // input row of plane row u (any valid address when !hok)
  uint32_t dst0, dst;
  int units, u, b, p_lo, colb, pxo16;
  bool hok;

  __device__ __forceinline__ void start(const Params& p, const TileGeom& tg, uint32_t patch, int warp, int lane) {
    x = static_cast<const T*>(p.x) + (size_t)tg.n * p.xs.n;
    units = ((tg.mend - 1) / p.Q - tg.p_lo + 3) * kS2G;
    p_lo = tg.p_lo;
    dst0 = patch;
    // lane: word lane & 3 of block lane >> 2 (of each 8); NCHW: words 0, 1
    // are input row a0, 2, 3 row a0 + 1
    if constexpr (MODE == k16S2d) colb = 4 * (lane >> 2) + 2 * (lane & 1) - p.pad;
    pxo16 = (lane >> 2) * 16 + (lane & 3) * 4;
    u = warp;
    b = 0;
    if (u < units) unit(p, lane);
  }
  __device__ __forceinline__ void unit(const Params& p, int lane) {
    const int sr = u / kS2G, g = u - sr * kS2G;
    if constexpr (MODE == k16S2d) {
      const int h = 4 * (p_lo + sr) + 2 * (g & 1) + ((lane >> 1) & 1) - p.pad;
      hok = h >= 0 && h < p.H;
      src = x + ((size_t)(g >> 1) * p.H + (hok ? h : 0)) * p.W;
    } else {
      // value t of the row pair 2G, 2G + 1 (24 values): row t / 12, value e of that row
      const int G = g / 3, t = 8 * (g - 3 * G) + 2 * (lane & 3);
      const int a1 = t >= 12 ? 1 : 0, e = t - 12 * a1;
      const int h = 4 * (p_lo + sr) + 2 * G + a1 - p.pad;
      hok = h >= 0 && h < p.H;
      colb = 4 * (lane >> 2) + e / 3 - p.pad;  // the pixel of the word's first value
      src = x + (size_t)(hok ? h : 0) * p.W * kC + e % 3;
    }
    dst = dst0 + g * p.gs + sr * p.PW * 16 + pxo16;
  }
  // Issues one copy instruction; false once this warp's share is done.
  __device__ __forceinline__ bool step(const Params& p, int lane) {
    if (u >= units) return false;
    if (8 * b + (lane >> 2) < p.PW) {
      const int col = 32 * b + colb;  // even (NCHW), and W is even: both elements in or both out
      const bool ok = hok && col >= 0 && col < p.W;
      cp_async4n(dst + 128 * b, ok ? src + kPix * col : x, ok ? 4 : 0);
    }
    if (++b == (p.PW + 7) >> 3) {
      b = 0;
      u += NWARPS;
      if (u < units) unit(p, lane);
    }
    return true;
  }
};

template <typename T, int MODE, int NT8>
__global__ void __launch_bounds__(kGThreads + kStoreThreads, 1) conv11s4_fwd_s2d_kernel(const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int KS = ksteps<MODE>();
  constexpr int WB = wfrag_bytes<MODE, NT8, true>();
  constexpr int NACC = NT8 * 4;
  constexpr int NTHR = kGThreads, NALL = NTHR + kStoreThreads;
  constexpr int NWARPS = NTHR / 32, SW = kStoreThreads / 32;
  constexpr int NB = 4, AHEAD = 2;  // A register buffers, as in the kernel above
  extern __shared__ __align__(16) unsigned char smem[];
  float* sbias = reinterpret_cast<float*>(smem + WB);
  const uint32_t patch0 = smem_u32(smem + WB + kMaxK * 4);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = warp >> 2, wq = warp & 3;
  const int nch = min(NT8 * 8, p.K);

  for (int i = tid; i < WB / 16; i += NALL) cp_async16(reinterpret_cast<uint4*>(smem) + i, p.wfrag + i);
  for (int k = tid; k < kMaxK; k += NALL)
    sbias[k] = (p.bias != nullptr && k < p.K) ? to_f(static_cast<const T*>(p.bias)[k]) : 0.f;
  cp_async_wait_all();
  fence_proxy_async();  // the weights arrived by cp.async; wgmma reads them
  __syncthreads();
  if (warp >= NWARPS) {
    store_warps<NALL, NT8>(p, smem, 0, nch, warp - NWARPS, SW, lane);
    return;
  }
  const uint64_t desc0 = gmma_desc(smem_u32(smem));
  const int ws16 = p.PW * 16;

  int tile = blockIdx.x;
  int buf = 0;
  S2dCopy<T, NWARPS, MODE> copy;
  if (tile < p.total_tiles) {
    copy.start(p, tile_geom(p, tile), patch0, warp, lane);
    while (copy.step(p, lane)) {
    }
  }
  cp_async_commit();

  for (; tile < p.total_tiles; tile += gridDim.x) {
    cp_async_wait_all();
    asm volatile("bar.sync 3, %0;\n" ::"n"(NTHR) : "memory");  // this tile's patch is in place
    const TileGeom tg = tile_geom(p, tile);
    const int next = tile + gridDim.x;
    // the next tile's copy, spread over this tile's k steps
    copy.units = 0;
    if (next < p.total_tiles) copy.start(p, tile_geom(p, next), patch0 + (buf ^ 1) * p.CS, warp, lane);

    const int mw = tg.m0 + wg * 64;
    const bool active = (wg * 64 < p.MT) && (mw < tg.mend);  // warpgroup-uniform
    float acc[NACC];
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = 0.f;

    if (active) {
      // this lane's ldmatrix row: pixel (row lane & 7 of matrix mi) and the
      // matrix's k half (plane 2c or 2c + 1); clamped into the loaded rows
      const int mi = lane >> 3;
      const int o = min(mw + wq * 16 + (lane & 7) + 8 * (mi & 1), tg.mend - 1);
      const int op = o / p.Q, oq = o - op * p.Q;
      const uint32_t arow = patch0 + buf * p.CS + (mi >> 1) * p.gs + ((op - tg.p_lo) * p.PW + oq) * 16;
      uint32_t A[NB][4];
      // k16 step s = (tap (i, j) = s / 3, channel c = s % 3)
      auto fill = [&](int s, int u) {
        const int tap = s / 3, c = s % 3;
        ldsm_x4(arow + (tap / 3) * ws16 + (tap % 3) * 16 + c * 2 * p.gs, A[u]);
      };
#pragma unroll
      for (int u = 0; u < AHEAD; ++u) fill(u, u);
#pragma unroll
      for (int s = 0; s < KS; ++s) {
        gmma_fence();
        gmma_rs<T, NT8>(acc, A[s % NB], desc0 + (uint64_t)((s * NT8 * 256) >> 4));
        gmma_commit();
        gmma_wait<NB - AHEAD>();
        if (s + AHEAD < KS) fill(s + AHEAD, (s + AHEAD) % NB);
        copy.step(p, lane);
      }
      gmma_wait<0>();
#pragma unroll
      for (int i = 0; i < NACC; ++i) pin(acc[i]);
      fix_nan_d<T, NT8>(p, acc, tg, 0, mw + wq * 16 + (lane >> 2), lane & 3);
    }
    while (copy.step(p, lane)) {
    }
    cp_async_commit();

    asm volatile("bar.sync 2, %0;\n" ::"n"(NALL) : "memory");  // the store warps are done with the rows
    const int px = wg * 64 + wq * 16;
    if (active && px < p.MT) stage_tile<T, NT8>(p.ysc == 1, acc, sbias, smem + p.stage, p.ls, px, lane);
    asm volatile("bar.arrive 1, %0;\n" ::"n"(NALL) : "memory");  // rows staged
    buf ^= 1;
  }
#endif
}

}  // namespace alexop::cuda::forward::gather
