#pragma once
// CPU choices timed once per problem (../timed.h): alexop's kernels against
// ATen's convolution, where select.h says a problem is timed. The rules
// there were measured on one CPU; timed, the choice holds on others too.

#include "../timed.h"
#include "select.h"

#include <functional>

namespace alexop::cpu {

// Whether ATen runs problem p of the op decision: guess (the selector's
// answer), but where p is timed, the faster of aten and own (each the whole
// op one way) on the first call of p with this many threads. flags: the
// rest of the op's key (a bias).
bool aten_timed(Decision decision, const Problem& p, int64_t flags, bool guess, const std::function<void()>& aten,
                const std::function<void()>& own);

}  // namespace alexop::cpu
