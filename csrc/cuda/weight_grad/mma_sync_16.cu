// The mma.sync weight gradient, bf16 and fp16 (4-byte pairs, any strides).
#include "instances.h"
#include "mma_sync.cuh"

namespace alexop::cuda::weight_grad::ring {
#define ALEXOP_INST(T, MT)                                               \
  template void launch_pairs<T, MT>(const Problem&, const Args&); \
  template void launch_strided<T, MT>(const Problem&, const Args&);
ALEXOP_WGRAD_MMA_16(ALEXOP_INST, at::BFloat16)
ALEXOP_WGRAD_MMA_16(ALEXOP_INST, at::Half)
}  // namespace alexop::cuda::weight_grad::ring
