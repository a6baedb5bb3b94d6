// Autocast: like nn.Conv2d, the op runs in the autocast dtype (float16 or
// bfloat16) on both CUDA and CPU. Registered in C++ so TorchScript models
// autocast the same way in processes without Python.

#include "../conv11s4.h"

#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace alexop {
namespace {

template <c10::DispatchKey key, c10::DeviceType device>
at::Tensor conv11s4_autocast(
    const at::Tensor& input,
    const at::Tensor& weight,
    const std::optional<at::Tensor>& bias,
    int64_t padding) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(key);
  const auto dtype = at::autocast::get_autocast_dtype(device);
  return conv11s4(
      at::autocast::cached_cast(dtype, input, device),
      at::autocast::cached_cast(dtype, weight, device),
      at::autocast::cached_cast(dtype, bias, device), padding);
}

}  // namespace

TORCH_LIBRARY_IMPL(alexop, AutocastCUDA, m) {
  m.impl(
      "conv11s4",
      &conv11s4_autocast<c10::DispatchKey::AutocastCUDA, c10::DeviceType::CUDA>);
}

TORCH_LIBRARY_IMPL(alexop, AutocastCPU, m) {
  m.impl(
      "conv11s4",
      &conv11s4_autocast<c10::DispatchKey::AutocastCPU, c10::DeviceType::CPU>);
}

}  // namespace alexop
