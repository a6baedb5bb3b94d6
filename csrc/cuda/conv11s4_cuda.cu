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
#include "common/relayout.h"
#include "common/timed.h"
#include "cudnn/conv11s4_cudnn.h"
#include "cudnn/space_to_depth.h"
#include "forward/launch.h"
#include "input_grad/launch.h"
#include "weight_grad/launch.h"
#include "weight_grad/nchw_input.h"

#include <ATen/Context.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sum.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
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

// How an operand reaches the kernels: channels_last or NCHW (a tensor that
// is both counts as NCHW; so does a channel slice of an NCHW tensor, whose
// images are further apart), and the alignment of its address.
struct Operand {
  bool nhwc;
  int align;
};
Operand operand(const at::Tensor& t) {
  return {!t.is_contiguous() && t.is_contiguous(at::MemoryFormat::ChannelsLast),
          cuda::alignment(t.const_data_ptr())};
}

// What the kernel query assumes of a tensor the operator allocates (the CUDA
// caching allocator aligns blocks to 512 bytes): NCHW, 16-byte aligned.
constexpr Operand kFresh{false, 16};

// grad_output (or a view of its channels) as the weight gradient's kernels
// take it (weight_grad/select.h): channels_last where its pixels are 16-byte
// aligned rows of channels (a multiple of 8 elements apart, rows of pixels
// dense), which the phase-plane kernel reads in place; its alignment where
// NCHW (the others read it so), else a fresh copy's.
Operand grad_output_operand(at::IntArrayRef sizes, at::IntArrayRef strides, int align, bool nchw) {
  const bool pixels = sizes[1] > 1 && strides[1] == 1 && strides[3] % 8 == 0 &&
                      strides[2] == sizes[3] * strides[3] && align >= kFresh.align;
  return {pixels, nchw ? align : kFresh.align};
}
Operand grad_output_operand(const at::Tensor& dy) {
  return grad_output_operand(dy.sizes(), dy.strides(), cuda::alignment(dy.const_data_ptr()), dy.is_contiguous());
}

// What every op's problem starts from, on device dev; like: a tensor of the
// op's dtype, input_size: (N, C, H, W).
cuda::ProblemBase problem_base(
    const cuda::Device& dev, const at::Tensor& like,
    at::IntArrayRef input_size, int64_t K, int64_t padding) {
  cuda::ProblemBase p;
  p.dev = dev;
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
    const cuda::Device& dev, const at::Tensor& input, const at::Tensor& weight,
    int64_t padding, Operand x, int output_align) {
  cuda::forward::Problem p{
      problem_base(dev, input, input.sizes(), weight.size(0), padding)};
  p.nhwc = x.nhwc;
  p.input_align = x.align;
  p.output_align = output_align;
  return p;
}

// x: the input as the weight-gradient kernels receive it (nchw_input.h).
cuda::weight_grad::Problem weight_grad_problem(
    const cuda::Device& dev, const at::Tensor& input, int64_t K,
    int64_t padding, Operand x, int64_t x_stride0, Operand dy,
    bool transposed) {
  cuda::weight_grad::Problem p{
      problem_base(dev, input, input.sizes(), K, padding)};
  p.nhwc = x.nhwc;
  p.input_stride0 = x_stride0;
  p.input_align = x.align;
  p.grad_output_align = dy.align;
  p.grad_output_nhwc = dy.nhwc;
  p.transposed = transposed;
  return p;
}

// float32 may use TF32 in cuDNN where alexop hands it a problem as the
// precision setting allows: under "high" and "medium", never "highest".
bool cudnn_tf32() { return fp32_math() != cuda::Fp32Math::kAccurate; }

// Slice g of a tensor's channels (dim 1), 3 of them, zero channels added
// past the last: what the 3-channel kernels take in a sliced choice
// (common/constants.h). NCHW, fresh.
at::Tensor slice3(const at::Tensor& t, int64_t g) {
  const int64_t c0 = cuda::kC * g, n = std::min<int64_t>(cuda::kC, t.size(1) - c0);
  const auto s = t.narrow(1, c0, n);
  return n == cuda::kC && s.is_contiguous() ? s : cuda::zero_padded_copy(s, cuda::kC, s.size(3));
}

// Whether view, some channels of x, reaches the kernels as it is: x NCHW,
// its image stride within the kernels' 32-bit limit, and the view as
// aligned as a copy would be (so the selectors choose the same kernel for
// both).
bool slice_viewable(const at::Tensor& x, const at::Tensor& view) {
  return x.is_contiguous() && x.stride(0) <= INT32_MAX &&
      cuda::alignment(view.const_data_ptr()) >= kFresh.align;
}

// Slice g as the 3-channel kernels take it: 3 whole channels of an NCHW
// input as a view where slice_viewable; else a copy (slice3).
at::Tensor input_slice(const at::Tensor& x, int64_t g) {
  if (cuda::kC * (g + 1) <= x.size(1)) {
    auto view = x.narrow(1, cuda::kC * g, cuda::kC);
    if (slice_viewable(x, view)) return view;
  }
  return slice3(x, g);
}

// x with `channels` channels (x's, then zeros) and one zero column more: a
// widened weight-gradient operand (weight_grad/select.h).
at::Tensor widened_copy(const at::Tensor& x, int64_t channels) {
  return cuda::zero_padded_copy(x, channels, x.size(3) + 1);
}

// A weight gradient's slice g: as input_slice, but a last slice of 1 or 2
// channels not zero-padded to 3 where the kernel takes it so: the
// phase-plane kernel (built for 1 and 2 channels too) as a view where
// input_slice would take one, else a copy; the wgmma kernel by 16-byte
// copies (gmma: it stages the rows of the channels past it as zeros) as
// such a view, else a zero-padded copy. A widened choice: a widened_copy.
at::Tensor weight_grad_slice(const at::Tensor& x, int64_t g, bool planes, bool gmma, bool widened) {
  const int64_t c0 = cuda::kC * g, n = std::min<int64_t>(cuda::kC, x.size(1) - c0);
  if (widened) return widened_copy(x.narrow(1, c0, n), planes ? n : cuda::kC);
  if (!(planes || gmma) || n == cuda::kC) return input_slice(x, g);
  const auto view = x.narrow(1, c0, n);
  if (slice_viewable(x, view)) return view;
  return planes ? view.contiguous() : slice3(x, g);
}

// One forward launch of choice, on the input it reads: x, or a fresh NCHW
// copy of it (forward::kernel_input_problem).
void forward_launch(
    const cuda::forward::Choice& choice, const cuda::forward::Problem& p,
    const cuda::forward::Args& a) {
  if (!choice.nchw_copy && !choice.widened) return cuda::forward::launch(choice, p, a);
  auto pk = cuda::forward::kernel_input_problem(choice, p);
  const auto x = cuda::zero_padded_copy(a.input, a.input.size(1), pk.W);
  pk.input_align = operand(x).align;
  cuda::forward::launch(choice, pk, {x, a.weight, a.bias, a.output, a.accumulate});
}

// What the slices of several are cut from: the input, or one NCHW copy of
// a channels_last input (relayout.h), since each slice's own strided copy
// would read the whole input again.
at::Tensor slices_source(const at::Tensor& x, int slices) {
  return slices > 1 ? cuda::relayout(x, at::MemoryFormat::Contiguous) : x;
}

// Whether a sliced forward sums partial outputs (16-bit, more than one
// slice) rather than writing or adding into the output in place.
bool sums_partials(int slices, at::ScalarType dtype) {
  return slices > 1 && dtype != at::kFloat;
}

// A sliced forward: each slice's convolution, the bias in the first. In
// float32 the later slices add theirs to output in memory (the kernels'
// accumulate); 16-bit slices write partial outputs, summed in float (ATen's
// sum) into output, each partial rounded once: reductions to 16-bit memory
// were slow. One slice (1 or 2 channels) writes output directly.
void forward_slices(
    const at::Tensor& input, const at::Tensor& w, const at::Tensor* bias,
    int64_t padding, int slices, const at::Tensor& output) {
  const auto x = slices_source(input, slices);
  const bool in_place = !sums_partials(slices, output.scalar_type());
  const int64_t numel = output.numel();
  const int64_t stride = (numel + 7) / 8 * 8;  // partials 16-byte aligned
  const auto partials = in_place
      ? at::Tensor()
      : at::empty({slices * stride}, output.options());
  for (int g = 0; g < slices; ++g) {
    const auto xg = input_slice(x, g), wg = slice3(w, g);
    const auto yg = in_place
        ? output
        : partials.narrow(0, g * stride, numel).view(output.sizes());
    const auto p = forward_problem(
        cuda::device(xg.get_device()), xg, wg, padding, operand(xg),
        cuda::alignment(yg.const_data_ptr()));
    forward_launch(
        cuda::forward::select(p), p,
        {xg, wg, g == 0 ? bias : nullptr, yg, in_place && g > 0});
  }
  if (!in_place) {
    auto flat = output.view({numel});
    const int64_t over_slices[] = {0};
    at::sum_out(
        flat, partials.as_strided({slices, numel}, {stride, 1}), over_slices);
  }
}

// The layout the chosen forward kernels write: the result's where they
// store at any strides, except into the NCHW sum of a sliced 16-bit
// forward's partial outputs; else NCHW, which the caller copies.
at::MemoryFormat kernel_output_format(
    const cuda::forward::Choice& c, at::MemoryFormat format) {
  const bool in_place =
      cuda::forward::any_output_layout(c) && !sums_partials(c.slices, c.dtype);
  return in_place ? format : at::MemoryFormat::Contiguous;
}

// The weight-gradient problem of an input as the kernels would receive it
// (nchw_input.h), before any copy is made: a copy is NCHW and fresh.
cuda::weight_grad::Problem weight_grad_problem_of(
    const cuda::Device& dev, const at::Tensor& input, int64_t K,
    int64_t padding, cuda::weight_grad::InputPrep prep, Operand dy) {
  const bool as_is = prep == cuda::weight_grad::InputPrep::kAsIs;
  auto p = weight_grad_problem(
      dev, input, K, padding, as_is ? operand(input) : kFresh,
      as_is ? input.stride(0) : input.size(1) * input.size(2) * input.size(3),
      dy, prep == cuda::weight_grad::InputPrep::kTranspose);
  p.whole = true;
  return p;
}

// The forward on alexop's kernels, as choice says (a tensor-core one): x
// and w as the kernels take them (dense_input, contiguous), b the bias or
// nullptr; the output in format.
at::Tensor forward_alexop(
    const cuda::forward::Choice& choice, const cuda::forward::Problem& p,
    const at::Tensor& x, const at::Tensor& w, const at::Tensor* b,
    at::IntArrayRef out_size, at::MemoryFormat format) {
  auto output = at::empty(
      out_size, x.options().memory_format(kernel_output_format(choice, format)));
  if (choice.slices > 0) {
    forward_slices(x, w, b, p.pad, choice.slices, output);
  } else {
    forward_launch(choice, p, {x, w, b, output});
  }
  return cuda::relayout(output, format);
}

at::Tensor conv11s4_cuda(
    const at::Tensor& input,
    const at::Tensor& weight,
    const std::optional<at::Tensor>& bias_opt,
    int64_t padding) {
  namespace fw = cuda::forward;
  const auto size = check_conv11s4(input, weight, bias_opt, padding);
  check_dtype("alexop.conv11s4", input, kCudaTypes, "CUDA");
  const c10::cuda::CUDAGuard guard(input.device());
  const auto x = dense_input(input);
  const auto p = forward_problem(
      cuda::device(x.get_device()), x, weight, padding, operand(x), kFresh.align);
  const auto choice = fw::select(p);
  const auto format = output_memory_format(input, weight);
  const int64_t out_size[] = {size[0].expect_int(), size[1].expect_int(),
                              size[2].expect_int(), size[3].expect_int()};
  const bool has_bias = bias_opt.has_value() && bias_opt->defined();
  const auto b = has_bias ? bias_opt->contiguous() : at::Tensor();
  const auto cudnn = [&](bool tf32) {
    return cuda::conv11s4_cudnn(input, weight, bias_opt, padding, tf32, format);
  };
  // the kernels read contiguous weights: a channels_last weight is copied
  // on their way only, not on cuDNN's
  const auto mine = [&] {
    return forward_alexop(choice, p, x, weight.contiguous(),
                          has_bias ? &b : nullptr, out_size, format);
  };
  if (fw::timed(choice)) {
    // Where the kernel is the guess, cuDNN as accurate as the kernel it may
    // replace: TF32 only under "medium" (under "high" alexop's forward is
    // fp32-accurate); where cuDNN is (an unmeasured architecture), cuDNN as
    // its fallbacks run.
    const bool guess_cudnn = cuda::cudnn_is_guess(p.dev, false);
    const bool tf32 = guess_cudnn ? cudnn_tf32() : fp32_math() == cuda::Fp32Math::kTf32;
    const auto key = cuda::timed_key(
        Decision::kForwardKernel, input, input.sizes(), weight.size(0), padding,
        (int64_t)fp32_math(), has_bias, format);
    const auto what = [&] { return fw::name(choice); };
    if (cuda::mine_or_cudnn(key, guess_cudnn, what, mine, [&] { return cudnn(tf32); }) == 1) {
      return cudnn(tf32);
    }
  }
  if (choice.kernel == fw::Kernel::kCudnn) return cudnn(cudnn_tf32());
  if (choice.kernel == fw::Kernel::kNone) {
    return at::empty(out_size, input.options().memory_format(format));
  }
  return mine();
}

// The input gradient on alexop's kernels, as choice says (not kCudnn).
at::Tensor input_grad_alexop(
    const cuda::input_grad::Choice& choice, const cuda::input_grad::Problem& p,
    const at::Tensor& grad_output, const at::Tensor& weight,
    at::IntArrayRef input_size, at::MemoryFormat format) {
  if (choice.kernel == cuda::input_grad::Kernel::kNone) {
    return at::empty(input_size, grad_output.options().memory_format(format));
  }
  // the kernels read and write NCHW
  const auto gy = cuda::relayout(grad_output, at::MemoryFormat::Contiguous);
  const auto w = weight.contiguous();
  if (choice.slices == 0) {
    auto grad_input = at::empty(input_size, grad_output.options());
    cuda::input_grad::launch(choice, p, {gy, w, grad_input});
    return cuda::relayout(grad_input, format);
  }
  // each slice's gradient computed for 3 channels (zero weights added past
  // the last) straight into grad_input's channels, or for a last slice of
  // fewer channels into a buffer, then copied
  const int64_t C = input_size[1];
  const int64_t size3[] = {input_size[0], cuda::kC, input_size[2], input_size[3]};
  const cuda::input_grad::Problem p3{problem_base(p.dev, grad_output, size3, w.size(0), p.pad)};
  const auto choice3 = cuda::input_grad::select(p3);
  auto grad_input = at::empty(input_size, grad_output.options());
  for (int g = 0; g < choice.slices; ++g) {
    const int64_t c0 = cuda::kC * g, n = std::min<int64_t>(cuda::kC, C - c0);
    const auto wg = slice3(w, g);
    if (n == cuda::kC) {
      cuda::input_grad::launch(choice3, p3, {gy, wg, grad_input.narrow(1, c0, n)});
    } else {
      const auto part = at::empty(size3, grad_output.options());
      cuda::input_grad::launch(choice3, p3, {gy, wg, part});
      grad_input.narrow(1, c0, n).copy_(part.narrow(1, 0, n));
    }
  }
  return cuda::relayout(grad_input, format);
}

at::Tensor conv11s4_backward_input_cuda(
    const at::Tensor& grad_output,
    const at::Tensor& weight,
    c10::SymIntArrayRef input_size_sym,
    int64_t padding) {
  namespace ig = cuda::input_grad;
  check_conv11s4_backward_input(grad_output, weight, input_size_sym, padding);
  check_dtype(
      "alexop.conv11s4_backward_input", grad_output, kCudaTypes, "CUDA");
  const c10::cuda::CUDAGuard guard(grad_output.device());
  const auto input_size = C10_AS_INTARRAYREF_SLOW(input_size_sym);
  const auto dev = cuda::device(grad_output.get_device());
  const ig::Problem p{
      problem_base(dev, grad_output, input_size, weight.size(0), padding)};
  auto choice = ig::select(p);
  const auto format = output_memory_format(grad_output, weight);
  const auto cudnn = [&] {
    return cuda::conv11s4_backward_input_cudnn(
        grad_output, weight, input_size, padding, cudnn_tf32(), format);
  };
  if (ig::timed(p, choice)) {
    const auto mine = ig::own(p, choice);
    const auto key = cuda::timed_key(
        Decision::kInputGradKernel, grad_output, input_size, weight.size(0),
        padding, cudnn_tf32(), false, format);
    const int guess = cuda::cudnn_is_guess(p.dev, choice.kernel == ig::Kernel::kCudnn);
    const bool on_mine = cuda::mine_or_cudnn(
        key, guess, [&] { return ig::name(mine); },
        [&] { return input_grad_alexop(mine, p, grad_output, weight, input_size, format); }, cudnn) == 0;
    choice = on_mine ? mine : ig::Choice{ig::Kernel::kCudnn};
  }
  if (choice.kernel == ig::Kernel::kCudnn) return cudnn();
  return input_grad_alexop(choice, p, grad_output, weight, input_size, format);
}

// Whether the weight gradient of choice reads grad_output's filter slices
// in place: the phase-plane kernel (it takes dy's image stride and any
// count up to its width), and the wgmma kernel (it takes the image stride
// and zero-fills its rows past the slice) from a gy on a 16-byte boundary,
// NCHW or read channels_last, where every slice starts on one (96 channel
// planes, or 96 of a pixel's channels, of 2- or 4-byte values are a
// multiple of 16 bytes).
bool reads_dy_slices(const cuda::weight_grad::Choice& choice, const at::Tensor& gy) {
  namespace wg = cuda::weight_grad;
  return choice.kernel == wg::Kernel::kPlanes ||
         (choice.kernel == wg::Kernel::kGmma && (choice.dy_nhwc || gy.is_contiguous()) &&
          cuda::alignment(gy.const_data_ptr()) >= 16);
}

// grad_output's channels as the kernels take them: all K, or (where the
// choice slices the filters) slices of up to kFilterSlice channels: views
// where the kernel reads them in place (reads_dy_slices), else fresh
// copies, the last zero-padded to a width the kernels are built for. Made
// once and shared by every input slice.
std::vector<at::Tensor> filter_slices(const at::Tensor& gy, bool sliced, bool views) {
  namespace wg = cuda::weight_grad;
  const int64_t K = gy.size(1);
  if (!sliced) return {gy};
  std::vector<at::Tensor> dys;
  for (int64_t k0 = 0; k0 < K; k0 += wg::kFilterSlice) {
    const int64_t kk = std::min(wg::kFilterSlice, K - k0);
    const auto s = gy.narrow(1, k0, kk);
    dys.push_back(views ? s : cuda::zero_padded_copy(s, wg::filter_width(kk), s.size(3)));
  }
  return dys;
}

// The weight gradient of all K filters for one input operand x (the input as
// the kernels take it, or one slice of it), from grad_output's filter slices
// dys; each slice's rows past K are cut. padded: the slices are views of
// the wgmma kernel (reads_dy_slices), each run as the width of filters it
// is built for, like a zero-padded copy; zero_channels: x, of fewer than 3
// channels, is the wgmma kernel's (weight_grad_slice), run as 3 like a
// zero-padded copy.
at::Tensor weight_grad_filters(
    const std::vector<at::Tensor>& dys, const at::Tensor& x, int64_t K, int64_t padding,
    bool transposed, bool padded, bool zero_channels, at::Tensor* grad_bias) {
  namespace wg = cuda::weight_grad;
  const bool sliced = dys.size() > 1 || dys[0].size(1) != K;
  std::vector<at::Tensor> parts;
  int64_t k0 = 0;
  for (const auto& dy : dys) {
    const int64_t width = padded ? wg::filter_width(dy.size(1)) : dy.size(1), kk = std::min(width, K - k0);
    // dy: grad_output or a view of its channels (filter_slices), NCHW or
    // (where the choice said so) channels_last
    const int align = cuda::alignment(dy.const_data_ptr());
    auto p = weight_grad_problem(
        cuda::device(x.get_device()), x, width, padding, operand(x), x.stride(0),
        grad_output_operand(dy.sizes(), dy.strides(), align, true), transposed);
    if (zero_channels) p.C = cuda::kC;
    auto gw = at::empty({width, p.C, kKernelSize, kKernelSize}, x.options());
    auto gb = grad_bias == nullptr || !sliced ? at::Tensor()
                                              : at::empty({width}, x.options());
    const auto choice = wg::select(p);
    // x is the whole input or one slice as the kernels take it: never sliced
    // again; a view of dy's channels only for the kernels that read one
    TORCH_INTERNAL_ASSERT(
        choice.slices == 0 && (dy.is_contiguous() || choice.kernel == wg::Kernel::kPlanes ||
                               (padded && choice.kernel == wg::Kernel::kGmma)) &&
            (x.size(1) == p.C || choice.kernel == wg::Kernel::kGmma),
        "weight gradient: a slice chose ", wg::name(choice));
    wg::launch(
        choice, p,
        {dy, x, gw, grad_bias == nullptr ? nullptr : sliced ? &gb : grad_bias});
    if (grad_bias != nullptr && sliced) {
      grad_bias->narrow(0, k0, kk).copy_(gb.narrow(0, 0, kk));
    }
    parts.push_back(gw.narrow(0, 0, kk));
    k0 += kk;
  }
  return parts.size() == 1 ? parts[0] : at::cat(parts, 0);
}

// A packed choice's weight gradient: the kernel runs once on packed copies
// of the input and grad_output, whose zeros between the bands add nothing.
std::tuple<at::Tensor, at::Tensor> weight_grad_packed(
    int64_t packed, const at::Tensor& grad_output, const at::Tensor& input, int64_t K, int64_t padding,
    bool bias_grad) {
  namespace wg = cuda::weight_grad;
  const int64_t W = input.size(3), band = wg::pack_band(W, padding);
  const auto x = cuda::packed_copy(input, packed, band, wg::packed_width(W, padding, packed));
  const auto dy = cuda::packed_copy(grad_output, packed, band / kStride, wg::packed_outputs(W, padding, packed));
  auto grad_bias = at::empty({bias_grad ? K : 0}, input.options());
  auto grad_weight = weight_grad_filters({dy}, x, K, padding, false, false, false, bias_grad ? &grad_bias : nullptr);
  return {grad_weight.contiguous(), grad_bias};
}

// The weight gradient on alexop's kernels, as choice says (not kCudnn).
std::tuple<at::Tensor, at::Tensor> weight_grad_alexop(
    const cuda::weight_grad::Choice& choice, const at::Tensor& grad_output,
    const at::Tensor& input, int64_t K, int64_t padding, bool bias_grad,
    cuda::weight_grad::InputPrep prep) {
  if (choice.packed > 1) return weight_grad_packed(choice.packed, grad_output, input, K, padding, bias_grad);
  // NCHW as the kernels read it, but where the phase planes read it in place
  const auto gy = choice.dy_nhwc ? grad_output : cuda::relayout(grad_output, at::MemoryFormat::Contiguous);
  auto grad_bias = at::empty({bias_grad ? K : 0}, input.options());
  // each slice's weight gradient for 3 channels (the last's for its own 1
  // or 2 on the phase-plane kernel; the bias's with the first), then joined
  // and cut to C
  const bool planes = choice.kernel == cuda::weight_grad::Kernel::kPlanes;
  // the wgmma kernel by 16-byte copies: it reads a last slice of 1 or 2
  // channels in place
  const bool gmma = choice.kernel == cuda::weight_grad::Kernel::kGmma && choice.vec;
  const bool views = reads_dy_slices(choice, gy);
  const auto dys = filter_slices(gy, choice.filter_slices > 0, views);
  const auto source = slices_source(input, choice.slices);
  std::vector<at::Tensor> grad_weights;
  for (int g = 0; g < std::max(choice.slices, 1); ++g) {
    const auto x = choice.slices > 0
        ? weight_grad_slice(source, g, planes, gmma, choice.widened)
        : choice.widened ? widened_copy(input, input.size(1))
                         : cuda::weight_grad::prepare_input(input, prep);
    grad_weights.push_back(weight_grad_filters(
        dys, x, K, padding, choice.transposed, views && !planes, gmma && x.size(1) < cuda::kC,
        bias_grad && g == 0 ? &grad_bias : nullptr));
  }
  if (choice.slices == 0) return {grad_weights[0].contiguous(), grad_bias};
  const auto joined = grad_weights.size() == 1 ? grad_weights[0]
                                               : at::cat(grad_weights, 1);
  return {joined.narrow(1, 0, input.size(1)).contiguous(), grad_bias};
}

std::tuple<at::Tensor, at::Tensor> conv11s4_backward_weight_cuda(
    const at::Tensor& grad_output,
    const at::Tensor& input,
    int64_t padding,
    bool bias_grad) {
  namespace wg = cuda::weight_grad;
  const auto wsize =
      check_conv11s4_backward_weight(grad_output, input, padding);
  check_dtype(
      "alexop.conv11s4_backward_weight", input, kCudaTypes, "CUDA");
  const c10::cuda::CUDAGuard guard(input.device());
  const int64_t K = wsize[0].expect_int();
  const auto prep = wg::input_prep(input);
  const auto problem = weight_grad_problem_of(
      cuda::device(input.get_device()), input, K, padding, prep,
      grad_output_operand(grad_output));
  auto choice = wg::select(problem);
  const auto cudnn = [&] {
    return cuda::conv11s4_backward_weight_cudnn(
        grad_output, input, K, padding, bias_grad, cudnn_tf32());
  };
  if (wg::timed(problem)) {
    // own differs from select only where select gives cuDNN
    const auto mine = choice.kernel == wg::Kernel::kCudnn ? wg::own(problem) : choice;
    if (mine.kernel != wg::Kernel::kCudnn) {
      const auto key = cuda::timed_key(
          Decision::kWeightGradKernel, input, input.sizes(), K, padding,
          cudnn_tf32(), bias_grad, grad_output.suggest_memory_format());
      const int guess = cuda::cudnn_is_guess(problem.dev, choice.kernel == wg::Kernel::kCudnn);
      const bool on_mine = cuda::mine_or_cudnn(
          key, guess, [&] { return wg::name(mine); },
          [&] { return std::get<0>(weight_grad_alexop(mine, grad_output, input, K, padding, bias_grad, prep)); },
          [&] { return std::get<0>(cudnn()); }) == 0;
      choice = on_mine ? mine : wg::Choice{wg::Kernel::kCudnn};
    }
  }
  if (choice.kernel == wg::Kernel::kCudnn) return cudnn();
  return weight_grad_alexop(choice, grad_output, input, K, padding, bias_grad, prep);
}

// The kernels the three ops would run on device dev for (input, weight,
// padding), by name, from the same selectors, launching nothing. x: how the
// forward receives the input. grad_output is taken as the autograd path
// makes it: the output's shape, layout and dtype, freshly allocated.
std::vector<std::string> kernel_names(
    const cuda::Device& dev, const at::Tensor& input, const at::Tensor& weight,
    int64_t padding, Operand x) {
  const auto fwd = forward_problem(dev, input, weight, padding, x, kFresh.align);
  const int64_t K = fwd.K, P = fwd.P, Q = fwd.Q, dy_size[] = {fwd.N, K, P, Q};
  const bool dy_nchw = output_memory_format(input, weight) != at::MemoryFormat::ChannelsLast;
  const int64_t nchw[] = {K * P * Q, P * Q, Q, 1}, nhwc[] = {K * P * Q, 1, Q * K, K};
  const auto dy = grad_output_operand(dy_size, dy_nchw ? nchw : nhwc, kFresh.align, dy_nchw);
  const auto wgrad = weight_grad_problem_of(
      dev, input, weight.size(0), padding, cuda::weight_grad::input_prep(input), dy);
  const cuda::input_grad::Problem dgrad{
      problem_base(dev, input, input.sizes(), weight.size(0), padding)};
  return {
      cuda::forward::timed_name(fwd),
      cuda::weight_grad::timed_name(wgrad),
      cuda::input_grad::timed_name(dgrad)};
}

std::vector<std::string> kernel_for_cuda(
    const at::Tensor& input, const at::Tensor& weight, int64_t padding) {
  check_conv11s4(input, weight, std::nullopt, padding);
  check_dtype("alexop._kernel_for", input, kCudaTypes, "CUDA");
  const c10::cuda::CUDAGuard guard(input.device());
  return kernel_names(
      cuda::device(input.get_device()), input, weight, padding,
      dense(input) ? operand(input) : kFresh);
}

// The names on a GPU of the kind named (common/device.h), from the tensors'
// sizes, dtypes and layouts alone, whatever their device (meta tensors will
// do), as if the CUDA allocator had made them.
std::vector<std::string> kernel_for_gpu(
    const at::Tensor& input, const at::Tensor& weight, int64_t padding,
    c10::string_view gpu) {
  check_conv11s4(input, weight, std::nullopt, padding);
  check_dtype("alexop._kernel_for_gpu", input, kCudaTypes, "CUDA");
  const auto dev = cuda::named_device(std::string(gpu));
  return kernel_names(
      dev, input, weight, padding,
      dense(input) ? Operand{operand(input).nhwc, kFresh.align} : kFresh);
}

at::Tensor space_to_depth_cuda(const at::Tensor& input, int64_t padding, int64_t rows, int64_t cols,
                               bool channels_last) {
  TORCH_CHECK(input.dim() == 4, "alexop._space_to_depth: expected a 4-D input");
  check_dtype("alexop._space_to_depth", input, {at::kFloat, at::kHalf, at::kBFloat16}, "CUDA");
  TORCH_CHECK(cuda::space_to_depth_fits(input.sizes(), input.scalar_type()),
              "alexop._space_to_depth: expected at most 16 channels and an image of fewer than 2^31 elements");
  TORCH_CHECK(padding >= 0 && rows >= 0 && cols >= 0,
              "alexop._space_to_depth: expected padding, rows and cols of at least 0");
  const c10::cuda::CUDAGuard guard(input.device());
  return cuda::space_to_depth(input, padding, rows, cols,
                              channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous);
}

at::Tensor depth_to_space_cuda(const at::Tensor& view, int64_t padding, int64_t height, int64_t width,
                               bool channels_last) {
  TORCH_CHECK(view.dim() == 4 && view.size(1) % 16 == 0,
              "alexop._depth_to_space: expected a 4-D view of a multiple of 16 channels");
  check_dtype("alexop._depth_to_space", view, {at::kFloat, at::kHalf, at::kBFloat16}, "CUDA");
  TORCH_CHECK(padding >= 0 && height >= 0 && width >= 0,
              "alexop._depth_to_space: expected padding, height and width of at least 0");
  TORCH_CHECK(cuda::space_to_depth_fits({view.size(0), view.size(1) / 16, height, width}, view.scalar_type()),
              "alexop._depth_to_space: expected at most 16 x 16 channels and an image of fewer than 2^31 elements");
  const c10::cuda::CUDAGuard guard(view.device());
  return cuda::depth_to_space(view, padding, height, width,
                              channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous);
}

}  // namespace

TORCH_LIBRARY_IMPL(alexop, CUDA, m) {
  m.impl("conv11s4", &conv11s4_cuda);
  m.impl("conv11s4_backward_input", &conv11s4_backward_input_cuda);
  m.impl("conv11s4_backward_weight", &conv11s4_backward_weight_cuda);
  m.impl("_kernel_for", &kernel_for_cuda);
  m.impl("_space_to_depth", &space_to_depth_cuda);
  m.impl("_depth_to_space", &depth_to_space_cuda);
}

// Any device: it reads sizes, dtypes and layouts only.
TORCH_LIBRARY_IMPL(alexop, CompositeExplicitAutograd, m) {
  m.impl("_kernel_for_gpu", &kernel_for_gpu);
}

}  // namespace alexop
