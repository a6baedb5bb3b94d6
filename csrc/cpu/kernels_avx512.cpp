// The micro-kernels for AVX-512 (zmm registers: 32 of them, so register
// blocks of 24 accumulators). Compiled for that instruction set by function
// attributes rather than flags, because setuptools' flags apply to every file
// of the extension; cpu_isa() calls them only where the CPU has AVX-512.

#include "kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#include <algorithm>

// GCC 12's AVX-512 headers pass self-initialised _mm512_undefined_*() values
// to the shuffle builtins, which -Wmaybe-uninitialized reports here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define ALEXOP_TARGET \
  __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")))
#define ALEXOP_VEC ALEXOP_TARGET inline __attribute__((always_inline))

namespace alexop::cpu::avx512 {

ALEXOP_VEC __m512 vload(const float* p) { return _mm512_loadu_ps(p); }
ALEXOP_VEC __m512d vload(const double* p) { return _mm512_loadu_pd(p); }
ALEXOP_VEC void vstore(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
ALEXOP_VEC void vstore(double* p, __m512d v) { _mm512_storeu_pd(p, v); }
// Broadcasts are asm loads: as plain loads the compiler sees that a tile's
// overlapping windows read the same scalars at different taps, keeps them in
// registers across taps and spills the accumulators instead.
ALEXOP_VEC __m512 vbcast(const float* p) {
  __m512 r;
  asm volatile("vbroadcastss %1, %0" : "=v"(r) : "m"(*p));
  return r;
}
ALEXOP_VEC __m512d vbcast(const double* p) {
  __m512d r;
  asm volatile("vbroadcastsd %1, %0" : "=v"(r) : "m"(*p));
  return r;
}
ALEXOP_VEC __m512 vfma(__m512 a, __m512 b, __m512 c) {
  return _mm512_fmadd_ps(a, b, c);
}
ALEXOP_VEC __m512d vfma(__m512d a, __m512d b, __m512d c) {
  return _mm512_fmadd_pd(a, b, c);
}
ALEXOP_VEC __m512 vadd(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
ALEXOP_VEC __m512 vsub(__m512 a, __m512 b) { return _mm512_sub_ps(a, b); }
ALEXOP_VEC __m512 vload_n(const float* p, int n) {
  return _mm512_maskz_loadu_ps((1u << n) - 1, p);
}
ALEXOP_VEC __m512d vload_n(const double* p, int n) {
  return _mm512_maskz_loadu_pd((1u << n) - 1, p);
}
ALEXOP_VEC void vstore_half(float* p, __m512 v) {
  _mm256_storeu_ps(p, _mm512_castps512_ps256(v));
}
ALEXOP_VEC void vstore_half(double* p, __m512d v) {
  _mm256_storeu_pd(p, _mm512_castpd512_pd256(v));
}
ALEXOP_VEC void vstore_masked(float* p, __m512 v, int n) {
  _mm512_mask_storeu_ps(p, (1u << n) - 1, v);
}
ALEXOP_VEC void vstore_masked(double* p, __m512d v, int n) {
  _mm512_mask_storeu_pd(p, (1u << n) - 1, v);
}
template <int Imm>
ALEXOP_VEC __m512 shuffle_lanes(__m512 a, __m512 b) {
  return _mm512_shuffle_f32x4(a, b, Imm);
}
template <int Imm>
ALEXOP_VEC __m512d shuffle_lanes(__m512d a, __m512d b) {
  return _mm512_shuffle_f64x2(a, b, Imm);
}

// For each j < step, the 4 x 4 transpose of the 128-bit lanes of
// r[j], r[step + j], r[2 step + j], r[3 step + j], written back in order.
template <typename Reg>
ALEXOP_VEC void lanes4x4(Reg* r, int step) {
  for (int j = 0; j < step; ++j) {
    Reg* q[4] = {r + j, r + step + j, r + 2 * step + j, r + 3 * step + j};
    const Reg a0 = shuffle_lanes<0x44>(*q[0], *q[1]);
    const Reg a1 = shuffle_lanes<0xee>(*q[0], *q[1]);
    const Reg a2 = shuffle_lanes<0x44>(*q[2], *q[3]);
    const Reg a3 = shuffle_lanes<0xee>(*q[2], *q[3]);
    *q[0] = shuffle_lanes<0x88>(a0, a2);
    *q[1] = shuffle_lanes<0xdd>(a0, a2);
    *q[2] = shuffle_lanes<0x88>(a1, a3);
    *q[3] = shuffle_lanes<0xdd>(a1, a3);
  }
}

// 16 x 16 floats: pairs, then quadruples within 128-bit lanes, then lanes.
ALEXOP_VEC void vtranspose(__m512* r) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
  }
  lanes4x4(r, 4);
}

// 8 x 8 doubles: pairs within 128-bit lanes, then lanes.
ALEXOP_VEC void vtranspose(__m512d* r) {
  for (int i = 0; i < 4; ++i) {
    const __m512d lo = _mm512_unpacklo_pd(r[2 * i], r[2 * i + 1]);
    r[2 * i + 1] = _mm512_unpackhi_pd(r[2 * i], r[2 * i + 1]);
    r[2 * i] = lo;
  }
  lanes4x4(r, 2);
}

}  // namespace alexop::cpu::avx512

#define ALEXOP_CPU_ISA avx512
#include "micro_kernels.h"

namespace alexop::cpu {
namespace avx512 {

// A row of the 16x16 block is 16 floats: column phase b of column tap s'
// in lane 4s' + b, so B^T's column pass combines 128-bit lanes: lanes
// (z0, z1, z2, z1) + sign * (z2, z2, z1, z3).
ALEXOP_TARGET void winograd_input(const float* in, int64_t pitch,
                                  int64_t cstride, int64_t C, float* v,
                                  int64_t xi_stride) {
  const __m512 sign = _mm512_setr_ps(-1, -1, -1, -1, 1, 1, 1, 1, -1, -1, -1,
                                     -1, -1, -1, -1, -1);
  for (int64_t c = 0; c < C; ++c) {
    for (int a = 0; a < 4; ++a) {
      const float* p = in + c * cstride + a * pitch;
      const __m512 d0 = _mm512_loadu_ps(p), d1 = _mm512_loadu_ps(p + 4 * pitch);
      const __m512 d2 = _mm512_loadu_ps(p + 8 * pitch);
      const __m512 d3 = _mm512_loadu_ps(p + 12 * pitch);
      // B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1] over the row taps r'
      const __m512 rows[4] = {_mm512_sub_ps(d0, d2), _mm512_add_ps(d1, d2),
                              _mm512_sub_ps(d2, d1), _mm512_sub_ps(d1, d3)};
      for (int xi = 0; xi < 4; ++xi) {
        const __m512 z = rows[xi];
        const __m512 keep = _mm512_shuffle_f32x4(z, z, _MM_SHUFFLE(1, 2, 1, 0));
        const __m512 with = _mm512_shuffle_f32x4(z, z, _MM_SHUFFLE(3, 1, 2, 2));
        _mm512_storeu_ps(v + xi * xi_stride + c * 64 + a * 16,
                         _mm512_fmadd_ps(sign, with, keep));
      }
    }
  }
}

// B^T z B's pass over one index: (z0 - z2, z1 + z2, z2 - z1, z1 - z3).
ALEXOP_VEC void input_pass(const __m512* z, int step, __m512* out, int ostep) {
  out[0] = _mm512_sub_ps(z[0], z[2 * step]);
  out[ostep] = _mm512_add_ps(z[step], z[2 * step]);
  out[2 * ostep] = _mm512_sub_ps(z[2 * step], z[step]);
  out[3 * ostep] = _mm512_sub_ps(z[step], z[3 * step]);
}

// A run of a tile vector's lanes on one tile row: lanes [lane, lane +
// count) are tiles j .. j + count - 1 of tile row i.
struct Run {
  int lane, count;
  int64_t i, j;
};

// The runs of tiles 16 jv .. 16 jv + 15 of `tiles` on rows of J.
ALEXOP_TARGET int runs_of(int64_t jv, int64_t tiles, int64_t J, Run* runs) {
  int n = 0;
  for (int64_t f = 16 * jv; f < std::min(16 * jv + 16, tiles);) {
    const int64_t i = f / J, j = f % J;
    const int64_t count = std::min(J - j, 16 * jv + 16 - f);
    runs[n++] = {static_cast<int>(f - 16 * jv), static_cast<int>(count), i, j};
    f += count;
  }
  return n;
}

// ph[(row * 8 + u) * (pitch / 8) + jj] = band[row * pitch + 8 jj + u] for
// rows < nrows: each column phase of a tile's 8 columns side by side, so a
// run of tiles reads a tap's pixels in one load. pitch is a multiple of 128.
ALEXOP_TARGET void phase_split(const float* band, int64_t nrows, int64_t pitch, float* ph) {
  const int64_t n = pitch / 8;
  // from two registers' 4 tiles of 8 columns, phase u of each tile, in
  // lanes 4i .. 4i + 3 for whichever i
  __m512i pick[8];
  for (int u = 0; u < 8; ++u) {
    pick[u] = _mm512_setr_epi32(u, 8 + u, 16 + u, 24 + u, u, 8 + u, 16 + u, 24 + u, u, 8 + u,
                                16 + u, 24 + u, u, 8 + u, 16 + u, 24 + u);
  }
  for (int64_t row = 0; row < nrows; ++row) {
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
      const float* src = band + row * pitch + 8 * j0;
      __m512 a[8];
      for (int i = 0; i < 8; ++i) a[i] = _mm512_loadu_ps(src + 16 * i);
      for (int u = 0; u < 8; ++u) {
        __m512 out = _mm512_permutex2var_ps(a[0], pick[u], a[1]);
        out = _mm512_mask_mov_ps(out, 0x00f0, _mm512_permutex2var_ps(a[2], pick[u], a[3]));
        out = _mm512_mask_mov_ps(out, 0x0f00, _mm512_permutex2var_ps(a[4], pick[u], a[5]));
        out = _mm512_mask_mov_ps(out, 0xf000, _mm512_permutex2var_ps(a[6], pick[u], a[7]));
        _mm512_storeu_ps(ph + (row * 8 + u) * n + j0, out);
      }
    }
  }
}

// The band's transformed input, tiles in lanes: v[((xinu * 16C + l) * nvec
// + jv) * 16 + t] for tile 16 jv + t (tile f is j = f % J of tile row
// f / J, and reads rows 8 (f / J) .. + 15, columns 8 j .. + 15), read run
// by run from the phase-split rows (height rows a channel).
ALEXOP_TARGET void row_input(const float* ph, int64_t n, int64_t height,
                             int64_t C, int64_t tiles, int64_t J, float* v) {
  const int64_t L = 16 * C, nvec = row_vectors(tiles);
  for (int64_t jv = 0; jv < nvec; ++jv) {
    Run runs[16];
    const int nruns = runs_of(jv, tiles, J, runs);
    for (int64_t c = 0; c < C; ++c) {
      for (int a = 0; a < 4; ++a) {
        for (int b = 0; b < 4; ++b) {
          __m512 d[16], e[16];
          for (int r = 0; r < 4; ++r) {
            for (int s = 0; s < 4; ++s) {
              const int col = 4 * s + b;  // of the tile's 16
              __m512 x = _mm512_setzero_ps();
              for (int q = 0; q < nruns; ++q) {
                const Run& run = runs[q];
                const float* p = ph + ((c * height + 8 * run.i + 4 * r + a) * 8 + (col & 7)) * n +
                                 run.j + (col >> 3) - run.lane;
                const __mmask16 lanes = static_cast<__mmask16>(((1u << run.count) - 1) << run.lane);
                x = _mm512_mask_loadu_ps(x, lanes, p);
              }
              d[4 * r + s] = x;
            }
          }
          for (int s = 0; s < 4; ++s) input_pass(d + s, 4, e + s, 4);
          for (int xi = 0; xi < 4; ++xi) input_pass(e + 4 * xi, 1, d + 4 * xi, 1);
          const int64_t l = 16 * c + 4 * a + b;
          for (int xinu = 0; xinu < 16; ++xinu) {
            _mm512_storeu_ps(v + ((xinu * L + l) * nvec + jv) * 16, d[xinu]);
          }
        }
      }
    }
  }
}

// m[((xinu * kRowFilters + k) * NT + t) * 16 + lane] = the products of
// tile vectors jv .. jv + NT - 1 and output channel k of the block.
template <int NT>
ALEXOP_TARGET void row_products(const float* v, int64_t L, int64_t nvec,
                                int64_t jv, const float* u, float* m) {
  constexpr int NK = kRowFilters;
  for (int xinu = 0; xinu < 16; ++xinu) {
    __m512 acc[NK][NT];
    for (int k = 0; k < NK; ++k) {
      for (int t = 0; t < NT; ++t) acc[k][t] = _mm512_setzero_ps();
    }
    const float* vp = v + (xinu * L * nvec + jv) * 16;
    const float* up = u + xinu * L * NK;
    for (int64_t l = 0; l < L; ++l) {
      __m512 x[NT];
      for (int t = 0; t < NT; ++t) x[t] = _mm512_loadu_ps(vp + (l * nvec + t) * 16);
      for (int k = 0; k < NK; ++k) {
        const __m512 w = vbcast(up + l * NK + k);
        for (int t = 0; t < NT; ++t) acc[k][t] = _mm512_fmadd_ps(w, x[t], acc[k][t]);
      }
    }
    for (int k = 0; k < NK; ++k) {
      for (int t = 0; t < NT; ++t) {
        _mm512_storeu_ps(m + ((xinu * NK + k) * NT + t) * 16, acc[k][t]);
      }
    }
  }
}

// A^T m A + bias for kn output channels of tile vectors jv .. jv + NT - 1,
// each tile's pixel pair (dx = 0, 1) back at pixels 2j, 2j + 1 of its
// rows, run by run. Returns the NaN check.
template <int NT>
ALEXOP_TARGET __m512 row_output(const float* m, int64_t kn, const float* bias,
                                const Run* const* runs, const int* nruns,
                                int64_t rows, int64_t Q, float* y,
                                int64_t plane) {
  constexpr int NK = kRowFilters;
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                                         12, 13, 14, 15);
  const __m512i pairs = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20,
                                          5, 21, 6, 22, 7, 23);
  const __m512i pairs_hi = _mm512_add_epi32(pairs, _mm512_set1_epi32(8));
  __m512 check = _mm512_setzero_ps();
  for (int64_t k = 0; k < kn; ++k) {
    const __m512 b = _mm512_set1_ps(bias[k]);
    for (int t = 0; t < NT; ++t) {
      __m512 z[16];
      for (int xinu = 0; xinu < 16; ++xinu) {
        z[xinu] = _mm512_loadu_ps(m + ((xinu * NK + k) * NT + t) * 16);
      }
      // A^T = [1 1 1 0; 0 1 -1 -1] over xi, then nu
      __m512 p[8];
      for (int nu = 0; nu < 4; ++nu) {
        const __m512 s12 = _mm512_add_ps(z[4 + nu], z[8 + nu]);
        const __m512 d12 = _mm512_sub_ps(z[4 + nu], z[8 + nu]);
        p[nu] = _mm512_add_ps(z[nu], s12);
        p[4 + nu] = _mm512_sub_ps(d12, z[12 + nu]);
      }
      for (int dy = 0; dy < 2; ++dy) {
        const __m512* q = p + 4 * dy;
        const __m512 e0 = _mm512_add_ps(_mm512_add_ps(q[0], _mm512_add_ps(q[1], q[2])), b);
        const __m512 e1 = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(q[1], q[2]), q[3]), b);
        check = _mm512_add_ps(check, _mm512_add_ps(_mm512_sub_ps(e0, e0), _mm512_sub_ps(e1, e1)));
        // the vector's 32 pixels: tile t's pair at 2t, 2t + 1
        const __m512 a0 = _mm512_permutex2var_ps(e0, pairs, e1);
        const __m512 a1 = _mm512_permutex2var_ps(e0, pairs_hi, e1);
        for (int r = 0; r < nruns[t]; ++r) {
          const Run& run = runs[t][r];
          const int64_t row = 2 * run.i + dy;
          if (row >= rows) continue;
          const int64_t n = std::min<int64_t>(2 * run.count, Q - 2 * run.j);
          float* dst = y + k * plane + row * Q + 2 * run.j;
          __m512 s0 = a0, s1 = a1;
          if (run.lane != 0) {
            // pixels from 2 lane on (indices wrap past 31: never stored)
            const __m512i from = _mm512_add_epi32(lane, _mm512_set1_epi32(2 * run.lane));
            s0 = _mm512_permutex2var_ps(a0, from, a1);
            s1 = _mm512_permutex2var_ps(a0, _mm512_add_epi32(from, _mm512_set1_epi32(16)), a1);
          }
          vstore_n(dst, s0, static_cast<int>(std::min<int64_t>(n, 16)));
          if (n > 16) vstore_n(dst + 16, s1, static_cast<int>(n - 16));
        }
      }
    }
  }
  return check;
}

// dst[0, n) = src[0, n), the 64-byte lines of dst wholly inside written
// around the caches: no read for ownership of lines written whole
// (docs/cpu.md).
ALEXOP_TARGET void stream_out(const float* src, int64_t n, float* dst) {
  const int64_t head = std::min<int64_t>(
      n, ((64 - (reinterpret_cast<uintptr_t>(dst) & 63)) & 63) / sizeof(float));
  if (head > 0) vstore_n(dst, vload_n(src, static_cast<int>(head)), static_cast<int>(head));
  int64_t i = head;
  for (; i + 16 <= n; i += 16) _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
  if (i < n) vstore_n(dst + i, vload_n(src + i, static_cast<int>(n - i)), static_cast<int>(n - i));
}

ALEXOP_TARGET bool winograd_rows(const float* band, int64_t pitch,
                                 int64_t cstride, int64_t C, int64_t rows,
                                 int64_t J, const float* u, int64_t K,
                                 const float* bias, float* scratch, float* y,
                                 int64_t out_rows, int64_t Q, int64_t plane) {
  constexpr int64_t NK = kRowFilters, NT = kRowVectors;
  const int64_t tiles = rows * J, nvec = row_vectors(tiles), L = 16 * C;
  float* v = scratch;
  float* m = v + 16 * L * nvec * 16;
  // a block's outputs, plane by plane as in y: copied out whole lines at once
  float* staged = m + 16 * NK * NT * 16;
  float* ph = staged + NK * out_rows * Q;
  const int64_t span = out_rows * Q, height = cstride / pitch;
  phase_split(band, C * height, pitch, ph);
  row_input(ph, pitch / 8, height, C, tiles, J, v);
  __m512 check = _mm512_setzero_ps();
  for (int64_t k0 = 0; k0 < K; k0 += NK) {
    const float* uk = u + k0 * 16 * L;
    const int64_t kn = std::min(NK, K - k0);
    for (int64_t jv = 0; jv < nvec; jv += NT) {
      const int nt = static_cast<int>(std::min(NT, nvec - jv));
      Run runs[NT][16];
      int nruns[NT] = {};
      const Run* rp[NT];
      for (int t = 0; t < nt; ++t) {
        nruns[t] = runs_of(jv + t, tiles, J, runs[t]);
        rp[t] = runs[t];
      }
      if (nt == NT) {
        row_products<NT>(v, L, nvec, jv, uk, m);
        check = _mm512_add_ps(check, row_output<NT>(m, kn, bias + k0, rp, nruns, out_rows, Q, staged, span));
      } else {
        row_products<1>(v, L, nvec, jv, uk, m);
        check = _mm512_add_ps(check, row_output<1>(m, kn, bias + k0, rp, nruns, out_rows, Q, staged, span));
      }
    }
    for (int64_t k = 0; k < kn; ++k) {
      stream_out(staged + k * span, span, y + (k0 + k) * plane);
    }
  }
  _mm_sfence();  // the streamed lines ordered before the item ends
  return _mm512_cmp_ps_mask(check, check, _CMP_UNORD_Q) == 0;
}

template <typename T, typename... Blockings>
Kernels<T> make(Blockings... blockings) {
  using V = Vec<T>;
  auto k = make_kernels<V, 2>(&transpose_blocks<V>, blockings...);
  if constexpr (sizeof(T) == 4) {
    add_winograd<V, 3, 2>(k, &winograd_input, blockings...);
    k.winograd_rows = &winograd_rows;
  }
  return k;
}

}  // namespace avx512

template <typename T>
const Kernels<T>& kernels_avx512() {
  static const auto k =
      avx512::make<T>(avx512::Blocking<3, 8>{}, avx512::Blocking<4, 6>{},
                      avx512::Blocking<2, 12>{}, avx512::Blocking<1, 24>{});
  return k;
}

template const Kernels<float>& kernels_avx512<float>();
template const Kernels<double>& kernels_avx512<double>();

}  // namespace alexop::cpu

#endif
