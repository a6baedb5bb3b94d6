#pragma once
// The forward's wgmma gather kernel (sm_90a): the same tiles, patch and A
// gather as the mma.sync kernel, but the MMAs are wgmma with A from
// registers and B read by the tensor cores straight from the resident
// weights through a shared-memory descriptor. That takes the B fragment
// loads off the LSU/MIO pipe and replaces a warp's 12 HMMA per 16 pixels and
// k step by one asynchronous wgmma per warpgroup, so the gather of later
// steps overlaps the tensor work instead of competing for issue.
// 4 / CPS warpgroups per CTA; warpgroup wg (warps 4wg..4wg+3) owns pixels
// [64wg, 64wg + 64) of the tile as one m64 block, warp wq of it rows
// 16wq..16wq+15, with the same fragment layouts as mma.sync (A: m16n8k16 /
// m16n8k8, D: m16n8). Four warps per scheduler (the mma.sync kernel has two)
// hide the gather and epilogue latencies; each warp gathers only its own 16
// rows, so the A traffic is the same as with two warpgroups of 128 pixels.
//
// Variants (template arguments):
//  - 16-bit, STAGED: one CTA of four MMA warpgroups and a warpgroup of store
//    warps (gmma_shared.cuh) per SM, two patch buffers; 640 threads, so
//    registers are capped at 96 (K = 128 spills: K <= 96 only). Named
//    barriers: 1 rows staged (MMA warps arrive, store warps wait), 2 rows
//    free (the reverse), 3 the MMA warps' own per-tile barrier.
//  - 16-bit, CPS = 2: two CTAs of two warpgroups per SM, one patch buffer
//    each: one CTA's epilogue overlaps the other's MMAs.
//  - kTf32, k3xTf32 (B's big and small parts resident: twice the bytes, so
//    48-channel groups), k3xFp16: one CTA of four warpgroups.
//
// 3xFP16 (k3xFp16, fp32-accurate): the three products of 3xTF32, but fp16
// operands run the tensor cores at twice the TF32 rate, and B's big and small
// parts of 96 channels take the bytes of fp32 B, so one CTA holds them beside
// a patch. fp16 has TF32's 11 significant bits, so hi + lo keeps the same 22
// bits of each operand; its narrow exponent range is what the scaling
// handles: each tile's patch is scaled by a power of two from its largest
// finite |x| and then split in place (split_patch_fp16), the weights by one
// from theirs (weight_exp_kernel), and the outputs scaled back. Values more
// than 2^16 below their tile's (or the weights') largest keep an absolute
// error of 2^-39 of it instead of their own 22 bits.

#include "gmma_shared.cuh"

namespace alexop::cuda::forward::gather {

template <typename T, int MODE, int NT8, int NBUF, int CPS, bool STAGED = false>
__global__ void __launch_bounds__(kGThreads / CPS + (STAGED ? kStoreThreads : 0), CPS)
    conv11s4_fwd_gmma_kernel(const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(MODE != kBf16x3, "bf16x3 has no wgmma form");
  static_assert(MODE != k3xFp16 || (!STAGED && CPS == 1 && NBUF == 1), "3xFP16: one CTA, one patch buffer");
  using TA = a_type<T, MODE>;
  static_assert(!STAGED || (sizeof(T) == 2 && NBUF == 2 && CPS == 1), "staged: 16-bit, one CTA of two patch buffers");
  constexpr int NTHR = kGThreads / CPS, NWARPS = NTHR / 32;  // the MMA warps
  constexpr int NALL = NTHR + (STAGED ? kStoreThreads : 0);
  constexpr int SW = (NALL - NTHR) / 32;  // store warps
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int KS = ksteps<MODE>();
  constexpr int WB = wfrag_bytes<MODE, NT8, true>();
  constexpr int NACC = NT8 * 4;
  const int* offk = reinterpret_cast<const int*>(smem + WB);
  const float* sbias = reinterpret_cast<const float*>(smem + WB + kKtab * 4);
  T* patch0 = reinterpret_cast<T*>(smem + WB + kKtab * 4 + kMaxK * 4);
  const int buf_elems = kC * p.CS;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wg = warp >> 2, wq = warp & 3;
  init_smem<T, MODE, NT8, NBUF, NALL, table_unit(MODE), true>(p, smem);
  const int kg0 = blockIdx.y * NT8 * 8;  // this CTA's channel group: kg0 + [0, NT8 * 8)
  const int nch = min(NT8 * 8, p.K - kg0);
  if constexpr (STAGED) {
    // the store warps took part in the weight copy: it lands before they leave
    cp_async_wait_all();
    fence_proxy_async();
    __syncthreads();
    if (warp >= NWARPS) {
      store_warps<NALL, NT8>(p, smem, kg0, nch, warp - NWARPS, SW, lane);
      return;
    }
  }
  const uint64_t desc0 = gmma_desc(smem_u32(smem));
  // 3xFP16: B was scaled by 2^tw (its exponent follows the fragments)
  [[maybe_unused]] const int tw = MODE == k3xFp16 ? *reinterpret_cast<const int*>(p.wfrag + WB / 16) : 0;

  int tile = blockIdx.x;
  int buf = 0;
  if (tile < p.total_tiles) load_patch<T, NWARPS>(p, tile_geom(p, tile), patch0, warp, lane);
  cp_async_commit();

  for (; tile < p.total_tiles; tile += gridDim.x) {
    cp_async_wait_all();
    fence_proxy_async();  // the weights arrived by cp.async; wgmma reads them
    if constexpr (STAGED) asm volatile("bar.sync 3, %0;\n" ::"n"(NTHR) : "memory");
    else __syncthreads();
    const TileGeom tg = tile_geom(p, tile);
    const int next = tile + gridDim.x;
    // 3xFP16: the outputs come out scaled by 2^(ta + tw), up to 2^254 either
    // way, so they are scaled back by two normal powers of two (exact: the
    // intermediate lies between the accumulator and the output); -(ta + tw)
    // below -252 leaves nothing above fp32's smallest value anyway
    [[maybe_unused]] float unscale1 = 1.f, unscale2 = 1.f;
    if constexpr (MODE == k3xFp16) {
      const int ta = split_patch_fp16<NTHR>(p, tg, patch0, reinterpret_cast<float*>(smem + p.stage));
      const int e = max(-(ta + tw), -252), e1 = e / 2;
      unscale1 = pow2f(e1);
      unscale2 = pow2f(e - e1);
    }
    if constexpr (NBUF == 2) {
      if (next < p.total_tiles)
        load_patch<T, NWARPS>(p, tile_geom(p, next), patch0 + (buf ^ 1) * buf_elems, warp, lane);
      cp_async_commit();
    }

    const int mw = tg.m0 + wg * 64;
    // warpgroup-uniform: wgmma needs all four warps
    const bool active = (wg * 64 < p.MT) && (mw < tg.mend);
    const int mrow = mw + wq * 16 + g;  // this thread's rows: mrow, mrow + 8
    float acc[NACC];
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = 0.f;

    if (active) {
      int pb[2];
      patch_offsets<T>(p, tg, mrow, pb);
      mma_steps<TA, MODE, NT8, KS>(smem_offset(patch0 + buf * buf_elems, smem), pb, offk, desc0, t, acc);
#pragma unroll
      for (int i = 0; i < NACC; ++i) pin(acc[i]);
      if constexpr (MODE == k3xFp16) {
#pragma unroll
        for (int i = 0; i < NACC; ++i) acc[i] = acc[i] * unscale1 * unscale2;
      }
      fix_nan_d<T, NT8>(p, acc, tg, kg0, mrow, t);
    }

    if constexpr (STAGED) {
      asm volatile("bar.sync 2, %0;\n" ::"n"(NALL) : "memory");  // the store warps are done with the rows
      const int px = wg * 64 + wq * 16;  // tile pixel of this warp's fragment row 0
      // (rows hold MT pixels: a tile of MT = 32 leaves warps 2, 3 out)
      if (active && px < p.MT) stage_tile<T, NT8>(p.ysc == 1, acc, sbias, smem + p.stage, p.ls, px, lane);
      asm volatile("bar.arrive 1, %0;\n" ::"n"(NALL) : "memory");  // rows staged
      buf ^= 1;
      continue;  // the next tile's bar.sync 2 orders the store warps' reads before new rows
    }

    if constexpr (NBUF == 1) {
      __syncthreads();  // every warp is done reading the patch
      if (next < p.total_tiles) load_patch<T, NWARPS>(p, tile_geom(p, next), patch0, warp, lane);
      cp_async_commit();
    } else {
      buf ^= 1;
    }

    if (active) store_acc<T, NT8>(p, tg, acc, sbias, kg0, mrow, t);
  }
#endif
}

}  // namespace alexop::cuda::forward::gather
