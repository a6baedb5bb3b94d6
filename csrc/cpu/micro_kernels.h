#pragma once
// The micro-kernels, written once over a vector type (Vec below). Each
// kernels_<isa>.cpp defines ALEXOP_CPU_ISA (the namespace, like ATen's
// CPU_CAPABILITY), ALEXOP_TARGET (the function attribute that lets the
// compiler use that instruction set here only) and ALEXOP_VEC (the same,
// inlined) and its registers' one-line operations, then includes this file.
// Register blocks are arrays indexed by loop counters the compiler unrolls
// completely, so they live in registers.

#include "kernels.h"

#if defined(__clang__)
#define ALEXOP_UNROLL _Pragma("unroll")
#else
#define ALEXOP_UNROLL _Pragma("GCC unroll 32")
#endif

namespace alexop::cpu::ALEXOP_CPU_ISA {

// The first n lanes of v stored, for an instruction set with vstore_half
// and vstore_masked: whole and half registers are stored unmasked, since
// masked stores cost more.
template <typename T, typename Reg>
ALEXOP_VEC void vstore_n(T* p, Reg v, int n) {
  constexpr int lanes = sizeof(Reg) / sizeof(T);
  if (n == lanes) {
    vstore(p, v);
  } else if (n == lanes / 2) {
    vstore_half(p, v);
  } else {
    vstore_masked(p, v, n);
  }
}

// T scalars in a register, over the operations the instruction set's
// file defines for its register types: vload, vstore, vbcast (one scalar
// from memory to every lane), vfma; vadd and vsub for the Winograd
// transforms; vload_n, vstore_half and vstore_masked (vstore_n above: the
// first n lanes) and vtranspose (lane j of r[i] <-> lane i of r[j]) for the
// register transpose.
template <typename Scalar>
struct Vec {
  using T = Scalar;
  using Reg = decltype(vload(static_cast<const T*>(nullptr)));
  static constexpr int kLanes = sizeof(Reg) / sizeof(T);
  ALEXOP_VEC static Reg zero() { return Reg{}; }
  ALEXOP_VEC static Reg load(const T* p) { return vload(p); }
  ALEXOP_VEC static void store(T* p, Reg v) { vstore(p, v); }
  ALEXOP_VEC static Reg bcast(const T* p) { return vbcast(p); }
  ALEXOP_VEC static Reg fma(Reg a, Reg b, Reg c) { return vfma(a, b, c); }
  ALEXOP_VEC static Reg add(Reg a, Reg b) { return vadd(a, b); }
  ALEXOP_VEC static Reg sub(Reg a, Reg b) { return vsub(a, b); }
  ALEXOP_VEC static Reg load_n(const T* p, int n) { return vload_n(p, n); }
  ALEXOP_VEC static void store_n(T* p, Reg v, int n) { vstore_n(p, v, n); }
  ALEXOP_VEC static void transpose(Reg* r) { vtranspose(r); }
};

template <class V, int KV, int M, int S>
ALEXOP_TARGET void row_conv(const typename V::T* in, const int64_t* offsets,
                            int64_t cstride, int64_t rstride, int64_t nchan,
                            int64_t nrows, const typename V::T* w,
                            const typename V::T* init, typename V::T* out) {
  using Reg = typename V::Reg;
  constexpr int L = V::kLanes, B = KV * L;
  int64_t offset[M];
  ALEXOP_UNROLL
  for (int m = 0; m < M; ++m) {
    offset[m] = offsets[m];
  }
  Reg acc[M][KV];
  ALEXOP_UNROLL
  for (int v = 0; v < KV; ++v) {
    const Reg start = V::load(init + v * L);
    ALEXOP_UNROLL
    for (int m = 0; m < M; ++m) {
      acc[m][v] = start;
    }
  }
  for (int64_t c = 0; c < nchan; ++c) {
    const auto* row = in + c * cstride;
    for (int64_t r = 0; r < nrows; ++r, row += rstride, w += S * B) {
      ALEXOP_UNROLL
      for (int s = 0; s < S; ++s) {
        Reg wv[KV];
        ALEXOP_UNROLL
        for (int v = 0; v < KV; ++v) {
          wv[v] = V::load(w + s * B + v * L);
        }
        ALEXOP_UNROLL
        for (int m = 0; m < M; ++m) {
          const Reg x = V::bcast(row + offset[m] + s);
          ALEXOP_UNROLL
          for (int v = 0; v < KV; ++v) {
            acc[m][v] = V::fma(wv[v], x, acc[m][v]);
          }
        }
      }
    }
  }
  ALEXOP_UNROLL
  for (int m = 0; m < M; ++m) {
    ALEXOP_UNROLL
    for (int v = 0; v < KV; ++v) {
      V::store(out + m * B + v * L, acc[m][v]);
    }
  }
}

template <class V, int KV, int R, int S>
ALEXOP_TARGET void wgrad_taps(const typename V::T* x, int64_t xstep,
                              int64_t xstride, int64_t rstride,
                              const typename V::T* dyt, int64_t rows,
                              int64_t Q, typename V::T* acc) {
  using Reg = typename V::Reg;
  constexpr int L = V::kLanes, B = KV * L;
  Reg a[R][S][KV];
  ALEXOP_UNROLL
  for (int r = 0; r < R; ++r) {
    ALEXOP_UNROLL
    for (int s = 0; s < S; ++s) {
      ALEXOP_UNROLL
      for (int v = 0; v < KV; ++v) {
        a[r][s][v] = V::load(acc + (r * S + s) * B + v * L);
      }
    }
  }
  for (int64_t p = 0; p < rows; ++p, x += xstep) {
    const auto* xq = x;
    for (int64_t q = 0; q < Q; ++q, xq += xstride, dyt += B) {
      Reg d[KV];
      ALEXOP_UNROLL
      for (int v = 0; v < KV; ++v) {
        d[v] = V::load(dyt + v * L);
      }
      ALEXOP_UNROLL
      for (int r = 0; r < R; ++r) {
        ALEXOP_UNROLL
        for (int s = 0; s < S; ++s) {
          const Reg xs = V::bcast(xq + r * rstride + s);
          ALEXOP_UNROLL
          for (int v = 0; v < KV; ++v) {
            a[r][s][v] = V::fma(d[v], xs, a[r][s][v]);
          }
        }
      }
    }
  }
  ALEXOP_UNROLL
  for (int r = 0; r < R; ++r) {
    ALEXOP_UNROLL
    for (int s = 0; s < S; ++s) {
      ALEXOP_UNROLL
      for (int v = 0; v < KV; ++v) {
        V::store(acc + (r * S + s) * B + v * L, a[r][s][v]);
      }
    }
  }
}

// The transpose where the instruction set has no register version.
template <typename T>
ALEXOP_TARGET void transpose_scalar(const T* src, int64_t lds, int64_t rows,
                                    int64_t cols, T* dst, int64_t ldd) {
  for (int64_t c = 0; c < cols; ++c) {
    for (int64_t r = 0; r < rows; ++r) {
      dst[c * ldd + r] = src[r * lds + c];
    }
  }
}

// The transpose in L x L blocks of registers, for an instruction set with
// masked loads and stores (V::load_n / V::store_n take the first n lanes)
// and an in-register V::transpose.
template <class V>
ALEXOP_TARGET void transpose_blocks(const typename V::T* src, int64_t lds,
                                    int64_t rows, int64_t cols,
                                    typename V::T* dst, int64_t ldd) {
  using Reg = typename V::Reg;
  constexpr int L = V::kLanes;
  for (int64_t r0 = 0; r0 < rows; r0 += L) {
    const int nr = rows - r0 < L ? static_cast<int>(rows - r0) : L;
    for (int64_t c0 = 0; c0 < cols; c0 += L) {
      const int nc = cols - c0 < L ? static_cast<int>(cols - c0) : L;
      Reg b[L];
      ALEXOP_UNROLL
      for (int i = 0; i < L; ++i) {
        // sources are rows of tensors in memory: fetched two blocks ahead
        __builtin_prefetch(src + (r0 + i) * lds + c0 + 2 * L);
        b[i] = V::load_n(src + (r0 + i) * lds + c0, i < nr ? nc : 0);
      }
      V::transpose(b);
      ALEXOP_UNROLL
      for (int i = 0; i < L; ++i) {
        if (i < nc) {
          V::store_n(dst + (c0 + i) * ldd + r0, b[i], nr);
        }
      }
    }
  }
}

template <class V>
ALEXOP_TARGET bool winograd_output(const typename V::T* m, int64_t plane,
                                   int64_t n, int64_t B,
                                   const typename V::T* bias,
                                   typename V::T* out, int64_t row_stride) {
  using Reg = typename V::Reg;
  constexpr int L = V::kLanes;
  // y - y is 0 for finite y and NaN otherwise; NaN survives the sum
  Reg check = V::zero();
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < B; j += L) {
      // A^T = [1 1 1 0; 0 1 -1 -1], rows first
      Reg r0[4], r1[4];
      ALEXOP_UNROLL
      for (int nu = 0; nu < 4; ++nu) {
        const auto* p = m + nu * plane + t * B + j;
        const Reg m0 = V::load(p), m1 = V::load(p + 4 * plane);
        const Reg m2 = V::load(p + 8 * plane), m3 = V::load(p + 12 * plane);
        r0[nu] = V::add(V::add(m0, m1), m2);
        r1[nu] = V::sub(V::sub(m1, m2), m3);
      }
      const Reg b = V::load(bias + j);
      const Reg y[4] = {
          V::add(V::add(V::add(r0[0], r0[1]), r0[2]), b),
          V::add(V::sub(V::sub(r0[1], r0[2]), r0[3]), b),
          V::add(V::add(V::add(r1[0], r1[1]), r1[2]), b),
          V::add(V::sub(V::sub(r1[1], r1[2]), r1[3]), b)};
      auto* o = out + 2 * t * B + j;
      ALEXOP_UNROLL
      for (int i = 0; i < 4; ++i) {
        V::store(o + i / 2 * row_stride + i % 2 * B, y[i]);
        check = V::add(check, V::sub(y[i], y[i]));
      }
    }
  }
  typename V::T lanes[L];
  V::store(lanes, check);
  for (const auto x : lanes) {
    if (x != x) {
      return false;
    }
  }
  return true;
}

template <class V>
ALEXOP_TARGET typename V::Reg pixel_or_zero(const typename V::T* row,
                                            int64_t q, int64_t Q, int64_t B) {
  return row != nullptr && q < Q ? V::load(row + q * B) : V::zero();
}

template <class V>
ALEXOP_TARGET void winograd_grad_input(const typename V::T* g0,
                                       const typename V::T* g1, int64_t Q,
                                       int64_t n, int64_t B,
                                       typename V::T* d, int64_t plane) {
  using Reg = typename V::Reg;
  constexpr int L = V::kLanes;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < B; j += L) {
      // A = [1 0; 1 1; 1 -1; 0 -1], rows first
      Reg h[4][2];
      ALEXOP_UNROLL
      for (int dq = 0; dq < 2; ++dq) {
        const Reg top = pixel_or_zero<V>(g0 + j, 2 * t + dq, Q, B);
        const Reg bottom = pixel_or_zero<V>(g1 == nullptr ? g1 : g1 + j,
                                            2 * t + dq, Q, B);
        h[0][dq] = top;
        h[1][dq] = V::add(top, bottom);
        h[2][dq] = V::sub(top, bottom);
        h[3][dq] = V::sub(V::zero(), bottom);
      }
      ALEXOP_UNROLL
      for (int xi = 0; xi < 4; ++xi) {
        auto* o = d + 4 * xi * plane + t * B + j;
        V::store(o, h[xi][0]);
        V::store(o + plane, V::add(h[xi][0], h[xi][1]));
        V::store(o + 2 * plane, V::sub(h[xi][0], h[xi][1]));
        V::store(o + 3 * plane, V::sub(V::zero(), h[xi][1]));
      }
    }
  }
}

template <int KV, int M>
struct Blocking {};

template <class V, int S, int KV, int M>
RowConvTiles<typename V::T> tiles(Blocking<KV, M>) {
  static_assert(M >= 4 && M <= kMaxTilePixels,
                "tails are split into 4, 2 and 1 pixels");
  static_assert(KV * V::kLanes <= kMaxLanes, "blocks of at most kMaxLanes");
  // one vector wide, a tile's input broadcasts serve one vector of
  // channels, not 2-4, and its loads bound it (docs/cpu.md)
  return {KV,
          KV == 1 ? 13 : 10,
          {M, 4, 2, 1},
          {&row_conv<V, KV, M, S>, &row_conv<V, KV, 4, S>,
           &row_conv<V, KV, 2, S>, &row_conv<V, KV, 1, S>}};
}

// Blockings are listed best first: the caller takes the first that wastes
// no more lanes than the others.
template <class V, int WgradKV, class... Blockings>
Kernels<typename V::T> make_kernels(TransposeFn<typename V::T> transpose,
                                    Blockings... blockings) {
  Kernels<typename V::T> k{};
  k.lanes = V::kLanes;
  k.nsets = 0;
  ((k.forward[k.nsets] = tiles<V, 11>(blockings),
    k.input_grad[k.nsets] = tiles<V, 3>(blockings), ++k.nsets),
   ...);
  static_assert(WgradKV * V::kLanes <= kMaxLanes, "blocks of at most kMaxLanes");
  k.wgrad_kv = WgradKV;
  k.wgrad = &wgrad_taps<V, WgradKV, 1, 11>;
  k.transpose = transpose;
  return k;
}

// The Winograd forward's and weight gradient's functions, for an
// instruction set that has them.
template <class V, int WideKV, int NarrowKV, class... Blockings>
void add_winograd(Kernels<typename V::T>& k,
                  WinogradInputFn<typename V::T> input,
                  Blockings... blockings) {
  k.winograd_input = input;
  k.winograd_output = &winograd_output<V>;
  int i = 0;
  ((k.winograd_products[i++] = tiles<V, 4>(blockings)), ...);
  k.winograd_grad_input = &winograd_grad_input<V>;
  static_assert(WideKV * V::kLanes <= kMaxLanes, "blocks of at most kMaxLanes");
  // the narrow blocks cost more a vector (each block transforms grad_output
  // and calls the micro-kernel again): they are taken only where the wide
  // ones pad a third, as at 64 filters (perf-history S28)
  k.winograd_grad[0] = {WideKV, 10, &wgrad_taps<V, WideKV, 2, 4>};
  k.winograd_grad[1] = {NarrowKV, 12, &wgrad_taps<V, NarrowKV, 2, 4>};
}

}  // namespace alexop::cpu::ALEXOP_CPU_ISA
