#pragma once
// The input gradient's kernel choice: a pure function from a problem
// description to a named kernel, and the only place an input-gradient kernel
// is chosen (select.cu).

#include "../common/problem.h"

#include <string>

namespace alexop::cuda::input_grad {

// An input-gradient problem: grad_output (N, K, P, Q) and weight (K, C, 11,
// 11) contiguous, grad_input (N, C, H, W) NCHW, freshly allocated; no more
// than the base describes.
struct Problem : ProblemBase {};

enum class Kernel {
  kNone,         // an empty grad_input: nothing runs
  kGeneric,      // reference/: cuBLAS GEMMs and a fold
  kGmma3xFp16,   // x3.cu: wgmma, fp32-accurate as 3xFP16, A by descriptor
  kGmma,         // gmma.cuh: wgmma, A gathered from the dy window (16-bit)
  kMmaSync,      // mma_sync.cu: mma.sync, sm_80+ (3xTF32, TF32, 16-bit)
  kCudnn,        // ../cudnn/: ATen's transposed convolution (cuDNN), channels_last
};

struct Choice {
  Kernel kernel = Kernel::kGeneric;
  c10::ScalarType dtype = c10::ScalarType::Float;
  MathMode mode = k16;  // the kernel's MODE: what its products compute
  int slices = 0;       // computed for slices of 3 channels (zero weights added), then joined
};

Choice select(const Problem& p);

// Whether alexop's kernels or cuDNN is the faster has no rule (cuDNN's speed
// jumps with the filter count; one small image leaves alexop's tiles few;
// rules measured on one GPU need not hold on another), so the op times both
// on a problem's first call (common/timed.h), c being select(p): float32 and
// 16-bit from sm_80 on, up to 3 channels where c is alexop's, beyond that
// whatever it is. The guess, which runs untimed, is c on the architectures
// the rules were measured on, cuDNN on the others (common/device.h).
// own(p, c) is alexop's choice there: c, or where it is cuDNN, slices of 3,
// else the cuBLAS GEMM + fold.
bool timed(const Problem& p, const Choice& c);
Choice own(const Problem& p, const Choice& c);

// e.g. "dgrad_gmma_bf16", "dgrad_mma_3xtf32", "pad3+dgrad_gmma_3xfp16",
// "slice3x2+dgrad_gmma_bf16", "dgrad_cublas_fold",
// "dgrad_cudnn"
std::string name(const Choice& c);

// select's name, and where timed, "|" and the other choice's: the guess
// first ("dgrad_cublas_fold|dgrad_cudnn")
std::string timed_name(const Problem& p);

// The kernels' fits (plan.cu): a tiling whose dy window fits the stage
// buffers, resident B and two stage buffers in shared memory, tile and cell
// counts in 32 bits. stage_channels: 16 for 16-bit operands, else 8.
bool phase_fits(const Problem& p, int stage_channels);
bool x3_fits(const Problem& p);

}  // namespace alexop::cuda::input_grad
