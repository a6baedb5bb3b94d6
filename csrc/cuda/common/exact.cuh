#pragma once
// Single results recomputed exactly from the original operands: the
// tensor-core kernels' cold path for results that came out NaN.
//
// A tensor-core result is NaN where (a) the true result is NaN, (b) a split
// operand's small part is Inf - Inf (3xTF32, 3xFP16, bf16x3), or (c) a
// reduction slot that the kernel's tiling pads with zeros (a zero weight,
// zero dy or padded pixel) met an Inf or NaN operand. A true ±Inf never
// comes out finite, and a true finite result comes out NaN at worst, never
// ±Inf: the TF32, bf16 and fp16 operands keep fp32's exponent range after
// the power-of-two scaling. So every kernel recomputes each NaN result here:
// a sum in double over exactly the terms of float64 F.conv2d (padded pixels
// as zeros, so that 0 * Inf is NaN as there), which is NaN, ±Inf or the
// finite value where float64 gives that. The sums are noinline functions,
// called from cold paths (fix_nan, store_wgrad), so that they add no code
// to the kernels' hot paths beyond the NaN test.

#include "constants.h"
#include "ptx.cuh"

#include <cstdint>

namespace alexop::cuda::exact {

// Element strides (image, channel, row, column) of an (N, 3, H, W) input.
struct Strides {
  int64_t n, c, h, w;
};
__host__ __device__ inline Strides dense(int H, int W, bool nhwc) {
  const int64_t hw = (int64_t)H * W;
  return nhwc ? Strides{kC * hw, 1, (int64_t)kC * W, kC} : Strides{kC * hw, hw, W, 1};
}

template <typename T>
__device__ __forceinline__ double dbl(T v) {
  return (double)to_f(v);
}

// Output (n, k, p, q) without the bias, from x (element strides sN, sC,
// sH, sW) and the weights w (K, C, 11, 11) contiguous: all C * 121 taps.
// The kernels pass their Params' fields as they are: arithmetic on them at
// the call site would be hoisted out of their tile loops and hold registers.
template <typename T>
__device__ __noinline__ float forward(const T* x, int64_t sN, int sC, int sH, int sW, int H, int W, int C,
                                      const T* w, int pad, int n, int k, int p, int q) {
  const T* xn = x + n * sN;
  const T* wk = w + (int64_t)k * C * kR * kR;
  double acc = 0.0;
#pragma unroll 1
  for (int c = 0; c < C; ++c)
#pragma unroll 1
    for (int r = 0; r < kR; ++r) {
      const int h = 4 * p + r - pad;
#pragma unroll 1
      for (int s = 0; s < kR; ++s) {
        const int col = 4 * q + s - pad;
        const bool in = h >= 0 && h < H && col >= 0 && col < W;
        acc += (in ? dbl(xn[(int64_t)c * sC + (int64_t)h * sH + (int64_t)col * sW]) : 0.0) *
               dbl(wk[(c * kR + r) * kR + s]);
      }
    }
  return (float)acc;
}

// Input gradient (n, c, h, x) from dy (N, K, P, Q) contiguous and the
// weights: the taps whose output pixel ((h + pad - r) / 4, (x + pad - s) /
// 4) exists.
template <typename T>
__device__ __noinline__ float input_grad(const T* dy, int K, int P, int Q, const T* w, int pad, int n, int c, int h,
                                         int x) {
  const int hp = h + pad, xp = x + pad;
  double acc = 0.0;
#pragma unroll 1
  for (int k = 0; k < K; ++k) {
    const T* dyk = dy + ((int64_t)n * K + k) * P * Q;
    const T* wk = w + ((int64_t)k * kC + c) * kR * kR;
    for (int r = hp % 4; r < kR && r <= hp; r += 4) {
      const int p = (hp - r) / 4;
      if (p >= P) continue;
      for (int s = xp % 4; s < kR && s <= xp; s += 4) {
        const int q = (xp - s) / 4;
        if (q < Q) acc += dbl(dyk[p * Q + q]) * dbl(wk[r * kR + s]);
      }
    }
  }
  return (float)acc;
}

// What the weight gradient's reductions recompute from: dy (N, K, P, Q)
// and x as the kernel read them.
struct WgradOperands {
  const void* dy;
  const void* x;
  Strides sx, sdy;  // dy: a slice of its channels is a view, NCHW or channels_last
  int N, C, K, H, W, P, Q, pad;  // C: x's channels (a kernel's past them are zeros)
};
// The operands of tensors dy and x (any tensor type with ATen's accessors).
template <typename Tensor>
WgradOperands wgrad_operands(const Tensor& dy, const Tensor& x, int pad) {
  return {dy.data_ptr(), x.data_ptr(), {x.stride(0), x.stride(1), x.stride(2), x.stride(3)},
          {dy.stride(0), dy.stride(1), dy.stride(2), dy.stride(3)},
          (int)x.size(0), (int)x.size(1), (int)dy.size(1), (int)x.size(2), (int)x.size(3), (int)dy.size(2),
          (int)dy.size(3), pad};
}

// Writes the weight gradient (k, tap = (c, r, s)), or for tap = 363 the
// bias gradient of channel k, to *out: a sum over every output pixel (n, p,
// q), padded pixels as zeros. N * P * Q terms a result: slow, but reached
// only where an operand is Inf or NaN. It stores the result itself, so that
// no value of the caller lives across the call. A filter k past dy's
// channels (a kernel's rows past a filter slice, cut by the caller) or a
// channel c past x's (zero rows) is 0.
template <typename T>
__device__ __noinline__ void weight_grad(const WgradOperands o, int k, int tap, T* out) {
  const T* dy = static_cast<const T*>(o.dy);
  const T* x = static_cast<const T*>(o.x);
  const bool bias = tap == kKred;
  const int c = tap / (kR * kR), r = tap / kR % kR, s = tap % kR;
  double acc = 0.0;
#pragma unroll 1
  for (int n = 0; n < (k < o.K && (bias || c < o.C) ? o.N : 0); ++n) {
    const T* dyk = dy + n * o.sdy.n + k * o.sdy.c;
    const T* xc = x + n * o.sx.n + c * o.sx.c;
#pragma unroll 1
    for (int p = 0; p < o.P; ++p) {
      const int h = 4 * p + r - o.pad;
      for (int q = 0; q < o.Q; ++q) {
        const int col = 4 * q + s - o.pad;
        const bool in = h >= 0 && h < o.H && col >= 0 && col < o.W;
        const double d = dbl(dyk[p * o.sdy.h + q * o.sdy.w]);
        acc += bias ? d : d * (in ? dbl(xc[h * o.sx.h + col * o.sx.w]) : 0.0);
      }
    }
  }
  *out = from_f<T>((float)acc);
}

// *out = a weight-gradient reduction's sum for (k, tap), recomputed where it
// came out NaN.
template <typename T>
__device__ __forceinline__ void store_wgrad(float sum, const WgradOperands& o, int k, int tap, T* out) {
  if (__builtin_expect(sum != sum, 0)) {
    weight_grad(o, k, tap, out);
  } else {
    *out = from_f<T>(sum);
  }
}

// Replaces the NaN values of v[0..N) by exact(i), i the value's index (exact
// may return v[i] itself for a value that is dropped). The hot path is one
// test of all N (two values per compare) and a branch; the cold path copies
// v to local memory and runs one call site in a rolled loop, where N
// unrolled calls would each save the live accumulators around them.
template <int N, typename Exact>
__device__ __forceinline__ void fix_nan(float* v, Exact&& exact) {
  static_assert(N % 2 == 0, "values tested in pairs");
  bool nan = false;
#pragma unroll
  for (int i = 0; i < N; i += 2) nan |= (v[i] != v[i]) | (v[i + 1] != v[i + 1]);
  if (__builtin_expect(nan, 0)) {
    float u[N];
#pragma unroll
    for (int i = 0; i < N; ++i) u[i] = v[i];
#pragma unroll 1
    for (int i = 0; i < N; ++i)
      if (u[i] != u[i]) u[i] = exact(i, u[i]);
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = u[i];
  }
}

}  // namespace alexop::cuda::exact
