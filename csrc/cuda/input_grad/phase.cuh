#pragma once
// The input gradient (dgrad) of the 11x11 stride-4 convolution in phase
// (space-to-depth) form: what its three kernels (mma_sync.cu, gmma.cu,
// x3.cu) share.
//
// With h' = h + pad = 4*P0 + a (a = 0..3) and r = a + 4i, p = P0 - i
// (i = 0..2), and the same for columns (b, j, Q0):
//   dx[n, c, 4*P0 + a - pad, 4*Q0 + b - pad]
//     = sum_{k, i, j} dy[n, k, P0 - i, Q0 - j] * W[k, c, a + 4i, b + 4j]
// (zero terms: r > 10, s > 10, or (P0 - i, Q0 - j) outside the P x Q grid).
// One implicit GEMM per image: M = super-pixels (P0, Q0), N = 48 = (c, a, b)
// with n = c*16 + a*4 + b, reduction = (stage, tap = i*3 + j, channel within
// the stage): 9 * K (864 at K = 96).
//
// Tiling (mma_sync.cu, gmma.cu). Super-pixel columns are split into bands of
// TQ <= 64 columns (one band when the image is at most ~256 wide); inside a
// band the super-pixels are flattened row-major and a tile is MT (256)
// consecutive of them, so at 224 x 224 (57 x 57 super-pixels, TQ = 57) an
// image is 13 tiles and only the last is partial. A persistent CTA loops over
// tiles.
//
// A (dy) is streamed per stage of 8 "word planes" (fp32: 8 channels, one k8
// step of m16n8k8; 16-bit: 8 channel pairs packed (lo = even channel), one
// k16 step of m16n8k16). A plane holds the NR x (TQ + 2) dy window of the
// tile (its super-pixel rows plus a halo of 2 rows above, 2 columns to the
// left); cells outside the dy grid are stored as zero, which is the whole
// boundary handling. Plane stride 520 words (= 8 mod 32 banks), so the 4
// planes t = 0..3 of a fragment load land in disjoint bank octets. The A
// fragment for super-pixel m (lane row g / g+8) and tap (i, j) is word plane
// t / t+4 at pixoff(m) - i*(TQ+2) - j. Every dx element belongs to exactly
// one super-pixel of exactly one tile and one lane: no atomics, bitwise
// deterministic.
//
// Zero B entries (r or s > 10, padded channels) still multiply finite-or-not
// dy words: an Inf in dy can make NaN of dx elements whose window excludes
// it. The epilogues only raise a flag where a result came out NaN
// (flag_nan); a second kernel (fix_nan.cu) then recomputes the NaN elements
// exactly. Recomputing inside the epilogues put a noinline call and a stack
// frame into the tile loop, which slowed the kernels (docs/perf-history.md).

#include "../common/constants.h"
#include "../common/precision.h"
#include "../common/ptx.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace alexop::cuda::input_grad::phase {

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

struct Params {
  const void* dy;
  const uint4* wfrag;
  const void* w;  // the weights as given (K, 3, 11, 11): the exact recomputation reads them
  void* dx;
  int64_t dxs;    // dx's image stride: C * H * W of a channel slice's grad_input
  int* nan_flag;  // set to 1 where a result came out NaN (flag_nan)
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
template <int MODE> __host__ __device__ constexpr int stage_channels() { return MODE == k16 ? 16 : 8; }

// B's entry for column n = (c, a, b), tap (i, j) and channel ch:
// W[ch, c, a + 4i, b + 4j], zero where r or s > 10 or ch >= K.
template <typename T>
__device__ __forceinline__ float phase_weight(const T* w, int K, int tap, int n, int ch) {
  const int i = tap / 3, j = tap - 3 * i;
  const int c = n >> 4, r = ((n >> 2) & 3) + 4 * i, s = (n & 3) + 4 * j;
  if (ch >= K || r >= kR || s >= kR) return 0.f;
  return to_f(w[((size_t)ch * kC + c) * (kR * kR) + r * kR + s]);
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

// Raises p.nan_flag where one of a thread's N results came out NaN.
template <int N>
__device__ __forceinline__ void flag_nan(const Params& p, const float* acc) {
  bool nan = false;
#pragma unroll
  for (int i = 0; i < N; ++i) nan |= acc[i] != acc[i];
  if (__builtin_expect(nan, 0)) *reinterpret_cast<volatile int*>(p.nan_flag) = 1;
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
      if constexpr (MODE == k16) {
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

// The wgmma kernels: four consumer warpgroups of 64 super-pixels (and, for
// 16-bit, a producer warpgroup), 48 columns.
constexpr int kGConsumerWGs = 4;
constexpr int kGProdThreads = 128;  // one producer warpgroup (dy loads)
constexpr int kGThreads = kGConsumerWGs * 128 + kGProdThreads;
constexpr int kGNT8 = 6;            // 48 columns
// resident B bytes: (9 * nstage) k steps x 6 n8 blocks x 256 bytes
__host__ __device__ constexpr size_t gmma_wbytes(int nstage) { return (size_t)kTaps * nstage * kGNT8 * 256; }

// The 3xFP16 kernel (x3.cu): four warpgroups, 256-cell tiles of stacked
// (image, band) blocks, each stage's window cells as fp16 hi and lo parts.
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

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
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

}  // namespace alexop::cuda::input_grad::phase
