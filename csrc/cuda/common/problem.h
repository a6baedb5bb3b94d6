#pragma once
// What every kernel choice starts from: the device, the dtype and precision,
// and the convolution's sizes. Each op's Problem (forward/, weight_grad/,
// input_grad/ select.h) adds what its kernels need of the operands.

#include "device.h"
#include "precision.h"

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

namespace alexop::cuda {

struct ProblemBase {
  Device dev;
  c10::ScalarType dtype = c10::ScalarType::Float;
  Fp32Math math = Fp32Math::kAccurate;  // float32 only
  // input (N, C, H, W), weight (K, C, 11, 11), output (N, K, P, Q), padding
  int64_t N = 0, C = 0, H = 0, W = 0, K = 0, P = 0, Q = 0, pad = 0;
};

// At most one 224 x 224 image's worth of output pixels (3025 at padding 2):
// a few microseconds of work, where one more launch (a padded copy) costs
// more than it saves. output_pixels counts the whole batch's.
inline bool one_small_image(int64_t output_pixels) { return output_pixels <= 4096; }
inline bool one_small_image(const ProblemBase& p) { return one_small_image(p.N * p.P * p.Q); }

// The prefix of a kernel name run on input slices (constants.h): "pad3+"
// for one, "slice3x<n>+" for n.
inline std::string slices_prefix(int slices) {
  return slices == 0 ? "" : slices == 1 ? "pad3+" : "slice3x" + std::to_string(slices) + "+";
}

// The sizes every kernel's Params carries, as its ints: the image, filters,
// output, padding and output plane.
template <typename Params>
void set_sizes(Params& p, const ProblemBase& pr) {
  p.H = (int)pr.H;
  p.W = (int)pr.W;
  p.K = (int)pr.K;
  p.P = (int)pr.P;
  p.Q = (int)pr.Q;
  p.pad = (int)pr.pad;
  p.PQ = p.P * p.Q;
}

}  // namespace alexop::cuda
