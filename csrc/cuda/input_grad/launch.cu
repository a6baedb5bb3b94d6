// Launches the chosen input-gradient kernel.

#include "launch.h"

#include "../common/precision.h"
#include "../reference/reference.h"

#include <c10/util/Exception.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace alexop::cuda::input_grad {

void launch(const Choice& c, const Problem& p, const Args& a) {
  const bool bf16 = c.dtype == c10::ScalarType::BFloat16;
  switch (c.kernel) {
    case Kernel::kNone:
      return;
    case Kernel::kGeneric:
      return reference::backward_input(a.grad_output, a.weight, p.pad, a.grad_input);
    case Kernel::kGmma3xFp16:
      return phase::launch_x3(p, a);
    case Kernel::kGmma:
      return bf16 ? phase::launch_gmma<__nv_bfloat16>(p, a) : phase::launch_gmma<__half>(p, a);
    case Kernel::kMmaSync:
      if (c.mode == k3xTf32) return phase::launch_mma<float, k3xTf32>(p, a);
      if (c.mode == kTf32) return phase::launch_mma<float, kTf32>(p, a);
      return bf16 ? phase::launch_mma<__nv_bfloat16, k16>(p, a) : phase::launch_mma<__half, k16>(p, a);
  }
  TORCH_INTERNAL_ASSERT(false, "input gradient: no kernel for ", name(c));
}

}  // namespace alexop::cuda::input_grad
