#pragma once
// The C++ API of alexop: one function per operator in the alexop library,
// each a call through the dispatcher (so autograd, autocast and the backend
// kernels all apply), plus the argument checks every kernel shares.

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>

#include <array>
#include <optional>
#include <tuple>

namespace alexop {

constexpr int64_t kKernelSize = 11;
constexpr int64_t kStride = 4;

// y = conv2d(input, weight, bias, stride=4, padding=padding) for an 11x11
// weight, in the memory format output_memory_format(input, weight).
at::Tensor conv11s4(
    const at::Tensor& input,
    const at::Tensor& weight,
    const std::optional<at::Tensor>& bias,
    int64_t padding);

// Gradient of conv11s4 with respect to its input, whose sizes are
// input_size (N, C, H, W): a stride-4 transposed convolution of grad_output,
// in the memory format output_memory_format(grad_output, weight).
at::Tensor conv11s4_backward_input(
    const at::Tensor& grad_output,
    const at::Tensor& weight,
    c10::SymIntArrayRef input_size,
    int64_t padding);

// Gradients of conv11s4 with respect to weight and, when bias_grad, bias,
// contiguous. Without bias_grad the second result is an empty tensor of
// shape (0,).
std::tuple<at::Tensor, at::Tensor> conv11s4_backward_weight(
    const at::Tensor& grad_output,
    const at::Tensor& input,
    int64_t padding,
    bool bias_grad);

// Argument checks shared by the Meta, CPU and CUDA kernels, so every backend
// rejects the same inputs with the same message. Each returns the output
// sizes of its operator. Sizes are SymInts so the Meta kernel serves
// torch.compile and torch.export with dynamic shapes.
std::array<c10::SymInt, 4> check_conv11s4(
    const at::Tensor& input,
    const at::Tensor& weight,
    const std::optional<at::Tensor>& bias,
    int64_t padding);

void check_conv11s4_backward_input(
    const at::Tensor& grad_output,
    const at::Tensor& weight,
    c10::SymIntArrayRef input_size,
    int64_t padding);

// Returns the weight sizes (C_out, C_in, 11, 11).
std::array<c10::SymInt, 4> check_conv11s4_backward_weight(
    const at::Tensor& grad_output,
    const at::Tensor& input,
    int64_t padding);

// The memory format of a result computed from x (the input, or
// grad_output) and weight, by F.conv2d's rule: channels_last where either
// suggests it (Tensor::suggest_memory_format), else contiguous NCHW, so a
// channels_last model keeps its layout from layer to layer. (F.conv2d on
// CUDA makes float64 results NCHW; alexop's follow the rule in every dtype:
// a Meta kernel cannot tell the devices apart.)
at::MemoryFormat output_memory_format(const at::Tensor& x, const at::Tensor& weight);

// Every backend's dtype check: `supported` lists what the backend computes.
void check_dtype(
    const char* op,
    const at::Tensor& t,
    c10::ArrayRef<at::ScalarType> supported,
    const char* backend);

}  // namespace alexop
