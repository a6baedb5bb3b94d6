// The phase-plane weight gradient, bf16 and fp16.
#include "instances.h"
#include "planes.cuh"

namespace alexop::cuda::weight_grad::planes {
#define ALEXOP_INST(T, N8, CH, DYL) template void launch<T, N8, CH, DYL>(const Problem&, const Args&);
ALEXOP_WGRAD_PLANES(ALEXOP_INST, __nv_bfloat16)
ALEXOP_WGRAD_PLANES(ALEXOP_INST, __half)
}  // namespace alexop::cuda::weight_grad::planes
