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

// Block row i, blocks [j0, j0 + tw) of image n: the block row's 4 input
// rows of every channel staged as [c][a][pixel] (zeros outside the image),
// then written as the blocks' 16C channels: a channels_last view a thread 4
// values b = 0..3 of one (block, c, a), one vector on both sides; an NCHW
// one a thread a value, along the view's rows. The input is read in the
// aligned 16-byte pieces that hold the values (16-bit rows are rarely
// 16-byte aligned: odd widths, the padding's offset): an NCHW one a warp a
// channel's row, a channels_last one the 4 rows' runs of pixels and
// channels spread over the threads. T: the elements' bits.
template <typename T, bool NHWC_IN, bool NHWC_OUT>
__global__ void __launch_bounds__(kThreads) space_to_depth_kernel(const T* __restrict__ x, T* __restrict__ y, int N,
                                                                  int C, int H, int W, int pad, int rows, int cols,
                                                                  int tw) {
  using V = std::conditional_t<sizeof(T) == 2, uint2, uint4>;  // 4 elements
  constexpr int kE = 16 / sizeof(T);                           // elements a 16-byte piece
  extern __shared__ __align__(16) unsigned char smem[];
  T* tile = reinterpret_cast<T*>(smem);
  const int tiles = (cols + tw - 1) / tw;
  const int i = blockIdx.x / tiles, j0 = (blockIdx.x - i * tiles) * tw;
  const int nj = cols - j0 < tw ? cols - j0 : tw, h0 = 4 * i - pad, w0 = 4 * j0 - pad, D = 16 * C;
  const int lo = w0 > 0 ? w0 : 0, hi = w0 + 4 * nj < W ? w0 + 4 * nj : W;  // the image columns read
  const bool inside = h0 >= 0 && h0 + 4 <= H && w0 >= 0 && w0 + 4 * nj <= W;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int n = blockIdx.y; n < N; n += gridDim.y) {
    const T* img = x + int64_t{n} * C * H * W;
    if (!inside) {
      for (int e = threadIdx.x; e < C * 4 * kPitch / kE; e += kThreads) {
        reinterpret_cast<uint4*>(tile)[e] = make_uint4(0, 0, 0, 0);
      }
      __syncthreads();
    }
    // the p-th aligned 16-byte piece from the one that holds *from
    const auto piece_of = [](const T* from, int p) {
      return reinterpret_cast<const T*>(reinterpret_cast<uintptr_t>(from) & ~uintptr_t{15}) + p * kE;
    };
    const auto load = [](const T* piece, T(&v)[kE]) {
      *reinterpret_cast<uint4*>(v) = *reinterpret_cast<const uint4*>(piece);
    };
    if constexpr (NHWC_IN) {
      // a row's pixels [lo, hi) are (hi - lo) * C contiguous values; the
      // threads take the pieces of the 4 rows in turn
      const int span = (hi - lo) * C, pieces = lo < hi ? span / kE + 2 : 0;
      for (int u = threadIdx.x; u < 4 * pieces; u += kThreads) {
        const int a = u / pieces, h = h0 + a;
        if (h < 0 || h >= H) continue;
        const T* run = img + (int64_t{h} * W + lo) * C;
        const T* piece = piece_of(run, u - a * pieces);
        int k = (int)(piece - run);  // the piece's first value in the run (< 0: before it)
        if (k >= span) continue;     // past the run: not read
        T v[kE];
        load(piece, v);
        int c = (k % C + C) % C, px = lo - w0 + (k - c) / C;  // value k's channel and pixel (k may be < 0)
#pragma unroll
        for (int e = 0; e < kE; ++e, ++k) {
          if (k >= 0 && k < span) tile[(c * 4 + a) * kPitch + px] = v[e];
          if (++c == C) c = 0, ++px;
        }
      }
    } else {
      for (int r = warp; r < 4 * C; r += kThreads / 32) {  // r = 4c + a
        const int h = h0 + r % 4;
        if (h < 0 || h >= H || lo >= hi) continue;
        const T* src = img + (int64_t{r / 4} * H + h) * W + lo;
        for (int p = lane;; p += 32) {
          const T* piece = piece_of(src, p);
          const int k = (int)(piece - src);
          if (k >= hi - lo) break;  // past the row's columns: not read
          T v[kE];
          load(piece, v);
#pragma unroll
          for (int e = 0; e < kE; ++e) {
            if (k + e >= 0 && k + e < hi - lo) tile[r * kPitch + lo - w0 + k + e] = v[e];
          }
        }
      }
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
// thread; a channels_last result is written a value a thread, along its rows.
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
      for (int e = threadIdx.x; e < D * nj; e += kThreads) {
        const int d = e / nj, q = e - d * nj;
        const int64_t from = ((int64_t{n} * D + d) * rows + i) * cols + j0 + q;
        tile[(d >> 2) * kPitch + 4 * q + (d & 3)] = q < vj ? v[from] : T(0);
      }
    }
    __syncthreads();
    T* img = dx + int64_t{n} * C * H * W;
    for (int e = threadIdx.x; e < C * 4 * row; e += kThreads) {
      int c, a, px;
      if constexpr (NHWC_OUT) {
        c = e % C, px = (e / C) % row, a = e / (C * row);
      } else {
        px = e % row, a = (e / row) % 4, c = e / (4 * row);
      }
      const int h = 4 * i + a - pad, w = w0 + px;
      if (h >= 0 && h < H && w >= 0 && w < W) {
        img[NHWC_OUT ? (int64_t{h} * W + w) * C + c : (int64_t{c} * H + h) * W + w] = tile[(c * 4 + a) * kPitch + px];
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

}  // namespace

bool space_to_depth_fits(at::IntArrayRef input_size, at::ScalarType dtype) {
  const bool typed = dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16;
  return typed && input_size[1] <= kMaxChannels && input_size[1] * input_size[2] * input_size[3] < INT32_MAX;
}

at::Tensor space_to_depth(const at::Tensor& x, int64_t padding, int64_t rows, int64_t cols, at::MemoryFormat layout) {
  TORCH_INTERNAL_ASSERT(space_to_depth_fits(x.sizes(), x.scalar_type()));
  const int64_t N = x.size(0), C = x.size(1);
  // a tensor dense both ways (one channel, or one pixel) is read as NCHW
  auto in = x.is_contiguous() || x.is_contiguous(at::MemoryFormat::ChannelsLast) ? x : x.contiguous();
  // the reads take 16-byte pieces from the tensor's 16-byte aligned start
  if (reinterpret_cast<uintptr_t>(in.const_data_ptr()) % 16 != 0) in = in.clone();
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
  // a tensor dense both ways (one block) is read as NCHW
  const auto in = v.is_contiguous() || v.is_contiguous(at::MemoryFormat::ChannelsLast) ? v : v.contiguous();
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
