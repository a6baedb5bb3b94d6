// alexop::_kernel_for on the CPU: the kernels conv11s4_cpu.cpp runs, read
// from the same selector (select.h: "cpu_*_aten" where ATen's convolution
// runs) and tables: Winograd where the instruction set has it for the dtype
// (float16 and bfloat16 run in float32), else direct, and the input gradient
// by space-to-depth; each named with the instruction set. "none" where the
// result is empty. Where a Winograd result comes out non-finite, the direct
// kernel computes it again; the name is the first choice's.

#include "../conv11s4.h"
#include "kernels.h"
#include "select.h"

#include <torch/library.h>

#include <string>
#include <vector>

namespace alexop {
namespace {

template <typename T>
std::vector<std::string> names(const cpu::Problem& p, cpu::Isa isa) {
  const auto& k = cpu::kernels<T>(isa);
  const std::string suffix = cpu::isa_name(isa);
  return {cpu::aten_forward(p) ? "cpu_fwd_aten"
                               : std::string("cpu_fwd_") + (k.winograd_input ? "winograd_" : "direct_") + suffix,
          cpu::aten_weight_grad(p) ? "cpu_wgrad_aten"
                                   : std::string("cpu_wgrad_") + (k.winograd_grad ? "winograd_" : "direct_") + suffix,
          cpu::aten_input_grad(p) ? "cpu_dgrad_aten" : "cpu_dgrad_s2d_" + suffix};
}

std::vector<std::string> kernel_for_cpu(const at::Tensor& input, const at::Tensor& weight, int64_t padding) {
  const auto size = check_conv11s4(input, weight, std::nullopt, padding);
  if (size[0].expect_int() == 0) {
    return {"none", "none", "none"};
  }
  const bool f64 = input.scalar_type() == at::kDouble;
  const auto p = cpu::problem(f64 ? at::kDouble : at::kFloat, input.sizes(), weight.size(0), padding);
  return f64 ? names<double>(p, cpu::cpu_isa()) : names<float>(p, cpu::cpu_isa());
}

}  // namespace

TORCH_LIBRARY_IMPL(alexop, CPU, m) {
  m.impl("_kernel_for", &kernel_for_cpu);
}

}  // namespace alexop
