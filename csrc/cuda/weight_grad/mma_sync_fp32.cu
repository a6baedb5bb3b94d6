// The mma.sync weight gradient, float32 (3xTF32, TF32).
#include "instances.h"
#include "mma_sync.cuh"

namespace alexop::cuda::weight_grad::ring {
#define ALEXOP_INST(M, MT) template void launch_f32<M, MT>(const Problem&, const Args&);
ALEXOP_WGRAD_MMA_FP32(ALEXOP_INST)
}  // namespace alexop::cuda::weight_grad::ring
