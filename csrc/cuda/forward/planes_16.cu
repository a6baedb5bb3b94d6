// The phase-plane forward, bf16 and fp16.
#include "instances.h"
#include "planes.cuh"

namespace alexop::cuda::forward::planes {
#define ALEXOP_INST(T, N8, CH) template void launch<T, N8, CH>(const Problem&, const Args&);
ALEXOP_FWD_PLANES_16(ALEXOP_INST, __nv_bfloat16)
ALEXOP_FWD_PLANES_16(ALEXOP_INST, __half)
}  // namespace alexop::cuda::forward::planes
