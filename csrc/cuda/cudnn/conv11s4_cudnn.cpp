#include "conv11s4_cudnn.h"

#include "../../conv11s4.h"
#include "../common/problem.h"
#include "../common/relayout.h"
#include "../common/timed.h"
#include "../weight_grad/bias.h"
#include "space_to_depth.h"

#include <ATen/Context.h>
#include <ATen/ops/_convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/empty.h>

#include <functional>
#include <vector>

namespace alexop::cuda {
namespace {

constexpr int64_t kStrides[] = {kStride, kStride};
constexpr int64_t kDilation[] = {1, 1};
constexpr int64_t kNoPadding[] = {0, 0};  // also the view's padding and output padding
constexpr int64_t kUnitStrides[] = {1, 1};  // the space-to-depth view's

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

// The output's rows (d = 2) or columns (d = 3).
int64_t output_size(const at::Tensor& input, int64_t padding, int d) {
  return (input.size(d) + 2 * padding - kKernelSize) / kStride + 1;
}

// Output pixels over the batch.
int64_t output_pixels(const at::Tensor& input, int64_t padding) {
  return input.size(0) * output_size(input, padding, 2) * output_size(input, padding, 3);
}

// A way cuDNN runs an op: its 11 x 11 stride-4 kernels or (view) its 3 x 3
// ones on the space-to-depth view (space_to_depth.h), in a layout.
struct Way {
  at::MemoryFormat layout;
  bool view;
};

// The fastest of cuDNN's ways for key, run(way) the op that way, copies
// included: both layouts, each also on the view where `view` allows it.
// Untimed, the guess's layout without the view.
Way fastest_way(const TimedKey& key, at::MemoryFormat guess, bool view, const std::function<void(const Way&)>& run) {
  const auto nchw = at::MemoryFormat::Contiguous, nhwc = at::MemoryFormat::ChannelsLast;
  std::vector<Way> ways = {{nchw, false}, {nhwc, false}};
  if (view) ways.insert(ways.end(), {{nchw, true}, {nhwc, true}});
  std::vector<std::function<void()>> runs;
  for (const Way& way : ways) runs.emplace_back([&run, way] { run(way); });
  return ways[fastest(key, guess == nhwc ? 1 : 0, runs)];
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
  const auto run = [&](const Way& way) {
    const auto convolve = [&](const at::Tensor& x, const at::Tensor& w, at::IntArrayRef strides, at::IntArrayRef p) {
      return at::_convolution(x, w, bias, strides, p, kDilation, /*transposed=*/false, kNoPadding, /*groups=*/1,
                              context().benchmarkCuDNN(), context().deterministicCuDNN(),
                              context().userEnabledCuDNN(), allow_tf32);
    };
    const auto y = way.view ? convolve(space_to_depth(input, padding, output_size(input, padding, 2) + 2,
                                                      output_size(input, padding, 3) + 2, way.layout),
                                       space_to_depth_weight(weight, way.layout), kUnitStrides, kNoPadding)
                            : convolve(relayout(input, way.layout), relayout(weight, way.layout), kStrides, pad);
    return relayout(y, format);
  };
  const int64_t K = weight.size(0);
  const auto way = fastest_way(
      timed_key(Decision::kForwardLayout, input, input.sizes(), K, padding, allow_tf32,
                 bias.has_value() && bias->defined(), format),
      forward_guess(K, output_pixels(input, padding), input.scalar_type(), allow_tf32, format),
      space_to_depth_fits(input.sizes(), input.scalar_type()), run);
  return run(way);
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
  // back as output padding (on the view, the copy back writes them as zeros).
  // Untimed, it runs channels_last, where cuDNN's TF32 kernels for it are the
  // fast ones (docs/perf-history.md).
  const int64_t pad[] = {padding, padding};
  const int64_t output_padding[] = {
      input_size[2] + 2 * padding - ((grad_output.size(2) - 1) * kStride + kKernelSize),
      input_size[3] + 2 * padding - ((grad_output.size(3) - 1) * kStride + kKernelSize)};
  const auto run = [&](const Way& way) {
    const auto transposed = [&](const at::Tensor& w, at::IntArrayRef strides, at::IntArrayRef p,
                                at::IntArrayRef out_pad) {
      return at::_convolution(relayout(grad_output, way.layout), w, std::nullopt, strides, p, kDilation,
                              /*transposed=*/true, out_pad, /*groups=*/1, context().benchmarkCuDNN(),
                              context().deterministicCuDNN(), context().userEnabledCuDNN(), allow_tf32);
    };
    if (way.view) {
      return depth_to_space(transposed(space_to_depth_weight(weight, way.layout), kUnitStrides, kNoPadding,
                                       kNoPadding),
                            padding, input_size[2], input_size[3], format);
    }
    return relayout(transposed(relayout(weight, way.layout), kStrides, pad, output_padding), format);
  };
  const auto way = fastest_way(
      timed_key(Decision::kInputGradLayout, grad_output, input_size, weight.size(0), padding, allow_tf32, false,
                 format),
      at::MemoryFormat::ChannelsLast, space_to_depth_fits(input_size, grad_output.scalar_type()), run);
  return run(way);
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
  const CudnnTf32Scope tf32(allow_tf32);
  const auto run = [&](const Way& way) {
    const auto dy = relayout(grad_output, way.layout);
    const auto grad_of = [&](const at::Tensor& x, int64_t taps, at::IntArrayRef strides, at::IntArrayRef p) {
      const auto weight = at::empty({out_channels, x.size(1), taps, taps}, x.options().memory_format(way.layout));
      return std::get<1>(at::convolution_backward(dy, x, weight, at::OptionalIntArrayRef(), strides, p, kDilation,
                                                  /*transposed=*/false, kNoPadding, /*groups=*/1,
                                                  {false, true, false}));
    };
    if (way.view) {
      const auto x = space_to_depth(input, padding, dy.size(2) + 2, dy.size(3) + 2, way.layout);
      return depth_to_space_weight(grad_of(x, 3, kUnitStrides, kNoPadding));
    }
    return grad_of(relayout(input, way.layout), kKernelSize, kStrides, pad).contiguous();
  };
  const auto way = fastest_way(
      timed_key(Decision::kWeightGradLayout, input, input.sizes(), out_channels, padding, allow_tf32, bias_grad,
                 grad_output.suggest_memory_format()),
      grad_output.suggest_memory_format(), space_to_depth_fits(input.sizes(), input.scalar_type()), run);
  return {run(way), bias_grad ? weight_grad::bias_grad(grad_output) : at::empty({0}, input.options())};
}

}  // namespace alexop::cuda
