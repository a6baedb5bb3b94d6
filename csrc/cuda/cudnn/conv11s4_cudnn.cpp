#include "conv11s4_cudnn.h"

#include "../../conv11s4.h"
#include "../common/problem.h"
#include "../common/relayout.h"
#include "../common/timed.h"
#include "../weight_grad/bias.h"

#include <ATen/Context.h>
#include <ATen/ops/_convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/empty.h>

#include <functional>

namespace alexop::cuda {
namespace {

constexpr int64_t kStrides[] = {kStride, kStride};
constexpr int64_t kDilation[] = {1, 1};

// ATen's convolution_backward has no TF32 argument: it reads cuDNN's
// permission from the global context. This sets it for one call and puts it
// back, as torch.backends.cudnn.flags() does in Python.
class CudnnTf32Scope {
 public:
  explicit CudnnTf32Scope(bool allow)
      : saved_(at::globalContext().float32Precision(at::Float32Backend::CUDA, at::Float32Op::CONV)),
        changed_(allow != at::globalContext().allowTF32CuDNN(at::Float32Op::CONV)) {
    if (changed_) set(allow ? at::Float32Precision::TF32 : at::Float32Precision::IEEE);
  }
  ~CudnnTf32Scope() {
    if (changed_) set(saved_);
  }
  CudnnTf32Scope(const CudnnTf32Scope&) = delete;
  CudnnTf32Scope& operator=(const CudnnTf32Scope&) = delete;

 private:
  static void set(at::Float32Precision p) {
    at::globalContext().setFloat32Precision(at::Float32Backend::CUDA, at::Float32Op::CONV, p);
  }
  at::Float32Precision saved_;
  bool changed_;
};

at::Context& context() { return at::globalContext(); }

// The forward's layout where none has been timed (common/timed.h); the rules
// and their timings are the S17 rows of docs/perf-history.md. The result leaves
// in the caller's format (output_memory_format); that layout stands unless
// cuDNN's own kernels differ by more than the copies: full fp32 runs NCHW
// (cuDNN's fp32 kernels are NCHW ones), TF32 with a C_out that is not a
// multiple of 64 runs channels_last (there cuDNN's NCHW TF32 kernels are the
// slow ones), and one small image runs NCHW (its tensors are cheap to copy).
at::MemoryFormat forward_guess(int64_t K, int64_t output_pixels, at::ScalarType dtype, bool allow_tf32,
                               at::MemoryFormat format) {
  const auto nchw = at::MemoryFormat::Contiguous, nhwc = at::MemoryFormat::ChannelsLast;
  if (one_small_image(output_pixels)) return nchw;
  if (dtype == at::kFloat && !allow_tf32) return nchw;
  if (dtype == at::kFloat && K % 64 != 0) return nhwc;
  return format;
}

// Output pixels over the batch.
int64_t output_pixels(const at::Tensor& input, int64_t padding) {
  const auto out = [&](int64_t d) { return (input.size(d) + 2 * padding - kKernelSize) / kStride + 1; };
  return input.size(0) * out(2) * out(3);
}

// The faster of cuDNN's NCHW and channels_last kernels, run(layout) the op
// in that layout, copies included.
at::MemoryFormat faster_layout(
    const TimedKey& key, at::MemoryFormat guess, const std::function<void(at::MemoryFormat)>& run) {
  const auto nchw = at::MemoryFormat::Contiguous, nhwc = at::MemoryFormat::ChannelsLast;
  return fastest(key, guess == nhwc, {[&] { run(nchw); }, [&] { run(nhwc); }}) == 1 ? nhwc : nchw;
}

}  // namespace

at::Tensor conv11s4_cudnn(
    const at::Tensor& input,
    const at::Tensor& weight,
    const std::optional<at::Tensor>& bias,
    int64_t padding,
    bool allow_tf32,
    at::MemoryFormat format) {
  const int64_t pad[] = {padding, padding};
  const int64_t no_output_padding[] = {0, 0};
  const auto run = [&](at::MemoryFormat layout) {
    const auto y = at::_convolution(
        relayout(input, layout), relayout(weight, layout), bias, kStrides, pad, kDilation,
        /*transposed=*/false, no_output_padding, /*groups=*/1, context().benchmarkCuDNN(),
        context().deterministicCuDNN(), context().userEnabledCuDNN(), allow_tf32);
    return relayout(y, format);
  };
  const int64_t K = weight.size(0);
  const auto layout = faster_layout(
      timed_key(Decision::kForwardLayout, input, input.sizes(), K, padding, allow_tf32,
                 bias.has_value() && bias->defined(), format),
      forward_guess(K, output_pixels(input, padding), input.scalar_type(), allow_tf32, format), run);
  return run(layout);
}

at::Tensor conv11s4_backward_input_cudnn(
    const at::Tensor& grad_output,
    const at::Tensor& weight,
    at::IntArrayRef input_size,
    int64_t padding,
    bool allow_tf32,
    at::MemoryFormat format) {
  // The input gradient is the transposed convolution of grad_output; the
  // rows and columns the forward's windows never reached (at most 3) come
  // back as output padding. Untimed, it runs channels_last, where cuDNN's
  // TF32 kernels for it are the fast ones (docs/perf-history.md).
  const int64_t pad[] = {padding, padding};
  const int64_t output_padding[] = {
      input_size[2] + 2 * padding - ((grad_output.size(2) - 1) * kStride + kKernelSize),
      input_size[3] + 2 * padding - ((grad_output.size(3) - 1) * kStride + kKernelSize)};
  const auto run = [&](at::MemoryFormat layout) {
    const auto dx = at::_convolution(
        relayout(grad_output, layout), relayout(weight, layout), std::nullopt, kStrides, pad, kDilation,
        /*transposed=*/true, output_padding, /*groups=*/1, context().benchmarkCuDNN(),
        context().deterministicCuDNN(), context().userEnabledCuDNN(), allow_tf32);
    return relayout(dx, format);
  };
  const auto layout = faster_layout(
      timed_key(Decision::kInputGradLayout, grad_output, input_size, weight.size(0), padding, allow_tf32, false,
                 format),
      at::MemoryFormat::ChannelsLast, run);
  return run(layout);
}

std::tuple<at::Tensor, at::Tensor> conv11s4_backward_weight_cudnn(
    const at::Tensor& grad_output,
    const at::Tensor& input,
    int64_t out_channels,
    int64_t padding,
    bool bias_grad,
    bool allow_tf32) {
  // Only the weight's sizes and options are read by the weight gradient.
  // Untimed, it runs in grad_output's layout: cuDNN in one layout beats a
  // mixed one, and a copy of grad_output cost more than its channels_last
  // kernels saved (docs/perf-history.md, S17). The bias gradient is
  // alexop's sum of grad_output as given (ATen's, which convolution_backward
  // runs, reads a channels_last grad_output slowly), outside the timing.
  const int64_t pad[] = {padding, padding};
  const int64_t no_output_padding[] = {0, 0};
  const CudnnTf32Scope tf32(allow_tf32);
  const auto run = [&](at::MemoryFormat layout) {
    const auto weight = at::empty(
        {out_channels, input.size(1), kKernelSize, kKernelSize}, input.options().memory_format(layout));
    const auto grad_weight = std::get<1>(at::convolution_backward(
        relayout(grad_output, layout), relayout(input, layout), weight, at::OptionalIntArrayRef(), kStrides, pad,
        kDilation, /*transposed=*/false, no_output_padding, /*groups=*/1, {false, true, false}));
    return grad_weight.contiguous();
  };
  const auto layout = faster_layout(
      timed_key(Decision::kWeightGradLayout, input, input.sizes(), out_channels, padding, allow_tf32, bias_grad,
                 grad_output.suggest_memory_format()),
      grad_output.suggest_memory_format(), run);
  return {run(layout), bias_grad ? weight_grad::bias_grad(grad_output) : at::empty({0}, input.options())};
}

}  // namespace alexop::cuda
