#pragma once
// Which implementation each CPU op runs: alexop's kernels (kernels.h) or
// ATen's convolution (oneDNN) where alexop's would be the slower ones, and
// which of alexop's forwards. A pure function of the problem and the CPU it
// runs on, asked by the ops (conv11s4_cpu.cpp) and by _kernel_for
// (kernel_for_cpu.cpp), and of a CPU named rather than present by
// _kernel_for_cpu. Where a problem is timed, that choice is the guess, and
// the first call times both (timed.h).

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
  bool bf16, fp16;  // ATen's bfloat16 / float16 convolution runs oneDNN's native kernels (select.cpp says where)
  bool amx;         // on AMX tiles: its input gradient wins at every channel count too
  bool forced;      // ALEXOP_CPU_CAPABILITY names the instruction set: alexop's kernels for every shape
};

// This CPU: cpu_isa(), and its CPUID flags.
Cpu this_cpu();

// A CPU of the kind named: "default" (no AVX2: aarch64 and the like),
// "avx2", "avx512", "avx512_bf16" (and AVX512-BF16: Zen 4 and 5, Cooper
// Lake), "amx_bf16" (and AMX-BF16: Sapphire and Emerald Rapids) or
// "amx_fp16" (and AMX-FP16: Granite Rapids); throws on others.
Cpu named_cpu(std::string_view name);

struct Problem {
  c10::ScalarType dtype;  // the op's dtype (16-bit: asked again as float32 where ATen does not take it)
  int64_t N, C, K;        // images, input channels, filters
  int64_t P, Q;           // output rows and columns
  bool channels_last;     // the layout ATen would run in (output_memory_format)
  Cpu cpu;
  int64_t H, W, padding;  // the input's rows and columns, the padding
};

// The problem of an input of input_size (N, C, H, W) and K filters, computed
// in dtype, its operands in memory format format, on cpu.
Problem problem(
    c10::ScalarType dtype, c10::IntArrayRef input_size, int64_t K, int64_t padding, c10::MemoryFormat format,
    const Cpu& cpu);

// Whether a float16 / bfloat16 problem is asked in its own dtype, where ATen
// may run it (the CPU multiplies it natively), rather than converted to
// float32 and asked as such; true for float32 and float64.
bool in_own_dtype(const Problem& p);

// true where ATen runs the op instead of alexop's kernels (which compute
// float16 / bfloat16 in float32); asked of a problem in_own_dtype.
bool aten_forward(const Problem& p);
bool aten_weight_grad(const Problem& p);
bool aten_input_grad(const Problem& p);

// Whether the first call of p times alexop's kernels against ATen's, the
// choice above being the guess: float32 problems and 16-bit ones in their
// own dtype (not float64, not under ALEXOP_CPU_CAPABILITY), up to a size at
// which the timing's extra calls cost little once.
bool timed(const Problem& p);

// Where alexop's forward runs: true for the Winograd forward with tiles in
// lanes (kernels.h: WinogradRowsFn), where the instruction set has it.
bool winograd_rows_forward(const Problem& p);

}  // namespace alexop::cpu
