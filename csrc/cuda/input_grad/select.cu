// The input gradient's kernel choice. Decision tree, first match wins; a
// kernel that does not fit (plan.cu) falls through:
//
//  1. empty grad_input                      -> none
//  2. float64                               -> generic (cuBLAS + fold)  [the reference]
//     below sm_80 (Turing)                  -> cudnn (tensor_core_kernels)
//  3. 1 or 2, or 4 up to max_sliced_channels, more than one_small_image -> slices of 3 + the 3-channel tensor-core choice [cheaper than either fallback]
//  4. !tc_shape, cudnn_wins or launch_bound -> cudnn (channels_last)  [its TF32 and few-filter kernels; one launch]
//  5. !tc_shape                             -> generic (cuBLAS + fold)  [faster than cuDNN elsewhere]
//  6. launch_bound                          -> cudnn  [a single small image: launches, not math]
// float32:
//  7. "high" or "medium"                    -> mma.sync TF32, else generic  [a TF32 wgmma version was slower]
//  8. wgmma                                 -> gmma 3xFP16  [twice TF32's rate, A by descriptor]
//  9.                                       -> mma.sync 3xTF32, else generic
// bf16 / fp16:
// 10. wgmma                                 -> gmma 16-bit
// 11.                                       -> mma.sync 16-bit, else generic
// float32 and 16-bit from sm_80 on, the op times alexop's own (own: the
// choice above, or where it is cuDNN, slices of 3, else the GEMM + fold)
// against cuDNN on each problem's first call (timed); up to 3 channels only
// where the choice is alexop's. The choice is the guess on the measured
// architectures, cuDNN on the others (common/device.h).

#include "select.h"

#include "../common/constants.h"

#include <cstdint>

namespace alexop::cuda::input_grad {
namespace {

using c10::ScalarType;

// The kernels' limits: 3 channels, padding and sizes their 32-bit
// arithmetic holds (a dy image and an input image under 2^31 elements),
// fp32 / 16-bit (the architecture is checked first).
bool tc_shape(const Problem& p) {
  return p.C == kC && p.K >= 1 && p.pad >= 0 && p.pad <= 4096 && p.H >= 1 && p.W >= 1 && p.H <= (1 << 20) &&
         p.W <= (1 << 20) && p.K * p.P * p.Q < INT32_MAX && kC * p.H * p.W < INT32_MAX &&
         (p.dtype == ScalarType::Float || p.dtype == ScalarType::BFloat16 || p.dtype == ScalarType::Half);
}

// Outside the tensor-core kernels, cuDNN (run channels_last) beats the
// cuBLAS GEMM + fold with TF32 from 4 input channels on, and for 16-bit
// gradients of at most 16 filters.
bool cudnn_wins(const Problem& p) {
  if (p.dtype == ScalarType::Float) return p.math != Fp32Math::kAccurate && p.C > kC;
  return p.K <= 16;
}

// Input channels the slices beat the fallbacks up to: any count in full
// fp32, 8 in 16-bit; with TF32 allowed, cuDNN's channels_last kernels win
// from 4 channels on.
int64_t max_sliced_channels(const Problem& p) {
  if (p.dtype != ScalarType::Float) return 8;
  return p.math == Fp32Math::kAccurate ? kMaxSlicedChannels : kC;
}

// float32 gradients of one small image take a few microseconds either way;
// cuDNN's single launch wins there.
bool launch_bound(const Problem& p) { return p.dtype == ScalarType::Float && one_small_image(p); }

Choice make(Kernel k, const Problem& p, MathMode mode) {
  Choice c;
  c.kernel = k;
  c.dtype = p.dtype;
  c.mode = mode;
  return c;
}

// The mma.sync kernel where it fits, else the reference.
Choice mma_or_generic(const Problem& p, MathMode mode) {
  return phase_fits(p, mode == k16 ? 16 : 8) ? make(Kernel::kMmaSync, p, mode) : make(Kernel::kGeneric, p, mode);
}

Choice select_fp32(const Problem& p) {
  if (p.math != Fp32Math::kAccurate) return mma_or_generic(p, kTf32);
  if (p.dev.sm90a && x3_fits(p)) return make(Kernel::kGmma3xFp16, p, k3xFp16);
  return mma_or_generic(p, k3xTf32);
}

Choice select_16(const Problem& p) {
  if (p.dev.sm90a && phase_fits(p, 16)) return make(Kernel::kGmma, p, k16);
  return mma_or_generic(p, k16);
}

constexpr const char* kModeNames[] = {"3xtf32", "tf32", "", "3xfp16"};
constexpr const char* kKernelNames[] = {"none",       "dgrad_cublas_fold", "dgrad_gmma",
                                        "dgrad_gmma", "dgrad_mma",         "dgrad_cudnn"};

// Slices of 3 channels where the 3-channel choice is a tensor-core kernel,
// else kGeneric.
Choice slices_of(const Problem& p) {
  Problem q = p;
  q.C = kC;
  Choice c = select(q);
  if (c.kernel == Kernel::kGeneric || c.kernel == Kernel::kCudnn) return make(Kernel::kGeneric, p, k16);
  c.slices = input_slices(p.C);
  return c;
}

}  // namespace

Choice select(const Problem& p) {
  if (p.N * p.C * p.H * p.W == 0) return make(Kernel::kNone, p, k16);
  if (p.dtype == ScalarType::Double) return make(Kernel::kGeneric, p, k16);
  if (!tensor_core_kernels(p.dev)) return make(Kernel::kCudnn, p, k16);
  if (p.C >= 1 && p.C != kC && p.C <= max_sliced_channels(p) && !one_small_image(p)) {
    const Choice c = slices_of(p);
    if (c.kernel != Kernel::kGeneric) return c;
  }
  if (!tc_shape(p)) return make(cudnn_wins(p) || launch_bound(p) ? Kernel::kCudnn : Kernel::kGeneric, p, k16);
  if (launch_bound(p)) return make(Kernel::kCudnn, p, k16);
  return p.dtype == ScalarType::Float ? select_fp32(p) : select_16(p);
}

std::string name(const Choice& c) {
  const std::string s = kKernelNames[(int)c.kernel];
  if (c.kernel == Kernel::kNone || c.kernel == Kernel::kGeneric || c.kernel == Kernel::kCudnn) return s;
  return slices_prefix(c.slices) + s + "_" +
         (c.mode == k16 ? (c.dtype == ScalarType::Half ? "fp16" : "bf16") : kModeNames[c.mode]);
}

bool timed(const Problem& p, const Choice& c) {
  return p.N * p.H * p.W > 0 && p.dtype != ScalarType::Double && tensor_core_kernels(p.dev) &&
         (p.C > kC || c.kernel != Kernel::kCudnn);
}

Choice own(const Problem& p, const Choice& c) {
  if (c.kernel != Kernel::kCudnn) return c;
  if (p.C <= kMaxSlicedChannels) {
    const Choice slices = slices_of(p);
    if (slices.kernel != Kernel::kGeneric) return slices;
  }
  return make(Kernel::kGeneric, p, k16);
}

std::string timed_name(const Problem& p) {
  const auto c = select(p);
  if (!timed(p, c)) return name(c);
  const auto cudnn = name(make(Kernel::kCudnn, p, k16));
  const auto mine = name(own(p, c));
  return cudnn_is_guess(p.dev, c.kernel == Kernel::kCudnn) ? cudnn + "|" + mine : mine + "|" + cudnn;
}

}  // namespace alexop::cuda::input_grad
