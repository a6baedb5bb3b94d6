// NCHW <-> channels_last copies and zero-padded NCHW copies (relayout.h).

#include "relayout.h"

#include "launch.h"

#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace alexop::cuda {
namespace {

constexpr int kTile = 32, kRows = 8;  // a 32 x 32 tile, 8 rows of threads

// One image's (HW x C) channels_last matrix to its (C x HW) NCHW one, or
// back (TO_NCHW false); blockIdx: x a tile of pixels, y of channels, z the
// image. Both the read and the write run along 32 consecutive elements.
template <typename T, bool TO_NCHW>
__global__ void relayout_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t HW, int64_t C) {
  __shared__ T tile[kTile][kTile + 1];
  const int64_t image = (int64_t)blockIdx.z * HW * C;
  const int64_t p0 = (int64_t)blockIdx.x * kTile, c0 = (int64_t)blockIdx.y * kTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int i = ty; i < kTile; i += kRows) {
    if (TO_NCHW) {  // rows of channels of one pixel
      const int64_t p = p0 + i, c = c0 + tx;
      if (p < HW && c < C) tile[i][tx] = in[image + p * C + c];
    } else {  // rows of pixels of one channel
      const int64_t c = c0 + i, p = p0 + tx;
      if (p < HW && c < C) tile[tx][i] = in[image + c * HW + p];
    }
  }
  __syncthreads();
  for (int i = ty; i < kTile; i += kRows) {
    if (TO_NCHW) {
      const int64_t c = c0 + i, p = p0 + tx;
      if (p < HW && c < C) out[image + c * HW + p] = tile[tx][i];
    } else {
      const int64_t p = p0 + i, c = c0 + tx;
      if (p < HW && c < C) out[image + p * C + c] = tile[i][tx];
    }
  }
}

template <typename T>
void launch(const at::Tensor& in, const at::Tensor& out, bool to_nchw) {
  const int64_t N = in.size(0), C = in.size(1), HW = in.size(2) * in.size(3);
  const dim3 grid((unsigned)((HW + kTile - 1) / kTile), (unsigned)((C + kTile - 1) / kTile), (unsigned)N);
  const dim3 block(kTile, kRows);
  auto stream = c10::cuda::getCurrentCUDAStream();
  const auto* src = static_cast<const T*>(in.const_data_ptr());
  auto* dst = static_cast<T*>(out.data_ptr());
  if (to_nchw) {
    relayout_kernel<T, true><<<grid, block, 0, stream>>>(src, dst, HW, C);
  } else {
    relayout_kernel<T, false><<<grid, block, 0, stream>>>(src, dst, HW, C);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// An NCHW tensor of C channels whose pixel is 8, 16, 32 or 64 bytes to
// channels_last, where the tile kernel would leave most of a warp idle on
// the channels' side: a thread reads the C channels of PIX pixels (a warp's
// loads along a channel's row, C * PIX of them in flight) and writes each
// pixel's channels as whole 8- or 16-byte stores, a warp's 32 pixels one
// contiguous span. T: the elements' bits.
template <typename T, int C, int PIX>
__global__ void __launch_bounds__(256) pixels_to_nhwc_kernel(const T* __restrict__ in, T* __restrict__ out,
                                                             int HW, int pixels) {
  constexpr int kBytes = C * sizeof(T);
  static_assert(kBytes == 8 || kBytes % 16 == 0, "whole 8- or 16-byte stores");
  using V = std::conditional_t<kBytes == 8, uint2, uint4>;
  constexpr int kVecs = kBytes / sizeof(V);
  const int q0 = blockIdx.x * blockDim.x * PIX + threadIdx.x;
  T v[PIX][C];
#pragma unroll
  for (int j = 0; j < PIX; ++j) {
    const int q = q0 + j * blockDim.x, n = q / HW;
    const T* src = in + int64_t{n} * HW * C + (q - n * HW);
#pragma unroll
    for (int c = 0; c < C; ++c) {
      if (q < pixels) v[j][c] = src[int64_t{c} * HW];
    }
  }
#pragma unroll
  for (int j = 0; j < PIX; ++j) {
    const int q = q0 + j * blockDim.x;
    if (q >= pixels) continue;
    V w[kVecs];
    memcpy(w, v[j], kBytes);
    V* dst = reinterpret_cast<V*>(out + int64_t{q} * C);
#pragma unroll
    for (int i = 0; i < kVecs; ++i) dst[i] = w[i];
  }
}

template <typename T, int C>
void launch_pixels_to_nhwc(const at::Tensor& in, const at::Tensor& out) {
  constexpr int kThreads = 256, kPix = C >= 16 ? 1 : 16 / C;  // 16 loads in flight a thread at least
  const int64_t HW = in.size(2) * in.size(3), pixels = in.size(0) * HW;
  const int64_t blocks = (pixels + kThreads * kPix - 1) / (kThreads * kPix);
  pixels_to_nhwc_kernel<T, C, kPix><<<(unsigned)blocks, kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      static_cast<const T*>(in.const_data_ptr()), static_cast<T*>(out.mutable_data_ptr()), (int)HW, (int)pixels);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The pixels_to_nhwc_kernel launcher for x's element size and channels;
// null where none is built (pixels of other sizes, or past 32-bit pixel
// counts: ATen's copy).
using PixelsLauncher = void (*)(const at::Tensor&, const at::Tensor&);
PixelsLauncher pixels_to_nhwc_for(const at::Tensor& x) {
  const int64_t C = x.size(1);
  if (x.numel() == 0 || x.numel() / C >= INT32_MAX - 4096) return nullptr;
  if (x.element_size() == 2) {
    return C == 4 ? launch_pixels_to_nhwc<uint16_t, 4>
         : C == 8 ? launch_pixels_to_nhwc<uint16_t, 8>
         : C == 16 ? launch_pixels_to_nhwc<uint16_t, 16> : nullptr;
  }
  return C == 2 ? launch_pixels_to_nhwc<uint32_t, 2>
       : C == 4 ? launch_pixels_to_nhwc<uint32_t, 4>
       : C == 8 ? launch_pixels_to_nhwc<uint32_t, 8>
       : C == 16 ? launch_pixels_to_nhwc<uint32_t, 16> : nullptr;
}

// Strides of a 4-D input, in elements: within an image 32-bit offsets (the
// launcher checks that an image's span fits), which keep the kernel's
// registers few enough for every thread slot of an SM.
struct Strides4 {
  int64_t n;
  int c, h, w;
};

// Rows of the image a thread copies at most, one column of each: their
// loads of a channel issue together. A pixel's few channels alone left too
// few loads in flight to keep the memory busy (docs/perf-history.md S47).
constexpr int kBand = 8;

// out[n][c][h][w] = x[n][c][h][w] for c < C and w < W, else 0; blockIdx.x
// an (image, band of `band` <= kBand rows), y a block of columns. T: the
// elements' bits (a copy needs no arithmetic, so any dtype of that size).
template <typename T>
__global__ void __launch_bounds__(256) zero_padded_copy_kernel(const T* __restrict__ x, T* __restrict__ out,
                                                               Strides4 s, int C, int channels, int H, int W,
                                                               int width, int band, int bands) {
  const int w = blockIdx.y * blockDim.x + threadIdx.x;
  if (w >= width) return;
  const int n = blockIdx.x / bands, h0 = (blockIdx.x - n * bands) * band;
  const int rows = min(band, H - h0), plane = H * width;
  T* dst = out + int64_t{n} * channels * plane;
  const T* src = x + n * s.n;
  const int from = h0 * s.h + w * s.w, to = h0 * width + w;
  const int copied = w < W ? C : 0;
  for (int c = 0; c < copied; ++c) {
    T v[kBand];
#pragma unroll
    for (int r = 0; r < kBand; ++r) {
      if (r < rows) v[r] = src[from + c * s.c + r * s.h];
    }
#pragma unroll
    for (int r = 0; r < kBand; ++r) {
      if (r < rows) dst[to + c * plane + r * width] = v[r];
    }
  }
  for (int c = copied; c < channels; ++c) {
#pragma unroll
    for (int r = 0; r < kBand; ++r) {
      if (r < rows) dst[to + c * plane + r * width] = T{0};
    }
  }
}

// A channels_last 3-channel image of 16-bit values to NCHW, 8 pixels per
// thread: three 16-byte loads of (pixel, channel) pairs, three 16-byte
// stores of one channel's 8 pixels. hw8: pixels per image / 8.
__global__ void nhwc3_to_nchw_kernel(const uint4* __restrict__ x, uint4* __restrict__ y, int64_t groups,
                                     int64_t hw8) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < groups;
       i += int64_t{gridDim.x} * blockDim.x) {
    const uint4 in[3] = {x[3 * i], x[3 * i + 1], x[3 * i + 2]};
    uint16_t v[24];
    memcpy(v, in, sizeof(in));
    const int64_t n = i / hw8, g = i - n * hw8;
    for (int c = 0; c < 3; ++c) {
      uint16_t o[8];
      for (int p = 0; p < 8; ++p) o[p] = v[3 * p + c];
      uint4 out;
      memcpy(&out, o, sizeof(out));
      y[(n * 3 + c) * hw8 + g] = out;
    }
  }
}

// out[g][c][h][j] = x[g r + j / band][c][h][j % band] where that image
// exists, j / band < r and j % band < W; else 0. Each output element is
// written once (zeroing the whole output before copying the bands wrote
// theirs twice). A warp copies R consecutive rows of `width` elements,
// each row's source offset formed once, its lanes along the columns, two
// columns of each row a round: 2 R loads in flight a lane, since a load
// a lane in flight kept the copy far below the memory's rate. Any strides
// (grad_output may be expanded or a view): Strides4 in 64 bits.
struct Strides64 {
  int64_t n, c, h, w;
};
constexpr int kPackWarps = 4;
template <typename T, int R>
__global__ void __launch_bounds__(32 * kPackWarps) packed_copy_kernel(const T* __restrict__ x, T* __restrict__ out,
                                                                      Strides64 s, int64_t N, int C, int H, int W,
                                                                      int r, int band, int width, int64_t rows) {
  const int64_t row0 = ((int64_t)blockIdx.x * kPackWarps + threadIdx.y) * R;
  const T* src[R];
  int bands[R];  // the bands of the row's packed image that hold an image (0: a row past the last)
#pragma unroll
  for (int u = 0; u < R; ++u) {
    const int64_t row = row0 + u, gc = row / H, g = gc / C;
    const int h = (int)(row - gc * H), c = (int)(gc - g * C);
    src[u] = x + g * r * s.n + c * s.c + h * s.h;
    bands[u] = row < rows ? (int)std::min<int64_t>(r, N - g * r) : 0;
  }
  T* dst = out + row0 * width;
  for (int j0 = threadIdx.x; j0 < width; j0 += 64) {
    T v[R][2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int j = j0 + 32 * e, m = j / band, col = j - m * band;
      const int64_t at = m * s.n + col * s.w;
#pragma unroll
      for (int u = 0; u < R; ++u) v[u][e] = m < bands[u] && col < W && j < width ? src[u][at] : T{0};
    }
#pragma unroll
    for (int u = 0; u < R; ++u) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int j = j0 + 32 * e;
        if (row0 + u < rows && j < width) dst[u * width + j] = v[u][e];
      }
    }
  }
}

// Rows a warp copies: as many as leave about 32 warps an SM (the loads in
// flight a lane grow with the rows, the warps in flight shrink).
template <typename T>
void launch_packed_copy(const at::Tensor& t, const at::Tensor& out, int64_t r, int64_t band) {
  const int64_t rows = out.numel() / out.size(3);
  const int64_t warps = 32 * at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  int R = 1;
  while (R < 8 && rows / (2 * R) >= warps) R *= 2;
  const int64_t blocks = (rows + kPackWarps * R - 1) / (kPackWarps * R);
  TORCH_INTERNAL_ASSERT(blocks <= INT32_MAX, "packed_copy: ", out.sizes());
  const Strides64 s{t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
  const auto* x = static_cast<const T*>(t.const_data_ptr());
  auto* y = static_cast<T*>(out.mutable_data_ptr());
  const dim3 block(32, kPackWarps);
  auto stream = c10::cuda::getCurrentCUDAStream();
  auto go = [&](auto kernel) {
    kernel<<<(unsigned)blocks, block, 0, stream>>>(x, y, s, t.size(0), (int)t.size(1), (int)t.size(2),
                                                   (int)t.size(3), (int)r, (int)band, (int)out.size(3), rows);
  };
  switch (R) {
    case 1: go(packed_copy_kernel<T, 1>); break;
    case 2: go(packed_copy_kernel<T, 2>); break;
    case 4: go(packed_copy_kernel<T, 4>); break;
    default: go(packed_copy_kernel<T, 8>); break;
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The band: kBand rows, or fewer where that would leave an SM without a
// block (a single image: its loads spread over more SMs instead).
int64_t copy_band(int64_t N, int64_t H, int64_t column_blocks) {
  const int64_t blocks = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  int64_t band = kBand;
  while (band > 1 && N * ((H + band - 1) / band) * column_blocks < blocks) band /= 2;
  return band;
}

template <typename T>
void launch_zero_padded_copy(const at::Tensor& x, const at::Tensor& out) {
  const int64_t width = out.size(3);
  const int threads = (int)std::min<int64_t>(256, (width + 31) / 32 * 32);
  const int64_t column_blocks = (width + threads - 1) / threads;
  const int64_t band = copy_band(x.size(0), x.size(2), column_blocks), bands = (x.size(2) + band - 1) / band;
  const dim3 grid((unsigned)(x.size(0) * bands), (unsigned)column_blocks);
  const Strides4 s{x.stride(0), (int)x.stride(1), (int)x.stride(2), (int)x.stride(3)};
  zero_padded_copy_kernel<T><<<grid, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      static_cast<const T*>(x.const_data_ptr()), static_cast<T*>(out.mutable_data_ptr()), s, (int)x.size(1),
      (int)out.size(1), (int)x.size(2), (int)x.size(3), (int)width, (int)band, (int)bands);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

at::Tensor relayout(const at::Tensor& t, at::MemoryFormat layout) {
  if (t.is_contiguous(layout)) return t;
  const auto nchw = at::MemoryFormat::Contiguous, nhwc = at::MemoryFormat::ChannelsLast;
  const bool to_nchw = layout == nchw;
  // the tile kernel serves the dense 4-D layouts of the fallbacks' dtypes
  // with rows of 32 channels or more (fewer leave most of a warp idle on
  // the channels' side), grids of at most 65535 images and channel tiles;
  // fewer channels to NCHW take zero_padded_copy, to channels_last pixels
  // of 8-64 bytes pixels_to_nhwc; anything else is ATen's copy
  const bool dense = t.dim() == 4 && t.is_contiguous(to_nchw ? nhwc : nchw);
  const auto type = t.scalar_type();
  const bool typed = type == at::kFloat || type == at::kHalf || type == at::kBFloat16;
  if (dense && to_nchw && t.size(1) < kTile) return zero_padded_copy(t, t.size(1), t.size(3));
  if (dense && typed && t.size(1) < kTile) {
    if (const auto launch_pixels = pixels_to_nhwc_for(t)) {
      auto out = at::empty(t.sizes(), t.options().memory_format(layout));
      launch_pixels(t, out);
      return out;
    }
  }
  if (!dense || !typed || t.size(1) < kTile || t.size(0) > 65535 || t.size(1) > 65535 * kTile ||
      t.numel() == 0) {
    return t.contiguous(layout);
  }
  auto out = at::empty(t.sizes(), t.options().memory_format(layout));
  if (type == at::kFloat) launch<float>(t, out, to_nchw);
  else if (type == at::kHalf) launch<__half>(t, out, to_nchw);
  else launch<__nv_bfloat16>(t, out, to_nchw);
  return out;
}

bool nhwc3_transposable(const at::Tensor& x) {
  return x.size(1) == 3 && x.element_size() == 2 && x.is_contiguous(at::MemoryFormat::ChannelsLast) &&
         x.size(2) * x.size(3) % 8 == 0 && reinterpret_cast<uintptr_t>(x.const_data_ptr()) % 16 == 0;
}

at::Tensor zero_padded_copy(const at::Tensor& x, int64_t channels, int64_t width) {
  TORCH_INTERNAL_ASSERT(x.dim() == 4 && channels >= x.size(1) && width >= x.size(3), "zero_padded_copy: ",
                        x.sizes(), " to ", channels, " channels, ", width, " columns");
  auto out = at::empty({x.size(0), channels, x.size(2), width}, x.options());
  if (out.numel() == 0) return out;
  if (channels == x.size(1) && width == x.size(3) && nhwc3_transposable(x)) {
    constexpr int kThreads = 256;
    const int64_t groups = x.numel() / 24;
    nhwc3_to_nchw_kernel<<<grid_stride_blocks(groups, kThreads), kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        static_cast<const uint4*>(x.const_data_ptr()), static_cast<uint4*>(out.mutable_data_ptr()), groups,
        x.size(2) * x.size(3) / 8);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
  }
  // the kernel loops over a pixel's channels, and a warp's loads of one
  // channel of a channels_last input stride over its pixels: it pays while
  // a pixel's channels fit 16 bytes; wider pixels (the weight gradient's
  // filter slices of grad_output, 8 float channels) ran slower than ATen's
  // copy (docs/perf-history.md S47). Also ATen's past the kernel's 32-bit
  // counts and offsets within an image.
  int64_t span = 0;
  for (int d = 1; d < 4; ++d) span += (x.size(d) - 1) * x.stride(d);
  if (x.size(1) * x.element_size() > 16 || x.size(0) * x.size(2) > INT32_MAX || span >= INT32_MAX ||
      channels * x.size(2) * width >= INT32_MAX) {
    const int64_t C = x.size(1), W = x.size(3);
    if (width > W) out.narrow(3, W, width - W).zero_();
    if (channels > C) out.narrow(1, C, channels - C).zero_();
    out.narrow(1, 0, C).narrow(3, 0, W).copy_(x);
    return out;
  }
  switch (x.element_size()) {
    case 1: launch_zero_padded_copy<uint8_t>(x, out); break;
    case 2: launch_zero_padded_copy<uint16_t>(x, out); break;
    case 4: launch_zero_padded_copy<uint32_t>(x, out); break;
    case 8: launch_zero_padded_copy<uint64_t>(x, out); break;
    default: TORCH_INTERNAL_ASSERT(false, "zero_padded_copy: ", x.scalar_type());
  }
  return out;
}

at::Tensor packed_copy(const at::Tensor& t, int64_t r, int64_t band, int64_t width) {
  TORCH_INTERNAL_ASSERT(t.dim() == 4 && r >= 1 && band >= t.size(3) && width <= r * band, "packed_copy: ",
                        t.sizes(), " as ", r, " bands of ", band, " in ", width, " columns");
  auto out = at::empty({(t.size(0) + r - 1) / r, t.size(1), t.size(2), width}, t.options());
  if (out.numel() == 0) return out;
  switch (t.element_size()) {
    case 2: launch_packed_copy<uint16_t>(t, out, r, band); break;
    case 4: launch_packed_copy<uint32_t>(t, out, r, band); break;
    default: TORCH_INTERNAL_ASSERT(false, "packed_copy: ", t.scalar_type());
  }
  return out;
}

}  // namespace alexop::cuda
