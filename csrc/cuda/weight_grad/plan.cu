// The weight-gradient kernels' fit, computed on the host (select.h).

#include "planes.cuh"
#include "select.h"

namespace alexop::cuda::weight_grad {

bool planes_fit(const Problem& p, int nt8) {
  const int64_t smem = nt8 == 8 ? planes::Smem<8>::kBytes : planes::Smem<12>::kBytes;
  if (smem > p.dev.smem_optin) return false;
  // below ~4 tiles an SM the first tile's load, which nothing overlaps, and
  // the partials' reduction outweigh the gain over the register gather
  const int64_t total = planes::tiles(p);
  return total <= INT32_MAX && total >= 4 * p.dev.num_sms;
}

}  // namespace alexop::cuda::weight_grad
