// Launches the chosen forward kernel: a switch from the choice to the
// launcher instantiation (instances.h lists them all).

#include "launch.h"

#include "../common/constants.h"
#include "../common/launch.h"
#include "../reference/reference.h"
#include "instances.h"

#include <c10/util/Exception.h>

#include <algorithm>

namespace alexop::cuda::forward {

void launch(const Choice& c, const Problem& p, const Args& a) {
  const Kernel k = c.kernel;
  if (k == Kernel::kNone) return;
  TORCH_INTERNAL_ASSERT(a.output.is_contiguous() || any_output_layout(c), "forward: ", name(c),
                        " writes NCHW outputs only");
  if (k == Kernel::kGeneric) return reference::forward(a.input, a.weight, a.bias, p.pad, a.output);
  const c10::ScalarType t = c.dtype;
  // the gather kernels' instantiation: (wgmma, CTAs an SM, staged) by family
  const bool gather = k == Kernel::kMmaSync || k == Kernel::kGmma || k == Kernel::kGmma2Cta ||
                      k == Kernel::kGmmaStaged || k == Kernel::kGmmaChunks;
  const bool gmma = k != Kernel::kMmaSync, staged = k == Kernel::kGmmaStaged;
  const int cps = k == Kernel::kGmma2Cta ? 2 : 1;
  const int planes_ch = std::max(c.input_channels, kC);  // 1 and 2 channels: the 3-slot build
#define ALEXOP_PLANES(T, N8, CH)                                                  \
  if (k == Kernel::kPlanes && is_dtype<T>(t) && c.nt8 == N8 && planes_ch == CH) \
    return planes::launch<T, N8, CH>(p, a);
#define ALEXOP_S2D(T, M, N8) \
  if (k == Kernel::kS2d && is_dtype<T>(t) && c.mode == M && c.nt8 == N8) return gather::launch_s2d<T, M, N8>(p, a);
#define ALEXOP_GATHER(T, M, N8, NB, G, CPS, ST)                                                         \
  if (gather && is_dtype<T>(t) && c.mode == M && c.nt8 == N8 && gmma == G && cps == CPS && staged == ST) \
    return gather::launch<T, M, N8, NB, G, CPS, ST>(p, a);
  ALEXOP_FWD_PLANES_TF32(ALEXOP_PLANES)
  ALEXOP_FWD_PLANES_16(ALEXOP_PLANES, __nv_bfloat16)
  ALEXOP_FWD_PLANES_16(ALEXOP_PLANES, __half)
  ALEXOP_FWD_PLANES_16_4CH(ALEXOP_PLANES, __nv_bfloat16)
  ALEXOP_FWD_PLANES_16_4CH(ALEXOP_PLANES, __half)
  ALEXOP_FWD_S2D(ALEXOP_S2D, __nv_bfloat16)
  ALEXOP_FWD_S2D(ALEXOP_S2D, __half)
  ALEXOP_FWD_MMA_FP32(ALEXOP_GATHER)
  ALEXOP_FWD_MMA_16(ALEXOP_GATHER, __nv_bfloat16)
  ALEXOP_FWD_MMA_16(ALEXOP_GATHER, __half)
  ALEXOP_FWD_GMMA_FP32(ALEXOP_GATHER)
  ALEXOP_FWD_GMMA_16(ALEXOP_GATHER, __nv_bfloat16)
  ALEXOP_FWD_GMMA_16(ALEXOP_GATHER, __half)
  ALEXOP_FWD_CHUNKS_FP32(ALEXOP_GATHER)
  ALEXOP_FWD_CHUNKS_16(ALEXOP_GATHER, __nv_bfloat16)
  ALEXOP_FWD_CHUNKS_16(ALEXOP_GATHER, __half)
  TORCH_INTERNAL_ASSERT(false, "forward: no kernel instantiated for ", name(c));
}

}  // namespace alexop::cuda::forward
