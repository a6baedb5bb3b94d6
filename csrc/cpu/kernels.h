#pragma once
// The CPU micro-kernels' interface: one table of function pointers per
// instruction set and dtype, filled by a translation unit compiled for that
// instruction set (kernels_avx512.cpp, kernels_avx2.cpp, kernels_default.cpp).
// Everything outside those files is portable code that picks a table at run
// time, as ATen's DispatchStub does.

#include <cstdint>

namespace alexop::cpu {

enum class Isa { kDefault, kAvx2, kAvx512 };

// The best instruction set this CPU runs, lowered by the environment variable
// ALEXOP_CPU_CAPABILITY (default, avx2 or avx512), read at every call so
// tests can force the portable kernels.
Isa cpu_isa();

// "default", "avx2" or "avx512", as ALEXOP_CPU_CAPABILITY names them.
const char* isa_name(Isa isa);

// Row convolution, the forward's and input gradient's inner product:
//   out[m][j] = init[j] + sum over c < nchan, r < nrows, s < S of
//               w[((c * nrows + r) * S + s) * B + j]
//             * in[c * cstride + r * rstride + offsets[m] + s]
// for m < M pixels and j < B = kv * lanes output channels. The forward runs
// it with S = 11 on input rows, the input gradient with S = 3 on rows of
// grad_output (a space-to-depth view of the stride). A tile's pixels may lie
// on different rows: the offsets place each.
template <typename T>
using RowConvFn = void (*)(const T* in, const int64_t* offsets,
                           int64_t cstride, int64_t rstride, int64_t nchan,
                           int64_t nrows, const T* w, const T* init, T* out);

// One register blocking of the row convolution: kv vectors of output
// channels times m[i] pixels; m is {largest, 4, 2, 1}, so any number of
// pixels splits into tiles with no pixel computed twice.
constexpr int kMaxTilePixels = 24;
// Output channels in a block (kv * lanes) at most.
constexpr int kMaxLanes = 64;

template <typename T>
struct RowConvTiles {
  int kv;
  int cost;  // a vector's time relative to the widest blockings', in tenths
  int m[4];
  RowConvFn<T> fn[4];
};

// Weight gradient over R rows of S taps:
//   acc[(r * S + s) * B + j] += sum over p < rows, q < Q of
//       dyt[(p * Q + q) * B + j] * x[p * xstep + q * xstride + r * rstride + s]
// for j < B = kv * lanes output channels. The direct weight gradient runs
// it with R = 1, S = 11 over pixels 4 input columns apart; the Winograd one
// with R = 2, S = 4 over transformed tiles.
template <typename T>
using WgradFn = void (*)(const T* x, int64_t xstep, int64_t xstride,
                         int64_t rstride, const T* dyt, int64_t rows,
                         int64_t Q, T* acc);

// One register blocking of the weight gradient: kv vectors of output
// channels (B = kv * lanes).
template <typename T>
struct WgradTiles {
  int kv;
  int cost;  // as RowConvTiles'
  WgradFn<T> fn;
};

// dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols: between the
// tiles' pixel-major and the tensors' channel-major layouts.
template <typename T>
using TransposeFn = void (*)(const T* src, int64_t lds, int64_t rows,
                             int64_t cols, T* dst, int64_t ldd);

// Winograd F(2x2, 3x3) on the forward's space-to-depth view (input channel
// c at row phase a and column phase b is channel 16c + 4a + b of a stride-1
// convolution with 3x3 taps), for the 16x16 input block of one 2x2 output
// tile: v[xi * xi_stride + c * 64 + a * 16 + nu * 4 + b] = (B^T d B)[xi][nu]
// of channel 16c + 4a + b, d read from in[c * cstride + row * pitch + col].
template <typename T>
using WinogradInputFn = void (*)(const T* in, int64_t pitch, int64_t cstride,
                                 int64_t C, T* v, int64_t xi_stride);

// The weight gradient's counterpart for grad_output: for the 2x2 pixels
// (2t, 2t + 1) of rows g0 and g1 (pixel-major, B lanes a pixel; g1 null or
// a pixel past Q reads as zero), d[(4 xi + nu) * plane + t * B + j] =
// (A g A^T)[xi][nu], t < n.
template <typename T>
using WinogradGradInputFn = void (*)(const T* g0, const T* g1, int64_t Q,
                                     int64_t n, int64_t B, T* d,
                                     int64_t plane);

// And back: for tiles t < n and lanes j < B, with m[(4 xi + nu) * plane +
// t * B + j] the transformed products, out[dp * row_stride + (2t + dq) * B +
// j] = bias[j] + (A^T m A)[dp][dq]. Returns whether all are finite.
template <typename T>
using WinogradOutputFn = bool (*)(const T* m, int64_t plane, int64_t n,
                                  int64_t B, const T* bias, T* out,
                                  int64_t row_stride);

// Winograd F(2x2, 3x3) on the same view with tiles in lanes rather than
// output channels, for a band of `rows` tile rows of J tiles: for NCHW
// outputs of one channel (select.h), whose output transform and
// transposition would cost as much as the products. band[c * cstride + r * pitch + col] holds
// the band's 8 rows + 8 input rows and pitch = row_pitch(J) columns (zero
// padded); u the transformed weights in blocks of kRowFilters output
// channels (pack_winograd_weights' layout with B = kRowFilters), bias padded
// likewise. Writes output rows [0, out_rows) of the K planes `plane` apart
// from y, Q pixels a row, and returns whether all are finite. scratch holds
// rows_scratch(C, rows * J, out_rows * Q, the band's values) values.
constexpr int64_t kRowFilters = 12;
constexpr int64_t kRowVectors = 2;  // of 16 tiles, a register block
constexpr int64_t row_vectors(int64_t tiles) { return (tiles + 15) / 16; }
// 8 columns a tile and 8 past the last, in whole vectors of 16 tiles
constexpr int64_t row_pitch(int64_t J) { return 128 * ((J + 16) / 16); }
constexpr int64_t rows_scratch(int64_t C, int64_t tiles, int64_t out_pixels, int64_t band_values) {
  return 16 * 16 * (16 * C * row_vectors(tiles) + kRowFilters * kRowVectors) +
         kRowFilters * out_pixels + band_values;
}
template <typename T>
using WinogradRowsFn = bool (*)(const T* band, int64_t pitch, int64_t cstride,
                                int64_t C, int64_t rows, int64_t J, const T* u,
                                int64_t K, const T* bias, T* scratch, T* y,
                                int64_t out_rows, int64_t Q, int64_t plane);

template <typename T>
struct Kernels {
  int lanes;
  int nsets;
  RowConvTiles<T> forward[4];  // S = 11
  RowConvTiles<T> input_grad[4];  // S = 3, same blockings
  int wgrad_kv;
  WgradFn<T> wgrad;  // R = 1, S = 11
  TransposeFn<T> transpose;
  // null where the forward runs direct
  WinogradInputFn<T> winograd_input;
  WinogradOutputFn<T> winograd_output;
  RowConvTiles<T> winograd_products[4];  // S = 4, the forward's blockings
  WinogradGradInputFn<T> winograd_grad_input;
  // R = 2, S = 4; 3 vectors of output channels, and 2 where 3 pads a
  // third more (64 filters at 16 lanes: 4 vectors, not 6)
  WgradTiles<T> winograd_grad[2];
  WinogradRowsFn<T> winograd_rows;  // null but for AVX-512 float32
};

template <typename T>
const Kernels<T>& kernels(Isa isa);

// The per-instruction-set tables; avx2 and avx512 exist on x86-64 only.
template <typename T>
const Kernels<T>& kernels_default();
template <typename T>
const Kernels<T>& kernels_avx2();
template <typename T>
const Kernels<T>& kernels_avx512();

}  // namespace alexop::cpu
