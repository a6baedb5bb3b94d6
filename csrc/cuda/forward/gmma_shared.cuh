#pragma once
// Pieces the forward's wgmma kernels share (gmma.cuh, s2d.cuh): the weights
// in wgmma's layout, and the staged 16-bit epilogue.
//
// Staged epilogue. The MMA warps write the tile's outputs (bias added,
// rounded) to shared memory as [channel][pixel] rows with stmatrix .trans
// (stage_rows, common/wgmma.cuh): one instruction stores four 8 x 8 blocks,
// each 16-byte row 8 consecutive pixels of one channel. A warpgroup of store
// warps then reads each channel's run of the tile back with 16-byte loads
// and writes it with 16-byte stores at 16-byte aligned global addresses,
// while the MMA warps go on with the next tile: stored from the
// accumulators, the epilogue sat on the MMA warps' critical path. The
// channel planes have odd length (PQ = 3025 at 224 x 224), so a run starts
// a = e mod 8 elements past a 16-byte boundary, different in every plane:
// lane i writes the aligned chunk i, the run's elements [8i - a, 8i - a +
// 8), funnelled from the staged chunks i - 1 and i, both of which it reads
// itself. The elements outside whole chunks (at most 7 at each end of a run)
// take one 2-byte store per lane. The stores share the LSU/MIO pipe with the
// MMA warps' ldmatrix and stmatrix, and that contention, not store
// bandwidth, is what they cost: hence few instructions per run.

#include "gather.cuh"

#include "../common/wgmma.cuh"

namespace alexop::cuda::forward::gather {

// B in the canonical K-major, no-swizzle layout: per k step (16 halves or 8
// tf32 = 32 bytes of k) NT8 blocks of 8 channels, each two 8 x 16-byte core
// matrices (k halves kc = 0, 1) of 128 contiguous bytes. Descriptor: leading
// (k) byte offset 128, stride (n) byte offset 256; same bytes as wfrag_bytes.
// 3xTF32 (k3xTf32) writes the big parts, then the small parts in a second block
// of the same layout. 3xFP16 (k3xFp16) does the same with fp16 halves of the
// weights scaled by 2^tw (the exponent that weight_exp_kernel wrote to *wexp).
// blockIdx.y is the channel group, as in prep_weights_kernel.
template <typename T, int MODE, int NT8>
__global__ void prep_weights_gmma_kernel(const T* __restrict__ w, int K, uint4* __restrict__ out,
                                         const int* __restrict__ wexp = nullptr) {
  constexpr int KS = ksteps<MODE>();
  constexpr int EPR = (MODE == kTf32 || MODE == k3xTf32) ? 4 : 8;  // elements per 16-byte core-matrix row
  constexpr int BLOCK = KS * NT8 * 16;
  const int kg0 = blockIdx.y * NT8 * 8;
  w += (size_t)kg0 * kKred;
  K -= kg0;
  out += (size_t)blockIdx.y * BLOCK * (split_b<MODE>() ? 2 : 1);
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= BLOCK) return;
  const int nr = idx & 7, kc = (idx >> 3) & 1, nb = (idx >> 4) % NT8, ks = (idx >> 4) / NT8;
  const int n = nb * 8 + nr, k0 = ks * 2 * EPR + kc * EPR;
  uint32_t v[4], small[4];
  [[maybe_unused]] const float wscale = MODE == k3xFp16 ? pow2f(*wexp) : 1.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (MODE == k3xTf32) {
      split_3xtf32(weight_at<T, MODE>(w, K, k0 + i, n), v[i], small[i]);
    } else if constexpr (MODE == k3xFp16) {
      split_fp16x2(wscale * weight_at<T, MODE>(w, K, k0 + 2 * i, n),
                   wscale * weight_at<T, MODE>(w, K, k0 + 2 * i + 1, n), v[i], small[i]);
    } else if constexpr (MODE == kTf32) {
      v[i] = to_tf32(weight_at<T, MODE>(w, K, k0 + i, n));
    } else {
      v[i] = pack2(from_f<T>(weight_at<T, MODE>(w, K, k0 + 2 * i, n)),
                   from_f<T>(weight_at<T, MODE>(w, K, k0 + 2 * i + 1, n)));
    }
  }
  out[idx] = make_uint4(v[0], v[1], v[2], v[3]);
  if constexpr (split_b<MODE>()) out[BLOCK + idx] = make_uint4(small[0], small[1], small[2], small[3]);
}

// The NaN values of a thread's wgmma accumulators (NT8 n8 tiles: acc[4j + 2h
// + e] is pixel mrow + 8h, channel kg0 + 8j + 2t + e) recomputed exactly.
template <typename T, int NT8>
__device__ __forceinline__ void fix_nan_d(const Params& p, float* acc, const TileGeom& tg, int kg0, int mrow, int t) {
  exact::fix_nan<NT8 * 4>(acc, [&](int i, float v) {
    const int ch = kg0 + 8 * (i >> 2) + 2 * t + (i & 1), m = mrow + 8 * ((i >> 1) & 1);
    return ch < p.K && m < tg.mend ? exact_output<T>(p, tg.n, ch, out_pixel(p, tg, m)) : v;
  });
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ uint4 lds128(const void* p) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(smem_u32(p)));
  return v;
}
__device__ __forceinline__ uint16_t lds16(const void* p) {
  uint16_t v;
  asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(v) : "r"(smem_u32(p)));
  return v;
}

// Writes staged rows st[c * ls + i] (channel c < nch, pixel i < len <= MT)
// to y0[c * PQ + i], where y0 = the output at channel 0, pixel 0 of the tile
// and e0 = its element index from a 16-byte aligned base (mod 2^32). A
// channel's run takes lpc = 2^lpc_log2 = MT / 8 lanes; worker / nworkers:
// this warp among the store warps; U channel passes at a time, so their
// latencies overlap.
template <int U>
__device__ __forceinline__ void store_staged_rows(const uint16_t* st, int ls, int lpc_log2, int nch, int len,
                                                  uint16_t* y0, uint32_t e0, int PQ, int worker, int nworkers,
                                                  int lane) {
  const int lpc = 1 << lpc_log2;
  const int sl = lane & (lpc - 1);
  const int cpw = 32 >> lpc_log2;  // channels per warp pass
  const int step = nworkers * cpw;
  for (int c0 = worker * cpw; c0 < nch; c0 += U * step) {
    uint4 cur[U], prev[U];
#pragma unroll
    for (int q = 0; q < U; ++q) {
      const uint16_t* row = st + (size_t)min(c0 + q * step + (lane >> lpc_log2), nch - 1) * ls;
      cur[q] = lds128(row + 8 * sl);
      prev[q] = lds128(row + 8 * max(sl - 1, 0));
    }
#pragma unroll
    for (int q = 0; q < U; ++q) {
      const int c = c0 + q * step + (lane >> lpc_log2);
      const bool live = c < nch;
      const int a = (int)((e0 + (uint32_t)c * (uint32_t)PQ) & 7u);
      // window element k = element 8 - a + k of w = (prev, cur): a word
      // shift b by halving steps (w[8] = 0, read only when a = 0, where the
      // funnel keeps u[j]), then a half-word funnel
      const uint32_t w[8] = {prev[q].x, prev[q].y, prev[q].z, prev[q].w, cur[q].x, cur[q].y, cur[q].z, cur[q].w};
      const int b = (8 - a) >> 1, odd = (8 - a) & 1;
      uint32_t x[8], y[6], u[5];
#pragma unroll
      for (int j = 0; j < 8; ++j) x[j] = (b & 4) ? (j + 4 < 8 ? w[j + 4] : 0u) : w[j];
#pragma unroll
      for (int j = 0; j < 6; ++j) y[j] = (b & 2) ? x[j + 2] : x[j];
#pragma unroll
      for (int j = 0; j < 5; ++j) u[j] = (b & 1) ? y[j + 1] : y[j];
      uint32_t out[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) out[j] = __funnelshift_r(u[j], u[j + 1], 16 * odd);
      uint16_t* yc = y0 + (size_t)c * PQ;
      const int lo = 8 * sl - a;  // the chunk's first element in the run
      if (live && lo >= 0 && lo + 8 <= len)
        *reinterpret_cast<uint4*>(yc + lo) = make_uint4(out[0], out[1], out[2], out[3]);
      // the rest: the head [0, h) before the first whole chunk and the tail
      // [t0, len) after the last, one element per lane
      const int h = min(len, (8 - a) & 7);
      const int t0 = h + 8 * ((len - h) >> 3);
      const int n_edge = h + len - t0;
      for (int e = sl; e < n_edge; e += lpc) {
        const int r = e < h ? e : t0 + (e - h);
        if (live) yc[r] = lds16(st + (size_t)c * ls + r);
      }
    }
  }
}

// The store warps' loop (tiles of whole rows: staged kernels take no column
// blocks): for each of this CTA's tiles, wait until its rows are staged
// (barrier 1), write them out (NCHW runs, or channels_last pixels), release
// the rows (barrier 2).
// NALL: every thread of the CTA takes part in both barriers.
template <int NALL>
__device__ __forceinline__ void store_warps(const Params& p, const unsigned char* smem, int kg0, int nch,
                                            int worker, int nworkers, int lane) {
  const uint16_t* st = reinterpret_cast<const uint16_t*>(smem + p.stage);
  uint16_t* yb = static_cast<uint16_t*>(p.y);
  const int lpc_log2 = 31 - __clz(p.MT >> 3);
  if ((int)blockIdx.x < p.total_tiles) asm volatile("bar.arrive 2, %0;\n" ::"n"(NALL) : "memory");
  for (int tile = blockIdx.x; tile < p.total_tiles; tile += gridDim.x) {
    const TileGeom tg = tile_geom(p, tile);
    asm volatile("bar.sync 1, %0;\n" ::"n"(NALL) : "memory");  // this tile's rows are staged
    if (p.ysc == 1) {  // channels_last: pixel m's channels kg0 + c at y[(n PQ + m) K + kg0 + c]
      const int64_t o0 = ((int64_t)tg.n * p.PQ + tg.m0) * p.K + kg0;
      store_staged_nhwc(st, p.ls, nch, tg.mend - tg.m0, yb, p.K, [&](int i) { return o0 + (int64_t)i * p.K; },
                        worker, nworkers, lane);
    } else {
      const size_t e0 = ((size_t)tg.n * p.K + kg0) * p.PQ + tg.m0;
      store_staged_rows<4>(st, p.ls, lpc_log2, nch, tg.mend - tg.m0, yb + e0, (uint32_t)e0, p.PQ, worker,
                           nworkers, lane);
    }
    if (tile + (int)gridDim.x < p.total_tiles) asm volatile("bar.arrive 2, %0;\n" ::"n"(NALL) : "memory");
  }
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace alexop::cuda::forward::gather
