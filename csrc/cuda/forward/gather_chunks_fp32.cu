// The wgmma chunk forward (more input channels), float32 (TF32).
#include "gather_launch.cuh"
#include "instances.h"

namespace alexop::cuda::forward::gather {
#define ALEXOP_INST(...) template void launch<__VA_ARGS__>(const Problem&, const Args&);
ALEXOP_FWD_CHUNKS_FP32(ALEXOP_INST)
}  // namespace alexop::cuda::forward::gather
