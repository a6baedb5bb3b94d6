// The phase-plane forward, TF32.
#include "instances.h"
#include "planes.cuh"

namespace alexop::cuda::forward::planes {
#define ALEXOP_INST(T, N8) template void launch<T, N8>(const Problem&, const Args&);
ALEXOP_FWD_PLANES(ALEXOP_INST, float)
}  // namespace alexop::cuda::forward::planes
