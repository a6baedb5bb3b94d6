// The mma.sync gather forward, float32 (3xTF32, bf16x3, TF32).
#include "gather_launch.cuh"
#include "instances.h"

namespace alexop::cuda::forward::gather {
#define ALEXOP_INST(...) template void launch<__VA_ARGS__>(const Problem&, const Args&);
ALEXOP_FWD_MMA_FP32(ALEXOP_INST)
}  // namespace alexop::cuda::forward::gather
