// Host-side launch helpers (launch.h) that need ATen's operators.

#include "launch.h"

#include <ATen/ops/empty.h>

namespace alexop::cuda {

at::Tensor scratch(const at::Tensor& like, int64_t bytes) {
  return at::empty({bytes}, like.options().dtype(at::kByte));
}

}  // namespace alexop::cuda
