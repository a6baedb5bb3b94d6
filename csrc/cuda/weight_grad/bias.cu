// The bias gradient of the cuDNN weight gradient (bias.h): partial sums of
// slices of the images (NCHW) or pixels (channels_last), then one pass adds
// each channel's partials in order.

#include "bias.h"

#include "../common/launch.h"
#include "../common/ptx.cuh"

#include <ATen/ops/empty.h>
#include <ATen/ops/sum.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

namespace alexop::cuda::weight_grad {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 8;  // loads in flight a thread

// A thread's accumulators added in a fixed order.
__device__ float sum_of(const float (&acc)[kUnroll]) {
  float v = 0.f;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) v += acc[u];
  return v;
}

// The block's sum of its threads' v, in a fixed order; thread 0's is whole.
__device__ float block_sum(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kThreads / 32 ? shared[lane] : 0.f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  }
  return v;
}

// NCHW: block (k, s) sums channel k's planes of images s, s + S, ... along
// their rows (kUnroll loads in flight a thread) into partial[s][k].
template <typename T>
__global__ void __launch_bounds__(kThreads) bias_nchw_kernel(const T* __restrict__ dy, float* __restrict__ partial,
                                                             int N, int K, int HW) {
  __shared__ float shared[kThreads / 32];
  const int k = blockIdx.x, s = blockIdx.y, S = gridDim.y;
  float acc[kUnroll] = {};
  for (int n = s; n < N; n += S) {
    const T* plane = dy + (int64_t{n} * K + k) * HW;
    int i = threadIdx.x;
    for (; i + (kUnroll - 1) * kThreads < HW; i += kUnroll * kThreads) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) acc[u] += to_f(plane[i + u * kThreads]);
    }
    for (; i < HW; i += kThreads) acc[0] += to_f(plane[i]);
  }
  const float v = block_sum(sum_of(acc), shared);
  if (threadIdx.x == 0) partial[int64_t{s} * K + k] = v;
}

// channels_last: block s sums pixel rows s * rows, ... of `rows` rows, each
// row K channels: threadIdx.x a channel (K or fewer at a time), threadIdx.y
// every blockDim.y-th row; the rows' sums then added over y in order.
template <typename T>
__global__ void __launch_bounds__(kThreads) bias_nhwc_kernel(const T* __restrict__ dy, float* __restrict__ partial,
                                                             int64_t pixels, int K, int64_t rows) {
  __shared__ float shared[kThreads];
  const int64_t r0 = blockIdx.x * rows, r1 = std::min<int64_t>(pixels, r0 + rows);
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * blockDim.x + tx;
  for (int k0 = 0; k0 < K; k0 += blockDim.x) {
    const int k = k0 + tx;
    float acc[kUnroll] = {};
    if (k < K) {
      const int64_t step = int64_t{blockDim.y} * K;  // elements between a thread's rows
      int64_t r = r0 + ty;
      for (; r + (kUnroll - 1) * blockDim.y < r1; r += kUnroll * blockDim.y) {
        const T* row = dy + r * K + k;
        T v[kUnroll];  // every load issued before the first add
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) v[u] = row[u * step];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) acc[u] += to_f(v[u]);
      }
      for (; r < r1; r += blockDim.y) acc[0] += to_f(dy[r * K + k]);
    }
    shared[tid] = sum_of(acc);
    __syncthreads();
    if (ty == 0 && k < K) {
      float v = 0.f;
      for (int y = 0; y < (int)blockDim.y; ++y) v += shared[y * blockDim.x + tx];
      partial[int64_t{blockIdx.x} * K + k] = v;
    }
    __syncthreads();
  }
}

// bias[k] = the sum of partial[s][k] over s: a warp a channel, lane l adding
// s = l, l + 32, ... in order, then the lanes in a fixed tree (a thread a
// channel made S dependent loads one chain).
template <typename T>
__global__ void bias_partials_kernel(const float* __restrict__ partial, T* __restrict__ bias, int S, int K) {
  const int k = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (k >= K) return;  // warp-uniform
  float v = 0.f;
  for (int s = lane; s < S; s += 32) v += partial[int64_t{s} * K + k];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  if (lane == 0) bias[k] = from_f<T>(v);
}

template <typename T>
void launch(const at::Tensor& dy, const at::Tensor& bias, bool nhwc) {
  const int64_t N = dy.size(0), K = dy.size(1), HW = dy.size(2) * dy.size(3);
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  auto stream = c10::cuda::getCurrentCUDAStream();
  const auto* src = static_cast<const T*>(dy.const_data_ptr());
  int64_t S = 0;
  at::Tensor partial;
  if (!nhwc) {
    // eight blocks an SM, no slice without an image
    S = std::clamp<int64_t>((8 * sms + K - 1) / K, 1, std::min<int64_t>(N, 65535));
    partial = at::empty({S, K}, dy.options().dtype(at::kFloat));
    bias_nchw_kernel<T><<<dim3((unsigned)K, (unsigned)S), kThreads, 0, stream>>>(
        src, partial.mutable_data_ptr<float>(), (int)N, (int)K, (int)HW);
  } else {
    // fewer filters than a warp: a warp reads 32 / K whole rows, one run
    const int tx = (int)(K < 32 ? K : std::min<int64_t>(kThreads, (K + 31) / 32 * 32)), ty = kThreads / tx;
    const int64_t pixels = N * HW;
    // eight blocks an SM, each at least kUnroll rows a thread row
    S = std::clamp<int64_t>(pixels / (kUnroll * ty), 1, 8 * sms);
    const int64_t rows = (pixels + S - 1) / S;
    S = (pixels + rows - 1) / rows;
    partial = at::empty({S, K}, dy.options().dtype(at::kFloat));
    bias_nhwc_kernel<T><<<(unsigned)S, dim3(tx, ty), 0, stream>>>(src, partial.mutable_data_ptr<float>(), pixels,
                                                                 (int)K, rows);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  bias_partials_kernel<T><<<(unsigned)((K + 3) / 4), 128, 0, stream>>>(
      partial.const_data_ptr<float>(), static_cast<T*>(bias.mutable_data_ptr()), (int)S, (int)K);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

at::Tensor bias_grad(const at::Tensor& grad_output) {
  const auto type = grad_output.scalar_type();
  const bool nchw = grad_output.is_contiguous(), nhwc = grad_output.is_contiguous(at::MemoryFormat::ChannelsLast);
  const int64_t HW = grad_output.size(2) * grad_output.size(3);
  const bool typed = type == at::kFloat || type == at::kHalf || type == at::kBFloat16;
  // the kernels' counts: an NCHW plane and the images in 32 bits
  if (!typed || !(nchw || nhwc) || grad_output.numel() == 0 || HW >= INT32_MAX || grad_output.size(0) >= INT32_MAX) {
    return at::sum(grad_output, {0, 2, 3});
  }
  auto bias = at::empty({grad_output.size(1)}, grad_output.options());
  // a tensor dense both ways (one pixel, or one channel) is read as NCHW
  if (type == at::kFloat) launch<float>(grad_output, bias, !nchw);
  else if (type == at::kHalf) launch<__half>(grad_output, bias, !nchw);
  else launch<__nv_bfloat16>(grad_output, bias, !nchw);
  return bias;
}

}  // namespace alexop::cuda::weight_grad
