#pragma once
// Which implementation each CPU op runs: alexop's kernels (kernels.h) or
// ATen's convolution (oneDNN) where alexop's would be the slower
// ones. A pure function of the problem and ALEXOP_CPU_CAPABILITY, asked by
// the ops (conv11s4_cpu.cpp) and by _kernel_for (kernel_for_cpu.cpp).

#include <c10/core/MemoryFormat.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>

namespace alexop::cpu {

struct Problem {
  c10::ScalarType dtype;  // the op's dtype (16-bit: asked again as float32 where ATen does not take it)
  int64_t N, C, K;        // images, input channels, filters
  int64_t P, Q;           // output rows and columns
  bool channels_last;     // the layout ATen would run in (output_memory_format)
};

// The problem of an input of input_size (N, C, H, W) and K filters, computed
// in dtype, its operands in memory format format.
Problem problem(
    c10::ScalarType dtype, c10::IntArrayRef input_size, int64_t K, int64_t padding, c10::MemoryFormat format);

// true where ATen runs the op instead of alexop's kernels; for float16 /
// bfloat16, in that dtype (false: the op converts to float32 and asks again).
bool aten_forward(const Problem& p);
bool aten_weight_grad(const Problem& p);
bool aten_input_grad(const Problem& p);

}  // namespace alexop::cpu
