#pragma once
// The forward's gather kernels (mma_sync.cuh, gmma.cuh, s2d.cuh): their
// parameters, tile geometry, patch copy and the weights' k order.
//
// Implicit GEMM: M = output pixels of one image (flattened p*Q+q, so a tile
// of M is a contiguous range of every output channel's NCHW plane), N = out
// channels, reduction k = (c, r, s) = 363 padded to 368. Images too wide for
// a patch of whole rows beside the weights are cut into column blocks of QB
// output columns, each flattened on its own (p*Qb+q): a tile is then a range
// of one block's pixels, and its patch holds only the block's input columns.
//
// Each persistent CTA keeps the whole weight operand resident in shared
// memory (arranged by a small prep kernel) and loops over tiles of MT output
// pixels. For each tile it copies the input rows the tile touches into a
// zero-bordered patch in shared memory (the border is the convolution's
// padding), and warps gather A fragments straight from the patch through a
// k -> c*cstr + r*rstr + s*sstr offset table: no im2col buffer anywhere.
// The patch keeps the input's layout (NCHW or channels_last), so each input
// row is one contiguous cp.async copy; only the strides in the table differ.
// Padded reduction slots read patch words against zero weights, so an Inf
// input can make NaN of outputs whose window excludes it: the epilogues
// recompute NaN outputs exactly (exact_output).
//
// More input channels (the chunk modes, gmma_chunks.cuh): the reduction runs
// over chunks of one or two channels, each channel's 121 taps padded to 128
// slots; a CTA streams each chunk's weights and patch into one of two
// buffers while the other chunk multiplies, and keeps its accumulators
// across the chunks of a tile.

#include "../common/constants.h"
#include "../common/exact.cuh"
#include "../common/precision.h"
#include "../common/ptx.cuh"
#include "../common/wgmma.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace alexop::cuda::forward::gather {

constexpr int kKpad = 368;           // multiple of 8 and of 16
constexpr int kKtab = kKpad + 32;    // offset table incl. look-ahead slack
// mma.sync: 8 pixel jobs of 32 px; kNSplit warps share a job, each taking
// 1/kNSplit of the channels (2 was slower: the doubled A-gather traffic
// outweighs the extra latency hiding)
constexpr int kMJobs = 8;
constexpr int kNSplit = 1;
constexpr int kThreads = 32 * kMJobs * kNSplit;
constexpr int kWarps = kThreads / 32;
// wgmma kernel: four warpgroups per SM, each 64 pixels of a tile x all
// channels, as one CTA (CPS = 1) or two CTAs of two (CPS = 2)
constexpr int kGThreads = 512;
constexpr int kStoreThreads = 128;  // store warps of the staged 16-bit epilogue
constexpr int kMaxK = 128;
// bf16x3: n8 tiles per pass-major MMA group (4 measured the same as 2)
constexpr int kB3Group = 2;
// the padded reductions of k16Pairs (s padded 11 -> 12) and of the
// space-to-depth modes (3 x 3 taps of 4 x 4 blocks x 3 channels)
constexpr int kKpadP = 400;
constexpr int kKs2d = 432;
constexpr int kS2G = 6;  // space-to-depth: 16-byte groups of 8 (c, a, b) values per block
constexpr int kChunkSlots = 128;  // chunk modes: reduction slots of a channel (121 taps)

// The chunk modes: channels per chunk (two in 16-bit, one in TF32 and
// 3xFP16: a chunk's weights take the same bytes each way), and chunks of C
// channels.
__host__ __device__ constexpr bool chunked_of(int mode) {
  return mode == kTf32Chunks || mode == k16Chunks || mode == k3xFp16Chunks;
}
// The fp32-accurate modes of fp16 hi and lo parts (gmma.cuh).
__host__ __device__ constexpr bool fp16x3_of(int mode) { return mode == k3xFp16 || mode == k3xFp16Chunks; }
__host__ __device__ constexpr int chunk_channels_of(int mode) {
  return mode == k16Chunks ? 2 : chunked_of(mode) ? 1 : kC;
}
__host__ __device__ constexpr int chunks_of(int mode, int C) {
  return chunked_of(mode) ? (C + chunk_channels_of(mode) - 1) / chunk_channels_of(mode) : 1;
}

struct Params {
  const void* x;
  const uint4* wfrag;
  const void* bias;  // may be null
  void* y;
  int N, C, H, W, K, P, Q, pad;  // C: 3, or the chunk kernels' input channels
  int PQ, tiles_per_img, total_tiles, MT;
  // column blocks: QB output columns each (the last may be narrower, its
  // tiles MTL pixels to keep them within the patch's rows), nqb of them,
  // tiles_blk tiles a full block; one block of Q columns where whole rows fit
  int QB, nqb, tiles_blk, MTL;
  int PW, CS, PADL, shift, wcopy;
  int nhwc, vec;
  // element strides of (channel, row, column) inside the patch: the patch
  // keeps the input's own layout, only the gather tables differ
  int cstr, rstr, sstr;
  // staged 16-bit wgmma epilogue: byte offset of the staging rows in shared
  // memory and their stride in elements ([channel][pixel] rows; a
  // channels_last output's [pixel][channel] rows are staged_pixel_row(NT8)
  // apart)
  int stage, ls;
  // k16S2d / k16S2dNhwc: bytes of one plane (8 of each block's 48 values) of the
  // space-to-depth patch (PW is its row length in blocks, CS the bytes of
  // one whole patch buffer)
  int gs;
  // exact_output: the weights as given (K, C, 11, 11); x's element strides
  // (the copies too: an image of a channel slice is C channels from the next)
  const void* w;
  exact::Strides xs;
  int accumulate;  // float: add to y's values (put), as a sliced forward's later slices do
  int ysc, ysm;  // output element strides of a channel and a pixel: NCHW or channels_last
  // 16-bit NCHW rows of other than whole 16-byte units (the chunk kernel's):
  // copied as 4-byte words, the patch moved by word_shift
  int words;
};

// k steps of the padded reduction (k16 for 16-bit operands and bf16x3 /
// 3xFP16, k8 for TF32 ones); of one chunk in the chunk modes.
__host__ __device__ constexpr int ksteps_of(int mode) {
  return chunked_of(mode) ? chunk_channels_of(mode) * kChunkSlots / (mode == kTf32Chunks ? 8 : 16)
         : (mode == k16S2d || mode == k16S2dNhwc) ? kKs2d / 16
         : mode == k16Pairs ? kKpadP / 16
         : (mode == k16 || mode == kBf16x3 || mode == k3xFp16) ? kKpad / 16 : kKpad / 8;
}
// 3xTF32 and 3xFP16 on wgmma (GMMA) hold B as a block of big parts then one
// of small.
__host__ __device__ constexpr bool split_b_of(int mode) { return mode == k3xTf32 || fp16x3_of(mode); }
// Bytes of the resident weights of one channel group of NT8 n8 tiles (of
// one chunk in the chunk modes); bf16x3 holds hi and lo fragments: one uint4
// per (k16 step, n8 tile, lane).
__host__ __device__ constexpr int wfrag_bytes_of(int mode, int nt8, bool gmma) {
  return ksteps_of(mode) * (mode == kBf16x3 ? nt8 : nt8 / 2) * 32 * 16 * (gmma && split_b_of(mode) ? 2 : 1);
}
template <int MODE> __host__ __device__ constexpr int ksteps() { return ksteps_of(MODE); }
template <int MODE> __host__ __device__ constexpr bool split_b() { return split_b_of(MODE); }
template <int MODE, int NT8, bool GMMA = false> __host__ __device__ constexpr int wfrag_bytes() {
  return wfrag_bytes_of(MODE, NT8, GMMA);
}

// Weight (n, k) of the padded reduction; k16Pairs's k runs over (c, r, s) with s padded to 12,
// k16S2d's over (tap (i, j), c, a, b) with r = 4i + a, s = 4j + b (zero past 10),
// k16S2dNhwc's over (tap, a, b, c), the chunk modes' over (c, r * 11 + s padded to 128)
// of C channels.
template <typename T, int MODE>
__device__ __forceinline__ float weight_at(const T* __restrict__ w, int K, int k, int n, int C = kC) {
  if constexpr (chunked_of(MODE)) {
    const int c = k / kChunkSlots, rs = k % kChunkSlots;
    return (rs < kR * kR && c < C && n < K) ? to_f(w[((size_t)n * C + c) * kR * kR + rs]) : 0.f;
  }
  if constexpr (MODE == k16S2d || MODE == k16S2dNhwc) {
    const int tap = k / 48, ch = k - tap * 48;
    const int c = MODE == k16S2d ? ch >> 4 : ch % 3;
    const int a = MODE == k16S2d ? (ch >> 2) & 3 : ch / 12, b = MODE == k16S2d ? ch & 3 : ch % 12 / 3;
    const int r = 4 * (tap / 3) + a, s = 4 * (tap % 3) + b;
    return (r < kR && s < kR && n < K) ? to_f(w[(size_t)n * kKred + (c * kR + r) * kR + s]) : 0.f;
  }
  if constexpr (MODE == k16Pairs) {
    const int row = k / 12, s = k - row * 12;
    return (row < kC * kR && s < kR && n < K) ? to_f(w[(size_t)n * kKred + row * kR + s]) : 0.f;
  }
  return (k < kKred && n < K) ? to_f(w[(size_t)n * kKred + k]) : 0.f;
}

// Output (image n, channel k, output pixel m = p*Q+q) without the bias, recomputed from x
// and the weights (common/exact.cuh): for outputs that came out NaN.
template <typename T>
__device__ __forceinline__ float exact_output(const Params& p, int n, int k, int m) {
  const int pp = m / p.Q;
  return exact::forward(static_cast<const T*>(p.x), p.xs.n, (int)p.xs.c, (int)p.xs.h, (int)p.xs.w, p.H, p.W, p.C,
                        static_cast<const T*>(p.w), p.pad, n, k, pp, m - pp * p.Q);
}

// A tile: image n, pixels [m0, mend) of its column block (first output
// column q0, Qb columns wide), which read input rows h0 .. h0 + rows_in - 1.
struct TileGeom {
  int n, m0, mend, p_lo, rows_in, h0, q0, Qb;
};
__device__ __forceinline__ TileGeom tile_geom(const Params& p, int tile) {
  TileGeom tg;
  tg.n = tile / p.tiles_per_img;
  int t = tile - tg.n * p.tiles_per_img, mt = p.MT;
  tg.q0 = 0;
  tg.Qb = p.Q;
  if (p.nqb > 1) {
    const int b = min(t / p.tiles_blk, p.nqb - 1);  // the last block may have fewer tiles
    t -= b * p.tiles_blk;
    tg.q0 = b * p.QB;
    tg.Qb = min(p.QB, p.Q - tg.q0);
    if (b == p.nqb - 1) mt = p.MTL;
  }
  tg.m0 = t * mt;
  tg.mend = min(tg.m0 + mt, p.P * tg.Qb);
  tg.p_lo = tg.m0 / tg.Qb;
  const int p_hi = (tg.mend - 1) / tg.Qb;
  tg.rows_in = 4 * (p_hi - tg.p_lo) + kR;
  tg.h0 = 4 * tg.p_lo - p.pad;
  return tg;
}

// The output pixel (p*Q+q) of a tile's pixel m (its block's p*Qb+q).
__device__ __forceinline__ int out_pixel(const Params& p, const TileGeom& tg, int m) {
  if (p.nqb == 1) return m;
  const int pp = m / tg.Qb;
  return pp * p.Q + tg.q0 + (m - pp * tg.Qb);
}

// p.words: the element (0 or 1) a tile's patch is moved by, so that every
// 4-byte word of its input rows lands on a 4-byte word of the patch: the
// parity of the input element at the patch's channel 0, row 0, column 0.
// The plan gives the patch's row and channel strides the parity of the
// input's (W, H * W), and a chunk starts at an even channel, so that one
// element serves every row of every chunk of the tile.
template <typename T>
__device__ __forceinline__ int word_shift(const Params& p, const TileGeom& tg) {
  if (!p.words) return 0;
  // parities only: 32 bits, wrapping, keep them
  const unsigned e = (unsigned)(reinterpret_cast<uintptr_t>(p.x) / sizeof(T)) + (unsigned)tg.n * (unsigned)p.xs.n +
                     (unsigned)tg.h0 * (unsigned)p.W + (unsigned)(4 * tg.q0 - p.PADL);
  return (int)(e & 1u);
}

// p.words: a row's words start one element early where its first element
// is odd (lead), and end one element late where its last is even: the words
// of a row of ne elements (load_patch copies them; clear_word_ends finds
// the lane that copied the last).
template <typename T>
__device__ __forceinline__ int word_lead(const T* src) {
  return (int)((reinterpret_cast<uintptr_t>(src) / sizeof(T)) & 1);
}
__device__ __forceinline__ int row_words(int ne, int lead) { return (ne + lead + 1) >> 1; }

// Copies the input rows of one tile into the patch: patch column j holds
// input column 4 q0 - PADL + j. With one block the columns outside [PADL,
// PADL + wcopy) were zeroed once and are never written again; with column
// blocks each tile writes its rows' whole width, zeros outside the input.
// NCH channels from c0 (NCHW; the chunk kernels' chunk): rows of channels
// past the input's last are zeros. WORDS (the 16-bit chunk kernel): rows
// that are not whole 16-byte units are copied as 4-byte words (p.words),
// the patch moved by word_shift.
template <typename T, int NWARPS = kWarps, int NCH = kC, bool WORDS = false>
__device__ __forceinline__ void load_patch(const Params& p, const TileGeom& tg, T* patch, int warp,
                                           int lane, int c0 = 0) {
  const T* x = static_cast<const T*>(p.x);
  const int xc0 = 4 * tg.q0 - p.PADL;  // the input column of patch column 0
  const int jlo = max(0, -xc0), jhi = max(jlo, min(p.PW, p.W - xc0));  // the columns the input covers
  const bool edges = p.nqb > 1;  // zeros of other blocks' columns to rewrite
  const int el = p.nhwc ? kC : 1;  // elements per column in a patch row
  auto zero = [&](T* row, int a, int b) {
    for (int e = a + lane; e < b; e += 32) row[e] = from_f<T>(0.f);
  };
  // elements [0, ne) of src to dst: 16-byte cp.async where aligned (vec),
  // else 4-byte cp.async, or (16-bit) registers
  auto copy = [&](T* dst, const T* src, int ne) {
    if (p.vec) {
      constexpr int V = 16 / sizeof(T);
#pragma unroll 1
      for (int v = lane; v < ne / V; v += 32) cp_async16(dst + v * V, src + v * V);
    } else if constexpr (sizeof(T) == 4) {
      for (int e = lane; e < ne; e += 32) cp_async4(dst + e, src + e);
    } else if constexpr (WORDS) {
      // the words holding elements [0, ne), the element beside an odd end
      // included (clear_word_ends zeroes it once the copy has landed)
      const int lead = word_lead(src), nw = row_words(ne, lead);
      const uint32_t* s4 = reinterpret_cast<const uint32_t*>(src - lead);
      uint32_t* d4 = reinterpret_cast<uint32_t*>(dst - lead);
#pragma unroll 1
      for (int v = lane; v < nw; v += 32) cp_async4(d4 + v, s4 + v);
    } else {
      for (int e = lane; e < ne; e += 32) dst[e] = src[e];
    }
  };
  // NCHW: channel-outer, no per-row division; a row is at most a few vectors
  // per lane, so the copy loops stay rolled (instruction issue is the cost).
  // channels_last: the patch is NHWC too, so an input row (W*C contiguous
  // elements) is one contiguous copy.
  const int nrun = p.nhwc ? 1 : NCH;
  const int shift = WORDS ? word_shift<T>(p, tg) : 0;
  patch += shift;
  // p.words: the elements beside a copied row are clear_word_ends's to
  // zero; an unwritten row of one block zeroes them too (a tile of the
  // other shift may have left a value there)
  const int wz = WORDS && p.words ? 1 : 0;
  const int ne = (jhi - jlo) * el;  // the elements of a copied row
  // the input row of channel c's patch row i, or null for a row of zeros
  auto source = [&](int c, int i) -> const T* {
    const int h = tg.h0 + i;
    if (h < 0 || h >= p.H || !(NCH == kC || c0 + c < p.C)) return nullptr;
    const int col = xc0 + jlo;  // >= 0
    return x + (p.nhwc ? (((size_t)tg.n * p.H + h) * p.W + col) * kC
                       : (size_t)tg.n * p.xs.n + ((size_t)(c0 + c) * p.H + h) * p.W + col);
  };
  // the zeros of a patch row beside its copied elements, or of a whole row
  auto zeros = [&](T* row, bool copied) {
    if (copied) {
      if (edges) {
        zero(row, 0, (jlo - wz) * el);
        zero(row, (jhi + wz) * el, p.PW * el);
      }
    } else {
      zero(row, (edges ? 0 : max(jlo - wz, -shift)) * el, (edges ? p.PW : jhi + wz) * el);
    }
  };
  // A 16-bit element has no cp.async: where a lane's kHeld elements hold a
  // whole row, a warp loads kRowsInFlight rows before it stores any (one
  // short row's loads at a time left each warp waiting on global memory for
  // every row, perf-history S65-S66); longer rows take the element loop
  // below, whose loads ptxas already keeps many of in flight.
  constexpr int kRowsInFlight = 3, kHeld = 2;
  if constexpr (sizeof(T) == 2 && !WORDS) {
    if (!p.vec && ne <= 32 * kHeld) {
      for (int c = 0; c < nrun; ++c) {
        for (int i0 = warp; i0 < tg.rows_in; i0 += kRowsInFlight * NWARPS) {
          const T* src[kRowsInFlight];
          T v[kRowsInFlight][kHeld];
#pragma unroll
          for (int u = 0; u < kRowsInFlight; ++u) {
            const int i = i0 + u * NWARPS;
            src[u] = i < tg.rows_in ? source(c, i) : nullptr;
#pragma unroll
            for (int k = 0; k < kHeld; ++k) {
              const int e = lane + 32 * k;
              v[u][k] = src[u] != nullptr && e < ne ? src[u][e] : from_f<T>(0.f);
            }
          }
#pragma unroll
          for (int u = 0; u < kRowsInFlight; ++u) {
            const int i = i0 + u * NWARPS;
            if (i >= tg.rows_in) break;
            T* row = patch + c * p.CS + i * p.rstr;
            if (src[u] != nullptr) {
#pragma unroll
              for (int k = 0; k < kHeld; ++k) {
                if (lane + 32 * k < ne) row[jlo * el + lane + 32 * k] = v[u][k];
              }
            }
            zeros(row, src[u] != nullptr);
          }
        }
      }
      return;
    }
  }
  for (int c = 0; c < nrun; ++c) {
    for (int i = warp; i < tg.rows_in; i += NWARPS) {
      T* row = patch + c * p.CS + i * p.rstr;
      const T* src = source(c, i);
      if (src != nullptr) copy(row + jlo * el, src, ne);
      zeros(row, src != nullptr);
    }
  }
}

// p.words, once a chunk's copies (load_patch) have landed: the patch
// columns beside a copied row's are padding or unread, yet may hold a value:
// the element beside the row that a word at its odd end brought in, or the
// row's end as a tile of the other shift placed it. The thread that copied
// the word at that end zeroes each (its own copies are the ones it waited
// for). Run by every thread of the CTA, with load_patch's arguments; a
// row's words start where its patch element is odd (the parities match).
template <typename T, int NWARPS, int NCH>
__device__ __forceinline__ void clear_word_ends(const Params& p, const TileGeom& tg, T* patch, int warp, int lane,
                                                int c0) {
  const int xc0 = 4 * tg.q0 - p.PADL;
  const int jlo = max(0, -xc0), jhi = max(jlo, min(p.PW, p.W - xc0)), ne = jhi - jlo;
  const int shift = word_shift<T>(p, tg);
  if (ne == 0) return;
  const int ilo = max(0, -tg.h0), ihi = min(tg.rows_in, p.H - tg.h0);  // the rows inside the image
  for (int c = 0; c < NCH && c0 + c < p.C; ++c) {
    for (int i = warp; i < ihi; i += NWARPS) {
      if (i < ilo) continue;
      const int at = shift + c * p.CS + i * p.rstr + jlo, lead = at & 1;
      if (lane == 0 && at > 0) patch[at - 1] = from_f<T>(0.f);
      if (lane == ((row_words(ne, lead) - 1) & 31)) patch[at + ne] = from_f<T>(0.f);
    }
  }
}

// Bytes of shared memory before the gather table: the resident weights, or
// the chunk kernels' two buffers of one chunk's.
__host__ __device__ constexpr int weight_smem_bytes_of(int mode, int nt8, bool gmma) {
  return wfrag_bytes_of(mode, nt8, gmma) * (chunked_of(mode) ? 2 : 1);
}

// Resident weights of this CTA's channel group (copy in flight on return;
// the chunk kernels copy theirs chunk by chunk), gather table, bias, zeroed
// patch buffers.
template <typename T, int MODE, int NT8, int NBUF, int NTHREADS = kThreads, int UNIT = 1, bool GMMA = false>
__device__ __forceinline__ void init_smem(const Params& p, unsigned char* smem) {
  constexpr int WB = wfrag_bytes<MODE, NT8, GMMA>(), WS = weight_smem_bytes_of(MODE, NT8, GMMA);
  const int kg0 = blockIdx.y * NT8 * 8;
  const uint4* wsrc = p.wfrag + (size_t)blockIdx.y * (WB / 16);
  int* offk = reinterpret_cast<int*>(smem + WS);
  float* sbias = reinterpret_cast<float*>(smem + WS + kKtab * 4);
  T* patch0 = reinterpret_cast<T*>(smem + WS + kKtab * 4 + kMaxK * 4);
  const int buf_elems = chunk_channels_of(MODE) * p.CS;
  const int tid = threadIdx.x;
  if constexpr (!chunked_of(MODE)) {
    for (int i = tid; i < WB / 16; i += NTHREADS)
      cp_async16(reinterpret_cast<uint4*>(smem) + i, wsrc + i);
  }
  for (int k = tid; k < kKtab; k += NTHREADS) {
    int v = 0;  // padded k: weight is zero, any finite patch word will do
    if constexpr (chunked_of(MODE)) {
      const int c = k / kChunkSlots, rs = k % kChunkSlots, r = rs / kR, s = rs - r * kR;
      if (c < chunk_channels_of(MODE) && rs < kR * kR) v = c * p.cstr + r * p.rstr + s * p.sstr;
    } else if constexpr (MODE == k16Pairs) {
      // entry u = word offset of the pair (k, k+1) = (2u, 2u+1)
      const int row = (2 * k) / 12, s = 2 * k - row * 12;
      const int c = row / kR, r = row - c * kR;
      if (row < kC * kR) v = (c * p.cstr + r * p.rstr + s) / 2;
    } else if (k < kKred) {
      const int c = k / (kR * kR), rr = k - c * kR * kR, r = rr / kR, s = rr - r * kR;
      v = c * p.cstr + r * p.rstr + s * p.sstr;
    }
    offk[k] = v * UNIT;
  }
  for (int k = tid; k < kMaxK; k += NTHREADS)
    sbias[k] = (p.bias != nullptr && kg0 + k < p.K) ? to_f(static_cast<const T*>(p.bias)[kg0 + k]) : 0.f;
  {
    uint32_t* pz = reinterpret_cast<uint32_t*>(patch0);
    const int words = NBUF * buf_elems * (int)sizeof(T) / 4;
    for (int i = tid; i < words; i += NTHREADS) pz[i] = 0u;
  }
  __syncthreads();  // zeros in place before any copy lands on top of them
}

}  // namespace alexop::cuda::forward::gather
