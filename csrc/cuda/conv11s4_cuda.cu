// CUDA kernels: argument checks, output allocation, and general kernels that
// are correct for every shape and dtype the operator accepts. The
// tensor-core kernels (fast_kernels.h) take the shapes they are built for;
// these serve the rest.

#include "../conv11s4.h"
#include "fast_kernels.h"

#include <ATen/Context.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/bmm.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#include <algorithm>

namespace alexop {
namespace {

constexpr int kThreads = 256;

const at::ScalarType kCudaTypes[] = {
    at::kFloat, at::kHalf, at::kBFloat16, at::kDouble};

// Blocks for a grid-stride loop over `total` elements: enough to fill the
// GPU several times over, never more than the grid allows.
unsigned int blocks_for(int64_t total) {
  const int64_t per_sm = 2048 / kThreads * 4;
  const int64_t cap =
      at::cuda::getCurrentDeviceProperties()->multiProcessorCount * per_sm;
  return static_cast<unsigned int>(
      std::max<int64_t>(1, std::min((total + kThreads - 1) / kThreads, cap)));
}

// float32 follows PyTorch's float32 matmul precision, with the meanings its
// documentation gives: "highest" (the default) keeps full fp32 accuracy;
// "high" allows TF32 or each operand as a sum of two bf16 (the forward takes
// the latter: nearly as fast, ~70x more accurate); "medium" allows lower, and
// gets TF32. cuDNN's own default, TF32 for convolutions, is looser.
cuda::Fp32Math fp32_math() {
  switch (at::globalContext().float32MatmulPrecision()) {
    case at::Float32MatmulPrecision::HIGHEST:
      return cuda::Fp32Math::kAccurate;
    case at::Float32MatmulPrecision::HIGH:
      return cuda::Fp32Math::kBf16x3;
    default:
      return cuda::Fp32Math::kTf32;
  }
}

// The tensor-core kernels take NCHW or channels_last inputs as they are.
at::Tensor dense_input(const at::Tensor& input) {
  return input.is_contiguous() ||
          input.is_contiguous(at::MemoryFormat::ChannelsLast)
      ? input
      : input.contiguous();
}

struct Shape {
  int64_t N, C, H, W, K, P, Q, pad;
};

// A channels_last 3-channel image of 16-bit values to NCHW, 8 pixels per
// thread: three 16-byte loads of (pixel, channel) pairs, three 16-byte
// stores of one channel's 8 pixels. hw8: pixels per image / 8.
__global__ void nhwc3_to_nchw_kernel(const uint4* __restrict__ x, uint4* __restrict__ y, int64_t groups,
                                     int64_t hw8) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < groups;
       i += int64_t{gridDim.x} * blockDim.x) {
    const uint4 in[3] = {x[3 * i], x[3 * i + 1], x[3 * i + 2]};
    uint16_t v[24];
    memcpy(v, in, sizeof(in));
    const int64_t n = i / hw8, g = i - n * hw8;
    for (int c = 0; c < 3; ++c) {
      uint16_t o[8];
      for (int p = 0; p < 8; ++p) o[p] = v[3 * p + c];
      uint4 out;
      memcpy(&out, o, sizeof(out));
      y[(n * 3 + c) * hw8 + g] = out;
    }
  }
}

// The 16-bit weight-gradient kernel reads NCHW rows in pairs; transposing a
// channels_last input first costs less than its strided fallback. For the
// 3-channel images it is built for this takes one pass of 16-byte loads and
// stores: 0.035 ms against 0.102 for PyTorch's generic copy (batch 256,
// 224x224, bf16, H200); any other layout takes contiguous().
at::Tensor nchw_input(const at::Tensor& input) {
  const int64_t hw = input.size(2) * input.size(3);
  if (input.is_contiguous() || input.size(1) != 3 || input.element_size() != 2 ||
      !input.is_contiguous(at::MemoryFormat::ChannelsLast) || hw % 8 != 0 ||
      reinterpret_cast<uintptr_t>(input.const_data_ptr()) % 16 != 0) {
    return input.contiguous();
  }
  auto out = at::empty(input.sizes(), input.options());
  const int64_t groups = input.numel() / 24;
  if (groups > 0) {
    nhwc3_to_nchw_kernel<<<blocks_for(groups), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        static_cast<const uint4*>(input.const_data_ptr()), static_cast<uint4*>(out.mutable_data_ptr()), groups,
        hw / 8);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return out;
}

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
      if (h >= 0 && h < s.H && col >= 0 && col < s.W) {
        acc += static_cast<acc_t>(gy[(n * s.K + k) * pq + p * s.Q + q]) *
            static_cast<acc_t>(x[((n * s.C + c) * s.H + h) * s.W + col]);
      }
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

at::Tensor conv11s4_cuda(
    const at::Tensor& input,
    const at::Tensor& weight,
    const std::optional<at::Tensor>& bias_opt,
    int64_t padding) {
  const auto size = check_conv11s4(input, weight, bias_opt, padding);
  check_dtype("alexop.conv11s4", input, kCudaTypes, "CUDA");
  const c10::cuda::CUDAGuard guard(input.device());
  const Shape s{
      size[0].expect_int(), input.size(1), input.size(2), input.size(3),
      size[1].expect_int(), size[2].expect_int(), size[3].expect_int(),
      padding};
  auto output = at::empty({s.N, s.K, s.P, s.Q}, input.options());
  if (output.numel() == 0) {
    return output;
  }
  const auto w = weight.contiguous();
  const bool has_bias = bias_opt.has_value() && bias_opt->defined();
  const auto b = has_bias ? bias_opt->contiguous() : at::Tensor();
  if (cuda::conv11s4_forward_fast(
          dense_input(input), w,
          has_bias ? std::optional<at::Tensor>(b) : std::nullopt, padding,
          fp32_math(), output)) {
    return output;
  }
  const auto x = input.contiguous();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "conv11s4_cuda", [&] {
        forward_kernel<scalar_t>
            <<<blocks_for(output.numel()), kThreads, 0,
               at::cuda::getCurrentCUDAStream()>>>(
                x.const_data_ptr<scalar_t>(), w.const_data_ptr<scalar_t>(),
                has_bias ? b.const_data_ptr<scalar_t>() : nullptr,
                output.mutable_data_ptr<scalar_t>(), s);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
  return output;
}

at::Tensor conv11s4_backward_input_cuda(
    const at::Tensor& grad_output,
    const at::Tensor& weight,
    c10::SymIntArrayRef input_size_sym,
    int64_t padding) {
  check_conv11s4_backward_input(grad_output, weight, input_size_sym, padding);
  check_dtype(
      "alexop.conv11s4_backward_input", grad_output, kCudaTypes, "CUDA");
  const c10::cuda::CUDAGuard guard(grad_output.device());
  const auto input_size = C10_AS_INTARRAYREF_SLOW(input_size_sym);
  const Shape s{
      input_size[0], input_size[1], input_size[2], input_size[3],
      weight.size(0), grad_output.size(2), grad_output.size(3), padding};
  auto grad_input = at::empty(input_size, grad_output.options());
  if (grad_input.numel() == 0) {
    return grad_input;
  }
  const auto gy_dense = grad_output.contiguous();
  const auto w = weight.contiguous();
  if (cuda::conv11s4_backward_input_fast(
          gy_dense, w, padding, fp32_math(), grad_input)) {
    return grad_input;
  }
  const auto gy = gy_dense.view({s.N, s.K, s.P * s.Q});
  // cuBLAS follows torch's float32 matmul precision, like the other kernels.
  const auto wt = w.view({s.K, s.C * kKernelSize * kKernelSize}).t();
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
                 at::cuda::getCurrentCUDAStream()>>>(
                  cols.const_data_ptr<scalar_t>(),
                  grad_input.mutable_data_ptr<scalar_t>() + n0 * image_size,
                  s, nb);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        });
  }
  return grad_input;
}

std::tuple<at::Tensor, at::Tensor> conv11s4_backward_weight_cuda(
    const at::Tensor& grad_output,
    const at::Tensor& input,
    int64_t padding,
    bool bias_grad) {
  const auto wsize =
      check_conv11s4_backward_weight(grad_output, input, padding);
  check_dtype(
      "alexop.conv11s4_backward_weight", input, kCudaTypes, "CUDA");
  const c10::cuda::CUDAGuard guard(input.device());
  const Shape s{
      input.size(0), input.size(1), input.size(2), input.size(3),
      wsize[0].expect_int(), grad_output.size(2), grad_output.size(3),
      padding};
  auto grad_weight = at::empty(
      {s.K, s.C, kKernelSize, kKernelSize}, input.options());
  auto grad_bias = at::empty({bias_grad ? s.K : 0}, input.options());
  const auto gy = grad_output.contiguous();
  const auto x_fast = input.scalar_type() == at::kFloat
      ? dense_input(input)
      : nchw_input(input);
  if (cuda::conv11s4_backward_weight_fast(
          gy, x_fast, padding, fp32_math(), grad_weight,
          bias_grad ? std::optional<at::Tensor>(grad_bias) : std::nullopt)) {
    return {grad_weight, grad_bias};
  }
  const auto x = x_fast.contiguous();
  // An empty batch still launches: its blocks write the zero gradients.
  const int64_t blocks = grad_weight.numel() + grad_bias.numel();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(),
      "conv11s4_backward_weight_cuda", [&] {
        backward_weight_kernel<scalar_t>
            <<<static_cast<unsigned int>(blocks), kThreads, 0,
               at::cuda::getCurrentCUDAStream()>>>(
                gy.const_data_ptr<scalar_t>(), x.const_data_ptr<scalar_t>(),
                grad_weight.mutable_data_ptr<scalar_t>(),
                bias_grad ? grad_bias.mutable_data_ptr<scalar_t>() : nullptr,
                s);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
  return {grad_weight, grad_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(alexop, CUDA, m) {
  m.impl("conv11s4", &conv11s4_cuda);
  m.impl("conv11s4_backward_input", &conv11s4_backward_input_cuda);
  m.impl("conv11s4_backward_weight", &conv11s4_backward_weight_cuda);
}

}  // namespace alexop
