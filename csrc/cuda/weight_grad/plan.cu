// The weight-gradient kernels' fit, computed on the host (select.h).

#include "planes.cuh"
#include "select.h"

namespace alexop::cuda::weight_grad {

namespace {
template <int CH>
int64_t planes_smem(int nt8) { return nt8 == 8 ? planes::Smem<8, CH>::kBytes : planes::Smem<12, CH>::kBytes; }
}  // namespace

bool planes_fit(const Problem& p, int nt8) {
  if (p.C < 1 || p.C > kC) return false;
  const int64_t smem = p.C == 1 ? planes_smem<1>(nt8) : p.C == 2 ? planes_smem<2>(nt8) : planes_smem<3>(nt8);
  if (smem > p.dev.smem_optin) return false;
  // below ~4 tiles an SM the first tile's load, which nothing overlaps, and
  // the partials' reduction outweigh the gain over the register gather
  const int64_t total = planes::tiles(p);
  return total <= INT32_MAX && total >= 4 * p.dev.num_sms;
}

}  // namespace alexop::cuda::weight_grad
