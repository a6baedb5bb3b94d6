// The micro-kernels for AVX2 with FMA (16 ymm registers, so register blocks
// of 12 accumulators). Compiled for that instruction set by function
// attributes rather than flags, because setuptools' flags apply to every file
// of the extension; cpu_isa() calls them only where the CPU has AVX2 and FMA.

#include "kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#define ALEXOP_CPU_ISA avx2
#define ALEXOP_TARGET __attribute__((target("avx2,fma")))
#define ALEXOP_VEC ALEXOP_TARGET inline __attribute__((always_inline))
#include "micro_kernels.h"

namespace alexop::cpu {

// Broadcasts are asm loads: as plain loads the compiler sees that a tile's
// overlapping windows read the same scalars at different taps, keeps them in
// registers across taps and spills the accumulators instead.
namespace avx2 {

struct F32 {
  using T = float;
  using Reg = __m256;
  static constexpr int kLanes = 8;
  ALEXOP_VEC static Reg zero() { return _mm256_setzero_ps(); }
  ALEXOP_VEC static Reg load(const T* p) { return _mm256_loadu_ps(p); }
  ALEXOP_VEC static Reg bcast(const T* p) {
    Reg r;
    asm volatile("vbroadcastss %1, %0" : "=x"(r) : "m"(*p));
    return r;
  }
  ALEXOP_VEC static Reg fma(Reg a, Reg b, Reg c) {
    return _mm256_fmadd_ps(a, b, c);
  }
  ALEXOP_VEC static void store(T* p, Reg v) { _mm256_storeu_ps(p, v); }
};

struct F64 {
  using T = double;
  using Reg = __m256d;
  static constexpr int kLanes = 4;
  ALEXOP_VEC static Reg zero() { return _mm256_setzero_pd(); }
  ALEXOP_VEC static Reg load(const T* p) { return _mm256_loadu_pd(p); }
  ALEXOP_VEC static Reg bcast(const T* p) {
    Reg r;
    asm volatile("vbroadcastsd %1, %0" : "=x"(r) : "m"(*p));
    return r;
  }
  ALEXOP_VEC static Reg fma(Reg a, Reg b, Reg c) {
    return _mm256_fmadd_pd(a, b, c);
  }
  ALEXOP_VEC static void store(T* p, Reg v) { _mm256_storeu_pd(p, v); }
};

template <class V>
Kernels<typename V::T> make() {
  return make_kernels<V, 1>(&transpose_scalar<typename V::T>,
                            Blocking<3, 4>{}, Blocking<2, 6>{},
                            Blocking<1, 12>{});
}

}  // namespace avx2

template <>
const Kernels<float>& kernels_avx2<float>() {
  static const auto k = avx2::make<avx2::F32>();
  return k;
}

template <>
const Kernels<double>& kernels_avx2<double>() {
  static const auto k = avx2::make<avx2::F64>();
  return k;
}

}  // namespace alexop::cpu

#endif
