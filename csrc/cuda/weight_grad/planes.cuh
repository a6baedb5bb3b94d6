#pragma once
// The 16-bit weight gradient on wgmma with both operands in shared memory
// (sm_90a; bf16 / fp16, NCHW input of 1 to 3 channels (CH, a kernel each),
// even padding and width, outputs 48 to 55 pixels wide, K <= 96).
//
// Why a kernel of its own: the wgmma weight gradient (gmma.cuh) gathers its
// A operand (taps x pixels) in registers, ~100 instructions a row per warp,
// and is bound by instruction issue. Here the tensor cores read the input
// windows straight from the forward's 16-bit phase planes by descriptor.
//
// GEMM: D[channel][tap] = sum over pixels dy[channel][pixel] * x(tap, pixel).
//  - B (K = pixels x N = taps) from the planes, MN-major: plane j = CH b + c
//    holds the padded rows 4i + 2b and 4i + 2b + 1 of channel c, its 16-byte
//    unit u the 4 columns 4u .. 4u + 3 of the first row, then of the second:
//    8 taps (r = 4R + 2b + 0/1, s = 4 s4 + 0..3) of output pixel q = u - s4
//    of output row i - R, and the next pixel's 8 taps 16 bytes on. The
//    planes are stored by super-row (row i of all 2 CH planes, then row
//    i + 1), so for one s4 the 6 CH units (R, j) of a pixel lie 912 bytes
//    apart: one m64nNk16 (N = 48 CH) covers N taps, three cover all (r, s)
//    < 12 (r or s = 11: computed, dropped). Fewer channels take narrower
//    products, not zero channels: 1 channel a third of 3's. A k16 step is two blocks of 8
//    pixels of an output row (q = 0..7, .., 48..55; q >= Q dropped), LBO =
//    the distance between the blocks.
//  - A (M = channels x K = pixels) is dy, K-major: each tile's dy rows are
//    re-laid into core matrices (8 channels x 8 pixels), zero where q >= Q or
//    past the last row. One or two m64 tiles (K <= 64 or <= 96). dy NCHW or
//    (DYL) channels_last, read in place either way: an NCHW copy of a
//    channels_last dy is one more pass over it, read and written.
//  - The bias gradient: one more m64n8k16 per step, B all ones.
// Tiles: 4 output rows (224 pixels, 14 k16 steps) of one image; a persistent
// CTA of two warpgroups accumulates its tiles in registers (m64 x 440 fp32
// a warpgroup at 3 channels, 254-255 registers a thread), writes its partial in register
// order and reduce_planes_kernel sums the partials in CTA order
// (deterministic). K <= 64: both warpgroups share the m64 tile, one taking
// the first two rows of each tile, the other the last two, and their sums
// are added in a fixed order.
// Loads, two buffers: dy rows by 16-byte copies of each channel's contiguous
// run (from the 16-byte boundary at or before it; DYL: of each pixel's
// channels, whose rows are 16-byte aligned) into a raw buffer, the
// planes by 4-byte copies (zero-filled outside the image), then the raw dy
// re-laid as A once its copies have landed; the same warps do them between
// the current tile's k16 steps (the loads and the wgmma operand reads share
// the L1 / shared-memory pipe: hence the channel slots spaced against bank
// conflicts and the partials stored in register order). No producer
// warpgroup: the accumulators need 220 registers a thread in each of two
// warpgroups, and with a third warpgroup ptxas (CUDA 13.0) kept every
// warpgroup at the launch's 168 registers despite setmaxnreg (the third
// accumulator set spilled).
// Like the forwards, values of the planes that only dropped taps or pixels
// read still enter the products: an Inf input can make NaN of taps whose
// windows exclude it, and the reduction recomputes NaN sums exactly.

#include "../common/constants.h"
#include "../common/exact.cuh"
#include "../common/launch.h"
#include "../common/ptx.cuh"
#include "../common/wgmma.cuh"
#include "launch.h"

#include <ATen/core/Tensor.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace alexop::cuda::weight_grad::planes {

constexpr int kQf = 57;                  // units per plane row
constexpr int kRowB = kQf * 16;          // bytes per plane row
constexpr int kTR = 4;                   // output rows per tile
constexpr int kSR = kTR + 2;             // super-rows a tile reads
constexpr int kBlk = 7;                  // 8-pixel blocks per output row
constexpr int kSteps = kTR * kBlk / 2;   // k16 steps per tile
constexpr int kRawChunks = 29;           // 16-byte chunks of a channel's run: 4 x 55 values + up to 7 before
constexpr int kRawCh = 33 * 16;          // a channel's raw slot: a chunk per lane, 16 bytes mod 128 (8 channels' reads hit distinct banks)
constexpr int kTilePixels = kTR * 55;    // a tile's dy pixels at most
constexpr int kThreads = 256;            // two warpgroups

// The geometry that follows the input channels CH (1 to 3).
template <int CH>
struct Geo {
  static constexpr int kN = 48 * CH;              // taps of a column block s4: the products' N
  static constexpr int kAcc = kN / 2;             // accumulators a thread of one m64nN
  static constexpr int kRegs = 3 * kAcc + 4;      // accumulators a thread: 3 x m64nN and the bias's m64n8
  static constexpr int kPl = 2 * CH;              // planes (b, c)
  static constexpr int kSupB = kPl * kRowB;       // a super-row: one row of every plane
  static constexpr int kPlanesB = kSR * kSupB;    // one tile's planes
  static constexpr int kPlaneBuf = kPlanesB + 16;  // + the unit read past them (q = 55 at s4 = 2)
  // Byte offset of 8-pixel block bi of a tile (output row bi / 7, q = 8 (bi
  // % 7) ..) in its planes: a pixel's units are 16 bytes apart, a row's a
  // super-row.
  static constexpr int block_off(int bi) { return bi / kBlk * kSupB + bi % kBlk * 128; }
};

// Shared memory: the planes of two tiles (each + 16 zero bytes: unit 57 of
// the last plane row, read for the dropped pixel q = 55 at s4 = 2, whose dy
// is 0, must be finite), A of two tiles (K-major core matrices: per k16 step
// NT8 blocks of 8 channels x two 128-byte halves; + 1 KB read by the second
// m64 tile's rows past 96 at the last step), the raw dy runs, 256 bytes of
// ones.
template <int NT8, int CH>
struct Smem {
  static constexpr int kStepB = NT8 * 256;
  static constexpr int kStageB = kSteps * kStepB;
  static constexpr int kPlanes = 0;
  static constexpr int kStage = 2 * Geo<CH>::kPlaneBuf;
  static constexpr int kRaw = kStage + 2 * kStageB + 1024;
  static constexpr int kOnes = kRaw + NT8 * 8 * kRawCh;
  static constexpr int kBytes = kOnes + 256;
  // DYL: a raw pixel's channels, 16 bytes more (the relayout's 4 pixel pairs
  // 32 bytes mod 128 apart: distinct banks), in the NCHW runs' room; a copy
  // round takes kRoundPx pixels, the last zero-filling slots past a tile's
  static constexpr int kPixB = NT8 * 16 + 16;
  static constexpr int kRoundPx = kThreads / NT8;
  static constexpr int kCopyRounds = (kTilePixels + kRoundPx - 1) / kRoundPx;
  static_assert(kCopyRounds * kRoundPx * kPixB <= NT8 * 8 * kRawCh, "channels_last dy fits the raw buffer");
};

template <typename T>
struct Params {
  const T* x;
  const T* dy;
  float* ws;    // [gridDim.x][Geo::kRegs][kThreads]: the CTAs' partials in register order
  int64_t sN;   // input image stride
  int dyN;      // dy's image stride: a slice of its channels is read in place
  int dy_off;   // dy's first element, in elements past the 16-byte boundary dy points at
  int H, W, K, P, Q, PQ, pad;
  int tiles_per_img, total_tiles;
  int dyP;      // DYL: dy's pixel stride (a multiple of 8)
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The loads of one tile into buffer buf, by all 256 threads, in parts that
// wgrad_tiles puts between the current tile's k16 steps: a warp that issued
// all its wgmmas first would stall on the tensor cores' queue and only then
// load, so loads and multiplies would not overlap. copy<kPart, kParts>: dy
// by 16-byte copies of each channel's run of rows into the raw buffer, plane
// rows by 4-byte copies (zero-filled outside the image); wait: every copy
// has landed; relayout<kPart>: the raw dy re-laid as A; publish: the buffer
// is ready. Every thread runs the same straight-line code (work it lacks is
// predicated off): a branch between wgmmas makes ptxas serialize them. Each
// part recomputes the tile's geometry rather than hold it in registers
// (nearly all are accumulators).
template <typename T, int NT8, int CH, bool DYL>
struct TileLoader {
  using S = Smem<NT8, CH>;
  using G = Geo<CH>;
  const Params<T>& p;
  unsigned char* smem;
  uint32_t s0;
  int tid;

  struct Geo {
    int n, p0, rows, sh0;
    int64_t e0;  // dy element of (n, channel 0, row p0, column 0)
  };
  __device__ __forceinline__ Geo geo(int tile) const {
    Geo g;
    g.n = tile / p.tiles_per_img;
    g.p0 = (tile - g.n * p.tiles_per_img) * kTR;
    g.rows = min(kTR, p.P - g.p0);
    g.e0 = DYL ? (int64_t)g.n * p.dyN + (int64_t)g.p0 * p.Q * p.dyP
               : p.dy_off + (int64_t)g.n * p.dyN + (int64_t)g.p0 * p.Q;
    g.sh0 = (int)(g.e0 & 7);
    return g;
  }

  template <int kPart, int kParts>
  __device__ __forceinline__ void copy(int tile, int buf) const {
    const Geo g = geo(tile);
    // tid laundered, so that the part's own values are formed here, not
    // hoisted out of the tile loop to be held (spilled) beside the
    // accumulators
    int t = tid;
    asm volatile("" : "+r"(t));
    const int lane = t & 31, warp = t >> 5, pq8 = p.PQ & 7, run = g.rows * p.Q;
    if constexpr (DYL) {
      // dy: thread t < NT8 kRoundPx copies chunk c8 = t % NT8 (channels
      // 8 c8 ..) of pixel t / NT8 + kRoundPx i in round i (pixels past the
      // run and channels past K: no bytes)
      const int c8 = t % NT8, px0 = t / NT8;
      const bool active = px0 < S::kRoundPx;
      const int bytes = min(max(2 * (p.K - 8 * c8), 0), 16);
      const T* src = p.dy + g.e0;  // the tile's first pixel
      const int off = px0 * p.dyP + 8 * c8, step = S::kRoundPx * p.dyP;
      const uint32_t dst = s0 + S::kRaw + px0 * S::kPixB + 16 * c8;
#pragma unroll
      for (int i = kPart; i < S::kCopyRounds; i += kParts) {
        const int nb = px0 + S::kRoundPx * i < run ? bytes : 0;
        cp_async16n_if(dst + i * S::kRoundPx * S::kPixB, src + (nb > 0 ? off + i * step : 0), nb, active);
      }
    } else {
      // dy: warp w copies the runs of channels w + 8 i, lane c their chunk c
      // (chunks past the run, lanes past 29 and channels past K: no bytes)
#pragma unroll
      for (int i = kPart; i < NT8; i += kParts) {
        const int ch = warp + 8 * i, sh = (g.sh0 + ch * pq8) & 7;
        const int nb = ch < p.K ? min(max(2 * (sh + run) - 16 * lane, 0), 16) : 0;
        const T* src = p.dy + (ch < p.K ? g.e0 + (int64_t)ch * p.PQ - sh : 0);  // 16-byte aligned
        cp_async16n(s0 + S::kRaw + ch * kRawCh + 16 * lane, src + (nb > 0 ? 8 * lane : 0), nb);
      }
    }
    // plane rows pr (super-row pr / 2 CH, plane j = pr % 2 CH = CH b + c): thread
    // t < 228 copies piece t (unit t / 4; row 2b + (t & 3) / 2, columns
    // 2 (t & 1) + 0, 1)
    const T* img = p.x + g.n * p.sN;
    const bool tin = tid < kQf * 4;
    const int x = 4 * (tid >> 2) + 2 * (tid & 1) - p.pad, y0 = 4 * g.p0 + ((tid >> 1) & 1) - p.pad;
    const bool xok = tin && (unsigned)x < (unsigned)p.W;
    const uint32_t dst = s0 + S::kPlanes + buf * G::kPlaneBuf + 4 * tid;
    const int hw = p.H * p.W;
#pragma unroll
    for (int pr = kPart * kSR * G::kPl / kParts; pr < (kPart + 1) * kSR * G::kPl / kParts; ++pr) {
      const int i = pr / G::kPl, b = pr % G::kPl / CH, c = pr % CH;
      const int y = y0 + 4 * i + 2 * b;
      const bool ok = xok && (unsigned)y < (unsigned)p.H;
      cp_async4n_if(dst + pr * kRowB, img + (ok ? c * hw + y * p.W + x : 0), ok ? 4 : 0, tin);
    }
  }
  __device__ __forceinline__ void wait() const {
    cp_async_wait_all();
    __syncthreads();
  }
  // warp w re-lays pixel block bi = w + 8 kPart (output row bi / 7, q =
  // 8 (bi % 7) ..) of every m-block mb: lane = (channel 8 mb + lane / 4,
  // pixels 2 (lane & 3) + 0, 1), so a warp writes one 128-byte core matrix
  template <int kPart>
  __device__ __forceinline__ void relayout(int tile, int buf) const {
    const Geo g = geo(tile);
    int t = tid;
    asm volatile("" : "+r"(t));  // as in copy
    const int lane = t & 31, pq8 = p.PQ & 7, bi = (t >> 5) + 8 * kPart;
    const bool bin = bi < kTR * kBlk;
    const int r = bi / kBlk, q = 8 * (bi - kBlk * r) + 2 * (lane & 3), rq = r * p.Q + q;
    const bool ok0 = bin && r < g.rows && q < p.Q, ok1 = bin && r < g.rows && q + 1 < p.Q;
    const uint16_t* raw = reinterpret_cast<const uint16_t*>(smem + S::kRaw);
    const uint32_t dst = s0 + S::kStage + buf * S::kStageB + (bi >> 1) * S::kStepB + (bi & 1) * 128 +
                         (lane >> 2) * 16 + 4 * (lane & 3);
#pragma unroll
    for (int mb = 0; mb < NT8; ++mb) {
      const int ch = 8 * mb + (lane >> 2);
      const bool chok = ch < p.K;
      uint32_t lo, hi;
      if constexpr (DYL) {
        const uint16_t* src = raw + rq * (S::kPixB / 2) + ch;
        lo = ok0 && chok ? src[0] : 0u;
        hi = ok1 && chok ? src[S::kPixB / 2] : 0u;
      } else {
        const uint16_t* src = raw + ch * (kRawCh / 2) + ((g.sh0 + ch * pq8) & 7) + rq;
        lo = ok0 && chok ? src[0] : 0u;
        hi = ok1 && chok ? src[1] : 0u;
      }
      st_shared_u32_if(dst + mb * 256, lo | hi << 16, bin);
    }
  }
  __device__ __forceinline__ void publish() const {
    fence_proxy_async();  // A, for the tensor cores
    __syncthreads();
  }
  __device__ __forceinline__ void all(int tile, int buf) const {
    copy<0, 1>(tile, buf);
    wait();
    relayout<0>(tile, buf);
    relayout<1>(tile, buf);
    relayout<2>(tile, buf);
    relayout<3>(tile, buf);
    publish();
  }
};

// Warpgroup wg multiplies m64 tile wg (NT8 > 8) or, for NT8 = 8, the k16
// steps of output rows 2 wg, 2 wg + 1 of each tile; acc[s4] holds the 48 CH
// taps (R, j, r, s) of column block s4 in wgmma's accumulator layout, accb
// the bias (all 8 columns alike). Each k16 step is a commit group; once the
// first step of a tile is issued, the previous tile's groups are waited for
// (its buffer is free), and the next tile's loads go between the steps
// (past the last tile the last one is loaded again, so that the sequence
// has no branch).
template <typename T, int NT8, int CH, bool DYL>
__device__ __forceinline__ void wgrad_tiles(const Params<T>& p, unsigned char* smem, int tid) {
  using S = Smem<NT8, CH>;
  using G = Geo<CH>;
  const uint32_t s0 = smem_u32(smem);
  constexpr int kM = NT8 > 8 ? 2 : 1;
  constexpr int kMySteps = kSteps * kM / 2;
  // where the next tile's load parts go: copies after steps 1 ..
  // kCopyParts, the wait after step kWait, the relayouts after the steps
  // that follow
  constexpr int kCopyParts = kMySteps == 14 ? 4 : 2, kWait = kMySteps == 14 ? 8 : 4;
  const int wg = tid >> 7;
  const TileLoader<T, NT8, CH, DYL> ld{p, smem, s0, tid};
  // this warpgroup's m offset (A) and first step's rows (B)
  const uint32_t a_off = kM == 2 ? wg * 2048 : wg * kMySteps * S::kStepB;
  const uint32_t b_off = kM == 2 ? 0 : wg * 2 * G::kSupB;
  const uint32_t d_ones = (uint32_t)gmma_desc(s0 + S::kOnes, 128, 0);
  float acc[3][G::kAcc], accb[4];  // set by the CTA's first step (scale-d 0)
  if (blockIdx.x < p.total_tiles) ld.all(blockIdx.x, 0);
  int it = 0;
  for (int tile = blockIdx.x; tile < p.total_tiles; tile += gridDim.x, ++it) {
    const int buf = it & 1, next = tile + (int)gridDim.x < p.total_tiles ? tile + (int)gridDim.x : tile;
    gmma_fence();
    // descriptors' low words: start address, LBO (A 128; B per step)
    const uint32_t da = (uint32_t)gmma_desc(s0 + S::kStage + buf * S::kStageB + a_off, 128, 0);
    const uint32_t db = (uint32_t)gmma_desc(s0 + S::kPlanes + buf * G::kPlaneBuf + b_off, 0, 0);
    static_for<kMySteps>([&](auto sc) {
      constexpr int s = decltype(sc)::value;
      constexpr int b0 = G::block_off(2 * s), lbo = G::block_off(2 * s + 1) - b0;
      const uint32_t a = da + (s * S::kStepB >> 4), b = db + (b0 >> 4) + ((lbo >> 4) << 16);
      const int keep = s > 0 || it > 0;
      gmma_ss_tb<T, G::kN, 256, kRowB>(acc[0], a, b, keep);
      gmma_ss_tb<T, G::kN, 256, kRowB>(acc[1], a, b + 1, keep);
      gmma_ss_tb<T, G::kN, 256, kRowB>(acc[2], a, b + 2, keep);
      gmma_ss_tb<T, 8, 256, 256>(accb, a, d_ones, keep);
      gmma_commit();
      if constexpr (s == 0) gmma_wait<1>();  // the previous tile's steps have completed
      if constexpr (s >= 1 && s <= kCopyParts) ld.template copy<s - 1, kCopyParts>(next, buf ^ 1);
      if constexpr (s == kWait) ld.wait();
      if constexpr (kMySteps == 14 && s > kWait && s <= kWait + 4) ld.template relayout<s - kWait - 1>(next, buf ^ 1);
      if constexpr (kMySteps == 7 && s > kWait) {
        ld.template relayout<2 * (s - kWait - 1)>(next, buf ^ 1);
        ld.template relayout<2 * (s - kWait - 1) + 1>(next, buf ^ 1);
      }
    });
    ld.publish();
  }
  gmma_wait<0>();

  // The CTA's partial in register order, [register][thread]: coalesced
  // stores (in the weight's order they were scattered, ~8 times the bytes);
  // reduce_planes_kernel maps them back.
  float* wsl = p.ws + (int64_t)blockIdx.x * G::kRegs * kThreads + tid;
#pragma unroll
  for (int s4 = 0; s4 < 3; ++s4)
#pragma unroll
    for (int e = 0; e < G::kAcc; ++e) wsl[(G::kAcc * s4 + e) * kThreads] = acc[s4][e];
#pragma unroll
  for (int e = 0; e < 4; ++e) wsl[(3 * G::kAcc + e) * kThreads] = accb[e];
}

#endif

// Sums the CTAs' partials in CTA order (bitwise reproducible) and writes
// each sum to its weight (or bias) element. A block takes 32 consecutive
// threads' values of one register; its warp g the CTAs g, g + 8, .. (kM =
// 1: warpgroups 0 and 1 hold sums for the same elements, added in that
// order), then warp 0 adds the 8 warps' sums in order. Register A s4 + 4 nb
// + 2 h + e (A = 24 CH) of thread (wg, warp, lane) is acc[s4] row m = 64 wg
// + 16 warp + lane / 4 + 8 h, column 8 nb + 2 (lane & 3) + e: tap r = 4 R +
// 2 b + er, s = 4 s4 + ec + e (nb = 2 CH R + CH b + c, er = (lane & 3) / 2,
// ec = 2 (lane & 3 & 1)); registers 3 A + 2 h + e are the bias sums, the
// same in every column. A NaN sum is recomputed exactly from the operands o (the
// bounds keep the sums' registers: the recomputation's call, which would
// take more, spills).
constexpr int kReduceWarps = 8;
static_assert(32 * kReduceWarps == 256, "ALEXOP_CTAS_OF_256 counts CTAs of 256 threads");
template <typename T, int kM, int CH>
__global__ void __launch_bounds__(32 * kReduceWarps, ALEXOP_CTAS_OF_256)
    reduce_planes_kernel(const float* __restrict__ ws, int S, int K, T* __restrict__ gw, T* __restrict__ gb,
                         const exact::WgradOperands o) {
  using G = Geo<CH>;
  __shared__ float part[kReduceWarps][32];
  pdl_wait();  // for wgrad_planes_kernel's partials
  constexpr int kPos = 128 * kM;  // threads holding distinct elements
  const int l = threadIdx.x & 31, g = threadIdx.x >> 5;
  const int reg = blockIdx.x / (kPos / 32), tid = blockIdx.x % (kPos / 32) * 32 + l;
  const float* src = ws + (int64_t)reg * kThreads + tid;
  float sum = 0.f;
#pragma unroll 4
  for (int c = g; c < S; c += kReduceWarps) {
    const float* w = src + (int64_t)c * G::kRegs * kThreads;
    sum += w[0];
    if constexpr (kM == 1) sum += w[128];
  }
  part[g][l] = sum;
  __syncthreads();
  if (g != 0) return;
  for (int i = 1; i < kReduceWarps; ++i) sum += part[i][l];
  const int warp = (tid >> 5) & 3, lane = tid & 31, t4 = lane & 3;
  const int m = (kM == 2 ? 64 * (tid >> 7) : 0) + 16 * warp + (lane >> 2);
  if (reg >= 3 * G::kAcc) {
    const int h = (reg - 3 * G::kAcc) >> 1, e = (reg - 3 * G::kAcc) & 1, ch = m + 8 * h;
    if (gb != nullptr && t4 == 0 && e == 0 && ch < K) exact::store_wgrad(sum, o, ch, kKred, gb + ch);
    return;
  }
  const int s4 = reg / G::kAcc, rr = reg % G::kAcc, nb = rr >> 2, h = (rr >> 1) & 1, e = rr & 1;
  const int R = nb / G::kPl, b = nb % G::kPl / CH, c = nb % CH;
  const int r = 4 * R + 2 * b + (t4 >> 1), sc = 4 * s4 + 2 * (t4 & 1) + e, ch = m + 8 * h;
  const int tap = (c * kR + r) * kR + sc;
  if (r < kR && sc < kR && ch < K) exact::store_wgrad(sum, o, ch, tap, gw + (int64_t)ch * (CH * kR * kR) + tap);
}

template <typename T, int NT8, int CH, bool DYL>
__global__ void __launch_bounds__(kThreads, 1) wgrad_planes_kernel(const Params<T> p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = Smem<NT8, CH>;
  using G = Geo<CH>;
  extern __shared__ __align__(128) unsigned char smem[];
  // the reduction's blocks can only start on SMs that this grid has left;
  // launched now, they wait there (pdl_wait) instead of behind a launch
  pdl_launch_dependents();
  const int tid = threadIdx.x;
  if (tid < 128) {
    const uint16_t one = std::is_same_v<T, __half> ? 0x3C00 : 0x3F80;
    reinterpret_cast<uint16_t*>(smem + S::kOnes)[tid] = one;
  }
  if (tid < 8) reinterpret_cast<uint32_t*>(smem + S::kPlanes + G::kPlanesB + G::kPlaneBuf * (tid >> 2))[tid & 3] = 0;
  fence_proxy_async();  // for the tensor cores (the first load's barriers follow)
  wgrad_tiles<T, NT8, CH, DYL>(p, smem, tid);
#endif
}

// Tiles of 4 output rows of an image; a persistent CTA an SM.
inline int64_t tiles(const Problem& pr) { return pr.N * ((pr.P + kTR - 1) / kTR); }

template <typename T, int NT8, int CH, bool DYL>
void launch(const Problem& pr, const Args& a) {
  using S = Smem<NT8, CH>;
  constexpr int kRegs = Geo<CH>::kRegs;
  const at::Tensor &go = a.grad_output, &in = a.input;
  Params<T> p{};
  set_sizes(p, pr);
  p.sN = in.stride(0);  // a channel slice's images are C channels apart
  p.tiles_per_img = (p.P + kTR - 1) / kTR;
  p.total_tiles = (int)tiles(pr);
  const int grid = (int)std::min<int64_t>(p.total_tiles, pr.dev.num_sms);
  const at::Tensor ws = scratch(in, (int64_t)grid * kRegs * kThreads * (int64_t)sizeof(float));
  p.x = static_cast<const T*>(in.data_ptr());
  // dy from the 16-byte boundary at or before its start: a run's copies
  // start at a boundary, and the bytes read before the run (of the same
  // aligned 16 bytes, so of a mapped page) are skipped
  const auto dy_addr = reinterpret_cast<uintptr_t>(go.data_ptr());
  p.dy = reinterpret_cast<const T*>(dy_addr & ~uintptr_t{15});
  p.dy_off = (int)(dy_addr & 15) / (int)sizeof(T);
  if constexpr (DYL) {
    TORCH_INTERNAL_ASSERT(p.dy_off == 0 && go.stride(1) == 1 && go.stride(3) % 8 == 0 && go.stride(2) == pr.Q * go.stride(3),
                          "phase-plane weight gradient: a channels_last dy of 16-byte aligned pixels");
    p.dyP = (int)go.stride(3);
  } else {
    TORCH_INTERNAL_ASSERT(go.stride(3) == 1 && go.stride(2) == pr.Q && go.stride(1) == pr.P * pr.Q,
                          "phase-plane weight gradient: an NCHW dy's channel planes");
  }
  // 32 bits: a 64-bit stride cost the 3-channel kernel 60 more bytes of spills
  TORCH_INTERNAL_ASSERT(go.stride(0) <= INT32_MAX, "phase-plane weight gradient: dy's image stride");
  p.dyN = (int)go.stride(0);
  p.ws = static_cast<float*>(ws.data_ptr());
  auto stream = c10::cuda::getCurrentCUDAStream();
  allow_max_dynamic_smem(wgrad_planes_kernel<T, NT8, CH, DYL>);
  wgrad_planes_kernel<T, NT8, CH, DYL><<<grid, kThreads, S::kBytes, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  constexpr int kM = NT8 > 8 ? 2 : 1;
  launch_dependent(reduce_planes_kernel<T, kM, CH>, kRegs * 4 * kM, 32 * kReduceWarps, 0, stream, (const float*)p.ws, grid,
                   p.K, static_cast<T*>(a.grad_weight.data_ptr()),
                   a.grad_bias != nullptr ? static_cast<T*>(a.grad_bias->data_ptr()) : nullptr,
                   exact::wgrad_operands(go, in, p.pad));
}

}  // namespace alexop::cuda::weight_grad::planes
