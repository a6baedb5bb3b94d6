#pragma once
// Pieces the forward's wgmma kernels share (gmma.cuh, gmma_chunks.cuh,
// s2d.cuh): the weights in wgmma's layout, 3xFP16's scaling (gmma.cuh says
// why), a tile's A gather and wgmmas, its epilogue from the accumulators,
// and the staged 16-bit epilogue.
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
// bandwidth, is what they cost: hence few instructions per run. A
// channels_last output is staged as [pixel][channel] rows instead (stmatrix
// without .trans), whose rows are the output's pixels (stage_tile).

#include "gather.cuh"

#include "../common/wgmma.cuh"

namespace alexop::cuda::forward::gather {

// A operand type of a mode's wgmmas: TF32 products read fp32 words, 3xFP16 fp16 halves.
template <typename T, int MODE>
using a_type = std::conditional_t<MODE == kTf32 || MODE == k3xTf32 || MODE == kTf32Chunks, float,
                                  std::conditional_t<fp16x3_of(MODE), __half, T>>;
// Bytes a gather table entry counts (16-bit k16 elements; k16Pairs's 32-bit pairs).
__host__ __device__ constexpr int table_unit(int mode) { return mode == k16 || mode == k16Chunks ? 2 : 4; }

// B in the canonical K-major, no-swizzle layout: per k step (16 halves or 8
// tf32 = 32 bytes of k) NT8 blocks of 8 channels, each two 8 x 16-byte core
// matrices (k halves kc = 0, 1) of 128 contiguous bytes. Descriptor: leading
// (k) byte offset 128, stride (n) byte offset 256; same bytes as wfrag_bytes.
// 3xTF32 (k3xTf32) writes the big parts, then the small parts in a second block
// of the same layout. 3xFP16 (k3xFp16) does the same with fp16 halves of the
// weights scaled by 2^tw (the exponent that weight_exp_kernel wrote to *wexp).
// blockIdx.y is the channel group, as in prep_weights_kernel. The chunk
// modes lay out C channels' chunks one after another, as one reduction,
// each chunk's small parts after its own big ones (a chunk is copied whole).
template <typename T, int MODE, int NT8>
__global__ void prep_weights_gmma_kernel(const T* __restrict__ w, int K, uint4* __restrict__ out,
                                         const int* __restrict__ wexp = nullptr, int C = kC) {
  const int KS = ksteps<MODE>() * chunks_of(MODE, C);
  constexpr int EPR = std::is_same_v<a_type<T, MODE>, float> ? 4 : 8;  // elements per 16-byte core-matrix row
  const int BLOCK = KS * NT8 * 16;
  const int kg0 = blockIdx.y * NT8 * 8;
  w += (size_t)kg0 * C * kR * kR;
  K -= kg0;
  out += (size_t)blockIdx.y * BLOCK * (split_b<MODE>() ? 2 : 1);
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= BLOCK) return;
  const int nr = idx & 7, kc = (idx >> 3) & 1, nb = (idx >> 4) % NT8, ks = (idx >> 4) / NT8;
  const int n = nb * 8 + nr, k0 = ks * 2 * EPR + kc * EPR;
  uint32_t v[4], small[4];
  [[maybe_unused]] const float wscale = fp16x3_of(MODE) ? pow2f(*wexp) : 1.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (MODE == k3xTf32) {
      split_3xtf32(weight_at<T, MODE>(w, K, k0 + i, n, C), v[i], small[i]);
    } else if constexpr (fp16x3_of(MODE)) {
      split_fp16x2(wscale * weight_at<T, MODE>(w, K, k0 + 2 * i, n, C),
                   wscale * weight_at<T, MODE>(w, K, k0 + 2 * i + 1, n, C), v[i], small[i]);
    } else if constexpr (std::is_same_v<a_type<T, MODE>, float>) {
      v[i] = to_tf32(weight_at<T, MODE>(w, K, k0 + i, n, C));
    } else {
      v[i] = pack2(from_f<T>(weight_at<T, MODE>(w, K, k0 + 2 * i, n, C)),
                   from_f<T>(weight_at<T, MODE>(w, K, k0 + 2 * i + 1, n, C)));
    }
  }
  // a chunk's (or the whole reduction's) big parts, then its small parts
  const int span = chunked_of(MODE) ? ksteps<MODE>() * NT8 * 16 : BLOCK;
  const int at = split_b<MODE>() ? idx / span * 2 * span + idx % span : idx;
  out[at] = make_uint4(v[0], v[1], v[2], v[3]);
  if constexpr (split_b<MODE>()) out[at + span] = make_uint4(small[0], small[1], small[2], small[3]);
}

// Byte offsets in the patch of this thread's rows mrow, mrow + 8 (clamped
// into the tile: they stay within its loaded rows), in a patch moved by
// `moved` elements (the chunk kernel's word_shift).
template <typename T>
__device__ __forceinline__ void patch_offsets(const Params& p, const TileGeom& tg, int mrow, int (&pb)[2],
                                              int moved = 0) {
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int m = min(mrow + hh * 8, tg.mend - 1);
    const int pp = m / tg.Qb, qq = m - pp * tg.Qb;
    pb[hh] = (4 * p.rstr * (pp - tg.p_lo) + (4 * qq + p.shift) * p.sstr + moved) * (int)sizeof(T);
  }
}

// The dynamic shared memory that each forward wgmma kernel lays out as its
// own `smem`, from the same base: mma_steps reads the patch through it.
extern __shared__ __align__(16) unsigned char gather_smem[];
// Byte offset of p in a kernel's shared memory smem (mma_steps's `patch`).
template <typename T>
__device__ __forceinline__ uint32_t smem_offset(const T* p, const unsigned char* smem) {
  return (uint32_t)(reinterpret_cast<const unsigned char*>(p) - smem);
}

// A fragment of k step s (m16n8k16 / m16n8k8 order for this warp's 16 rows)
// from the patch rows at byte offsets pb of gather_smem; 3xFP16 also As, the
// small parts: a patch word is one element's (hi, lo).
template <int MODE>
__device__ __forceinline__ void gather_a(const int (&pb)[2], const int* offk, int s, int t, uint32_t (&A)[4],
                                         uint32_t (&As)[4]) {
  const int2* offk2 = reinterpret_cast<const int2*>(offk);
  auto ld32 = [&](int off) { return *reinterpret_cast<const uint32_t*>(gather_smem + off); };
  auto ld16 = [&](int off) { return (uint32_t)*reinterpret_cast<const uint16_t*>(gather_smem + off); };
  if constexpr (fp16x3_of(MODE)) {
    const int2 lo = offk2[s * 8 + t], hi = offk2[s * 8 + t + 4];
    const int2 ko[2] = {lo, hi};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int2 o = ko[e >> 1];
      const uint32_t a = ld32(pb[e & 1] + o.x), b = ld32(pb[e & 1] + o.y);
      A[e] = __byte_perm(a, b, 0x5410);
      As[e] = __byte_perm(a, b, 0x7632);
    }
  } else if constexpr (MODE == k16 || MODE == k16Chunks) {
    const int2 lo = offk2[s * 8 + t], hi = offk2[s * 8 + t + 4];
    A[0] = ld16(pb[0] + lo.x) | (ld16(pb[0] + lo.y) << 16);
    A[1] = ld16(pb[1] + lo.x) | (ld16(pb[1] + lo.y) << 16);
    A[2] = ld16(pb[0] + hi.x) | (ld16(pb[0] + hi.y) << 16);
    A[3] = ld16(pb[1] + hi.x) | (ld16(pb[1] + hi.y) << 16);
  } else {
    const int o0 = offk[s * 8 + t], o1 = offk[s * 8 + t + 4];
    A[0] = ld32(pb[0] + o0); A[1] = ld32(pb[1] + o0);
    A[2] = ld32(pb[0] + o1); A[3] = ld32(pb[1] + o1);
    if constexpr (MODE == kTf32 || MODE == kTf32Chunks) {
#pragma unroll
      for (int e = 0; e < 4; ++e) A[e] = to_tf32(__uint_as_float(A[e]));
    }
  }
}

// 3xFP16: scales the tile's patch rows (those load_patch wrote) of NCH
// channels by 2^ta, ta from their largest finite |x| (fp16_exp) but at most
// cap (zero_ta where all are zero), and replaces each fp32 x by the word of
// its fp16 parts, hi in the low half and lo in the high half, in place.
// Returns ta; ends with a barrier, so the gather may start. red: 2 * NTHR /
// 32 floats.
template <int NTHR, int NCH = kC>
__device__ __forceinline__ int split_patch_fp16(const Params& p, const TileGeom& tg, float* patch, float* red,
                                                int cap = 127, int zero_ta = 0) {
  // NCHW: one run of rows_in rows per channel, CS apart; channels_last: one
  // run of whole pixel rows. PW is a multiple of 8, so runs are float4s.
  const int run4 = tg.rows_in * (p.nhwc ? p.rstr : p.PW) / 4;
  const int n4 = (p.nhwc ? 1 : NCH) * run4;
  auto at = [&](int f) {
    const int c = NCH == 1 || f < run4 ? 0 : f < 2 * run4 ? 1 : 2;
    return reinterpret_cast<float4*>(patch + c * p.CS) + (f - c * run4);
  };
  float m = 0.f;
  for (int f = threadIdx.x; f < n4; f += NTHR) m = max_abs4(m, *at(f));
  m = block_max<NTHR>(m, red);
  if (!(m <= 3.402823466e38f)) {  // an Inf: the largest finite magnitude instead (block-uniform, rare)
    m = 0.f;
    for (int f = threadIdx.x; f < n4; f += NTHR) m = max_finite_abs4(m, *at(f));
    m = block_max<NTHR>(m, red + NTHR / 32);
  }
  const int e = m > 0.f ? min(fp16_exp(m), cap) : zero_ta;
  const float sa = pow2f(e);
  for (int f = threadIdx.x; f < n4; f += NTHR) *reinterpret_cast<uint4*>(at(f)) = split_fp16_words(*at(f), sa);
  __syncthreads();
  return e;
}

// 3xFP16: *wexp = the exponent tw that puts the largest finite |w| of the n
// weights in [2^14, 2^15) (see fp16_exp). One block.
template <int NTHR>
__global__ void __launch_bounds__(NTHR) weight_exp_kernel(const float* __restrict__ w, int n, int* __restrict__ wexp) {
  __shared__ float red[NTHR / 32];
  float m = 0.f;
  for (int i = threadIdx.x; i < n; i += NTHR) m = max_finite_abs(m, w[i]);
  m = block_max<NTHR>(m, red);
  if (threadIdx.x == 0) *wexp = fp16_exp(m);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// 3xFP16: acc times 2^d as two normal powers of two, exact unless a value
// underflows (d up to 252; below -252 nothing of fp32's range survives).
// Pinned first: the last wgmmas' results are read after their wait.
template <int NACC>
__device__ __forceinline__ void scale_acc(float* acc, int d) {
  d = max(d, -252);
  const float s1 = pow2f(d / 2), s2 = pow2f(d - d / 2);
#pragma unroll
  for (int i = 0; i < NACC; ++i) {
    pin(acc[i]);
    acc[i] = acc[i] * s1 * s2;
  }
}

// KS k steps of one warpgroup's wgmmas into acc, A gathered from the patch
// at byte `patch` of the shared memory (rows at pb in it), B from the
// weights at descriptor desc0 (3xTF32, 3xFP16:
// the small parts in a second block of KS * NT8 * 256 bytes). Each A buffer
// is refilled only after the wait that retires the wgmma reading it (ptxas
// serializes the wgmmas otherwise), AHEAD steps before its own wgmma, so the
// gather latency hides behind the queue; the fp32 modes (k8 steps) keep
// three wgmmas in flight (measured faster than two). 3xTF32 splits A into
// big (A) and small (As) parts as it is gathered. Returns with every wgmma
// retired.
// The rows' addresses are formed once and hidden from the optimizer, which
// otherwise re-associates them into every load's address (two integer ops a
// load instead of one); the descriptor moves by its low word alone.
template <typename TA, int MODE, int NT8, int KS>
__device__ __forceinline__ void mma_steps(uint32_t patch, const int (&pb)[2], const int* offk, uint64_t desc0, int t,
                                          float* acc) {
  constexpr bool kFp32 = std::is_same_v<TA, float>;  // k8 steps
  constexpr int NB = kFp32 ? 6 : 4, AHEAD = kFp32 ? 3 : 2;
  constexpr uint32_t kSmallB = KS * NT8 * 256;
  uint32_t A[NB][4], As[split_b<MODE>() ? NB : 1][4];
  int rows[2] = {(int)patch + pb[0], (int)patch + pb[1]};
  asm("" : "+r"(rows[0]), "+r"(rows[1]));
  auto fill = [&](int s, int u) {
    gather_a<MODE>(rows, offk, s, t, A[u], As[split_b<MODE>() ? u : 0]);
    if constexpr (MODE == k3xTf32) {
#pragma unroll
      for (int e = 0; e < 4; ++e) split_3xtf32(__uint_as_float(A[u][e]), A[u][e], As[u][e]);
    }
  };
#pragma unroll
  for (int u = 0; u < AHEAD; ++u) fill(u, u);
#pragma unroll 1
  for (int s = 0; s < KS; s += NB) {
#pragma unroll
    for (int u = 0; u < NB; ++u) {
      if (s + u < KS) {
        const uint64_t desc = gmma_desc_plus(desc0, (s + u) * NT8 * 256);
        gmma_fence();
        if constexpr (split_b<MODE>()) {
          // small products first, into the same fp32 accumulators
          gmma_rs<TA, NT8>(acc, As[u], desc);
          gmma_rs<TA, NT8>(acc, A[u], gmma_desc_plus(desc, kSmallB));
        }
        gmma_rs<TA, NT8>(acc, A[u], desc);
        gmma_commit();
        gmma_wait<NB - AHEAD>();
        fill(s + u + AHEAD, (u + AHEAD) % NB);
      }
    }
  }
  gmma_wait<0>();
}
#endif

// Stores a thread's accumulators (acc[4j + 2h + e]: pixel mrow + 8h of the
// tile, channel kg0 + 8j + 2t + e) plus the bias to the output at its
// strides, NCHW or channels_last (or adds them: p.accumulate).
template <typename T, int NT8>
__device__ __forceinline__ void store_acc(const Params& p, const TileGeom& tg, const float* acc, const float* sbias,
                                          int kg0, int mrow, int t) {
  const bool ok0 = mrow < tg.mend, ok1 = mrow + 8 < tg.mend;
  const size_t jstep = (size_t)8 * p.ysc;  // n8 block -> next one
  // channels kg0 + kend at most; m8: from row mrow's output to row mrow + 8's
  const int o0 = out_pixel(p, tg, mrow), kend = p.K - kg0;
  const int m8 = (out_pixel(p, tg, mrow + 8) - o0) * p.ysm;
  T* y0 = static_cast<T*>(p.y) + (size_t)tg.n * p.K * p.PQ + (size_t)(kg0 + 2 * t) * p.ysc +
          (size_t)o0 * p.ysm;
  T* y1 = y0 + p.ysc;
  // predicate-free stores unless the tile or the channel count is ragged;
  // PAIR: channels_last and K even, channels 2t and 2t + 1 in one store
  auto store = [&](auto full, auto add, auto pair) {
    using Add = decltype(add);
#pragma unroll
    for (int j = 0; j < NT8; ++j) {
      const int ch = j * 8 + 2 * t;
      const float2 bv = *reinterpret_cast<const float2*>(sbias + ch);
      if constexpr (decltype(pair)::value) {
        if (full || ch < kend) {
          if (full || ok0) put2<Add>(y0, acc[j * 4] + bv.x, acc[j * 4 + 1] + bv.y);
          if (full || ok1) put2<Add>(y0 + m8, acc[j * 4 + 2] + bv.x, acc[j * 4 + 3] + bv.y);
        }
      } else {
        if (full || ch < kend) {
          if (full || ok0) put<Add>(y0, acc[j * 4] + bv.x);
          if (full || ok1) put<Add>(y0 + m8, acc[j * 4 + 2] + bv.x);
        }
        if (full || ch + 1 < kend) {
          if (full || ok0) put<Add>(y1, acc[j * 4 + 1] + bv.y);
          if (full || ok1) put<Add>(y1 + m8, acc[j * 4 + 3] + bv.y);
        }
      }
      y0 += jstep;
      y1 += jstep;
    }
  };
  const bool pairs = p.ysc == 1 && p.K % 2 == 0;
  with_accumulate<T>(p.accumulate, [&](auto add) {
    const bool full = ok1 && kend >= NT8 * 8;
    if (pairs) {
      if (full) store(std::true_type{}, add, std::true_type{});
      else store(std::false_type{}, add, std::true_type{});
    } else {
      if (full) store(std::true_type{}, add, std::false_type{});
      else store(std::false_type{}, add, std::false_type{});
    }
  });
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
template <int NALL, int NT8>
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
      store_staged_pixels(
          st, staged_pixel_row(NT8), nch, tg.mend - tg.m0, yb, [&](int i) { return o0 + (int64_t)i * p.K; },
          pixel_piece(nch, p.K, yb + o0), 32 * worker + lane, 32 * nworkers);
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
