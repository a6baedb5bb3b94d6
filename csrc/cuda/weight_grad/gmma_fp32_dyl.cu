// The wgmma weight gradient, float32 (3xFP16, TF32), of a channels_last dy.
#include "gmma.cuh"
#include "instances.h"

namespace alexop::cuda::weight_grad::ring {
#define ALEXOP_INST(T, M, N8, V, DYL) template void launch_gmma<T, M, N8, V, DYL>(const Problem&, const Args&);
ALEXOP_WGRAD_GMMA_FP32(ALEXOP_INST, true)
}  // namespace alexop::cuda::weight_grad::ring
