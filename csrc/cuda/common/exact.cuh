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
// sH, sW) and the weights w (K, 3, 11, 11) contiguous: all 363 taps. The
// kernels pass their Params' fields as they are: arithmetic on them at the
// call site would be hoisted out of their tile loops and hold registers.
template <typename T>
__device__ __noinline__ float forward(const T* x, int64_t sN, int sC, int sH, int sW, int H, int W, const T* w,
                                      int pad, int n, int k, int p, int q) {
  const T* xn = x + n * sN;
  const T* wk = w + (int64_t)k * kKred;
  double acc = 0.0;
#pragma unroll 1
  for (int c = 0; c < kC; ++c)
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
