// The CUDA dispatch key: argument checks, output allocation and the launch
// of the kernels. The forward's kernel is chosen by forward/select.cu; the
// backward tensor-core kernels (fast_kernels.h) take the shapes they are
// built for, and the reference kernels (reference/) serve the rest.

#include "../conv11s4.h"
#include "common/device.h"
#include "fast_kernels.h"
#include "forward/launch.h"
#include "reference/reference.h"

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

cuda::forward::Problem forward_problem(const at::Tensor& x, const at::Tensor& w, int64_t padding, int output_align) {
  cuda::forward::Problem p;
  p.dev = cuda::device(x.get_device());
  p.dtype = x.scalar_type();
  p.math = fp32_math();
  p.N = x.size(0);
  p.C = x.size(1);
  p.H = x.size(2);
  p.W = x.size(3);
  p.K = w.size(0);
  p.pad = padding;
  p.nhwc = !x.is_contiguous();
  p.input_align = cuda::alignment(x.const_data_ptr());
  p.output_align = output_align;
  return p;
}

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

at::Tensor conv11s4_cuda(
    const at::Tensor& input,
    const at::Tensor& weight,
    const std::optional<at::Tensor>& bias_opt,
    int64_t padding) {
  const auto size = check_conv11s4(input, weight, bias_opt, padding);
  check_dtype("alexop.conv11s4", input, kCudaTypes, "CUDA");
  const c10::cuda::CUDAGuard guard(input.device());
  auto output = at::empty(
      {size[0].expect_int(), size[1].expect_int(), size[2].expect_int(),
       size[3].expect_int()},
      input.options());
  const auto x = dense_input(input);
  const auto w = weight.contiguous();
  const bool has_bias = bias_opt.has_value() && bias_opt->defined();
  const auto b = has_bias ? bias_opt->contiguous() : at::Tensor();
  const auto p = forward_problem(x, w, padding, cuda::alignment(output.const_data_ptr()));
  cuda::forward::launch(cuda::forward::select(p), p, {x, w, has_bias ? &b : nullptr, output});
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
  auto grad_input = at::empty(input_size, grad_output.options());
  if (grad_input.numel() == 0) {
    return grad_input;
  }
  const auto gy = grad_output.contiguous();
  const auto w = weight.contiguous();
  if (!cuda::conv11s4_backward_input_fast(gy, w, padding, fp32_math(), grad_input)) {
    cuda::reference::backward_input(gy, w, padding, grad_input);
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
  auto grad_weight = at::empty(
      {wsize[0].expect_int(), input.size(1), kKernelSize, kKernelSize}, input.options());
  auto grad_bias = at::empty({bias_grad ? wsize[0].expect_int() : 0}, input.options());
  const auto gy = grad_output.contiguous();
  const auto x_fast = input.scalar_type() == at::kFloat
      ? dense_input(input)
      : nchw_input(input);
  if (!cuda::conv11s4_backward_weight_fast(
          gy, x_fast, padding, fp32_math(), grad_weight,
          bias_grad ? std::optional<at::Tensor>(grad_bias) : std::nullopt)) {
    cuda::reference::backward_weight(gy, x_fast, padding, grad_weight, bias_grad ? &grad_bias : nullptr);
  }
  return {grad_weight, grad_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(alexop, CUDA, m) {
  m.impl("conv11s4", &conv11s4_cuda);
  m.impl("conv11s4_backward_input", &conv11s4_backward_input_cuda);
  m.impl("conv11s4_backward_weight", &conv11s4_backward_weight_cuda);
}

}  // namespace alexop
