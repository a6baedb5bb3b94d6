// CPU kernels. The convolution is a GEMM over an unfolded input, built for a
// bounded chunk of images at a time (a few MB, reused across chunks: a
// buffer as large as the batch spent as much time in page faults as in
// copying); the unfolding runs on all cores and the GEMMs go to ATen's BLAS.
// The forward and weight gradient unfold pixel-major (one row of 363 taps
// per output pixel: each (c, r) is a run of 11 consecutive input columns),
// which is also the layout the forward GEMM runs fastest with; the input
// gradient folds a tap-major matrix back. float16 and bfloat16 (what CPU
// autocast produces) are computed in float32.

#include "../conv11s4.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#include <algorithm>

namespace alexop {
namespace {

constexpr int64_t kTaps = kKernelSize * kKernelSize;
// Unfolded elements per chunk: 2 Mi elements (8 MB in float32), one
// 224x224 image.
constexpr int64_t kChunkElements = int64_t{1} << 21;

struct Geometry {
  int64_t C, H, W, P, Q, pad;
  int64_t rows() const { return C * kTaps; }
  int64_t cols() const { return P * Q; }
  // Output positions q whose input column 4q + s - pad lies inside [0, W).
  std::pair<int64_t, int64_t> valid_q(int64_t s) const {
    const int64_t first = s - pad, last = W - 1 + pad - s;  // iw = 4q + first
    if (last < 0) {
      return {0, 0};
    }
    const int64_t lo = first >= 0 ? 0 : (-first + kStride - 1) / kStride;
    const int64_t hi = std::min<int64_t>(Q, last / kStride + 1);  // exclusive
    return {std::min(lo, hi), hi};
  }
};

Geometry geometry(int64_t C, int64_t H, int64_t W, int64_t P, int64_t Q,
                  int64_t pad) {
  return Geometry{C, H, W, P, Q, pad};
}

int64_t chunk_images(const Geometry& g, int64_t n) {
  return std::clamp<int64_t>(kChunkElements / (g.rows() * g.cols()), 1, n);
}

// cols[b, p*Q + q, c*121 + r*11 + s] = x[b, c, 4p + r - pad, 4q + s - pad],
// zero outside the image.
template <typename T>
void unfold(const T* x, const Geometry& g, int64_t images, T* cols) {
  const int64_t rows = g.rows();
  at::parallel_for(0, images * g.P, 1, [&](int64_t begin, int64_t end) {
    for (const auto i : c10::irange(begin, end)) {
      const int64_t b = i / g.P, p = i % g.P;
      for (const auto q : c10::irange(g.Q)) {
        T* dst = cols + (i * g.Q + q) * rows;
        const int64_t w0 = kStride * q - g.pad;  // input column of s = 0
        const int64_t s_lo = std::clamp<int64_t>(-w0, 0, kKernelSize);
        const int64_t s_hi = std::clamp<int64_t>(g.W - w0, s_lo, kKernelSize);
        for (const auto c : c10::irange(g.C)) {
          const T* plane = x + (b * g.C + c) * g.H * g.W;
          for (const auto r : c10::irange(kKernelSize)) {
            T* out = dst + c * kTaps + r * kKernelSize;
            const int64_t h = kStride * p + r - g.pad;
            if (h < 0 || h >= g.H) {
              std::fill(out, out + kKernelSize, T(0));
              continue;
            }
            const T* in = plane + h * g.W;
            if (s_lo == 0 && s_hi == kKernelSize) {
              // interior: a fixed-length copy the compiler unrolls
              for (const auto s : c10::irange(kKernelSize)) {
                out[s] = in[w0 + s];
              }
              continue;
            }
            std::fill(out, out + s_lo, T(0));
            std::copy(in + w0 + s_lo, in + w0 + s_hi, out + s_lo);
            std::fill(out + s_hi, out + kKernelSize, T(0));
          }
        }
      }
    }
  });
}

// x[b, c, 4p + r - pad, 4q + s - pad] += cols[b, c*121 + r*11 + s, p*Q + q]:
// the adjoint of unfold, from the tap-major matrix W^T . dy.
// Each task owns whole (image, channel) planes, so there are no races and
// the summation order is fixed.
template <typename T>
void fold_add(const T* cols, const Geometry& g, int64_t images, T* x) {
  at::parallel_for(0, images * g.C, 1, [&](int64_t begin, int64_t end) {
    for (const auto plane_index : c10::irange(begin, end)) {
      T* plane = x + plane_index * g.H * g.W;
      const T* src = cols + plane_index * kTaps * g.cols();
      for (const auto r : c10::irange(kKernelSize)) {
        for (const auto s : c10::irange(kKernelSize)) {
          const T* row = src + (r * kKernelSize + s) * g.cols();
          const auto [q_lo, q_hi] = g.valid_q(s);
          for (const auto p : c10::irange(g.P)) {
            const int64_t h = kStride * p + r - g.pad;
            if (h < 0 || h >= g.H) {
              continue;
            }
            T* out = plane + h * g.W + s - g.pad;
            const T* in = row + p * g.Q;
            for (int64_t q = q_lo; q < q_hi; ++q) {
              out[kStride * q] += in[q];
            }
          }
        }
      }
    }
  });
}

bool is_reduced(const at::Tensor& t) {
  return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
}

const at::ScalarType kCpuTypes[] = {
    at::kFloat, at::kDouble, at::kHalf, at::kBFloat16};

at::Tensor conv11s4_cpu(
    const at::Tensor& input,
    const at::Tensor& weight,
    const std::optional<at::Tensor>& bias_opt,
    int64_t padding) {
  const auto size = check_conv11s4(input, weight, bias_opt, padding);
  check_dtype("alexop.conv11s4", input, kCpuTypes, "CPU");
  const bool has_bias = bias_opt.has_value() && bias_opt->defined();
  if (is_reduced(input)) {
    const auto bias = has_bias
        ? std::optional<at::Tensor>(bias_opt->to(at::kFloat))
        : std::nullopt;
    return conv11s4_cpu(
               input.to(at::kFloat), weight.to(at::kFloat), bias, padding)
        .to(input.scalar_type());
  }
  const int64_t N = size[0].expect_int(), K = size[1].expect_int();
  const auto g = geometry(
      input.size(1), input.size(2), input.size(3), size[2].expect_int(),
      size[3].expect_int(), padding);
  auto output = at::empty({N, K, g.P, g.Q}, input.options());
  if (N == 0) {
    return output;
  }
  const auto x = input.contiguous();
  const auto w = weight.contiguous().view({K, g.rows()});
  const auto bias = has_bias ? bias_opt->view({K, 1}) : at::Tensor();
  const int64_t chunk = chunk_images(g, N);
  auto cols = at::empty({chunk, g.cols(), g.rows()}, x.options());
  auto y = output.view({N, K, g.cols()});
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    const int64_t nb = std::min(chunk, N - n0);
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "conv11s4_cpu", [&] {
      unfold(x.const_data_ptr<scalar_t>() + n0 * g.C * g.H * g.W, g, nb,
             cols.mutable_data_ptr<scalar_t>());
    });
    // One GEMM per image straight into its output plane, the bias as the
    // GEMM's addend: no batched copy of the weight, no extra pass.
    for (const auto b : c10::irange(nb)) {
      auto y_b = y[n0 + b];
      const auto cols_b = cols[b].t();
      if (has_bias) {
        at::addmm_out(y_b, bias, w, cols_b);
      } else {
        at::mm_out(y_b, w, cols_b);
      }
    }
  }
  return output;
}

at::Tensor conv11s4_backward_input_cpu(
    const at::Tensor& grad_output,
    const at::Tensor& weight,
    c10::SymIntArrayRef input_size_sym,
    int64_t padding) {
  check_conv11s4_backward_input(grad_output, weight, input_size_sym, padding);
  check_dtype(
      "alexop.conv11s4_backward_input", grad_output, kCpuTypes, "CPU");
  if (is_reduced(grad_output)) {
    return conv11s4_backward_input_cpu(
               grad_output.to(at::kFloat), weight.to(at::kFloat),
               input_size_sym, padding)
        .to(grad_output.scalar_type());
  }
  const auto input_size = C10_AS_INTARRAYREF_SLOW(input_size_sym);
  const int64_t N = input_size[0], K = weight.size(0);
  const auto g = geometry(
      input_size[1], input_size[2], input_size[3], grad_output.size(2),
      grad_output.size(3), padding);
  auto grad_input = at::zeros(input_size, grad_output.options());
  if (N == 0) {
    return grad_input;
  }
  const auto go = grad_output.contiguous();
  const auto wt = weight.contiguous().view({K, g.rows()}).t();
  const int64_t chunk = chunk_images(g, N);
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    const int64_t nb = std::min(chunk, N - n0);
    const auto cols =
        at::matmul(wt, go.narrow(0, n0, nb).view({nb, K, g.cols()}));
    AT_DISPATCH_FLOATING_TYPES(go.scalar_type(), "conv11s4_backward_input_cpu", [&] {
      fold_add(cols.const_data_ptr<scalar_t>(), g, nb,
               grad_input.mutable_data_ptr<scalar_t>() +
                   n0 * g.C * g.H * g.W);
    });
  }
  return grad_input;
}

std::tuple<at::Tensor, at::Tensor> conv11s4_backward_weight_cpu(
    const at::Tensor& grad_output,
    const at::Tensor& input,
    int64_t padding,
    bool bias_grad) {
  const auto wsize =
      check_conv11s4_backward_weight(grad_output, input, padding);
  check_dtype("alexop.conv11s4_backward_weight", input, kCpuTypes, "CPU");
  if (is_reduced(input)) {
    auto [gw, gb] = conv11s4_backward_weight_cpu(
        grad_output.to(at::kFloat), input.to(at::kFloat), padding, bias_grad);
    return {gw.to(input.scalar_type()), gb.to(input.scalar_type())};
  }
  const int64_t N = input.size(0), K = wsize[0].expect_int();
  const auto g = geometry(
      input.size(1), input.size(2), input.size(3), grad_output.size(2),
      grad_output.size(3), padding);
  auto grad_weight = at::zeros({K, g.rows()}, input.options());
  auto grad_bias = at::empty({bias_grad ? K : 0}, input.options());
  if (bias_grad) {
    grad_bias.copy_(at::sum(grad_output, {0, 2, 3}));
  }
  if (N == 0) {
    return {grad_weight.view({K, g.C, kKernelSize, kKernelSize}), grad_bias};
  }
  const auto x = input.contiguous();
  const auto go = grad_output.contiguous();
  const int64_t chunk = chunk_images(g, N);
  auto cols = at::empty({chunk, g.cols(), g.rows()}, x.options());
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    const int64_t nb = std::min(chunk, N - n0);
    auto cols_nb = cols.narrow(0, 0, nb);
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "conv11s4_backward_weight_cpu", [&] {
      unfold(x.const_data_ptr<scalar_t>() + n0 * g.C * g.H * g.W, g, nb,
             cols_nb.mutable_data_ptr<scalar_t>());
    });
    const auto g_nb = go.narrow(0, n0, nb).view({nb, K, g.cols()});
    for (const auto b : c10::irange(nb)) {
      grad_weight.addmm_(g_nb[b], cols_nb[b]);
    }
  }
  return {grad_weight.view({K, g.C, kKernelSize, kKernelSize}), grad_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(alexop, CPU, m) {
  m.impl("conv11s4", &conv11s4_cpu);
  m.impl("conv11s4_backward_input", &conv11s4_backward_input_cpu);
  m.impl("conv11s4_backward_weight", &conv11s4_backward_weight_cpu);
}

}  // namespace alexop
