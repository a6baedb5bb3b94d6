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

}  // namespace alexop::cpu::avx2

#define ALEXOP_CPU_ISA avx2
#include "micro_kernels.h"

namespace alexop::cpu {

template <typename T>
const Kernels<T>& kernels_avx2() {
  static const auto k = avx2::make_kernels<avx2::Vec<T>, 1>(
      &avx2::transpose_scalar<T>, avx2::Blocking<3, 4>{},
      avx2::Blocking<2, 6>{}, avx2::Blocking<1, 12>{});
  return k;
}

template const Kernels<float>& kernels_avx2<float>();
template const Kernels<double>& kernels_avx2<double>();

}  // namespace alexop::cpu

#endif
