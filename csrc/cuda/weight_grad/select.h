#pragma once
// The weight gradient's kernel choice: a pure function from a problem
// description to a named kernel, and the only place a weight-gradient kernel
// is chosen (select.cu).

#include "../common/problem.h"

#include <string>

namespace alexop::cuda::weight_grad {

// A weight-gradient problem as the kernels see it: grad_output (N, K, P, Q)
// NCHW contiguous (a copy of any other), or channels_last where the
// phase-plane and wgmma kernels read it in place; the input (N, C, H, W) dense in NCHW
// or channels_last (16-bit inputs reach it as NCHW, see nchw_input.h).
struct Problem : ProblemBase {
  bool nhwc = false;          // channels_last input
  int64_t input_stride0 = 0;  // the input's image stride
  int input_align = 1;        // alignment of the input's address (common/device.h)
  int grad_output_align = 1;  // and of grad_output's
  // grad_output channels_last of 16-byte aligned pixels (a pixel's channels
  // contiguous, pixel stride a multiple of 8 elements), rows of pixels dense
  bool grad_output_nhwc = false;
  bool transposed = false;    // the input was transposed to NCHW first (nchw_input.h)
  // the op's whole problem, not one slice's: only its choice may pack
  // narrow images (a slice's kernel runs on the operands it is handed)
  bool whole = false;
};

enum class Kernel {
  kGeneric,        // reference/: a block per weight, any shape and dtype
  kPlanes,         // planes.cuh: wgmma on phase planes (16-bit)
  kGmma,           // gmma.cuh: wgmma, A gathered from the input-row ring
  kMmaSync,        // mma_sync.cuh wgrad_f32_kernel (fp32)
  kMmaSyncPairs,   // mma_sync.cuh wgrad_h16_kernel (16-bit, 4-byte pairs)
  kMmaSyncStrided, // mma_sync.cuh wgrad_partial_kernel (16-bit, any strides)
  kCudnn,          // ../cudnn/: ATen's convolution backward (cuDNN), where no alexop kernel wins
};

struct Choice {
  Kernel kernel = Kernel::kGeneric;
  c10::ScalarType dtype = c10::ScalarType::Float;
  MathMode mode = k16;      // the kernel's MODE: what its products compute
  int channels = 0;         // the K it is built for: 64 or 96
  int input_channels = 3;   // the C it is built for: 3, or 1 / 2 (kPlanes)
  // 16-bit, odd width: the input (or each slice) copied one zero column
  // wider first ("widen+"), for the kernels that read column pairs
  bool widened = false;
  // images narrower than a unit: the input and grad_output copied as
  // ceil(N / packed) images of `packed` bands side by side first ("pack<n>+")
  int packed = 0;
  bool vec = false;         // kGmma: input rows by 16-byte copies
  bool transposed = false;  // the input was transposed first (a kernel of its own)
  bool dy_nhwc = false;     // kPlanes, kGmma: grad_output read channels_last in place ("_dynhwc")
  int slices = 0;           // the input cut into slices of 3 channels first (forward/select.h)
  // 0: grad_output as it is; n: its channels in n slices of up to
  // kFilterSlice (the last zero-padded to 64 or 96), a fresh copy each
  int filter_slices = 0;
};

// The filters of a filter slice; the kernels are built for 64 and 96.
constexpr int64_t kFilterSlice = 96;
inline int64_t filter_width(int64_t filters) { return filters <= 64 ? 64 : 96; }

Choice select(const Problem& p);

// The band, in input columns, each image takes in a packed choice's copy,
// the copy's width and its output width (select.cu).
int64_t pack_band(int64_t W, int64_t pad);
int64_t packed_width(int64_t W, int64_t pad, int64_t packed);
int64_t packed_outputs(int64_t W, int64_t pad, int64_t packed);

// Up to 16 channels, float32 or 16-bit: select's rules (many_channels_pay,
// filter_slices_pay) are a guess, and the op times alexop's kernels against
// cuDNN on a problem's first call (common/timed.h): cuDNN's weight gradients
// are fast or slow by shape in ways no rule follows, and a problem as small
// as one image leaves alexop's tiles few. own(p) is select(p) with slices
// wherever the kernels take them: kCudnn where they cannot.
bool timed(const Problem& p);
Choice own(const Problem& p);

// e.g. "wgrad_planes_bf16_c96", "wgrad_planes_bf16_1ch_c64", "wgrad_planes_bf16_c96_dynhwc", "wgrad_gmma_3xfp16_c96_vec",
// "wgrad_gmma_tf32_c96_dynhwc",
// "nhwc3_to_nchw+wgrad_planes_bf16_c96", "pad3+wgrad_mma_3xtf32_c64",
// "slice3x2+wgrad_planes_bf16_c96", "kslice96x2+wgrad_gmma_tf32_c96_vec", "widen+wgrad_gmma_bf16_c96_vec",
// "pack3+wgrad_gmma_3xfp16_c96_vec",
// "wgrad_cudnn",
// "wgrad_generic"
std::string name(const Choice& c);

// select's name, and where timed, "|" and the other choice's: the guess
// first ("slice3x3+wgrad_gmma_bf16_c64|wgrad_cudnn"; cuDNN's on an
// architecture the rules were not measured on, common/device.h)
std::string timed_name(const Problem& p);

// The phase-plane kernel's fit (plan.cu): built for p.C (1 to 3), its
// shared memory, 4 tiles an SM or more, tile counts in 32 bits.
bool planes_fit(const Problem& p, int nt8);

}  // namespace alexop::cuda::weight_grad
