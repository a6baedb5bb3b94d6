// The portable micro-kernels and the run-time choice among the instruction
// sets. Their registers are plain arrays the compiler vectorises for the
// extension's baseline instruction set (at::vec's headers carry '#pragma
// unroll', which GCC 12 warns about under -Wall whatever the pragmas around
// the include say).

#include "kernels.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <iterator>

#define ALEXOP_TARGET
#define ALEXOP_VEC inline

namespace alexop::cpu::portable {

template <typename T>
struct Array {
  T v[32 / sizeof(T)];
};

template <typename T>
Array<T> vload(const T* p) {
  Array<T> r;
  std::memcpy(r.v, p, sizeof(r.v));
  return r;
}
template <typename T>
void vstore(T* p, const Array<T>& r) {
  std::memcpy(p, r.v, sizeof(r.v));
}
template <typename T>
Array<T> vbcast(const T* p) {
  Array<T> r;
  for (auto& x : r.v) {
    x = *p;
  }
  return r;
}
template <typename T>
Array<T> vfma(const Array<T>& a, const Array<T>& b, Array<T> c) {
  for (size_t i = 0; i < std::size(c.v); ++i) {
    c.v[i] += a.v[i] * b.v[i];
  }
  return c;
}

}  // namespace alexop::cpu::portable

#define ALEXOP_CPU_ISA portable
#include "micro_kernels.h"

namespace alexop::cpu {

template <typename T>
const Kernels<T>& kernels_default() {
  static const auto k =
      portable::make_kernels<portable::Vec<T>, 1>(
          &portable::transpose_scalar<T>, portable::Blocking<1, 4>{});
  return k;
}

namespace {

const struct {
  const char* name;
  Isa isa;
} kIsaNames[] = {{"default", Isa::kDefault}, {"avx2", Isa::kAvx2},
                 {"avx512", Isa::kAvx512}};

Isa detect() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("fma")) {
    return Isa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return Isa::kAvx2;
  }
#endif
  return Isa::kDefault;
}

}  // namespace

Isa cpu_isa() {
  static const Isa best = detect();
  const char* env = std::getenv("ALEXOP_CPU_CAPABILITY");
  if (env == nullptr || *env == '\0') {
    return best;
  }
  for (const auto& n : kIsaNames) {
    if (std::strcmp(env, n.name) == 0) {
      return n.isa < best ? n.isa : best;
    }
  }
  TORCH_CHECK(
      false, "ALEXOP_CPU_CAPABILITY=", env,
      " is not an instruction set alexop knows; use default, avx2 or avx512 ",
      "(a set this CPU lacks falls back to the best one it has)");
}

const char* isa_name(Isa isa) {
  for (const auto& n : kIsaNames) {
    if (n.isa == isa) {
      return n.name;
    }
  }
  return "unknown";
}

template <typename T>
const Kernels<T>& kernels(Isa isa) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (isa == Isa::kAvx512) {
    return kernels_avx512<T>();
  }
  if (isa == Isa::kAvx2) {
    return kernels_avx2<T>();
  }
#endif
  return kernels_default<T>();
}

template const Kernels<float>& kernels<float>(Isa);
template const Kernels<double>& kernels<double>(Isa);

}  // namespace alexop::cpu
