// Launches the chosen forward kernel: a switch from the choice to the
// launcher instantiation (instances.h lists them all).

#include "launch.h"

#include "../common/precision.h"
#include "../reference/reference.h"
#include "instances.h"

#include <c10/util/Exception.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

namespace alexop::cuda::forward {
namespace {

template <typename T>
bool is(c10::ScalarType t) {
  if constexpr (std::is_same_v<T, float>) return t == c10::ScalarType::Float;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return t == c10::ScalarType::BFloat16;
  else return t == c10::ScalarType::Half;
}

void launch_gather(const Choice& c, const Problem& p, const Args& a) {
  const bool gmma = c.kernel != Kernel::kMmaSync, staged = c.kernel == Kernel::kGmmaStaged;
  const int cps = c.kernel == Kernel::kGmma2Cta ? 2 : 1;
#define ALEXOP_CASE(T, M, N8, NB, G, CPS, ST)                                                  \
  if (is<T>(c.dtype) && c.mode == M && c.nt8 == N8 && gmma == G && cps == CPS && staged == ST) \
    return gather::launch<T, M, N8, NB, G, CPS, ST>(p, a);
  ALEXOP_FWD_MMA_FP32(ALEXOP_CASE)
  ALEXOP_FWD_MMA_16(ALEXOP_CASE, __nv_bfloat16)
  ALEXOP_FWD_MMA_16(ALEXOP_CASE, __half)
  ALEXOP_FWD_GMMA_FP32(ALEXOP_CASE)
  ALEXOP_FWD_GMMA_16(ALEXOP_CASE, __nv_bfloat16)
  ALEXOP_FWD_GMMA_16(ALEXOP_CASE, __half)
#undef ALEXOP_CASE
  TORCH_INTERNAL_ASSERT(false, "forward: no gather kernel instantiated for ", name(c));
}

void launch_s2d(const Choice& c, const Problem& p, const Args& a) {
#define ALEXOP_CASE(T, M, N8) \
  if (is<T>(c.dtype) && c.mode == M && c.nt8 == N8) return gather::launch_s2d<T, M, N8>(p, a);
  ALEXOP_FWD_S2D(ALEXOP_CASE, __nv_bfloat16)
  ALEXOP_FWD_S2D(ALEXOP_CASE, __half)
#undef ALEXOP_CASE
  TORCH_INTERNAL_ASSERT(false, "forward: no space-to-depth kernel instantiated for ", name(c));
}

void launch_planes(const Choice& c, const Problem& p, const Args& a) {
#define ALEXOP_CASE(T, N8) \
  if (is<T>(c.dtype) && c.nt8 == N8) return planes::launch<T, N8>(p, a);
  ALEXOP_FWD_PLANES(ALEXOP_CASE, float)
  ALEXOP_FWD_PLANES(ALEXOP_CASE, __nv_bfloat16)
  ALEXOP_FWD_PLANES(ALEXOP_CASE, __half)
#undef ALEXOP_CASE
  TORCH_INTERNAL_ASSERT(false, "forward: no plane kernel instantiated for ", name(c));
}

}  // namespace

void launch(const Choice& c, const Problem& p, const Args& a) {
  switch (c.kernel) {
    case Kernel::kNone:
      return;
    case Kernel::kGeneric:
      return reference::forward(a.input, a.weight, a.bias, p.pad, a.output);
    case Kernel::kPlanes:
      return launch_planes(c, p, a);
    case Kernel::kS2d:
      return launch_s2d(c, p, a);
    default:
      return launch_gather(c, p, a);
  }
}

}  // namespace alexop::cuda::forward
