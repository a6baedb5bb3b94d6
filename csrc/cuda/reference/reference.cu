// The reference kernels: correct for every shape, dtype and device the
// operator accepts, and what the selectors choose where no tensor-core kernel
// applies (kGeneric). One thread per output element (forward), one block per
// weight element (weight gradient), a cuBLAS GEMM and a fold (input
// gradient); each sums in a fixed order, so results are bitwise
// reproducible.

#include "reference.h"

#include "../../conv11s4.h"
#include "../common/launch.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContextLight.h>
#include <ATen/ops/bmm.h>

#include <algorithm>

namespace alexop::cuda::reference {
namespace {

constexpr int kThreads = 256;

unsigned int blocks_for(int64_t total) { return grid_stride_blocks(total, kThreads); }

struct Shape {
  int64_t N, C, H, W, K, P, Q, pad;
};

// One thread per output element; 64-bit indices throughout, since a large
// batch passes 2^31 output elements.
template <typename T>
__global__ void forward_kernel(
    const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
    T* __restrict__ y, Shape s) {
  using acc_t = at::opmath_type<T>;
  const int64_t total = s.N * s.K * s.P * s.Q;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t q = i % s.Q, p = i / s.Q % s.P, k = i / (s.Q * s.P) % s.K,
                  n = i / (s.Q * s.P * s.K);
    acc_t acc = b ? static_cast<acc_t>(b[k]) : acc_t(0);
    const int64_t h0 = kStride * p - s.pad, w0 = kStride * q - s.pad;
    for (int64_t c = 0; c < s.C; ++c) {
      const T* plane = x + (n * s.C + c) * s.H * s.W;
      const T* filt = w + (k * s.C + c) * kKernelSize * kKernelSize;
      for (int r = 0; r < kKernelSize; ++r) {
        const int64_t h = h0 + r;
        if (h < 0 || h >= s.H) {
          continue;
        }
        for (int t = 0; t < kKernelSize; ++t) {
          const int64_t col = w0 + t;
          if (col >= 0 && col < s.W) {
            acc += static_cast<acc_t>(plane[h * s.W + col]) *
                static_cast<acc_t>(filt[r * kKernelSize + t]);
          }
        }
      }
    }
    y[i] = static_cast<T>(acc);
  }
}

// The input gradient is a GEMM, cols = W^T (C*121 x K) . dy (K x P*Q) per
// image, done by cuBLAS, followed by this fold: one thread per input
// element sums the (at most 3 x 3) taps that read it, in a fixed order. For
// tap r, output row p = (h + pad - r) / 4 exists when the division is exact.
template <typename T>
__global__ void fold_kernel(
    const T* __restrict__ cols, T* __restrict__ gx, Shape s, int64_t images) {
  using acc_t = at::opmath_type<T>;
  const int64_t total = images * s.C * s.H * s.W;
  const int64_t pq = s.P * s.Q;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t col = i % s.W, h = i / s.W % s.H, plane = i / (s.W * s.H);
    const T* src = cols + plane * kKernelSize * kKernelSize * pq;
    const int64_t hp = h + s.pad, wp = col + s.pad;
    acc_t acc = 0;
    for (int64_t r = hp % kStride; r < kKernelSize && r <= hp; r += kStride) {
      const int64_t p = (hp - r) / kStride;
      if (p >= s.P) {
        continue;
      }
      for (int64_t t = wp % kStride; t < kKernelSize && t <= wp;
           t += kStride) {
        const int64_t q = (wp - t) / kStride;
        if (q < s.Q) {
          acc += static_cast<acc_t>(
              src[(r * kKernelSize + t) * pq + p * s.Q + q]);
        }
      }
    }
    gx[i] = static_cast<T>(acc);
  }
}

// Block-wide sum in a fixed order, so results are bitwise reproducible.
template <typename acc_t>
__device__ acc_t block_sum(acc_t v) {
  __shared__ acc_t partial[kThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) {
    v += __shfl_down_sync(0xffffffffu, v, offset);
  }
  if (threadIdx.x % 32 == 0) {
    partial[threadIdx.x / 32] = v;
  }
  __syncthreads();
  acc_t total = 0;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kThreads / 32; ++i) {
      total += partial[i];
    }
  }
  return total;
}

// One block per weight element (and, after them, one per bias element when
// gb is given), each reducing over every (n, p, q) in a fixed order.
template <typename T>
__global__ void __launch_bounds__(kThreads) backward_weight_kernel(
    const T* __restrict__ gy, const T* __restrict__ x, T* __restrict__ gw,
    T* __restrict__ gb, Shape s) {
  using acc_t = at::opmath_type<T>;
  const int64_t taps = kKernelSize * kKernelSize;
  const int64_t weights = s.K * s.C * taps;
  const int64_t e = blockIdx.x;
  const int64_t pq = s.P * s.Q, total = s.N * pq;
  acc_t acc = 0;
  if (e < weights) {
    const int64_t t = e % kKernelSize, r = e / kKernelSize % kKernelSize,
                  c = e / taps % s.C, k = e / (taps * s.C);
    for (int64_t j = threadIdx.x; j < total; j += kThreads) {
      const int64_t n = j / pq, p = j % pq / s.Q, q = j % s.Q;
      const int64_t h = kStride * p + r - s.pad, col = kStride * q + t - s.pad;
      // a padded pixel is a zero that float64 F.conv2d multiplies too: an
      // Inf or NaN dy beside the padding gives NaN there
      const bool in = h >= 0 && h < s.H && col >= 0 && col < s.W;
      acc += static_cast<acc_t>(gy[(n * s.K + k) * pq + p * s.Q + q]) *
          (in ? static_cast<acc_t>(x[((n * s.C + c) * s.H + h) * s.W + col]) : acc_t(0));
    }
  } else {
    const int64_t k = e - weights;
    for (int64_t j = threadIdx.x; j < total; j += kThreads) {
      acc += static_cast<acc_t>(gy[(j / pq * s.K + k) * pq + j % pq]);
    }
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) {
    (e < weights ? gw[e] : gb[e - weights]) = static_cast<T>(acc);
  }
}

}  // namespace

void forward(const at::Tensor& input, const at::Tensor& weight, const at::Tensor* bias, int64_t padding,
             const at::Tensor& output) {
  const auto x = input.contiguous();
  const Shape s{x.size(0), x.size(1), x.size(2), x.size(3), weight.size(0), output.size(2), output.size(3), padding};
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "conv11s4_cuda", [&] {
        forward_kernel<scalar_t>
            <<<blocks_for(output.numel()), kThreads, 0,
               c10::cuda::getCurrentCUDAStream()>>>(
                x.const_data_ptr<scalar_t>(), weight.const_data_ptr<scalar_t>(),
                bias != nullptr ? bias->const_data_ptr<scalar_t>() : nullptr,
                output.mutable_data_ptr<scalar_t>(), s);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
}

void backward_input(const at::Tensor& grad_output, const at::Tensor& weight, int64_t padding,
                    const at::Tensor& grad_input) {
  const Shape s{
      grad_input.size(0), grad_input.size(1), grad_input.size(2), grad_input.size(3),
      weight.size(0), grad_output.size(2), grad_output.size(3), padding};
  const auto gy = grad_output.view({s.N, s.K, s.P * s.Q});
  // cuBLAS follows torch's float32 matmul precision, like the other kernels.
  const auto wt = weight.view({s.K, s.C * kKernelSize * kKernelSize}).t();
  const int64_t cols_per_image = s.C * kKernelSize * kKernelSize * s.P * s.Q;
  // Images per GEMM: the unfolded gradient stays under 64 Mi elements.
  const int64_t chunk =
      std::clamp<int64_t>((int64_t{1} << 26) / cols_per_image, 1, s.N);
  const int64_t image_size = s.C * s.H * s.W;
  for (int64_t n0 = 0; n0 < s.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, s.N - n0);
    const auto cols = at::bmm(wt.expand({nb, -1, -1}), gy.narrow(0, n0, nb));
    AT_DISPATCH_FLOATING_TYPES_AND2(
        at::kHalf, at::kBFloat16, gy.scalar_type(),
        "conv11s4_backward_input_cuda", [&] {
          fold_kernel<scalar_t>
              <<<blocks_for(nb * image_size), kThreads, 0,
                 c10::cuda::getCurrentCUDAStream()>>>(
                  cols.const_data_ptr<scalar_t>(),
                  grad_input.mutable_data_ptr<scalar_t>() + n0 * image_size,
                  s, nb);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        });
  }
}

void backward_weight(const at::Tensor& grad_output, const at::Tensor& input, int64_t padding,
                     const at::Tensor& grad_weight, const at::Tensor* grad_bias) {
  const auto x = input.contiguous();
  const Shape s{
      x.size(0), x.size(1), x.size(2), x.size(3),
      grad_weight.size(0), grad_output.size(2), grad_output.size(3), padding};
  // An empty batch still launches: its blocks write the zero gradients.
  const int64_t blocks = grad_weight.numel() + (grad_bias != nullptr ? grad_bias->numel() : 0);
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(),
      "conv11s4_backward_weight_cuda", [&] {
        backward_weight_kernel<scalar_t>
            <<<static_cast<unsigned int>(blocks), kThreads, 0,
               c10::cuda::getCurrentCUDAStream()>>>(
                grad_output.const_data_ptr<scalar_t>(), x.const_data_ptr<scalar_t>(),
                grad_weight.mutable_data_ptr<scalar_t>(),
                grad_bias != nullptr ? grad_bias->mutable_data_ptr<scalar_t>() : nullptr,
                s);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
}

}  // namespace alexop::cuda::reference
