// The wgmma chunk forward (more input channels), bf16.
#include "gather_launch.cuh"
#include "instances.h"

namespace alexop::cuda::forward::gather {
#define ALEXOP_INST(...) template void launch<__VA_ARGS__>(const Problem&, const Args&);
ALEXOP_FWD_CHUNKS_16(ALEXOP_INST, __nv_bfloat16)
}  // namespace alexop::cuda::forward::gather
