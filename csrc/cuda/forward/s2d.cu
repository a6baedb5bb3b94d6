// The space-to-depth forward, bf16 and fp16, NCHW and channels_last.
#include "gather_launch.cuh"
#include "instances.h"

namespace alexop::cuda::forward::gather {
#define ALEXOP_INST(T, M, N8) template void launch_s2d<T, M, N8>(const Problem&, const Args&);
ALEXOP_FWD_S2D(ALEXOP_INST, __nv_bfloat16)
ALEXOP_FWD_S2D(ALEXOP_INST, __half)
}  // namespace alexop::cuda::forward::gather
