#pragma once
// Host-side launch helpers shared by the tensor-core kernels.

#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContextLight.h>
#include <c10/core/ScalarType.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <utility>

namespace alexop::cuda {

// A buffer of `bytes` bytes on like's device from the caching allocator,
// uninitialised: prepared weights, partial sums. Defined in launch.cu, so the
// kernel files need not include ATen's operator headers.
at::Tensor scratch(const at::Tensor& like, int64_t bytes);

// Whether the kernels' element type T (float, __nv_bfloat16 or at::BFloat16,
// __half or at::Half) is scalar type t: the launch switches' dtype test.
template <typename T>
bool is_dtype(c10::ScalarType t) {
  if constexpr (std::is_same_v<T, float>) {
    return t == c10::ScalarType::Float;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, c10::BFloat16>) {
    return t == c10::ScalarType::BFloat16;
  } else {
    static_assert(std::is_same_v<T, __half> || std::is_same_v<T, c10::Half>, "float, bf16 or fp16");
    return t == c10::ScalarType::Half;
  }
}

// Blocks of `threads` threads for a grid-stride loop over `total` elements:
// enough to fill the GPU several times over, never more than the grid allows.
inline unsigned int grid_stride_blocks(int64_t total, int threads) {
  const int64_t per_sm = 2048 / threads * 4;
  const int64_t cap = at::cuda::getCurrentDeviceProperties()->multiProcessorCount * per_sm;
  return static_cast<unsigned int>(std::max<int64_t>(1, std::min((total + threads - 1) / threads, cap)));
}

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

// Launches kernel as the programmatic dependent of the kernel queued just
// before it on the stream: once every block of that one has called
// pdl_launch_dependents (or exited), this one's blocks may start, and they
// must call pdl_wait before reading what that kernel writes. Only
// kernel pairs of one launcher use it: a kernel after another library's
// could also be writing memory that the caching allocator freed and handed
// out again. Stream capture records it as a programmatic graph edge.
// ALEXOP_NO_PDL=1 in the environment (read once) launches it as usual.
template <typename... KArgs, typename... Args>
void launch_dependent(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                      Args&&... args) {
  static const bool pdl = [] {
    const char* off = std::getenv("ALEXOP_NO_PDL");
    return off == nullptr || std::string(off) == "0";
  }();
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = 1;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace alexop::cuda
