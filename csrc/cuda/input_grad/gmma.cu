// The input gradient on wgmma (sm_90a; bf16 / fp16): the same tiles, dy
// window and A gather as the mma.sync kernel, the MMAs as wgmma with A from
// registers (wgmma's per-warp A / D fragments are the mma.sync m16n8k8 /
// m16n8k16 ones) and B read by the tensor cores from resident weights in the
// canonical layout. 640 threads: four consumer warpgroups, warpgroup wg
// owning super-pixels [64 wg, 64 wg + 64) of the tile as one m64 block (warp
// wq of it rows 16 wq .. 16 wq + 15), one m64n48 wgmma per warpgroup and k
// step (tap); and one producer warpgroup that only moves dy into the stage
// buffers (see the loaders).

#include "../common/wgmma.cuh"
#include "plan.h"

namespace alexop::cuda::input_grad::phase {

// B in the canonical K-major, no-swizzle layout: per k step ks = stage * 9 +
// tap (32 bytes of k: 16 halves = the stage's channels) 6 blocks
// of 8 columns, each two 8 x 16-byte core matrices (k halves kc = 0, 1);
// descriptor LBO 128, SBO 256 (gmma_desc). Zeros where r or s > 10 or the
// channel is >= K.
template <typename T, int MODE>
__global__ void dgrad_prep_weights_gmma_kernel(const T* __restrict__ w, int K, int nstage, uint4* __restrict__ out) {
  const int block = kTaps * nstage * kGNT8 * 16;
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= block) return;
  const int nr = idx & 7, kc = (idx >> 3) & 1, nb = (idx >> 4) % kGNT8, ks = (idx >> 4) / kGNT8;
  const int st = ks / kTaps, tap = ks - st * kTaps;
  const int n = nb * 8 + nr;
  auto val = [&](int ch) { return phase_weight(w, K, tap, n, ch); };
  static_assert(MODE == k16, "16-bit only");
  uint32_t v[4];
  const int ch0 = st * 16 + kc * 8;
#pragma unroll
  for (int e = 0; e < 4; ++e) v[e] = pack2(from_f<T>(val(ch0 + 2 * e)), from_f<T>(val(ch0 + 2 * e + 1)));
  out[idx] = make_uint4(v[0], v[1], v[2], v[3]);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Why a producer warpgroup: with the mma.sync kernel's register-staged dy
// loads in the consumers (512 threads), ~400 instructions of loads and
// address arithmetic per stage sat between the barrier and the next wgmma,
// in every warp, and a wgmma fence may also wait for the loads in flight
// (not measured). A producer warpgroup was faster. Producer thread i
// handles window cells i, i + 128,
// i + 256, i + 384 (loader_offsets).
//
// 16-bit producer, register-staged: loads a stage's 16 channels as channel
// pairs (lo = even channel) one stage ahead, stores them before the barrier.
// (cp.async cannot build the pairs: 2-byte elements. Interleaving dy into
// pair words first and copying those by cp.async measured slower, the
// extra pass included.)
// (The loads keep their own loop, not load_stage: __ldg and the image base
// held per tile are what the harness measured.)
template <typename T>
struct GLoader16 {
  static constexpr int kLPT = loads_per_thread<kGProdThreads>();
  int off[kLPT];  // cell offset in a channel plane; -1 zero cell, -2 no cell
  const T* img;   // dy of the cursor's image
  StageRegs<kGProdThreads> r;

  __device__ __forceinline__ void set_tile(const Params& p, const TileGeom& tg, int ptid) {
    loader_offsets<kGProdThreads>(p, tg, ptid, off);
    img = static_cast<const T*>(p.dy) + (size_t)tg.n * p.K * p.PQ;
  }
  __device__ __forceinline__ void load(const Params& p, int st) {
    const int ch0 = st * 16;
    const int nch = min(16, p.K - ch0);  // channels of this stage that exist
    const T* src = img + (size_t)ch0 * p.PQ;
#pragma unroll
    for (int u = 0; u < kLPT; ++u) {
      const bool ok = off[u] >= 0;
      const uint16_t* q16 = reinterpret_cast<const uint16_t*>(src + (ok ? off[u] : 0));
#pragma unroll
      for (int pl = 0; pl < kPlanes; ++pl) {
        const uint32_t lo = (ok && 2 * pl < nch) ? __ldg(q16 + (size_t)(2 * pl) * p.PQ) : 0u;
        const uint32_t hi = (ok && 2 * pl + 1 < nch) ? __ldg(q16 + (size_t)(2 * pl + 1) * p.PQ) : 0u;
        r.w[u][pl] = lo | (hi << 16);
      }
    }
  }
  __device__ __forceinline__ void store(uint32_t* buf, int ptid) const {
    store_stage<kGProdThreads>(r, buf, ptid, off);
  }
};

// A lane's two super-pixels, rows g and g + 8 of the m16 block at tile-local
// super-pixel ml0: sp = word offset in the window (plane t) for the A gather;
// (y0, x0) = dx position of phase (0, 0) of the one whose epilogue the lane
// writes (row t & 1), y0 very negative where it lies past the tile or band
// (its gather then reads a valid dummy cell).
struct LanePixels {
  int sp[2];
  int y0, x0;
};
__device__ __forceinline__ LanePixels lane_pixels(const Params& p, const TileGeom& tg, int ml0, int g, int t) {
  LanePixels r{};
  const int bandpix = p.PS * p.TQ;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int ml = ml0 + h * 8 + g;
    const int mb = tg.m0 + ml;
    const int prel = mb / p.TQ, qrel = mb - prel * p.TQ;
    const bool valid = ml < p.MT && mb < bandpix && tg.qb + qrel < p.QS;
    const int off = valid ? (prel - tg.prel_lo + 2) * p.RSW + qrel + 2 : 2 * p.RSW + 2;
    r.sp[h] = t * kCHS + off;
    if (h == (t & 1)) {
      r.y0 = valid ? 4 * (p.P0s + prel) - p.pad : INT32_MIN / 2;
      r.x0 = 4 * (p.Q0s + tg.qb + qrel) - p.pad;
    }
  }
  return r;
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// Consumer pipeline, per warpgroup: k step s (stage s / 9, tap s % 9) is
// gathered into A buffer s % NB two steps ahead, right after the wait that
// retires the last wgmma that read that buffer (refilling it earlier makes
// ptxas serialize the wgmmas). One CTA barrier per stage, at tap 7 (after
// its wgmma, before the gather of the next stage's tap 0): the window of
// stage j is read only between the barriers of stages j - 1 and j; the
// producer has it in place (stored) before the barrier of stage j - 1 and
// refills its buffer only after the barrier of stage j. The schedule runs on across tiles (the
// producer's cursor walks tile by tile, stage by stage); each tile's first
// two gathers follow its predecessor's epilogue. Warpgroups past the tile's
// last super-pixel still run the wgmmas (on a dummy window offset: a branch
// around them makes ptxas serialize every wgmma, C7518) and skip only the
// epilogue.
template <typename T, int MODE>
__global__ void __launch_bounds__(kGThreads, 1) conv11s4_dgrad_gmma_kernel(const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(MODE == k16, "16-bit only");
  constexpr int NACC = kGNT8 * 4;
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = warp >> 2, wq = warp & 3;
  const int g = lane >> 2, t = lane & 3;
  const size_t wbytes = gmma_wbytes(p.nstage);
  uint32_t* bufs = reinterpret_cast<uint32_t*>(smem + wbytes);

  int tile = blockIdx.x;
  if (tile >= p.total_tiles) return;
  {
    uint4* dst = reinterpret_cast<uint4*>(smem);
    for (int i = tid; i < (int)(wbytes / 16); i += kGThreads) cp_async16(dst + i, p.wfrag + i);
    cp_async_commit();
  }

  if (wg == kGConsumerWGs) {
    const int ptid = tid - kGConsumerWGs * 128;
    int ltile = tile, lst = 0;  // the producer's cursor
    {
      // ---- producer, register-staged, 2 buffers ----
      GLoader16<T> ld;
      ld.set_tile(p, tile_geom(p, tile), ptid);
      ld.load(p, 0);
      ld.store(bufs, ptid);
      bool lmore = true;  // the cursor's stage exists (and is in ld.r)
      auto advance = [&]() {
        if (++lst == p.nstage) {
          lst = 0;
          ltile += gridDim.x;
          if (ltile < p.total_tiles) ld.set_tile(p, tile_geom(p, ltile), ptid);
        }
        lmore = ltile < p.total_tiles;
        if (lmore) ld.load(p, lst);
      };
      advance();
      cp_async_wait_all();
      fence_proxy_async();
      __syncthreads();
      int gs = 0;
      for (; tile < p.total_tiles; tile += gridDim.x) {
#pragma unroll 1
        for (int st = 0; st < p.nstage; ++st, ++gs) {
          if (lmore) ld.store(bufs + ((gs + 1) & 1) * kBufWords, ptid);
          __syncthreads();
          advance();
        }
      }
    }
    return;
  }

  // ---- consumers ----
  const uint64_t desc0 = gmma_desc(smem_u32(smem));
  cp_async_wait_all();
  fence_proxy_async();  // B arrived by cp.async; the tensor cores read it
  __syncthreads();

  const int bandpix = p.PS * p.TQ;
  int cur = 0;  // buffer of the current stage (two, alternating)
  float acc[NACC];
#pragma unroll
  for (int i = 0; i < NACC; ++i) acc[i] = 0.f;
  // A register buffers (dividing the 9 taps of a stage): the gather runs two
  // k steps ahead of the wgmmas, and one wgmma group stays pending; the
  // register-staged producer leaves room for no more.
  constexpr int NB = 3, AH = 2;
  uint32_t A[NB][4];

  for (; tile < p.total_tiles; tile += gridDim.x) {
    const TileGeom tg = tile_geom(p, tile);
    // This lane's super-pixels (rows g, g + 8 of the warp's m16 block).
    const LanePixels lp = lane_pixels(p, tg, wg * 64 + wq * 16, g, t);
    const int(&sp)[2] = lp.sp;
    const int y0 = lp.y0, x0 = lp.x0;
    const bool active = wg * 64 < p.MT && tg.m0 + wg * 64 < bandpix;

    // A fragment of tap `tap` from window S into buffer u
    auto fill = [&](const uint32_t* S, int tap, int u) {
      const int toff = (tap / 3) * p.RSW + tap % 3;
      A[u][0] = S[sp[0] - toff];
      A[u][1] = S[sp[1] - toff];
      A[u][2] = S[sp[0] - toff + 4 * kCHS];
      A[u][3] = S[sp[1] - toff + 4 * kCHS];
    };
#pragma unroll
    for (int tap = 0; tap < AH; ++tap) fill(bufs + cur * kBufWords, tap, tap);

#pragma unroll 1
    for (int st = 0; st < p.nstage; ++st) {
      const int nxt = cur ^ 1;
      const uint32_t* Scur = bufs + cur * kBufWords;
      const uint32_t* Snext = bufs + nxt * kBufWords;
      cur = nxt;
      const uint64_t dst = desc0 + (uint64_t)(st * kTaps * kGNT8 * 16);
#pragma unroll
      for (int tap = 0; tap < kTaps; ++tap) {
        const int u = tap % NB;
        gmma_fence();
        gmma_rs<T, kGNT8>(acc, A[u], dst + (uint64_t)(tap * kGNT8 * 16));
        gmma_commit();
        gmma_wait<NB - AH>();
        if (tap == kTaps - AH) __syncthreads();  // the producer has the next stage in place
        const int tn = tap + AH, un = (tap + AH) % NB;
        if (tn < kTaps) fill(Scur, tn, un);
        else if (st + 1 < p.nstage) fill(Snext, tn - kTaps, un);
      }
    }

    gmma_wait<0>();
#pragma unroll
    for (int i = 0; i < NACC; ++i) pin(acc[i]);
    if (active) {
      flag_nan<NACC>(p, acc);
      T* dx = static_cast<T*>(p.dx) + (size_t)tg.n * p.dxs;
#pragma unroll
      for (int nt = 0; nt < kGNT8; ++nt) store_dx_n8(p, dx, &acc[4 * nt], nt, t, y0, x0);
    }
    // the next tile's first wgmma adds to these
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = 0.f;
  }
#endif
}

template <typename T>
void launch_gmma(const Problem& pr, const Args& a) {
  launch_gather<T>(pr, a, stage_channels<k16>(), dgrad_prep_weights_gmma_kernel<T, k16>,
                   conv11s4_dgrad_gmma_kernel<T, k16>, kGThreads);
}

template void launch_gmma<__nv_bfloat16>(const Problem&, const Args&);
template void launch_gmma<__half>(const Problem&, const Args&);

}  // namespace alexop::cuda::input_grad::phase
