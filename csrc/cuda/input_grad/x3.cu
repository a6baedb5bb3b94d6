// The input gradient on wgmma, fp32-accurate (3xFP16; Fp32Math::kAccurate on
// an sm_90 device with sm_90a code, K <= 96). dy and the weights are each scaled by a power of two
// and split into fp16 hi + lo parts (ptx.cuh); three products per k step,
// lo*hi + hi*lo + hi*hi, as two wgmmas with both operands in shared memory:
// A_hi x [B_hi | B_lo] (m64n96: columns 0-47 take hi*hi, 48-95 hi*lo) and
// A_lo x B_hi (m64n48 into columns 0-47). Why shared-memory A: the gather of
// the 16-bit kernel (gmma.cu) reads the same bytes from shared memory, with 8
// loads per tap and lane and the registers to hold hi and lo; a descriptor
// reads them with no instructions, if every m64 block of the tile is 64
// consecutive cells of the window. Hence this kernel's tiling:
//  - each (image, band) is a block of (PS + 2) x RSW cells, RSW = TQ + 2:
//    dy rows P0s - 2 .. P0s + PS - 1 and columns Q0s + qb - 2 .. (the halo of
//    2 rows above and 2 columns to the left that the taps reach), and the
//    blocks are stacked into one sequence of cells. Output cell o (a
//    super-pixel where its row and column are past the halo) takes tap
//    (i, j) from cell o - i RSW - j, which is never in another block; the
//    halo cells' outputs are computed and dropped (RSW / TQ and (PS + 2) /
//    PS more MMAs).
//  - a tile is 256 consecutive cells (4 warpgroups x m64) and its window the
//    2 RSW + 2 cells before them too, so a tap is a shift of the A
//    descriptor by i RSW + j cells.
// A stage (16 channels) of the window is stored as hi and lo parts, each two
// k-chunk planes of 16 bytes per cell (8 halves: channels 8 kc .. 8 kc + 7),
// so 8 consecutive cells are one core matrix (descriptor: lbo = the plane
// size, sbo = 128). B (weights) resident: per k step 12 n8 blocks, B_hi then
// B_lo, the 16-bit kernel's layout. Scales: the weights' from their largest
// finite magnitude (the prep kernel); dy's per stage of a tile, from the
// stage's largest finite magnitude. Each stage's products are flushed after
// the stage (accumulators scaled back and added, round to nearest, into an
// fp32 total, as the mma.sync kernel's 3xTF32 does), which also bounds the
// effect of the tensor cores' truncating accumulation. Every dx element is written by one
// lane of one tile: deterministic.

#include "../common/wgmma.cuh"
#include "plan.h"

namespace alexop::cuda::input_grad::phase {
namespace {

// B_hi and B_lo (scaled by 2^ew, ew from the largest finite |w|), then ew.
// One block: w is small, and its largest magnitude comes first.
template <int NTHR>
__global__ void __launch_bounds__(NTHR) dgrad_prep_weights_x3_kernel(const float* __restrict__ w, int K, int nstage,
                                                                     uint4* __restrict__ out) {
  __shared__ float red[NTHR / 32];
  float m = 0.f;
  for (int i = threadIdx.x; i < K * kC * kR * kR; i += NTHR) m = max_finite_abs(m, w[i]);
  const int ew = fp16_exp(block_max<NTHR>(m, red));
  const float sw = pow2f(ew);
  const int entries = (int)(x3_wbytes(nstage) / 16);
  for (int idx = threadIdx.x; idx < entries; idx += NTHR) {
    const int nr = idx & 7, kc = (idx >> 3) & 1, nb = (idx >> 4) % (2 * kGNT8), ks = (idx >> 4) / (2 * kGNT8);
    const int st = ks / kTaps, tap = ks - st * kTaps;
    const bool lo = nb >= kGNT8;
    const int n = (lo ? nb - kGNT8 : nb) * 8 + nr, ch0 = st * 16 + kc * 8;
    uint32_t v[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      uint32_t h, l;
      split_fp16x2(sw * phase_weight(w, K, tap, n, ch0 + 2 * e), sw * phase_weight(w, K, tap, n, ch0 + 2 * e + 1), h,
                   l);
      v[e] = lo ? l : h;
    }
    out[idx] = make_uint4(v[0], v[1], v[2], v[3]);
  }
  if (threadIdx.x == 0) *reinterpret_cast<int*>(out + entries) = ew;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// A stage's dy scale exponent from the warps' largest magnitudes in slot.
__device__ __forceinline__ int stage_exp(const float* slot) {
  const float4* s4 = reinterpret_cast<const float4*>(slot);
  float m = 0.f;
#pragma unroll
  for (int i = 0; i < kXThreads / 128; ++i) {
    const float4 v = s4[i];
    m = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
  }
  return fp16_exp(m);
}

// One thread's part of the dy window of a tile: cells lid + 128 u (u < 3),
// channels 4 q .. 4 q + 3 of a stage (q = its warpgroup), a stage ahead in
// registers.
struct XLoader {
  const float* src[kXLPT];  // dy at channel 0 of the cell's image, row and column; nullptr: a zero cell
  float v[kXLPT][4];

  __device__ __forceinline__ void set_tile(const Params& p, int tile, int lid) {
#pragma unroll
    for (int u = 0; u < kXLPT; ++u) {
      src[u] = nullptr;
      const int cell = tile * kXMT - (2 * p.RSW + 2) + lid + u * 128;
      if (cell < 0 || cell >= p.ncells) continue;
      const int b = cell / p.BLK, rem = cell - b * p.BLK;
      const int rw = rem / p.RSW, cw = rem - rw * p.RSW;
      const int n = b / p.NB, band = b - n * p.NB;
      const int row = p.P0s + rw - 2, col = p.Q0s + band * p.TQ + cw - 2;
      if (row >= 0 && row < p.P && col >= 0 && col < p.Q)
        src[u] = static_cast<const float*>(p.dy) + ((size_t)n * p.K * p.PQ + (size_t)row * p.Q + col);
    }
  }
  __device__ __forceinline__ void load(const Params& p, int st, int q) {
    const int ch0 = st * 16 + 4 * q, nch = min(4, p.K - ch0);
#pragma unroll
    for (int u = 0; u < kXLPT; ++u)
#pragma unroll
      for (int c = 0; c < 4; ++c)
        v[u][c] = (src[u] != nullptr && c < nch) ? __ldg(src[u] + (size_t)(ch0 + c) * p.PQ) : 0.f;
  }
  // This warp's largest finite magnitude of the stage into slot[warp].
  __device__ __forceinline__ void publish_max(float* slot, int warp, int lane) const {
    float m = 0.f;
#pragma unroll
    for (int u = 0; u < kXLPT; ++u)
#pragma unroll
      for (int c = 0; c < 4; ++c) m = max_finite_abs(m, v[u][c]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) slot[warp] = m;
  }
  // The stage's hi and lo parts, scaled by 2^e, into buf (8 bytes per cell
  // and part: half q & 1 of k-chunk q >> 1).
  __device__ __forceinline__ void store(const Params& p, unsigned char* buf, int e, int lid, int q) const {
    const float s = pow2f(e);
    const int off = (q >> 1) * kXPlane + (q & 1) * 8;
#pragma unroll
    for (int u = 0; u < kXLPT; ++u) {
      const int cell = lid + u * 128;
      if (cell >= p.WC) continue;
      uint32_t h0, l0, h1, l1;
      split_fp16x2(s * v[u][0], s * v[u][1], h0, l0);
      split_fp16x2(s * v[u][2], s * v[u][3], h1, l1);
      *reinterpret_cast<uint2*>(buf + off + cell * 16) = make_uint2(h0, h1);
      *reinterpret_cast<uint2*>(buf + 2 * kXPlane + off + cell * 16) = make_uint2(l0, l1);
    }
  }
};
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// Schedule: two stage buffers and one CTA barrier per stage; no producer
// warps (the split and the loads take few instructions per thread, and the
// warpgroups have them to do while their wgmmas run). Between barriers j and
// j + 1 each warpgroup issues stage j's 18 wgmmas; then, while they run, all
// threads split and store stage j + 1 (in registers since the previous
// interval) into the buffer that stage j - 1 used, and issue the loads of
// stage j + 2; then wait for the wgmmas, flush them, and publish stage j + 2's
// largest magnitude per warp in slot (j + 2) % 3. So a stage's scale is
// known to every thread when it splits the stage and when it flushes it, and
// a slot is rewritten three stages later. A tile's dx is written during its
// successor's first wgmmas.
__global__ void __launch_bounds__(kXThreads, 1) conv11s4_dgrad_x3_kernel(const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = warp >> 2, wq = warp & 3;
  const int g = lane >> 2, t = lane & 3;
  const int lid = tid & 127;
  const size_t wbytes = x3_wbytes(p.nstage);
  unsigned char* bufs = smem + wbytes;
  float* wmax = reinterpret_cast<float*>(bufs + 2 * kXStage);  // [kXMaxSlots][16 warps]
  constexpr int kSlot = kXThreads / 32;

  int tile = blockIdx.x;
  if (tile >= p.total_tiles) return;
  {
    uint4* dst = reinterpret_cast<uint4*>(smem);
    for (int i = tid; i < (int)(wbytes / 16); i += kXThreads) cp_async16(dst + i, p.wfrag + i);
    cp_async_commit();
  }
  const int ew = *reinterpret_cast<const int*>(p.wfrag + wbytes / 16);

  // the loads' cursor: a tile and stage, running a stage or two ahead
  XLoader ld;
  int ltile = tile, lst = 0;
  bool lmore = true;  // the cursor's stage exists (and is in ld.v)
  auto advance = [&]() {
    if (++lst == p.nstage) {
      lst = 0;
      ltile += gridDim.x;
      if (ltile < p.total_tiles) ld.set_tile(p, ltile, lid);
    }
    lmore = ltile < p.total_tiles;
    if (lmore) ld.load(p, lst, wg);
  };
  ld.set_tile(p, tile, lid);
  ld.load(p, 0, wg);
  ld.publish_max(wmax, warp, lane);
  cp_async_wait_all();
  __syncthreads();  // stage 0's maxima published
  ld.store(p, bufs, stage_exp(wmax), lid, wg);
  advance();
  if (lmore) ld.publish_max(wmax + kSlot, warp, lane);
  fence_proxy_async();  // B (cp.async) and stage 0 (st.shared): the tensor cores read them
  __syncthreads();

  // window cell of this warpgroup's first output cell, in 16-byte units
  const uint32_t a0 = (smem_u32(bufs) >> 4) + wg * 64 + 2 * p.RSW + 2;
  const uint64_t bdesc0 = gmma_desc(smem_u32(smem));
  constexpr uint32_t kPlaneU = kXPlane >> 4, kStageU = kXStage >> 4, kStepU = kXStepBytes >> 4;
  float acc[2 * kGNT8 * 4], tot[kGNT8 * 4];
#pragma unroll
  for (int i = 0; i < 2 * kGNT8 * 4; ++i) acc[i] = 0.f;
#pragma unroll
  for (int i = 0; i < kGNT8 * 4; ++i) tot[i] = 0.f;

  // The image and the dx position (y0, x0) of phase (0, 0) of output cell
  // `cell`, y0 very negative where that is a halo cell or past the end
  struct CellPos {
    int n, y0, x0;
  };
  auto cell_pos = [&](int cell) {
    const int b = cell / p.BLK, rem = cell - b * p.BLK;
    const int rw = rem / p.RSW, cw = rem - rw * p.RSW;
    const int n = b / p.NB, band = b - n * p.NB;
    const int R = rw - 2, Cq = cw - 2;
    const bool valid = cell < p.ncells && R >= 0 && Cq >= 0 && band * p.TQ + Cq < p.QS;
    return CellPos{valid ? n : 0, valid ? 4 * (p.P0s + R) - p.pad : INT32_MIN / 2,
                   4 * (p.Q0s + band * p.TQ + Cq) - p.pad};
  };
  // dx of tile tl from tot: the cell of this lane's row g + 8 (t & 1) of its
  // warp's 16
  auto epilogue = [&](int tl) {
    flag_nan<kGNT8 * 4>(p, tot);
    const CellPos c = cell_pos(tl * kXMT + wg * 64 + wq * 16 + (t & 1) * 8 + g);
    float* dxp = static_cast<float*>(p.dx) + (size_t)c.n * p.dxs;
#pragma unroll
    for (int nt = 0; nt < kGNT8; ++nt) store_dx_n8(p, dxp, &tot[4 * nt], nt, t, c.y0, c.x0);
#pragma unroll
    for (int i = 0; i < kGNT8 * 4; ++i) tot[i] = 0.f;
  };

  int gs = 0, prev = -1;
  for (; tile < p.total_tiles; prev = tile, tile += gridDim.x) {
#pragma unroll 1
    for (int st = 0; st < p.nstage; ++st, ++gs) {
      const uint64_t ahi = gmma_desc((a0 + (gs & 1) * kStageU) << 4, kXPlane, 128), alo = ahi + 2 * kPlaneU;
      const uint64_t bd = bdesc0 + (uint64_t)st * kTaps * kStepU;
      gmma_fence();
#pragma unroll
      for (int tap = 0; tap < kTaps; ++tap) {
        const uint32_t toff = (tap / 3) * p.RSW + tap % 3;
        gmma_ss<__half, 2 * kGNT8>(acc, ahi - toff, bd + tap * kStepU, tap > 0);  // tap 0 overwrites
        gmma_ss<__half, kGNT8>(acc, alo - toff, bd + tap * kStepU, 1);
      }
      gmma_commit();

      if (st == 0 && prev >= 0) epilogue(prev);
      if (lmore)
        ld.store(p, bufs + ((gs + 1) & 1) * kXStage, stage_exp(wmax + ((gs + 1) % kXMaxSlots) * kSlot), lid, wg);
      advance();

      gmma_wait<0>();
#pragma unroll
      for (int i = 0; i < 2 * kGNT8 * 4; ++i) pin(acc[i]);
      // dx += acc 2^-(e + ew), as two normal factors
      const int e = max(min(-(stage_exp(wmax + (gs % kXMaxSlots) * kSlot) + ew), 252), -252), e1 = e / 2;
      const float f1 = pow2f(e1), f2 = pow2f(e - e1);
#pragma unroll
      for (int i = 0; i < kGNT8 * 4; ++i) tot[i] = fmaf((acc[i] + acc[kGNT8 * 4 + i]) * f1, f2, tot[i]);

      if (lmore) ld.publish_max(wmax + ((gs + 2) % kXMaxSlots) * kSlot, warp, lane);
      fence_proxy_async();  // the stage just stored
      __syncthreads();      // this stage's buffer read, the next one stored, its successor's maxima published
    }
  }
  epilogue(prev);
#endif
}

}  // namespace

void launch_x3(const Problem& pr, const Args& a) {
  Params p;
  TORCH_INTERNAL_ASSERT(make_params_x3(pr, p), "input gradient 3xFP16: chosen where its cells overflow");
  const size_t wbytes = x3_wbytes(p.nstage), smem = x3_smem(p);
  // B, then the weights' scale exponent
  const at::Tensor wbuf = bind(a, wbytes + 16, p);
  auto stream = c10::cuda::getCurrentCUDAStream();
  dgrad_prep_weights_x3_kernel<1024><<<1, 1024, 0, stream>>>(static_cast<const float*>(a.weight.data_ptr()), p.K,
                                                            p.nstage, static_cast<uint4*>(wbuf.data_ptr()));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  allow_max_dynamic_smem(conv11s4_dgrad_x3_kernel);
  conv11s4_dgrad_x3_kernel<<<std::min(p.total_tiles, pr.dev.num_sms), kXThreads, smem, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  fix_flagged_nan(p, pr.dtype, pr.dev.num_sms);
}

}  // namespace alexop::cuda::input_grad::phase
