#pragma once
// Which implementation each CPU op runs: alexop's kernels (kernels.h) or
// ATen's convolution (oneDNN for float32) where alexop's would be the slower
// ones. A pure function of the problem and ALEXOP_CPU_CAPABILITY, asked by
// the ops (conv11s4_cpu.cpp) and by _kernel_for (kernel_for_cpu.cpp).

#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>

namespace alexop::cpu {

struct Problem {
  c10::ScalarType dtype;  // the dtype the kernels compute in (16-bit: float32)
  int64_t N, C, K;        // images, input channels, filters
  int64_t P, Q;           // output rows and columns
};

// The problem of an input of input_size (N, C, H, W) and K filters, computed
// in dtype.
Problem problem(c10::ScalarType dtype, c10::IntArrayRef input_size, int64_t K, int64_t padding);

// true where ATen runs the op instead of alexop's kernels.
bool aten_forward(const Problem& p);
bool aten_weight_grad(const Problem& p);
bool aten_input_grad(const Problem& p);

}  // namespace alexop::cpu
