// Tensor-core backward kernels for alexop::conv11s4 (C = 3, 11x11, stride 4).
//
// Weight grad: GEMM D[k][n] = sum_l dy[k][l] * im2col(x)[l][n] with k the
// output channel (M = K), n = (c, r, s) (N = 363, padded to 384; column 363
// is a column of ones so the GEMM also yields grad_bias), and l = (img, p, q)
// the huge reduction (N*P*Q). Split-K over the whole GPU: slice s of S owns a
// contiguous range of units (img, q-chunk, p) = one output row each; CTA
// (s, half) accumulates 48 (K=96) or 32 (K=64) output channels x all 384
// columns in registers (6 warps along N, mma.sync) and writes an fp32 partial;
// a second kernel sums the partials in slice order (deterministic, no
// atomics). Two CTAs per SM.
//
// Kernels, newest first:
//  - conv11s4_backward_weight_planes.cu: bf16 / fp16 on sm_90a, batches of 4
//    tiles an SM or more, the input windows read from phase planes by
//    descriptor; offered 16-bit problems first.
//  - wgrad_gmma_kernel (sm_90a builds on sm_90 devices, K = 64 or 96; fp32
//    as 3xFP16 or TF32, and 16-bit, in one body): the same split-K units and
//    reduce, the GEMM on wgmma; see "Hopper" below.
//  - wgrad_f32_kernel: fp32 (3xTF32 or TF32) elsewhere. cp.async 4-byte copies, the next
//    row prefetched while the current one is multiplied; input rows kept in a
//    16-row ring so consecutive output rows load only 4 new input rows.
//  - wgrad_h16_kernel: bf16/fp16, same pipeline with 4-byte pair copies
//    (NCHW, W even).
//  - wgrad_partial_kernel (v1): bf16/fp16, register-staged loads, any
//    strides; serves 16-bit channels_last or odd W.
// The input gradient is conv11s4_backward_input_tc.cu.

#include "common/constants.h"
#include "common/device.h"
#include "common/launch.h"
#include "common/ptx.cuh"
#include "common/wgmma.cuh"
#include "fast_kernels.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace alexop::cuda {
namespace {

constexpr int kThreads = 192;  // 6 warps, all split along N
constexpr int kNT = 8;         // n8-tiles per warp: 6 * 8 * 8 = 384 columns
constexpr int kCin = 3;
constexpr int kKsz = 11;
constexpr int kNcol = kCin * kKsz * kKsz;  // 363
constexpr int kNW = kNcol + 1;             // + the grad_bias column
constexpr int kSlots = 12;  // ring of input rows: 11 live + 1 being refilled

// v1 shared-memory tiles (16-bit storage, m16n8k16). The input patch is
// stored "phase-split": image column j of a patch row goes to phase (j & 3),
// index (j >> 2), so the stride-4 im2col gather becomes unit stride along q.
struct Geo1 {
  static constexpr int QC = 64;    // q per stage (4 k16 steps)
  static constexpr int PH = 80;    // phase row length: 40 words = 8 mod 32 banks
  static constexpr int LDA = 72;   // dy row stride: 36 words = 4 mod 32 banks
  // A second copy shifted by one element keeps every (l, l+1) pair 4-byte
  // aligned whatever the parity of the column offset; +8 halves puts the
  // copy 4 banks away from the first so the two do not collide.
  static constexpr int PSZ = kCin * kSlots * 4 * PH + 8;
  static constexpr int ONES = 2 * PSZ;
};

// The mma_16 operand type of a 16-bit ATen type.
template <typename T>
using MmaType = std::conditional_t<std::is_same_v<T, at::BFloat16>, __nv_bfloat16, __half>;

// 3xTF32 split: big keeps the top 10 mantissa bits (exactly what the tensor
// core reads), small = v - big is exact in fp32 and carries the next bits.
__device__ __forceinline__ uint32_t tf32_small(uint32_t v) {
  return __float_as_uint(__uint_as_float(v) - __uint_as_float(v & 0xffffe000u));
}
__device__ __forceinline__ void split_tf32(uint32_t v, uint32_t& big,
                                           uint32_t& small) {
  big = v & 0xffffe000u;
  small = tf32_small(v);
}
// TF32 rounding of fp32 bits for the tensor core, which reads the top 19:
// adding half a TF32 ulp rounds to nearest (ties away from zero).
__device__ __forceinline__ uint32_t round_tf32(uint32_t v) { return v + 0x1000u; }

// A warp's register tile: MT m16 tiles (output channels) x kNT n8 tiles
// (columns), in the mma.sync accumulator layout.
template <int MT>
__device__ __forceinline__ void zero_tile(float (&acc)[MT][kNT][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
}

// Stores (add = false) or adds the register tile into the CTA's fp32 partial
// wsl, then zeroes it. Each element has one owning thread (deterministic),
// and the adds round to nearest: flushing every few rows keeps the tensor
// core's truncating fp32 accumulation chains short.
template <int MT>
__device__ __forceinline__ void flush_tile(float (&acc)[MT][kNT][4], float* wsl,
                                           int warp, int t, int g, int k0,
                                           bool add) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const int n = (warp * kNT + nt) * 8 + 2 * t;
      if (n < kNW) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int m = k0 + mt * 16 + g + 8 * h;
          float2* dst = reinterpret_cast<float2*>(wsl + (int64_t)m * kNW + n);
          float2 v = make_float2(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
          if (add) {
            const float2 o = *dst;
            v.x += o.x;
            v.y += o.y;
          }
          *dst = v;
        }
      }
    }
  zero_tile(acc);
}

// v1, bf16/fp16 (T = at::BFloat16 or at::Half).
template <typename T, int MT>
__global__ void __launch_bounds__(kThreads, 2)
    wgrad_partial_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                         int64_t sN, int64_t sC, int64_t sH, int64_t sW,
                         int K, int H, int W, int P, int Q, int pad, int nQc,
                         int64_t U, int S, float* __restrict__ ws) {
  using G = Geo1;
  constexpr int QC = G::QC, PH = G::PH, LDA = G::LDA;
  constexpr int RS = 4 * PH;          // one patch row (4 phases)
  constexpr int CS = kSlots * RS;     // one channel
  constexpr int NIDX = QC + 3;        // phase indices a stage reads
  constexpr int JW = 4 * NIDX;        // image columns loaded per patch row
  constexpr int ONES = G::ONES;
  constexpr int AOFF = ONES + QC;
  constexpr int MH = MT * 16;         // output channels per CTA
  constexpr int A_IT = (MH * QC + kThreads - 1) / kThreads;
  constexpr int P_IT = (kCin * 4 * JW + kThreads - 1) / kThreads;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint16_t* sm = reinterpret_cast<uint16_t*>(smem_raw);
  const uint32_t* smw = reinterpret_cast<const uint32_t*>(smem_raw);

  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int slice = blockIdx.x >> 1;
  const int k0 = (blockIdx.x & 1) * MH;
  const int64_t u0 = U * slice / S, u1 = U * (slice + 1) / S;

  for (int i = tid; i < QC; i += kThreads) {
    sm[ONES + i] = std::is_same_v<T, at::BFloat16> ? 0x3F80 : 0x3C00;
  }

  float acc[MT][kNT][4];
  zero_tile(acc);

  const int64_t PQ = (int64_t)P * Q;
  for (int64_t u = u0; u < u1; ++u) {
    const int p = (int)(u % P);
    const int64_t tq = u / P;
    const int qc = (int)(tq % nQc);
    const int64_t img = tq / nQc;
    const int q0 = qc * QC;
    const int qvalid = min(QC, Q - q0);
    const bool fresh = (u == u0) || (p == 0);
    const int pm4 = 4 * (p % 3);  // ring rotation: row 4p+rr -> slot (4p+rr)%12

    __syncthreads();  // the previous stage's fragments have all been read

    // ---- gather the stage: all loads first, then all stores ----
    const T* dyp = dy + ((img * K + k0) * P + p) * Q + q0;
    T av[A_IT];
#pragma unroll
    for (int it = 0; it < A_IT; ++it) {
      const int i = tid + it * kThreads;
      const int m = i / QC, q = i - m * QC;
      av[it] = (i < MH * QC && q < qvalid) ? dyp[(int64_t)m * PQ + q]
                                           : T(0.f);
    }
    const T* xb = x + img * sN;
    const int ih0 = 4 * p - pad, iw0 = 4 * q0 - pad;
    auto patch_dst = [&](int c, int rr, int j) {
      int slot = pm4 + rr;
      slot -= (slot >= kSlots) ? kSlots : 0;
      return c * CS + slot * RS + (j & 3) * PH + (j >> 2);
    };
    auto patch_store = [&](int dst, int j, uint16_t v) {
      sm[dst] = v;
      if (j >= 4) sm[G::PSZ + dst - 1] = v;
    };
    if (!fresh) {
      // Steady state: rows 4p+7..4p+10 are new, the other 7 are in the ring.
      T pv[P_IT];
#pragma unroll
      for (int it = 0; it < P_IT; ++it) {
        const int i = tid + it * kThreads;
        const int j = i % JW, tr = i / JW;
        const int c = tr % kCin, rr = 7 + tr / kCin;
        const int ih = ih0 + rr, iw = iw0 + j;
        pv[it] = (i < kCin * 4 * JW && ih >= 0 && ih < H && iw >= 0 && iw < W)
                     ? xb[c * sC + ih * sH + iw * sW]
                     : T(0.f);
      }
#pragma unroll
      for (int it = 0; it < A_IT; ++it) {
        const int i = tid + it * kThreads;
        const int m = i / QC, q = i - m * QC;
        if (i < MH * QC) sm[AOFF + m * LDA + q] = bits16(av[it]);
      }
#pragma unroll
      for (int it = 0; it < P_IT; ++it) {
        const int i = tid + it * kThreads;
        const int j = i % JW, tr = i / JW;
        const int c = tr % kCin, rr = 7 + tr / kCin;
        if (i < kCin * 4 * JW)
          patch_store(patch_dst(c, rr, j), j, bits16(pv[it]));
      }
    } else {
#pragma unroll
      for (int it = 0; it < A_IT; ++it) {
        const int i = tid + it * kThreads;
        const int m = i / QC, q = i - m * QC;
        if (i < MH * QC) sm[AOFF + m * LDA + q] = bits16(av[it]);
      }
#pragma unroll 4
      for (int i = tid; i < kCin * kKsz * JW; i += kThreads) {
        const int j = i % JW, tr = i / JW;
        const int c = tr % kCin, rr = tr / kCin;
        const int ih = ih0 + rr, iw = iw0 + j;
        const T v = (ih >= 0 && ih < H && iw >= 0 && iw < W)
                        ? xb[c * sC + ih * sH + iw * sW]
                        : T(0.f);
        patch_store(patch_dst(c, rr, j), j, bits16(v));
      }
    }
    __syncthreads();

    // ---- B offsets of this lane's 8 columns at this ring position ----
    // Recomputed per stage rather than kept: registers are the limit here.
    int boff[kNT];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const int n = (warp * kNT + nt) * 8 + g;
      int o = ONES;  // bias column (and padding) reads the ones
      if (n < kNcol) {
        const int c = n / 121, rem = n - c * 121;
        const int r = rem / 11, s = rem - r * 11;
        int slot = pm4 + r;
        slot -= (slot >= kSlots) ? kSlots : 0;
        o = c * CS + slot * RS + (s & 3) * PH + (s >> 2);
      }
      boff[nt] = ((o & 1) ? (G::PSZ + o - 1) : o) / 2 + t;  // in words
    }

    // ---- MMA over the stage's reduction slice ----
#pragma unroll
    for (int kb = 0; kb < QC; kb += 16) {
      if (kb >= qvalid) break;  // block-uniform: a short last q-chunk
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int w0 = AOFF / 2 + (mt * 16 + g) * (LDA / 2) + kb / 2 + t;
        a[mt][0] = smw[w0];
        a[mt][1] = smw[w0 + 8 * (LDA / 2)];
        a[mt][2] = smw[w0 + 4];
        a[mt][3] = smw[w0 + 8 * (LDA / 2) + 4];
      }
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const uint32_t b0 = smw[boff[nt] + kb / 2];
        const uint32_t b1 = smw[boff[nt] + kb / 2 + 4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mma_16<MmaType<T>>(acc[mt][nt], a[mt], b0, b1);
      }
    }
  }
  flush_tile(acc, ws + (int64_t)slice * K * kNW, warp, t, g, k0, false);
}

// ---------------------------------------------------------------------------
// fp32 (3xTF32 / TF32) weight grad, v2: cp.async with a one-stage-ahead
// prefetch, so the next row's dy and its 4 new input rows are in flight while
// the tensor cores work on the current one. No register staging: the 96
// accumulators per thread already take most of the register file.
//
// Input patch: natural column layout, a ring of 16 rows per channel (11 live
// + 4 prefetched + 1 spare). Row 4p+rr of the current unit sits in slot
// (rb + rr) & 15.
constexpr int kRing = 16;
constexpr int kQC2 = 56;                 // q per stage (7 k8 steps)
constexpr int kJW2 = 4 * kQC2 + 8;       // 232 image columns per patch row
constexpr int kRS2 = 248;                // row stride: 24 mod 32 banks
constexpr int kCS2 = kRing * kRS2;       // channel stride
constexpr int kLDA2 = 60;                // dy row stride: 28 mod 32 banks
constexpr int kOnes2 = kCin * kCS2;      // ones read with stride 4
constexpr int kAoff2 = kOnes2 + 4 * kQC2;

template <int MT>
constexpr int wgrad2_smem_floats() {
  return kAoff2 + 2 * MT * 16 * kLDA2;
}

// The v2 pipeline, shared by the fp32 and 16-bit kernels. Stages unit u =
// (img, qc, p) of [u0, u1): issues its copies unless the previous step
// prefetched them, prefetches the steady successor (same image and q-chunk,
// next p: only its 4 new rows, into slots disjoint from the 11 in use), and
// waits for this unit's copies. Returns whether it prefetched.
template <typename Issue>
__device__ __forceinline__ bool stage_unit(const Issue& issue, bool loaded, int64_t u, int64_t u1,
                                           int64_t img, int qc, int p, int P, int buf, int rb) {
  if (!loaded) {
    issue(img, qc, p, buf, rb, 0);
    cp_async_commit();
  }
  const bool next = (u + 1 < u1) && (p + 1 < P);
  if (next) {
    issue(img, qc, p + 1, buf ^ 1, rb + 4, 7);
    cp_async_commit();
    cp_async_wait_group<1>();
  } else {
    cp_async_wait_group<0>();
  }
  return next;
}

// Unit u = (img * nQc + qc) * P + p, advanced without 64-bit divisions
// (~60-instruction subroutines).
__device__ __forceinline__ void next_unit(int& p, int& qc, int64_t& img, int P, int nQc) {
  if (++p == P) {
    p = 0;
    if (++qc == nQc) {
      qc = 0;
      ++img;
    }
  }
}

// Im2col column n = (c, r, s) in the ring: its offset less the ring slot
// (base) and its window row r (-1 for the ones column, which has no slot).
struct WindowColumn {
  int base, r;
};
__device__ __forceinline__ WindowColumn window_column(int n, int cs, int shift, int ones) {
  if (n >= kNcol) return {ones, -1};
  const int c = n / 121, rem = n - c * 121;
  const int r = rem / 11, s = rem - r * 11;
  return {c * cs + s + shift, r};
}
// Patch offset of im2col column n = (c, r, s) for a ring of rows starting at
// slot rb (channel stride cs, row stride rs, columns shifted by `shift`);
// the bias column and the padding columns read the ones at `ones`.
__device__ __forceinline__ int ring_column(int n, int rb, int cs, int rs, int shift, int ones) {
  const WindowColumn w = window_column(n, cs, shift, ones);
  return w.r < 0 ? w.base : w.base + ((rb + w.r) & (kRing - 1)) * rs;
}

template <int MODE, int MT>
__global__ void __launch_bounds__(kThreads, 2)
    wgrad_f32_kernel(const float* __restrict__ dy, const float* __restrict__ x,
                     int64_t sN, int64_t sC, int64_t sH, int64_t sW, int K,
                     int H, int W, int P, int Q, int pad, int nQc, int64_t U,
                     int S, int flush_every, float* __restrict__ ws) {
  constexpr int MH = MT * 16;
  constexpr int TPR = kThreads / MH;  // threads per dy row: 4 (K=96), 6 (K=64)
  extern __shared__ __align__(16) float sm2[];
  const uint32_t sbase = smem_u32(sm2);
  const uint32_t* smw = reinterpret_cast<const uint32_t*>(sm2);

  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int slice = blockIdx.x >> 1;
  const int k0 = (blockIdx.x & 1) * MH;
  const int64_t u0 = U * slice / S, u1 = U * (slice + 1) / S;

  for (int i = tid; i < 4 * kQC2; i += kThreads) sm2[kOnes2 + i] = 1.f;

  // Issues the cp.asyncs of unit u: its dy row into A buffer `buf` and patch
  // rows rr0..10 into the ring at base rb.
  auto issue = [&](int64_t img, int qc, int p, int buf, int rb, int rr0) {
    const int q0 = qc * kQC2;
    const int qvalid = min(kQC2, Q - q0);
    {
      const int m = tid / TPR, tq4 = tid - m * TPR;
      const float* src = dy + ((img * K + k0 + m) * P + p) * Q + q0;
      const uint32_t dst =
          sbase + 4u * (kAoff2 + (buf * MH + m) * kLDA2);
      for (int q = tq4; q < kQC2; q += TPR) {
        const bool ok = q < qvalid;
        cp_async4n(dst + 4u * q, ok ? src + q : dy, ok ? 4 : 0);
      }
    }
    const float* xb = x + img * sN;
    const int ih0 = 4 * p - pad, iw0 = 4 * q0 - pad;
    const int grp = tid >> 4, l16 = tid & 15;  // 12 groups of 16: one row each
    const int nrows = kCin * (kKsz - rr0);
    for (int row = grp; row < nrows; row += kThreads / 16) {
      const int rr = rr0 + row / kCin, c = row - (row / kCin) * kCin;
      const int ih = ih0 + rr;
      const bool rowok = ih >= 0 && ih < H;
      const float* src = xb + c * sC + (int64_t)(rowok ? ih : 0) * sH;
      const uint32_t dst =
          sbase + 4u * (c * kCS2 + ((rb + rr) & (kRing - 1)) * kRS2);
#pragma unroll 5
      for (int j = l16; j < kJW2; j += 16) {
        const int iw = iw0 + j;
        const bool ok = rowok && iw >= 0 && iw < W;
        cp_async4n(dst + 4u * j, ok ? src + iw * sW : x, ok ? 4 : 0);
      }
    }
  };

  float acc[MT][kNT][4];
  zero_tile(acc);

  float* wsl = ws + (int64_t)slice * K * kNW;
  bool ws_written = false;
  int since_flush = 0;

  int rb = 0;
  bool loaded = false;
  int p = (int)(u0 % P), qc = (int)((u0 / P) % nQc);
  int64_t img = u0 / P / nQc;
  for (int64_t u = u0; u < u1; ++u) {
    const int qvalid = min(kQC2, Q - qc * kQC2);
    const int buf = (int)(u & 1);

    __syncthreads();  // compute of u-1 is done: its A buffer and rows are free
    const bool next = stage_unit(issue, loaded, u, u1, img, qc, p, P, buf, rb);
    __syncthreads();

    int boff[kNT];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
      boff[nt] = ring_column((warp * kNT + nt) * 8 + g, rb, kCS2, kRS2, 0, kOnes2) + 4 * t;
    // ldmatrix row address of this lane: matrix lane>>3 = (row half, col half)
    const uint32_t lds_row =
        sbase + 4u * (kAoff2 + (buf * MH + ((lane >> 3) & 1) * 8 + (lane & 7)) * kLDA2 +
                      (lane >> 4) * 4);

#pragma unroll
    for (int kb = 0; kb < kQC2; kb += 8) {
      if (kb >= qvalid) break;  // block-uniform: a short last q-chunk
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        // An 8x8 b16 matrix is 8 rows x 4 fp32: ldmatrix hands lane (g, t)
        // the word (row g, col t), the tf32 A-fragment layout.
        ldsm_x4(lds_row + 4u * (mt * 16 * kLDA2 + kb), a[mt]);
      }
      if constexpr (MODE == 0) {
        uint32_t ab[MT][4], as[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int e = 0; e < 4; ++e) split_tf32(a[mt][e], ab[mt][e], as[mt][e]);
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          uint32_t b0b, b0s, b1b, b1s;
          split_tf32(smw[boff[nt] + 4 * kb], b0b, b0s);
          split_tf32(smw[boff[nt] + 4 * kb + 16], b1b, b1s);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_tf32(acc[mt][nt], as[mt], b0b, b1b);
            mma_tf32(acc[mt][nt], ab[mt], b0s, b1s);
            mma_tf32(acc[mt][nt], ab[mt], b0b, b1b);
          }
        }
      } else {
        // Round to nearest (ties away) by adding half a tf32 ulp: the tensor
        // core ignores the low 13 bits. One IADD; cvt.rna.tf32 is ~4 SASS ops.
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int e = 0; e < 4; ++e) a[mt][e] = round_tf32(a[mt][e]);
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          const uint32_t b0 = round_tf32(smw[boff[nt] + 4 * kb]);
          const uint32_t b1 = round_tf32(smw[boff[nt] + 4 * kb + 16]);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) mma_tf32(acc[mt][nt], a[mt], b0, b1);
        }
      }
    }

    loaded = next;
    rb = next ? ((rb + 4) & (kRing - 1)) : 0;
    if (flush_every > 0 && ++since_flush == flush_every && u + 1 < u1) {
      flush_tile(acc, wsl, warp, t, g, k0, ws_written);
      ws_written = true;
      since_flush = 0;
    }
    next_unit(p, qc, img, P, nQc);
  }
  flush_tile(acc, wsl, warp, t, g, k0, ws_written);
}

// ---------------------------------------------------------------------------
// bf16/fp16 weight grad, v2: same pipeline as the fp32 kernel, copying 4-byte
// pairs. NCHW input with W even only (image rows then start on a pair); other
// layouts take the v1 kernel above.
//  - dy rows start at any parity: a row is copied from the pair boundary at or
//    before its start, so element q sits at position q + sh (sh = 0 or 1) and
//    a fragment pair is re-aligned with a funnel shift. The copy of a pair
//    that runs past the row zero-fills the part beyond it (src-size 2 or 0),
//    so A is exactly zero for q >= Q.
//  - input rows are copied from the even column at or before 4*q0 - pad, so
//    column j of the stage sits at position j + (pad & 1).
constexpr int kQC3 = 64;                 // q per stage (4 k16 steps)
constexpr int kJW3 = 4 * kQC3 + 10;      // 266 half columns used per row
constexpr int kRS3 = 280;                // row stride in halves
constexpr int kCS3 = kRing * kRS3;
constexpr int kLDA3 = 72;                // halves; 36 words = 4 mod 32 banks
constexpr int kOnes3 = kCin * kCS3;      // ones read with stride 4
constexpr int kAoff3 = kOnes3 + 4 * kQC3 + 16;

template <int MT>
constexpr int wgrad3_smem_halves() {
  return kAoff3 + 2 * MT * 16 * kLDA3;
}

template <typename T, int MT>
__global__ void __launch_bounds__(kThreads, 2)
    wgrad_h16_kernel(const T* __restrict__ dy, const T* __restrict__ x, int K,
                     int H, int W, int P, int Q, int pad, int nQc, int64_t U,
                     int S, float* __restrict__ ws) {
  constexpr int MH = MT * 16;
  constexpr int TPR = kThreads / MH;
  constexpr int AW = kQC3 / 2 + 1;  // words copied per dy row
  constexpr int JWW = kJW3 / 2 + 1; // words copied per input row
  extern __shared__ __align__(16) uint16_t sm3[];
  const uint32_t sbase = smem_u32(sm3);
  const uint16_t* smh = sm3;
  const uint32_t* smw = reinterpret_cast<const uint32_t*>(sm3);

  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int slice = blockIdx.x >> 1;
  const int k0 = (blockIdx.x & 1) * MH;
  const int64_t u0 = U * slice / S, u1 = U * (slice + 1) / S;
  const int64_t HW = (int64_t)H * W;
  const int shB = pad & 1;
  const uint16_t one = std::is_same_v<T, at::BFloat16> ? 0x3F80 : 0x3C00;

  for (int i = tid; i < 4 * kQC3 + 16; i += kThreads) sm3[kOnes3 + i] = one;

  auto issue = [&](int64_t img, int qc, int p, int buf, int rb, int rr0) {
    const int q0 = qc * kQC3;
    const int qvalid = min(kQC3, Q - q0);
    {
      const int m = tid / TPR, tw = tid - m * TPR;
      const int64_t start = ((img * K + k0 + m) * P + p) * Q + q0;
      const int sh = (int)(start & 1);
      const T* src = dy + (start - sh);
      const uint32_t dst = sbase + 2u * (kAoff3 + (buf * MH + m) * kLDA3);
      for (int w = tw; w < AW; w += TPR) {
        // positions 2w, 2w+1 hold q = 2w - sh, 2w + 1 - sh
        const int qa = 2 * w - sh;
        const int nb = qa + 1 < qvalid ? 4 : (qa < qvalid ? 2 : 0);
        cp_async4n(dst + 4u * w, nb ? src + 2 * w : dy, nb);
      }
    }
    const T* xb = x + img * (int64_t)kCin * HW;
    const int ih0 = 4 * p - pad, iwA = 4 * q0 - pad - shB;
    const int grp = tid >> 4, l16 = tid & 15;
    const int nrows = kCin * (kKsz - rr0);
    for (int row = grp; row < nrows; row += kThreads / 16) {
      const int rr = rr0 + row / kCin, c = row - (row / kCin) * kCin;
      const int ih = ih0 + rr;
      const bool rowok = ih >= 0 && ih < H;
      const T* src = xb + c * HW + (int64_t)(rowok ? ih : 0) * W;
      const uint32_t dst =
          sbase + 2u * (c * kCS3 + ((rb + rr) & (kRing - 1)) * kRS3);
#pragma unroll 3
      for (int w = l16; w < JWW; w += 16) {
        const int iw = iwA + 2 * w;  // even; W even: a pair is all in or out
        const bool ok = rowok && iw >= 0 && iw < W;
        cp_async4n(dst + 4u * w, ok ? src + iw : x, ok ? 4 : 0);
      }
    }
  };

  float acc[MT][kNT][4];
  zero_tile(acc);

  int rb = 0;
  bool loaded = false;
  int p = (int)(u0 % P), qc = (int)((u0 / P) % nQc);
  int64_t img = u0 / P / nQc;
  for (int64_t u = u0; u < u1; ++u) {
    const int qvalid = min(kQC3, Q - qc * kQC3);
    const int buf = (int)(u & 1);

    __syncthreads();
    const bool next = stage_unit(issue, loaded, u, u1, img, qc, p, P, buf, rb);
    __syncthreads();

    // B: element (l, n) at boff[n] + 4l (halves), l = 2t.
    int boff[kNT];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
      boff[nt] = ring_column((warp * kNT + nt) * 8 + g, rb, kCS3, kRS3, shB, kOnes3) + 8 * t;
    // A: this lane's rows g (+8, +16..) all have the parity of row g.
    const int64_t start0 = ((img * K + k0 + g) * P + p) * Q + qc * kQC3;
    const int shA = (int)(start0 & 1);
    const int abase = kAoff3 + (buf * MH + g) * kLDA3 + 2 * t;  // halves, even

#pragma unroll
    for (int kb = 0; kb < kQC3; kb += 16) {
      if (kb >= qvalid) break;
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = abase + (mt * 16 + (e & 1) * 8) * kLDA3 + kb + (e >> 1) * 8;
          const uint32_t w0 = smw[h >> 1], w1 = smw[(h >> 1) + 1];
          a[mt][e] = __funnelshift_r(w0, w1, 16 * shA);
        }
      }
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const int h = boff[nt] + 4 * kb;
        const uint32_t b0 = (uint32_t)smh[h] | ((uint32_t)smh[h + 4] << 16);
        const uint32_t b1 =
            (uint32_t)smh[h + 32] | ((uint32_t)smh[h + 36] << 16);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mma_16<MmaType<T>>(acc[mt][nt], a[mt], b0, b1);
      }
    }

    loaded = next;
    rb = next ? ((rb + 4) & (kRing - 1)) : 0;
    next_unit(p, qc, img, P, nQc);
  }

  flush_tile(acc, ws + (int64_t)slice * K * kNW, warp, t, g, k0, false);
}

// Sums the per-slice partials in slice order (fixed: bitwise reproducible).
template <typename T>
__global__ void wgrad_reduce_kernel(const float* __restrict__ ws, int S, int K,
                                    T* __restrict__ gw, T* __restrict__ gb) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= K * kNW) return;
  const int k = idx / kNW, n = idx - k * kNW;
  const int64_t stride = (int64_t)K * kNW;
  float sum = 0.f;
  int s = 0;
  for (; s + 4 <= S; s += 4) {
    const float v0 = ws[(s + 0) * stride + idx];
    const float v1 = ws[(s + 1) * stride + idx];
    const float v2 = ws[(s + 2) * stride + idx];
    const float v3 = ws[(s + 3) * stride + idx];
    sum += v0;
    sum += v1;
    sum += v2;
    sum += v3;
  }
  for (; s < S; ++s) sum += ws[s * stride + idx];
  if (n < kNcol) {
    gw[(int64_t)k * kNcol + n] = static_cast<T>(sum);
  } else if (gb != nullptr) {
    gb[k] = static_cast<T>(sum);
  }
}

// Split-K bookkeeping shared by the launchers: a unit is qc pixels of one
// output row, S = min(#SMs, units) slices, one fp32 partial [K][kNW] each.
struct SplitK {
  int nQc, S;
  int64_t U;
  at::Tensor ws;
};
SplitK split_k(const at::Tensor& go, const at::Tensor& in, int qc) {
  SplitK sk;
  sk.nQc = (int)((go.size(3) + qc - 1) / qc);
  sk.U = go.size(0) * sk.nQc * go.size(2);
  sk.S = (int)std::min<int64_t>(at::cuda::getCurrentDeviceProperties()->multiProcessorCount, sk.U);
  sk.ws = at::empty({sk.S, go.size(1), kNW}, in.options().dtype(at::kFloat));
  return sk;
}
// The slices' partials summed in slice order into grad_weight / grad_bias.
template <typename T>
void reduce_partials(const SplitK& sk, const at::Tensor& gw, const std::optional<at::Tensor>& gb,
                     cudaStream_t stream) {
  const int K = (int)gw.size(0), tot = K * kNW;
  wgrad_reduce_kernel<T><<<(tot + 255) / 256, 256, 0, stream>>>(
      sk.ws.data_ptr<float>(), sk.S, K, gw.data_ptr<T>(), gb.has_value() ? gb->data_ptr<T>() : nullptr);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T, int MODE, int MT>
void launch_wgrad(const at::Tensor& go, const at::Tensor& in, int64_t padding,
                  const at::Tensor& gw, const std::optional<at::Tensor>& gb) {
  // One unit = one output row of QC pixels; the 16-bit kernels share QC.
  constexpr int QC = std::is_same_v<T, float> ? kQC2 : kQC3;
  static_assert(Geo1::QC == kQC3, "the 16-bit kernels split the work alike");
  const int H = in.size(2), W = in.size(3);
  const int K = go.size(1), P = go.size(2), Q = go.size(3);
  const SplitK sk = split_k(go, in, QC);
  const int nQc = sk.nQc, S = sk.S;
  const int64_t U = sk.U;
  const at::Tensor& ws = sk.ws;
  auto stream = at::cuda::getCurrentCUDAStream();
  if constexpr (std::is_same_v<T, float>) {
    // 3xTF32 flushes its registers into the partial every 8 rows: the tensor
    // core's fp32 accumulation truncates, so long chains drift (rel L2 at the
    // headline: never 4.6e-5, 32 rows 1.3e-5, 16 rows 6.8e-6, 8 rows 3.5e-6;
    // 8 keeps a 3x margin to 1e-5 for data whose partial sums grow coherently).
    const int flush = MODE == 0 ? 8 : 0;
    const int smem = wgrad2_smem_floats<MT>() * (int)sizeof(float);
    auto kern = wgrad_f32_kernel<MODE, MT>;
    allow_max_dynamic_smem(kern);
    kern<<<2 * S, kThreads, smem, stream>>>(
        go.data_ptr<float>(), in.data_ptr<float>(), in.stride(0),
        in.stride(1), in.stride(2), in.stride(3), K, H, W, P, Q,
        (int)padding, nQc, U, S, flush, ws.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  } else if (in.is_contiguous() && W % 2 == 0 &&
             reinterpret_cast<uintptr_t>(in.data_ptr()) % 4 == 0 &&
             reinterpret_cast<uintptr_t>(go.data_ptr()) % 4 == 0) {
    const int smem = wgrad3_smem_halves<MT>() * 2;
    auto kern = wgrad_h16_kernel<T, MT>;
    allow_max_dynamic_smem(kern);
    kern<<<2 * S, kThreads, smem, stream>>>(
        go.data_ptr<T>(), in.data_ptr<T>(), K, H, W, P, Q, (int)padding, nQc,
        U, S, ws.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  } else {
    // channels_last or odd W: the v1 kernel (register-staged, any strides)
    const int smem = (Geo1::ONES + QC + MT * 16 * Geo1::LDA) * 2;
    auto kern = wgrad_partial_kernel<T, MT>;
    allow_max_dynamic_smem(kern);
    kern<<<2 * S, kThreads, smem, stream>>>(
        go.data_ptr<T>(), in.data_ptr<T>(), in.stride(0), in.stride(1),
        in.stride(2), in.stride(3), K, H, W, P, Q, (int)padding, nQc, U, S,
        ws.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  reduce_partials<T>(sk, gw, gb, stream);
}

template <typename T, int MODE>
void dispatch_k(const at::Tensor& go, const at::Tensor& in, int64_t padding,
                const at::Tensor& gw, const std::optional<at::Tensor>& gb) {
  if (go.size(1) == 96) {
    launch_wgrad<T, MODE, 3>(go, in, padding, gw, gb);
  } else {
    launch_wgrad<T, MODE, 2>(go, in, padding, gw, gb);
  }
}

// ===========================================================================
// Hopper (sm_90a) weight grad on wgmma: one kernel for fp32 (3xFP16, TF32)
// and bf16/fp16.
//
// GEMM D[m][k] = sum_l A[m][l] * B[l][k]: m = im2col row (c, r, s) of the
// input window (363, + the ones row 363 that yields grad_bias, padded to
// 384 = 6 m64 blocks), k = output channel (N = K = 64 or 96), l = pixel. One
// CTA per SM, 3 warpgroups; warpgroup wg owns rows [128 wg, 128 wg + 128) as
// two m64 blocks (2 x K/2 fp32 accumulators per thread). Units (img, q-chunk,
// output row p) of 56 (TF32: 7 k8 steps) or 64 pixels (3xFP16, 16-bit: 4 k16
// steps), split-K over the SMs exactly like the mma.sync kernels (same
// workspace, same reduce).
//  - A (input window) from registers, gathered from the 16-row input ring in
//    shared memory that the mma.sync kernels use (fp32: the v2 patch, 16-bit:
//    the v3 patch), by the same kind of cp.async pipeline: the next row's 4
//    new input rows and its dy rows are copied while the tensor cores work.
//    The fragment of row m, pixel j is patch[off(m) + 4 j] (mma.sync A layout).
//  - B (dy) from shared memory through a descriptor: wgmma's canonical K-major
//    no-swizzle layout, per k step NT8 blocks of 8 channels x two 8 x 16-byte
//    core matrices (LBO 128 B, SBO 256 B). dy rows arrive by 16-byte copies
//    from the 16-byte boundary at or before their start (DyRow) and one pass
//    per warp shifts them into the core matrices, since the tensor cores
//    cannot shift.
//  - TF32: A rounded in registers, B rounded by that pass.
//  - 3xFP16 (the fp32-accurate mode; it replaced 3xTF32 here: 0.57 against
//    0.74 ms, H200, batch 256, with half the error): as in the forward, both
//    operands are scaled by powers of two and split into fp16 hi and lo
//    parts, and three fp16 wgmmas per k16 step (lo*hi, hi*lo, hi*hi) give
//    the 22 bits of each operand at twice TF32's rate. The scales are taken
//    per run of rows (see the kernel). The input rows are split in place in
//    the ring once they arrive, each word becoming its (hi, lo) fp16 pair, so
//    the gather forms A's hi and lo fragments by two byte permutes; that
//    pass writes dy's hi and lo parts to two B buffers. The registers are
//    flushed (scaled back, round-to-nearest reductions) into the CTA's
//    partial every few units, since the tensor cores' accumulation
//    truncates.
// The kernel is bound by instruction issue and latency, not the tensor cores
// (ncu, bf16, H200: ~500 instructions per warp per output row at 3 warps per
// scheduler, ~1500 issue cycles, against ~1150 tensor-core cycles; 0.39
// issued per cycle), so the steady state carries the dy row start and the
// input rows' bases from row to row instead of recomputing them in 64 bits,
// and re-lays dy out by word loads (alternating A/B runs, H200, batch 256:
// bf16 and TF32 -5 to -10%); 3xFP16, whose registers are full, recomputes
// them.
// Inputs: fp32 any strides (16-byte copies of input rows where NCHW, W % 4 ==
// 0 and aligned, else 4-byte copies); 16-bit NCHW with W even (16-byte copies
// where W % 8 == 0 and aligned, else 4-byte pairs); dy 16-byte aligned.

constexpr int kGThreads = 384;  // 3 warpgroups
constexpr int kSR = 68;         // fp32 staging row stride: 16 B mod 128, 8-row LDS.128 conflict-free

// Per element type and mode: the patch and unit geometry.
template <typename T, int MODE>
struct GmmaGeo {  // bf16 / fp16: the v3 patch
  using S = uint16_t;                 // shared-memory word of the patch
  static constexpr int kQC = kQC3, kPix = 16, kJW = kJW3, kRS = kRS3, kCS = kCS3, kOnes = kOnes3;
  static constexpr int kOnesLen = 4 * kQC3 + 16;
  static constexpr int kLD = kLDA3;   // staging row stride (elements)
};
template <>
struct GmmaGeo<float, 1> {  // TF32: the v2 patch
  using S = float;
  static constexpr int kQC = kQC2, kPix = 8, kJW = kJW2, kRS = kRS2, kCS = kCS2, kOnes = kOnes2;
  static constexpr int kOnesLen = 4 * kQC2;
  static constexpr int kLD = kSR;
};
// 3xFP16: the v2 ring with the 16-bit units (4 k16 steps, 64 pixels). Its
// 32-bit words hold an input element's fp16 hi (low half) and lo (high
// half) once the rows are split in place.
template <>
struct GmmaGeo<float, 3> {
  using S = float;
  static constexpr int kQC = kQC3, kPix = 16, kJW = 4 * kQC3 + 8, kRS = 280, kCS = kRing * kRS, kOnes = kCin * kCS;
  static constexpr int kOnesLen = 4 * kQC3 + 16;
  static constexpr int kLD = kSR;
};
// The ones follow the ring; a row's 16-byte copies and a dy row's staged
// chunks fit their row strides.
template <typename T, int MODE>
constexpr bool gmma_geo_ok() {
  using G = GmmaGeo<T, MODE>;
  constexpr int epc = 16 / (int)sizeof(T);
  return G::kOnes == kCin * G::kCS && (G::kJW + 2 * (epc - 1)) / epc * epc <= G::kRS &&
         (G::kQC / epc + 1) * epc <= G::kLD;
}
static_assert(gmma_geo_ok<float, 1>() && gmma_geo_ok<float, 3>() && gmma_geo_ok<at::Half, 2>() &&
                  gmma_geo_ok<at::BFloat16, 2>(),
              "wgmma weight-gradient geometry");
template <typename T, int MODE>
constexpr int gpatch_bytes() {
  using G = GmmaGeo<T, MODE>;
  return ((G::kOnes + G::kOnesLen) * (int)sizeof(T) + 127) / 128 * 128;  // ring + ones
}
template <typename T, int MODE, int NT8>  // staged dy rows [2][K]
constexpr int gstg_bytes() { return 2 * NT8 * 8 * GmmaGeo<T, MODE>::kLD * (int)sizeof(T); }
template <typename T, int MODE, int NT8>  // one canonical B
constexpr int gdy_bytes() { return GmmaGeo<T, MODE>::kQC / GmmaGeo<T, MODE>::kPix * NT8 * 256; }
// 3xFP16 keeps a lo-part copy of each B buffer, the warps' maxima of |x|
// and |dy| (kGThreads / 32 floats each) and 6 scale factors
template <typename T, int MODE, int NT8>
constexpr int gsmem_bytes() {
  return gpatch_bytes<T, MODE>() + gstg_bytes<T, MODE, NT8>() + (MODE == 3 ? 4 : 2) * gdy_bytes<T, MODE, NT8>() +
         (MODE == 3 ? (2 * kGThreads / 32 + 6) * 4 : 0);
}
static_assert(gstg_bytes<float, 1, 8>() % 128 == 0 && gstg_bytes<float, 1, 12>() % 128 == 0 &&
                  gstg_bytes<at::Half, 2, 8>() % 128 == 0 && gstg_bytes<at::Half, 2, 12>() % 128 == 0,
              "dy buffers 128-byte aligned");

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // used by the wgmma kernel only
// One dy row (channel n of unit (img, q-chunk qc, output row p)) staged for
// the wgmma weight gradient by 16-byte copies from the 16-byte boundary at or
// before the row start (sh elements earlier): lane (r7, kq) of a staging warp
// copies chunks kq + 4 i of its row; elements past qvalid are zero-filled.
// E is the element type, NCH the chunks per row.
template <typename E, int NCH>
struct DyRow {
  static constexpr int kEPC = 16 / (int)sizeof(E);  // elements per chunk
  const E* row;  // the 16-byte boundary at or before the row start
  uint32_t dst;  // the lane's first chunk in the staging row
  int rem;       // valid elements from the lane's first chunk on
  // start: the row's first element in dy; srow: its staging row (shared address)
  __device__ __forceinline__ DyRow(const E* dy, uint32_t srow, int64_t start, int kq, int qvalid) {
    const int sh = (int)(start & (kEPC - 1));
    row = dy + (start - sh);
    dst = srow + 16u * kq;
    rem = qvalid + sh - kEPC * kq;
  }
  __device__ __forceinline__ void copy(int kq, int i) const {
    if (4 * i + 3 < NCH || kq + 4 * i < NCH) {
      const int nv = min(max(rem - 4 * kEPC * i, 0), kEPC);
      // nothing read when nv == 0: point at the row's own (valid) start
      cp_async16n(dst + 64u * i, row + (nv ? kEPC * (kq + 4 * i) : 0), (int)sizeof(E) * nv);
    }
  }
};

#endif

// Stores (add = false) or adds the accumulators into the CTA's partial
// [K][kNW], then zeroes them. The adds are reductions (red.global.add.f32,
// round to nearest): the flush issues them and goes on, where loading the
// partial first had it wait on L2 (the partials of all slices outgrow what
// stays in L2 beside the streamed inputs). Each partial element belongs to
// one thread of one CTA, whose operations on one address take effect in
// program order, so every sum has a fixed order (deterministic). UNSCALE
// (3xFP16): the accumulators are scaled back first, by un[0] * un[1] (weight
// rows) or un[2] * un[3] (the bias row).
template <int NT8, bool UNSCALE>
__device__ __forceinline__ void gflush(float (&acc)[2][NT8 * 4], float* wsl, int mrow0, int t, bool add,
                                       const float* un) {
#pragma unroll
  for (int b = 0; b < 2; ++b)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = mrow0 + b * 64 + 8 * h;
      if (m < kNW) {
#pragma unroll
        for (int j = 0; j < NT8; ++j)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float* p = wsl + (8 * j + 2 * t + c) * kNW + m;
            // two factors: their product may leave fp32's range
            float v = acc[b][4 * j + 2 * h + c];
            if constexpr (UNSCALE) v = m == kNcol ? v * un[2] * un[3] : v * un[0] * un[1];
            if (add) {
              asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(p), "f"(v) : "memory");
            } else {
              *p = v;
            }
          }
      }
#pragma unroll
      for (int j = 0; j < NT8; ++j) acc[b][4 * j + 2 * h] = acc[b][4 * j + 2 * h + 1] = 0.f;
    }
}

// T = float (MODE 1: TF32, 3: 3xFP16) or bf16/fp16 (MODE 2). VEC: input
// rows by 16-byte copies (column j of a stage at j + sh, sh = -pad mod the
// elements per copy); else by 4-byte copies (fp32: one element, any strides;
// 16-bit: a pair, sh = pad & 1).
template <typename T, int MODE, int NT8, bool VEC>
__global__ void __launch_bounds__(kGThreads, 1)
    wgrad_gmma_kernel(const T* __restrict__ dy, const T* __restrict__ x, int64_t sN, int64_t sC, int64_t sH,
                      int64_t sW, int K, int H, int W, int P, int Q, int pad, int nQc, int64_t U, int S,
                      float* __restrict__ ws) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using G = GmmaGeo<T, MODE>;
  using E = typename G::S;
  constexpr bool F32 = std::is_same_v<T, float>;
  constexpr bool H3 = MODE == 3;
  using TA = std::conditional_t<H3, __half, std::conditional_t<F32, float, MmaType<T>>>;
  constexpr int QC = G::kQC, PIX = G::kPix, RS = G::kRS, CS = G::kCS;
  constexpr int EB = (int)sizeof(T);
  constexpr int EPC = 16 / EB;                    // elements per 16-byte copy
  constexpr int EPU = VEC ? EPC : 4 / EB;         // elements per input-row copy
  constexpr int NACC = NT8 * 4;
  constexpr int MH = NT8 * 8;                     // = K
  constexpr int STEPS = QC / PIX;
  constexpr int PB = gpatch_bytes<T, MODE>();
  constexpr int STG = gstg_bytes<T, MODE, NT8>();
  constexpr int DYB = gdy_bytes<T, MODE, NT8>();
  constexpr int STEPB = NT8 * 256;
  constexpr int NCHK = QC / EPC;                  // 16-byte chunks of a unit's dy row
  constexpr int NCH = NCHK + 1;                   // staged per dy row (it may start mid-chunk)
  constexpr int NPC = (G::kJW + 2 * (EPU - 1)) / EPU;  // copies per input row
  constexpr int NI = (NPC + 31) / 32;
  extern __shared__ __align__(128) uint32_t smgw[];
  const uint32_t sbase = smem_u32(smgw);
  const uint32_t* smw = smgw;
  E* sme = reinterpret_cast<E*>(smgw);
  unsigned char* smb = reinterpret_cast<unsigned char*>(smgw);
  const uint32_t stg0 = sbase + PB;         // staged dy rows [2][K][kLD]
  const uint32_t dyb0 = stg0 + STG;         // canonical B [2] (+ lo parts [2], 3xFP16)

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int wg = warp >> 2, wq = warp & 3;
  const int slice = blockIdx.x;
  const int64_t u0 = U * slice / S, u1 = U * (slice + 1) / S;
  const int sh = (-pad) & (EPU - 1);

  E one;
  if constexpr (H3) one = __uint_as_float(0x3C00u);  // fp16 hi 1, lo 0
  else if constexpr (F32) one = 1.f;
  else one = std::is_same_v<T, at::BFloat16> ? 0x3F80 : 0x3C00;
  for (int i = tid; i < G::kOnesLen; i += kGThreads) sme[G::kOnes + i] = one;

  // 3xFP16 scales x by 2^tx and dy by 2^tdy. A run (the units from one full
  // staging to the next: one image's rows of one q-chunk, within the slice)
  // takes them from its first unit's largest finite magnitudes, which they
  // put in [2^13, 2^14): one binade below fp16_exp's, as later rows may be
  // larger. A later unit whose new values would reach 2^15 or fall below 2^6
  // starts a new run (ovf), so every unit's scaled values stay in fp16's
  // range. The accumulators are scaled back at each flush, and a run flushes
  // them before it changes the scales. scl, in shared memory as the
  // registers are all taken: x's and dy's scale, then the weight rows' and
  // the bias row's unscale, each as two normal factors (tx + tdy reaches
  // +-254). red: the block maxima.
  float* const red = reinterpret_cast<float*>(smb + PB + STG + 4 * DYB);
  float* const scl = red + 2 * kGThreads / 32;
  auto out_of_range = [](float m, float s) { return m > 0.f && !(m * s >= 64.f && m * s < 32768.f); };

  // Row-to-row state: a unit's dy row starts Q elements after the previous
  // output row's, and its new input rows share the image-and-channel base and
  // first column of the previous unit's, so the other modes carry these from
  // unit to unit instead of recomputing them in 64 bits. 3xFP16 holds twice
  // the A fragments and has no registers to spare: it recomputes them, and
  // its A rows' ring offsets too (carried, they spilled in 3xTF32).
  constexpr bool kCarry = !H3;
  // dy: warp w < NT8 stages rows n = 8w + r7 (see DyRow).
  const bool dyw = warp < NT8;
  const int r7 = lane & 7, kq = lane >> 3;
  const int ndy = warp * 8 + r7;
  using Dy = DyRow<T, NCH>;
  auto dy_start = [&](int64_t img, int qc, int p) { return ((img * K + ndy) * P + p) * Q + (int64_t)qc * QC; };
  auto copy_dy = [&](int64_t start, int buf, int qvalid) {
    const Dy d(dy, stg0 + (uint32_t)(EB * (buf * MH + ndy) * G::kLD), start, kq, qvalid);
#pragma unroll
    for (int i = 0; i < (NCH + 3) / 4; ++i) d.copy(kq, i);
  };
  // Input rows: one warp per row.
  struct Row {
    const T* src;  // start of the (clamped, valid) image row
    int iwl;       // first column of the lane's copy
    uint32_t dst;
    bool ok;
  };
  // A row's image-and-channel base and the lane's first column depend only
  // on the image and q-chunk (row_of takes them as xc and iwl)
  auto row_base = [&](int64_t img, int c) { return x + img * sN + c * sC; };
  auto first_col = [&](int qc) { return 4 * qc * QC - pad - sh + EPU * lane; };
  auto row_of = [&](const T* xc, int iwl, int p, int rb, int rr, int c) {
    Row r;
    const int ih = 4 * p - pad + rr;
    r.ok = ih >= 0 && ih < H;
    const int slot = (rb + rr) & (kRing - 1);
    r.iwl = iwl;
    r.src = xc + (int64_t)(r.ok ? ih : 0) * sH;
    r.dst = sbase + (uint32_t)EB * (c * CS + slot * RS) + (VEC ? 16u : 4u) * lane;
    return r;
  };
  auto copy_row = [&](const Row& r, int i) {
    if (i < NI - 1 || lane + 32 * i < NPC) {
      const int col = r.iwl + 32 * EPU * i;
      // W % EPU == 0: a copy is all in or all out
      const bool ok = r.ok && (unsigned)col < (unsigned)W;
      if constexpr (VEC) {
        cp_async16n(r.dst + 512u * i, r.src + (ok ? col : 0), ok ? 16 : 0);
      } else if constexpr (F32) {
        cp_async4n(r.dst + 128u * i, r.src + (ok ? (int64_t)col * sW : 0), ok ? 4 : 0);
      } else {
        cp_async4n(r.dst + 128u * i, r.src + (ok ? col : 0), ok ? 4 : 0);
      }
    }
  };
  auto stage_rows = [&](int64_t img, int qc, int p, int rb) {
    for (int row = warp; row < kCin * kKsz; row += kGThreads / 32) {
      const int c = row % kCin;
      const Row r = row_of(row_base(img, c), first_col(qc), p, rb, row / kCin, c);
#pragma unroll
      for (int i = 0; i < NI; ++i) copy_row(r, i);
    }
  };
  // The steady successor's 4 new rows x 3 channels: one per warp, row
  // 7 * kCin + warp (window row srr, channel sc). Its image-and-channel base
  // and first column change only with the image or q-chunk (xs, siwl).
  static_assert(kGThreads / 32 == 4 * kCin, "one new input row per warp");
  const int srr = 7 + warp / kCin, sc = warp % kCin;
  const T* xs = x;
  int siwl = 0;
  auto stage_next_row = [&](int64_t img, int qc, int p1, int rb1) {
    const Row r = row_of(kCarry ? xs : row_base(img, sc), kCarry ? siwl : first_col(qc), p1, rb1, srr, sc);
#pragma unroll
    for (int i = 0; i < NI; ++i) copy_row(r, i);
  };
  // 3xFP16, once they have arrived: the words this lane copied into ring
  // slot `slot` of channel c. row_max grows m by their finite magnitudes;
  // split_row scales and splits them in place (zero-filled ones stay zero)
  // and returns m grown by their magnitudes.
  auto own_words = [&](int c, int slot, auto&& f) {
    unsigned char* dst = smb + EB * (c * CS + slot * RS) + (VEC ? 16 : 4) * lane;
#pragma unroll
    for (int i = 0; i < NI; ++i)
      if (i < NI - 1 || lane + 32 * i < NPC) f(dst + (VEC ? 512 : 128) * i);
  };
  auto row_max = [&](float m, int c, int slot) {
    own_words(c, slot, [&](unsigned char* w) {
      if constexpr (VEC) {
        m = max_finite_abs4(m, *reinterpret_cast<const float4*>(w));
      } else {
        m = max_finite_abs(m, *reinterpret_cast<const float*>(w));
      }
    });
    return m;
  };
  auto split_row = [&](float m, int c, int slot) {
    const float sx = scl[0];
    own_words(c, slot, [&](unsigned char* w) {
      if constexpr (VEC) {
        const float4 u = *reinterpret_cast<const float4*>(w);
        m = max_abs4(m, u);
        *reinterpret_cast<uint4*>(w) = split_fp16_words(u, sx);
      } else {
        const float v = *reinterpret_cast<const float*>(w);
        uint32_t hi, lo;
        m = fmaxf(m, fabsf(v));
        split_fp16x2(sx * v, 0.f, hi, lo);
        *reinterpret_cast<uint32_t*>(w) = __byte_perm(hi, lo, 0x5410);
      }
    });
    return m;
  };

  // rows of this thread: mrow0 + 64 b + 8 h (im2col row m = (c, r, s), or ones)
  const int mrow0 = wg * 128 + wq * 16 + g;
  int rbase[2][2], rrow[2][2];
#pragma unroll
  for (int b = 0; b < 2; ++b)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const WindowColumn w = window_column(mrow0 + 64 * b + 8 * h, CS, sh, G::kOnes);
      rbase[b][h] = w.base + (PIX / 2) * t;
      rrow[b][h] = w.r;
    }

  // 3xFP16's run start: the largest finite |dy| of this lane's staged chunks
  // (as relayout reads them)
  auto dy_max = [&](int64_t start, int buf) {
    float m = 0.f;
    if (dyw) {
      const float* roww = reinterpret_cast<const float*>(smb + PB + EB * (buf * MH + ndy) * G::kLD) +
                          (int)(start & (EPC - 1));
#pragma unroll
      for (int i = 0; i < (NCHK + 3) / 4; ++i)
        if (4 * i + 3 < NCHK || kq + 4 * i < NCHK)
#pragma unroll
          for (int k = 0; k < EPC; ++k) m = max_finite_abs(m, roww[EPC * (kq + 4 * i) + k]);
    }
    return m;
  };
  // Returns the largest |dy| it split (3xFP16; else 0).
  auto relayout = [&](int64_t start, int buf) {
    float m = 0.f;
    if (dyw) {
      // This warp's staged rows -> its channel group's core matrices, with the
      // TF32 rounding (TF32) or scaled and split into fp16 hi and lo parts
      // (3xFP16: a chunk of 4 is half a core-matrix row). Lane (r7, kq):
      // chunks kq + 4 i.
      __syncwarp();
      // Chunk c is staged elements [EPC c + shd, + EPC): read as words from
      // word (EPC c + shd) * EB / 4 on (16-bit: one more, and a funnel shift
      // where shd is odd), which costs fewer instructions than selecting
      // among aligned 16-byte reads.
      const int shd = (int)(start & (EPC - 1));
      const uint32_t* roww = reinterpret_cast<const uint32_t*>(smb + PB + EB * (buf * MH + ndy) * G::kLD);
#pragma unroll
      for (int i = 0; i < (NCHK + 3) / 4; ++i) {
        const int c = kq + 4 * i;
        if (4 * i + 3 < NCHK || c < NCHK) {
          uint4 v;
          const uint32_t* w = roww + (EPC * c + shd) * EB / 4;
          if constexpr (F32) {
            v = make_uint4(w[0], w[1], w[2], w[3]);
          } else {
            const int f = (shd & 1) * 16;
            const uint32_t w4 = w[4];
            v = make_uint4(__funnelshift_r(w[0], w[1], f), __funnelshift_r(w[1], w[2], f),
                           __funnelshift_r(w[2], w[3], f), __funnelshift_r(w[3], w4, f));
          }
          if constexpr (H3) {
            const int o = PB + STG + buf * DYB + (c >> 2) * STEPB + warp * 256 + ((c >> 1) & 1) * 128 + r7 * 16 +
                          (c & 1) * 8;
            uint32_t h0, l0, h1, l1;
            const float sdy = scl[1];
            m = max_abs4(m, make_float4(__uint_as_float(v.x), __uint_as_float(v.y), __uint_as_float(v.z),
                                        __uint_as_float(v.w)));
            split_fp16x2(sdy * __uint_as_float(v.x), sdy * __uint_as_float(v.y), h0, l0);
            split_fp16x2(sdy * __uint_as_float(v.z), sdy * __uint_as_float(v.w), h1, l1);
            *reinterpret_cast<uint2*>(smb + o) = make_uint2(h0, h1);
            *reinterpret_cast<uint2*>(smb + o + 2 * DYB) = make_uint2(l0, l1);
          } else {
            const int o = PB + STG + buf * DYB + (c >> 1) * STEPB + warp * 256 + (c & 1) * 128 + r7 * 16;
            if constexpr (MODE == 1) {
              v = make_uint4(round_tf32(v.x), round_tf32(v.y), round_tf32(v.z), round_tf32(v.w));
            }
            *reinterpret_cast<uint4*>(smb + o) = v;
          }
        }
      }
    }
    return m;
  };

  float acc[2][NACC];
#pragma unroll
  for (int b = 0; b < 2; ++b)
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[b][i] = 0.f;

  // B descriptors of k step 0 for buffers 0 and 1
  const uint64_t draw_b0 = gmma_desc(dyb0), draw_b1 = gmma_desc(dyb0 + DYB);

  float* wsl = ws + (int64_t)slice * K * kNW;
  bool ws_written = false;
  // 3xFP16 flushes the registers into the partial every FLUSH units, as the
  // mma.sync kernel's 3xTF32 does: the tensor cores' fp32 accumulation
  // truncates. Flushes are staggered over the slices: fewer CTAs update their
  // partials at once.
  constexpr int FLUSH = H3 ? 8 : 0;
  int since_flush = FLUSH > 0 ? slice % FLUSH : 0;
  bool ovf = false;   // 3xFP16: unit u's values left the run's range
  int rb = 0;
  bool loaded = false;
  int64_t dstart = 0;  // this lane's dy row of unit u (kCarry)
  int p = (int)(u0 % P), qc = (int)((u0 / P) % nQc);
  int64_t img = u0 / P / nQc;
  for (int64_t u = u0; u < u1; ++u) {
    const int qvalid = min(QC, Q - qc * QC);
    const int nst = (qvalid + PIX - 1) / PIX;
    const int buf = (int)(u & 1);

    if (!loaded) {
      // not prefetched (first unit, a new image / q-chunk, or a new 3xFP16
      // run): all 11 rows
      __syncthreads();  // every warpgroup is done with unit u-1's rows
      dstart = dy_start(img, qc, p);
      xs = row_base(img, sc);
      siwl = first_col(qc);
      if (dyw) copy_dy(dstart, buf, qvalid);
      stage_rows(img, qc, p, rb);
      cp_async_commit();
      cp_async_wait_group<0>();
      if constexpr (H3) {  // the run's scales
        float mx = 0.f;
        for (int row = warp; row < kCin * kKsz; row += kGThreads / 32)
          mx = row_max(mx, row % kCin, (rb + row / kCin) & (kRing - 1));
        mx = block_max<kGThreads>(mx, red);
        const float md = block_max<kGThreads>(dy_max(dstart, buf), red + kGThreads / 32);
        if (tid == 0) {  // scl's last readers (unit u-1's flush) are past block_max's barriers
          const int tx = max(fp16_exp(mx) - 1, -126), tdy = max(fp16_exp(md) - 1, -126);
          const int e = max(-(tx + tdy), -252);
          // an all-zero start gets scale 0, so that any value starts a new run
          scl[0] = mx > 0.f ? pow2f(tx) : 0.f;
          scl[1] = md > 0.f ? pow2f(tdy) : 0.f;
          scl[2] = pow2f(e / 2);
          scl[3] = pow2f(e - e / 2);
          scl[4] = pow2f(-tdy / 2);
          scl[5] = pow2f(-tdy - (-tdy / 2));
        }
        __syncthreads();
        for (int row = warp; row < kCin * kKsz; row += kGThreads / 32)
          split_row(0.f, row % kCin, (rb + row / kCin) & (kRing - 1));
        ovf = false;
      }
      relayout(dstart, buf);
    }
    // (otherwise unit u was staged and re-laid out at the end of unit u-1)
    fence_proxy_async();  // st.shared data -> the tensor cores' async proxy
    // After this barrier every warpgroup is done with unit u-1: its buffers
    // and the ring rows that only it used may be overwritten by the prefetch.
    __syncthreads();

    const bool next = (u + 1 < u1) && (p + 1 < P);

    int aoff[2][2];
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        int base = rbase[b][h], row = rrow[b][h];
        if constexpr (!kCarry) {
          const WindowColumn w = window_column(mrow0 + 64 * b + 8 * h, CS, sh, G::kOnes);
          base = w.base + (PIX / 2) * t;
          row = w.r;
        }
        aoff[b][h] = row < 0 ? base : base + ((rb + row) & (kRing - 1)) * RS;
      }

    // A fragment of k step st: pixel columns PIX st + (t, t + PIX/2) (fp32: one
    // word each; 16-bit: pixel pairs 2t, 2t + 1 packed), rows g, g + 8
    uint32_t A[2][2][4], L[2][2][4];
    auto gather = [&](int st, uint32_t (&a)[2][4], uint32_t (&l)[2][4]) {
      const int o = 4 * PIX * st;
#pragma unroll
      for (int b = 0; b < 2; ++b) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int base = aoff[b][e & 1] + o + (e >> 1) * 2 * PIX;
          if constexpr (H3) {  // the hi halves of two pixels' words, and the lo halves
            const uint32_t w0 = smw[base], w1 = smw[base + 4];
            a[b][e] = __byte_perm(w0, w1, 0x5410);
            l[b][e] = __byte_perm(w0, w1, 0x7632);
          } else if constexpr (F32) {
            a[b][e] = smw[base];
            if constexpr (MODE == 1) a[b][e] = round_tf32(a[b][e]);
          } else {
            a[b][e] = (uint32_t)sme[base] | ((uint32_t)sme[base + 4] << 16);
          }
        }
      }
    };
    // descriptors of k step 0; step st adds st * STEPB >> 4 to the address field (no carry: < 256 KB)
    const uint64_t draw0 = buf ? draw_b1 : draw_b0, dlo0 = gmma_desc(dyb0 + (2 + buf) * DYB);
    gather(0, A[0], L[0]);
#pragma unroll
    for (int st = 0; st < STEPS; ++st) {
      if (st < nst) {
        gmma_fence();
        const uint64_t dr = draw0 + (uint64_t)((st * STEPB) >> 4);
        if constexpr (H3) {  // lo * hi, hi * lo, then hi * hi
          const uint64_t dl = dlo0 + (uint64_t)((st * STEPB) >> 4);
#pragma unroll
          for (int b = 0; b < 2; ++b) gmma_rs<TA, NT8>(acc[b], L[st & 1][b], dr);
#pragma unroll
          for (int b = 0; b < 2; ++b) gmma_rs<TA, NT8>(acc[b], A[st & 1][b], dl);
        }
#pragma unroll
        for (int b = 0; b < 2; ++b) gmma_rs<TA, NT8>(acc[b], A[st & 1][b], dr);
        gmma_commit();
        if (st == 0 && next) {
          // prefetch the steady successor (next row: its dy rows, 4 new input
          // rows) while the tensor cores work
          if constexpr (!kCarry) dstart = dy_start(img, qc, p);
          if (dyw) copy_dy(dstart + Q, buf ^ 1, qvalid);
          stage_next_row(img, qc, p + 1, rb + 4);
          cp_async_commit();
        }
        if (st + 1 < nst) {
          gmma_wait<1>();
          gather(st + 1, A[(st + 1) & 1], L[(st + 1) & 1]);
        }
      }
    }
    if (next) {
      // the successor's dy rows -> canonical buffer buf ^ 1 (unit u-1's,
      // retired by every warpgroup before this unit's barrier) while this
      // unit's last wgmmas run
      cp_async_wait_group<0>();
      if constexpr (!kCarry) dstart = dy_start(img, qc, p);
      if constexpr (H3) {
        const float mx = split_row(0.f, sc, (rb + 4 + srr) & (kRing - 1));
        const float md = relayout(dstart + Q, buf ^ 1);  // every lane: it syncs the warp
        ovf = out_of_range(mx, scl[0]) || out_of_range(md, scl[1]);
      } else {
        relayout(dstart + Q, buf ^ 1);
      }
    }
    gmma_wait<0>();
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
      for (int i = 0; i < NACC; ++i) pin(acc[b][i]);

    // 3xFP16: a unit whose values left the run's range is restaged as a new run
    bool redo = false;
    if constexpr (H3) redo = next && __syncthreads_or(ovf);
    loaded = next && !redo;
    rb = next ? ((rb + 4) & (kRing - 1)) : 0;
    dstart += Q;
    // The flush: every FLUSH units, and before a 3xFP16 run sets its scales.
    // (Here, after the wgmmas' last wait: placed before the next unit's, the
    // accumulator writes serialize the wgmmas.)
    if (((FLUSH > 0 && ++since_flush >= FLUSH) || (H3 && !loaded)) && u + 1 < u1) {
      gflush<NT8, H3>(acc, wsl, mrow0, t, ws_written, scl + 2);
      ws_written = true;
      since_flush = 0;
    }
    next_unit(p, qc, img, P, nQc);
  }
  gflush<NT8, H3>(acc, wsl, mrow0, t, ws_written, scl + 2);
#endif
}

template <typename T, int MODE, int NT8>
void launch_wgrad_gmma(const at::Tensor& go, const at::Tensor& in, int64_t padding,
                       const at::Tensor& gw, const std::optional<at::Tensor>& gb) {
  const int H = in.size(2), W = in.size(3);
  const int K = go.size(1), P = go.size(2), Q = go.size(3);
  const SplitK sk = split_k(go, in, GmmaGeo<T, MODE>::kQC);
  auto stream = at::cuda::getCurrentCUDAStream();
  constexpr int smem = gsmem_bytes<T, MODE, NT8>();
  const bool vec = in.is_contiguous() && W % (16 / sizeof(T)) == 0 &&
                   reinterpret_cast<uintptr_t>(in.data_ptr()) % 16 == 0;
  auto kern = vec ? wgrad_gmma_kernel<T, MODE, NT8, true> : wgrad_gmma_kernel<T, MODE, NT8, false>;
  allow_max_dynamic_smem(kern);
  kern<<<sk.S, kGThreads, smem, stream>>>(go.data_ptr<T>(), in.data_ptr<T>(), in.stride(0), in.stride(1),
                                          in.stride(2), in.stride(3), K, H, W, P, Q, (int)padding, sk.nQc, sk.U,
                                          sk.S, sk.ws.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  reduce_partials<T>(sk, gw, gb, stream);
}

// The wgmma kernel where its copies apply: dy 16-byte aligned (staged by
// 16-byte copies); 16-bit inputs NCHW with W even and 4-byte aligned (the
// caller transposes channels_last inputs first: with its 16-byte transpose
// the weight gradient takes 0.301 ms against 0.266 for NCHW, H200, batch
// 256, bf16). MODE as the kernel's.
template <typename T, int MODE>
bool try_wgrad_gmma(const at::Tensor& go, const at::Tensor& in, int64_t padding, const at::Tensor& gw,
                    const std::optional<at::Tensor>& gb) {
  if (reinterpret_cast<uintptr_t>(go.data_ptr()) % 16 != 0) return false;
  if constexpr (!std::is_same_v<T, float>) {
    if (!(in.is_contiguous() && in.size(3) % 2 == 0 && reinterpret_cast<uintptr_t>(in.data_ptr()) % 4 == 0))
      return false;
  }
  if (go.size(1) == 96) {
    launch_wgrad_gmma<T, MODE, 12>(go, in, padding, gw, gb);
  } else {
    launch_wgrad_gmma<T, MODE, 8>(go, in, padding, gw, gb);
  }
  return true;
}
}  // namespace

bool conv11s4_backward_weight_fast(const at::Tensor& grad_output,
                                   const at::Tensor& input, int64_t padding,
                                   Fp32Math math, const at::Tensor& grad_weight,
                                   const std::optional<at::Tensor>& grad_bias) {
  if (input.dim() != 4 || grad_output.dim() != 4) return false;
  if (input.size(1) != kCin) return false;
  const int64_t K = grad_output.size(1);
  if (K != 64 && K != 96) return false;
  const auto dt = input.scalar_type();
  if (dt != at::kFloat && dt != at::kBFloat16 && dt != at::kHalf) return false;
  if (grad_output.scalar_type() != dt || grad_weight.scalar_type() != dt)
    return false;
  if (grad_bias.has_value() &&
      (grad_bias->scalar_type() != dt || !grad_bias->is_contiguous()))
    return false;
  if (!grad_output.is_contiguous() || !grad_weight.is_contiguous()) return false;
  if (!input.is_contiguous() &&
      !input.is_contiguous(at::MemoryFormat::ChannelsLast))
    return false;
  const int64_t N = input.size(0), H = input.size(2), W = input.size(3);
  const int64_t P = grad_output.size(2), Q = grad_output.size(3);
  if (N < 1 || P < 1 || Q < 1 || padding < 0) return false;
  if (P != (H + 2 * padding - kKsz) / 4 + 1 ||
      Q != (W + 2 * padding - kKsz) / 4 + 1)
    return false;
  // Offsets inside one image and one dy plane stay in 32 bits; the image
  // and channel bases are 64-bit.
  if (input.stride(0) > INT32_MAX || H * W * kCin > INT32_MAX ||
      padding > 1 << 20 || P * Q > INT32_MAX)
    return false;
  if (at::cuda::getCurrentDeviceProperties()->major < 8) return false;
  const c10::cuda::CUDAGuard guard(input.device());
  const bool gmma = gmma_available(input.get_device());

  if (dt == at::kFloat) {
    if (math == Fp32Math::kAccurate) {
      if (!(gmma && try_wgrad_gmma<float, 3>(grad_output, input, padding, grad_weight, grad_bias)))
        dispatch_k<float, 0>(grad_output, input, padding, grad_weight, grad_bias);
    } else {
      if (!(gmma && try_wgrad_gmma<float, 1>(grad_output, input, padding, grad_weight, grad_bias)))
        dispatch_k<float, 1>(grad_output, input, padding, grad_weight, grad_bias);
    }
  } else if (dt == at::kBFloat16) {
    if (!(gmma && (conv11s4_backward_weight_planes(grad_output, input, padding, grad_weight, grad_bias) ||
                   try_wgrad_gmma<at::BFloat16, 2>(grad_output, input, padding, grad_weight, grad_bias))))
      dispatch_k<at::BFloat16, 2>(grad_output, input, padding, grad_weight, grad_bias);
  } else {
    if (!(gmma && (conv11s4_backward_weight_planes(grad_output, input, padding, grad_weight, grad_bias) ||
                   try_wgrad_gmma<at::Half, 2>(grad_output, input, padding, grad_weight, grad_bias))))
      dispatch_k<at::Half, 2>(grad_output, input, padding, grad_weight, grad_bias);
  }
  return true;
}

}  // namespace alexop::cuda
