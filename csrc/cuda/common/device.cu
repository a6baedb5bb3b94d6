// The device queries of the kernel choice.

#include "device.h"

#include <ATen/cuda/CUDAContextLight.h>
#include <c10/util/Exception.h>

#include <algorithm>
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

namespace {

// Shared memory a block may opt in to, and an SM's, on architecture sm.
struct SharedMemory {
  int64_t optin, per_sm;
};
SharedMemory shared_memory(int sm) {
  if (sm == 80 || sm == 87) return {166912, 167936};
  if (sm == 90 || sm == 100) return {232448, 233472};
  return {101376, 102400};  // sm_86, sm_89, sm_120
}

}  // namespace

Device named_device(const std::string& kind) {
  struct Kind {
    const char* name;
    int sm, num_sms;
  };
  static constexpr Kind kKinds[] = {{"h100", 90, 132}, {"h200", 90, 132}, {"a100", 80, 108}, {"l4", 89, 58},
                                    {"rtx4090", 89, 128}, {"b200", 100, 148}, {"rtx5090", 120, 170}};
  const Kind* k = nullptr;
  for (const auto& c : kKinds) {
    if (kind == c.name) k = &c;
  }
  TORCH_CHECK(k != nullptr,
              "alexop._kernel_for_gpu: expected gpu to be one of \"h100\", \"h200\", \"a100\", \"l4\", "
              "\"rtx4090\", \"b200\", \"rtx5090\", but got \"", kind, "\"");
  Device d;
  d.sm = k->sm;
  d.sm90a = k->sm == 90;
  d.measured = measured_architecture(k->sm);
  d.num_sms = k->num_sms;
  const auto smem = shared_memory(k->sm);
  d.smem_optin = smem.optin;
  d.smem_per_sm = smem.per_sm;
  d.smem_reserved = 1024;
  return d;
}

Device device(int index) {
  static const bool force_sm80 = [] {
    const char* v = std::getenv("ALEXOP_FORCE_SM80");
    return v != nullptr && std::string(v) == "1";
  }();
  // the architecture ALEXOP_FORCE_SM describes an sm_90 device as, or 0
  static const int forced = [] {
    const char* v = std::getenv("ALEXOP_FORCE_SM");
    if (v == nullptr || !*v) return 0;
    const std::string s(v);
    TORCH_CHECK(s == "80" || s == "86" || s == "89" || s == "100" || s == "120",
                "ALEXOP_FORCE_SM: expected 80, 86, 89, 100 or 120, but got \"", s, "\"");
    return std::stoi(s);
  }();
  const auto* prop = at::cuda::getDeviceProperties(index);
  Device d;
  d.sm = prop->major * 10 + prop->minor;
  d.sm90a = gmma_available(index);
  d.measured = measured_architecture(d.sm);
  d.num_sms = prop->multiProcessorCount;
  d.smem_optin = (int64_t)prop->sharedMemPerBlockOptin;
  d.smem_per_sm = (int64_t)prop->sharedMemPerMultiprocessor;
  d.smem_reserved = (int64_t)prop->reservedSharedMemPerBlock;
  if (force_sm80 && d.sm == 90) {
    d.sm = 80;
    d.sm90a = false;
  } else if (forced != 0 && d.sm == 90) {
    d.sm = forced;
    d.sm90a = false;
    const auto smem = shared_memory(forced);
    d.smem_optin = std::min(d.smem_optin, smem.optin);
    d.smem_per_sm = std::min(d.smem_per_sm, smem.per_sm);
  }
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
