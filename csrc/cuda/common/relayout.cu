// NCHW <-> channels_last copies (relayout.h).

#include "relayout.h"

#include "launch.h"

#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace alexop::cuda {
namespace {

constexpr int kTile = 32, kRows = 8;  // a 32 x 32 tile, 8 rows of threads

// One image's (HW x C) channels_last matrix to its (C x HW) NCHW one, or
// back (TO_NCHW false); blockIdx: x a tile of pixels, y of channels, z the
// image. Both the read and the write run along 32 consecutive elements.
template <typename T, bool TO_NCHW>
__global__ void relayout_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t HW, int64_t C) {
  __shared__ T tile[kTile][kTile + 1];
  const int64_t image = (int64_t)blockIdx.z * HW * C;
  const int64_t p0 = (int64_t)blockIdx.x * kTile, c0 = (int64_t)blockIdx.y * kTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int i = ty; i < kTile; i += kRows) {
    if (TO_NCHW) {  // rows of channels of one pixel
      const int64_t p = p0 + i, c = c0 + tx;
      if (p < HW && c < C) tile[i][tx] = in[image + p * C + c];
    } else {  // rows of pixels of one channel
      const int64_t c = c0 + i, p = p0 + tx;
      if (p < HW && c < C) tile[tx][i] = in[image + c * HW + p];
    }
  }
  __syncthreads();
  for (int i = ty; i < kTile; i += kRows) {
    if (TO_NCHW) {
      const int64_t c = c0 + i, p = p0 + tx;
      if (p < HW && c < C) out[image + c * HW + p] = tile[tx][i];
    } else {
      const int64_t p = p0 + i, c = c0 + tx;
      if (p < HW && c < C) out[image + p * C + c] = tile[i][tx];
    }
  }
}

template <typename T>
void launch(const at::Tensor& in, const at::Tensor& out, bool to_nchw) {
  const int64_t N = in.size(0), C = in.size(1), HW = in.size(2) * in.size(3);
  const dim3 grid((unsigned)((HW + kTile - 1) / kTile), (unsigned)((C + kTile - 1) / kTile), (unsigned)N);
  const dim3 block(kTile, kRows);
  auto stream = c10::cuda::getCurrentCUDAStream();
  const auto* src = static_cast<const T*>(in.const_data_ptr());
  auto* dst = static_cast<T*>(out.data_ptr());
  if (to_nchw) {
    relayout_kernel<T, true><<<grid, block, 0, stream>>>(src, dst, HW, C);
  } else {
    relayout_kernel<T, false><<<grid, block, 0, stream>>>(src, dst, HW, C);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

at::Tensor relayout(const at::Tensor& t, at::MemoryFormat layout) {
  if (t.is_contiguous(layout)) return t;
  const auto nchw = at::MemoryFormat::Contiguous, nhwc = at::MemoryFormat::ChannelsLast;
  const bool to_nchw = layout == nchw;
  // the kernel serves the dense 4-D layouts of the fallbacks' dtypes with
  // rows of 32 channels or more (fewer leave most of a warp idle on the
  // channels' side, where ATen's copy does better), grids of at most 65535
  // images and channel tiles; anything else is ATen's copy
  const bool dense = t.dim() == 4 && t.is_contiguous(to_nchw ? nhwc : nchw);
  const auto type = t.scalar_type();
  const bool typed = type == at::kFloat || type == at::kHalf || type == at::kBFloat16;
  if (!dense || !typed || t.size(1) < kTile || t.size(0) > 65535 || t.size(1) > 65535 * kTile ||
      t.numel() == 0) {
    return t.contiguous(layout);
  }
  auto out = at::empty(t.sizes(), t.options().memory_format(layout));
  if (type == at::kFloat) launch<float>(t, out, to_nchw);
  else if (type == at::kHalf) launch<__half>(t, out, to_nchw);
  else launch<__nv_bfloat16>(t, out, to_nchw);
  return out;
}

}  // namespace alexop::cuda
