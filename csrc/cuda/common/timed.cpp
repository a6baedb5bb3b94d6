// Choices timed once per problem on the GPU (timed.h).

#include "timed.h"

#include <ATen/ops/isfinite.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/logical_and.h>
#include <ATen/ops/where.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <chrono>
#include <limits>

namespace alexop::cuda {
namespace {

// A CUDA event pair on the current stream: the GPU time of what is queued
// between start() and stop().
class Timer {
 public:
  Timer() {
    C10_CUDA_CHECK(cudaEventCreate(&start_));
    C10_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~Timer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  void start() { C10_CUDA_CHECK(cudaEventRecord(start_, c10::cuda::getCurrentCUDAStream())); }
  float stop() {
    C10_CUDA_CHECK(cudaEventRecord(stop_, c10::cuda::getCurrentCUDAStream()));
    C10_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    C10_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaEvent_t start_{}, stop_{};
};

// Each way's best of kRounds timed calls, the ways taken in turn each
// round (a drift in the GPU's clocks reaches them alike), each call queued
// behind a GPU spin twice as long as the host took to queue it: a small
// problem's GPU time is shorter than its launches' host time, and a timing
// that waited on the host would compare host overheads, not GPU times
// (perf-history S25). One call of each first warms up (cuDNN's algorithm
// choice, the allocator, a nested choice's own timing).
constexpr int kRounds = 3;

std::vector<double> best_times(const std::vector<std::function<void()>>& runs) {
  // The spin counts SM cycles, so it is sized at the GPU's peak clock, where
  // it passes fastest: sized at a lower clock it could end before the host
  // had queued the call, and the events then take in the host's launches
  // (docs/perf-history.md, S59).
  int khz = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, c10::cuda::current_device()));
  const double cycles_per_us = std::max(khz, 1000000) / 1000.0;
  std::vector<int64_t> spin_cycles;
  for (const auto& run : runs) {
    run();
    const auto t0 = std::chrono::steady_clock::now();
    run();
    const double host_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    spin_cycles.push_back((int64_t)(std::min(2 * host_us, 1e5) * cycles_per_us) + 20000);
  }
  Timer timer;
  std::vector<double> best(runs.size(), std::numeric_limits<double>::infinity());
  for (int round = 0; round < kRounds; ++round) {
    for (size_t i = 0; i < runs.size(); ++i) {
      at::cuda::sleep(spin_cycles[i]);
      timer.start();
      runs[i]();
      best[i] = std::min(best[i], (double)timer.stop());
    }
  }
  return best;
}

// The relative L2 distance past which two results are not the same
// convolution's: 16-bit results, or TF32 against fp32, stay under 1e-2 of
// each other; a kernel that computes something else is off by about 1.
constexpr double kAgreement = 2e-2;

// The relative L2 distance of a from b over the elements finite in both:
// where an Inf or NaN meets the op, alexop's kernels follow float64
// F.conv2d and cuDNN's need not (docs/precision.md).
double distance(const at::Tensor& a, const at::Tensor& b) {
  const auto x = a.to(at::kFloat), y = b.to(at::kFloat);
  const auto finite = at::logical_and(x.isfinite(), y.isfinite());
  const double size = at::where(finite, y, 0).norm().item<double>();
  const double diff = at::where(finite, at::sub(x, y), 0).norm().item<double>();
  return diff == 0 ? 0 : diff / size;
}

// Nothing may synchronize during CUDA graph capture: there a problem not yet
// timed takes the guess.
bool may_time() {
  return c10::cuda::currentStreamCaptureStatusMayInitCtx() == c10::cuda::CaptureStatus::None;
}

}  // namespace

TimedKey timed_key(Decision op, const at::Tensor& x, at::IntArrayRef size, int64_t K, int64_t padding,
                   int64_t precision, bool bias, at::MemoryFormat format) {
  return {(int64_t)op, x.get_device(), (int64_t)x.scalar_type(), precision,
          size[0],     size[1],        size[2],                   size[3],
          K,           padding,        (int64_t)x.suggest_memory_format(), (int64_t)format * 2 + bias};
}

int fastest(const TimedKey& key, int guess, const std::vector<std::function<void()>>& runs) {
  return timed_choice(key, guess, may_time(), [&] { return best_times(runs); });
}

int mine_or_cudnn(const TimedKey& key, int guess, const std::function<std::string()>& what,
                  const std::function<at::Tensor()>& mine, const std::function<at::Tensor()>& cudnn) {
  return timed_choice(key, guess, may_time(), [&]() -> std::vector<double> {
    const double d = distance(mine(), cudnn());
    if (!(d <= kAgreement)) {
      const auto* props = at::cuda::getCurrentDeviceProperties();
      TORCH_WARN("alexop.conv11s4: on this ", props->name, " (sm_", props->major, props->minor, ") ", what(),
                 " gave a result a relative L2 distance of ", d, " from cuDNN's; cuDNN runs this problem "
                 "instead. Please report it, with the GPU, the shapes and the dtype.");
      return {std::numeric_limits<double>::infinity(), 0};
    }
    return best_times({[&] { mine(); }, [&] { cudnn(); }});
  });
}

}  // namespace alexop::cuda
