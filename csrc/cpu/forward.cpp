// alexop's CPU forward (ops.h): Winograd on the space-to-depth view where the
// instruction set has it, the direct row convolution otherwise.

#include "drive.h"
#include "ops.h"

#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>

namespace alexop::cpu {
namespace {

constexpr int64_t kFlushPixels = 16;

// dst[0, length) = the bias, then zeros: the micro-kernels' starting
// values, whole blocks of lanes.
template <typename T>
void pad_bias(const T* bias, int64_t K, int64_t length, T* dst) {
  std::fill(dst, dst + length, T(0));
  if (bias != nullptr) {
    std::copy(bias, bias + K, dst);
  }
}

// Writes npix consecutive pixels of image n (from flat pixel pix0 on), their
// kn channels k0.. from rows of B values a pixel: transposed into y's NCHW
// planes, or copied a pixel's channels at a time into a channels_last y.
template <typename T>
void store_pixels(const cpu::Kernels<T>& kern, const T* rows, int64_t B,
                  int64_t npix, int64_t kn, T* y, bool nhwc, int64_t n,
                  int64_t k0, int64_t pix0, int64_t K, int64_t PQ) {
  if (!nhwc) {
    kern.transpose(rows, B, npix, kn, y + (n * K + k0) * PQ + pix0, PQ);
    return;
  }
  T* dst = y + (n * PQ + pix0) * K + k0;
  for (const auto i : c10::irange(npix)) {
    std::copy_n(rows + i * B, kn, dst + i * K);
  }
}

// Winograd F(2x2, 3x3) on the space-to-depth view: per 2x2 output tile,
// 16 products of 16C channels instead of 4 x 121C taps. Tiles are grouped
// by up to kGroup along a tile row; each group's transformed input is
// multiplied by the row-convolution micro-kernel (S = 4) for each of the 16
// (xi, nu) and every block of output channels, then transformed back.
constexpr int64_t kGroup = 8;

template <typename T>
bool forward_winograd(const cpu::Kernels<T>& kern, const at::Tensor& x,
                      const at::Tensor& weight, const T* bias, int64_t pad,
                      at::Tensor& y) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t K = y.size(1), P = y.size(2), Q = y.size(3);
  const auto& tiles =
      blocking(kern.winograd_products, kern.nsets, ceil_div(K, kern.lanes));
  const int64_t B = tiles.kv * kern.lanes, blocks = ceil_div(K, B);
  const int64_t lanes = 16 * C;
  const int64_t packed_size = blocks * 16 * lanes * B;
  const Scratch call((packed_size + (blocks + 1) * B) * sizeof(T), Use::kCall);
  T* wp = call.as<T>();
  parallel_filters<T>(blocks, B, [&](int64_t k0, int64_t k1) {
    cpu::pack_winograd_weights(weight.const_data_ptr<T>(), K, C, B, blocks, k0, k1, wp);
  });
  // the products start at zero (the block past the bias's), the outputs at
  // the bias
  T* init = wp + packed_size;
  pad_bias(bias, K, (blocks + 1) * B, init);
  const int64_t I = ceil_div(P, 2), J = ceil_div(Q, 2);  // tiles
  const auto band = bands(I, N, 4);
  // a tile row covers 8 input rows and reads 16
  const int64_t pitch = 8 * J + 8, height = 8 * band.max_rows() + 8;
  const int64_t band_size = C * height * pitch;
  // transformed input: [xi][tile][c][a][nu][b]
  const int64_t tile = winograd_tile_values<T>(C);
  const int64_t v_stride = kGroup * tile, v_size = 4 * v_stride;
  const int64_t m_size = 16 * kGroup * B;
  const int64_t out_size = 2 * 2 * kGroup * B;
  T* out = y.mutable_data_ptr<T>();
  const bool nhwc = !y.is_contiguous();
  std::atomic<bool> finite{true};
  parallel_items<T>(N * band.count, band_size + v_size + m_size + out_size,
                    [&](T* rows_in, int64_t item) {
    T* v = rows_in + band_size;
    T* products = v + v_size;
    T* rows_out = products + m_size;
    const int64_t n = item / band.count, b = item % band.count;
    const int64_t i0 = band.begin(b), rows = band.begin(b + 1) - i0;
    const int64_t band_height = 8 * rows + 8;
    cpu::pack_rows(strided<T>(x, n), C, H, W, 8 * i0 - pad, band_height,
                   -pad, pitch, rows_in);
    int64_t offsets[kGroup];
    for (const auto g : c10::irange(kGroup)) {
      offsets[g] = g * tile;
    }
    for (const auto i : c10::irange(rows)) {
      for (int64_t j0 = 0; j0 < J;) {
        int t = 0;
        while (tiles.m[t] > std::min(kGroup, J - j0)) {
          ++t;
        }
        const int64_t group = tiles.m[t];
        for (const auto g : c10::irange(group)) {
          kern.winograd_input(rows_in + 8 * i * pitch + 8 * (j0 + g), pitch,
                              band_height * pitch, C, v + g * tile,
                              v_stride);
        }
        const int64_t p = 2 * (i0 + i), q = 2 * j0;
        const int64_t height_out = std::min<int64_t>(2, P - p);
        const int64_t width = std::min(2 * group, Q - q);
        for (const auto kb : c10::irange(blocks)) {
          const int64_t k0 = kb * B, kn = std::min(B, K - k0);
          // the NCHW output lines are fetched while the products compute
          for (const auto j : c10::irange(nhwc ? 0 : kn)) {
            for (const auto dp : c10::irange(height_out)) {
              const T* row = out + ((n * K + k0 + j) * P + p + dp) * Q + q;
              __builtin_prefetch(row, 1);
              __builtin_prefetch(row + width - 1, 1);
            }
          }
          for (const auto xi : c10::irange(4)) {
            for (const auto nu : c10::irange(4)) {
              tiles.fn[t](v + xi * v_stride + nu * 4, offsets, 64, 16,
                          C, 4, wp + (kb * 16 + 4 * xi + nu) * lanes * B,
                          init + blocks * B,
                          products + (4 * xi + nu) * kGroup * B);
            }
          }
          if (!kern.winograd_output(products, kGroup * B, group, B,
                                    init + k0, rows_out, 2 * kGroup * B)) {
            finite.store(false, std::memory_order_relaxed);
          }
          for (const auto dp : c10::irange(height_out)) {
            store_pixels(kern, rows_out + dp * 2 * kGroup * B, B, width, kn,
                         out, nhwc, n, k0, (p + dp) * Q + q, K, P * Q);
          }
        }
        j0 += group;
      }
    }
  });
  return finite.load();
}

// The same products with tiles in lanes (kernels.h: WinogradRowsFn), a
// band of tile rows of an image an item.
template <typename T>
bool forward_winograd_rows(const cpu::Kernels<T>& kern, const at::Tensor& x,
                           const at::Tensor& weight, const T* bias,
                           int64_t pad, at::Tensor& y) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t K = y.size(1), P = y.size(2), Q = y.size(3);
  constexpr int64_t B = cpu::kRowFilters;
  const int64_t blocks = ceil_div(K, B);
  const int64_t packed_size = blocks * 16 * 16 * C * B;
  const Scratch call((packed_size + blocks * B) * sizeof(T), Use::kCall);
  T* wp = call.as<T>();
  parallel_filters<T>(blocks, B, [&](int64_t k0, int64_t k1) {
    cpu::pack_winograd_weights(weight.const_data_ptr<T>(), K, C, B, blocks, k0, k1, wp);
  });
  T* init = wp + packed_size;
  pad_bias(bias, K, blocks * B, init);
  const int64_t I = ceil_div(P, 2), J = ceil_div(Q, 2);
  const auto band = bands(I, N, 4);
  const int64_t pitch = cpu::row_pitch(J), height = 8 * band.max_rows() + 8;
  const int64_t band_size = C * height * pitch;
  T* out = y.mutable_data_ptr<T>();
  std::atomic<bool> finite{true};
  parallel_items<T>(N * band.count,
                    band_size + cpu::rows_scratch(C, band.max_rows() * J, 2 * band.max_rows() * Q, band_size),
                    [&](T* rows_in, int64_t item) {
    const int64_t n = item / band.count, b = item % band.count;
    const int64_t i0 = band.begin(b), rows = band.begin(b + 1) - i0;
    const int64_t band_height = 8 * rows + 8;
    cpu::pack_rows(strided<T>(x, n), C, H, W, 8 * i0 - pad, band_height,
                   -pad, pitch, rows_in);
    if (!kern.winograd_rows(rows_in, pitch, band_height * pitch, C, rows, J,
                            wp, K, init, rows_in + band_size,
                            out + (n * K * P + 2 * i0) * Q,
                            std::min(2 * rows, P - 2 * i0), Q, P * Q)) {
      finite.store(false, std::memory_order_relaxed);
    }
  });
  return finite.load();
}

// rows: the selector's choice of the Winograd forward with tiles in lanes
// (select.h), where the instruction set has it.
template <typename T>
void forward(const at::Tensor& x, const at::Tensor& weight, const T* bias,
             int64_t pad, bool rows, at::Tensor& y) {
  const auto& kern = cpu::kernels<T>(cpu::cpu_isa());
  // Winograd's transforms make NaN of an Inf that the sums of products keep
  // (Inf - Inf), and read input past the 11x11 windows: outputs that come
  // out non-finite are computed again directly, with F.conv2d's products.
  if (rows && kern.winograd_rows != nullptr) {
    if (forward_winograd_rows(kern, x, weight, bias, pad, y)) return;
  } else if (kern.winograd_input != nullptr &&
             forward_winograd(kern, x, weight, bias, pad, y)) {
    return;
  }
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t K = y.size(1), P = y.size(2), Q = y.size(3);
  const auto& tiles =
      blocking(kern.forward, kern.nsets, ceil_div(K, kern.lanes));
  const int64_t B = tiles.kv * kern.lanes, blocks = ceil_div(K, B);
  const int64_t packed_size = blocks * C * kTaps * B;
  const Scratch call((packed_size + blocks * B) * sizeof(T), Use::kCall);
  T* wp = call.as<T>();
  cpu::pack_forward_weights(weight.const_data_ptr<T>(), K, C, B, blocks, wp);
  T* init = wp + packed_size;
  pad_bias(bias, K, blocks * B, init);
  const auto band = bands(P, N, 8);
  const int64_t pitch = 4 * Q + 7;
  const int64_t band_size = C * (4 * band.max_rows() + 7) * pitch;
  T* out = y.mutable_data_ptr<T>();
  const bool nhwc = !y.is_contiguous();
  parallel_items<T>(N * band.count,
                    band_size + (kFlushPixels + cpu::kMaxTilePixels) * B,
                    [&](T* rows_in, int64_t item) {
    T* tile = rows_in + band_size;
    const int64_t n = item / band.count, b = item % band.count;
    const int64_t p0 = band.begin(b), rows = band.begin(b + 1) - p0;
    const int64_t height = 4 * rows + 7;
    cpu::pack_rows(strided<T>(x, n), C, H, W, 4 * p0 - pad, height, -pad,
                   pitch, rows_in);
    for (const auto kb : c10::irange(blocks)) {
      const int64_t k0 = kb * B, kn = std::min(B, K - k0);
      // a band's pixels are consecutive in each output plane; tiles are
      // transposed into the planes 16 pixels or more at a time, whole cache
      // lines rather than halves (channels_last: copied, a pixel at a time)
      const T* y_band = out + ((n * K + k0) * P + p0) * Q;
      int64_t pending = 0;
      for_each_tile(tiles, rows * Q, Q, 4 * pitch, 4, [&](
                        cpu::RowConvFn<T> fn, const int64_t* offsets,
                        int64_t first, int64_t m) {
        if (pending == 0) {
          // the group's NCHW output lines are fetched while its tiles compute
          for (const auto j : c10::irange(nhwc ? 0 : kn)) {
            const T* line = y_band + j * P * Q + first;
            __builtin_prefetch(line, 1);
            __builtin_prefetch(line + kFlushPixels - 1, 1);
          }
        }
        fn(rows_in, offsets, height * pitch, pitch, C, kKernelSize,
           wp + kb * C * kTaps * B, init + k0, tile + pending * B);
        pending += m;
        if (pending >= kFlushPixels || first + m == rows * Q) {
          store_pixels(kern, tile, B, pending, kn, out, nhwc, n, k0,
                       p0 * Q + first + m - pending, K, P * Q);
          pending = 0;
        }
      });
    }
  });
}

}  // namespace

at::Tensor forward_alexop(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias_opt,
                          int64_t padding, bool rows, at::IntArrayRef out_size) {
  const bool has_bias = bias_opt.has_value() && bias_opt->defined();
  if (is_reduced(input)) {
    const auto bias = has_bias ? std::optional<at::Tensor>(bias_opt->to(at::kFloat)) : std::nullopt;
    return forward_alexop(input.to(at::kFloat), weight.to(at::kFloat), bias, padding, rows, out_size)
        .to(input.scalar_type());
  }
  auto output = at::empty(out_size, input.options().memory_format(output_memory_format(input, weight)));
  advise_huge_pages(output);
  const auto w = weight.contiguous();
  const auto bias = has_bias ? bias_opt->contiguous() : at::Tensor();
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "conv11s4_cpu", [&] {
    forward<scalar_t>(input, w, has_bias ? bias.const_data_ptr<scalar_t>() : nullptr, padding, rows, output);
  });
  return output;
}

}  // namespace alexop::cpu
