// The micro-kernels for AVX-512 (zmm registers: 32 of them, so register
// blocks of 24 accumulators). Compiled for that instruction set by function
// attributes rather than flags, because setuptools' flags apply to every file
// of the extension; cpu_isa() calls them only where the CPU has AVX-512.

#include "kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

// GCC 12's AVX-512 headers pass self-initialised _mm512_undefined_*() values
// to the shuffle builtins, which -Wmaybe-uninitialized reports here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define ALEXOP_TARGET \
  __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")))
#define ALEXOP_VEC ALEXOP_TARGET inline __attribute__((always_inline))

namespace alexop::cpu::avx512 {

ALEXOP_VEC __m512 vload(const float* p) { return _mm512_loadu_ps(p); }
ALEXOP_VEC __m512d vload(const double* p) { return _mm512_loadu_pd(p); }
ALEXOP_VEC void vstore(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
ALEXOP_VEC void vstore(double* p, __m512d v) { _mm512_storeu_pd(p, v); }
// Broadcasts are asm loads: as plain loads the compiler sees that a tile's
// overlapping windows read the same scalars at different taps, keeps them in
// registers across taps and spills the accumulators instead.
ALEXOP_VEC __m512 vbcast(const float* p) {
  __m512 r;
  asm volatile("vbroadcastss %1, %0" : "=v"(r) : "m"(*p));
  return r;
}
ALEXOP_VEC __m512d vbcast(const double* p) {
  __m512d r;
  asm volatile("vbroadcastsd %1, %0" : "=v"(r) : "m"(*p));
  return r;
}
ALEXOP_VEC __m512 vfma(__m512 a, __m512 b, __m512 c) {
  return _mm512_fmadd_ps(a, b, c);
}
ALEXOP_VEC __m512d vfma(__m512d a, __m512d b, __m512d c) {
  return _mm512_fmadd_pd(a, b, c);
}
ALEXOP_VEC __m512 vadd(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
ALEXOP_VEC __m512 vsub(__m512 a, __m512 b) { return _mm512_sub_ps(a, b); }
ALEXOP_VEC __m512 vload_n(const float* p, int n) {
  return _mm512_maskz_loadu_ps((1u << n) - 1, p);
}
ALEXOP_VEC __m512d vload_n(const double* p, int n) {
  return _mm512_maskz_loadu_pd((1u << n) - 1, p);
}
ALEXOP_VEC void vstore_half(float* p, __m512 v) {
  _mm256_storeu_ps(p, _mm512_castps512_ps256(v));
}
ALEXOP_VEC void vstore_half(double* p, __m512d v) {
  _mm256_storeu_pd(p, _mm512_castpd512_pd256(v));
}
ALEXOP_VEC void vstore_masked(float* p, __m512 v, int n) {
  _mm512_mask_storeu_ps(p, (1u << n) - 1, v);
}
ALEXOP_VEC void vstore_masked(double* p, __m512d v, int n) {
  _mm512_mask_storeu_pd(p, (1u << n) - 1, v);
}
// whole and half registers are stored unmasked: masked stores cost more
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
template <int Imm>
ALEXOP_VEC __m512 shuffle_lanes(__m512 a, __m512 b) {
  return _mm512_shuffle_f32x4(a, b, Imm);
}
template <int Imm>
ALEXOP_VEC __m512d shuffle_lanes(__m512d a, __m512d b) {
  return _mm512_shuffle_f64x2(a, b, Imm);
}

// For each j < step, the 4 x 4 transpose of the 128-bit lanes of
// r[j], r[step + j], r[2 step + j], r[3 step + j], written back in order.
template <typename Reg>
ALEXOP_VEC void lanes4x4(Reg* r, int step) {
  for (int j = 0; j < step; ++j) {
    Reg* q[4] = {r + j, r + step + j, r + 2 * step + j, r + 3 * step + j};
    const Reg a0 = shuffle_lanes<0x44>(*q[0], *q[1]);
    const Reg a1 = shuffle_lanes<0xee>(*q[0], *q[1]);
    const Reg a2 = shuffle_lanes<0x44>(*q[2], *q[3]);
    const Reg a3 = shuffle_lanes<0xee>(*q[2], *q[3]);
    *q[0] = shuffle_lanes<0x88>(a0, a2);
    *q[1] = shuffle_lanes<0xdd>(a0, a2);
    *q[2] = shuffle_lanes<0x88>(a1, a3);
    *q[3] = shuffle_lanes<0xdd>(a1, a3);
  }
}

// 16 x 16 floats: pairs, then quadruples within 128-bit lanes, then lanes.
ALEXOP_VEC void vtranspose(__m512* r) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
  }
  lanes4x4(r, 4);
}

// 8 x 8 doubles: pairs within 128-bit lanes, then lanes.
ALEXOP_VEC void vtranspose(__m512d* r) {
  for (int i = 0; i < 4; ++i) {
    const __m512d lo = _mm512_unpacklo_pd(r[2 * i], r[2 * i + 1]);
    r[2 * i + 1] = _mm512_unpackhi_pd(r[2 * i], r[2 * i + 1]);
    r[2 * i] = lo;
  }
  lanes4x4(r, 2);
}

}  // namespace alexop::cpu::avx512

#define ALEXOP_CPU_ISA avx512
#include "micro_kernels.h"

namespace alexop::cpu {
namespace avx512 {

// A row of the 16x16 block is 16 floats: column phase b of column tap s'
// in lane 4s' + b, so B^T's column pass combines 128-bit lanes: lanes
// (z0, z1, z2, z1) + sign * (z2, z2, z1, z3).
ALEXOP_TARGET void winograd_input(const float* in, int64_t pitch,
                                  int64_t cstride, int64_t C, float* v,
                                  int64_t xi_stride) {
  const __m512 sign = _mm512_setr_ps(-1, -1, -1, -1, 1, 1, 1, 1, -1, -1, -1,
                                     -1, -1, -1, -1, -1);
  for (int64_t c = 0; c < C; ++c) {
    for (int a = 0; a < 4; ++a) {
      const float* p = in + c * cstride + a * pitch;
      const __m512 d0 = _mm512_loadu_ps(p), d1 = _mm512_loadu_ps(p + 4 * pitch);
      const __m512 d2 = _mm512_loadu_ps(p + 8 * pitch);
      const __m512 d3 = _mm512_loadu_ps(p + 12 * pitch);
      // B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1] over the row taps r'
      const __m512 rows[4] = {_mm512_sub_ps(d0, d2), _mm512_add_ps(d1, d2),
                              _mm512_sub_ps(d2, d1), _mm512_sub_ps(d1, d3)};
      for (int xi = 0; xi < 4; ++xi) {
        const __m512 z = rows[xi];
        const __m512 keep = _mm512_shuffle_f32x4(z, z, _MM_SHUFFLE(1, 2, 1, 0));
        const __m512 with = _mm512_shuffle_f32x4(z, z, _MM_SHUFFLE(3, 1, 2, 2));
        _mm512_storeu_ps(v + xi * xi_stride + c * 64 + a * 16,
                         _mm512_fmadd_ps(sign, with, keep));
      }
    }
  }
}

template <typename T, typename... Blockings>
Kernels<T> make(Blockings... blockings) {
  using V = Vec<T>;
  auto k = make_kernels<V, 2>(&transpose_blocks<V>, blockings...);
  if constexpr (sizeof(T) == 4) {
    add_winograd<V, 3, 2>(k, &winograd_input, blockings...);
  }
  return k;
}

}  // namespace avx512

template <typename T>
const Kernels<T>& kernels_avx512() {
  static const auto k =
      avx512::make<T>(avx512::Blocking<3, 8>{}, avx512::Blocking<4, 6>{},
                      avx512::Blocking<2, 12>{}, avx512::Blocking<1, 24>{});
  return k;
}

template const Kernels<float>& kernels_avx512<float>();
template const Kernels<double>& kernels_avx512<double>();

}  // namespace alexop::cpu

#endif
