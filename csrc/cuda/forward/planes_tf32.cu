// The phase-plane forward, TF32.
#include "instances.h"
#include "planes.cuh"

namespace alexop::cuda::forward::planes {
#define ALEXOP_INST(T, N8, CH) template void launch<T, N8, CH>(const Problem&, const Args&);
ALEXOP_FWD_PLANES_TF32(ALEXOP_INST)
}  // namespace alexop::cuda::forward::planes
