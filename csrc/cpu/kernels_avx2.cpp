// The micro-kernels for AVX2 with FMA (16 ymm registers, so register blocks
// of 12 accumulators). Compiled for that instruction set by function
// attributes rather than flags, because setuptools' flags apply to every file
// of the extension; cpu_isa() calls them only where the CPU has AVX2 and FMA.

#include "kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#define ALEXOP_TARGET __attribute__((target("avx2,fma")))
#define ALEXOP_VEC ALEXOP_TARGET inline __attribute__((always_inline))

namespace alexop::cpu::avx2 {

ALEXOP_VEC __m256 vload(const float* p) { return _mm256_loadu_ps(p); }
ALEXOP_VEC __m256d vload(const double* p) { return _mm256_loadu_pd(p); }
ALEXOP_VEC void vstore(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
ALEXOP_VEC void vstore(double* p, __m256d v) { _mm256_storeu_pd(p, v); }
// Broadcasts are asm loads, as in kernels_avx512.cpp (and for its reason).
ALEXOP_VEC __m256 vbcast(const float* p) {
  __m256 r;
  asm volatile("vbroadcastss %1, %0" : "=x"(r) : "m"(*p));
  return r;
}
ALEXOP_VEC __m256d vbcast(const double* p) {
  __m256d r;
  asm volatile("vbroadcastsd %1, %0" : "=x"(r) : "m"(*p));
  return r;
}
ALEXOP_VEC __m256 vfma(__m256 a, __m256 b, __m256 c) {
  return _mm256_fmadd_ps(a, b, c);
}
ALEXOP_VEC __m256d vfma(__m256d a, __m256d b, __m256d c) {
  return _mm256_fmadd_pd(a, b, c);
}
ALEXOP_VEC __m256 vadd(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
ALEXOP_VEC __m256d vadd(__m256d a, __m256d b) { return _mm256_add_pd(a, b); }
ALEXOP_VEC __m256 vsub(__m256 a, __m256 b) { return _mm256_sub_ps(a, b); }
ALEXOP_VEC __m256d vsub(__m256d a, __m256d b) { return _mm256_sub_pd(a, b); }
// The first n lanes (masked-off lanes are neither read nor written).
ALEXOP_VEC __m256i first_lanes(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
ALEXOP_VEC __m256i first_lanes_pd(int n) {
  return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3));
}
ALEXOP_VEC __m256 vload_n(const float* p, int n) { return _mm256_maskload_ps(p, first_lanes(n)); }
ALEXOP_VEC __m256d vload_n(const double* p, int n) { return _mm256_maskload_pd(p, first_lanes_pd(n)); }
ALEXOP_VEC void vstore_half(float* p, __m256 v) { _mm_storeu_ps(p, _mm256_castps256_ps128(v)); }
ALEXOP_VEC void vstore_half(double* p, __m256d v) { _mm_storeu_pd(p, _mm256_castpd256_pd128(v)); }
ALEXOP_VEC void vstore_masked(float* p, __m256 v, int n) { _mm256_maskstore_ps(p, first_lanes(n), v); }
ALEXOP_VEC void vstore_masked(double* p, __m256d v, int n) { _mm256_maskstore_pd(p, first_lanes_pd(n), v); }
// 8 x 8 floats: pairs, then quadruples within 128-bit lanes, then lanes.
ALEXOP_VEC void vtranspose(__m256* r) {
  __m256 t[8], s[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    s[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    s[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
    s[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    s[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
  }
}
// 4 x 4 doubles: pairs within 128-bit lanes, then lanes.
ALEXOP_VEC void vtranspose(__m256d* r) {
  const __m256d t0 = _mm256_unpacklo_pd(r[0], r[1]), t1 = _mm256_unpackhi_pd(r[0], r[1]);
  const __m256d t2 = _mm256_unpacklo_pd(r[2], r[3]), t3 = _mm256_unpackhi_pd(r[2], r[3]);
  r[0] = _mm256_permute2f128_pd(t0, t2, 0x20);
  r[1] = _mm256_permute2f128_pd(t1, t3, 0x20);
  r[2] = _mm256_permute2f128_pd(t0, t2, 0x31);
  r[3] = _mm256_permute2f128_pd(t1, t3, 0x31);
}

}  // namespace alexop::cpu::avx2

#define ALEXOP_CPU_ISA avx2
#include "micro_kernels.h"

namespace alexop::cpu {
namespace avx2 {

// kernels_avx512.cpp's winograd_input with a row of the 16x16 block in two
// registers: lo holds column taps s' = 0, 1 and hi s' = 2, 3 (column phase
// b of tap s' in lane 4s' + b), so B^T's column pass, lanes (z0, z1, z2, z1)
// + sign * (z2, z2, z1, z3) in 128-bit units, permutes halves across them.
ALEXOP_TARGET void winograd_input(const float* in, int64_t pitch,
                                  int64_t cstride, int64_t C, float* v,
                                  int64_t xi_stride) {
  const __m256 sign_lo = _mm256_setr_ps(-1, -1, -1, -1, 1, 1, 1, 1);
  for (int64_t c = 0; c < C; ++c) {
    for (int a = 0; a < 4; ++a) {
      const float* p = in + c * cstride + a * pitch;
      __m256 rows[4][2];
      for (int h = 0; h < 2; ++h) {
        const __m256 d0 = _mm256_loadu_ps(p + 8 * h), d1 = _mm256_loadu_ps(p + 4 * pitch + 8 * h);
        const __m256 d2 = _mm256_loadu_ps(p + 8 * pitch + 8 * h);
        const __m256 d3 = _mm256_loadu_ps(p + 12 * pitch + 8 * h);
        // B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1] over the row taps r'
        rows[0][h] = _mm256_sub_ps(d0, d2);
        rows[1][h] = _mm256_add_ps(d1, d2);
        rows[2][h] = _mm256_sub_ps(d2, d1);
        rows[3][h] = _mm256_sub_ps(d1, d3);
      }
      for (int xi = 0; xi < 4; ++xi) {
        const __m256 lo = rows[xi][0], hi = rows[xi][1];
        // keep (z0, z1 | z2, z1), with (z2, z2 | z1, z3)
        const __m256 keep_hi = _mm256_permute2f128_ps(hi, lo, 0x30);
        const __m256 with_lo = _mm256_permute2f128_ps(hi, hi, 0x00);
        const __m256 with_hi = _mm256_permute2f128_ps(lo, hi, 0x31);
        float* out = v + xi * xi_stride + c * 64 + a * 16;
        _mm256_storeu_ps(out, _mm256_fmadd_ps(sign_lo, with_lo, lo));
        _mm256_storeu_ps(out + 8, _mm256_sub_ps(keep_hi, with_hi));
      }
    }
  }
}

template <typename T, typename... Blockings>
Kernels<T> make(Blockings... blockings) {
  using V = Vec<T>;
  auto k = make_kernels<V, 1>(&transpose_blocks<V>, blockings...);
  if constexpr (sizeof(T) == 4) {
    // one vector of filters: 2 x 4 phases of it fill half the 16 registers
    add_winograd<V, 1, 1>(k, &winograd_input, blockings...);
  }
  return k;
}

}  // namespace avx2

template <typename T>
const Kernels<T>& kernels_avx2() {
  static const auto k = avx2::make<T>(avx2::Blocking<3, 4>{}, avx2::Blocking<2, 6>{}, avx2::Blocking<1, 12>{});
  return k;
}

template const Kernels<float>& kernels_avx2<float>();
template const Kernels<double>& kernels_avx2<double>();

}  // namespace alexop::cpu

#endif
