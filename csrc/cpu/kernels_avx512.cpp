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

#define ALEXOP_CPU_ISA avx512
#define ALEXOP_TARGET \
  __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")))
#define ALEXOP_VEC ALEXOP_TARGET inline __attribute__((always_inline))
#include "micro_kernels.h"

namespace alexop::cpu {

// Broadcasts are asm loads: as plain loads the compiler sees that a tile's
// overlapping windows read the same scalars at different taps, keeps them in
// registers across taps and spills the accumulators instead.
namespace avx512 {

// For each j < step, the 4 x 4 transpose of the 128-bit lanes of
// r[j], r[step + j], r[2 step + j], r[3 step + j], written back as
// r[j], r[step + j], ... in lane order.
template <class V>
ALEXOP_VEC void lanes4x4(typename V::Reg* r, int step) {
  for (int j = 0; j < step; ++j) {
    const auto a0 = V::template shuffle_lanes<0x44>(r[j], r[step + j]);
    const auto a1 = V::template shuffle_lanes<0xee>(r[j], r[step + j]);
    const auto a2 = V::template shuffle_lanes<0x44>(r[2 * step + j], r[3 * step + j]);
    const auto a3 = V::template shuffle_lanes<0xee>(r[2 * step + j], r[3 * step + j]);
    r[j] = V::template shuffle_lanes<0x88>(a0, a2);
    r[step + j] = V::template shuffle_lanes<0xdd>(a0, a2);
    r[2 * step + j] = V::template shuffle_lanes<0x88>(a1, a3);
    r[3 * step + j] = V::template shuffle_lanes<0xdd>(a1, a3);
  }
}

struct F32 {
  using T = float;
  using Reg = __m512;
  static constexpr int kLanes = 16;
  ALEXOP_VEC static Reg zero() { return _mm512_setzero_ps(); }
  ALEXOP_VEC static Reg load(const T* p) { return _mm512_loadu_ps(p); }
  ALEXOP_VEC static Reg bcast(const T* p) {
    Reg r;
    asm volatile("vbroadcastss %1, %0" : "=v"(r) : "m"(*p));
    return r;
  }
  ALEXOP_VEC static Reg fma(Reg a, Reg b, Reg c) {
    return _mm512_fmadd_ps(a, b, c);
  }
  ALEXOP_VEC static Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  ALEXOP_VEC static Reg sub(Reg a, Reg b) { return _mm512_sub_ps(a, b); }
  ALEXOP_VEC static void store(T* p, Reg v) { _mm512_storeu_ps(p, v); }
  template <int Imm>
  ALEXOP_VEC static Reg shuffle_lanes(Reg a, Reg b) {
    return _mm512_shuffle_f32x4(a, b, Imm);
  }
  ALEXOP_VEC static Reg load_n(const T* p, int n) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
  }
  // whole and half registers are stored unmasked: masked stores cost more
  ALEXOP_VEC static void store_n(T* p, Reg v, int n) {
    if (n == 16) {
      _mm512_storeu_ps(p, v);
    } else if (n == 8) {
      _mm256_storeu_ps(p, _mm512_castps512_ps256(v));
    } else {
      _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v);
    }
  }
  // r[i] lane j <- r[j] lane i: pairs, then quadruples within 128-bit lanes,
  // then the 4 x 4 transpose of 128-bit lanes.
  ALEXOP_VEC static void transpose(Reg r[16]) {
    Reg t[16];
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
    lanes4x4<F32>(r, 4);
  }
};

struct F64 {
  using T = double;
  using Reg = __m512d;
  static constexpr int kLanes = 8;
  ALEXOP_VEC static Reg zero() { return _mm512_setzero_pd(); }
  ALEXOP_VEC static Reg load(const T* p) { return _mm512_loadu_pd(p); }
  ALEXOP_VEC static Reg bcast(const T* p) {
    Reg r;
    asm volatile("vbroadcastsd %1, %0" : "=v"(r) : "m"(*p));
    return r;
  }
  ALEXOP_VEC static Reg fma(Reg a, Reg b, Reg c) {
    return _mm512_fmadd_pd(a, b, c);
  }
  ALEXOP_VEC static void store(T* p, Reg v) { _mm512_storeu_pd(p, v); }
  template <int Imm>
  ALEXOP_VEC static Reg shuffle_lanes(Reg a, Reg b) {
    return _mm512_shuffle_f64x2(a, b, Imm);
  }
  ALEXOP_VEC static Reg load_n(const T* p, int n) {
    return _mm512_maskz_loadu_pd(static_cast<__mmask8>((1u << n) - 1), p);
  }
  ALEXOP_VEC static void store_n(T* p, Reg v, int n) {
    if (n == 8) {
      _mm512_storeu_pd(p, v);
    } else if (n == 4) {
      _mm256_storeu_pd(p, _mm512_castpd512_pd256(v));
    } else {
      _mm512_mask_storeu_pd(p, static_cast<__mmask8>((1u << n) - 1), v);
    }
  }
  // r[i] lane j <- r[j] lane i: pairs within 128-bit lanes, then the 4 x 4
  // transpose of 128-bit lanes.
  ALEXOP_VEC static void transpose(Reg r[8]) {
    for (int i = 0; i < 4; ++i) {
      const Reg lo = _mm512_unpacklo_pd(r[2 * i], r[2 * i + 1]);
      r[2 * i + 1] = _mm512_unpackhi_pd(r[2 * i], r[2 * i + 1]);
      r[2 * i] = lo;
    }
    lanes4x4<F64>(r, 2);
  }
};

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

template <class V>
Kernels<typename V::T> make() {
  return make_kernels<V, 2>(&transpose_blocks<V>, Blocking<3, 8>{}, Blocking<4, 6>{},
                            Blocking<2, 12>{}, Blocking<1, 24>{});
}

}  // namespace avx512

template <>
const Kernels<float>& kernels_avx512<float>() {
  static const auto k = [] {
    auto k = avx512::make<avx512::F32>();
    avx512::add_winograd<avx512::F32, 3>(
        k, &avx512::winograd_input, avx512::Blocking<3, 8>{},
        avx512::Blocking<4, 6>{}, avx512::Blocking<2, 12>{},
        avx512::Blocking<1, 24>{});
    return k;
  }();
  return k;
}

template <>
const Kernels<double>& kernels_avx512<double>() {
  static const auto k = avx512::make<avx512::F64>();
  return k;
}

}  // namespace alexop::cpu

#endif
