#pragma once
// The forward's kernel choice: a pure function from a problem description to
// a named kernel, and the only place a forward kernel is chosen (select.cu).

#include "../common/problem.h"

#include <string>

namespace alexop::cuda::forward {

// A forward problem as the kernels see it: input (N, C, H, W) dense in NCHW
// or channels_last, weight (K, C, 11, 11) contiguous, the output (N, K, P,
// Q) freshly allocated, NCHW or (any_output_layout) channels_last.
struct Problem : ProblemBase {
  bool nhwc = false;     // channels_last input
  int input_align = 1;   // alignment of the input's address (common/device.h)
  int output_align = 1;  // and of the output's
};

// Kernel families; the math and channel tiling are the Choice's parameters.
enum class Kernel {
  kNone,        // an empty output: nothing runs
  kGeneric,     // reference/: one thread an output, any shape and dtype
  kPlanes,      // planes.cuh: wgmma, both operands from shared memory (TF32, 16-bit)
  kS2d,         // s2d.cuh: wgmma, space-to-depth (16-bit)
  kGmmaStaged,  // gmma.cuh: wgmma gather and a store warpgroup (16-bit)
  kGmma2Cta,    // gmma.cuh: wgmma gather, two CTAs an SM (16-bit)
  kGmma,        // gmma.cuh: wgmma gather, one CTA an SM (TF32, 3xFP16, 3xTF32)
  kMmaSync,     // mma_sync.cuh: mma.sync gather, sm_80+ (every precision)
  kGmmaChunks,  // gmma_chunks.cuh: wgmma gather over chunks of more input channels (TF32, 16-bit, 3xFP16)
  kCudnn,       // ../cudnn/: ATen's convolution (cuDNN), where no alexop kernel wins
};

struct Choice {
  Kernel kernel = Kernel::kGeneric;
  c10::ScalarType dtype = c10::ScalarType::Float;
  MathMode mode = kTf32;  // the kernel's MODE: what its products compute
  int nt8 = 0;            // n8 tiles a CTA holds: 8 * nt8 output channels
  int groups = 1;         // channel groups (CTAs along grid y) covering K
  // 0: the input as it is; n: cut into n slices of 3 channels (the last
  // zero-padded), each convolved by the kernel, the partial outputs summed
  int slices = 0;
  // a channels_last input copied to NCHW first ("nchw+"): the chunk kernel,
  // the phase planes of 1 or 2 channels
  bool nchw_copy = false;
  // the phase planes of a 16-bit NCHW input of 1 or 2 channels (the missing
  // channels' planes zero), not a zero-padded copy ("_1ch"); or of 4, the
  // planes built for 4 channels ("_4ch")
  int input_channels = 3;
  // a 16-bit input on an NCHW copy with zero columns added ("widen+",
  // kernel_input_problem): for the phase planes of an odd width one, whose
  // rows their 4-byte copies take; for the gather kernels up to whole
  // 16-byte units, which they copy whole
  bool widened = false;
};

Choice select(const Problem& p);

// Filters of each phase-plane filter group for K filters: K in as few groups of
// up to 96 as hold them, of equal width (a multiple of 8; the last may be
// narrower), so that 128 filters run as two of 64 rather than 96 + 32.
int64_t planes_group_width(int64_t K);

// The problem of the input choice c reads for p (the forward makes it): p's
// own, or a fresh NCHW copy (c.nchw_copy: of a channels_last input, in
// 16-bit the chunk kernel's rows padded with zero columns to whole 16-byte
// units, which it copies whole; c.widened: for the phase planes one zero
// column wider than p's odd width, where the column lies in the padding's
// zeros, or past every window where there is none; for the gather kernels
// rows of whole 16-byte units, whose columns past p's W read as the
// padding's zeros). The output stays p's.
Problem kernel_input_problem(const Choice& c, const Problem& p);

// Whether the chosen kernel writes the output at its strides, NCHW or
// channels_last (every tensor-core kernel); the reference kernel writes NCHW.
bool any_output_layout(const Choice& c);

// Whether the op times choice c against cuDNN on a problem's first call
// (common/timed.h) and keeps the faster: every tensor-core choice. The rules
// were measured on Hopper at a few batch sizes; another GPU, or a problem as
// small as one image (few tiles, launches that cost more than the math),
// can turn them. The guess, which runs untimed, is c where p.dev.measured,
// else cuDNN.
bool timed(const Choice& c);

// e.g. "fwd_planes_bf16_c96", "fwd_planes_bf16_1ch_c96", "nchw+fwd_planes_bf16_4ch_c64",
// "widen+fwd_planes_bf16_c96", "fwd_mma_3xtf32_split_g16", "pad3+fwd_s2d_bf16_c64" (one
// slice), "slice3x2+fwd_s2d_bf16_c96" (two), "fwd_gmma_chunks_tf32_c64",
// "nchw+fwd_gmma_chunks_bf16_c96", "fwd_cudnn", "fwd_generic"
std::string name(const Choice& c);

// select's name, and where timed "fwd_cudnn" beside it: the guess first
std::string timed_name(const Problem& p);

}  // namespace alexop::cuda::forward
