// The wgmma gather forward, float32 (TF32, 3xFP16, 3xTF32).
#include "gather_launch.cuh"
#include "instances.h"

namespace alexop::cuda::forward::gather {
#define ALEXOP_INST(...) template void launch<__VA_ARGS__>(const Problem&, const Args&);
ALEXOP_FWD_GMMA_FP32(ALEXOP_INST)
}  // namespace alexop::cuda::forward::gather
