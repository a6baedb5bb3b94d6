// CPU choices timed once per problem (timed.h).

#include "timed.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <vector>

namespace alexop::cpu {
namespace {

// Each way's best of kRounds calls by the wall clock, the ways taken in turn
// each round (a slow period of a shared machine reaches them alike). One
// call of each first warms up (oneDNN's primitive, the threads' scratch,
// the pages of a first allocation).
constexpr int kRounds = 3;

}  // namespace

std::vector<double> best_times(const std::vector<std::function<void()>>& runs) {
  for (const auto& run : runs) run();
  std::vector<double> best(runs.size(), std::numeric_limits<double>::infinity());
  for (int round = 0; round < kRounds; ++round) {
    for (size_t i = 0; i < runs.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      runs[i]();
      best[i] = std::min(best[i], std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  return best;
}

TimedKey timed_key(Decision decision, const Problem& p, int64_t flags) {
  return {(int64_t)decision, (int64_t)p.dtype, p.N, p.C, p.H, p.W, p.K, p.padding, p.channels_last,
          at::get_num_threads(), flags, 0};
}

}  // namespace alexop::cpu
