// The one place that lists every alexop schema, the C++ entry points that
// call them through the dispatcher, and the argument checks all backends use.

#include "conv11s4.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/irange.h>
#include <c10/util/safe_numerics.h>
#include <torch/library.h>

#include <sstream>

namespace alexop {

TORCH_LIBRARY(alexop, m) {
  // AlexNet's first convolution: 11x11 kernel, stride 4, zero padding.
  m.def(
      "conv11s4(Tensor input, Tensor weight, Tensor? bias=None, int padding=2)"
      " -> Tensor");
  // The backward is made of ops of its own, so compiled and exported training
  // graphs show alexop kernels rather than a decomposition.
  m.def(
      "conv11s4_backward_input(Tensor grad_output, Tensor weight,"
      " SymInt[] input_size, int padding) -> Tensor");
  m.def(
      "conv11s4_backward_weight(Tensor grad_output, Tensor input, int padding,"
      " bool bias_grad) -> (Tensor, Tensor)");
  // The names of the kernels the three ops above would run for these
  // arguments (forward, weight gradient, input gradient); launches nothing.
  m.def("_kernel_for(Tensor input, Tensor weight, int padding=2) -> str[]");
  // What _kernel_for would answer on a CUDA GPU of a named kind ("h100",
  // "h200", "a100": those alexop's kernels are measured on; "l4",
  // "rtx4090", "b200", "rtx5090"), from the tensors' sizes, dtypes and
  // layouts alone: the selection tests without a GPU. CUDA builds only.
  m.def("_kernel_for_gpu(Tensor input, Tensor weight, int padding, str gpu) -> str[]");
  // What _kernel_for would answer on a CPU of a named kind ("default",
  // "avx2", "avx512", "avx512_bf16", "amx_bf16", "amx_fp16": the instruction
  // sets the CPU choices differ by), from the tensors' sizes, dtypes and
  // layouts alone: the CPU selection tests on any CPU.
  m.def("_kernel_for_cpu(Tensor input, Tensor weight, int padding, str cpu) -> str[]");
  // The space-to-depth view of input that the cuDNN fallback may time
  // (cuda/cudnn/space_to_depth.h): rows x cols 4 x 4 pixel blocks from the
  // padding's top-left corner as 16C channels, in NCHW or channels_last. Its
  // tests' entry; CUDA builds only.
  m.def("_space_to_depth(Tensor input, int padding, int rows, int cols, bool channels_last) -> Tensor");
  // Its inverse for the input gradient: the view's values back at their
  // pixels of a height x width input, zeros where no block reaches.
  m.def("_depth_to_space(Tensor view, int padding, int height, int width, bool channels_last) -> Tensor");
}

at::Tensor conv11s4(
    const at::Tensor& input,
    const at::Tensor& weight,
    const std::optional<at::Tensor>& bias,
    int64_t padding) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("alexop::conv11s4", "")
                       .typed<decltype(conv11s4)>();
  return op.call(input, weight, bias, padding);
}

at::Tensor conv11s4_backward_input(
    const at::Tensor& grad_output,
    const at::Tensor& weight,
    c10::SymIntArrayRef input_size,
    int64_t padding) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("alexop::conv11s4_backward_input", "")
                       .typed<decltype(conv11s4_backward_input)>();
  return op.call(grad_output, weight, input_size, padding);
}

std::tuple<at::Tensor, at::Tensor> conv11s4_backward_weight(
    const at::Tensor& grad_output,
    const at::Tensor& input,
    int64_t padding,
    bool bias_grad) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("alexop::conv11s4_backward_weight", "")
          .typed<decltype(conv11s4_backward_weight)>();
  return op.call(grad_output, input, padding, bias_grad);
}

namespace {

// Integers reach messages as strings made here, never streamed by c10::str:
// extensions built against torch 2.11 with GCC 13 crash (SIGSEGV in the
// num_put facet) when an integer is streamed into a TORCH_CHECK message. Seen
// on the GPU machine with a minimal load_inline extension too.
std::string str(int64_t v) {
  return std::to_string(v);
}

std::string str(const c10::SymInt& v) {
  if (const auto i = v.maybe_as_int()) {
    return std::to_string(*i);
  }
  return v.toSymNode()->str();
}

std::string str(c10::SymIntArrayRef v) {
  std::string out = "[";
  for (const auto i : c10::irange(v.size())) {
    out += (i ? ", " : "") + str(v[i]);
  }
  return out + "]";
}

// F.conv2d's own bound: 2 * padding must fit in int64.
constexpr int64_t kMaxPadding = (int64_t{1} << 62) - 1;

// Sizes and the argument they were read from, which messages name: the three
// ops find the same quantities in different arguments (the forward's input
// sizes in `the input` or `input_size`, C_out in `weight` or `grad_output`).
struct Sizes {
  const char* name;
  c10::SymIntArrayRef sizes;
};

// An undefined tensor (None passed through torch.ops) is refused here, before
// anything asks it for a device or a size.
void check_4d(const char* op, const char* name, const char* layout,
              const at::Tensor& t) {
  TORCH_CHECK(
      t.defined(), op, ": expected ", name, " to be a 4-d tensor ", layout,
      ", but got None (an undefined tensor)");
  TORCH_CHECK(
      t.dim() == 4, op, ": expected ", name, " to be a 4-d tensor ", layout,
      ", but got a ", str(t.dim()), "-d tensor of shape ",
      str(t.sym_sizes()));
}

void check_same(const char* op, const char* name, const at::Tensor& t,
                const char* ref_name, const at::Tensor& ref) {
  TORCH_CHECK(
      t.scalar_type() == ref.scalar_type(), op, ": expected ", name,
      " to have the dtype of ", ref_name, " (", ref.scalar_type(),
      "), but got ", t.scalar_type());
  TORCH_CHECK(
      t.device() == ref.device(), op, ": expected ", name,
      " to be on the device of ", ref_name, " (", ref.device(),
      "), but got ", t.device());
}

void check_floating(const char* op, const at::Tensor& t) {
  TORCH_CHECK(
      at::isFloatingType(t.scalar_type()), op,
      ": expected a floating-point tensor (float16, bfloat16, float32 or ",
      "float64), but got ", t.scalar_type());
}

void check_weight(const char* op, const at::Tensor& weight) {
  check_4d(op, "weight", "(C_out, C_in, 11, 11)", weight);
  TORCH_CHECK(
      weight.sym_size(2) == kKernelSize && weight.sym_size(3) == kKernelSize,
      op, ": expected an 11x11 weight of shape (C_out, C_in, 11, 11), but got ",
      "shape ", str(weight.sym_sizes()));
}

void check_weight_channels(const char* op, const at::Tensor& weight,
                           const Sizes& in) {
  TORCH_CHECK(
      weight.sym_size(1) == in.sizes[1], op, ": weight of shape ",
      str(weight.sym_sizes()), " expects ", str(weight.sym_size(1)),
      " input channels, but ", in.name, " has ", str(in.sizes[1]));
}

// H + 2 * padding, which must fit in int64 and cover the kernel. Symbolic
// sizes are not bounded by int64 while tracing; the real kernels check the
// concrete ones.
c10::SymInt padded_extent(const char* op, const char* what,
                          const c10::SymInt& in, int64_t padding) {
  const auto message = [&] {
    return std::string("the padded input ") + what + " (" + str(in) +
        " + 2 * padding " + str(padding) + ")";
  };
  if (const auto i = in.maybe_as_int()) {
    int64_t sum = 0;
    TORCH_CHECK(
        !c10::add_overflows(*i, 2 * padding, &sum), op, ": ", message(),
        " overflows int64");
  }
  const auto padded = in + 2 * padding;
  TORCH_CHECK(
      padded >= kKernelSize, op, ": ", message(),
      " must be at least the kernel size 11");
  return padded;
}

// What all three ops require of the convolution they belong to: at least one
// input and one output channel, padding within bounds, padded extents
// covering the kernel. `in` holds the forward's input sizes (N, C_in, H, W),
// `out` holds C_out at dimension out_dim. Returns the forward's output sizes
// (N, C_out, P, Q).
std::array<c10::SymInt, 4> check_geometry(
    const char* op,
    const Sizes& in,
    const Sizes& out,
    int64_t out_dim,
    int64_t padding) {
  TORCH_CHECK(
      in.sizes[1] >= 1, op, ": expected at least one input channel, but ",
      in.name, " has shape ", str(in.sizes));
  TORCH_CHECK(
      out.sizes[out_dim] >= 1, op,
      ": expected at least one output channel, but ", out.name,
      " has shape ", str(out.sizes));
  TORCH_CHECK(
      padding >= 0, op, ": expected padding >= 0, but got ", str(padding));
  TORCH_CHECK(
      padding <= kMaxPadding, op, ": expected padding <= ", str(kMaxPadding),
      " (2**62 - 1, as F.conv2d), but got ", str(padding));
  const auto height = padded_extent(op, "height", in.sizes[2], padding);
  const auto width = padded_extent(op, "width", in.sizes[3], padding);
  // floor((padded - 11) / 4) + 1: the dividend is non-negative.
  return {
      in.sizes[0], out.sizes[out_dim], (height - kKernelSize) / kStride + 1,
      (width - kKernelSize) / kStride + 1};
}

// grad_output must have the forward's output sizes.
void check_grad_output(const char* op, const at::Tensor& grad_output,
                       c10::SymIntArrayRef expected, const char* size_or_shape,
                       c10::SymIntArrayRef input_size) {
  for (const auto d : c10::irange(4)) {
    TORCH_CHECK(
        grad_output.sym_size(d) == expected[d], op, ": expected grad_output ",
        "of shape ", str(expected), " for an input of ", size_or_shape, " ",
        str(input_size), ", but got ", str(grad_output.sym_sizes()));
  }
}

// Refuses a result that at::empty could not allocate with a message saying
// which argument made it so large, before anything is allocated: its sizes
// (zeros counted as ones, as in its strides) times the element size must fit
// in int64. Symbolic sizes are left to the real kernels.
void check_result_size(const char* op, const char* what,
                       c10::SymIntArrayRef sizes, at::ScalarType dtype,
                       const char* cause) {
  int64_t bytes = static_cast<int64_t>(c10::elementSize(dtype));
  for (const auto& s : sizes) {
    const auto i = s.maybe_as_int();
    if (!i) {
      return;
    }
    TORCH_CHECK(
        !c10::mul_overflows(bytes, std::max<int64_t>(*i, 1), &bytes), op,
        ": the ", what, " would have shape ", str(sizes),
        ", too large for 64-bit sizes (its sizes times ",
        str(static_cast<int64_t>(c10::elementSize(dtype))),
        " bytes exceed 2**63 - 1); ", cause);
  }
}

}  // namespace

std::array<c10::SymInt, 4> check_conv11s4(
    const at::Tensor& input,
    const at::Tensor& weight,
    const std::optional<at::Tensor>& bias,
    int64_t padding) {
  constexpr const char* op = "alexop.conv11s4";
  check_4d(op, "input", "(N, C, H, W)", input);
  check_floating(op, input);
  check_weight(op, weight);
  check_same(op, "weight", weight, "input", input);
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(
        bias->dim() == 1 && bias->sym_size(0) == weight.sym_size(0), op,
        ": expected bias of shape (C_out,) = (", str(weight.sym_size(0)),
        ",), but got shape ", str(bias->sym_sizes()));
    check_same(op, "bias", *bias, "input", input);
  }
  const Sizes in{"the input", input.sym_sizes()};
  const auto size =
      check_geometry(op, in, {"weight", weight.sym_sizes()}, 0, padding);
  check_weight_channels(op, weight, in);
  check_result_size(
      op, "output", size, input.scalar_type(),
      "reduce padding or the input's size");
  return size;
}

void check_conv11s4_backward_input(
    const at::Tensor& grad_output,
    const at::Tensor& weight,
    c10::SymIntArrayRef input_size,
    int64_t padding) {
  constexpr const char* op = "alexop.conv11s4_backward_input";
  check_4d(op, "grad_output", "(N, C_out, P, Q)", grad_output);
  check_floating(op, grad_output);
  check_weight(op, weight);
  check_same(op, "weight", weight, "grad_output", grad_output);
  TORCH_CHECK(
      input_size.size() == 4, op,
      ": expected input_size to be (N, C, H, W), but got ", str(input_size));
  for (const auto& s : input_size) {
    TORCH_CHECK(
        s >= 0, op, ": expected input_size to have no negative entries, ",
        "but got ", str(input_size));
  }
  const Sizes in{"input_size", input_size};
  const auto expected =
      check_geometry(op, in, {"weight", weight.sym_sizes()}, 0, padding);
  check_weight_channels(op, weight, in);
  check_grad_output(op, grad_output, expected, "size", input_size);
  check_result_size(
      op, "input gradient", input_size, grad_output.scalar_type(),
      "check input_size");
}

std::array<c10::SymInt, 4> check_conv11s4_backward_weight(
    const at::Tensor& grad_output,
    const at::Tensor& input,
    int64_t padding) {
  constexpr const char* op = "alexop.conv11s4_backward_weight";
  check_4d(op, "grad_output", "(N, C_out, P, Q)", grad_output);
  check_4d(op, "input", "(N, C, H, W)", input);
  check_floating(op, input);
  check_same(op, "grad_output", grad_output, "input", input);
  const auto expected = check_geometry(
      op, {"the input", input.sym_sizes()},
      {"grad_output", grad_output.sym_sizes()}, 1, padding);
  check_grad_output(op, grad_output, expected, "shape", input.sym_sizes());
  std::array<c10::SymInt, 4> size{
      grad_output.sym_size(1), input.sym_size(1), kKernelSize, kKernelSize};
  check_result_size(
      op, "weight gradient", size, input.scalar_type(),
      "check the channels of grad_output and input");
  return size;
}

at::MemoryFormat output_memory_format(const at::Tensor& x, const at::Tensor& weight) {
  const auto nhwc = at::MemoryFormat::ChannelsLast;
  return x.suggest_memory_format() == nhwc || weight.suggest_memory_format() == nhwc
      ? nhwc
      : at::MemoryFormat::Contiguous;
}

void check_dtype(
    const char* op,
    const at::Tensor& t,
    c10::ArrayRef<at::ScalarType> supported,
    const char* backend) {
  for (const auto s : supported) {
    if (t.scalar_type() == s) {
      return;
    }
  }
  std::ostringstream names;
  for (const auto i : c10::irange(supported.size())) {
    names << (i ? ", " : "") << supported[i];
  }
  TORCH_CHECK(
      false, op, ": dtype ", t.scalar_type(), " is not supported on ",
      backend, "; supported dtypes: ", names.str());
}

}  // namespace alexop
