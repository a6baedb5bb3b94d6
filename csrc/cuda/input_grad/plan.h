#pragma once
// The input-gradient kernels' tilings (plan.cu), shared by the selector's
// fits (select.h) and the launchers.

#include "../common/launch.h"
#include "launch.h"
#include "phase.cuh"

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstddef>

namespace alexop::cuda::input_grad::phase {

// Bands, tile size and window of the gather kernels (mma.sync, wgmma) into
// p; false where no tile size fits the window buffer or the tiles overflow.
bool make_params(const Problem& pr, int stage_ch, Params& p);
// The 3xFP16 kernel's stacked blocks of cells into p; false where the cells
// overflow.
bool make_params_x3(const Problem& pr, Params& p);
// Shared memory: resident B and two dy stage buffers.
size_t gather_smem(const Params& p);
size_t x3_smem(const Params& p);
// The operands into p (dy, dx, the epilogue's pair stores), a buffer of
// wbytes for the prepared weights (p.wfrag) and the NaN flag after them,
// cleared on the current stream.
at::Tensor bind(const Args& a, size_t wbytes, Params& p);
// After a kernel of p: where it raised p.nan_flag, the NaN elements of dx
// recomputed exactly (fix_nan.cu); else one CTA reads the flag and returns.
void fix_flagged_nan(const Params& p, c10::ScalarType dtype, int num_sms);

// The gather kernels' launch (mma.sync, wgmma: the same tiling and bytes of
// resident B): prep arranges the weights, then kernel runs one CTA an SM.
template <typename T>
void launch_gather(const Problem& pr, const Args& a, int stage_ch, void (*prep)(const T*, int, int, uint4*),
                   void (*kernel)(Params), int threads) {
  Params p;
  TORCH_INTERNAL_ASSERT(make_params(pr, stage_ch, p), "input gradient: chosen where no tiling fits");
  const size_t wbytes = gmma_wbytes(p.nstage), smem = gather_smem(p);
  const at::Tensor wbuf = bind(a, wbytes, p);
  auto stream = c10::cuda::getCurrentCUDAStream();
  const int prep_threads = (int)(wbytes / 16), prep_blocks = (prep_threads + 255) / 256;
  prep<<<prep_blocks, 256, 0, stream>>>(static_cast<const T*>(a.weight.data_ptr()), p.K, p.nstage,
                                        static_cast<uint4*>(wbuf.data_ptr()));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  allow_max_dynamic_smem(kernel);
  kernel<<<std::min(p.total_tiles, pr.dev.num_sms), threads, smem, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  fix_flagged_nan(p, pr.dtype, pr.dev.num_sms);
}

}  // namespace alexop::cuda::input_grad::phase
