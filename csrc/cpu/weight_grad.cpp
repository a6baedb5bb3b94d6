// alexop's CPU weight and bias gradient (ops.h): Winograd on the
// space-to-depth view where the instruction set has it, sums over pixels
// otherwise; partial sums per slice of the batch, added in a fixed order.

#include "drive.h"
#include "ops.h"

#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <cmath>
#include <iterator>

namespace alexop::cpu {
namespace {

// The weight gradient's reduction over pixels: the N x R rows of the batch
// (R a image) are split into `slices` equal runs, each summed by one thread
// into a partial of its own, a band of at most max_rows rows of one image at
// a time (body(scratch, partial, n, first row, rows)); then finish(sum,
// begin, end) runs over [0, count) on all threads, sum(i, n, out) adding
// elements [i, i + n) of the partials in slice order: deterministic, and the
// same for any thread count up to 4.
template <typename T, typename Body, typename Finish>
void sum_over_slices(int64_t N, int64_t R, int64_t max_rows,
                     int64_t part_size, int64_t scratch_size,
                     const Body& body, int64_t count, const Finish& finish) {
  const int64_t total = N * R;
  const int64_t slices =
      std::min(total, std::max<int64_t>(4, at::get_num_threads()));
  const Scratch call(slices * part_size * sizeof(T), Use::kCall);
  T* parts = call.as<T>();
  parallel_items<T>(slices, scratch_size, [&](T* scratch, int64_t slice) {
    T* part = parts + slice * part_size;
    std::fill(part, part + part_size, T(0));
    const int64_t end = (slice + 1) * total / slices;
    for (int64_t row = slice * total / slices; row < end;) {
      const int64_t n = row / R, r = row % R;
      const int64_t rows = std::min({max_rows, end - row, R - r});
      body(scratch, part, n, r, rows);
      row += rows;
    }
  });
  // out[0, n) = elements [i, i + n) summed over the partials in order
  const auto sum = [&](int64_t i, int64_t n, T* out) {
    std::copy(parts + i, parts + i + n, out);
    for (const auto slice : c10::irange(1, slices)) {
      const T* part = parts + slice * part_size + i;
      for (const auto m : c10::irange(n)) {
        out[m] += part[m];
      }
    }
  };
  at::parallel_for(0, count, 1, [&](int64_t begin, int64_t end) {
    finish(sum, begin, end);
  });
}

// Winograd F(3x3, 2x2), the forward's transposed: per 2x2 tile of
// grad_output, the 3x3 taps of each space-to-depth channel gain
// G^T [(A dy A^T) . (B^T d B)] G, with d the forward's 4x4 input block. The
// 16 products are summed over tiles first (the micro-kernel, R = 2 row
// phases x S = 4 column phases x blocks of output channels), G^T . G once
// at the end.
template <typename T>
bool weight_grad_winograd(const cpu::Kernels<T>& kern, const at::Tensor& dy,
                          const at::Tensor& x, int64_t pad, T* grad_weight,
                          T* grad_bias) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t K = dy.size(1), P = dy.size(2), Q = dy.size(3);
  const auto& grad = blocking(kern.winograd_grad, std::size(kern.winograd_grad), ceil_div(K, kern.lanes));
  const int64_t B = grad.kv * kern.lanes, blocks = ceil_div(K, B);
  const int64_t lanes = 16 * C;
  const int64_t I = ceil_div(P, 2), J = ceil_div(Q, 2);  // tiles
  const int64_t max_rows = 2;
  // sums[4 xi + nu][kb][16c + 4a + b][j], then the bias's
  const int64_t s_size = 16 * blocks * lanes * B;
  const int64_t pitch = 8 * J + 8;
  const int64_t band_size = C * (8 * max_rows + 8) * pitch;
  const int64_t dyt_size = blocks * 2 * max_rows * Q * B;
  // transformed input [xi][tile][c][a][nu][b], grad_output [kb][xi nu][tile]
  const int64_t tile = winograd_tile_values<T>(C);
  const int64_t v_stride = max_rows * J * tile;
  // an odd number of cache lines apart: the 16 planes the grad_output
  // transform writes at once fall in one L1 set where that is 4 KB (32
  // filters a block, 16 tiles a row)
  const int64_t line = 64 / sizeof(T);
  const int64_t d_plane = (max_rows * J * B / line | 1) * line;
  std::atomic<bool> finite{true};
  sum_over_slices<T>(
      N, I, max_rows, s_size + blocks * B,
      band_size + dyt_size + 4 * v_stride + 16 * blocks * d_plane,
      [&](T* rows_in, T* part, int64_t n, int64_t i0, int64_t rows) {
        T* dyt = rows_in + band_size;
        T* v = dyt + dyt_size;
        T* d = v + 4 * v_stride;
        const int64_t height = 8 * rows + 8;
        cpu::pack_rows(strided<T>(x, n), C, H, W, 8 * i0 - pad, height, -pad,
                       pitch, rows_in);
        const int64_t p0 = 2 * i0, prows = std::min(2 * rows, P - p0);
        cpu::pack_grad_transposed(strided<T>(dy, n), K, p0, prows, Q, B,
                                  blocks, kern.transpose, dyt);
        if (grad_bias != nullptr) {
          cpu::add_pixel_sums(dyt, blocks, prows * Q, B, part + s_size);
        }
        for (const auto i : c10::irange(rows)) {
          for (const auto j : c10::irange(J)) {
            kern.winograd_input(rows_in + 8 * (i * pitch + j), pitch,
                                height * pitch, C, v + (i * J + j) * tile,
                                v_stride);
          }
        }
        for (const auto kb : c10::irange(blocks)) {
          const T* g = dyt + kb * prows * Q * B;
          for (const auto i : c10::irange(rows)) {
            kern.winograd_grad_input(
                g + 2 * i * Q * B,
                2 * i + 1 < prows ? g + (2 * i + 1) * Q * B : nullptr, Q, J,
                B, d + kb * 16 * d_plane + i * J * B, d_plane);
          }
        }
        for (const auto e : c10::irange(16)) {  // 4 xi + nu
          for (const auto kb : c10::irange(blocks)) {
            for (const auto c : c10::irange(C)) {
              for (const auto half : c10::irange(2)) {  // row phases 2h, 2h+1
                grad.fn(
                    v + e / 4 * v_stride + c * 64 + half * 32 + e % 4 * 4, 0,
                    tile, 16, d + (kb * 16 + e) * d_plane, 1, rows * J,
                    part + ((e * blocks + kb) * lanes + c * 16 + half * 8) * B);
              }
            }
          }
        }
      },
      lanes + 1, [&](const auto& sum, int64_t begin, int64_t end) {
        for (const auto l : c10::irange(begin, end)) {
          if (l == lanes) {
            if (grad_bias != nullptr) {
              sum(s_size, K, grad_bias);
            }
            continue;
          }
          const int64_t c = l / 16, a = l / 4 % 4, b = l % 4;
          for (const auto kb : c10::irange(blocks)) {
            // the 16 sums of each output channel of the block
            T s[16][cpu::kMaxLanes];
            for (const auto e : c10::irange(16)) {
              sum(((e * blocks + kb) * lanes + l) * B, B, s[e]);
            }
            for (const auto j : c10::irange(std::min(B, K - kb * B))) {
              // G^T = [1 .5 .5 0; 0 .5 -.5 0; 0 .5 .5 1] on both sides
              double t[3][4];
              for (const auto nu : c10::irange(4)) {
                const double s0 = s[nu][j], s1 = s[4 + nu][j];
                const double s2 = s[8 + nu][j], s3 = s[12 + nu][j];
                t[0][nu] = s0 + (s1 + s2) / 2;
                t[1][nu] = (s1 - s2) / 2;
                t[2][nu] = (s1 + s2) / 2 + s3;
              }
              T* gw = grad_weight + ((kb * B + j) * C + c) * kTaps;
              for (const auto tr : c10::irange(3)) {
                const double* h = t[tr];
                const double taps[3] = {h[0] + (h[1] + h[2]) / 2,
                                        (h[1] - h[2]) / 2,
                                        (h[1] + h[2]) / 2 + h[3]};
                for (const auto u : c10::irange(3)) {
                  const int64_t r = 4 * tr + a, s_ = 4 * u + b;
                  if (r < kKernelSize && s_ < kKernelSize) {
                    gw[r * kKernelSize + s_] = T(taps[u]);
                  }
                  if (!std::isfinite(taps[u])) {
                    finite.store(false, std::memory_order_relaxed);
                  }
                }
              }
            }
          }
        }
      });
  return finite.load();
}

template <typename T>
void weight_grad(const at::Tensor& dy, const at::Tensor& x, int64_t pad,
                 T* grad_weight, T* grad_bias) {
  const auto& kern = cpu::kernels<T>(cpu::cpu_isa());
  // as the forward: non-finite results are computed again directly
  if (kern.winograd_grad[0].fn != nullptr &&
      weight_grad_winograd(kern, dy, x, pad, grad_weight, grad_bias)) {
    return;
  }
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t K = dy.size(1), P = dy.size(2), Q = dy.size(3);
  const int64_t B = kern.wgrad_kv * kern.lanes, blocks = ceil_div(K, B);
  const int64_t max_rows = 8;
  const int64_t taps_size = blocks * C * kTaps * B;
  const int64_t pitch = 4 * Q + 7;
  const int64_t band_size = C * (4 * max_rows + 7) * pitch;
  const int64_t dyt_size = blocks * max_rows * Q * B;
  sum_over_slices<T>(
      N, P, max_rows, taps_size + blocks * B, band_size + dyt_size,
      [&](T* rows_in, T* part, int64_t n, int64_t p0, int64_t rows) {
        T* dyt = rows_in + band_size;
        const int64_t height = 4 * rows + 7;
        cpu::pack_rows(strided<T>(x, n), C, H, W, 4 * p0 - pad, height, -pad,
                       pitch, rows_in);
        cpu::pack_grad_transposed(strided<T>(dy, n), K, p0, rows, Q, B,
                                  blocks, kern.transpose, dyt);
        if (grad_bias != nullptr) {
          cpu::add_pixel_sums(dyt, blocks, rows * Q, B, part + taps_size);
        }
        for (const auto kb : c10::irange(blocks)) {
          for (const auto c : c10::irange(C)) {
            for (const auto r : c10::irange(kKernelSize)) {
              kern.wgrad(rows_in + (c * height + r) * pitch, 4 * pitch, 4, 0,
                         dyt + kb * rows * Q * B, rows, Q,
                         part + ((kb * C + c) * kTaps + r * kKernelSize) * B);
            }
          }
        }
      },
      C * kTaps + 1, [&](const auto& sum, int64_t begin, int64_t end) {
        for (const auto t : c10::irange(begin, end)) {
          if (t == C * kTaps) {
            if (grad_bias != nullptr) {
              sum(taps_size, K, grad_bias);
            }
            continue;
          }
          T s[cpu::kMaxLanes];
          for (const auto kb : c10::irange(blocks)) {
            sum((kb * C * kTaps + t) * B, B, s);
            for (const auto j : c10::irange(std::min(B, K - kb * B))) {
              grad_weight[(kb * B + j) * C * kTaps + t] = s[j];
            }
          }
        }
      });
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> weight_grad_alexop(
    const at::Tensor& grad_output, const at::Tensor& input, int64_t K, int64_t padding, bool bias_grad) {
  if (is_reduced(input)) {
    auto [gw, gb] = weight_grad_alexop(grad_output.to(at::kFloat), input.to(at::kFloat), K, padding, bias_grad);
    return {gw.to(input.scalar_type()), gb.to(input.scalar_type())};
  }
  auto grad_bias = at::zeros({bias_grad ? K : 0}, input.options());
  auto grad_weight = at::empty({K, input.size(1), kKernelSize, kKernelSize}, input.options());
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "conv11s4_backward_weight_cpu", [&] {
    weight_grad<scalar_t>(grad_output, input, padding, grad_weight.mutable_data_ptr<scalar_t>(),
                          bias_grad ? grad_bias.mutable_data_ptr<scalar_t>() : nullptr);
  });
  return {grad_weight, grad_bias};
}

}  // namespace alexop::cpu
