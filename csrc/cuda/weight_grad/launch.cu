// Launches the chosen weight-gradient kernel: a switch from the choice to
// the launcher instantiation (instances.h lists them all).

#include "launch.h"

#include "../common/launch.h"
#include "../reference/reference.h"
#include "instances.h"

#include <c10/util/Exception.h>

namespace alexop::cuda::weight_grad {

void launch(const Choice& c, const Problem& p, const Args& a) {
  const Kernel k = c.kernel;
  if (k == Kernel::kGeneric)
    return reference::backward_weight(a.grad_output, a.input, p.pad, a.grad_weight, a.grad_bias);
  const c10::ScalarType t = c.dtype;
  // m16 tiles (mma.sync) and n8 tiles (wgmma) of the channels
  const int mt = c.channels == 96 ? 3 : 2, nt8 = c.channels == 96 ? 12 : 8;
#define ALEXOP_PLANES(T, N8, CH, DYL)                                                                       \
  if (k == Kernel::kPlanes && is_dtype<T>(t) && nt8 == N8 && c.input_channels == CH && c.dy_nhwc == DYL) \
    return planes::launch<T, N8, CH, DYL>(p, a);
#define ALEXOP_GMMA(T, M, N8, V, DYL)                                                                      \
  if (k == Kernel::kGmma && is_dtype<T>(t) && c.mode == M && nt8 == N8 && c.vec == V && c.dy_nhwc == DYL) \
    return ring::launch_gmma<T, M, N8, V, DYL>(p, a);
#define ALEXOP_MMA_FP32(M, MT) \
  if (k == Kernel::kMmaSync && c.mode == M && mt == MT) return ring::launch_f32<M, MT>(p, a);
#define ALEXOP_MMA_16(T, MT)                                                                       \
  if (k == Kernel::kMmaSyncPairs && is_dtype<T>(t) && mt == MT) return ring::launch_pairs<T, MT>(p, a); \
  if (k == Kernel::kMmaSyncStrided && is_dtype<T>(t) && mt == MT) return ring::launch_strided<T, MT>(p, a);
  ALEXOP_WGRAD_PLANES(ALEXOP_PLANES, __nv_bfloat16)
  ALEXOP_WGRAD_PLANES(ALEXOP_PLANES, __half)
  ALEXOP_WGRAD_GMMA_FP32(ALEXOP_GMMA, false)
  ALEXOP_WGRAD_GMMA_FP32(ALEXOP_GMMA, true)
  ALEXOP_WGRAD_GMMA_16(ALEXOP_GMMA, at::BFloat16, false)
  ALEXOP_WGRAD_GMMA_16(ALEXOP_GMMA, at::BFloat16, true)
  ALEXOP_WGRAD_GMMA_16(ALEXOP_GMMA, at::Half, false)
  ALEXOP_WGRAD_GMMA_16(ALEXOP_GMMA, at::Half, true)
  ALEXOP_WGRAD_MMA_FP32(ALEXOP_MMA_FP32)
  ALEXOP_WGRAD_MMA_16(ALEXOP_MMA_16, at::BFloat16)
  ALEXOP_WGRAD_MMA_16(ALEXOP_MMA_16, at::Half)
  TORCH_INTERNAL_ASSERT(false, "weight gradient: no kernel instantiated for ", name(c));
}

}  // namespace alexop::cuda::weight_grad
