#pragma once
// The launchers of the gather kernels (mma.sync, wgmma, wgmma chunks) and of the
// space-to-depth kernel: the weights' prep kernel, then the kernel, as the
// plan (plan.cu) tiles the problem. Included by the files that instantiate
// them (gather_*.cu, s2d.cu).

#include "../common/launch.h"
#include "gmma.cuh"
#include "gmma_chunks.cuh"
#include "launch.h"
#include "mma_sync.cuh"
#include "plan.h"
#include "s2d.cuh"

#include <ATen/core/Tensor.h>

#include <algorithm>

namespace alexop::cuda::forward::gather {

// A kernel's Params: the problem, its tiling and the operands (input,
// prepared and raw weights, bias or null, output).
inline Params make_params(const Problem& pr, const TilePlan& t, const Args& a, const at::Tensor& wbuf) {
  Params p{};
  p.x = a.input.data_ptr();
  p.wfrag = static_cast<const uint4*>(wbuf.data_ptr());
  p.bias = a.bias != nullptr ? a.bias->data_ptr() : nullptr;
  p.y = a.output.data_ptr();
  p.N = (int)pr.N;
  p.C = (int)pr.C;
  set_sizes(p, pr);
  p.tiles_per_img = t.tiles_per_img;
  p.QB = t.QB;
  p.nqb = t.nqb;
  p.tiles_blk = t.tiles_blk;
  p.MTL = t.MTL;
  p.total_tiles = t.total_tiles;
  p.MT = t.MT;
  p.PW = t.PW;
  p.CS = t.CS;
  p.PADL = t.PADL;
  p.shift = t.shift;
  p.wcopy = t.wcopy;
  p.vec = t.vec;
  p.words = t.words;
  p.cstr = t.cstr;
  p.rstr = t.rstr;
  p.sstr = t.sstr;
  p.stage = t.stage;
  p.ls = t.ls;
  p.gs = t.gs;
  p.w = a.weight.data_ptr();
  p.xs = exact::dense(p.H, p.W, pr.nhwc);
  p.xs.n = a.input.stride(0);
  p.accumulate = a.accumulate ? 1 : 0;
  p.ysc = (int)a.output.stride(1);
  p.ysm = (int)a.output.stride(3);
  return p;
}

// k16S2d / k16S2dNhwc (NCHW / channels_last input): K <= 96 (NT8 = 8 or 12),
// one CTA per SM, 256-pixel tiles.
template <typename T, int MODE, int NT8>
void launch_s2d(const Problem& pr, const Args& a) {
  const TilePlan plan = plan_s2d(pr, NT8);
  TORCH_INTERNAL_ASSERT(plan.fits, "forward space-to-depth: chosen for a problem it does not fit");
  constexpr int WB = wfrag_bytes<MODE, NT8, true>();
  auto stream = c10::cuda::getCurrentCUDAStream();
  const at::Tensor wbuf = scratch(a.input, WB);
  prep_weights_gmma_kernel<T, MODE, NT8><<<(WB / 16 + 255) / 256, 256, 0, stream>>>(
      static_cast<const T*>(a.weight.data_ptr()), (int)pr.K, static_cast<uint4*>(wbuf.data_ptr()));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const Params p = make_params(pr, plan, a, wbuf);
  auto kern = conv11s4_fwd_s2d_kernel<T, MODE, NT8>;
  allow_max_dynamic_smem(kern);
  kern<<<plan.grid_x, kGThreads + kStoreThreads, plan.smem, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// NT8 * 8 channels per CTA; more channels than that are split into groups,
// each with its own CTAs (grid y) and resident weights (the chunk modes: all
// chunks of a group's weights, streamed).
template <typename T, int MODE, int NT8, int NBUF, bool GMMA, int CPS, bool STAGED>
void launch(const Problem& pr, const Args& a) {
  const TilePlan plan = plan_gather(pr, {(MathMode)MODE, NT8, NBUF, GMMA, CPS, STAGED, (int)sizeof(T)});
  TORCH_INTERNAL_ASSERT(plan.fits, "forward gather kernel: chosen for a problem it does not fit");
  constexpr int WB = wfrag_bytes<MODE, NT8, GMMA>();
  const int K = (int)pr.K, C = (int)pr.C, groups = plan.groups, chunks = chunks_of(MODE, C);
  auto stream = c10::cuda::getCurrentCUDAStream();
  // 3xFP16 appends B's scale exponent, one for every group
  const int64_t wbytes = (int64_t)WB * chunks * groups;
  const at::Tensor wbuf = scratch(a.input, wbytes + (fp16x3_of(MODE) ? 16 : 0));
  {
    // split B: a thread writes big and small
    const int nthreads = WB * chunks / 16 / (GMMA && split_b<MODE>() ? 2 : 1);
    if constexpr (GMMA) {
      int* wexp = nullptr;
      if constexpr (fp16x3_of(MODE)) {
        wexp = reinterpret_cast<int*>(static_cast<unsigned char*>(wbuf.data_ptr()) + wbytes);
        weight_exp_kernel<1024><<<1, 1024, 0, stream>>>(a.weight.data_ptr<float>(), (int)a.weight.numel(), wexp);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      }
      prep_weights_gmma_kernel<T, MODE, NT8><<<dim3((nthreads + 255) / 256, groups), 256, 0, stream>>>(
          static_cast<const T*>(a.weight.data_ptr()), K, static_cast<uint4*>(wbuf.data_ptr()), wexp, C);
    } else {
      prep_weights_kernel<T, MODE, NT8><<<dim3((nthreads + 255) / 256, groups), 256, 0, stream>>>(
          static_cast<const T*>(a.weight.data_ptr()), K, static_cast<uint32_t*>(wbuf.data_ptr()));
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  Params p = make_params(pr, plan, a, wbuf);
  p.nhwc = pr.nhwc ? 1 : 0;

  auto kern = [] {
    if constexpr (chunked_of(MODE)) return conv11s4_fwd_gmma_chunks_kernel<T, MODE, NT8>;
    else if constexpr (GMMA) return conv11s4_fwd_gmma_kernel<T, MODE, NT8, NBUF, CPS, STAGED>;
    else return conv11s4_fwd_tc_kernel<T, MODE, NT8, NBUF>;
  }();
  allow_max_dynamic_smem(kern);
  const dim3 grid(plan.grid_x, groups);
  kern<<<grid, GMMA ? kGThreads / CPS + (STAGED ? kStoreThreads : 0) : kThreads, plan.smem, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace alexop::cuda::forward::gather
