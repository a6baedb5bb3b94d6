// Tensor-core input gradient (dgrad) of the 11x11 stride-4 convolution.
//
// Phase (space-to-depth) form. With h' = h + pad = 4*P0 + a (a = 0..3) and
// r = a + 4i, p = P0 - i (i = 0..2), and the same for columns (b, j, Q0):
//   dx[n, c, 4*P0 + a - pad, 4*Q0 + b - pad]
//     = sum_{k, i, j} dy[n, k, P0 - i, Q0 - j] * W[k, c, a + 4i, b + 4j]
// (zero terms: r > 10, s > 10, or (P0 - i, Q0 - j) outside the P x Q grid).
// One implicit GEMM per image: M = super-pixels (P0, Q0), N = 48 = (c, a, b)
// with n = c*16 + a*4 + b, reduction = (stage, tap = i*3 + j, channel within
// the stage): 9 * K (864 at K = 96).
//
// Tiling. Super-pixel columns are split into bands of TQ <= 64 columns (one
// band when the image is at most ~256 wide); inside a band the super-pixels
// are flattened row-major and a tile is MT (256) consecutive of them, so at
// the headline (57 x 57 super-pixels, TQ = 57) an image is 13 tiles and only
// the last is partial. A persistent CTA (8 warps, 1 CTA/SM) loops over tiles;
// warp w owns 32 super-pixels (2 m16 tiles) x all 48 columns (6 n8 tiles).
//
// Operands in shared memory:
//  - B (weights) resident, written once per CTA from a buffer that a small
//    prep kernel arranges in mma fragment order: entry (ks, jj, lane) is a
//    uint4 = {b0, b1 of n8 tile 2jj, b0, b1 of n8 tile 2jj + 1}, ks = stage*9
//    + tap; zeros where r > 10, s > 10 or the channel is >= K.
//  - A (dy) streamed per stage of 8 "word planes" (fp32: 8 channels, one k8
//    step of m16n8k8; 16-bit: 8 channel pairs packed (lo = even channel),
//    one k16 step of m16n8k16). A plane holds the NR x (TQ + 2) dy window of
//    the tile (its super-pixel rows plus a halo of 2 rows above, 2 columns to
//    the left); cells outside the dy grid are stored as zero, which is the
//    whole boundary handling. Plane stride 520 words (= 8 mod 32 banks), so
//    the 4 planes t = 0..3 of a fragment load land in disjoint bank octets.
//    Loads are register-staged (next stage's global loads are issued before
//    this stage's MMAs, stored to the other buffer after them; one barrier per
//    stage), which also does the 16-bit channel-pair interleave.
//  - A fragment for super-pixel m (lane row g / g+8) and tap (i, j): word
//    plane t / t+4 at pixoff(m) - i*(TQ+2) - j.
// Epilogue straight from the accumulators: one shuffle with the neighbour
// lane (t ^ 1) gives each lane the 4 columns b = 0..3 of one (pixel, c, a),
// written as 4 consecutive dx elements (two 8-/4-byte pair stores when pad and
// W are even) with masks for rows/columns outside the image. Every dx element
// belongs to exactly one super-pixel of exactly one tile and one lane: no
// atomics, bitwise deterministic.
//
// Modes: fp32 Fp32Math::kAccurate = 3xTF32 (m16n8k8, both operands split
// big + small on the fly, small*big + big*small + big*big, pass-major; the
// accumulators are flushed into a round-to-nearest fp32 total after every
// stage of 27 MMAs, since the tensor cores' accumulation truncates);
// kTf32 and kBf16x3 = one TF32 product (the prep kernel rounds B to TF32,
// A is rounded while forming the fragments); bf16/fp16 = m16n8k16 with fp32
// accumulation. mma.sync: sm_80 and sm_90 alike.
//
// Hopper (sm_90 devices, when the build carries sm_90a code; see "Hopper
// path" below): bf16/fp16 run a wgmma version of the same tiles, window and
// A gather (A from registers, B resident in the canonical layout, four
// consumer warpgroups of 64 super-pixels) with a fifth, producer warpgroup
// moving dy into the stage buffers. Package A/B at the headline (N = 256,
// K = 96, 224x224, p = 2; H200, one build swapped per step, same call):
// bf16 0.397 vs 0.711 ms. TF32 keeps the mma.sync kernel: a TF32 wgmma
// version measured 0.675 vs 0.623 ms there (in its development harness
// 0.534 vs 0.765; the gap between the two settings is not understood); a
// 3xTF32 one (B big + small for 24 columns per CTA group, three m64n24 per
// k step) measured 1.442 vs 1.414 in the harness (dev/dgrad_gmma keeps
// both). The fp32-accurate mode runs 3xFP16 on wgmma with both operands in
// shared memory (its own tiling; see "Hopper, fp32-accurate" below):
// 0.654 vs ~1.46 ms for 3xTF32 here (H200, headline, K <= 96).
//
// Limits (returns false): C != 3, non-contiguous tensors, resident B plus
// the two dy buffers beyond the opt-in shared memory (fp32: K <= 112;
// 16-bit: K <= 224 on H100/H200), padding > 4096, per-image sizes >= 2^31.
// Zero B entries (r or s > 10, padded channels) still multiply finite-or-not
// dy words: an Inf/NaN in dy can reach dx elements whose window excludes it
// (same caveat as the forward).

#include "common/constants.h"
#include "common/device.h"
#include "common/launch.h"
#include "common/ptx.cuh"
#include "common/wgmma.cuh"
#include "fast_kernels.h"

// Light headers only (no ATen/ATen.h, no CUDAContext.h): most of this file's
// compile time is the host front end parsing headers.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace alexop::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMT = 32 * kWarps;   // super-pixels per tile (at most)
constexpr int kPlanes = 8;         // word planes per stage
constexpr int kWPPMax = 512;       // dy window words per plane (host-checked)
constexpr int kCHS = 520;          // plane stride in words: >= kWPPMax, = 8 mod 32
constexpr int kBufWords = kPlanes * kCHS;
constexpr int kTaps = 9;
constexpr int kNT8 = 6;            // 48 columns = (c, a, b)
constexpr int kNJ = kNT8 / 2;      // uint4 B entries per (k step, lane)
constexpr int kBandMax = 64;       // super-pixel columns per band
// dy window cells per loading thread, for a CTA of NTHR threads
template <int NTHR> __host__ __device__ constexpr int loads_per_thread() { return (kWPPMax + NTHR - 1) / NTHR; }
constexpr int kLoadsPerThread = loads_per_thread<kThreads>();  // 2

enum Mode : int { kX3 = 0, kTF = 1, kH16 = 2 };

struct Params {
  const void* dy;
  const uint4* wfrag;
  void* dx;
  int N, K, H, W, P, Q, pad;
  int P0s, Q0s, PS, QS;      // first super-pixel row/col and counts
  int TQ, NB, MT, NR, RSW;   // band width, bands, tile size, window rows, row stride
  int WPP;                   // NR * RSW
  int tiles_per_band, tiles_per_img, total_tiles;
  int nstage;                // stages of 8 word planes
  int PQ;
  int vec2;                  // pair stores in the epilogue
  // the 3xFP16 kernel's tiling (see there): cells per (image, band) block,
  // window cells per tile, cells in all
  int BLK, WC, ncells;
};

// Channels per stage: 8 (fp32, one k8 step) or 16 (16-bit, one k16 step).
template <int MODE> __host__ __device__ constexpr int stage_channels() { return MODE == kH16 ? 16 : 8; }

// B's entry for column n = (c, a, b), tap (i, j) and channel ch:
// W[ch, c, a + 4i, b + 4j], zero where r or s > 10 or ch >= K.
template <typename T>
__device__ __forceinline__ float phase_weight(const T* w, int K, int tap, int n, int ch) {
  const int i = tap / 3, j = tap - 3 * i;
  const int c = n >> 4, r = ((n >> 2) & 3) + 4 * i, s = (n & 3) + 4 * j;
  if (ch >= K || r >= kR || s >= kR) return 0.f;
  return to_f(w[((size_t)ch * kC + c) * (kR * kR) + r * kR + s]);
}

// B in fragment order (see top). Entry idx = (ks * kNJ + jj) * 32 + lane.
template <typename T, int MODE>
__global__ void dgrad_prep_weights_kernel(const T* __restrict__ w, int K, int nstage,
                                          uint4* __restrict__ out) {
  const int total = nstage * kTaps * kNJ * 32;
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int lane = idx & 31, rest = idx >> 5;
  const int jj = rest % kNJ, ks = rest / kNJ;
  const int st = ks / kTaps, tap = ks - st * kTaps;
  const int g = lane >> 2, t = lane & 3;
  auto val = [&](int ch, int n) { return phase_weight(w, K, tap, n, ch); };
  uint32_t v[4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int n = (2 * jj + h) * 8 + g;
    if constexpr (MODE == kH16) {
      const int ch = st * 16 + 2 * t;  // b0: k = 2t, 2t+1; b1: k = 2t+8, 2t+9
      v[2 * h] = pack2(from_f<T>(val(ch, n)), from_f<T>(val(ch + 1, n)));
      v[2 * h + 1] = pack2(from_f<T>(val(ch + 8, n)), from_f<T>(val(ch + 9, n)));
    } else {
      const int ch = st * 8 + t;  // b0: k = t; b1: k = t + 4
      v[2 * h] = tf32_or_raw(val(ch, n), MODE == kTF);
      v[2 * h + 1] = tf32_or_raw(val(ch + 4, n), MODE == kTF);
    }
  }
  out[idx] = make_uint4(v[0], v[1], v[2], v[3]);
}

struct TileGeom {
  int n;        // image
  int qb;       // first super-pixel column of the band (band-relative 0)
  int m0;       // first band-flattened super-pixel of the tile
  int prow0;    // dy row of window row 0
  int qcol0;    // dy column of window column 0
  int prel_lo;  // band row of the tile's first super-pixel
};

__device__ __forceinline__ TileGeom tile_geom(const Params& p, int tile) {
  TileGeom tg;
  tg.n = tile / p.tiles_per_img;
  const int rest = tile - tg.n * p.tiles_per_img;
  const int band = rest / p.tiles_per_band;
  const int tt = rest - band * p.tiles_per_band;
  tg.qb = band * p.TQ;
  tg.m0 = tt * p.MT;
  tg.prel_lo = tg.m0 / p.TQ;
  tg.prow0 = p.P0s + tg.prel_lo - 2;
  tg.qcol0 = p.Q0s + tg.qb - 2;
  return tg;
}

// Window cell e = ri * RSW + ci of this thread's u-th load: dy offset
// prow * Q + qcol inside a channel plane, or -1 (zero cell), or -2 (no cell).
template <int NTHR>
__device__ __forceinline__ void loader_offsets(const Params& p, const TileGeom& tg, int tid,
                                               int (&goff)[loads_per_thread<NTHR>()]) {
#pragma unroll
  for (int u = 0; u < loads_per_thread<NTHR>(); ++u) {
    const int e = tid + u * NTHR;
    if (e >= p.WPP) { goff[u] = -2; continue; }
    const int ri = e / p.RSW, ci = e - ri * p.RSW;
    const int prow = tg.prow0 + ri, qcol = tg.qcol0 + ci;
    goff[u] = (prow >= 0 && prow < p.P && qcol >= 0 && qcol < p.Q) ? prow * p.Q + qcol : -1;
  }
}

template <int NTHR>
struct StageRegs {
  uint32_t w[loads_per_thread<NTHR>()][kPlanes];
};

template <typename T, int MODE, int NTHR>
__device__ __forceinline__ void load_stage(const Params& p, int n, const int (&goff)[loads_per_thread<NTHR>()],
                                           int st, StageRegs<NTHR>& r) {
  const T* src = static_cast<const T*>(p.dy) + (size_t)n * p.K * p.PQ;
  constexpr int SC = stage_channels<MODE>();
  const int ch0 = st * SC;
#pragma unroll
  for (int u = 0; u < loads_per_thread<NTHR>(); ++u) {
    const bool ok = goff[u] >= 0;
#pragma unroll
    for (int pl = 0; pl < kPlanes; ++pl) {
      if constexpr (MODE == kH16) {
        const int ch = ch0 + 2 * pl;
        uint32_t lo = 0, hi = 0;
        if (ok && ch < p.K) lo = bits16(src[(size_t)ch * p.PQ + goff[u]]);
        if (ok && ch + 1 < p.K) hi = bits16(src[(size_t)(ch + 1) * p.PQ + goff[u]]);
        r.w[u][pl] = lo | (hi << 16);
      } else {
        const int ch = ch0 + pl;
        float v = 0.f;
        if (ok && ch < p.K) v = src[(size_t)ch * p.PQ + goff[u]];
        r.w[u][pl] = __float_as_uint(v);
      }
    }
  }
}

template <int NTHR>
__device__ __forceinline__ void store_stage(const StageRegs<NTHR>& r, uint32_t* buf, int tid,
                                            const int (&goff)[loads_per_thread<NTHR>()]) {
#pragma unroll
  for (int u = 0; u < loads_per_thread<NTHR>(); ++u) {
    if (goff[u] == -2) continue;
    const int e = tid + u * NTHR;
#pragma unroll
    for (int pl = 0; pl < kPlanes; ++pl) buf[pl * kCHS + e] = r.w[u][pl];
  }
}

template <typename T, int MODE>
__global__ void __launch_bounds__(kThreads, 1) conv11s4_dgrad_tc_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int KS = kTaps * p.nstage;
  uint4* ws = reinterpret_cast<uint4*>(smem);
  uint32_t* bufs = reinterpret_cast<uint32_t*>(smem + (size_t)KS * kNJ * 32 * 16);

  int tile = blockIdx.x;
  if (tile >= p.total_tiles) return;

  for (int i = tid; i < KS * kNJ * 32; i += kThreads) cp_async16(ws + i, p.wfrag + i);
  cp_async_commit();

  TileGeom tg = tile_geom(p, tile);
  int goff[kLoadsPerThread];
  loader_offsets<kThreads>(p, tg, tid, goff);
  StageRegs<kThreads> sr;
  load_stage<T, MODE, kThreads>(p, tg.n, goff, 0, sr);
  store_stage<kThreads>(sr, bufs, tid, goff);
  cp_async_wait_all();
  __syncthreads();

  const int bandpix = p.PS * p.TQ;
  int it = 0;
  while (true) {
    // This lane's super-pixels: m16 tile a, row g + 8h. (Written out here and
    // in the epilogue: the wgmma kernel's lane_pixels and store_dx_n8 cost
    // this kernel 9% in 3xTF32, 1.59 vs 1.46 ms at the headline on an H200,
    // ptxas 252 vs 223 registers.)
    int sp[2][2];      // smem word offset t*kCHS + window offset of the pixel
    int y0[2], x0[2];  // epilogue pixel (h = t & 1): 4*P0 - pad, 4*Q0 - pad; y0 huge if invalid
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int ml = warp * 32 + a * 16 + h * 8 + g;
        const int mb = tg.m0 + ml;
        const int prel = mb / p.TQ, qrel = mb - prel * p.TQ;
        const bool valid = ml < p.MT && mb < bandpix && tg.qb + qrel < p.QS;
        const int off = valid ? (prel - tg.prel_lo + 2) * p.RSW + qrel + 2 : 2 * p.RSW + 2;
        sp[a][h] = t * kCHS + off;
        if (h == (t & 1)) {
          y0[a] = valid ? 4 * (p.P0s + prel) - p.pad : INT32_MIN / 2;
          x0[a] = 4 * (p.Q0s + tg.qb + qrel) - p.pad;
        }
      }

    // 3xTF32 also keeps a running total: the tensor cores' fp32 accumulation
    // truncates, so each stage's 27 MMAs go into acc, which is then added
    // (round to nearest) into tot and cleared (the weight grad's "flush").
    float acc[2][kNT8][4], tot[2][kNT8][4];
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
      for (int j = 0; j < kNT8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[a][j][e] = tot[a][j][e] = 0.f;

    const int ntile = tile + gridDim.x;
    TileGeom ng = tg;
    int ngoff[kLoadsPerThread];
#pragma unroll
    for (int u = 0; u < kLoadsPerThread; ++u) ngoff[u] = goff[u];

    for (int st = 0; st < p.nstage; ++st) {
      // Issue the next stage's global loads (this tile's next stage, or the
      // next tile's first) before this stage's MMAs.
      bool more = true;
      if (st + 1 < p.nstage) {
        load_stage<T, MODE, kThreads>(p, tg.n, goff, st + 1, sr);
      } else if (ntile < p.total_tiles) {
        ng = tile_geom(p, ntile);
        loader_offsets<kThreads>(p, ng, tid, ngoff);
        load_stage<T, MODE, kThreads>(p, ng.n, ngoff, 0, sr);
      } else {
        more = false;
      }

      const uint32_t* S = bufs + (it & 1) * kBufWords;
      const uint4* B = ws + (size_t)st * kTaps * kNJ * 32 + lane;
#pragma unroll
      for (int tap = 0; tap < kTaps; ++tap) {
        const int ti = tap / 3, tj = tap - 3 * (tap / 3);
        const int toff = ti * p.RSW + tj;
        uint32_t araw[2][4];
#pragma unroll
        for (int a = 0; a < 2; ++a) {
          araw[a][0] = S[sp[a][0] - toff];
          araw[a][1] = S[sp[a][1] - toff];
          araw[a][2] = S[sp[a][0] - toff + 4 * kCHS];
          araw[a][3] = S[sp[a][1] - toff + 4 * kCHS];
        }
        uint4 bq[kNJ];
#pragma unroll
        for (int jj = 0; jj < kNJ; ++jj) bq[jj] = B[(tap * kNJ + jj) * 32];

        if constexpr (MODE == kH16) {
#pragma unroll
          for (int jj = 0; jj < kNJ; ++jj)
#pragma unroll
            for (int a = 0; a < 2; ++a) {
              mma_16<T>(acc[a][2 * jj], araw[a], bq[jj].x, bq[jj].y);
              mma_16<T>(acc[a][2 * jj + 1], araw[a], bq[jj].z, bq[jj].w);
            }
        } else if constexpr (MODE == kTF) {
          uint32_t ab[2][4];
#pragma unroll
          for (int a = 0; a < 2; ++a)
#pragma unroll
            for (int e = 0; e < 4; ++e) ab[a][e] = to_tf32(__uint_as_float(araw[a][e]));
#pragma unroll
          for (int jj = 0; jj < kNJ; ++jj)
#pragma unroll
            for (int a = 0; a < 2; ++a) {
              mma_tf32(acc[a][2 * jj], ab[a], bq[jj].x, bq[jj].y);
              mma_tf32(acc[a][2 * jj + 1], ab[a], bq[jj].z, bq[jj].w);
            }
        } else {
          uint32_t ab[2][4], as[2][4];
#pragma unroll
          for (int a = 0; a < 2; ++a)
#pragma unroll
            for (int e = 0; e < 4; ++e) split_3xtf32(__uint_as_float(araw[a][e]), ab[a][e], as[a][e]);
#pragma unroll
          for (int jj = 0; jj < kNJ; ++jj) {
            const uint32_t braw[2][2] = {{bq[jj].x, bq[jj].y}, {bq[jj].z, bq[jj].w}};
            mma_3xtf32_2x2(acc, 2 * jj, ab, as, braw);
          }
        }
      }

      if constexpr (MODE == kX3) {
#pragma unroll
        for (int a = 0; a < 2; ++a)
#pragma unroll
          for (int j = 0; j < kNT8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              tot[a][j][e] += acc[a][j][e];
              acc[a][j][e] = 0.f;
            }
      }
      if (more) {
        int sg[kLoadsPerThread];
#pragma unroll
        for (int u = 0; u < kLoadsPerThread; ++u) sg[u] = st + 1 < p.nstage ? goff[u] : ngoff[u];
        store_stage<kThreads>(sr, bufs + ((it + 1) & 1) * kBufWords, tid, sg);
      }
      __syncthreads();
      ++it;
    }

    // Epilogue: lane (g, t) gets the 4 columns b = 0..3 of pixel row g + 8*(t&1),
    // a = 2*(nt&1) + (t>>1), channel c = nt>>1, from its own pair and lane t^1's.
    {
      T* dx = static_cast<T*>(p.dx) + (size_t)tg.n * kC * p.H * p.W;
      const bool odd = t & 1;
#pragma unroll
      for (int a = 0; a < 2; ++a)
#pragma unroll
        for (int nt = 0; nt < kNT8; ++nt) {
          const float* c = MODE == kX3 ? tot[a][nt] : acc[a][nt];
          const float s0 = odd ? c[0] : c[2], s1 = odd ? c[1] : c[3];
          const float r0 = __shfl_xor_sync(0xffffffffu, s0, 1);
          const float r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
          float v[4];
          v[0] = odd ? r0 : c[0];
          v[1] = odd ? r1 : c[1];
          v[2] = odd ? c[2] : r0;
          v[3] = odd ? c[3] : r1;
          const int ch = nt >> 1, aph = (nt & 1) * 2 + (t >> 1);
          const int y = y0[a] + aph;
          if (y < 0 || y >= p.H) continue;
          T* row = dx + ((size_t)ch * p.H + y) * p.W;
          const int x = x0[a];
          if (p.vec2) {
            // x even, W even: each pair is wholly inside or outside [0, W)
#pragma unroll
            for (int bp = 0; bp < 2; ++bp) {
              const int xx = x + 2 * bp;
              if (xx < 0 || xx >= p.W) continue;
              if constexpr (std::is_same_v<T, float>) {
                *reinterpret_cast<float2*>(row + xx) = make_float2(v[2 * bp], v[2 * bp + 1]);
              } else {
                const uint32_t w2 = pack2(from_f<T>(v[2 * bp]), from_f<T>(v[2 * bp + 1]));
                *reinterpret_cast<uint32_t*>(row + xx) = w2;
              }
            }
          } else {
#pragma unroll
            for (int b = 0; b < 4; ++b) {
              const int xx = x + b;
              if (xx >= 0 && xx < p.W) row[xx] = from_f<T>(v[b]);
            }
          }
        }
    }

    if (ntile >= p.total_tiles) break;
    tile = ntile;
    tg = ng;
#pragma unroll
    for (int u = 0; u < kLoadsPerThread; ++u) goff[u] = ngoff[u];
  }
}

// ---------------------------------------------------------------------------
// Hopper path (sm_90a, bf16/fp16): the same tiles, dy window and A
// gather as above, the MMAs as wgmma with A from registers (wgmma's per-warp
// A / D fragments are the mma.sync m16n8k8 / m16n8k16 ones) and B read by the
// tensor cores from resident weights in the canonical layout. 640 threads:
// four consumer warpgroups, warpgroup wg owning super-pixels [64 wg, 64 wg +
// 64) of the tile as one m64 block (warp wq of it rows 16 wq .. 16 wq + 15),
// one m64n48 wgmma per warpgroup and k step (tap); and one producer
// warpgroup that only moves dy into the stage buffers (see the loaders).
constexpr int kGConsumerWGs = 4;
constexpr int kGProdThreads = 128;  // one producer warpgroup (dy loads)
constexpr int kGThreads = kGConsumerWGs * 128 + kGProdThreads;
constexpr int kGNT8 = 6;            // 48 columns
// resident B bytes: (9 * nstage) k steps x 6 n8 blocks x 256 bytes
__host__ __device__ constexpr size_t gmma_wbytes(int nstage) { return (size_t)kTaps * nstage * kGNT8 * 256; }

// B in the canonical K-major, no-swizzle layout: per k step ks = stage * 9 +
// tap (32 bytes of k: 16 halves = the stage's channels) 6 blocks
// of 8 columns, each two 8 x 16-byte core matrices (k halves kc = 0, 1);
// descriptor LBO 128, SBO 256 (gmma_desc). Zeros where r or s > 10 or the
// channel is >= K.
template <typename T, int MODE>
__global__ void dgrad_prep_weights_gmma_kernel(const T* __restrict__ w, int K, int nstage, uint4* __restrict__ out) {
  const int block = kTaps * nstage * kGNT8 * 16;
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= block) return;
  const int nr = idx & 7, kc = (idx >> 3) & 1, nb = (idx >> 4) % kGNT8, ks = (idx >> 4) / kGNT8;
  const int st = ks / kTaps, tap = ks - st * kTaps;
  const int n = nb * 8 + nr;
  auto val = [&](int ch) { return phase_weight(w, K, tap, n, ch); };
  static_assert(MODE == kH16, "16-bit only");
  uint32_t v[4];
  const int ch0 = st * 16 + kc * 8;
#pragma unroll
  for (int e = 0; e < 4; ++e) v[e] = pack2(from_f<T>(val(ch0 + 2 * e)), from_f<T>(val(ch0 + 2 * e + 1)));
  out[idx] = make_uint4(v[0], v[1], v[2], v[3]);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Why a producer warpgroup: with the mma.sync kernel's register-staged dy
// loads in the consumers (512 threads), ~400 instructions of loads and
// address arithmetic per stage sat between the barrier and the next wgmma,
// in every warp, and a wgmma fence may also wait for the loads in flight
// (not measured). Moved to a producer warpgroup: bf16 0.474 -> 0.414 ms
// (H200, two separate runs). Producer thread i handles window cells i, i + 128,
// i + 256, i + 384 (loader_offsets).
//
// 16-bit producer, register-staged: loads a stage's 16 channels as channel
// pairs (lo = even channel) one stage ahead, stores them before the barrier.
// (cp.async cannot build the pairs: 2-byte elements. Interleaving dy into
// pair words first and copying those by cp.async measured slower: 0.404 vs
// 0.348 ms at the headline in the development harness, the extra pass
// included.)
// (The loads keep their own loop, not load_stage: __ldg and the image base
// held per tile are what the harness measured.)
template <typename T>
struct GLoader16 {
  static constexpr int kLPT = loads_per_thread<kGProdThreads>();
  int off[kLPT];  // cell offset in a channel plane; -1 zero cell, -2 no cell
  const T* img;   // dy of the cursor's image
  StageRegs<kGProdThreads> r;

  __device__ __forceinline__ void set_tile(const Params& p, const TileGeom& tg, int ptid) {
    loader_offsets<kGProdThreads>(p, tg, ptid, off);
    img = static_cast<const T*>(p.dy) + (size_t)tg.n * p.K * p.PQ;
  }
  __device__ __forceinline__ void load(const Params& p, int st) {
    const int ch0 = st * 16;
    const int nch = min(16, p.K - ch0);  // channels of this stage that exist
    const T* src = img + (size_t)ch0 * p.PQ;
#pragma unroll
    for (int u = 0; u < kLPT; ++u) {
      const bool ok = off[u] >= 0;
      const uint16_t* q16 = reinterpret_cast<const uint16_t*>(src + (ok ? off[u] : 0));
#pragma unroll
      for (int pl = 0; pl < kPlanes; ++pl) {
        const uint32_t lo = (ok && 2 * pl < nch) ? __ldg(q16 + (size_t)(2 * pl) * p.PQ) : 0u;
        const uint32_t hi = (ok && 2 * pl + 1 < nch) ? __ldg(q16 + (size_t)(2 * pl + 1) * p.PQ) : 0u;
        r.w[u][pl] = lo | (hi << 16);
      }
    }
  }
  __device__ __forceinline__ void store(uint32_t* buf, int ptid) const {
    store_stage<kGProdThreads>(r, buf, ptid, off);
  }
};

// A lane's two super-pixels, rows g and g + 8 of the m16 block at tile-local
// super-pixel ml0: sp = word offset in the window (plane t) for the A gather;
// (y0, x0) = dx position of phase (0, 0) of the one whose epilogue the lane
// writes (row t & 1), y0 very negative where it lies past the tile or band
// (its gather then reads a valid dummy cell).
struct LanePixels {
  int sp[2];
  int y0, x0;
};
__device__ __forceinline__ LanePixels lane_pixels(const Params& p, const TileGeom& tg, int ml0, int g, int t) {
  LanePixels r{};
  const int bandpix = p.PS * p.TQ;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int ml = ml0 + h * 8 + g;
    const int mb = tg.m0 + ml;
    const int prel = mb / p.TQ, qrel = mb - prel * p.TQ;
    const bool valid = ml < p.MT && mb < bandpix && tg.qb + qrel < p.QS;
    const int off = valid ? (prel - tg.prel_lo + 2) * p.RSW + qrel + 2 : 2 * p.RSW + 2;
    r.sp[h] = t * kCHS + off;
    if (h == (t & 1)) {
      r.y0 = valid ? 4 * (p.P0s + prel) - p.pad : INT32_MIN / 2;
      r.x0 = 4 * (p.Q0s + tg.qb + qrel) - p.pad;
    }
  }
  return r;
}

// Epilogue of n8 tile nt of a lane's m16n8 accumulators c (rows g, g + 8 of
// its warp's super-pixels): one shuffle with lane t ^ 1 gives lane (g, t) the
// 4 columns b = 0..3 of super-pixel row g + 8 (t & 1), phase row a = 2 (nt &
// 1) + (t >> 1), channel nt >> 1, written as 4 consecutive dx elements (two
// pair stores where p.vec2: x even and W even, so a pair is wholly inside or
// outside [0, W)). (y0, x0): dx position of that super-pixel's phase (0, 0);
// y0 very negative where the row holds no super-pixel.
template <typename T>
__device__ __forceinline__ void store_dx_n8(const Params& p, T* dx, const float* c, int nt, int t, int y0, int x0) {
  const bool odd = t & 1;
  const float s0 = odd ? c[0] : c[2], s1 = odd ? c[1] : c[3];
  const float r0 = __shfl_xor_sync(0xffffffffu, s0, 1);
  const float r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
  float v[4];
  v[0] = odd ? r0 : c[0];
  v[1] = odd ? r1 : c[1];
  v[2] = odd ? c[2] : r0;
  v[3] = odd ? c[3] : r1;
  const int ch = nt >> 1, aph = (nt & 1) * 2 + (t >> 1);
  const int y = y0 + aph;
  if (y < 0 || y >= p.H) return;
  T* row = dx + ((size_t)ch * p.H + y) * p.W;
  if (p.vec2) {
#pragma unroll
    for (int bp = 0; bp < 2; ++bp) {
      const int xx = x0 + 2 * bp;
      if (xx < 0 || xx >= p.W) continue;
      if constexpr (std::is_same_v<T, float>) {
        *reinterpret_cast<float2*>(row + xx) = make_float2(v[2 * bp], v[2 * bp + 1]);
      } else {
        *reinterpret_cast<uint32_t*>(row + xx) = pack2(from_f<T>(v[2 * bp]), from_f<T>(v[2 * bp + 1]));
      }
    }
  } else {
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int xx = x0 + b;
      if (xx >= 0 && xx < p.W) row[xx] = from_f<T>(v[b]);
    }
  }
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// Consumer pipeline, per warpgroup: k step s (stage s / 9, tap s % 9) is
// gathered into A buffer s % NB two steps ahead, right after the wait that
// retires the last wgmma that read that buffer (refilling it earlier makes
// ptxas serialize the wgmmas). One CTA barrier per stage, at tap 7 (after
// its wgmma, before the gather of the next stage's tap 0): the window of
// stage j is read only between the barriers of stages j - 1 and j; the
// producer has it in place (stored) before the barrier of stage j - 1 and
// refills its buffer only after the barrier of stage j. The schedule runs on across tiles (the
// producer's cursor walks tile by tile, stage by stage); each tile's first
// two gathers follow its predecessor's epilogue. Warpgroups past the tile's
// last super-pixel still run the wgmmas (on a dummy window offset: a branch
// around them makes ptxas serialize every wgmma, C7518) and skip only the
// epilogue.
template <typename T, int MODE>
__global__ void __launch_bounds__(kGThreads, 1) conv11s4_dgrad_gmma_kernel(const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(MODE == kH16, "16-bit only");
  constexpr int NACC = kGNT8 * 4;
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = warp >> 2, wq = warp & 3;
  const int g = lane >> 2, t = lane & 3;
  const size_t wbytes = gmma_wbytes(p.nstage);
  uint32_t* bufs = reinterpret_cast<uint32_t*>(smem + wbytes);

  int tile = blockIdx.x;
  if (tile >= p.total_tiles) return;
  {
    uint4* dst = reinterpret_cast<uint4*>(smem);
    for (int i = tid; i < (int)(wbytes / 16); i += kGThreads) cp_async16(dst + i, p.wfrag + i);
    cp_async_commit();
  }

  if (wg == kGConsumerWGs) {
    const int ptid = tid - kGConsumerWGs * 128;
    int ltile = tile, lst = 0;  // the producer's cursor
    {
      // ---- producer, register-staged, 2 buffers ----
      GLoader16<T> ld;
      ld.set_tile(p, tile_geom(p, tile), ptid);
      ld.load(p, 0);
      ld.store(bufs, ptid);
      bool lmore = true;  // the cursor's stage exists (and is in ld.r)
      auto advance = [&]() {
        if (++lst == p.nstage) {
          lst = 0;
          ltile += gridDim.x;
          if (ltile < p.total_tiles) ld.set_tile(p, tile_geom(p, ltile), ptid);
        }
        lmore = ltile < p.total_tiles;
        if (lmore) ld.load(p, lst);
      };
      advance();
      cp_async_wait_all();
      fence_proxy_async();
      __syncthreads();
      int gs = 0;
      for (; tile < p.total_tiles; tile += gridDim.x) {
#pragma unroll 1
        for (int st = 0; st < p.nstage; ++st, ++gs) {
          if (lmore) ld.store(bufs + ((gs + 1) & 1) * kBufWords, ptid);
          __syncthreads();
          advance();
        }
      }
    }
    return;
  }

  // ---- consumers ----
  const uint64_t desc0 = gmma_desc(smem_u32(smem));
  cp_async_wait_all();
  fence_proxy_async();  // B arrived by cp.async; the tensor cores read it
  __syncthreads();

  const int bandpix = p.PS * p.TQ;
  int cur = 0;  // buffer of the current stage (two, alternating)
  float acc[NACC];
#pragma unroll
  for (int i = 0; i < NACC; ++i) acc[i] = 0.f;
  // A register buffers (dividing the 9 taps of a stage): the gather runs two
  // k steps ahead of the wgmmas, and one wgmma group stays pending; the
  // register-staged producer leaves room for no more.
  constexpr int NB = 3, AH = 2;
  uint32_t A[NB][4];

  for (; tile < p.total_tiles; tile += gridDim.x) {
    const TileGeom tg = tile_geom(p, tile);
    // This lane's super-pixels (rows g, g + 8 of the warp's m16 block).
    const LanePixels lp = lane_pixels(p, tg, wg * 64 + wq * 16, g, t);
    const int(&sp)[2] = lp.sp;
    const int y0 = lp.y0, x0 = lp.x0;
    const bool active = wg * 64 < p.MT && tg.m0 + wg * 64 < bandpix;

    // A fragment of tap `tap` from window S into buffer u
    auto fill = [&](const uint32_t* S, int tap, int u) {
      const int toff = (tap / 3) * p.RSW + tap % 3;
      A[u][0] = S[sp[0] - toff];
      A[u][1] = S[sp[1] - toff];
      A[u][2] = S[sp[0] - toff + 4 * kCHS];
      A[u][3] = S[sp[1] - toff + 4 * kCHS];
    };
#pragma unroll
    for (int tap = 0; tap < AH; ++tap) fill(bufs + cur * kBufWords, tap, tap);

#pragma unroll 1
    for (int st = 0; st < p.nstage; ++st) {
      const int nxt = cur ^ 1;
      const uint32_t* Scur = bufs + cur * kBufWords;
      const uint32_t* Snext = bufs + nxt * kBufWords;
      cur = nxt;
      const uint64_t dst = desc0 + (uint64_t)(st * kTaps * kGNT8 * 16);
#pragma unroll
      for (int tap = 0; tap < kTaps; ++tap) {
        const int u = tap % NB;
        gmma_fence();
        gmma_rs<T, kGNT8>(acc, A[u], dst + (uint64_t)(tap * kGNT8 * 16));
        gmma_commit();
        gmma_wait<NB - AH>();
        if (tap == kTaps - AH) __syncthreads();  // the producer has the next stage in place
        const int tn = tap + AH, un = (tap + AH) % NB;
        if (tn < kTaps) fill(Scur, tn, un);
        else if (st + 1 < p.nstage) fill(Snext, tn - kTaps, un);
      }
    }

    gmma_wait<0>();
#pragma unroll
    for (int i = 0; i < NACC; ++i) pin(acc[i]);
    if (active) {
      T* dx = static_cast<T*>(p.dx) + (size_t)tg.n * kC * p.H * p.W;
#pragma unroll
      for (int nt = 0; nt < kGNT8; ++nt) store_dx_n8(p, dx, &acc[4 * nt], nt, t, y0, x0);
    }
    // the next tile's first wgmma adds to these
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = 0.f;
  }
#endif
}

// ---------------------------------------------------------------------------
// Hopper, fp32-accurate (3xFP16; Fp32Math::kAccurate on an sm_90 device with
// sm_90a code, K <= 96). dy and the weights are each scaled by a power of two
// and split into fp16 hi + lo parts (ptx.cuh); three products per k step,
// lo*hi + hi*lo + hi*hi, as two wgmmas with both operands in shared memory:
// A_hi x [B_hi | B_lo] (m64n96: columns 0-47 take hi*hi, 48-95 hi*lo) and
// A_lo x B_hi (m64n48 into columns 0-47). Why shared-memory A: the gather of
// the 16-bit kernel above reads the same bytes from shared memory, with 8
// loads per tap and lane and the registers to hold hi and lo; a descriptor
// reads them with no instructions, if every m64 block of the tile is 64
// consecutive cells of the window. Hence this kernel's tiling:
//  - each (image, band) is a block of (PS + 2) x RSW cells, RSW = TQ + 2:
//    dy rows P0s - 2 .. P0s + PS - 1 and columns Q0s + qb - 2 .. (the halo of
//    2 rows above and 2 columns to the left that the taps reach), and the
//    blocks are stacked into one sequence of cells. Output cell o (a
//    super-pixel where its row and column are past the halo) takes tap
//    (i, j) from cell o - i RSW - j, which is never in another block; the
//    halo cells' outputs are computed and dropped (RSW / TQ and (PS + 2) /
//    PS more MMAs: 7% at the headline).
//  - a tile is 256 consecutive cells (4 warpgroups x m64) and its window the
//    2 RSW + 2 cells before them too, so a tap is a shift of the A
//    descriptor by i RSW + j cells.
// A stage (16 channels) of the window is stored as hi and lo parts, each two
// k-chunk planes of 16 bytes per cell (8 halves: channels 8 kc .. 8 kc + 7),
// so 8 consecutive cells are one core matrix (descriptor: lbo = the plane
// size, sbo = 128). B (weights) resident: per k step 12 n8 blocks, B_hi then
// B_lo, the 16-bit kernel's layout. Scales: the weights' from their largest
// finite magnitude (the prep kernel); dy's per stage of a tile, from the
// stage's largest finite magnitude. Each stage's products are flushed after
// the stage (accumulators scaled back and added, round to nearest, into an
// fp32 total, as 3xTF32 does above), which also bounds the effect of the
// tensor cores' truncating accumulation. Every dx element is written by one
// lane of one tile: deterministic.
constexpr int kXThreads = 512;                       // four warpgroups
constexpr int kXMT = 256;                            // output cells per tile
constexpr int kXLPT = 3;                             // window cells per thread
constexpr int kXWinMax = kXLPT * 128;                // window cells: kXMT + 2 RSW + 2
constexpr int kXBandMax = (kXWinMax - kXMT - 2) / 2 - 2;  // 61 super-pixel columns
constexpr int kXPlane = kXWinMax * 16;               // bytes of a k-chunk plane
constexpr int kXStage = 4 * kXPlane;                 // hi and lo, two planes each
constexpr int kXStepBytes = 2 * kGNT8 * 256;         // B_hi and B_lo of one k step
__host__ __device__ constexpr size_t x3_wbytes(int nstage) { return (size_t)kTaps * nstage * kXStepBytes; }
// after B: the weights' scale exponent (16 bytes); after the stage buffers:
// the warps' largest magnitudes of three stages (see the schedule)
constexpr int kXMaxSlots = 3;
constexpr int kXExtra = kXMaxSlots * (kXThreads / 32) * 4;

// B_hi and B_lo (scaled by 2^ew, ew from the largest finite |w|), then ew.
// One block: w is small, and its largest magnitude comes first.
template <int NTHR>
__global__ void __launch_bounds__(NTHR) dgrad_prep_weights_x3_kernel(const float* __restrict__ w, int K, int nstage,
                                                                     uint4* __restrict__ out) {
  __shared__ float red[NTHR / 32];
  float m = 0.f;
  for (int i = threadIdx.x; i < K * kC * kR * kR; i += NTHR) m = max_finite_abs(m, w[i]);
  const int ew = fp16_exp(block_max<NTHR>(m, red));
  const float sw = pow2f(ew);
  const int entries = (int)(x3_wbytes(nstage) / 16);
  for (int idx = threadIdx.x; idx < entries; idx += NTHR) {
    const int nr = idx & 7, kc = (idx >> 3) & 1, nb = (idx >> 4) % (2 * kGNT8), ks = (idx >> 4) / (2 * kGNT8);
    const int st = ks / kTaps, tap = ks - st * kTaps;
    const bool lo = nb >= kGNT8;
    const int n = (lo ? nb - kGNT8 : nb) * 8 + nr, ch0 = st * 16 + kc * 8;
    uint32_t v[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      uint32_t h, l;
      split_fp16x2(sw * phase_weight(w, K, tap, n, ch0 + 2 * e), sw * phase_weight(w, K, tap, n, ch0 + 2 * e + 1), h,
                   l);
      v[e] = lo ? l : h;
    }
    out[idx] = make_uint4(v[0], v[1], v[2], v[3]);
  }
  if (threadIdx.x == 0) *reinterpret_cast<int*>(out + entries) = ew;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// A stage's dy scale exponent from the warps' largest magnitudes in slot.
__device__ __forceinline__ int stage_exp(const float* slot) {
  const float4* s4 = reinterpret_cast<const float4*>(slot);
  float m = 0.f;
#pragma unroll
  for (int i = 0; i < kXThreads / 128; ++i) {
    const float4 v = s4[i];
    m = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
  }
  return fp16_exp(m);
}

// One thread's part of the dy window of a tile: cells lid + 128 u (u < 3),
// channels 4 q .. 4 q + 3 of a stage (q = its warpgroup), a stage ahead in
// registers.
struct XLoader {
  const float* src[kXLPT];  // dy at channel 0 of the cell's image, row and column; nullptr: a zero cell
  float v[kXLPT][4];

  __device__ __forceinline__ void set_tile(const Params& p, int tile, int lid) {
#pragma unroll
    for (int u = 0; u < kXLPT; ++u) {
      src[u] = nullptr;
      const int cell = tile * kXMT - (2 * p.RSW + 2) + lid + u * 128;
      if (cell < 0 || cell >= p.ncells) continue;
      const int b = cell / p.BLK, rem = cell - b * p.BLK;
      const int rw = rem / p.RSW, cw = rem - rw * p.RSW;
      const int n = b / p.NB, band = b - n * p.NB;
      const int row = p.P0s + rw - 2, col = p.Q0s + band * p.TQ + cw - 2;
      if (row >= 0 && row < p.P && col >= 0 && col < p.Q)
        src[u] = static_cast<const float*>(p.dy) + ((size_t)n * p.K * p.PQ + (size_t)row * p.Q + col);
    }
  }
  __device__ __forceinline__ void load(const Params& p, int st, int q) {
    const int ch0 = st * 16 + 4 * q, nch = min(4, p.K - ch0);
#pragma unroll
    for (int u = 0; u < kXLPT; ++u)
#pragma unroll
      for (int c = 0; c < 4; ++c)
        v[u][c] = (src[u] != nullptr && c < nch) ? __ldg(src[u] + (size_t)(ch0 + c) * p.PQ) : 0.f;
  }
  // This warp's largest finite magnitude of the stage into slot[warp].
  __device__ __forceinline__ void publish_max(float* slot, int warp, int lane) const {
    float m = 0.f;
#pragma unroll
    for (int u = 0; u < kXLPT; ++u)
#pragma unroll
      for (int c = 0; c < 4; ++c) m = max_finite_abs(m, v[u][c]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) slot[warp] = m;
  }
  // The stage's hi and lo parts, scaled by 2^e, into buf (8 bytes per cell
  // and part: half q & 1 of k-chunk q >> 1).
  __device__ __forceinline__ void store(const Params& p, unsigned char* buf, int e, int lid, int q) const {
    const float s = pow2f(e);
    const int off = (q >> 1) * kXPlane + (q & 1) * 8;
#pragma unroll
    for (int u = 0; u < kXLPT; ++u) {
      const int cell = lid + u * 128;
      if (cell >= p.WC) continue;
      uint32_t h0, l0, h1, l1;
      split_fp16x2(s * v[u][0], s * v[u][1], h0, l0);
      split_fp16x2(s * v[u][2], s * v[u][3], h1, l1);
      *reinterpret_cast<uint2*>(buf + off + cell * 16) = make_uint2(h0, h1);
      *reinterpret_cast<uint2*>(buf + 2 * kXPlane + off + cell * 16) = make_uint2(l0, l1);
    }
  }
};
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// Schedule: two stage buffers and one CTA barrier per stage; no producer
// warps (the split and the loads take few instructions per thread, and the
// warpgroups have them to do while their wgmmas run). Between barriers j and
// j + 1 each warpgroup issues stage j's 18 wgmmas; then, while they run, all
// threads split and store stage j + 1 (in registers since the previous
// interval) into the buffer that stage j - 1 used, and issue the loads of
// stage j + 2; then wait for the wgmmas, flush them, and publish stage j + 2's
// largest magnitude per warp in slot (j + 2) % 3. So a stage's scale is
// known to every thread when it splits the stage and when it flushes it, and
// a slot is rewritten three stages later. A tile's dx is written during its
// successor's first wgmmas.
__global__ void __launch_bounds__(kXThreads, 1) conv11s4_dgrad_x3_kernel(const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = warp >> 2, wq = warp & 3;
  const int g = lane >> 2, t = lane & 3;
  const int lid = tid & 127;
  const size_t wbytes = x3_wbytes(p.nstage);
  unsigned char* bufs = smem + wbytes;
  float* wmax = reinterpret_cast<float*>(bufs + 2 * kXStage);  // [kXMaxSlots][16 warps]
  constexpr int kSlot = kXThreads / 32;

  int tile = blockIdx.x;
  if (tile >= p.total_tiles) return;
  {
    uint4* dst = reinterpret_cast<uint4*>(smem);
    for (int i = tid; i < (int)(wbytes / 16); i += kXThreads) cp_async16(dst + i, p.wfrag + i);
    cp_async_commit();
  }
  const int ew = *reinterpret_cast<const int*>(p.wfrag + wbytes / 16);

  // the loads' cursor: a tile and stage, running a stage or two ahead
  XLoader ld;
  int ltile = tile, lst = 0;
  bool lmore = true;  // the cursor's stage exists (and is in ld.v)
  auto advance = [&]() {
    if (++lst == p.nstage) {
      lst = 0;
      ltile += gridDim.x;
      if (ltile < p.total_tiles) ld.set_tile(p, ltile, lid);
    }
    lmore = ltile < p.total_tiles;
    if (lmore) ld.load(p, lst, wg);
  };
  ld.set_tile(p, tile, lid);
  ld.load(p, 0, wg);
  ld.publish_max(wmax, warp, lane);
  cp_async_wait_all();
  __syncthreads();  // stage 0's maxima published
  ld.store(p, bufs, stage_exp(wmax), lid, wg);
  advance();
  if (lmore) ld.publish_max(wmax + kSlot, warp, lane);
  fence_proxy_async();  // B (cp.async) and stage 0 (st.shared): the tensor cores read them
  __syncthreads();

  // window cell of this warpgroup's first output cell, in 16-byte units
  const uint32_t a0 = (smem_u32(bufs) >> 4) + wg * 64 + 2 * p.RSW + 2;
  const uint64_t bdesc0 = gmma_desc(smem_u32(smem));
  constexpr uint32_t kPlaneU = kXPlane >> 4, kStageU = kXStage >> 4, kStepU = kXStepBytes >> 4;
  float acc[2 * kGNT8 * 4], tot[kGNT8 * 4];
#pragma unroll
  for (int i = 0; i < 2 * kGNT8 * 4; ++i) acc[i] = 0.f;
#pragma unroll
  for (int i = 0; i < kGNT8 * 4; ++i) tot[i] = 0.f;

  // dx of tile tl from tot: the cell of this lane's row g + 8 (t & 1) of its
  // warp's 16, skipped (y0 very negative) where that is a halo cell or past
  // the end
  auto epilogue = [&](int tl) {
    const int cell = tl * kXMT + wg * 64 + wq * 16 + (t & 1) * 8 + g;
    const int b = cell / p.BLK, rem = cell - b * p.BLK;
    const int rw = rem / p.RSW, cw = rem - rw * p.RSW;
    const int n = b / p.NB, band = b - n * p.NB;
    const int R = rw - 2, Cq = cw - 2;
    const bool valid = cell < p.ncells && R >= 0 && Cq >= 0 && band * p.TQ + Cq < p.QS;
    float* dxp = static_cast<float*>(p.dx) + (size_t)(valid ? n : 0) * kC * p.H * p.W;
    const int y0 = valid ? 4 * (p.P0s + R) - p.pad : INT32_MIN / 2;
    const int x0 = 4 * (p.Q0s + band * p.TQ + Cq) - p.pad;
#pragma unroll
    for (int nt = 0; nt < kGNT8; ++nt) store_dx_n8(p, dxp, &tot[4 * nt], nt, t, y0, x0);
#pragma unroll
    for (int i = 0; i < kGNT8 * 4; ++i) tot[i] = 0.f;
  };

  int gs = 0, prev = -1;
  for (; tile < p.total_tiles; prev = tile, tile += gridDim.x) {
#pragma unroll 1
    for (int st = 0; st < p.nstage; ++st, ++gs) {
      const uint64_t ahi = gmma_desc((a0 + (gs & 1) * kStageU) << 4, kXPlane, 128), alo = ahi + 2 * kPlaneU;
      const uint64_t bd = bdesc0 + (uint64_t)st * kTaps * kStepU;
      gmma_fence();
#pragma unroll
      for (int tap = 0; tap < kTaps; ++tap) {
        const uint32_t toff = (tap / 3) * p.RSW + tap % 3;
        gmma_ss<__half, 2 * kGNT8>(acc, ahi - toff, bd + tap * kStepU, tap > 0);  // tap 0 overwrites
        gmma_ss<__half, kGNT8>(acc, alo - toff, bd + tap * kStepU, 1);
      }
      gmma_commit();

      if (st == 0 && prev >= 0) epilogue(prev);
      if (lmore)
        ld.store(p, bufs + ((gs + 1) & 1) * kXStage, stage_exp(wmax + ((gs + 1) % kXMaxSlots) * kSlot), lid, wg);
      advance();

      gmma_wait<0>();
#pragma unroll
      for (int i = 0; i < 2 * kGNT8 * 4; ++i) pin(acc[i]);
      // dx += acc 2^-(e + ew), as two normal factors
      const int e = max(min(-(stage_exp(wmax + (gs % kXMaxSlots) * kSlot) + ew), 252), -252), e1 = e / 2;
      const float f1 = pow2f(e1), f2 = pow2f(e - e1);
#pragma unroll
      for (int i = 0; i < kGNT8 * 4; ++i) tot[i] = fmaf((acc[i] + acc[kGNT8 * 4 + i]) * f1, f2, tot[i]);

      if (lmore) ld.publish_max(wmax + ((gs + 2) % kXMaxSlots) * kSlot, warp, lane);
      fence_proxy_async();  // the stage just stored
      __syncthreads();      // this stage's buffer read, the next one stored, its successor's maxima published
    }
  }
  epilogue(prev);
#endif
}

// The problem's sizes, super-pixel grid, bands of at most band_max columns
// and pointers into p (the fields both tilings share).
void grid_params(const at::Tensor& grad_output, const at::Tensor& weight, int pad, const at::Tensor& grad_input,
                 int band_max, Params& p) {
  p = Params{};
  p.N = (int)grad_input.size(0);
  p.H = (int)grad_input.size(2);
  p.W = (int)grad_input.size(3);
  p.K = (int)weight.size(0);
  p.P = (int)grad_output.size(2);
  p.Q = (int)grad_output.size(3);
  p.pad = pad;
  p.PQ = p.P * p.Q;
  p.P0s = pad / 4;
  p.Q0s = pad / 4;
  p.PS = (p.H + pad - 1) / 4 - p.P0s + 1;
  p.QS = (p.W + pad - 1) / 4 - p.Q0s + 1;
  p.NB = (p.QS + band_max - 1) / band_max;
  p.TQ = (p.QS + p.NB - 1) / p.NB;
  p.RSW = p.TQ + 2;
  p.vec2 = (pad % 2 == 0 && p.W % 2 == 0 &&
            (reinterpret_cast<uintptr_t>(grad_input.data_ptr()) % (2 * grad_input.element_size())) == 0) ? 1 : 0;
  p.dy = grad_output.data_ptr();
  p.dx = grad_input.data_ptr();
}

// Tiling of a problem (bands, tile size, window) into p; false where no tile
// size fits the window buffer. Every batch size takes these kernels: at
// batch 1-8 the tensor-core input gradient ran 30-48 us against the cuBLAS
// GEMM + fold's 37-88, and the whole fp32 training step 190-220 us against
// 240-450 (H200, 224 x 224, 64 and 96 filters): the GEMM call alone cost up
// to ~185 us of host time at 64 filters.
bool make_params(const at::Tensor& grad_output, const at::Tensor& weight, int pad, const at::Tensor& grad_input,
                 int stage_ch, Params& p) {
  grid_params(grad_output, weight, pad, grad_input, kBandMax, p);
  for (int mt = kMT; mt >= 32; mt /= 2) {
    const int rows = std::min(p.PS, (p.TQ - 1 + mt - 1) / p.TQ + 1);
    const int wpp = (rows + 2) * p.RSW;
    if (wpp <= kWPPMax) {
      p.MT = mt; p.NR = rows + 2; p.WPP = wpp;
      break;
    }
  }
  if (p.MT == 0) return false;
  p.tiles_per_band = (p.PS * p.TQ + p.MT - 1) / p.MT;
  p.tiles_per_img = p.NB * p.tiles_per_band;
  const int64_t total = (int64_t)p.N * p.tiles_per_img;
  if (total > INT32_MAX) return false;
  p.total_tiles = (int)total;
  p.nstage = (p.K + stage_ch - 1) / stage_ch;
  return true;
}

// The 3xFP16 kernel's tiling (stacked blocks of cells, see there).
bool make_params_x3(const at::Tensor& grad_output, const at::Tensor& weight, int pad, const at::Tensor& grad_input,
                    Params& p) {
  grid_params(grad_output, weight, pad, grad_input, kXBandMax, p);
  p.BLK = (p.PS + 2) * p.RSW;
  p.WC = kXMT + 2 * p.RSW + 2;
  const int64_t cells = (int64_t)p.N * p.NB * p.BLK;
  if (cells + kXMT > INT32_MAX) return false;
  p.ncells = (int)cells;
  p.total_tiles = (int)((cells + kXMT - 1) / kXMT);
  p.nstage = (p.K + 15) / 16;
  return true;
}

// GMMA: the wgmma kernel (16-bit), for an sm_90 device when the build has
// sm_90a code; else the mma.sync kernel. Both take the same tiling and the
// same bytes of resident B (in their own layouts), and decline (false) where
// B plus two dy stage buffers do not fit (fp32:
// K <= 112, 16-bit: K <= 224 on H100/H200).
template <typename T, int MODE, bool GMMA>
bool launch(const at::Tensor& grad_output, const at::Tensor& weight, int pad, const at::Tensor& grad_input) {
  const auto* prop = at::cuda::getCurrentDeviceProperties();
  const int max_smem = (int)prop->sharedMemPerBlockOptin, num_sms = prop->multiProcessorCount;
  Params p;
  if (!make_params(grad_output, weight, pad, grad_input, stage_channels<MODE>(), p)) return false;
  const size_t wbytes = gmma_wbytes(p.nstage);
  static_assert(kNJ * 32 * 16 == kGNT8 * 256, "both B layouts: the same bytes per k step");
  const size_t smem = wbytes + 2 * (size_t)kBufWords * 4;  // B + two dy stage buffers
  if (smem > (size_t)max_smem) return false;

  auto stream = c10::cuda::getCurrentCUDAStream();
  auto wbuf = at::empty({(int64_t)wbytes}, grad_output.options().dtype(at::kByte));
  const int prep_threads = (int)(wbytes / 16), prep_blocks = (prep_threads + 255) / 256;
  const T* w = static_cast<const T*>(weight.data_ptr());
  uint4* wf = static_cast<uint4*>(wbuf.data_ptr());
  if constexpr (GMMA) dgrad_prep_weights_gmma_kernel<T, MODE><<<prep_blocks, 256, 0, stream>>>(w, p.K, p.nstage, wf);
  else dgrad_prep_weights_kernel<T, MODE><<<prep_blocks, 256, 0, stream>>>(w, p.K, p.nstage, wf);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  p.wfrag = wf;

  const int grid = std::min(p.total_tiles, num_sms);
  if constexpr (GMMA) {
    allow_max_dynamic_smem(conv11s4_dgrad_gmma_kernel<T, MODE>);
    conv11s4_dgrad_gmma_kernel<T, MODE><<<grid, kGThreads, smem, stream>>>(p);
  } else {
    allow_max_dynamic_smem(conv11s4_dgrad_tc_kernel<T, MODE>);
    conv11s4_dgrad_tc_kernel<T, MODE><<<grid, kThreads, smem, stream>>>(p);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

// The 3xFP16 kernel (sm_90 device, sm_90a code): false where B (K <= 96)
// and the two stage buffers do not fit.
bool launch_x3(const at::Tensor& grad_output, const at::Tensor& weight, int pad, const at::Tensor& grad_input) {
  const auto* prop = at::cuda::getCurrentDeviceProperties();
  const int max_smem = (int)prop->sharedMemPerBlockOptin, num_sms = prop->multiProcessorCount;
  Params p;
  if (!make_params_x3(grad_output, weight, pad, grad_input, p)) return false;
  const size_t wbytes = x3_wbytes(p.nstage);
  const size_t smem = wbytes + 2 * (size_t)kXStage + kXExtra;
  if (smem > (size_t)max_smem) return false;

  auto stream = c10::cuda::getCurrentCUDAStream();
  auto wbuf = at::empty({(int64_t)wbytes + 16}, grad_output.options().dtype(at::kByte));
  uint4* wf = static_cast<uint4*>(wbuf.data_ptr());
  dgrad_prep_weights_x3_kernel<1024><<<1, 1024, 0, stream>>>(static_cast<const float*>(weight.data_ptr()), p.K,
                                                            p.nstage, wf);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  p.wfrag = wf;
  allow_max_dynamic_smem(conv11s4_dgrad_x3_kernel);
  conv11s4_dgrad_x3_kernel<<<std::min(p.total_tiles, num_sms), kXThreads, smem, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

}  // namespace

bool conv11s4_backward_input_fast(const at::Tensor& grad_output, const at::Tensor& weight, int64_t padding,
                                  Fp32Math math, const at::Tensor& grad_input) {
  if (grad_output.dim() != 4 || weight.dim() != 4 || grad_input.dim() != 4) return false;
  if (weight.size(1) != kC || weight.size(2) != kR || weight.size(3) != kR) return false;
  if (grad_input.size(1) != kC) return false;
  const int64_t N = grad_input.size(0), H = grad_input.size(2), W = grad_input.size(3);
  const int64_t K = weight.size(0);
  if (N < 1 || K < 1 || grad_output.size(0) != N || grad_output.size(1) != K) return false;
  if (padding < 0 || padding > 4096) return false;
  if (H < 1 || W < 1 || H > (1 << 20) || W > (1 << 20)) return false;
  if (H + 2 * padding < kR || W + 2 * padding < kR) return false;
  const int64_t P = (H + 2 * padding - kR) / 4 + 1, Q = (W + 2 * padding - kR) / 4 + 1;
  if (grad_output.size(2) != P || grad_output.size(3) != Q) return false;
  if (K * P * Q >= INT32_MAX || kC * H * W >= INT32_MAX) return false;
  if (!grad_output.is_contiguous() || !weight.is_contiguous() || !grad_input.is_contiguous()) return false;
  const auto dt = grad_output.scalar_type();
  if (weight.scalar_type() != dt || grad_input.scalar_type() != dt) return false;
  if (!grad_output.is_cuda() || weight.device() != grad_output.device() ||
      grad_input.device() != grad_output.device())
    return false;
  c10::cuda::CUDAGuard guard(grad_output.device());
  if (at::cuda::getCurrentDeviceProperties()->major < 8) return false;
  const int pad = (int)padding;
  // wgmma for 16-bit and fp32-accurate (3xFP16) where available; TF32 stays
  // on mma.sync (see the top)
  const bool gmma = gmma_available(grad_output.get_device());
  switch (dt) {
    case at::kFloat:
      if (math != Fp32Math::kAccurate) return launch<float, kTF, false>(grad_output, weight, pad, grad_input);
      if (gmma && launch_x3(grad_output, weight, pad, grad_input)) return true;
      return launch<float, kX3, false>(grad_output, weight, pad, grad_input);
    case at::kBFloat16:
      if (gmma && launch<__nv_bfloat16, kH16, true>(grad_output, weight, pad, grad_input)) return true;
      return launch<__nv_bfloat16, kH16, false>(grad_output, weight, pad, grad_input);
    case at::kHalf:
      if (gmma && launch<__half, kH16, true>(grad_output, weight, pad, grad_input)) return true;
      return launch<__half, kH16, false>(grad_output, weight, pad, grad_input);
    default:
      return false;
  }
}

}  // namespace alexop::cuda
