// The wgmma weight gradient, bf16 and fp16.
#include "gmma.cuh"
#include "instances.h"

namespace alexop::cuda::weight_grad::ring {
#define ALEXOP_INST(T, M, N8, V) template void launch_gmma<T, M, N8, V>(const Problem&, const Args&);
ALEXOP_WGRAD_GMMA_16(ALEXOP_INST, at::BFloat16)
ALEXOP_WGRAD_GMMA_16(ALEXOP_INST, at::Half)
}  // namespace alexop::cuda::weight_grad::ring
