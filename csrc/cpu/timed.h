#pragma once
// CPU choices timed once per problem (../timed.h): alexop's kernels against
// ATen's convolution, where select.h says a problem is timed. The rules
// there were measured on one CPU; timed, the choice follows the CPU it runs
// on.

#include "../timed.h"
#include "select.h"

#include <functional>
#include <vector>

namespace alexop::cpu {

// The key of problem p of the op decision with this many threads; flags:
// the rest of the op's key (a bias).
TimedKey timed_key(Decision decision, const Problem& p, int64_t flags);

// Each way's best wall-clock time, runs[i] the whole op one way.
std::vector<double> best_times(const std::vector<std::function<void()>>& runs);

// Whether ATen runs problem p of the op decision: guess (the selector's
// answer), but where p is timed, the faster of aten and own (each the whole
// op one way) on the first call of p. The ways are wrapped for timing only
// on that call: every other call only looks its choice up.
template <typename Aten, typename Own>
bool aten_timed(Decision decision, const Problem& p, int64_t flags, bool guess, const Aten& aten, const Own& own) {
  if (!timed(p)) return guess;
  return timed_choice(timed_key(decision, p, flags), guess, true, [&] { return best_times({own, aten}); }) == 1;
}

}  // namespace alexop::cpu
