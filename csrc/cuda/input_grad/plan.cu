// The input-gradient kernels' tilings and fits (plan.h, select.h).

#include "plan.h"


#include <algorithm>
#include <cstdint>

namespace alexop::cuda::input_grad {
namespace phase {
namespace {

// The problem's sizes, super-pixel grid and bands of at most band_max
// columns (the fields both tilings share).
void grid_params(const Problem& pr, int band_max, Params& p) {
  p = Params{};
  p.N = (int)pr.N;
  set_sizes(p, pr);
  const int pad = p.pad;
  p.P0s = pad / 4;
  p.Q0s = pad / 4;
  p.PS = (p.H + pad - 1) / 4 - p.P0s + 1;
  p.QS = (p.W + pad - 1) / 4 - p.Q0s + 1;
  p.NB = (p.QS + band_max - 1) / band_max;
  p.TQ = (p.QS + p.NB - 1) / p.NB;
  p.RSW = p.TQ + 2;
}

}  // namespace

bool make_params(const Problem& pr, int stage_ch, Params& p) {
  grid_params(pr, kBandMax, p);
  for (int mt = kMT; mt >= 32; mt /= 2) {
    const int rows = std::min(p.PS, (p.TQ - 1 + mt - 1) / p.TQ + 1);
    const int wpp = (rows + 2) * p.RSW;
    if (wpp <= kWPPMax) {
      p.MT = mt; p.NR = rows + 2; p.WPP = wpp;
      break;
    }
  }
  if (p.MT == 0) return false;
  p.tiles_per_band = (p.PS * p.TQ + p.MT - 1) / p.MT;
  p.tiles_per_img = p.NB * p.tiles_per_band;
  const int64_t total = (int64_t)p.N * p.tiles_per_img;
  if (total > INT32_MAX) return false;
  p.total_tiles = (int)total;
  p.nstage = (p.K + stage_ch - 1) / stage_ch;
  return true;
}

bool make_params_x3(const Problem& pr, Params& p) {
  grid_params(pr, kXBandMax, p);
  p.BLK = (p.PS + 2) * p.RSW;
  p.WC = kXMT + 2 * p.RSW + 2;
  const int64_t cells = (int64_t)p.N * p.NB * p.BLK;
  if (cells + kXMT > INT32_MAX) return false;
  p.ncells = (int)cells;
  p.total_tiles = (int)((cells + kXMT - 1) / kXMT);
  p.nstage = (p.K + 15) / 16;
  return true;
}

size_t gather_smem(const Params& p) {
  static_assert(kNJ * 32 * 16 == kGNT8 * 256, "both B layouts: the same bytes per k step");
  return gmma_wbytes(p.nstage) + 2 * (size_t)kBufWords * 4;
}

size_t x3_smem(const Params& p) { return x3_wbytes(p.nstage) + 2 * (size_t)kXStage + kXExtra; }

at::Tensor bind(const Args& a, size_t wbytes, Params& p) {
  const at::Tensor& gx = a.grad_input;
  p.vec2 = (p.pad % 2 == 0 && p.W % 2 == 0 &&
            (reinterpret_cast<uintptr_t>(gx.data_ptr()) % (2 * gx.element_size())) == 0) ? 1 : 0;
  p.dy = a.grad_output.data_ptr();
  p.w = a.weight.data_ptr();
  p.dx = gx.data_ptr();
  p.dxs = gx.stride(0);
  const size_t flag_at = (wbytes + 15) / 16 * 16;
  const at::Tensor wbuf = scratch(a.grad_output, (int64_t)flag_at + 16);
  p.wfrag = static_cast<const uint4*>(wbuf.data_ptr());
  p.nan_flag = reinterpret_cast<int*>(static_cast<char*>(wbuf.data_ptr()) + flag_at);
  C10_CUDA_CHECK(cudaMemsetAsync(p.nan_flag, 0, sizeof(int), c10::cuda::getCurrentCUDAStream()));
  return wbuf;
}

}  // namespace phase

bool phase_fits(const Problem& pr, int stage_channels) {
  phase::Params p;
  return phase::make_params(pr, stage_channels, p) && phase::gather_smem(p) <= (size_t)pr.dev.smem_optin;
}

bool x3_fits(const Problem& pr) {
  phase::Params p;
  return phase::make_params_x3(pr, p) && phase::x3_smem(p) <= (size_t)pr.dev.smem_optin;
}

}  // namespace alexop::cuda::input_grad
