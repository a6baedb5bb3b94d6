// Launches the chosen weight-gradient kernel: a switch from the choice to
// the launcher instantiation (instances.h lists them all).

#include "launch.h"

#include "../common/precision.h"
#include "../reference/reference.h"
#include "instances.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

namespace alexop::cuda::weight_grad {
namespace {

template <typename T>
bool is(c10::ScalarType t) {
  if constexpr (std::is_same_v<T, float>) return t == c10::ScalarType::Float;
  else if constexpr (std::is_same_v<T, at::BFloat16> || std::is_same_v<T, __nv_bfloat16>)
    return t == c10::ScalarType::BFloat16;
  else return t == c10::ScalarType::Half;
}

void launch_ring(const Choice& c, const Problem& p, const Args& a) {
  const int mt = c.channels == 96 ? 3 : 2, nt8 = c.channels == 96 ? 12 : 8;
  switch (c.kernel) {
    case Kernel::kMmaSync:
#define ALEXOP_CASE(M, MT) \
  if (c.mode == M && mt == MT) return ring::launch_f32<M, MT>(p, a);
      ALEXOP_WGRAD_MMA_FP32(ALEXOP_CASE)
#undef ALEXOP_CASE
      break;
    case Kernel::kMmaSyncPairs:
#define ALEXOP_CASE(T, MT) \
  if (is<T>(c.dtype) && mt == MT) return ring::launch_pairs<T, MT>(p, a);
      ALEXOP_WGRAD_MMA_16(ALEXOP_CASE, at::BFloat16)
      ALEXOP_WGRAD_MMA_16(ALEXOP_CASE, at::Half)
#undef ALEXOP_CASE
      break;
    case Kernel::kMmaSyncStrided:
#define ALEXOP_CASE(T, MT) \
  if (is<T>(c.dtype) && mt == MT) return ring::launch_strided<T, MT>(p, a);
      ALEXOP_WGRAD_MMA_16(ALEXOP_CASE, at::BFloat16)
      ALEXOP_WGRAD_MMA_16(ALEXOP_CASE, at::Half)
#undef ALEXOP_CASE
      break;
    default:
#define ALEXOP_CASE(T, M, N8, V) \
  if (is<T>(c.dtype) && c.mode == M && nt8 == N8 && c.vec == V) return ring::launch_gmma<T, M, N8, V>(p, a);
      ALEXOP_WGRAD_GMMA_FP32(ALEXOP_CASE)
      ALEXOP_WGRAD_GMMA_16(ALEXOP_CASE, at::BFloat16)
      ALEXOP_WGRAD_GMMA_16(ALEXOP_CASE, at::Half)
#undef ALEXOP_CASE
      break;
  }
  TORCH_INTERNAL_ASSERT(false, "weight gradient: no kernel instantiated for ", name(c));
}

void launch_planes(const Choice& c, const Problem& p, const Args& a) {
  const int nt8 = c.channels <= 64 ? 8 : 12;
#define ALEXOP_CASE(T, N8) \
  if (is<T>(c.dtype) && nt8 == N8) return planes::launch<T, N8>(p, a);
  ALEXOP_WGRAD_PLANES(ALEXOP_CASE, __nv_bfloat16)
  ALEXOP_WGRAD_PLANES(ALEXOP_CASE, __half)
#undef ALEXOP_CASE
  TORCH_INTERNAL_ASSERT(false, "weight gradient: no plane kernel instantiated for ", name(c));
}

}  // namespace

void launch(const Choice& c, const Problem& p, const Args& a) {
  switch (c.kernel) {
    case Kernel::kGeneric:
      return reference::backward_weight(a.grad_output, a.input, p.pad, a.grad_weight, a.grad_bias);
    case Kernel::kPlanes:
      return launch_planes(c, p, a);
    default:
      return launch_ring(c, p, a);
  }
}

}  // namespace alexop::cuda::weight_grad
