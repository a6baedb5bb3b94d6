// alexop's CPU input gradient (ops.h): the row convolution on the
// space-to-depth view of grad_output.

#include "drive.h"
#include "ops.h"

#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/nan_to_num.h>

#include <cmath>

namespace alexop::cpu {
namespace {

// Whether p[0, n) are all finite: x * 0 is 0 for finite x and NaN otherwise,
// summed in lanes the compiler vectorises.
template <typename T>
bool all_finite(const T* p, int64_t n) {
  T sum[8] = {};
  for (; n >= 8; n -= 8, p += 8) {
    for (const auto l : c10::irange(8)) {
      sum[l] += p[l] * T(0);
    }
  }
  for (const auto l : c10::irange(n)) {
    sum[l] += p[l] * T(0);
  }
  T total = 0;
  for (const auto s : sum) {
    total += s;
  }
  return total == 0;
}

// Returns whether all the gradient is finite.
template <typename T>
bool input_grad_s2d(const at::Tensor& dy, const at::Tensor& weight,
                    int64_t pad, at::Tensor& dx) {
  const auto& kern = cpu::kernels<T>(cpu::cpu_isa());
  const int64_t N = dx.size(0), C = dx.size(1), H = dx.size(2), W = dx.size(3);
  const int64_t K = dy.size(1), P = dy.size(2), Q = dy.size(3);
  const auto& tiles =
      blocking(kern.input_grad, kern.nsets, ceil_div(16 * C, kern.lanes));
  const int64_t B = tiles.kv * kern.lanes, blocks = ceil_div(16 * C, B);
  const int64_t packed_size = blocks * K * 9 * B;
  const Scratch call((packed_size + B) * sizeof(T), Use::kCall);
  T* wp = call.as<T>();
  cpu::pack_input_grad_weights(weight.const_data_ptr<T>(), K, C, B, blocks,
                               wp);
  T* zero = wp + packed_size;
  std::fill(zero, zero + B, T(0));
  // input row h = 4i + a - pad for phase a < 4; likewise columns with j, b
  const int64_t i0 = pad / 4, j0 = pad / 4;
  const int64_t I = (H - 1 + pad) / 4 - i0 + 1, J = (W - 1 + pad) / 4 - j0 + 1;
  const auto band = bands(I, N, 8);
  // grad_output rows i - 2 .. i and columns j - 2 .. j feed phase pixel (i, j)
  const int64_t pitch = J + 2;
  const int64_t band_size = K * (band.max_rows() + 2) * pitch;
  T* out = dx.mutable_data_ptr<T>();
  // dx is NCHW or channels_last
  const int64_t sN = dx.stride(0), sC = dx.stride(1), sH = dx.stride(2),
                sW = dx.stride(3);
  std::atomic<bool> finite{true};
  parallel_items<T>(N * band.count, band_size + tiles.m[0] * B,
                    [&](T* rows_dy, int64_t item) {
    T* tile = rows_dy + band_size;
    const int64_t n = item / band.count, b = item % band.count;
    const int64_t ib = i0 + band.begin(b), rows = i0 + band.begin(b + 1) - ib;
    cpu::pack_rows(strided<T>(dy, n), K, P, Q, ib - 2, rows + 2, j0 - 2,
                   pitch, rows_dy);
    for (const auto kb : c10::irange(blocks)) {
      const int64_t ln = std::min(B, 16 * C - kb * B);
      for_each_tile(tiles, rows * J, J, pitch, 1, [&](
                        cpu::RowConvFn<T> fn, const int64_t* offsets,
                        int64_t first, int64_t m) {
        fn(rows_dy, offsets, (rows + 2) * pitch, pitch, K, 3,
           wp + kb * K * 9 * B, zero, tile);
        if (!all_finite(tile, m * B)) {
          finite.store(false, std::memory_order_relaxed);
        }
        // lanes 4g .. 4g + 3 are the column phases of channel g / 4 at row
        // phase g % 4: four neighbours in an input row
        for (const auto mm : c10::irange(m)) {
          const int64_t i = ib + (first + mm) / J, j = j0 + (first + mm) % J;
          const int64_t w0 = 4 * j - pad;
          const bool inside = w0 >= 0 && w0 + 4 <= W;
          for (int64_t g = kb * B / 4; g < (kb * B + ln) / 4; ++g) {
            const int64_t h = 4 * i + g % 4 - pad;
            if (h < 0 || h >= H) {
              continue;
            }
            const T* src = tile + mm * B + 4 * g - kb * B;
            T* dst = out + n * sN + g / 4 * sC + h * sH + w0 * sW;
            if (inside && sW == 1) {
              std::copy(src, src + 4, dst);
              continue;
            }
            for (const auto b4 : c10::irange(4)) {
              if (w0 + b4 >= 0 && w0 + b4 < W) {
                dst[b4 * sW] = src[b4];
              }
            }
          }
        }
      });
    }
  });
  return finite.load();
}

// dx += the terms of F.conv2d's input gradient that pair a non-finite
// grad_output or weight element with the other operand, each pair once.
template <typename T>
void add_nonfinite_terms(const at::Tensor& dy, const at::Tensor& weight,
                         int64_t pad, at::Tensor& dx) {
  const int64_t N = dx.size(0), C = dx.size(1), H = dx.size(2), W = dx.size(3);
  const int64_t K = dy.size(1), P = dy.size(2), Q = dy.size(3);
  const auto g = dy.accessor<T, 4>();
  const auto w = weight.accessor<T, 4>();
  auto out = dx.accessor<T, 4>();
  // term(n, k, p, q, c, r, s) adds w[k][c][r][s] * g[n][k][p][q] where the
  // tap lands in the image
  const auto term = [&](int64_t n, int64_t k, int64_t p, int64_t q, int64_t c,
                        int64_t r, int64_t s) {
    const int64_t h = kStride * p + r - pad, col = kStride * q + s - pad;
    if (h >= 0 && h < H && col >= 0 && col < W) {
      out[n][c][h][col] += w[k][c][r][s] * g[n][k][p][q];
    }
  };
  for (const auto n : c10::irange(N)) {
    for (const auto k : c10::irange(K)) {
      for (const auto p : c10::irange(P)) {
        for (const auto q : c10::irange(Q)) {
          if (std::isfinite(g[n][k][p][q])) {
            continue;
          }
          for (const auto c : c10::irange(C)) {
            for (const auto r : c10::irange(kKernelSize)) {
              for (const auto s : c10::irange(kKernelSize)) {
                term(n, k, p, q, c, r, s);
              }
            }
          }
        }
      }
    }
  }
  for (const auto k : c10::irange(K)) {
    for (const auto c : c10::irange(C)) {
      for (const auto r : c10::irange(kKernelSize)) {
        for (const auto s : c10::irange(kKernelSize)) {
          if (std::isfinite(w[k][c][r][s])) {
            continue;
          }
          for (const auto n : c10::irange(N)) {
            for (const auto p : c10::irange(P)) {
              for (const auto q : c10::irange(Q)) {
                if (std::isfinite(g[n][k][p][q])) {
                  term(n, k, p, q, c, r, s);
                }
              }
            }
          }
        }
      }
    }
  }
}

// The space-to-depth view multiplies the taps past the 11x11 kernel (zero
// weights) by grad_output too, which makes NaN of an Inf that F.conv2d never
// multiplies: when the gradient comes out non-finite, it is computed again
// without the non-finite grad_output and weight elements, and their terms are
// added one by one.
template <typename T>
void input_grad(const at::Tensor& dy, const at::Tensor& weight, int64_t pad,
                at::Tensor& dx) {
  if (input_grad_s2d<T>(dy, weight, pad, dx)) {
    return;
  }
  input_grad_s2d<T>(at::nan_to_num(dy, 0, 0, 0),
                    at::nan_to_num(weight, 0, 0, 0).contiguous(), pad, dx);
  add_nonfinite_terms<T>(dy, weight, pad, dx);
}

}  // namespace

at::Tensor input_grad_alexop(
    const at::Tensor& grad_output, const at::Tensor& weight, at::IntArrayRef input_size, int64_t padding) {
  if (is_reduced(grad_output)) {
    return input_grad_alexop(grad_output.to(at::kFloat), weight.to(at::kFloat), input_size, padding)
        .to(grad_output.scalar_type());
  }
  auto grad_input =
      at::empty(input_size, grad_output.options().memory_format(output_memory_format(grad_output, weight)));
  advise_huge_pages(grad_input);
  const auto w = weight.contiguous();
  AT_DISPATCH_FLOATING_TYPES(grad_output.scalar_type(), "conv11s4_backward_input_cpu", [&] {
    input_grad<scalar_t>(grad_output, w, padding, grad_input);
  });
  return grad_input;
}

}  // namespace alexop::cpu
