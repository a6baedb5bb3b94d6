// alexop::_kernel_for on the CPU, and _kernel_for_cpu for a CPU named: the
// kernels conv11s4_cpu.cpp runs, read from the same selector (select.h:
// "cpu_*_aten" where ATen's convolution runs, in float16 / bfloat16 too
// where the CPU multiplies them natively) and tables: Winograd where the
// instruction set has it for the dtype (float16 and bfloat16 otherwise run
// in float32), with tiles in lanes where select.h says, else direct, and
// the input gradient by space-to-depth; each named with the instruction
// set. "none" where the result is empty. Where a Winograd result comes out
// non-finite, the direct kernel computes it again; the name is the first
// choice's. A problem timed on its first call is named "guess|other".

#include "../conv11s4.h"
#include "kernels.h"
#include "select.h"

#include <torch/library.h>

#include <string>
#include <vector>

namespace alexop {
namespace {

// The op's choice: the selector's, then the other where the first call of
// p times both (select.h: timed), as on CUDA ("guess|other").
std::string choice(const cpu::Problem& p, bool aten, const std::string& aten_name, const std::string& own) {
  const auto& first = aten ? aten_name : own;
  return cpu::timed(p) ? first + "|" + (aten ? own : aten_name) : first;
}

// p: the op's problem, in the dtype it is asked in (select.h: in_own_dtype).
template <typename T>
std::vector<std::string> names(const cpu::Problem& p) {
  const auto& k = cpu::kernels<T>(p.cpu.isa);
  const std::string suffix = cpu::isa_name(p.cpu.isa);
  const std::string forward = k.winograd_rows && cpu::winograd_rows_forward(p) ? "winograd_rows_"
                              : k.winograd_input                               ? "winograd_"
                                                                               : "direct_";
  return {choice(p, cpu::aten_forward(p), "cpu_fwd_aten", "cpu_fwd_" + forward + suffix),
          choice(p, cpu::aten_weight_grad(p), "cpu_wgrad_aten",
                 std::string("cpu_wgrad_") + (k.winograd_grad[0].fn ? "winograd_" : "direct_") + suffix),
          choice(p, cpu::aten_input_grad(p), "cpu_dgrad_aten", "cpu_dgrad_s2d_" + suffix)};
}

std::vector<std::string> kernel_names(
    const at::Tensor& input, const at::Tensor& weight, int64_t padding, const cpu::Cpu& cpu) {
  const auto size = check_conv11s4(input, weight, std::nullopt, padding);
  if (size[0].expect_int() == 0) {
    return {"none", "none", "none"};
  }
  const bool f64 = input.scalar_type() == at::kDouble;
  // grad_output as autograd makes it: the output's memory format
  const auto format = output_memory_format(input, weight);
  auto p = cpu::problem(input.scalar_type(), input.sizes(), weight.size(0), padding, format, cpu);
  if (!cpu::in_own_dtype(p)) p.dtype = at::kFloat;
  return f64 ? names<double>(p) : names<float>(p);
}

std::vector<std::string> kernel_for_cpu(const at::Tensor& input, const at::Tensor& weight, int64_t padding) {
  return kernel_names(input, weight, padding, cpu::this_cpu());
}

// The names on a CPU of the kind named (select.h), from the tensors' sizes,
// dtypes and layouts alone, whatever their device. The kernel tables of an
// instruction set this build lacks (x86's on other machines) name the
// portable ones.
std::vector<std::string> kernel_for_named_cpu(
    const at::Tensor& input, const at::Tensor& weight, int64_t padding, c10::string_view cpu) {
  return kernel_names(input, weight, padding, cpu::named_cpu(std::string_view(cpu.data(), cpu.size())));
}

}  // namespace

TORCH_LIBRARY_IMPL(alexop, CPU, m) {
  m.impl("_kernel_for", &kernel_for_cpu);
}

// Any device: it reads sizes, dtypes and layouts only.
TORCH_LIBRARY_IMPL(alexop, CompositeExplicitAutograd, m) {
  m.impl("_kernel_for_cpu", &kernel_for_named_cpu);
}

}  // namespace alexop
