// Tensor-core forward of the 11x11 stride-4 convolution (AlexNet conv1).
//
// Implicit GEMM: M = output pixels of one image (flattened p*Q+q, so a tile
// of M is a contiguous range of every output channel's NCHW plane), N = out
// channels, reduction k = (c, r, s) = 363 padded to 368.
//
// Each persistent CTA keeps the whole weight operand resident in shared
// memory (pre-arranged in mma fragment order by a small prep kernel, so one
// 16-byte load feeds two n8 tiles) and loops over tiles of 256 output
// pixels. For each tile it copies the input rows the tile touches into a
// zero-bordered patch in shared memory (the border is the convolution's
// padding), and warps gather A fragments straight from the patch through a
// k -> c*cstr + r*rstr + s*sstr offset table: no im2col buffer anywhere.
// The patch keeps the input's layout (NCHW or channels_last), so each input
// row is one contiguous cp.async copy; only the strides in the table differ.
//
// Pipelining: 16-bit types double-buffer the patch (the next tile's copy
// overlaps this tile's MMAs); fp32 has room for one buffer only (141 KB of
// resident weights), so its next copy overlaps just the epilogue stores.
//
// The fp32-accurate modes split the channels into groups of CTAs where a
// batch has too few tiles to fill the GPU, and where the weights of all
// channels do not fit beside a patch (fp32 K > 96, or K = 96 on parts with
// < 227 KB of smem, e.g. A100); see dispatch_fp32_split.
//
// Limits (returns false): C != 3, K > 128, K > 96 in fp32 TF32 mode, or a
// patch that does not fit shared memory (fp32 W beyond ~480, 16-bit beyond
// ~830 at the headline K). Padded reduction slots read finite patch words
// against zero weights, so an Inf/NaN input can reach outputs whose window
// excludes it.
//
// fp32 has three modes (Fp32Math):
//  - kAccurate, 3xTF32: mma.sync m16n8k8 TF32; both operands are split into
//    tf32 big + small on the fly and small*big + big*small + big*big are
//    summed: fp32-level accuracy, also where the output cancels. On wgmma the
//    same three products in fp16 after a power-of-two scaling (3xFP16, kH3;
//    see dispatch_fp32).
//  - kBf16x3: each operand is split a = hi + lo (hi = bf16(a), lo =
//    bf16(a - hi)) and lo*hi + hi*lo + hi*hi are summed with m16n8k16 bf16
//    MMAs in fp32 (lo*lo dropped): rel L2 ~4e-6 on typical data (about 16
//    bits per operand, so ~3x 3xTF32's error where outputs cancel) for half
//    the MMA instructions. Weights are split once by the prep kernel (hi and
//    lo fragments side by side, same bytes as fp32); activations stay fp32
//    in the patch and are split while forming the A fragments.
//  - kTf32: m16n8k8 TF32, one product.
// bf16/fp16: m16n8k16 with fp32 accumulation.
//
// On sm_90 devices, when the build carries sm_90a code, bf16/fp16 and kTf32
// run a wgmma version of the same kernel instead (see "Hopper path" below):
// the same patch and gather, B read by the tensor cores from the resident
// weights (stored in wgmma's canonical layout), warpgroups of 64 pixels
// (16-bit: one CTA of four plus a warpgroup that stores the outputs, staged
// in shared memory, where K <= 96, else two CTAs of two per SM; fp32: one
// CTA of four; 16-bit inputs, NCHW or channels_last, of even padding and
// width with enough tiles take the space-to-depth form of that kernel
// instead, see "Space-to-depth path"). So does kAccurate with up to 96
// channels and enough tiles to fill the GPU, as 3xFP16, or where the patch
// is too wide for that, as 3xTF32 in two groups of 48 channels (big and
// small parts of B take twice the bytes; see dispatch_fp32). kBf16x3 takes
// 3xFP16 where that runs (faster and more accurate), else the mma.sync
// kernel. That kernel is compiled for every target; the wgmma code exists
// only in the sm_90a pass. kTf32 and 16-bit problems with outputs 48-55
// pixels wide and enough tiles go to kernels of their own first, which read
// the input as phase planes with no gather (conv11s4_forward_planes.cu; 16-bit
// of even padding and width).

#include "common/constants.h"
#include "common/device.h"
#include "common/launch.h"
#include "common/ptx.cuh"
#include "common/wgmma.cuh"
#include "fast_kernels.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace alexop::cuda {
namespace {

constexpr int kKpad = 368;           // multiple of 8 and of 16
constexpr int kKtab = kKpad + 32;    // offset table incl. look-ahead slack
// 8 pixel jobs of 32 px; kNSplit warps share a job, each taking 1/kNSplit of
// the channels. kNSplit = 2 (16 warps) measured 5-15% slower on H200 than 1:
// the doubled A-gather traffic outweighs the extra latency hiding.
constexpr int kMJobs = 8;
constexpr int kNSplit = 1;
constexpr int kThreads = 32 * kMJobs * kNSplit;
constexpr int kWarps = kThreads / 32;
// wgmma kernel: four warpgroups per SM, each 64 pixels of a tile x all
// channels, as one CTA (CPS = 1) or two CTAs of two (CPS = 2)
constexpr int kGThreads = 512;
constexpr int kMaxK = 128;
// bf16x3: n8 tiles per pass-major MMA group (4 measured the same as 2)
constexpr int kB3Group = 2;


// kHalfP: 16-bit NCHW with an even column shift. The reduction runs over
// (c, r, s) with s padded 11 -> 12, so each (k, k+1) operand pair is one
// aligned 32-bit patch word: half the gather loads of kHalf for 8.7% more MMA.
// kB3: fp32 via bf16x3, kX3: fp32 via 3xTF32, kH3: fp32 via scaled 3xFP16 (see top).
// kS2D: 16-bit NCHW in the space-to-depth form (see "Space-to-depth path"):
// k = (tap, c, a, b) over 3 x 3 taps of 4 x 4 blocks, 432 = 27 k16 steps.
// kS2DL: the same for channels_last inputs, k = (tap, a, b, c).
enum Mode : int { kB3 = 0, kTF = 1, kHalf = 2, kHalfP = 3, kX3 = 4, kS2D = 5, kS2DL = 6, kH3 = 7 };
constexpr int kKpadP = 400;
constexpr int kKs2d = 432;

struct Params {
  const void* x;
  const uint4* wfrag;
  const void* bias;  // may be null
  void* y;
  int N, H, W, K, P, Q, pad;
  int PQ, tiles_per_img, total_tiles, MT;
  int PW, CS, PADL, shift, wcopy;
  int nhwc, vec;
  // element strides of (channel, row, column) inside the patch: the patch
  // keeps the input's own layout, only the gather tables differ
  int cstr, rstr, sstr;
  // staged 16-bit wgmma epilogue: byte offset of the staging rows in shared
  // memory and their stride in elements
  int stage, ls;
  // kS2D / kS2DL: bytes of one plane (8 of each block's 48 values) of the
  // space-to-depth patch (PW is its row length in blocks, CS the bytes of
  // one whole patch buffer)
  int gs;
};

template <int MODE> __host__ __device__ constexpr int ksteps() {
  return (MODE == kS2D || MODE == kS2DL) ? kKs2d / 16
         : MODE == kHalfP ? kKpadP / 16
         : (MODE == kHalf || MODE == kB3 || MODE == kH3) ? kKpad / 16 : kKpad / 8;
}
// kB3 holds hi and lo fragments: one uint4 per (k16 step, n8 tile, lane);
// so do 3xTF32 and 3xFP16 on wgmma (GMMA), as a block of big parts then one
// of small.
template <int MODE> __host__ __device__ constexpr bool split_b() { return MODE == kX3 || MODE == kH3; }
template <int MODE, int NT8, bool GMMA = false> __host__ __device__ constexpr int wfrag_bytes() {
  return ksteps<MODE>() * (MODE == kB3 ? NT8 : NT8 / 2) * 32 * 16 * (GMMA && split_b<MODE>() ? 2 : 1);
}

// bf16x2 of (lo16 = f0, hi16 = f1), round to nearest even
__device__ __forceinline__ uint32_t pack_bf16x2(float f0, float f1) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(f1), "f"(f0));
  return r;
}
// a = (f0, f1) -> hi = bf16x2(a), lo = bf16x2(a - hi); a - hi is exact in fp32
__device__ __forceinline__ void split_bf16x2(float f0, float f1, uint32_t& hi, uint32_t& lo) {
  hi = pack_bf16x2(f0, f1);
  lo = pack_bf16x2(f0 - __uint_as_float(hi << 16), f1 - __uint_as_float(hi & 0xffff0000u));
}

// Patch elements of one m16 tile's A fragment, rows g and g+8 at patch
// offsets pm[0], pm[1]. gather4: k offsets o0, o1 in m16n8k8 order (g, o0)
// (g+8, o0) (g, o1) (g+8, o1). gather8: k pairs lo, hi in m16n8k16 order
// (g, lo.x) (g, lo.y) (g+8, lo.x) (g+8, lo.y), then the same for hi.
template <typename E>
__device__ __forceinline__ void gather4(const E* P, const int (&pm)[2], int o0, int o1, E (&v)[4]) {
  v[0] = P[pm[0] + o0]; v[1] = P[pm[1] + o0];
  v[2] = P[pm[0] + o1]; v[3] = P[pm[1] + o1];
}
template <typename E>
__device__ __forceinline__ void gather8(const E* P, const int (&pm)[2], int2 lo, int2 hi, E (&v)[8]) {
  v[0] = P[pm[0] + lo.x]; v[1] = P[pm[0] + lo.y]; v[2] = P[pm[1] + lo.x]; v[3] = P[pm[1] + lo.y];
  v[4] = P[pm[0] + hi.x]; v[5] = P[pm[0] + hi.y]; v[6] = P[pm[1] + hi.x]; v[7] = P[pm[1] + hi.y];
}
// Eight 16-bit elements -> four registers of (low, high) pairs.
__device__ __forceinline__ void pack_pairs(const uint16_t (&r)[8], uint32_t (&a)[4]) {
#pragma unroll
  for (int e = 0; e < 4; ++e) a[e] = (uint32_t)r[2 * e] | ((uint32_t)r[2 * e + 1] << 16);
}

// Weight (n, k) of the padded reduction; kHalfP's k runs over (c, r, s) with s padded to 12,
// kS2D's over (tap (i, j), c, a, b) with r = 4i + a, s = 4j + b (zero past 10),
// kS2DL's over (tap, a, b, c).
template <typename T, int MODE>
__device__ __forceinline__ float weight_at(const T* __restrict__ w, int K, int k, int n) {
  if constexpr (MODE == kS2D || MODE == kS2DL) {
    const int tap = k / 48, ch = k - tap * 48;
    const int c = MODE == kS2D ? ch >> 4 : ch % 3;
    const int a = MODE == kS2D ? (ch >> 2) & 3 : ch / 12, b = MODE == kS2D ? ch & 3 : ch % 12 / 3;
    const int r = 4 * (tap / 3) + a, s = 4 * (tap % 3) + b;
    return (r < kR && s < kR && n < K) ? to_f(w[(size_t)n * kKred + (c * kR + r) * kR + s]) : 0.f;
  }
  if constexpr (MODE == kHalfP) {
    const int row = k / 12, s = k - row * 12;
    return (row < kC * kR && s < kR && n < K) ? to_f(w[(size_t)n * kKred + row * kR + s]) : 0.f;
  }
  return (k < kKred && n < K) ? to_f(w[(size_t)n * kKred + k]) : 0.f;
}

// Weights in fragment order: entry (ks, jj, lane) is a uint4 holding the B
// fragments of n8 tiles 2jj and 2jj+1 for that lane, so the hot loop reads B
// with conflict-free 16-byte loads and no index math.
// blockIdx.y is the channel group (see launch): its NT8 * 8 channels get their
// own fragment block.
template <typename T, int MODE, int NT8>
__global__ void prep_weights_kernel(const T* __restrict__ w, int K, uint32_t* __restrict__ out) {
  constexpr int KS = ksteps<MODE>();
  const int total = KS * (MODE == kB3 ? NT8 : NT8 / 2) * 32;
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int kg0 = blockIdx.y * NT8 * 8;
  w += (size_t)kg0 * kKred;
  K -= kg0;
  out += (size_t)blockIdx.y * total * 4;
  const int lane = idx & 31, rest = idx >> 5;
  if constexpr (MODE == kB3) {
    // entry (ks, j, lane) = {hi b0, hi b1, lo b0, lo b1} of n8 tile j
    const int j = rest % NT8, ks = rest / NT8;
    const int n = j * 8 + (lane >> 2), k = ks * 16 + 2 * (lane & 3);
    auto v = [&](int kk) -> float { return (kk < kKred && n < K) ? to_f(w[(size_t)n * kKred + kk]) : 0.f; };
    uint32_t h0, l0, h1, l1;
    split_bf16x2(v(k), v(k + 1), h0, l0);
    split_bf16x2(v(k + 8), v(k + 9), h1, l1);
    reinterpret_cast<uint4*>(out)[idx] = make_uint4(h0, h1, l0, l1);
    return;
  }
  const int jj = rest % (NT8 / 2), ks = rest / (NT8 / 2);
  const int g = lane >> 2, t = lane & 3;
  auto val = [&](int k, int n) { return weight_at<T, MODE>(w, K, k, n); };
  uint32_t v[4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int n = (2 * jj + h) * 8 + g;
    if constexpr (MODE == kHalf || MODE == kHalfP) {
      const int k = ks * 16 + 2 * t;
      v[2 * h] = pack2(from_f<T>(val(k, n)), from_f<T>(val(k + 1, n)));
      v[2 * h + 1] = pack2(from_f<T>(val(k + 8, n)), from_f<T>(val(k + 9, n)));
    } else {
      const int k = ks * 8 + t;
      v[2 * h] = tf32_or_raw(val(k, n), MODE == kTF);
      v[2 * h + 1] = tf32_or_raw(val(k + 4, n), MODE == kTF);
    }
  }
  reinterpret_cast<uint4*>(out)[idx] = make_uint4(v[0], v[1], v[2], v[3]);
}

struct TileGeom {
  int n, m0, mend, p_lo, rows_in, h0;
};
__device__ __forceinline__ TileGeom tile_geom(const Params& p, int tile) {
  TileGeom tg;
  tg.n = tile / p.tiles_per_img;
  tg.m0 = (tile - tg.n * p.tiles_per_img) * p.MT;
  tg.mend = min(tg.m0 + p.MT, p.PQ);
  tg.p_lo = tg.m0 / p.Q;
  const int p_hi = (tg.mend - 1) / p.Q;
  tg.rows_in = 4 * (p_hi - tg.p_lo) + kR;
  tg.h0 = 4 * tg.p_lo - p.pad;
  return tg;
}

// Copies the input rows of one tile into the patch interior; columns outside
// [PADL, PADL + wcopy) were zeroed once and are never written again.
template <typename T, int NWARPS = kWarps>
__device__ __forceinline__ void load_patch(const Params& p, const TileGeom& tg, T* patch, int warp,
                                           int lane) {
  const T* x = static_cast<const T*>(p.x);
  if (!p.nhwc) {
    // channel-outer, no per-row division; a row is at most a few vectors
    // per lane, so the copy loops stay rolled (instruction issue is the cost)
    for (int c = 0; c < kC; ++c) {
      for (int i = warp; i < tg.rows_in; i += NWARPS) {
        const int h = tg.h0 + i;
        T* dst = patch + c * p.CS + i * p.PW + p.PADL;
        if (h < 0 || h >= p.H) {
          for (int w = lane; w < p.wcopy; w += 32) dst[w] = from_f<T>(0.f);
          continue;
        }
        const T* src = x + ((size_t)(tg.n * kC + c) * p.H + h) * p.W;
        if (p.vec) {
          constexpr int V = 16 / sizeof(T);
#pragma unroll 1
          for (int v = lane; v < p.wcopy / V; v += 32) cp_async16(dst + v * V, src + v * V);
        } else if constexpr (sizeof(T) == 4) {
          for (int w = lane; w < p.wcopy; w += 32) cp_async4(dst + w, src + w);
        } else {
          for (int w = lane; w < p.wcopy; w += 32) dst[w] = src[w];
        }
      }
    }
  } else {
    // channels_last: the patch is NHWC too, so an input row (W*C contiguous
    // elements) is one contiguous copy.
    const int ne = p.wcopy * kC;
    for (int i = warp; i < tg.rows_in; i += NWARPS) {
      const int h = tg.h0 + i;
      T* dst = patch + i * p.rstr + p.PADL * kC;
      if (h < 0 || h >= p.H) {
        for (int e = lane; e < ne; e += 32) dst[e] = from_f<T>(0.f);
        continue;
      }
      const T* src = x + ((size_t)tg.n * p.H + h) * p.W * kC;
      if (p.vec) {
        constexpr int V = 16 / sizeof(T);
#pragma unroll 1
        for (int v = lane; v < ne / V; v += 32) cp_async16(dst + v * V, src + v * V);
      } else if constexpr (sizeof(T) == 4) {
        for (int e = lane; e < ne; e += 32) cp_async4(dst + e, src + e);
      } else {
        for (int e = lane; e < ne; e += 32) dst[e] = src[e];
      }
    }
  }
}

// 3xFP16: scales the tile's patch rows (those load_patch wrote) by 2^ta, ta
// from their largest finite |x| (fp16_exp), and replaces each fp32 x by the
// word of its fp16 parts, hi in the low half and lo in the high half, in
// place. Returns ta; ends with a barrier, so the gather may start. red: 2 *
// NTHR / 32 floats.
template <int NTHR>
__device__ __forceinline__ int split_patch_fp16(const Params& p, const TileGeom& tg, float* patch, float* red) {
  // NCHW: one run of rows_in rows per channel, CS apart; channels_last: one
  // run of whole pixel rows. PW is a multiple of 8, so runs are float4s.
  const int run4 = tg.rows_in * (p.nhwc ? p.rstr : p.PW) / 4;
  const int n4 = (p.nhwc ? 1 : kC) * run4;
  auto at = [&](int f) {
    const int c = f < run4 ? 0 : f < 2 * run4 ? 1 : 2;
    return reinterpret_cast<float4*>(patch + c * p.CS) + (f - c * run4);
  };
  float m = 0.f;
  for (int f = threadIdx.x; f < n4; f += NTHR) m = max_abs4(m, *at(f));
  m = block_max<NTHR>(m, red);
  if (!(m <= 3.402823466e38f)) {  // an Inf: the largest finite magnitude instead (block-uniform, rare)
    m = 0.f;
    for (int f = threadIdx.x; f < n4; f += NTHR) m = max_finite_abs4(m, *at(f));
    m = block_max<NTHR>(m, red + NTHR / 32);
  }
  const int e = fp16_exp(m);
  const float sa = pow2f(e);
  for (int f = threadIdx.x; f < n4; f += NTHR) *reinterpret_cast<uint4*>(at(f)) = split_fp16_words(*at(f), sa);
  __syncthreads();
  return e;
}

// Resident weights of this CTA's channel group (copy in flight on return),
// gather table, bias, zeroed patch buffers.
template <typename T, int MODE, int NT8, int NBUF, int NTHREADS = kThreads, int UNIT = 1, bool GMMA = false>
__device__ __forceinline__ void init_smem(const Params& p, unsigned char* smem) {
  constexpr int WB = wfrag_bytes<MODE, NT8, GMMA>();
  const int kg0 = blockIdx.y * NT8 * 8;
  const uint4* wsrc = p.wfrag + (size_t)blockIdx.y * (WB / 16);
  int* offk = reinterpret_cast<int*>(smem + WB);
  float* sbias = reinterpret_cast<float*>(smem + WB + kKtab * 4);
  T* patch0 = reinterpret_cast<T*>(smem + WB + kKtab * 4 + kMaxK * 4);
  const int buf_elems = kC * p.CS;
  const int tid = threadIdx.x;
  for (int i = tid; i < WB / 16; i += NTHREADS)
    cp_async16(reinterpret_cast<uint4*>(smem) + i, wsrc + i);
  for (int k = tid; k < kKtab; k += NTHREADS) {
    int v = 0;  // padded k: weight is zero, any finite patch word will do
    if constexpr (MODE == kHalfP) {
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

template <typename T, int MODE, int NT8, int NBUF>
__global__ void __launch_bounds__(kThreads, 1) conv11s4_fwd_tc_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int KS = ksteps<MODE>();
  constexpr int WB = wfrag_bytes<MODE, NT8>();
  constexpr int NJ = NT8 / 2;
  constexpr int NTW = NT8 / kNSplit;  // n8 tiles per warp
  constexpr int NJW = NTW / 2;  // fragment pairs per warp
  const uint4* ws = reinterpret_cast<const uint4*>(smem);
  int* offk = reinterpret_cast<int*>(smem + WB);
  float* sbias = reinterpret_cast<float*>(smem + WB + kKtab * 4);
  T* patch0 = reinterpret_cast<T*>(smem + WB + kKtab * 4 + kMaxK * 4);
  const int buf_elems = kC * p.CS;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  init_smem<T, MODE, NT8, NBUF>(p, smem);

  int tile = blockIdx.x;
  int buf = 0;
  if (tile < p.total_tiles) load_patch<T>(p, tile_geom(p, tile), patch0, warp, lane);
  cp_async_commit();

  for (; tile < p.total_tiles; tile += gridDim.x) {
    cp_async_wait_all();
    __syncthreads();
    const TileGeom tg = tile_geom(p, tile);
    const int next = tile + gridDim.x;
    if constexpr (NBUF == 2) {
      if (next < p.total_tiles)
        load_patch<T>(p, tile_geom(p, next), patch0 + (buf ^ 1) * buf_elems, warp, lane);
      cp_async_commit();
    }

    const int mjob = warp & (kMJobs - 1), nh = warp / kMJobs;
    const int mj = tg.m0 + mjob * 32;  // this warp's 32 pixels
    const bool active = (mjob * 32 < p.MT) && (mj < tg.mend);
    float acc[2][NTW][4];
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
      for (int j = 0; j < NTW; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[a][j][e] = 0.f;

    if (active) {
      int pm[2][2];  // patch offsets of rows g and g+8 of both m16 tiles
#pragma unroll
      for (int a = 0; a < 2; ++a)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          int m = min(mj + a * 16 + hh * 8 + g, tg.mend - 1);  // clamp keeps reads in loaded rows
          const int pp = m / p.Q, qq = m - pp * p.Q;
          pm[a][hh] = 4 * p.rstr * (pp - tg.p_lo) + (4 * qq + p.shift) * p.sstr;
        }
      const T* P = patch0 + buf * buf_elems;
      // Operands for step ks+1 (and table offsets for ks+2) are fetched
      // before the MMAs of step ks, so the two dependent shared-memory loads
      // (table, then gather) overlap the tensor-core work of two warps/SMSP.
      if constexpr (MODE == kHalfP) {
#pragma unroll
        for (int a = 0; a < 2; ++a)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) pm[a][hh] >>= 1;  // element -> word offset (even by construction)
      }
      if constexpr (MODE == kB3) {
        // bf16x3: A stays fp32 in the patch and is split per k16 step;
        // element e of af[a] follows the m16n8k16 A fragment: (row, k) =
        // (g, 2t) (g, 2t+1) (g+8, 2t) (g+8, 2t+1) (g, 2t+8) (g, 2t+9)
        // (g+8, 2t+8) (g+8, 2t+9).
        const float* Pf = reinterpret_cast<const float*>(P);
        const int2* offk2 = reinterpret_cast<const int2*>(offk);
        int2 olo = offk2[t], ohi = offk2[t + 4];
        float af[2][8];
#pragma unroll
        for (int a = 0; a < 2; ++a) gather8(Pf, pm[a], olo, ohi, af[a]);
        olo = offk2[8 + t]; ohi = offk2[12 + t];
#pragma unroll 2
        for (int ks = 0; ks < KS; ++ks) {
          float an[2][8];
#pragma unroll
          for (int a = 0; a < 2; ++a) gather8(Pf, pm[a], olo, ohi, an[a]);
          olo = offk2[(ks + 2) * 8 + t]; ohi = offk2[(ks + 2) * 8 + t + 4];
          uint32_t ah[2][4], al[2][4];
#pragma unroll
          for (int a = 0; a < 2; ++a)
#pragma unroll
            for (int e = 0; e < 4; ++e) split_bf16x2(af[a][2 * e], af[a][2 * e + 1], ah[a][e], al[a][e]);
          constexpr int G = NTW % kB3Group == 0 ? kB3Group : 2;
#pragma unroll
          for (int j0 = 0; j0 < NTW; j0 += G) {
            uint4 b[G];
#pragma unroll
            for (int jg = 0; jg < G; ++jg) b[jg] = ws[(ks * NT8 + nh * NTW + j0 + jg) * 32 + lane];
            // small products first, pass-major: the three MMAs into one
            // accumulator are 2G independent MMAs apart
#pragma unroll
            for (int jg = 0; jg < G; ++jg)
#pragma unroll
              for (int a = 0; a < 2; ++a)
                mma_16<__nv_bfloat16>(acc[a][j0 + jg], al[a], b[jg].x, b[jg].y);
#pragma unroll
            for (int jg = 0; jg < G; ++jg)
#pragma unroll
              for (int a = 0; a < 2; ++a)
                mma_16<__nv_bfloat16>(acc[a][j0 + jg], ah[a], b[jg].z, b[jg].w);
#pragma unroll
            for (int jg = 0; jg < G; ++jg)
#pragma unroll
              for (int a = 0; a < 2; ++a)
                mma_16<__nv_bfloat16>(acc[a][j0 + jg], ah[a], b[jg].x, b[jg].y);
          }
#pragma unroll
          for (int a = 0; a < 2; ++a)
#pragma unroll
            for (int e = 0; e < 8; ++e) af[a][e] = an[a][e];
        }
      } else if constexpr (MODE != kHalf) {
        const float* Pf = reinterpret_cast<const float*>(P);
        int o0 = offk[t], o1 = offk[t + 4];
        float af[2][4];
#pragma unroll
        for (int a = 0; a < 2; ++a) gather4(Pf, pm[a], o0, o1, af[a]);
        o0 = offk[8 + t]; o1 = offk[12 + t];
#pragma unroll 2
        for (int ks = 0; ks < KS; ++ks) {
          float an[2][4];
#pragma unroll
          for (int a = 0; a < 2; ++a) gather4(Pf, pm[a], o0, o1, an[a]);
          o0 = offk[(ks + 2) * 8 + t]; o1 = offk[(ks + 2) * 8 + t + 4];
          uint32_t ab[2][4], as[2][4];
#pragma unroll
          for (int a = 0; a < 2; ++a)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              if constexpr (MODE == kHalfP) {
                ab[a][e] = __float_as_uint(af[a][e]);  // already a packed bf16/f16 pair
              } else if constexpr (MODE == kX3) {
                split_3xtf32(af[a][e], ab[a][e], as[a][e]);
              } else {
                ab[a][e] = to_tf32(af[a][e]);
              }
            }
#pragma unroll
          for (int jj = 0; jj < NJW; ++jj) {
            const uint4 b = ws[(ks * NJ + nh * NJW + jj) * 32 + lane];
            const uint32_t braw[2][2] = {{b.x, b.y}, {b.z, b.w}};
            if constexpr (MODE == kX3) {
              mma_3xtf32_2x2(acc, 2 * jj, ab, as, braw);
            } else if constexpr (MODE == kHalfP) {
#pragma unroll
              for (int hh = 0; hh < 2; ++hh)
#pragma unroll
                for (int a = 0; a < 2; ++a)
                  mma_16<T>(acc[a][2 * jj + hh], ab[a], braw[hh][0], braw[hh][1]);
            } else {
#pragma unroll
              for (int hh = 0; hh < 2; ++hh)
#pragma unroll
                for (int a = 0; a < 2; ++a)
                  mma_tf32(acc[a][2 * jj + hh], ab[a], braw[hh][0], braw[hh][1]);
            }
          }
#pragma unroll
          for (int a = 0; a < 2; ++a)
#pragma unroll
            for (int e = 0; e < 4; ++e) af[a][e] = an[a][e];
        }
      } else {
        const uint16_t* Ph = reinterpret_cast<const uint16_t*>(P);
        const int2* offk2 = reinterpret_cast<const int2*>(offk);
        int2 olo = offk2[t], ohi = offk2[t + 4];
        uint32_t af[2][4];
#pragma unroll
        for (int a = 0; a < 2; ++a) {
          uint16_t r0[8];
          gather8(Ph, pm[a], olo, ohi, r0);
          pack_pairs(r0, af[a]);
        }
        olo = offk2[8 + t]; ohi = offk2[12 + t];
#pragma unroll 2
        for (int ks = 0; ks < KS; ++ks) {
          uint16_t rn[2][8];
#pragma unroll
          for (int a = 0; a < 2; ++a) gather8(Ph, pm[a], olo, ohi, rn[a]);
          olo = offk2[(ks + 2) * 8 + t]; ohi = offk2[(ks + 2) * 8 + t + 4];
#pragma unroll
          for (int jj = 0; jj < NJW; ++jj) {
            const uint4 b = ws[(ks * NJ + nh * NJW + jj) * 32 + lane];
#pragma unroll
            for (int a = 0; a < 2; ++a) {
              mma_16<T>(acc[a][2 * jj], af[a], b.x, b.y);
              mma_16<T>(acc[a][2 * jj + 1], af[a], b.z, b.w);
            }
          }
#pragma unroll
          for (int a = 0; a < 2; ++a) pack_pairs(rn[a], af[a]);
        }
      }
    }

    if constexpr (NBUF == 1) {
      __syncthreads();  // every warp is done reading the patch
      if (next < p.total_tiles) load_patch<T>(p, tile_geom(p, next), patch0, warp, lane);
      cp_async_commit();
    } else {
      buf ^= 1;
    }

    // Epilogue straight from the accumulators: for one register, lanes with
    // the same t write 8 consecutive pixels of one channel plane.
    if (active) {
      // this CTA's channel group: channels kg0 + [0, NT8 * 8), kg0 + kend at most
      const int kg0 = blockIdx.y * NT8 * 8, kend = p.K - kg0;
      T* y = static_cast<T*>(p.y) + (size_t)kg0 * p.PQ;
#pragma unroll
      for (int j = 0; j < NTW; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int ch = (nh * NTW + j) * 8 + 2 * t + e;
          if (ch >= kend) continue;
          const float bv = sbias[ch];
          T* yc = y + ((size_t)tg.n * p.K + ch) * p.PQ;
#pragma unroll
          for (int a = 0; a < 2; ++a)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
              const int m = mj + a * 16 + hh * 8 + g;
              if (m < tg.mend) yc[m] = from_f<T>(acc[a][j][hh * 2 + e] + bv);
            }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Staged 16-bit epilogue of the Hopper path (see "Hopper path" below for why).
// The MMA warps write the tile's outputs (bias added, rounded) to shared
// memory as [channel][pixel] rows with stmatrix .trans: one instruction
// stores four 8 x 8 blocks, each 16-byte row 8 consecutive pixels of one
// channel. Store warps then read each channel's run of the tile back with
// 16-byte loads and write it with 16-byte stores at 16-byte aligned global
// addresses. The channel planes have odd length (PQ = 3025 at the
// headline), so a run starts a = e mod 8 elements past a 16-byte boundary,
// different in every plane: lane i writes the aligned chunk i, the run's
// elements [8i - a, 8i - a + 8), funnelled from the staged chunks i - 1 and
// i, both of which it reads itself. The elements outside whole chunks (at
// most 7 at each end of a run) take one 2-byte store per lane.
// Shared-memory and store instructions per 256-pixel channel run: five.
// They share the LSU/MIO pipe with the MMA warps' ldmatrix and stmatrix,
// and that contention, not store bandwidth, is what the stores cost. An
// earlier form fetched the previous chunk with four shuffles and had every
// lane issue eight predicated 2-byte stores for the run's ends (about 13
// such instructions per run). Same H200 run, batch 256, bf16 / fp16, ms:
// space-to-depth kernel 0.235 / 0.235 before, 0.235 / 0.222 after; gather
// kernel 0.244 / 0.243 before, 0.237 / 0.235 after.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ uint4 lds128(const void* p) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(smem_u32(p)));
  return v;
}
__device__ __forceinline__ uint16_t lds16(const void* p) {
  uint16_t v;
  asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(v) : "r"(smem_u32(p)));
  return v;
}

// Writes staged rows st[c * ls + i] (channel c < nch, pixel i < len <= MT)
// to y0[c * PQ + i], where y0 = the output at channel 0, pixel 0 of the tile
// and e0 = its element index from a 16-byte aligned base (mod 2^32). A
// channel's run takes lpc = 2^lpc_log2 = MT / 8 lanes; worker / nworkers:
// this warp among the store warps; U channel passes at a time, so their
// latencies overlap.
template <int U>
__device__ __forceinline__ void store_staged_rows(const uint16_t* st, int ls, int lpc_log2, int nch, int len,
                                                  uint16_t* y0, uint32_t e0, int PQ, int worker, int nworkers,
                                                  int lane) {
  const int lpc = 1 << lpc_log2;
  const int sl = lane & (lpc - 1);
  const int cpw = 32 >> lpc_log2;  // channels per warp pass
  const int step = nworkers * cpw;
  for (int c0 = worker * cpw; c0 < nch; c0 += U * step) {
    uint4 cur[U], prev[U];
#pragma unroll
    for (int q = 0; q < U; ++q) {
      const uint16_t* row = st + (size_t)min(c0 + q * step + (lane >> lpc_log2), nch - 1) * ls;
      cur[q] = lds128(row + 8 * sl);
      prev[q] = lds128(row + 8 * max(sl - 1, 0));
    }
#pragma unroll
    for (int q = 0; q < U; ++q) {
      const int c = c0 + q * step + (lane >> lpc_log2);
      const bool live = c < nch;
      const int a = (int)((e0 + (uint32_t)c * (uint32_t)PQ) & 7u);
      // window element k = element 8 - a + k of w = (prev, cur): a word
      // shift b by halving steps (w[8] = 0, read only when a = 0, where the
      // funnel keeps u[j]), then a half-word funnel
      const uint32_t w[8] = {prev[q].x, prev[q].y, prev[q].z, prev[q].w, cur[q].x, cur[q].y, cur[q].z, cur[q].w};
      const int b = (8 - a) >> 1, odd = (8 - a) & 1;
      uint32_t x[8], y[6], u[5];
#pragma unroll
      for (int j = 0; j < 8; ++j) x[j] = (b & 4) ? (j + 4 < 8 ? w[j + 4] : 0u) : w[j];
#pragma unroll
      for (int j = 0; j < 6; ++j) y[j] = (b & 2) ? x[j + 2] : x[j];
#pragma unroll
      for (int j = 0; j < 5; ++j) u[j] = (b & 1) ? y[j + 1] : y[j];
      uint32_t out[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) out[j] = __funnelshift_r(u[j], u[j + 1], 16 * odd);
      uint16_t* yc = y0 + (size_t)c * PQ;
      const int lo = 8 * sl - a;  // the chunk's first element in the run
      if (live && lo >= 0 && lo + 8 <= len)
        *reinterpret_cast<uint4*>(yc + lo) = make_uint4(out[0], out[1], out[2], out[3]);
      // the rest: the head [0, h) before the first whole chunk and the tail
      // [t0, len) after the last, one element per lane
      const int h = min(len, (8 - a) & 7);
      const int t0 = h + 8 * ((len - h) >> 3);
      const int n_edge = h + len - t0;
      for (int e = sl; e < n_edge; e += lpc) {
        const int r = e < h ? e : t0 + (e - h);
        if (live) yc[r] = lds16(st + (size_t)c * ls + r);
      }
    }
  }
}

// The store warps' loop: for each of this CTA's tiles, wait until its rows
// are staged (barrier 1), write them out, release the rows (barrier 2).
// NALL: every thread of the CTA takes part in both barriers.
template <int NALL>
__device__ __forceinline__ void store_warps(const Params& p, const unsigned char* smem, int kg0, int nch,
                                            int worker, int nworkers, int lane) {
  const uint16_t* st = reinterpret_cast<const uint16_t*>(smem + p.stage);
  uint16_t* yb = static_cast<uint16_t*>(p.y);
  const int lpc_log2 = 31 - __clz(p.MT >> 3);
  if ((int)blockIdx.x < p.total_tiles) asm volatile("bar.arrive 2, %0;\n" ::"n"(NALL) : "memory");
  for (int tile = blockIdx.x; tile < p.total_tiles; tile += gridDim.x) {
    const TileGeom tg = tile_geom(p, tile);
    asm volatile("bar.sync 1, %0;\n" ::"n"(NALL) : "memory");  // this tile's rows are staged
    const size_t e0 = ((size_t)tg.n * p.K + kg0) * p.PQ + tg.m0;
    store_staged_rows<4>(st, p.ls, lpc_log2, nch, tg.mend - tg.m0, yb + e0, (uint32_t)e0, p.PQ, worker, nworkers,
                         lane);
    if (tile + (int)gridDim.x < p.total_tiles) asm volatile("bar.arrive 2, %0;\n" ::"n"(NALL) : "memory");
  }
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// ---------------------------------------------------------------------------
// Hopper path (sm_90a): the same tiles, patch and A gather, but the MMAs are
// wgmma with A from registers and B read by the tensor cores straight from
// the resident weights through a shared-memory descriptor. That takes the B
// fragment loads off the LSU/MIO pipe and replaces a warp's 12 HMMA per 16
// pixels and k step by one asynchronous wgmma per warpgroup, so the gather
// of later steps overlaps the tensor work instead of competing for issue.
// 4 / CPS warpgroups per CTA; warpgroup wg (warps 4wg..4wg+3) owns pixels
// [64wg, 64wg + 64) of the tile as one m64 block, warp wq of it rows
// 16wq..16wq+15, with the same fragment layouts as mma.sync (A: m16n8k16 /
// m16n8k8, D: m16n8). Four warps per scheduler (the mma.sync kernel has two)
// hide the gather and epilogue latencies; each warp gathers only its own 16
// rows, so the A traffic is the same as with two warpgroups of 128 pixels.
//
// 16-bit outputs (STAGED): stored straight from the accumulators, each warp
// store covers 8 pixels of 4 channel planes in 2-byte elements, and that
// epilogue sits on the MMA warps' critical path: without the stores the
// two-CTA kernel ran 0.16 instead of 0.25 ms (H200, bf16, batch 256).
// Staging the tile in shared memory and writing aligned 16-byte chunks from
// the same warps (a CTA barrier between) was slower, 0.262 vs 0.252 ms: the
// read-back and realignment add latency, and L2 traffic was not the limit.
// So a fifth warpgroup of store warps reads the rows back and writes them
// (store_staged_rows) while the four MMA warpgroups go on with the next
// tile; the MMA warps only add the bias, round, stmatrix the rows and arrive
// on a barrier: 0.228 ms. One CTA per SM (the rows take 50 KB beside two
// patch buffers) of 640 threads, so registers are capped at 96; taken for
// K <= 96 (K = 128 spills) and a 16-byte aligned output. Named barriers:
// 1 rows staged (MMA warps arrive, store warps wait), 2 rows free (the
// reverse), 3 the MMA warps' own per-tile barrier.

// B in the canonical K-major, no-swizzle layout: per k step (16 halves or 8
// tf32 = 32 bytes of k) NT8 blocks of 8 channels, each two 8 x 16-byte core
// matrices (k halves kc = 0, 1) of 128 contiguous bytes. Descriptor: leading
// (k) byte offset 128, stride (n) byte offset 256; same bytes as wfrag_bytes.
// 3xTF32 (kX3) writes the big parts, then the small parts in a second block
// of the same layout. 3xFP16 (kH3) does the same with fp16 halves of the
// weights scaled by 2^tw (the exponent that weight_exp_kernel wrote to *wexp).
// blockIdx.y is the channel group, as in prep_weights_kernel.
template <typename T, int MODE, int NT8>
__global__ void prep_weights_gmma_kernel(const T* __restrict__ w, int K, uint4* __restrict__ out,
                                         const int* __restrict__ wexp = nullptr) {
  constexpr int KS = ksteps<MODE>();
  constexpr int EPR = (MODE == kTF || MODE == kX3) ? 4 : 8;  // elements per 16-byte core-matrix row
  constexpr int BLOCK = KS * NT8 * 16;
  const int kg0 = blockIdx.y * NT8 * 8;
  w += (size_t)kg0 * kKred;
  K -= kg0;
  out += (size_t)blockIdx.y * BLOCK * (split_b<MODE>() ? 2 : 1);
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= BLOCK) return;
  const int nr = idx & 7, kc = (idx >> 3) & 1, nb = (idx >> 4) % NT8, ks = (idx >> 4) / NT8;
  const int n = nb * 8 + nr, k0 = ks * 2 * EPR + kc * EPR;
  uint32_t v[4], small[4];
  [[maybe_unused]] const float wscale = MODE == kH3 ? pow2f(*wexp) : 1.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (MODE == kX3) {
      split_3xtf32(weight_at<T, MODE>(w, K, k0 + i, n), v[i], small[i]);
    } else if constexpr (MODE == kH3) {
      split_fp16x2(wscale * weight_at<T, MODE>(w, K, k0 + 2 * i, n),
                   wscale * weight_at<T, MODE>(w, K, k0 + 2 * i + 1, n), v[i], small[i]);
    } else if constexpr (MODE == kTF) {
      v[i] = to_tf32(weight_at<T, MODE>(w, K, k0 + i, n));
    } else {
      v[i] = pack2(from_f<T>(weight_at<T, MODE>(w, K, k0 + 2 * i, n)),
                   from_f<T>(weight_at<T, MODE>(w, K, k0 + 2 * i + 1, n)));
    }
  }
  out[idx] = make_uint4(v[0], v[1], v[2], v[3]);
  if constexpr (split_b<MODE>()) out[BLOCK + idx] = make_uint4(small[0], small[1], small[2], small[3]);
}

// 3xFP16: *wexp = the exponent tw that puts the largest finite |w| of the n
// weights in [2^14, 2^15) (see fp16_exp). One block.
template <int NTHR>
__global__ void __launch_bounds__(NTHR) weight_exp_kernel(const float* __restrict__ w, int n, int* __restrict__ wexp) {
  __shared__ float red[NTHR / 32];
  float m = 0.f;
  for (int i = threadIdx.x; i < n; i += NTHR) m = max_finite_abs(m, w[i]);
  m = block_max<NTHR>(m, red);
  if (threadIdx.x == 0) *wexp = fp16_exp(m);
}

constexpr int kStoreThreads = 128;  // store warps of the STAGED epilogue
template <typename T, int MODE, int NT8, int NBUF, int CPS, bool STAGED = false>
__global__ void __launch_bounds__(kGThreads / CPS + (STAGED ? kStoreThreads : 0), CPS)
    conv11s4_fwd_gmma_kernel(const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(MODE != kB3, "bf16x3 has no wgmma form");
  static_assert(MODE != kH3 || (!STAGED && CPS == 1 && NBUF == 1), "3xFP16: one CTA, one patch buffer");
  using TA = std::conditional_t<MODE == kTF || MODE == kX3, float, std::conditional_t<MODE == kH3, __half, T>>;
  static_assert(!STAGED || (sizeof(T) == 2 && NBUF == 2 && CPS == 1), "staged: 16-bit, one CTA of two patch buffers");
  constexpr int NTHR = kGThreads / CPS, NWARPS = NTHR / 32;  // the MMA warps
  constexpr int NALL = NTHR + (STAGED ? kStoreThreads : 0);
  constexpr int SW = (NALL - NTHR) / 32;  // store warps
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int KS = ksteps<MODE>();
  constexpr int WB = wfrag_bytes<MODE, NT8, true>();
  constexpr int NACC = NT8 * 4;
  // A buffers and how many k steps ahead of the MMAs they are filled; the
  // fp32 modes (k8 steps) keep three wgmmas in flight: NB = 6, AHEAD = 3
  // against 4, 2 measured (H200, batch 256, K = 96, ms) TF32 0.398 -> 0.388,
  // channels_last 0.404 -> 0.389; fp32-accurate 0.870 -> 0.877 (noise),
  // channels_last 0.922 -> 0.884, K = 64 channels_last 0.776 -> 0.716, batch
  // 32 0.150 -> 0.134. (6, 4) was between the two.
  constexpr bool kFp32 = MODE == kTF || MODE == kX3;  // k8 steps
  constexpr int NB = kFp32 ? 6 : 4, AHEAD = kFp32 ? 3 : 2;
  // the gather table is kept in bytes (kHalfP counts 32-bit pairs)
  constexpr int UB = MODE == kHalf ? 2 : 4;
  const int* offk = reinterpret_cast<const int*>(smem + WB);
  const int2* offk2 = reinterpret_cast<const int2*>(offk);
  const float* sbias = reinterpret_cast<const float*>(smem + WB + kKtab * 4);
  T* patch0 = reinterpret_cast<T*>(smem + WB + kKtab * 4 + kMaxK * 4);
  const int buf_elems = kC * p.CS;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wg = warp >> 2, wq = warp & 3;
  init_smem<T, MODE, NT8, NBUF, NALL, UB, true>(p, smem);
  const int kg0 = blockIdx.y * NT8 * 8;  // this CTA's channel group: kg0 + [0, NT8 * 8)
  const int nch = min(NT8 * 8, p.K - kg0);
  if constexpr (STAGED) {
    // the store warps took part in the weight copy: it lands before they leave
    cp_async_wait_all();
    fence_proxy_async();
    __syncthreads();
    if (warp >= NWARPS) {
      store_warps<NALL>(p, smem, kg0, nch, warp - NWARPS, SW, lane);
      return;
    }
  }
  const uint64_t desc0 = gmma_desc(smem_u32(smem));
  // 3xTF32, 3xFP16: the small parts of B, one block of KS * NT8 * 256 bytes on
  constexpr uint64_t kSmallB = (uint64_t)(KS * NT8 * 256) >> 4;
  // 3xFP16: B was scaled by 2^tw (its exponent follows the fragments)
  [[maybe_unused]] const int tw = MODE == kH3 ? *reinterpret_cast<const int*>(p.wfrag + WB / 16) : 0;

  int tile = blockIdx.x;
  int buf = 0;
  if (tile < p.total_tiles) load_patch<T, NWARPS>(p, tile_geom(p, tile), patch0, warp, lane);
  cp_async_commit();

  for (; tile < p.total_tiles; tile += gridDim.x) {
    cp_async_wait_all();
    fence_proxy_async();  // the weights arrived by cp.async; wgmma reads them
    if constexpr (STAGED) asm volatile("bar.sync 3, %0;\n" ::"n"(NTHR) : "memory");
    else __syncthreads();
    const TileGeom tg = tile_geom(p, tile);
    const int next = tile + gridDim.x;
    // 3xFP16: the outputs come out scaled by 2^(ta + tw), up to 2^254 either
    // way, so they are scaled back by two normal powers of two (exact: the
    // intermediate lies between the accumulator and the output); -(ta + tw)
    // below -252 leaves nothing above fp32's smallest value anyway
    [[maybe_unused]] float unscale1 = 1.f, unscale2 = 1.f;
    if constexpr (MODE == kH3) {
      const int ta = split_patch_fp16<NTHR>(p, tg, patch0, reinterpret_cast<float*>(smem + p.stage));
      const int e = max(-(ta + tw), -252), e1 = e / 2;
      unscale1 = pow2f(e1);
      unscale2 = pow2f(e - e1);
    }
    if constexpr (NBUF == 2) {
      if (next < p.total_tiles)
        load_patch<T, NWARPS>(p, tile_geom(p, next), patch0 + (buf ^ 1) * buf_elems, warp, lane);
      cp_async_commit();
    }

    const int mw = tg.m0 + wg * 64;
    // warpgroup-uniform: wgmma needs all four warps
    const bool active = (wg * 64 < p.MT) && (mw < tg.mend);
    const int mrow = mw + wq * 16 + g;  // this thread's rows: mrow, mrow + 8
    float acc[NACC];
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = 0.f;

    if (active) {
      const unsigned char* Pb = reinterpret_cast<const unsigned char*>(patch0 + buf * buf_elems);
      int pb[2];  // byte offsets of rows mrow, mrow + 8 in the patch
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int m = min(mrow + hh * 8, tg.mend - 1);  // clamp keeps reads in loaded rows
        const int pp = m / p.Q, qq = m - pp * p.Q;
        pb[hh] = (4 * p.rstr * (pp - tg.p_lo) + (4 * qq + p.shift) * p.sstr) * (int)sizeof(T);
      }
      auto ld32 = [&](int off) { return *reinterpret_cast<const uint32_t*>(Pb + off); };
      auto ld16 = [&](int off) { return (uint32_t)*reinterpret_cast<const uint16_t*>(Pb + off); };
      // A fragment of k step s (m16n8k16 / m16n8k8 order for this warp's 16 rows);
      // 3xFP16 also As, the small parts: a patch word is one element's (hi, lo)
      auto gather = [&](int s, uint32_t (&A)[4], uint32_t (&As)[4]) {
        if constexpr (MODE == kH3) {
          const int2 lo = offk2[s * 8 + t], hi = offk2[s * 8 + t + 4];
          const int2 ko[2] = {lo, hi};
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int2 o = ko[e >> 1];
            const uint32_t a = ld32(pb[e & 1] + o.x), b = ld32(pb[e & 1] + o.y);
            A[e] = __byte_perm(a, b, 0x5410);
            As[e] = __byte_perm(a, b, 0x7632);
          }
        } else if constexpr (MODE == kHalf) {
          const int2 lo = offk2[s * 8 + t], hi = offk2[s * 8 + t + 4];
          A[0] = ld16(pb[0] + lo.x) | (ld16(pb[0] + lo.y) << 16);
          A[1] = ld16(pb[1] + lo.x) | (ld16(pb[1] + lo.y) << 16);
          A[2] = ld16(pb[0] + hi.x) | (ld16(pb[0] + hi.y) << 16);
          A[3] = ld16(pb[1] + hi.x) | (ld16(pb[1] + hi.y) << 16);
        } else {
          const int o0 = offk[s * 8 + t], o1 = offk[s * 8 + t + 4];
          A[0] = ld32(pb[0] + o0); A[1] = ld32(pb[1] + o0);
          A[2] = ld32(pb[0] + o1); A[3] = ld32(pb[1] + o1);
          if constexpr (MODE == kTF) {
#pragma unroll
            for (int e = 0; e < 4; ++e) A[e] = to_tf32(__uint_as_float(A[e]));
          }
        }
      };
      // Each A buffer is refilled only after the wait that retires the wgmma
      // reading it (ptxas serializes the wgmmas otherwise), AHEAD steps
      // before its own wgmma, so the gather latency hides behind the queue.
      // 3xTF32 splits A into big (A) and small (As) parts as it is gathered.
      uint32_t A[NB][4], As[split_b<MODE>() ? NB : 1][4];
      auto fill = [&](int s, int u) {
        gather(s, A[u], As[split_b<MODE>() ? u : 0]);
        if constexpr (MODE == kX3) {
#pragma unroll
          for (int e = 0; e < 4; ++e) split_3xtf32(__uint_as_float(A[u][e]), A[u][e], As[u][e]);
        }
      };
#pragma unroll
      for (int u = 0; u < AHEAD; ++u) fill(u, u);
#pragma unroll 1
      for (int s = 0; s < KS; s += NB) {
#pragma unroll
        for (int u = 0; u < NB; ++u) {
          if (s + u < KS) {
            const uint64_t desc = desc0 + (uint64_t)(((s + u) * NT8 * 256) >> 4);
            gmma_fence();
            if constexpr (split_b<MODE>()) {
              // small products first, into the same fp32 accumulators
              gmma_rs<TA, NT8>(acc, As[u], desc);
              gmma_rs<TA, NT8>(acc, A[u], desc + kSmallB);
            }
            gmma_rs<TA, NT8>(acc, A[u], desc);
            gmma_commit();
            gmma_wait<NB - AHEAD>();
            fill(s + u + AHEAD, (u + AHEAD) % NB);
          }
        }
      }
      gmma_wait<0>();
#pragma unroll
      for (int i = 0; i < NACC; ++i) pin(acc[i]);
      if constexpr (MODE == kH3) {
#pragma unroll
        for (int i = 0; i < NACC; ++i) acc[i] = acc[i] * unscale1 * unscale2;
      }
    }

    if constexpr (STAGED) {
      asm volatile("bar.sync 2, %0;\n" ::"n"(NALL) : "memory");  // the store warps are done with the rows
      const int px = wg * 64 + wq * 16;  // tile pixel of this warp's fragment row 0
      // (rows hold MT pixels: a tile of MT = 32 leaves warps 2, 3 out)
      if (active && px < p.MT) stage_rows<T, NT8>(acc, sbias, smem + p.stage, p.ls, px, lane);
      asm volatile("bar.arrive 1, %0;\n" ::"n"(NALL) : "memory");  // rows staged
      buf ^= 1;
      continue;  // the next tile's bar.sync 2 orders the store warps' reads before new rows
    }

    if constexpr (NBUF == 1) {
      __syncthreads();  // every warp is done reading the patch
      if (next < p.total_tiles) load_patch<T, NWARPS>(p, tile_geom(p, next), patch0, warp, lane);
      cp_async_commit();
    } else {
      buf ^= 1;
    }

    if (active) {
      const bool ok0 = mrow < tg.mend, ok1 = mrow + 8 < tg.mend;
      const size_t jstep = (size_t)8 * p.PQ;  // n8 block -> next one
      const int kend = p.K - kg0;  // channels kg0 + kend at most
      T* y0 = static_cast<T*>(p.y) + ((size_t)tg.n * p.K + kg0 + 2 * t) * p.PQ + mrow;
      T* y1 = y0 + p.PQ;
      // predicate-free stores unless the tile or the channel count is ragged
      auto store = [&](auto full) {
#pragma unroll
        for (int j = 0; j < NT8; ++j) {
          const int ch = j * 8 + 2 * t;
          const float2 bv = *reinterpret_cast<const float2*>(sbias + ch);
          if (full || ch < kend) {
            if (full || ok0) y0[0] = from_f<T>(acc[j * 4] + bv.x);
            if (full || ok1) y0[8] = from_f<T>(acc[j * 4 + 2] + bv.x);
          }
          if (full || ch + 1 < kend) {
            if (full || ok0) y1[0] = from_f<T>(acc[j * 4 + 1] + bv.y);
            if (full || ok1) y1[8] = from_f<T>(acc[j * 4 + 3] + bv.y);
          }
          y0 += jstep;
          y1 += jstep;
        }
      };
      if (ok1 && kend >= NT8 * 8) store(std::true_type{});
      else store(std::false_type{});
    }
  }
#endif
}

// ---------------------------------------------------------------------------
// Space-to-depth path (sm_90a, 16-bit NCHW or channels_last, even padding
// and width).
//
// The kernels above gather every A element from the patch through an offset
// table: per k step and warp, 4-8 shared loads and the table reads. Here the
// padded input is viewed as blocks of 4 x 4 pixels: block (P', Q') holds the
// 48 values (c, a, b) = x[c][4P' + a - pad][4Q' + b - pad], and output (p, q)
// is a 3 x 3 stride-1 convolution over blocks (p + i, q + j), i, j < 3, with
// weight w[c][4i + a][4j + b] (zero where 4i + a or 4j + b passes 10): K = 9
// x 48 = 432 instead of 368 (17% more MMA), but each k16 step (tap (i, j),
// channel c) of 16 pixels is 16 rows of 16 contiguous bytes: one
// ldmatrix.x4 per warp, no table.
//
// The patch holds the tile's block rows p_lo .. p_hi + 2 as 6 planes (one per
// 8-channel group g = (c, a / 2)) of [block][8 halves]; a lane's ldmatrix row
// is its pixel's block, moved by the tap: (i * PW + j) blocks further. Rows of
// 8 consecutive pixels are 128 contiguous bytes (no bank conflicts except
// where a pixel row wraps). The copy writes each 4-byte word of an input row
// pair with its own cp.async (zero-filled outside the image: the padding;
// with pad = 2 the words are only 4-byte aligned), 8 blocks x 16 bytes per
// warp instruction, and the MMA warps issue the next tile's copy one
// instruction per k step, between their wgmmas, into the second buffer.
// Everything else is the staged path of the kernel above: a persistent CTA
// of four MMA warpgroups (m64n{64,96}k16 wgmma, B resident) and a store
// warpgroup, the same tiles of MT consecutive pixels.
//
// Measured (H200, batch 256, 224 x 224, pad 2, K = 96, bf16), ms: 0.235
// against the gather kernel's 0.237 in the same run (fp16 0.222 / 0.235;
// K = 64 0.184 / 0.201; pad 0 0.216 / 0.232; batch 128 0.124 / 0.135; batch
// 24-32 equal within noise). Less than the gather removed, because what
// bounds both is not the gather alone. Switching parts off in the same
// kernel: without the global stores 0.187, without the copy 0.219, without
// either 0.145 (clock counters in the warps showed the MMA loop at ~75% of
// the tensor pipe's rate when it runs alone). The copy (10.9K 4-byte
// cp.async per tile) and the store warps' shared loads and stores share the
// LSU/MIO pipe with the ldmatrix / stmatrix of the MMA warps; with both on,
// the MMA loop and the staging each take 1.2-4x longer per tile.
constexpr int kS2G = 6;  // 16-byte groups of 8 (c, a, b) values per block

// The copy of one tile's block rows into the patch, one warp instruction (8
// blocks of one 8-channel plane row) per step, so that the MMA warps can
// spread it over the k steps of the tile before (issued all at once before
// the MMAs, it measured 0.249 against the gather kernel's 0.242 ms; spread,
// 0.243 against 0.245). Warp w takes the plane rows u = w, w + NWARPS, ...
// (u = block row sr x 6 + plane g). The branches of a step make ptxas wait
// for each wgmma before the next (its C7513 note); a branch-free step that
// computes the next plane row's addresses every time avoids that but ran
// slower, 0.253 against 0.235 ms (H200, bf16, batch 256): the MMA warps'
// instruction issue, not wgmma overlap, is the limit (four warpgroups keep
// the tensor cores fed while each waits for its own wgmma).
//
// Channels_last (kS2DL): a block row is 4 pixels x 3 channels = 12
// contiguous values, so with k = (a, b, c) inside a block, planes 3G .. 3G +
// 2 are the block's input rows 2G and 2G + 1 in memory order, and every
// 4-byte word is still one aligned cp.async: the same copy and MMA loop,
// other source addresses. A word never straddles the image edge, because the
// edge falls on an even pixel of the block (pad and W even), i.e. a multiple
// of 6 values. Measured (H200, batch 256, bf16): 0.226 ms against 0.260 for
// the gather kernel it replaces and 0.240 for NCHW in the same run.
template <typename T, int NWARPS, int MODE>
struct S2dCopy {
  static constexpr int kPix = MODE == kS2DL ? kC : 1;  // elements per pixel step along a row
  const T* x;    // the image
  const T* src;  // input row of plane row u (any valid address when !hok)
  uint32_t dst0, dst;
  int units, u, b, p_lo, colb, pxo16;
  bool hok;

  __device__ __forceinline__ void start(const Params& p, const TileGeom& tg, uint32_t patch, int warp, int lane) {
    x = static_cast<const T*>(p.x) + (size_t)tg.n * kC * p.H * p.W;
    units = ((tg.mend - 1) / p.Q - tg.p_lo + 3) * kS2G;
    p_lo = tg.p_lo;
    dst0 = patch;
    // lane: word lane & 3 of block lane >> 2 (of each 8); NCHW: words 0, 1
    // are input row a0, 2, 3 row a0 + 1
    if constexpr (MODE == kS2D) colb = 4 * (lane >> 2) + 2 * (lane & 1) - p.pad;
    pxo16 = (lane >> 2) * 16 + (lane & 3) * 4;
    u = warp;
    b = 0;
    if (u < units) unit(p, lane);
  }
  __device__ __forceinline__ void unit(const Params& p, int lane) {
    const int sr = u / kS2G, g = u - sr * kS2G;
    if constexpr (MODE == kS2D) {
      const int h = 4 * (p_lo + sr) + 2 * (g & 1) + ((lane >> 1) & 1) - p.pad;
      hok = h >= 0 && h < p.H;
      src = x + ((size_t)(g >> 1) * p.H + (hok ? h : 0)) * p.W;
    } else {
      // value t of the row pair 2G, 2G + 1 (24 values): row t / 12, value e of that row
      const int G = g / 3, t = 8 * (g - 3 * G) + 2 * (lane & 3);
      const int a1 = t >= 12 ? 1 : 0, e = t - 12 * a1;
      const int h = 4 * (p_lo + sr) + 2 * G + a1 - p.pad;
      hok = h >= 0 && h < p.H;
      colb = 4 * (lane >> 2) + e / 3 - p.pad;  // the pixel of the word's first value
      src = x + (size_t)(hok ? h : 0) * p.W * kC + e % 3;
    }
    dst = dst0 + g * p.gs + sr * p.PW * 16 + pxo16;
  }
  // Issues one copy instruction; false once this warp's share is done.
  __device__ __forceinline__ bool step(const Params& p, int lane) {
    if (u >= units) return false;
    if (8 * b + (lane >> 2) < p.PW) {
      const int col = 32 * b + colb;  // even (NCHW), and W is even: both elements in or both out
      const bool ok = hok && col >= 0 && col < p.W;
      cp_async4n(dst + 128 * b, ok ? src + kPix * col : x, ok ? 4 : 0);
    }
    if (++b == (p.PW + 7) >> 3) {
      b = 0;
      u += NWARPS;
      if (u < units) unit(p, lane);
    }
    return true;
  }
};

template <typename T, int MODE, int NT8>
__global__ void __launch_bounds__(kGThreads + kStoreThreads, 1) conv11s4_fwd_s2d_kernel(const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int KS = ksteps<MODE>();
  constexpr int WB = wfrag_bytes<MODE, NT8, true>();
  constexpr int NACC = NT8 * 4;
  constexpr int NTHR = kGThreads, NALL = NTHR + kStoreThreads;
  constexpr int NWARPS = NTHR / 32, SW = kStoreThreads / 32;
  constexpr int NB = 4, AHEAD = 2;  // A register buffers, as in the kernel above
  extern __shared__ __align__(16) unsigned char smem[];
  float* sbias = reinterpret_cast<float*>(smem + WB);
  const uint32_t patch0 = smem_u32(smem + WB + kMaxK * 4);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = warp >> 2, wq = warp & 3;
  const int nch = min(NT8 * 8, p.K);

  for (int i = tid; i < WB / 16; i += NALL) cp_async16(reinterpret_cast<uint4*>(smem) + i, p.wfrag + i);
  for (int k = tid; k < kMaxK; k += NALL)
    sbias[k] = (p.bias != nullptr && k < p.K) ? to_f(static_cast<const T*>(p.bias)[k]) : 0.f;
  cp_async_wait_all();
  fence_proxy_async();  // the weights arrived by cp.async; wgmma reads them
  __syncthreads();
  if (warp >= NWARPS) {
    store_warps<NALL>(p, smem, 0, nch, warp - NWARPS, SW, lane);
    return;
  }
  const uint64_t desc0 = gmma_desc(smem_u32(smem));
  const int ws16 = p.PW * 16;

  int tile = blockIdx.x;
  int buf = 0;
  S2dCopy<T, NWARPS, MODE> copy;
  if (tile < p.total_tiles) {
    copy.start(p, tile_geom(p, tile), patch0, warp, lane);
    while (copy.step(p, lane)) {
    }
  }
  cp_async_commit();

  for (; tile < p.total_tiles; tile += gridDim.x) {
    cp_async_wait_all();
    asm volatile("bar.sync 3, %0;\n" ::"n"(NTHR) : "memory");  // this tile's patch is in place
    const TileGeom tg = tile_geom(p, tile);
    const int next = tile + gridDim.x;
    // the next tile's copy, spread over this tile's k steps
    copy.units = 0;
    if (next < p.total_tiles) copy.start(p, tile_geom(p, next), patch0 + (buf ^ 1) * p.CS, warp, lane);

    const int mw = tg.m0 + wg * 64;
    const bool active = (wg * 64 < p.MT) && (mw < tg.mend);  // warpgroup-uniform
    float acc[NACC];
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = 0.f;

    if (active) {
      // this lane's ldmatrix row: pixel (row lane & 7 of matrix mi) and the
      // matrix's k half (plane 2c or 2c + 1); clamped into the loaded rows
      const int mi = lane >> 3;
      const int o = min(mw + wq * 16 + (lane & 7) + 8 * (mi & 1), tg.mend - 1);
      const int op = o / p.Q, oq = o - op * p.Q;
      const uint32_t arow = patch0 + buf * p.CS + (mi >> 1) * p.gs + ((op - tg.p_lo) * p.PW + oq) * 16;
      uint32_t A[NB][4];
      // k16 step s = (tap (i, j) = s / 3, channel c = s % 3)
      auto fill = [&](int s, int u) {
        const int tap = s / 3, c = s % 3;
        ldsm_x4(arow + (tap / 3) * ws16 + (tap % 3) * 16 + c * 2 * p.gs, A[u]);
      };
#pragma unroll
      for (int u = 0; u < AHEAD; ++u) fill(u, u);
#pragma unroll
      for (int s = 0; s < KS; ++s) {
        gmma_fence();
        gmma_rs<T, NT8>(acc, A[s % NB], desc0 + (uint64_t)((s * NT8 * 256) >> 4));
        gmma_commit();
        gmma_wait<NB - AHEAD>();
        if (s + AHEAD < KS) fill(s + AHEAD, (s + AHEAD) % NB);
        copy.step(p, lane);
      }
      gmma_wait<0>();
#pragma unroll
      for (int i = 0; i < NACC; ++i) pin(acc[i]);
    }
    while (copy.step(p, lane)) {
    }
    cp_async_commit();

    asm volatile("bar.sync 2, %0;\n" ::"n"(NALL) : "memory");  // the store warps are done with the rows
    const int px = wg * 64 + wq * 16;
    if (active && px < p.MT) stage_rows<T, NT8>(acc, sbias, smem + p.stage, p.ls, px, lane);
    asm volatile("bar.arrive 1, %0;\n" ::"n"(NALL) : "memory");  // rows staged
    buf ^= 1;
  }
#endif
}

// The kernels' operands: input, prepared weights, bias (or null), output.
inline void bind_operands(Params& p, const at::Tensor& input, const at::Tensor& wbuf,
                          const std::optional<at::Tensor>& bias, const at::Tensor& output) {
  p.x = input.data_ptr();
  p.wfrag = static_cast<const uint4*>(wbuf.data_ptr());
  p.bias = bias.has_value() ? bias->data_ptr() : nullptr;
  p.y = output.data_ptr();
}

// kS2D / kS2DL (NCHW / channels_last input): K <= 96 (NT8 = 8 or 12), one
// CTA per SM, 256-pixel tiles. Returns false where the patch does not fit
// beside the weights and the staging rows (at K = 96 and padding 2 from
// about 250 to 290 pixels of width on); the gather kernel takes those.
template <typename T, int MODE, int NT8>
bool launch_s2d(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias, int pad,
                const at::Tensor& output) {
  const int N = input.size(0), H = input.size(2), W = input.size(3), K = weight.size(0);
  const int P = (H + 2 * pad - kR) / 4 + 1, Q = (W + 2 * pad - kR) / 4 + 1;
  Params p{};
  p.N = N; p.H = H; p.W = W; p.K = K; p.P = P; p.Q = Q; p.pad = pad;
  p.PQ = P * Q;
  p.PW = Q + 2;  // blocks per patch row: outputs q read blocks q .. q + 2
  const auto* prop = at::cuda::getCurrentDeviceProperties();
  constexpr int WB = wfrag_bytes<MODE, NT8, true>();
  p.MT = 256;
  const int srows = std::min(P, (Q - 1 + p.MT - 1) / Q + 1) + 2;
  const int64_t gs = (int64_t)srows * p.PW * 16;
  p.ls = p.MT + 8;  // as in launch: an odd number of 16-byte units
  const int64_t need = WB + kMaxK * 4 + 2 * kS2G * gs + (int64_t)NT8 * 8 * p.ls * sizeof(T);
  if (need > (int64_t)prop->sharedMemPerBlockOptin) return false;  // the gather kernel takes wide images
  p.gs = (int)gs;
  p.CS = kS2G * p.gs;
  p.stage = WB + kMaxK * 4 + 2 * p.CS;
  p.tiles_per_img = (p.PQ + p.MT - 1) / p.MT;
  const int64_t total = (int64_t)N * p.tiles_per_img;
  if (total > INT32_MAX) return false;
  p.total_tiles = (int)total;

  auto stream = at::cuda::getCurrentCUDAStream();
  auto wbuf = at::empty({(int64_t)WB}, input.options().dtype(at::kByte));
  prep_weights_gmma_kernel<T, MODE, NT8><<<(WB / 16 + 255) / 256, 256, 0, stream>>>(
      static_cast<const T*>(weight.data_ptr()), K, static_cast<uint4*>(wbuf.data_ptr()));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  bind_operands(p, input, wbuf, bias, output);
  auto kern = conv11s4_fwd_s2d_kernel<T, MODE, NT8>;
  allow_max_dynamic_smem(kern);
  const size_t smem = (size_t)p.stage + (size_t)NT8 * 8 * p.ls * sizeof(T);
  kern<<<(unsigned)std::min<int64_t>(total, prop->multiProcessorCount), kGThreads + kStoreThreads, smem, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

// NT8 * 8 channels per CTA; more channels than that are split into groups,
// each with its own CTAs (grid y) and resident weights.
template <typename T, int MODE, int NT8, int NBUF, bool GMMA, int CPS = 1, bool STAGED = false>
bool launch(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
            int pad, bool nhwc, const at::Tensor& output) {
  const int N = input.size(0), H = input.size(2), W = input.size(3), K = weight.size(0);
  const int groups = (K + NT8 * 8 - 1) / (NT8 * 8);
  const int P = (H + 2 * pad - kR) / 4 + 1, Q = (W + 2 * pad - kR) / 4 + 1;
  const int align = 16 / (int)sizeof(T);
  Params p{};
  p.N = N; p.H = H; p.W = W; p.K = K; p.P = P; p.Q = Q; p.pad = pad;
  p.PQ = P * Q;
  p.PADL = (pad + align - 1) / align * align;
  p.shift = p.PADL - pad;
  // +1 column: kHalfP reads the zero-weight s = 11 partner of s = 10
  p.PW = (4 * (Q - 1) + kR + 1 + p.shift + 7) / 8 * 8;
  p.wcopy = std::min(W, p.PW - p.PADL);
  p.nhwc = nhwc ? 1 : 0;
  const int el = nhwc ? kC : 1;  // elements per pixel in a copied row
  p.vec = (((W * el) % align) == 0 && ((p.wcopy * el) % align) == 0 &&
           (reinterpret_cast<uintptr_t>(input.data_ptr()) % 16) == 0) ? 1 : 0;

  const auto* prop = at::cuda::getCurrentDeviceProperties();
  const int num_sms = prop->multiProcessorCount;
  // CPS CTAs share an SM's shared memory, each less the per-block reserve
  const int max_smem = CPS == 1 ? (int)prop->sharedMemPerBlockOptin
                                : (int)(prop->sharedMemPerMultiprocessor / CPS - prop->reservedSharedMemPerBlock);
  constexpr int WB = wfrag_bytes<MODE, NT8, GMMA>();
  const size_t fixed = WB + kKtab * 4 + kMaxK * 4;
  size_t smem = 0;
  int MT = 0;
  for (int mt = (GMMA ? 256 / CPS : 256); mt >= 32; mt /= 2) {
    const int rows = std::min(P, (Q - 1 + mt - 1) / Q + 1);
    const int ph = 4 * (rows - 1) + kR;
    const int cs = ph * p.PW;
    const size_t patch_bytes = (size_t)NBUF * kC * cs * sizeof(T);
    // staged rows of MT pixels, + 8: a stride of an odd number of 16-byte
    // units keeps stmatrix and the 16-byte read-back free of bank conflicts
    const int ls = mt + 8;
    // 3xFP16: two floats per warp for the patch's largest magnitude
    const size_t need = fixed + patch_bytes + (STAGED ? (size_t)NT8 * 8 * ls * sizeof(T) : 0) +
                        (MODE == kH3 ? 2 * kGThreads / 32 * 4 : 0);
    if (need <= (size_t)max_smem) {
      MT = mt; smem = need; p.CS = cs;
      p.ls = ls;
      p.stage = (int)(fixed + patch_bytes);
      p.cstr = nhwc ? 1 : cs;
      p.rstr = nhwc ? kC * p.PW : p.PW;
      p.sstr = nhwc ? kC : 1;
      break;
    }
  }
  if (MT == 0) return false;
  p.MT = MT;
  p.tiles_per_img = (p.PQ + MT - 1) / MT;
  const int64_t total = (int64_t)N * p.tiles_per_img;
  if (total > INT32_MAX) return false;
  p.total_tiles = (int)total;

  auto stream = at::cuda::getCurrentCUDAStream();
  // 3xFP16 appends B's scale exponent (one channel group only)
  auto wbuf = at::empty({(int64_t)WB * groups + (MODE == kH3 ? 16 : 0)}, input.options().dtype(at::kByte));
  {
    // split B: a thread writes big and small
    const int nthreads = WB / 16 / (GMMA && split_b<MODE>() ? 2 : 1);
    if constexpr (GMMA) {
      int* wexp = nullptr;
      if constexpr (MODE == kH3) {
        wexp = reinterpret_cast<int*>(static_cast<unsigned char*>(wbuf.data_ptr()) + WB);
        weight_exp_kernel<1024><<<1, 1024, 0, stream>>>(weight.data_ptr<float>(), (int)weight.numel(), wexp);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      }
      prep_weights_gmma_kernel<T, MODE, NT8><<<dim3((nthreads + 255) / 256, groups), 256, 0, stream>>>(
          static_cast<const T*>(weight.data_ptr()), K, static_cast<uint4*>(wbuf.data_ptr()), wexp);
    } else {
      prep_weights_kernel<T, MODE, NT8><<<dim3((nthreads + 255) / 256, groups), 256, 0, stream>>>(
          static_cast<const T*>(weight.data_ptr()), K, static_cast<uint32_t*>(wbuf.data_ptr()));
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  bind_operands(p, input, wbuf, bias, output);

  auto kern = [] {
    if constexpr (GMMA) return conv11s4_fwd_gmma_kernel<T, MODE, NT8, NBUF, CPS, STAGED>;
    else return conv11s4_fwd_tc_kernel<T, MODE, NT8, NBUF>;
  }();
  allow_max_dynamic_smem(kern);
  const dim3 grid((unsigned)std::min<int64_t>(total, std::max(1, num_sms * CPS / groups)), groups);
  kern<<<grid, GMMA ? kGThreads / CPS + (STAGED ? kStoreThreads : 0) : kThreads, smem, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

template <typename T, int MODE, int NBUF, bool GMMA, int CPS = 1>
bool dispatch_k(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                int pad, bool nhwc, const at::Tensor& output) {
  const int K = weight.size(0);
  if (K <= 64) return launch<T, MODE, 8, NBUF, GMMA, CPS>(input, weight, bias, pad, nhwc, output);
  if (K <= 96) return launch<T, MODE, 12, NBUF, GMMA, CPS>(input, weight, bias, pad, nhwc, output);
  if constexpr (MODE == kHalf || MODE == kHalfP)
    return launch<T, MODE, 16, NBUF, GMMA, CPS>(input, weight, bias, pad, nhwc, output);
  return false;  // fp32 weights for K > 96 leave too little shared memory for a patch
}

// The fp32-accurate modes (3xTF32 or 3xFP16, bf16x3).
//
// On wgmma (sm_90a), 3xTF32 becomes 3xFP16 (kH3) where the batch fills the
// GPU and K <= 96: the same three products, but fp16 operands run the tensor
// cores at twice the TF32 rate, and B's big and small parts of all 96
// channels take the bytes of fp32 B, so one CTA holds them beside a patch.
// fp16 has TF32's 11 significant bits, so hi + lo keeps the same 22 bits of
// each operand; its narrow exponent range is what the scaling handles: each
// tile's patch is scaled by a power of two from its largest finite |x| and
// then split in place (split_patch_fp16), the weights by one from theirs
// (weight_exp_kernel), and the outputs scaled back. Values more than 2^16
// below their tile's (or the weights') largest keep an absolute error of
// 2^-39 of it instead of their own 22 bits; no output of the tests and
// value ranges tried came close to the 1e-5 bound. Measured (H200, batch 256,
// 224 x 224, alternating builds): K = 96 0.479-0.487 ms against 3xTF32's
// 0.884, K = 64 0.398-0.401 against 0.769 (mma.sync), channels_last 0.479
// against 0.882, batch 128 0.26 against 0.46, batch 32 0.091 against 0.135;
// rel L2 0.9e-6 against 3xTF32's 1.8e-6 on the same data. Splitting the
// patch costs about 0.05 ms of the 0.48 (a build without it ran 0.434);
// splitting channels 1 and 2 during the MMAs of channel 0, where they are
// not yet read, measured no faster (0.486): the MMA loop is bound by issue
// and latency, so the split's instructions cost the same there. For the same
// reason one scaled fp16 product in place of TF32 ran slower at K = 96 (0.485
// vs 0.394 ms; at K = 64 0.333 vs 0.346), so TF32 keeps its own kernel.
//
// 3xTF32 on wgmma (sm_90a), where the patch is too wide for kH3: the big
// and small parts of B, both resident, take twice the fp32 bytes, so 48
// channels fit beside a patch and K = 96 runs as two groups of CTAs, each
// repeating the patch copy and gather.
// Measured on an H200 against the mma.sync kernel: 0.862 vs 0.993 ms at
// batch 256, 0.038 vs 0.042 at batch 4, even at batch 2; for K = 64 (two
// groups of 32 against one CTA of 64) slower, 0.778 vs 0.736 ms.
//
// Small batches: one 256-pixel tile of all channels costs ~40 us of 3xTF32
// on one SM, and batch 1 at 224x224 has only 12 tiles for 100+ SMs.
// Splitting the channels into groups of 16, 32 or 48, each its own CTA,
// spreads a tile over more SMs; every group repeats the patch copy and A
// gather, so the split is taken only where it shortens the busiest SM's
// queue. Also the route for fp32 K > 96, whose weights do not fit beside a
// patch in one CTA.
// tiles: the batch's 256-pixel tiles (see conv11s4_forward_fast).
bool dispatch_h3(bool gmma, const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                 int pad, bool nhwc, const at::Tensor& output, int64_t tiles, int num_sms) {
  const int64_t K = weight.size(0);
  if (!gmma || K > 96 || tiles * 4 < num_sms) return false;
  return K <= 64 ? launch<float, kH3, 8, 1, true, 1>(input, weight, bias, pad, nhwc, output)
                 : launch<float, kH3, 12, 1, true, 1>(input, weight, bias, pad, nhwc, output);
}

template <int MODE>
bool dispatch_fp32(bool gmma, const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                   int pad, bool nhwc, const at::Tensor& output, int64_t tiles, int num_sms) {
  const int64_t K = weight.size(0);
  if constexpr (MODE == kX3) {
    if (dispatch_h3(gmma, input, weight, bias, pad, nhwc, output, tiles, num_sms)) return true;
    if (gmma && K > 64 && K <= 96 && tiles * 4 >= num_sms)
      return launch<float, kX3, 6, 1, true, 1>(input, weight, bias, pad, nhwc, output);
  }
  // cost of one group's tile relative to a whole tile: its share of the
  // channels plus the repeated patch copy and gather, estimated at 0.15 of a tile
  auto cost = [&](int c) {
    const int64_t groups = (K + 8 * c - 1) / (8 * c);
    const int64_t rounds = (tiles * groups + num_sms - 1) / num_sms;
    return (double)rounds * ((double)std::min<int64_t>(8 * c, K) / (double)K + (groups > 1 ? 0.15 : 0.0));
  };
  int best = 0;  // 0: no split; a split must win by 10%, the estimate is rough
  double best_cost = K <= 96 ? 0.9 * cost(K <= 64 ? 8 : 12) : 1e30;
  for (int c : {6, 4, 2}) {
    const double cc = 8 * c < K ? cost(c) : 1e30;
    if (cc < best_cost) { best = c; best_cost = cc; }
  }
  if (best == 0 && dispatch_k<float, MODE, 1, false>(input, weight, bias, pad, nhwc, output)) return true;
  if (best == 0) best = 6;  // the whole weight operand did not fit
  if (best == 2) return launch<float, MODE, 2, 1, false>(input, weight, bias, pad, nhwc, output);
  if (best == 4) return launch<float, MODE, 4, 1, false>(input, weight, bias, pad, nhwc, output);
  return launch<float, MODE, 6, 1, false>(input, weight, bias, pad, nhwc, output);
}

// 16-bit types on wgmma with K <= 96, a 16-byte aligned output and two or
// more 256-pixel tiles per SM run one CTA of four MMA warpgroups and a store
// warpgroup per SM: the space-to-depth kernel for inputs of even padding
// and width (NCHW or channels_last), else the gather kernel with the STAGED
// epilogue (see "Hopper path"). Gather kernel before and after staging, H200, batch
// 256, K = 96: bf16 0.252 -> 0.228 ms NCHW, 0.266 -> 0.258 channels_last,
// fp16 0.258 -> 0.234; K = 64 0.208 -> 0.186. Otherwise two CTAs of two
// warpgroups per SM, one patch buffer each, instead of one CTA of four with
// two: one CTA's epilogue then overlaps the other's MMAs. Measured on an
// H200 at batch 256, K = 96: bf16 0.274 -> 0.262 ms NCHW, 0.292 -> 0.271
// channels_last; K = 64 0.226 -> 0.212. A patch too wide for half an SM's
// shared memory takes mma.sync.
template <typename T, int MODE, int NBUF>
bool dispatch(bool gmma, const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
              int pad, bool nhwc, const at::Tensor& output, int64_t tiles, int num_sms) {
  constexpr bool kTwo = MODE == kHalf || MODE == kHalfP;
  if constexpr (kTwo) {
    // Staged only where every SM gets two or more 256-pixel tiles: with
    // fewer, two CTAs of 128-pixel tiles spread a small batch over more SMs
    // (small batches were not timed with the staged kernel).
    const int64_t K = weight.size(0);
    if (gmma && K <= 96 && tiles >= 2 * num_sms && reinterpret_cast<uintptr_t>(output.data_ptr()) % 16 == 0) {
      // the space-to-depth copy moves aligned 4-byte words of input values
      if (pad % 2 == 0 && input.size(3) % 2 == 0 && reinterpret_cast<uintptr_t>(input.data_ptr()) % 4 == 0) {
        const bool done = nhwc ? (K <= 64 ? launch_s2d<T, kS2DL, 8>(input, weight, bias, pad, output)
                                          : launch_s2d<T, kS2DL, 12>(input, weight, bias, pad, output))
                               : (K <= 64 ? launch_s2d<T, kS2D, 8>(input, weight, bias, pad, output)
                                          : launch_s2d<T, kS2D, 12>(input, weight, bias, pad, output));
        if (done) return true;
      }
      if (K <= 64 && launch<T, MODE, 8, 2, true, 1, true>(input, weight, bias, pad, nhwc, output)) return true;
      if (K > 64 && launch<T, MODE, 12, 2, true, 1, true>(input, weight, bias, pad, nhwc, output)) return true;
    }
  }
  if (gmma && dispatch_k<T, MODE, kTwo ? 1 : NBUF, true, kTwo ? 2 : 1>(input, weight, bias, pad, nhwc, output))
    return true;
  return dispatch_k<T, MODE, NBUF, false>(input, weight, bias, pad, nhwc, output);
}

}  // namespace

bool conv11s4_forward_fast(const at::Tensor& input, const at::Tensor& weight,
                           const std::optional<at::Tensor>& bias, int64_t padding, Fp32Math math,
                           const at::Tensor& output) {
  if (input.dim() != 4 || weight.dim() != 4) return false;
  if (input.size(1) != kC || weight.size(1) != kC || weight.size(2) != kR || weight.size(3) != kR) return false;
  const int64_t N = input.size(0), H = input.size(2), W = input.size(3), K = weight.size(0);
  if (N < 1 || K < 1 || K > kMaxK || padding < 0 || padding > 64) return false;
  if (H > 16384 || W > 16384) return false;
  if (H + 2 * padding < kR || W + 2 * padding < kR) return false;
  const int64_t P = (H + 2 * padding - kR) / 4 + 1, Q = (W + 2 * padding - kR) / 4 + 1;
  if (P * Q > INT32_MAX / 4) return false;
  bool nhwc;
  if (input.is_contiguous()) nhwc = false;
  else if (input.is_contiguous(at::MemoryFormat::ChannelsLast)) nhwc = true;
  else return false;
  if (!output.is_contiguous()) return false;
  const auto& prop = *at::cuda::getCurrentDeviceProperties();
  if (prop.major < 8) return false;
  c10::cuda::CUDAGuard guard(input.device());
  const int pad = (int)padding;
  const bool gmma = gmma_available(input.get_device());
  // 256-pixel tiles of the batch and SMs: the dispatch heuristics' inputs
  const int64_t tiles = N * ((P * Q + 255) / 256);
  const int sms = prop.multiProcessorCount;
  switch (input.scalar_type()) {
    case at::kFloat:
      if (math == Fp32Math::kAccurate)
        return dispatch_fp32<kX3>(gmma, input, weight, bias, pad, nhwc, output, tiles, sms);
      // "high" allows bf16x3; 3xFP16, where it runs, is faster and more accurate
      if (math == Fp32Math::kBf16x3)
        return dispatch_h3(gmma, input, weight, bias, pad, nhwc, output, tiles, sms) ||
               dispatch_fp32<kB3>(gmma, input, weight, bias, pad, nhwc, output, tiles, sms);
      if (gmma && conv11s4_forward_planes(input, weight, bias, pad, nhwc, output)) return true;
      return dispatch<float, kTF, 1>(gmma, input, weight, bias, pad, nhwc, output, tiles, sms);
    case at::kBFloat16:
      if (gmma && conv11s4_forward_planes(input, weight, bias, pad, nhwc, output)) return true;
      if (!nhwc && pad % 2 == 0)
        return dispatch<__nv_bfloat16, kHalfP, 2>(gmma, input, weight, bias, pad, nhwc, output, tiles, sms);
      return dispatch<__nv_bfloat16, kHalf, 2>(gmma, input, weight, bias, pad, nhwc, output, tiles, sms);
    case at::kHalf:
      if (gmma && conv11s4_forward_planes(input, weight, bias, pad, nhwc, output)) return true;
      if (!nhwc && pad % 2 == 0)
        return dispatch<__half, kHalfP, 2>(gmma, input, weight, bias, pad, nhwc, output, tiles, sms);
      return dispatch<__half, kHalf, 2>(gmma, input, weight, bias, pad, nhwc, output, tiles, sms);
    default:
      return false;
  }
}

}  // namespace alexop::cuda
