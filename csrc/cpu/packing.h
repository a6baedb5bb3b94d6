#pragma once
// Layout changes around the micro-kernels: zero-padded row bands of an image
// (input or grad_output, any strides), weights in the kernels' blocked
// orders, and grad_output transposed to pixel-major for the weight gradient.
// Each writes every element of its destination, so buffers are never zeroed.

#include "../conv11s4.h"
#include "kernels.h"

#include <c10/util/irange.h>

#include <algorithm>
#include <cstring>

namespace alexop::cpu {

// A 4-d tensor's data pointer and strides, in elements.
template <typename T>
struct Strided {
  const T* data;
  int64_t n, c, h, w;
};

// out[c * plane + j] = in[j * stride + c] for j < n, c < Channels: a
// channels_last row dealt out, the channel loop unrolled.
template <int Channels, typename T>
void deal(const T* in, int64_t stride, int64_t n, T* out, int64_t plane) {
  for (int64_t j = 0; j < n; ++j, in += stride) {
    for (int c = 0; c < Channels; ++c) {
      out[c * plane + j] = in[c];
    }
  }
}

// dst[c][i][j] = src[c][h0 + i][w0 + j], zero outside the H x W image,
// for c < C, i < rows, j < pitch.
template <typename T>
void pack_rows(const Strided<T>& src, int64_t C, int64_t H, int64_t W,
               int64_t h0, int64_t rows, int64_t w0, int64_t pitch, T* dst) {
  // columns j in [lo, hi) come from the image
  const int64_t lo = std::clamp<int64_t>(-w0, 0, pitch);
  const int64_t hi = std::clamp<int64_t>(W - w0, lo, pitch);
  for (const auto i : c10::irange(rows)) {
    const int64_t h = h0 + i;
    for (const auto c : c10::irange(C)) {
      T* out = dst + (c * rows + i) * pitch;
      const bool inside = h >= 0 && h < H;
      std::fill(out, out + (inside ? lo : pitch), T(0));
      std::fill(out + (inside ? hi : pitch), out + pitch, T(0));
    }
    if (h < 0 || h >= H || hi == lo) {
      continue;
    }
    const T* in = src.data + h * src.h + (w0 + lo) * src.w;
    if (src.w == 1) {
      for (const auto c : c10::irange(C)) {
        std::memcpy(dst + (c * rows + i) * pitch + lo, in + c * src.c,
                    (hi - lo) * sizeof(T));
      }
    } else if (src.c == 1 && C <= 4) {
      // channels_last: one pass over the row
      constexpr decltype(&deal<1, T>) deals[] = {&deal<1, T>, &deal<2, T>,
                                                 &deal<3, T>, &deal<4, T>};
      deals[C - 1](in, src.w, hi - lo, dst + i * pitch + lo, rows * pitch);
    } else {
      for (const auto c : c10::irange(C)) {
        T* out = dst + (c * rows + i) * pitch + lo;
        for (const auto j : c10::irange(hi - lo)) {
          out[j] = in[c * src.c + j * src.w];
        }
      }
    }
  }
}

// The forward's weights: dst[kb][c][r][s][j] = w[kb * B + j][c][r][s], zero
// for the channels past K that fill the last block. w is contiguous.
template <typename T>
void pack_forward_weights(const T* w, int64_t K, int64_t C, int64_t B,
                          int64_t blocks, T* dst) {
  constexpr int64_t taps = kKernelSize * kKernelSize;
  for (const auto kb : c10::irange(blocks)) {
    for (const auto t : c10::irange(C * taps)) {
      T* out = dst + (kb * C * taps + t) * B;
      for (const auto j : c10::irange(B)) {
        const int64_t k = kb * B + j;
        out[j] = k < K ? w[k * C * taps + t] : T(0);
      }
    }
  }
}

// The input gradient's weights, by space-to-depth: lane l of the output is
// input channel c = l / 16 at row phase a = l / 4 % 4 and column phase
// b = l % 4, and the 11x11 kernel becomes 3x3 taps (t, u) over grad_output:
//   dst[kb][k][t][u][j] = w[k][c][a + 8 - 4t][b + 8 - 4u],  l = kb * B + j,
// zero where a tap falls outside the kernel or c >= C (taps reversed so the
// micro-kernel walks grad_output forwards).
template <typename T>
void pack_input_grad_weights(const T* w, int64_t K, int64_t C, int64_t B,
                             int64_t blocks, T* dst) {
  constexpr int64_t taps = kKernelSize * kKernelSize;
  for (const auto kb : c10::irange(blocks)) {
    for (const auto k : c10::irange(K)) {
      for (const auto t : c10::irange(3)) {
        for (const auto u : c10::irange(3)) {
          T* out = dst + (((kb * K + k) * 3 + t) * 3 + u) * B;
          for (const auto j : c10::irange(B)) {
            const int64_t l = kb * B + j, c = l / 16;
            const int64_t r = l / 4 % 4 + 8 - 4 * t, s = l % 4 + 8 - 4 * u;
            out[j] = c < C && r < kKernelSize && s < kKernelSize
                ? w[(k * C + c) * taps + r * kKernelSize + s]
                : T(0);
          }
        }
      }
    }
  }
}

// The Winograd forward's weights: the 3x3 kernel g of output channel k and
// space-to-depth channel 16c + 4a + b (g[t][u] = w[k][c][4t + a][4u + b],
// zero past the 11x11 kernel) as G g G^T, G = [1 0 0; .5 .5 .5; .5 -.5 .5;
// 0 0 1], computed in double:
//   dst[((kb * 16 + 4 xi + nu) * 16 C + 16c + 4a + b) * B + j], k = kb B + j,
// for output channels [k0, k1); channels past K (the last block's padding)
// are zero.
template <typename T>
void pack_winograd_weights(const T* w, int64_t K, int64_t C, int64_t B,
                           int64_t blocks, int64_t k0, int64_t k1, T* dst) {
  const int64_t lanes = 16 * C;
  for (const auto k : c10::irange(k0, k1)) {
    if (k >= K) {
      for (const auto e : c10::irange(16 * lanes)) {
        dst[((k / B * 16) * lanes + e) * B + k % B] = T(0);
      }
      continue;
    }
    for (const auto l : c10::irange(lanes)) {
      const int64_t c = l / 16, a = l / 4 % 4, b = l % 4;
      double g[3][3];
      for (const auto t : c10::irange(3)) {
        for (const auto u : c10::irange(3)) {
          const int64_t r = 4 * t + a, s = 4 * u + b;
          g[t][u] = r < kKernelSize && s < kKernelSize
              ? double(w[((k * C + c) * kKernelSize + r) * kKernelSize + s])
              : 0.0;
        }
      }
      double gg[4][3];  // G g
      for (const auto u : c10::irange(3)) {
        gg[0][u] = g[0][u];
        gg[1][u] = (g[0][u] + g[1][u] + g[2][u]) / 2;
        gg[2][u] = (g[0][u] - g[1][u] + g[2][u]) / 2;
        gg[3][u] = g[2][u];
      }
      for (const auto xi : c10::irange(4)) {
        const double* h = gg[xi];
        const double row[4] = {h[0], (h[0] + h[1] + h[2]) / 2,
                               (h[0] - h[1] + h[2]) / 2, h[2]};
        for (const auto nu : c10::irange(4)) {
          dst[((k / B * 16 + 4 * xi + nu) * lanes + l) * B + k % B] =
              T(row[nu]);
        }
      }
    }
  }
}

// grad_output rows [p0, p0 + rows) of one image, pixel-major in blocks of B
// channels: dst[kb][i * Q + q][j] = dy[kb * B + j][p0 + i][q], zero past K.
template <typename T>
void pack_grad_transposed(const Strided<T>& dy, int64_t K, int64_t p0, int64_t rows, int64_t Q, int64_t B,
                          int64_t blocks, cpu::TransposeFn<T> transpose,
                          T* dst) {
  const int64_t pixels = rows * Q;
  // the band is one run of each channel plane when rows are Q apart
  const bool runs = dy.w == 1 && (dy.h == Q || rows == 1);
  for (const auto kb : c10::irange(blocks)) {
    T* out = dst + kb * pixels * B;
    const int64_t kn = std::min(B, K - kb * B);
    if (kn < B) {
      std::fill(out, out + pixels * B, T(0));
    }
    const T* in = dy.data + kb * B * dy.c + p0 * dy.h;
    if (runs) {
      transpose(in, dy.c, kn, pixels, out, B);
      continue;
    }
    if (dy.c == 1) {  // channels_last: a pixel's channels are one run already
      for (const auto i : c10::irange(rows)) {
        for (const auto q : c10::irange(Q)) {
          std::copy_n(in + i * dy.h + q * dy.w, kn, out + (i * Q + q) * B);
        }
      }
      continue;
    }
    for (const auto j : c10::irange(kn)) {
      for (const auto i : c10::irange(rows)) {
        for (const auto q : c10::irange(Q)) {
          out[(i * Q + q) * B + j] = in[j * dy.c + i * dy.h + q * dy.w];
        }
      }
    }
  }
}

// sums[kb * B + j] += dyt[kb][i][j] for every pixel i < pixels of
// pack_grad_transposed's blocks: the bias gradient, channels in lanes.
template <typename T>
void add_pixel_sums(const T* dyt, int64_t blocks, int64_t pixels, int64_t B,
                    T* sums) {
  for (const auto kb : c10::irange(blocks)) {
    T* s = sums + kb * B;
    for (const auto i : c10::irange(pixels)) {
      const T* row = dyt + (kb * pixels + i) * B;
      for (const auto j : c10::irange(B)) {
        s[j] += row[j];
      }
    }
  }
}

}  // namespace alexop::cpu
