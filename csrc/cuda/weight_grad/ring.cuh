#pragma once
// The weight gradient's split-K kernels (mma_sync.cuh, gmma.cuh): their
// geometry, the input-row ring, the register tile and the reduction.
//
// GEMM D[k][n] = sum_l dy[k][l] * im2col(x)[l][n] with k the output channel
// (M = K), n = (c, r, s) (N = 363, padded to 384; column 363 is a column of
// ones so the GEMM also yields grad_bias), and l = (img, p, q) the huge
// reduction (N*P*Q). Split-K over the whole GPU: slice s of S owns a
// contiguous range of units (img, q-chunk, p) = one output row each, and
// writes an fp32 partial [K][kNW]; a second kernel sums the partials in
// slice order (deterministic, no atomics). The input rows stay in a 16-row
// ring in shared memory, so consecutive output rows load only 4 new input
// rows.

#include "../common/constants.h"
#include "../common/exact.cuh"
#include "../common/launch.h"
#include "../common/precision.h"
#include "../common/ptx.cuh"
#include "launch.h"

#include <ATen/core/Tensor.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace alexop::cuda::weight_grad::ring {

constexpr int kThreads = 192;  // mma.sync: 6 warps, all split along N
constexpr int kNT = 8;         // n8-tiles per warp: 6 * 8 * 8 = 384 columns
constexpr int kNW = kKred + 1;  // + the grad_bias column
constexpr int kSlots = 12;  // v1 ring of input rows: 11 live + 1 being refilled

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

// The v2 pipeline's ring (mma.sync fp32 and 16-bit, wgmma): a ring of 16
// input rows per channel (11 live + 4 prefetched + 1 spare); row 4p+rr of
// the current unit sits in slot (rb + rr) & 15. fp32 (v2): natural column
// layout, 56 pixels (7 k8 steps) a unit.
constexpr int kRing = 16;
constexpr int kQC2 = 56;                 // q per stage (7 k8 steps)
constexpr int kJW2 = 4 * kQC2 + 8;       // 232 image columns per patch row
constexpr int kRS2 = 248;                // row stride: 24 mod 32 banks
constexpr int kCS2 = kRing * kRS2;       // channel stride
constexpr int kLDA2 = 60;                // dy row stride: 28 mod 32 banks
constexpr int kOnes2 = kC * kCS2;      // ones read with stride 4
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
  if (n >= kKred) return {ones, -1};
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

// 16-bit (v3): the same ring of 4-byte pairs, 64 pixels (4 k16 steps) a
// unit: rows copied from the even column at or before 4*q0 - pad.
constexpr int kQC3 = 64;                 // q per stage (4 k16 steps)
constexpr int kJW3 = 4 * kQC3 + 10;      // 266 half columns used per row
constexpr int kRS3 = 280;                // row stride in halves
constexpr int kCS3 = kRing * kRS3;
constexpr int kLDA3 = 72;                // halves; 36 words = 4 mod 32 banks
constexpr int kOnes3 = kC * kCS3;      // ones read with stride 4
constexpr int kAoff3 = kOnes3 + 4 * kQC3 + 16;

template <int MT>
constexpr int wgrad3_smem_halves() {
  return kAoff3 + 2 * MT * 16 * kLDA3;
}

// Seven CTAs an SM where it holds eight, as many as it holds elsewhere.
#define ALEXOP_REDUCE_CTAS (ALEXOP_CTAS_OF_256 < 7 ? ALEXOP_CTAS_OF_256 : 7)

// Sums the per-slice partials in slice order (fixed: bitwise reproducible);
// a NaN sum is recomputed exactly from the operands o. The bounds keep the
// sums' registers: the recomputation's call, which would take more, spills.
template <typename T>
__global__ void __launch_bounds__(256, ALEXOP_REDUCE_CTAS) wgrad_reduce_kernel(const float* __restrict__ ws, int S, int K,
                                    T* __restrict__ gw, T* __restrict__ gb, const exact::WgradOperands o) {
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
  if (n < kKred) {
    exact::store_wgrad(sum, o, k, n, gw + (int64_t)k * kKred + n);
  } else if (gb != nullptr) {
    exact::store_wgrad(sum, o, k, n, gb + k);
  }
}

// Split-K bookkeeping shared by the launchers: a unit is qc pixels of one
// output row, S = min(#SMs, units) slices, one fp32 partial [K][kNW] each
// (K: the filters the kernel is built for; a view of grad_output's channels
// may hold fewer).
struct SplitK {
  int nQc, S;
  int64_t U;
  at::Tensor ws;
  float* partials() const { return static_cast<float*>(ws.data_ptr()); }
};
inline SplitK split_k(const at::Tensor& go, const at::Tensor& in, int64_t K, int qc) {
  SplitK sk;
  sk.nQc = (int)((go.size(3) + qc - 1) / qc);
  sk.U = go.size(0) * sk.nQc * go.size(2);
  sk.S = (int)std::min<int64_t>(at::cuda::getCurrentDeviceProperties()->multiProcessorCount, sk.U);
  sk.ws = scratch(in, (int64_t)sk.S * K * kNW * (int64_t)sizeof(float));
  return sk;
}
// The slices' partials summed in slice order into grad_weight / grad_bias.
template <typename T>
void reduce_partials(const SplitK& sk, const Problem& pr, const Args& a, cudaStream_t stream) {
  const at::Tensor& gw = a.grad_weight;
  const at::Tensor* gb = a.grad_bias;
  const int K = (int)gw.size(0), tot = K * kNW;
  wgrad_reduce_kernel<T><<<(tot + 255) / 256, 256, 0, stream>>>(
      sk.partials(), sk.S, K, gw.data_ptr<T>(), gb != nullptr ? gb->data_ptr<T>() : nullptr,
      exact::wgrad_operands(a.grad_output, a.input, (int)pr.pad));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace alexop::cuda::weight_grad::ring
