// The input gradient's NaN results, recomputed exactly where a kernel raised
// its flag (phase.cuh, flag_nan). A true ±Inf never comes out finite and a
// true finite result comes out NaN at worst (common/exact.cuh), so the NaN
// elements are the only ones to redo.

#include "../common/exact.cuh"
#include "plan.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace alexop::cuda::input_grad::phase {
namespace {

constexpr int kFixThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kFixThreads) dgrad_fix_nan_kernel(const Params p) {
  if (*reinterpret_cast<volatile const int*>(p.nan_flag) == 0) return;
  T* dx = static_cast<T*>(p.dx);
  const int64_t plane = (int64_t)p.H * p.W, total = (int64_t)p.N * kC * plane;
  for (int64_t i = blockIdx.x * (int64_t)kFixThreads + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * kFixThreads) {
    const int64_t nc = i / plane, hw = i - nc * plane, n = nc / kC;
    T* e = dx + n * p.dxs + (nc - n * kC) * plane + hw;
    if (!isnan(to_f(*e))) continue;
    const int h = (int)(hw / p.W), x = (int)(hw - (int64_t)h * p.W);
    *e = from_f<T>(exact::input_grad(static_cast<const T*>(p.dy), p.K, p.P, p.Q, static_cast<const T*>(p.w),
                                     p.pad, (int)n, (int)(nc - n * kC), h, x));
  }
}

template <typename T>
void launch_fix(const Params& p, int num_sms) {
  dgrad_fix_nan_kernel<T><<<2 * num_sms, kFixThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void fix_flagged_nan(const Params& p, c10::ScalarType dtype, int num_sms) {
  if (dtype == c10::ScalarType::BFloat16) return launch_fix<__nv_bfloat16>(p, num_sms);
  if (dtype == c10::ScalarType::Half) return launch_fix<__half>(p, num_sms);
  launch_fix<float>(p, num_sms);
}

}  // namespace alexop::cuda::input_grad::phase
