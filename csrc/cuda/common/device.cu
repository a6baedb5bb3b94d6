// The device queries of the kernel choice.

#include "device.h"

#include <ATen/cuda/CUDAContextLight.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstdlib>
#include <string>

namespace alexop::cuda {
namespace {

// A plain sm_90 (or sm_80-only) build compiles the wgmma kernels empty; the
// host asks this marker, whose static shared memory exists only in an sm_90a
// image, before choosing them.
__global__ void gmma_marker_kernel() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ volatile int present;
  present = 1;
#endif
}

}  // namespace

Device named_device(const std::string& kind) {
  Device d;
  if (kind == "h100" || kind == "h200") {
    d.sm = 90;
    d.sm90a = true;
    d.num_sms = 132;
    d.smem_optin = 232448;
    d.smem_per_sm = 233472;
  } else {
    TORCH_CHECK(kind == "a100", "alexop._kernel_for_gpu: expected gpu to be \"h100\", \"h200\" or \"a100\", but got \"",
                kind, "\"");
    d.sm = 80;
    d.num_sms = 108;
    d.smem_optin = 166912;
    d.smem_per_sm = 167936;
  }
  d.smem_reserved = 1024;
  return d;
}

Device device(int index) {
  static const bool force_sm80 = [] {
    const char* v = std::getenv("ALEXOP_FORCE_SM80");
    return v != nullptr && std::string(v) == "1";
  }();
  const auto* prop = at::cuda::getDeviceProperties(index);
  Device d;
  d.sm = prop->major * 10 + prop->minor;
  d.sm90a = gmma_available(index);
  if (force_sm80 && d.sm == 90) {
    d.sm = 80;
    d.sm90a = false;
  }
  d.num_sms = prop->multiProcessorCount;
  d.smem_optin = (int64_t)prop->sharedMemPerBlockOptin;
  d.smem_per_sm = (int64_t)prop->sharedMemPerMultiprocessor;
  d.smem_reserved = (int64_t)prop->reservedSharedMemPerBlock;
  return d;
}

bool gmma_available(int device) {
  // per device: 0 unknown, 1 no wgmma code for it, 2 wgmma code present
  static std::atomic<int> state[64];
  if (device < 0 || device >= 64 || at::cuda::getDeviceProperties(device)->major != 9) return false;
  int s = state[device].load(std::memory_order_relaxed);
  if (s == 0) {
    cudaFuncAttributes a{};
    if (cudaFuncGetAttributes(&a, gmma_marker_kernel) != cudaSuccess) {
      (void)cudaGetLastError();
      a.sharedSizeBytes = 0;
    }
    s = a.sharedSizeBytes > 0 ? 2 : 1;
    state[device].store(s, std::memory_order_relaxed);
  }
  return s == 2;
}

}  // namespace alexop::cuda
