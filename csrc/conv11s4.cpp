// The one place that lists every alexop schema, the C++ entry points that
// call them through the dispatcher, and the argument checks all backends use.

#include "conv11s4.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/irange.h>
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

// (H + 2p - 11) / 4 + 1; callers have checked H + 2p >= 11, so the division
// of a non-negative SymInt is a floor.
c10::SymInt output_extent(const c10::SymInt& in, int64_t padding) {
  return (in + 2 * padding - kKernelSize) / kStride + 1;
}

void check_4d(const char* op, const char* name, const char* layout,
              const at::Tensor& t) {
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

void check_padding(const char* op, int64_t padding) {
  TORCH_CHECK(
      padding >= 0, op, ": expected padding >= 0, but got ", str(padding));
}

void check_extent(const char* op, const char* what, const c10::SymInt& in,
                  int64_t padding) {
  TORCH_CHECK(
      in + 2 * padding >= kKernelSize, op, ": the padded input ", what, " (",
      str(in), " + 2 * padding ", str(padding),
      ") must be at least the kernel size 11");
}

void check_weight(const char* op, const at::Tensor& weight,
                  const c10::SymInt& in_channels) {
  check_4d(op, "weight", "(C_out, C_in, 11, 11)", weight);
  TORCH_CHECK(
      weight.sym_size(2) == kKernelSize && weight.sym_size(3) == kKernelSize,
      op, ": expected an 11x11 weight of shape (C_out, C_in, 11, 11), but got ",
      "shape ", str(weight.sym_sizes()));
  TORCH_CHECK(
      weight.sym_size(0) >= 1, op,
      ": expected at least one output channel, but weight has shape ",
      str(weight.sym_sizes()));
  TORCH_CHECK(
      weight.sym_size(1) == in_channels, op, ": weight of shape ",
      str(weight.sym_sizes()), " expects ", str(weight.sym_size(1)),
      " input channels, but the input has ", str(in_channels));
}

void check_floating(const char* op, const at::Tensor& t) {
  TORCH_CHECK(
      at::isFloatingType(t.scalar_type()), op,
      ": expected a floating-point tensor (float16, bfloat16, float32 or ",
      "float64), but got ", t.scalar_type());
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
  TORCH_CHECK(
      input.sym_size(1) >= 1, op,
      ": expected at least one input channel, but the input has shape ",
      str(input.sym_sizes()));
  check_weight(op, weight, input.sym_size(1));
  check_same(op, "weight", weight, "input", input);
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(
        bias->dim() == 1 && bias->sym_size(0) == weight.sym_size(0), op,
        ": expected bias of shape (C_out,) = (", str(weight.sym_size(0)),
        ",), but got shape ", str(bias->sym_sizes()));
    check_same(op, "bias", *bias, "input", input);
  }
  check_padding(op, padding);
  check_extent(op, "height", input.sym_size(2), padding);
  check_extent(op, "width", input.sym_size(3), padding);
  return {
      input.sym_size(0), weight.sym_size(0),
      output_extent(input.sym_size(2), padding),
      output_extent(input.sym_size(3), padding)};
}

void check_conv11s4_backward_input(
    const at::Tensor& grad_output,
    const at::Tensor& weight,
    c10::SymIntArrayRef input_size,
    int64_t padding) {
  constexpr const char* op = "alexop.conv11s4_backward_input";
  check_4d(op, "grad_output", "(N, C_out, P, Q)", grad_output);
  check_floating(op, grad_output);
  TORCH_CHECK(
      input_size.size() == 4, op,
      ": expected input_size to be (N, C, H, W), but got ", str(input_size));
  check_weight(op, weight, input_size[1]);
  check_same(op, "weight", weight, "grad_output", grad_output);
  check_padding(op, padding);
  check_extent(op, "height", input_size[2], padding);
  check_extent(op, "width", input_size[3], padding);
  const c10::SymInt expected[4] = {
      input_size[0], weight.sym_size(0),
      output_extent(input_size[2], padding),
      output_extent(input_size[3], padding)};
  for (const auto d : c10::irange(4)) {
    TORCH_CHECK(
        grad_output.sym_size(d) == expected[d], op, ": expected grad_output ",
        "of shape ", str(c10::SymIntArrayRef(expected, 4)),
        " for an input of size ", str(input_size), ", but got ",
        str(grad_output.sym_sizes()));
  }
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
  TORCH_CHECK(
      input.sym_size(1) >= 1 && grad_output.sym_size(1) >= 1, op,
      ": expected at least one input and one output channel, but got input ",
      str(input.sym_sizes()), " and grad_output ",
      str(grad_output.sym_sizes()));
  check_padding(op, padding);
  check_extent(op, "height", input.sym_size(2), padding);
  check_extent(op, "width", input.sym_size(3), padding);
  const c10::SymInt expected[4] = {
      input.sym_size(0), grad_output.sym_size(1),
      output_extent(input.sym_size(2), padding),
      output_extent(input.sym_size(3), padding)};
  for (const auto d : c10::irange(4)) {
    TORCH_CHECK(
        grad_output.sym_size(d) == expected[d], op, ": expected grad_output ",
        "of shape ", str(c10::SymIntArrayRef(expected, 4)),
        " for an input of shape ", str(input.sym_sizes()), ", but got ",
        str(grad_output.sym_sizes()));
  }
  return {grad_output.sym_size(1), input.sym_size(1), kKernelSize, kKernelSize};
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
