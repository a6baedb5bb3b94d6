#pragma once
// Which implementation each CPU op runs: alexop's kernels (kernels.h) or
// ATen's convolution (oneDNN) where alexop's would be the slower ones, and
// which of alexop's forwards. A pure function of the problem and the CPU it
// runs on, asked by the ops (conv11s4_cpu.cpp) and by _kernel_for
// (kernel_for_cpu.cpp), and of a CPU named rather than present by
// _kernel_for_cpu.

#include "kernels.h"

#include <c10/core/MemoryFormat.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <string_view>

namespace alexop::cpu {

// What of the CPU the choice depends on.
struct Cpu {
  Isa isa;          // the instruction set of alexop's kernels
  bool bf16, fp16;  // multiplies bfloat16 / float16 natively (oneDNN's 16-bit kernels run at twice float32's rate)
  bool forced;      // ALEXOP_CPU_CAPABILITY names the instruction set: alexop's kernels for every shape
};

// This CPU: cpu_isa(), and its CPUID flags.
Cpu this_cpu();

// A CPU of the kind named: "default" (no AVX2: aarch64 and the like),
// "avx2", "avx512", "avx512_bf16" (and AVX512-BF16: Zen 4, Cooper Lake) or
// "avx512_fp16" (and AVX512-FP16 too: Sapphire Rapids); throws on others.
Cpu named_cpu(std::string_view name);

struct Problem {
  c10::ScalarType dtype;  // the op's dtype (16-bit: asked again as float32 where ATen does not take it)
  int64_t N, C, K;        // images, input channels, filters
  int64_t P, Q;           // output rows and columns
  bool channels_last;     // the layout ATen would run in (output_memory_format)
  Cpu cpu;
};

// The problem of an input of input_size (N, C, H, W) and K filters, computed
// in dtype, its operands in memory format format, on cpu.
Problem problem(
    c10::ScalarType dtype, c10::IntArrayRef input_size, int64_t K, int64_t padding, c10::MemoryFormat format,
    const Cpu& cpu);

// true where ATen runs the op instead of alexop's kernels; for float16 /
// bfloat16, in that dtype (false: the op converts to float32 and asks again).
bool aten_forward(const Problem& p);
bool aten_weight_grad(const Problem& p);
bool aten_input_grad(const Problem& p);

// Where alexop's forward runs: true for the Winograd forward with tiles in
// lanes (kernels.h: WinogradRowsFn), where the instruction set has it.
bool winograd_rows_forward(const Problem& p);

}  // namespace alexop::cpu
