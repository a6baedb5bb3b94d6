// The CUDA dispatch key of the alexop operators: argument checks, output
// allocation, the problem description each op's kernel choice is made from,
// and the launch of the chosen kernel. Which kernel runs is decided by the
// selectors alone (forward/, weight_grad/, input_grad/ select.cu): alexop's
// tensor-core kernels where they win, cuDNN (cudnn/) where they would not,
// the reference kernels (reference/) for float64. _kernel_for asks the same
// selectors without launching anything.

#include "../conv11s4.h"
#include "common/constants.h"
#include "common/device.h"
#include "cudnn/conv11s4_cudnn.h"
#include "forward/launch.h"
#include "input_grad/launch.h"
#include "weight_grad/launch.h"
#include "weight_grad/nchw_input.h"

#include <ATen/Context.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <string>
#include <vector>

namespace alexop {
namespace {

const at::ScalarType kCudaTypes[] = {
    at::kFloat, at::kHalf, at::kBFloat16, at::kDouble};

// float32 follows PyTorch's float32 matmul precision, with the meanings its
// documentation gives: "highest" (the default) keeps full fp32 accuracy;
// "high" allows TF32 or each operand as a sum of two bf16 (the forward takes
// the latter: nearly as fast, far more accurate); "medium" allows lower, and
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

bool dense(const at::Tensor& t) {
  return t.is_contiguous() || t.is_contiguous(at::MemoryFormat::ChannelsLast);
}

// The tensor-core kernels take NCHW or channels_last inputs as they are.
at::Tensor dense_input(const at::Tensor& input) {
  return dense(input) ? input : input.contiguous();
}

// How a dense operand reaches the kernels: channels_last or NCHW (a tensor
// that is both counts as NCHW), and the alignment of its address.
struct Operand {
  bool nhwc;
  int align;
};
Operand operand(const at::Tensor& t) {
  return {!t.is_contiguous(), cuda::alignment(t.const_data_ptr())};
}

// What the kernel query assumes of a tensor the operator allocates (the CUDA
// caching allocator aligns blocks to 512 bytes): NCHW, 16-byte aligned.
constexpr Operand kFresh{false, 16};

// What every op's problem starts from; like: a tensor of the op's device and
// dtype, input_size: (N, C, H, W).
cuda::ProblemBase problem_base(
    const at::Tensor& like, at::IntArrayRef input_size, int64_t K,
    int64_t padding) {
  cuda::ProblemBase p;
  p.dev = cuda::device(like.get_device());
  p.dtype = like.scalar_type();
  p.math = fp32_math();
  p.N = input_size[0];
  p.C = input_size[1];
  p.H = input_size[2];
  p.W = input_size[3];
  p.K = K;
  p.P = (p.H + 2 * padding - kKernelSize) / kStride + 1;
  p.Q = (p.W + 2 * padding - kKernelSize) / kStride + 1;
  p.pad = padding;
  return p;
}

cuda::forward::Problem forward_problem(
    const at::Tensor& input, const at::Tensor& weight, int64_t padding,
    Operand x, int output_align) {
  cuda::forward::Problem p{
      problem_base(input, input.sizes(), weight.size(0), padding)};
  p.nhwc = x.nhwc;
  p.input_align = x.align;
  p.output_align = output_align;
  return p;
}

// x: the input as the weight-gradient kernels receive it (nchw_input.h).
cuda::weight_grad::Problem weight_grad_problem(
    const at::Tensor& input, int64_t K, int64_t padding, Operand x,
    int64_t x_stride0, int grad_output_align, bool transposed) {
  cuda::weight_grad::Problem p{
      problem_base(input, input.sizes(), K, padding)};
  p.nhwc = x.nhwc;
  p.input_stride0 = x_stride0;
  p.input_align = x.align;
  p.grad_output_align = grad_output_align;
  p.transposed = transposed;
  return p;
}

// float32 may use TF32 in cuDNN where alexop hands it a problem as the
// precision setting allows: under "high" and "medium", never "highest".
bool cudnn_tf32() { return fp32_math() != cuda::Fp32Math::kAccurate; }

// A 1- or 2-channel tensor with zero channels added up to 3, NCHW: what the
// 3-channel kernels take in a pad3 choice.
at::Tensor pad3(const at::Tensor& t) {
  return at::constant_pad_nd(t, {0, 0, 0, 0, 0, cuda::kC - t.size(1)}).contiguous();
}

// The weight-gradient problem of an input as the kernels would receive it
// (nchw_input.h), before any copy is made: a copy is NCHW and fresh.
cuda::weight_grad::Problem weight_grad_problem_of(
    const at::Tensor& input, int64_t K, int64_t padding,
    cuda::weight_grad::InputPrep prep, int grad_output_align) {
  const bool as_is = prep == cuda::weight_grad::InputPrep::kAsIs;
  return weight_grad_problem(
      input, K, padding, as_is ? operand(input) : kFresh,
      as_is ? input.stride(0) : input.size(1) * input.size(2) * input.size(3),
      grad_output_align, prep == cuda::weight_grad::InputPrep::kTranspose);
}

at::Tensor conv11s4_cuda(
    const at::Tensor& input,
    const at::Tensor& weight,
    const std::optional<at::Tensor>& bias_opt,
    int64_t padding) {
  const auto size = check_conv11s4(input, weight, bias_opt, padding);
  check_dtype("alexop.conv11s4", input, kCudaTypes, "CUDA");
  const c10::cuda::CUDAGuard guard(input.device());
  auto x = dense_input(input);
  auto w = weight.contiguous();
  auto p = forward_problem(x, w, padding, operand(x), kFresh.align);
  auto choice = cuda::forward::select(p);
  if (choice.kernel == cuda::forward::Kernel::kCudnn) {
    return cuda::conv11s4_cudnn(input, weight, bias_opt, padding, cudnn_tf32());
  }
  if (choice.pad3) {
    x = pad3(x);
    w = pad3(w);
    p = forward_problem(x, w, padding, operand(x), kFresh.align);
    choice = cuda::forward::select(p);
  }
  auto output = at::empty(
      {size[0].expect_int(), size[1].expect_int(), size[2].expect_int(),
       size[3].expect_int()},
      input.options());
  const bool has_bias = bias_opt.has_value() && bias_opt->defined();
  const auto b = has_bias ? bias_opt->contiguous() : at::Tensor();
  cuda::forward::launch(choice, p, {x, w, has_bias ? &b : nullptr, output});
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
  const auto gy = grad_output.contiguous();
  auto w = weight.contiguous();
  cuda::input_grad::Problem p{
      problem_base(grad_output, input_size, w.size(0), padding)};
  auto choice = cuda::input_grad::select(p);
  if (choice.kernel == cuda::input_grad::Kernel::kCudnn) {
    return cuda::conv11s4_backward_input_cudnn(
        gy, w, input_size, padding, cudnn_tf32());
  }
  if (!choice.pad3) {
    auto grad_input = at::empty(input_size, grad_output.options());
    cuda::input_grad::launch(choice, p, {gy, w, grad_input});
    return grad_input;
  }
  // computed for 3 channels with zero weights added, then cut to C
  w = pad3(w);
  const int64_t size3[] = {input_size[0], cuda::kC, input_size[2], input_size[3]};
  p = cuda::input_grad::Problem{problem_base(grad_output, size3, w.size(0), padding)};
  auto grad_input = at::empty(size3, grad_output.options());
  cuda::input_grad::launch(cuda::input_grad::select(p), p, {gy, w, grad_input});
  return grad_input.narrow(1, 0, input_size[1]).contiguous();
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
  const int64_t K = wsize[0].expect_int();
  const auto gy = grad_output.contiguous();
  const int gy_align = cuda::alignment(gy.const_data_ptr());
  const auto prep = cuda::weight_grad::input_prep(input);
  auto choice = cuda::weight_grad::select(
      weight_grad_problem_of(input, K, padding, prep, gy_align));
  if (choice.kernel == cuda::weight_grad::Kernel::kCudnn) {
    return cuda::conv11s4_backward_weight_cudnn(
        gy, input, K, padding, bias_grad, cudnn_tf32());
  }
  const auto x = choice.pad3 ? pad3(input)
                             : cuda::weight_grad::prepare_input(input, prep);
  const auto p = weight_grad_problem(
      x, K, padding, operand(x), x.stride(0), gy_align, choice.transposed);
  auto grad_weight = at::empty(
      {K, x.size(1), kKernelSize, kKernelSize}, input.options());
  auto grad_bias = at::empty({bias_grad ? K : 0}, input.options());
  cuda::weight_grad::launch(
      cuda::weight_grad::select(p), p,
      {gy, x, grad_weight, bias_grad ? &grad_bias : nullptr});
  if (choice.pad3) {
    grad_weight = grad_weight.narrow(1, 0, input.size(1)).contiguous();
  }
  return {grad_weight, grad_bias};
}

// The kernels the three ops would run for (input, weight, padding), by name,
// from the same selectors, launching nothing. grad_output is taken as the
// autograd path makes it: contiguous NCHW of the output's shape and the
// input's dtype, freshly allocated.
std::vector<std::string> kernel_for_cuda(
    const at::Tensor& input, const at::Tensor& weight, int64_t padding) {
  check_conv11s4(input, weight, std::nullopt, padding);
  check_dtype("alexop._kernel_for", input, kCudaTypes, "CUDA");
  const c10::cuda::CUDAGuard guard(input.device());
  const auto fwd = forward_problem(
      input, weight, padding, dense(input) ? operand(input) : kFresh,
      kFresh.align);
  const auto wgrad = weight_grad_problem_of(
      input, weight.size(0), padding, cuda::weight_grad::input_prep(input),
      kFresh.align);
  const cuda::input_grad::Problem dgrad{
      problem_base(input, input.sizes(), weight.size(0), padding)};
  return {
      cuda::forward::name(cuda::forward::select(fwd)),
      cuda::weight_grad::name(cuda::weight_grad::select(wgrad)),
      cuda::input_grad::name(cuda::input_grad::select(dgrad))};
}

}  // namespace

TORCH_LIBRARY_IMPL(alexop, CUDA, m) {
  m.impl("conv11s4", &conv11s4_cuda);
  m.impl("conv11s4_backward_input", &conv11s4_backward_input_cuda);
  m.impl("conv11s4_backward_weight", &conv11s4_backward_weight_cuda);
  m.impl("_kernel_for", &kernel_for_cuda);
}

}  // namespace alexop
