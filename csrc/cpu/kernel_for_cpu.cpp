// alexop::_kernel_for on the CPU: each op has one kernel there, a GEMM over
// the unfolded input (conv11s4_cpu.cpp).

#include "../conv11s4.h"

#include <torch/library.h>

#include <string>
#include <vector>

namespace alexop {
namespace {

std::vector<std::string> kernel_for_cpu(const at::Tensor& input, const at::Tensor& weight, int64_t padding) {
  check_conv11s4(input, weight, std::nullopt, padding);
  return {"cpu_gemm", "cpu_gemm", "cpu_gemm"};
}

}  // namespace

TORCH_LIBRARY_IMPL(alexop, CPU, m) {
  m.impl("_kernel_for", &kernel_for_cpu);
}

}  // namespace alexop
