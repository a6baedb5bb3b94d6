#pragma once
// The forward's wgmma gather kernel for more input channels (sm_90a):
// TF32 (kTf32Chunks), 16-bit (k16Chunks) and fp32-accurate (k3xFp16Chunks)
// inputs of any channel count, NCHW. The 3-channel kernels keep the whole weight operand resident; C
// channels' weights (K = 96, 16 channels: 372 KB in 16-bit) do not fit, so
// the reduction runs over chunks of one (TF32) or two (16-bit) channels,
// each channel's 121 taps padded to 128 slots: 16 k steps a chunk, 48 KB of
// weights for 96 filters in either type. For each tile the CTA walks the
// chunks, keeping its accumulators: chunk j multiplies from one buffer of
// weights and patch while chunk j + 1's (or the next tile's first) are
// copied into the other, and the epilogue follows the last chunk.
//
// One CTA of four warpgroups an SM, as gmma.cuh's TF32 kernel: warpgroup wg
// owns pixels [64wg, 64wg + 64) of the tile, all NT8 * 8 channels of its
// group (grid y). The tile's weights are re-read from L2 for every tile
// (every CTA reads the same ones): 48 KB of a chunk per 256 pixels.
//
// 3xFP16 (k3xFp16Chunks, fp32-accurate, chunks of one channel): as gmma.cuh's
// k3xFp16, one scale for the tile's patch over all its channels, found as
// the chunks arrive: each chunk's patch is scaled by the running scale, or by
// a smaller one where its values are larger, the accumulators then scaled
// down to match (exact: powers of two).

#include "gmma_shared.cuh"

namespace alexop::cuda::forward::gather {

template <typename T, int MODE, int NT8>
__global__ void __launch_bounds__(kGThreads, 1) conv11s4_fwd_gmma_chunks_kernel(const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(chunked_of(MODE), "a chunk mode");
  using TA = a_type<T, MODE>;
  constexpr int NTHR = kGThreads, NWARPS = NTHR / 32, NCH = chunk_channels_of(MODE);
  constexpr int KS = ksteps<MODE>();                  // of one chunk
  constexpr int WB = wfrag_bytes<MODE, NT8, true>();  // one chunk's weights
  constexpr int NACC = NT8 * 4;
  extern __shared__ __align__(16) unsigned char smem[];
  const int* offk = reinterpret_cast<const int*>(smem + 2 * WB);
  const float* sbias = reinterpret_cast<const float*>(smem + 2 * WB + kKtab * 4);
  T* patch0 = reinterpret_cast<T*>(smem + 2 * WB + kKtab * 4 + kMaxK * 4);
  const int buf_elems = NCH * p.CS;
  const int nchunks = chunks_of(MODE, p.C);
  constexpr bool kFp16x3 = fp16x3_of(MODE);
  // 16-bit rows that are not whole 16-byte units are copied as words (p.words, gather.cuh)
  constexpr bool kWords = sizeof(T) == 2;
  // 3xFP16: B was scaled by 2^tw (its exponent follows every group's fragments)
  [[maybe_unused]] const int tw =
      kFp16x3 ? *reinterpret_cast<const int*>(p.wfrag + (size_t)gridDim.y * nchunks * (WB / 16)) : 0;
  [[maybe_unused]] float* red = reinterpret_cast<float*>(smem + p.stage);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int t = lane & 3, wg = warp >> 2, wq = warp & 3;
  init_smem<T, MODE, NT8, 2, NTHR, table_unit(MODE), true>(p, smem);
  const int kg0 = blockIdx.y * NT8 * 8;  // this CTA's channel group: kg0 + [0, NT8 * 8)
  const uint4* wgroup = p.wfrag + (size_t)blockIdx.y * nchunks * (WB / 16);

  // chunk ch of a tile into buffer b: its weights and its channels' patch
  auto load = [&](int tile, int ch, int b) {
    const uint4* src = wgroup + (size_t)ch * (WB / 16);
    uint4* dst = reinterpret_cast<uint4*>(smem + b * WB);
    for (int i = tid; i < WB / 16; i += NTHR) cp_async16(dst + i, src + i);
    load_patch<T, NWARPS, NCH, kWords>(p, tile_geom(p, tile), patch0 + b * buf_elems, warp, lane, ch * NCH);
    cp_async_commit();
  };

  int tile = blockIdx.x, buf = 0;
  if (tile < p.total_tiles) load(tile, 0, 0);
  for (; tile < p.total_tiles; tile += gridDim.x) {
    const TileGeom tg = tile_geom(p, tile);
    const int next = tile + gridDim.x;
    const int mw = tg.m0 + wg * 64;
    // warpgroup-uniform: wgmma needs all four warps
    const bool active = (wg * 64 < p.MT) && (mw < tg.mend);
    const int mrow = mw + wq * 16 + (lane >> 2);  // this thread's rows: mrow, mrow + 8
    int pb[2];
    patch_offsets<T>(p, tg, mrow, pb, kWords ? word_shift<T>(p, tg) : 0);
    float acc[NACC];
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = 0.f;
    [[maybe_unused]] int ta = 127;  // 3xFP16: the tile's scale so far (none yet)
#pragma unroll 1
    for (int ch = 0; ch < nchunks; ++ch) {
      // this chunk's copies have landed, and every warpgroup's wgmmas of the
      // last chunk have retired: its buffer may be written again
      cp_async_wait_all();
      if (kWords && p.words) clear_word_ends<T, NWARPS, NCH>(p, tg, patch0 + buf * buf_elems, warp, lane, ch * NCH);
      fence_proxy_async();
      __syncthreads();
      if constexpr (kFp16x3) {
        float* chunk = reinterpret_cast<float*>(patch0 + buf * buf_elems);
        const int e = split_patch_fp16<NTHR, NCH>(p, tg, chunk, red, ta, ta);
        if (e < ta) scale_acc<NACC>(acc, e - ta);
        ta = e;
      }
      if (ch + 1 < nchunks) load(tile, ch + 1, buf ^ 1);
      else if (next < p.total_tiles) load(next, 0, buf ^ 1);
      if (active)
        mma_steps<TA, MODE, NT8, KS>(smem_offset(patch0 + buf * buf_elems, smem), pb, offk,
                                     gmma_desc(smem_u32(smem + buf * WB)), t, acc);
      buf ^= 1;
    }
    if (active) {
#pragma unroll
      for (int i = 0; i < NACC; ++i) pin(acc[i]);
      // 3xFP16: the outputs came out scaled by 2^(ta + tw)
      if constexpr (kFp16x3) scale_acc<NACC>(acc, -(ta + tw));
      fix_nan_d<T, NT8>(p, acc, tg, kg0, mrow, t);
      store_acc<T, NT8>(p, tg, acc, sbias, kg0, mrow, t);
    }
  }
#endif
}

}  // namespace alexop::cuda::forward::gather
