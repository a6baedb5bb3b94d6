#pragma once
// Host-side launch helpers shared by the tensor-core kernels.

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>

#include <mutex>
#include <set>
#include <utility>

namespace alexop::cuda {

// Lifts a kernel's dynamic shared memory cap to the current device's maximum,
// once per kernel and device. The attribute is only a cap (each launch still
// passes its own size), and setting it before every launch cost ~2 us of host
// time on the H200 machine: a visible share of a batch-1 step, which is
// bound by host overhead.
template <typename Kernel>
void allow_max_dynamic_smem(Kernel* kernel) {
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> done;
  const int dev = c10::cuda::current_device();
  const auto key = std::make_pair(reinterpret_cast<const void*>(kernel), dev);
  std::lock_guard<std::mutex> lock(mutex);
  if (done.count(key) != 0) return;
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)at::cuda::getDeviceProperties(dev)->sharedMemPerBlockOptin));
  done.insert(key);
}

}  // namespace alexop::cuda
