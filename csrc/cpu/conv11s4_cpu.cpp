// CPU kernels on register-blocked micro-kernels (kernels.h). A task is a
// band of output rows of one image, packed zero-padded (so borders and any
// input strides cost nothing in the inner loops), handed to threads as they
// come free. Stride 4 is taken apart by space-to-depth: input channel c at
// row phase a and column phase b is channel 16c + 4a + b of a stride-1
// convolution with 3x3 taps. With AVX-512, the float32 forward and weight
// gradient are Winograd F(2x2, 3x3) on that view (0.53x the multiplies);
// otherwise the forward sums the 11x11 taps into blocks of output channels x
// pixels held in registers and the weight gradient sums over pixels. The
// input gradient is the row micro-kernel on the same view of grad_output.
// Weight gradients sum into per-slice partials added in a fixed order:
// deterministic, and the same for any thread count up to 4. float16 and
// bfloat16 (what CPU autocast produces) are computed in float32, or by ATen
// where the CPU multiplies them natively (select.h).

#include "../conv11s4.h"
#include "aten.h"
#include "kernels.h"
#include "packing.h"
#include "select.h"
#include "timed.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/nan_to_num.h>
#include <ATen/ops/zeros.h>
#include <c10/util/accumulate.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <memory>

namespace alexop {
namespace {

using cpu::Strided;

constexpr int64_t kTaps = kKernelSize * kKernelSize;
constexpr int64_t kFlushPixels = 16;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

template <typename T>
Strided<T> strided(const at::Tensor& t, int64_t n) {
  return {t.const_data_ptr<T>() + n * t.stride(0), t.stride(0), t.stride(1),
          t.stride(2), t.stride(3)};
}

// An extent of rows split into `count` bands whose sizes differ by at most one.
struct Bands {
  int64_t extent, count;
  int64_t begin(int64_t b) const { return b * extent / count; }
  int64_t max_rows() const { return ceil_div(extent, count); }
};

// Bands of at most max_rows rows, and enough of them for every thread to get
// several over the batch, so the last ones balance the load.
Bands bands(int64_t extent, int64_t images, int64_t max_rows) {
  const int64_t wanted = ceil_div(8 * at::get_num_threads(), images);
  return {extent, std::clamp<int64_t>(
                      std::max(ceil_div(extent, max_rows), wanted), 1, extent)};
}

// The blocking that computes nvec vectors of output channels in the least
// time: the fewest vectors, padding included, each at its blocking's cost
// (the first listed among equals).
template <typename Tiles>
const Tiles& blocking(const Tiles* sets, int nsets, int64_t nvec) {
  const auto cost = [&](int i) { return ceil_div(nvec, sets[i].kv) * sets[i].kv * sets[i].cost; };
  int best = 0;
  for (const auto i : c10::irange(1, nsets)) {
    if (cost(i) < cost(best)) {
      best = i;
    }
  }
  return sets[best];
}

// Calls run(fn, offsets, first pixel, pixels) for tiles covering pixels
// [0, count) of a band `width` pixels wide exactly; offsets[m] places pixel
// (p, q) of the tile at p * row_step + q * step.
template <typename T, typename Run>
void for_each_tile(const cpu::RowConvTiles<T>& tiles, int64_t count,
                   int64_t width, int64_t row_step, int64_t step,
                   const Run& run) {
  int64_t offsets[cpu::kMaxTilePixels];
  for (int64_t first = 0; first < count;) {
    int i = 0;
    while (tiles.m[i] > count - first) {
      ++i;
    }
    int64_t p = first / width, q = first % width;
    for (const auto m : c10::irange(tiles.m[i])) {
      offsets[m] = p * row_step + q * step;
      if (++q == width) {
        q = 0;
        ++p;
      }
    }
    run(tiles.fn[i], offsets, first, tiles.m[i]);
    first += tiles.m[i];
  }
}

// Scratch memory kept by each thread from call to call: allocating it per
// call made the allocator grow and trim its heap each time, and every page
// fault again. A call's own buffers (kCall: packed weights, partial sums,
// shared by the tasks) and a task's (kTask) are kept apart, since the
// calling thread runs tasks too. Sizes past kKeptScratch are allocated for
// the call only.
constexpr size_t kKeptScratch = size_t{32} << 20;

enum class Use { kCall, kTask };

class Scratch {
 public:
  Scratch(size_t bytes, Use use) {
    thread_local std::unique_ptr<std::byte[]> kept[2];
    thread_local size_t kept_bytes[2] = {0, 0};
    const int slot = static_cast<int>(use);
    if (bytes > kKeptScratch) {
      own_ = std::unique_ptr<std::byte[]>(new std::byte[bytes]);
      data_ = own_.get();
      return;
    }
    if (bytes > kept_bytes[slot]) {
      kept[slot] = std::unique_ptr<std::byte[]>(new std::byte[bytes]);
      kept_bytes[slot] = bytes;
    }
    data_ = kept[slot].get();
  }
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(data_);
  }

 private:
  std::unique_ptr<std::byte[]> own_;
  std::byte* data_;
};

// Calls body(scratch, item) for every item in [0, count) on all threads,
// each thread taking the next item when it is done: on a machine shared with
// other processes a descheduled thread delays only its current item, not a
// fixed share. Each thread has `scratch_size` elements of scratch.
template <typename T, typename Body>
void parallel_items(int64_t count, int64_t scratch_size, const Body& body) {
  std::atomic<int64_t> next{0};
  const int64_t threads = std::min<int64_t>(count, at::get_num_threads());
  at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
    const Scratch scratch(scratch_size * sizeof(T), Use::kTask);
    for (int64_t item = next++; item < count; item = next++) {
      body(scratch.as<T>(), item);
    }
  });
}

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
  at::parallel_for(0, blocks * B, 16, [&](int64_t k0, int64_t k1) {
    cpu::pack_winograd_weights(weight.const_data_ptr<T>(), K, C, B, blocks,
                               k0, k1, wp);
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
  const int64_t v_stride = kGroup * C * 64, v_size = 4 * v_stride;
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
      offsets[g] = g * C * 64;
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
                              band_height * pitch, C, v + g * C * 64,
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
  at::parallel_for(0, blocks * B, B, [&](int64_t k0, int64_t k1) {
    cpu::pack_winograd_weights(weight.const_data_ptr<T>(), K, C, B, blocks,
                               k0, k1, wp);
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
  const int64_t v_stride = max_rows * J * C * 64;
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
                                height * pitch, C, v + (i * J + j) * C * 64,
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
                    C * 64, 16, d + (kb * 16 + e) * d_plane, 1, rows * J,
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

// An output of more than 32 MB is memory glibc maps afresh every call, and
// the tasks fault it in 4 KB at a time (two threads then contend in the
// kernel's page allocator); asking for transparent huge pages makes that a
// few 2 MB faults. A hint: where it fails, or the pages are already there,
// nothing changes.
void advise_huge_pages(const at::Tensor& t) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const auto start = reinterpret_cast<uintptr_t>(t.data_ptr());
  const uintptr_t begin = (start + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (start + t.nbytes()) & ~(kHuge - 1);
  if (end > begin) {
    madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  }
#else
  (void)t;
#endif
}

bool is_reduced(const at::Tensor& t) {
  return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
}

const at::ScalarType kCpuTypes[] = {
    at::kFloat, at::kDouble, at::kHalf, at::kBFloat16};

// alexop's kernels, float16 and bfloat16 in float32.
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

// Each op: where its problem is asked in float32 (select.h: in_own_dtype),
// the float32 op's result converted; else ATen's convolution where the
// selector or its timing says (a 16-bit result of ATen's with non-finite
// elements computed again: oneDNN's native 16-bit kernels do not place Inf
// and NaN where float64 F.conv2d does, alexop's do), alexop's kernels
// otherwise.

at::Tensor conv11s4_cpu(
    const at::Tensor& input,
    const at::Tensor& weight,
    const std::optional<at::Tensor>& bias_opt,
    int64_t padding) {
  const auto size = check_conv11s4(input, weight, bias_opt, padding);
  check_dtype("alexop.conv11s4", input, kCpuTypes, "CPU");
  const int64_t out_size[] = {size[0].expect_int(), size[1].expect_int(),
                              size[2].expect_int(), size[3].expect_int()};
  if (c10::multiply_integers(at::IntArrayRef(out_size)) == 0) {
    return at::empty(out_size, input.options().memory_format(output_memory_format(input, weight)));
  }
  const bool has_bias = bias_opt.has_value() && bias_opt->defined();
  const auto problem = cpu::problem(input.scalar_type(), input.sizes(), weight.size(0), padding,
                                    output_memory_format(input, weight), cpu::this_cpu());
  if (!cpu::in_own_dtype(problem)) {
    const auto bias = has_bias ? std::optional<at::Tensor>(bias_opt->to(at::kFloat)) : std::nullopt;
    return conv11s4_cpu(input.to(at::kFloat), weight.to(at::kFloat), bias, padding).to(input.scalar_type());
  }
  const auto aten = [&] { return cpu::forward_aten(input, weight, bias_opt, padding); };
  const auto own = [&] {
    return forward_alexop(input, weight, bias_opt, padding, cpu::winograd_rows_forward(problem), out_size);
  };
  if (cpu::aten_timed(Decision::kCpuForward, problem, has_bias, cpu::aten_forward(problem), aten, own)) {
    auto output = aten();
    if (!is_reduced(input) || cpu::finite(output)) return output;
  }
  return own();
}

at::Tensor conv11s4_backward_input_cpu(
    const at::Tensor& grad_output,
    const at::Tensor& weight,
    c10::SymIntArrayRef input_size_sym,
    int64_t padding) {
  check_conv11s4_backward_input(grad_output, weight, input_size_sym, padding);
  check_dtype(
      "alexop.conv11s4_backward_input", grad_output, kCpuTypes, "CPU");
  const auto input_size = C10_AS_INTARRAYREF_SLOW(input_size_sym);
  const auto format = output_memory_format(grad_output, weight);
  if (c10::multiply_integers(input_size) == 0) {
    return at::empty(input_size, grad_output.options().memory_format(format));
  }
  const auto problem = cpu::problem(grad_output.scalar_type(), input_size, weight.size(0), padding, format,
                                    cpu::this_cpu());
  if (!cpu::in_own_dtype(problem)) {
    return conv11s4_backward_input_cpu(grad_output.to(at::kFloat), weight.to(at::kFloat), input_size_sym, padding)
        .to(grad_output.scalar_type());
  }
  const auto aten = [&] { return cpu::input_grad_aten(grad_output, weight, input_size, padding); };
  const auto own = [&] { return input_grad_alexop(grad_output, weight, input_size, padding); };
  if (cpu::aten_timed(Decision::kCpuInputGrad, problem, 0, cpu::aten_input_grad(problem), aten, own)) {
    auto grad_input = aten();
    if (!is_reduced(grad_output) || cpu::finite(grad_input)) return grad_input;
  }
  return own();
}

std::tuple<at::Tensor, at::Tensor> conv11s4_backward_weight_cpu(
    const at::Tensor& grad_output,
    const at::Tensor& input,
    int64_t padding,
    bool bias_grad) {
  const auto wsize =
      check_conv11s4_backward_weight(grad_output, input, padding);
  check_dtype("alexop.conv11s4_backward_weight", input, kCpuTypes, "CPU");
  const int64_t K = wsize[0].expect_int(), C = wsize[1].expect_int();
  if (input.size(0) == 0) {
    return {at::zeros({K, C, kKernelSize, kKernelSize}, input.options()),
            at::zeros({bias_grad ? K : 0}, input.options())};
  }
  const auto problem = cpu::problem(input.scalar_type(), input.sizes(), K, padding,
                                    output_memory_format(input, grad_output), cpu::this_cpu());
  if (!cpu::in_own_dtype(problem)) {
    auto [gw, gb] = conv11s4_backward_weight_cpu(grad_output.to(at::kFloat), input.to(at::kFloat), padding, bias_grad);
    return {gw.to(input.scalar_type()), gb.to(input.scalar_type())};
  }
  const auto aten = [&] { return cpu::weight_grad_aten(grad_output, input, K, padding, bias_grad); };
  const auto own = [&] { return weight_grad_alexop(grad_output, input, K, padding, bias_grad); };
  if (cpu::aten_timed(Decision::kCpuWeightGrad, problem, bias_grad, cpu::aten_weight_grad(problem), aten, own)) {
    auto [grad_weight, grad_bias] = aten();
    if (!is_reduced(input) || (cpu::finite(grad_weight) && cpu::finite(grad_bias))) return {grad_weight, grad_bias};
  }
  return own();
}

}  // namespace

TORCH_LIBRARY_IMPL(alexop, CPU, m) {
  m.impl("conv11s4", &conv11s4_cpu);
  m.impl("conv11s4_backward_input", &conv11s4_backward_input_cpu);
  m.impl("conv11s4_backward_weight", &conv11s4_backward_weight_cpu);
}

}  // namespace alexop
