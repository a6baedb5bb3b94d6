// The space-to-depth view for cuDNN (space_to_depth.h).

#include "space_to_depth.h"

#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace alexop::cuda {
namespace {

constexpr int kCols = 32;  // blocks a CTA of one block row
constexpr int kPix = 4 * kCols;
// A staged row's pitch: four elements more, so that the channels_last
// writes' reads of consecutive rows fall in different banks.
constexpr int kPitch = kPix + 4;
constexpr int kThreads = 256;
constexpr int kMaxChannels = 16;  // the staged rows fit the default 48 KB
// Loads a thread has in flight in the copies of NCHW rows: each load's
// values go to shared memory, so a thread that stored them before its next
// load would wait for every load. More cost registers, which the copies of
// channels_last tensors (a unit or two a thread) spend better on more CTAs.
constexpr int kRowBatch = 4;

// Units [0, units) of a CTA's copy, kBatch a thread loaded before any is
// stored: load(u, buf) reads unit u into buf (false: nothing to store),
// place(buf) stores it.
template <int kBatch, typename B, typename Load, typename Place>
__device__ __forceinline__ void in_batches(int units, Load&& load, Place&& place) {
  for (int u0 = threadIdx.x; u0 < units; u0 += kBatch * kThreads) {
    B buf[kBatch];
    bool got[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) got[b] = u0 + b * kThreads < units && load(u0 + b * kThreads, buf[b]);
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (got[b]) place(buf[b]);
    }
  }
}

// Zeros a CTA's staged rows (C channels' 4 rows), then waits for all.
template <typename T>
__device__ __forceinline__ void clear(T* tile, int C) {
  for (int e = threadIdx.x; e < C * 4 * kPitch * (int)sizeof(T) / 16; e += kThreads) {
    reinterpret_cast<uint4*>(tile)[e] = make_uint4(0, 0, 0, 0);
  }
  __syncthreads();
}

// An aligned 16-byte piece of a run of contiguous values (16-bit rows are
// rarely 16-byte aligned: odd widths, the padding's offset).
template <typename T>
struct Piece {
  static constexpr int kE = 16 / sizeof(T);  // values a piece
  T v[kE];
  int k;    // the first value's place in the run (< 0: before it)
  int row;  // the staged row it goes to
  // The p-th aligned piece from the one that holds run[0] (k its place).
  template <typename P>
  __device__ __forceinline__ P* at(P* run, int p) {
    P* piece = reinterpret_cast<P*>(reinterpret_cast<uintptr_t>(run) & ~uintptr_t{15}) + p * kE;
    k = (int)(piece - run);
    return piece;
  }
  // Reads the p-th piece, unless it starts at or past run[len].
  __device__ __forceinline__ bool load(const T* run, int p, int len) {
    const T* piece = at(run, p);
    if (k >= len) return false;
    *reinterpret_cast<uint4*>(v) = __ldg(reinterpret_cast<const uint4*>(piece));
    return true;
  }
  // Writes the values that fall in run[0, len) to piece: a whole one as a
  // vector, one that reaches past them (its other values another CTA's) a
  // value at a time.
  __device__ __forceinline__ void store(T* piece, int len) const {
    if (k >= 0 && k + kE <= len) {
      *reinterpret_cast<uint4*>(piece) = *reinterpret_cast<const uint4*>(v);
      return;
    }
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      if (k + e >= 0 && k + e < len) piece[e] = v[e];
    }
  }
  // Pieces that cover a run of len values.
  static __device__ __forceinline__ int cover(int len) { return len > 0 ? len / kE + 2 : 0; }
};

// Block row i, blocks [j0, j0 + tw) of image n: the block row's 4 input
// rows of every channel staged as [c][a][pixel] (zeros outside the image),
// then written as the blocks' 16C channels: a channels_last view a thread 4
// values b = 0..3 of one (block, c, a), one vector on both sides; an NCHW
// one a thread a value, along the view's rows. The input is read in aligned
// 16-byte pieces: an NCHW one the pieces of each channel's rows, a
// channels_last one those of the 4 rows' runs of pixels and channels, spread
// over the threads. T: the elements' bits.
template <typename T, bool NHWC_IN, bool NHWC_OUT>
__global__ void __launch_bounds__(kThreads) space_to_depth_kernel(const T* __restrict__ x, T* __restrict__ y, int N,
                                                                  int C, int H, int W, int pad, int rows, int cols,
                                                                  int tw) {
  using V = std::conditional_t<sizeof(T) == 2, uint2, uint4>;  // 4 elements
  extern __shared__ __align__(16) unsigned char smem[];
  T* tile = reinterpret_cast<T*>(smem);
  const int tiles = (cols + tw - 1) / tw;
  const int i = blockIdx.x / tiles, j0 = (blockIdx.x - i * tiles) * tw;
  const int nj = cols - j0 < tw ? cols - j0 : tw, h0 = 4 * i - pad, w0 = 4 * j0 - pad, D = 16 * C;
  const int lo = w0 > 0 ? w0 : 0, hi = w0 + 4 * nj < W ? w0 + 4 * nj : W;  // the image columns read
  const bool inside = h0 >= 0 && h0 + 4 <= H && w0 >= 0 && w0 + 4 * nj <= W;
  for (int n = blockIdx.y; n < N; n += gridDim.y) {
    const T* img = x + int64_t{n} * C * H * W;
    if (!inside) clear(tile, C);
    if constexpr (NHWC_IN) {
      // a row's pixels [lo, hi) are (hi - lo) * C contiguous values
      const int span = (hi - lo) * C, pieces = Piece<T>::cover(span);
      in_batches<1, Piece<T>>(
          4 * pieces,
          [&](int u, Piece<T>& p) {
            p.row = u / pieces;
            const int h = h0 + p.row;
            return h >= 0 && h < H && p.load(img + (int64_t{h} * W + lo) * C, u - p.row * pieces, span);
          },
          [&](const Piece<T>& p) {
            int k = p.k, c = (k % C + C) % C, px = lo - w0 + (k - c) / C;  // value k's channel and pixel
#pragma unroll
            for (int e = 0; e < Piece<T>::kE; ++e, ++k) {
              if (k >= 0 && k < span) tile[(c * 4 + p.row) * kPitch + px] = p.v[e];
              if (++c == C) c = 0, ++px;
            }
          });
    } else {
      const int len = hi - lo, pieces = Piece<T>::cover(len);
      in_batches<kRowBatch, Piece<T>>(
          4 * C * pieces,
          [&](int u, Piece<T>& p) {
            p.row = u / pieces;  // 4c + a
            const int h = h0 + p.row % 4;
            return h >= 0 && h < H &&
                   p.load(img + (int64_t{p.row / 4} * H + h) * W + lo, u - p.row * pieces, len);
          },
          [&](const Piece<T>& p) {
            T* to = tile + p.row * kPitch + lo - w0;
#pragma unroll
            for (int e = 0; e < Piece<T>::kE; ++e) {
              if (p.k + e >= 0 && p.k + e < len) to[p.k + e] = p.v[e];
            }
          });
    }
    __syncthreads();
    if constexpr (NHWC_OUT) {
      T* out = y + ((int64_t{n} * rows + i) * cols + j0) * D;
      for (int e = threadIdx.x; e < nj * 4 * C; e += kThreads) {
        const int q = e / (4 * C), ca = e - q * 4 * C;  // channels 16c + 4a + [0, 4) = 4ca + [0, 4)
        *reinterpret_cast<V*>(out + int64_t{q} * D + 4 * ca) = *reinterpret_cast<const V*>(tile + ca * kPitch + 4 * q);
      }
    } else {
      for (int e = threadIdx.x; e < D * nj; e += kThreads) {
        const int d = e / nj, q = e - d * nj;
        y[((int64_t{n} * D + d) * rows + i) * cols + j0 + q] = tile[(d >> 2) * kPitch + 4 * q + (d & 3)];
      }
    }
    __syncthreads();
  }
}

// The inverse: block row i, blocks [j0, j0 + tw) of the input's blocks
// (ceil((H + pad) / 4) x ceil((W + pad) / 4) of them, so that every pixel
// is written) of image n: their 16C channels read from the view (zeros past
// its rows and columns) into [c][a][pixel], then written as the input's
// rows that the block row holds. A channels_last view is read 4 values a
// thread, an NCHW one in the aligned 16-byte pieces of its rows; the result
// is written in the aligned pieces of its rows' runs (NCHW: a channel's
// columns; channels_last: the pixels' channels).
template <typename T, bool NHWC_VIEW, bool NHWC_OUT>
__global__ void __launch_bounds__(kThreads) depth_to_space_kernel(const T* __restrict__ v, T* __restrict__ dx, int N,
                                                                  int C, int H, int W, int pad, int rows, int cols,
                                                                  int bcols, int tw) {
  using V = std::conditional_t<sizeof(T) == 2, uint2, uint4>;  // 4 elements
  extern __shared__ __align__(16) unsigned char smem[];
  T* tile = reinterpret_cast<T*>(smem);
  const int tiles = (bcols + tw - 1) / tw;
  const int i = blockIdx.x / tiles, j0 = (blockIdx.x - i * tiles) * tw;
  const int nj = bcols - j0 < tw ? bcols - j0 : tw, w0 = 4 * j0 - pad, D = 16 * C, row = 4 * nj;
  const int vj = i < rows ? (cols - j0 < nj ? cols - j0 : nj) : 0;  // blocks the view holds
  for (int n = blockIdx.y; n < N; n += gridDim.y) {
    if constexpr (NHWC_VIEW) {
      const T* in = v + ((int64_t{n} * rows + i) * cols + j0) * D;
      for (int e = threadIdx.x; e < nj * 4 * C; e += kThreads) {
        const int q = e / (4 * C), ca = e - q * 4 * C;
        *reinterpret_cast<V*>(tile + ca * kPitch + 4 * q) =
            q < vj ? *reinterpret_cast<const V*>(in + int64_t{q} * D + 4 * ca) : V{};
      }
    } else {
      if (vj < nj) clear(tile, C);  // blocks past the view's: zeros
      const int pieces = Piece<T>::cover(vj);
      in_batches<kRowBatch, Piece<T>>(
          D * pieces,
          [&](int u, Piece<T>& p) {
            p.row = u / pieces;  // the view's channel d
            return p.load(v + ((int64_t{n} * D + p.row) * rows + i) * cols + j0, u - p.row * pieces, vj);
          },
          [&](const Piece<T>& p) {
            T* to = tile + (p.row >> 2) * kPitch + (p.row & 3);
#pragma unroll
            for (int e = 0; e < Piece<T>::kE; ++e) {
              if (p.k + e >= 0 && p.k + e < vj) to[4 * (p.k + e)] = p.v[e];
            }
          });
    }
    __syncthreads();
    T* img = dx + int64_t{n} * C * H * W;
    const int lo = w0 > 0 ? w0 : 0, hi = w0 + row < W ? w0 + row : W;  // the image columns written
    if constexpr (NHWC_OUT) {
      // a row's pixels [lo, hi) are (hi - lo) * C contiguous values
      const int span = (hi - lo) * C, pieces = Piece<T>::cover(span);
      for (int u = threadIdx.x; u < 4 * pieces; u += kThreads) {
        const int a = u / pieces, h = 4 * i + a - pad;
        if (h < 0 || h >= H) continue;
        Piece<T> p;
        T* piece = p.at(img + (int64_t{h} * W + lo) * C, u - a * pieces);
        if (p.k >= span) continue;
        int k = p.k, c = (k % C + C) % C, px = lo - w0 + (k - c) / C;  // value k's channel and pixel
#pragma unroll
        for (int e = 0; e < Piece<T>::kE; ++e, ++k) {
          p.v[e] = k >= 0 && k < span ? tile[(c * 4 + a) * kPitch + px] : T(0);
          if (++c == C) c = 0, ++px;
        }
        p.store(piece, span);
      }
    } else {
      const int len = hi - lo, pieces = Piece<T>::cover(len);
      for (int u = threadIdx.x; u < 4 * C * pieces; u += kThreads) {
        const int r = u / pieces, h = 4 * i + r % 4 - pad;  // r = 4c + a
        if (h < 0 || h >= H) continue;
        Piece<T> p;
        T* piece = p.at(img + (int64_t{r / 4} * H + h) * W + lo, u - r * pieces);
        if (p.k >= len) continue;
        const T* from = tile + r * kPitch + lo - w0 + p.k;
#pragma unroll
        for (int e = 0; e < Piece<T>::kE; ++e) p.v[e] = p.k + e >= 0 && p.k + e < len ? from[e] : T(0);
        p.store(piece, len);
      }
    }
    __syncthreads();
  }
}

template <typename T, bool NHWC_IN>
void launch(const at::Tensor& x, const at::Tensor& y, int64_t pad, bool nhwc_out) {
  const int64_t N = x.size(0), C = x.size(1), rows = y.size(2), cols = y.size(3);
  // as few tiles a block row as kCols allow, of even widths
  const int64_t tiles = (cols + kCols - 1) / kCols, tw = (cols + tiles - 1) / tiles;
  const dim3 grid((unsigned)(rows * tiles), (unsigned)std::min<int64_t>(N, 65535));
  const size_t smem = C * 4 * kPitch * sizeof(T);
  const auto* src = static_cast<const T*>(x.const_data_ptr());
  auto* dst = static_cast<T*>(y.mutable_data_ptr());
  auto stream = c10::cuda::getCurrentCUDAStream();
  const int H = (int)x.size(2), W = (int)x.size(3);
  if (nhwc_out) {
    space_to_depth_kernel<T, NHWC_IN, true><<<grid, kThreads, smem, stream>>>(
        src, dst, (int)N, (int)C, H, W, (int)pad, (int)rows, (int)cols, (int)tw);
  } else {
    space_to_depth_kernel<T, NHWC_IN, false><<<grid, kThreads, smem, stream>>>(
        src, dst, (int)N, (int)C, H, W, (int)pad, (int)rows, (int)cols, (int)tw);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T, bool NHWC_VIEW>
void launch_inverse(const at::Tensor& v, const at::Tensor& dx, int64_t pad, bool nhwc_out) {
  const int64_t N = dx.size(0), C = dx.size(1), H = dx.size(2), W = dx.size(3);
  const int64_t brows = (H + pad + 3) / 4, bcols = (W + pad + 3) / 4;
  const int64_t tiles = (bcols + kCols - 1) / kCols, tw = (bcols + tiles - 1) / tiles;
  const dim3 grid((unsigned)(brows * tiles), (unsigned)std::min<int64_t>(N, 65535));
  const size_t smem = C * 4 * kPitch * sizeof(T);
  const auto* src = static_cast<const T*>(v.const_data_ptr());
  auto* dst = static_cast<T*>(dx.mutable_data_ptr());
  auto stream = c10::cuda::getCurrentCUDAStream();
  const int rows = (int)v.size(2), cols = (int)v.size(3);
  if (nhwc_out) {
    depth_to_space_kernel<T, NHWC_VIEW, true><<<grid, kThreads, smem, stream>>>(
        src, dst, (int)N, (int)C, (int)H, (int)W, (int)pad, rows, cols, (int)bcols, (int)tw);
  } else {
    depth_to_space_kernel<T, NHWC_VIEW, false><<<grid, kThreads, smem, stream>>>(
        src, dst, (int)N, (int)C, (int)H, (int)W, (int)pad, rows, cols, (int)bcols, (int)tw);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// t dense in its layout (one dense both ways, one channel or one pixel, is
// read as NCHW) from a 16-byte aligned start, which the copies' 16-byte
// pieces and vectors read from.
at::Tensor dense_aligned(const at::Tensor& t) {
  auto in = t.is_contiguous() || t.is_contiguous(at::MemoryFormat::ChannelsLast) ? t : t.contiguous();
  return reinterpret_cast<uintptr_t>(in.const_data_ptr()) % 16 == 0 ? in : in.clone();
}

}  // namespace

bool space_to_depth_fits(at::IntArrayRef input_size, at::ScalarType dtype) {
  const bool typed = dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16;
  return typed && input_size[1] <= kMaxChannels && input_size[1] * input_size[2] * input_size[3] < INT32_MAX;
}

at::Tensor space_to_depth(const at::Tensor& x, int64_t padding, int64_t rows, int64_t cols, at::MemoryFormat layout) {
  TORCH_INTERNAL_ASSERT(space_to_depth_fits(x.sizes(), x.scalar_type()));
  const int64_t N = x.size(0), C = x.size(1);
  const auto in = dense_aligned(x);
  const bool nhwc_in = !in.is_contiguous(), nhwc_out = layout == at::MemoryFormat::ChannelsLast;
  auto y = at::empty({N, 16 * C, rows, cols}, in.options().memory_format(layout));
  if (y.numel() == 0) return y;
  if (in.element_size() == 2) {
    nhwc_in ? launch<uint16_t, true>(in, y, padding, nhwc_out) : launch<uint16_t, false>(in, y, padding, nhwc_out);
  } else {
    nhwc_in ? launch<uint32_t, true>(in, y, padding, nhwc_out) : launch<uint32_t, false>(in, y, padding, nhwc_out);
  }
  return y;
}

at::Tensor depth_to_space(const at::Tensor& v, int64_t padding, int64_t height, int64_t width,
                          at::MemoryFormat layout) {
  const int64_t N = v.size(0), C = v.size(1) / 16;
  TORCH_INTERNAL_ASSERT(v.size(1) % 16 == 0 && space_to_depth_fits({N, C, height, width}, v.scalar_type()));
  const auto in = dense_aligned(v);
  const bool nhwc_view = !in.is_contiguous(), nhwc_out = layout == at::MemoryFormat::ChannelsLast;
  auto dx = at::empty({N, C, height, width}, in.options().memory_format(layout));
  if (dx.numel() == 0) return dx;
  if (in.element_size() == 2) {
    nhwc_view ? launch_inverse<uint16_t, true>(in, dx, padding, nhwc_out)
              : launch_inverse<uint16_t, false>(in, dx, padding, nhwc_out);
  } else {
    nhwc_view ? launch_inverse<uint32_t, true>(in, dx, padding, nhwc_out)
              : launch_inverse<uint32_t, false>(in, dx, padding, nhwc_out);
  }
  return dx;
}

at::Tensor space_to_depth_weight(const at::Tensor& w, at::MemoryFormat layout) {
  const int64_t K = w.size(0), C = w.size(1);
  return at::constant_pad_nd(w, {0, 1, 0, 1})
      .reshape({K, C, 3, 4, 3, 4})
      .permute({0, 1, 3, 5, 2, 4})
      .reshape({K, 16 * C, 3, 3})
      .contiguous(layout);
}

at::Tensor depth_to_space_weight(const at::Tensor& w) {
  const int64_t K = w.size(0), C = w.size(1) / 16;
  return w.reshape({K, C, 4, 4, 3, 3})
      .permute({0, 1, 4, 2, 5, 3})
      .reshape({K, C, 12, 12})
      .slice(2, 0, 11)
      .slice(3, 0, 11)
      .contiguous();
}

}  // namespace alexop::cuda
