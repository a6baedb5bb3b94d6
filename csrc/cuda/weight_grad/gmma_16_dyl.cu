// The wgmma weight gradient, bf16 and fp16, of a channels_last dy.
#include "gmma.cuh"
#include "instances.h"

namespace alexop::cuda::weight_grad::ring {
#define ALEXOP_INST(T, M, N8, V, DYL) template void launch_gmma<T, M, N8, V, DYL>(const Problem&, const Args&);
ALEXOP_WGRAD_GMMA_16(ALEXOP_INST, at::BFloat16, true)
ALEXOP_WGRAD_GMMA_16(ALEXOP_INST, at::Half, true)
}  // namespace alexop::cuda::weight_grad::ring
