#pragma once
// The input-gradient kernels' tilings (plan.cu), shared by the selector's
// fits (select.h) and the launchers.

#include "launch.h"
#include "phase.cuh"

#include <ATen/core/Tensor.h>

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
// The operands into p (dy, dx, the epilogue's pair stores) and a buffer of
// wbytes for the prepared weights (p.wfrag).
at::Tensor bind(const Args& a, size_t wbytes, Params& p);

}  // namespace alexop::cuda::input_grad::phase
