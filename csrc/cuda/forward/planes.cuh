#pragma once
// The forward on wgmma with both operands in shared memory (sm_90a): TF32
// (the float32 forward under torch.set_float32_matmul_precision("medium"))
// and bf16 / fp16 (even padding and width), NCHW or channels_last, for
// images whose outputs are 48 to 55 pixels wide (AlexNet's 224 x 224 with
// padding 2, 227 x 227 without), K <= 96 a CTA (more in filter groups, a
// grid row each: filter_group), batches of one tile per SM or more.
//
// Why kernels of their own: the gather kernels form every A fragment in
// registers (table loads, patch loads, cvt or ldmatrix per k step), which
// kept the tensor pipe about a third busy. Here the tensor cores read A
// straight from shared memory by descriptor: a wgmma core matrix row is 16
// bytes of k for one output pixel, and the stride of 4 columns puts the next
// output pixel's row exactly 16 bytes on, when the input is laid out as
// below. The MMA loop is then one wgmma per k step.
//
// Layout. The input is kept as phase planes of 16-byte aligned rows of 57 x
// 16 bytes, whose 16-byte unit u holds padded columns 4u .. 4u + 3:
//  - TF32 (4 bytes a value): plane (c, a), a = 0..3, holds the padded rows
//    4i + a of channel c; a unit is 4 columns of one row;
//  - 16-bit: plane (b, c), b = 0, 1, holds the rows 4i + 2b and 4i + 2b + 1;
//    a unit is the 4 columns of the first row, then the same of the second.
//  - channels_last (16-bit; TF32 with 8-byte copies): the planes hold unit
//    types of a row's 12 values (3 channels x 4 columns; 4 channels: 16
//    values, two whole units) in place of channels, so that every copy is a
//    piece of contiguous input, as in NCHW; the prep kernel maps the
//    weights' taps to match (Layout). TF32 copies a row phase's three unit
//    types together (load_unit_triples).
// Output pixel (p, q) is flat pixel f = 57p + q (q = 55, 56 are computed and
// dropped). Its A row for a k group (a unit's worth of (c, r, s)) lies in
// plane row p + R, unit q + j: the group's origin plus 16 f bytes. A k step
// (two groups) is one descriptor: start at the first group, LBO = the
// distance to the second, SBO = 128 (8 consecutive pixels). TF32: 99 groups
// (s = 11 zero-weighted) and an all-zero one, 50 k8 steps, K = 400. 16-bit:
// the 3 x 3 blocks of 4 x 4 pixels of the space-to-depth view as 54 groups
// (r, s = 11 zero-weighted), 27 k16 steps, K = 432. The 16-bit kernels are
// also built for 4 channel slots (CH = 4: RGBA, RGB-D, NCHW or
// channels_last): 8 planes, 72 groups, 36 k16 steps, K = 576, where the
// chunk kernel's A gather was the alternative.
//
// Tiles of 192 consecutive flat pixels of one image, three consumer
// warpgroups of m64 x all channels; their rows need 7 rows of each plane
// (6.4 KB a plane). The weights stay resident (in wgmma's K-major layout:
// 154 KB TF32, 83 KB 16-bit at K = 96 (111 KB for 4 channels), arranged by
// a prep kernel). Planes are refilled plane by plane (16-bit: two tiles'
// sets, alternating, where they fit beside the weights: Smem::kBufs): a
// consumer warpgroup releases plane j once its wgmmas that read it have
// completed, and a producer warpgroup copies the plane for the CTA's next
// tile (zero-filled outside the image: the padding) and marks it full when
// the copies land; mbarriers both ways. So the next tile's first planes land
// while this tile's last ones are in use. TF32 input values are not
// rounded: the tensor cores use their TF32 part (truncation, within the
// TF32 bound), see load_planes. The producer's instructions a piece set the
// pace, hence the care taken over each piece's instructions.
//
// Outputs: TF32 consumers store their accumulators straight to NCHW after
// each tile. 16-bit ones stage them in shared memory (stmatrix) for a store
// warpgroup, which writes them while the next tile's wgmmas run: stored by
// the consumers, all CTAs' stores came in bursts beside idle tensor cores.
// The bulk tensor copy cannot do the copies: its innermost box start must
// be 16-byte aligned.
//
// Like the gather kernels, zero-weighted k slots read real input values: an
// Inf input can make NaN of outputs whose window excludes it, and the
// consumers recompute NaN outputs exactly (common/exact.cuh).

#include "../common/constants.h"
#include "../common/exact.cuh"
#include "../common/launch.h"
#include "../common/ptx.cuh"
#include "../common/wgmma.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "launch.h"
#include "plan.h"

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace alexop::cuda::forward::planes {

constexpr int kQf = 57;                         // flat pixels per output row
constexpr int kPitch = kQf * 16;                // bytes per plane row
constexpr int kRows = 7;                        // plane rows a tile reads
constexpr int kPlaneBytes = kRows * kPitch;
constexpr int kConsumers = 3;                   // MMA warpgroups
constexpr int kMT = 64 * kConsumers;            // flat pixels per tile
constexpr int kLs = kMT + 8;  // staged row: one channel's 192 pixels; 16 bytes more keep stmatrix conflict-free
static_assert(kMT + kQf - 1 <= (kRows - 2) * kQf, "a tile's pixels span rows 0 .. kRows - 3 of the window");

// The planes and k groups of each element type. A group is one 16-byte row
// of a core matrix: kElems k values of one output pixel; group g lies in
// plane(g) at plane row (output row +) row(g), byte col(g) (+ 16 per
// pixel), and its element e has the weight tap (tap_c(g), tap_r(g, e),
// tap_s(g, e)), zero where r or s reaches 11. Groups are numbered in order
// of their offsets, so a k step's LBO is positive.
//
// 16-bit, CH channel slots: plane j = CH b + c holds the padded rows 4i + 2b
// and 4i + 2b + 1 of channel c, interleaved by 4-column blocks (16 bytes: 4
// values of the first row, then the same 4 columns of the second). Group
// (b, c, R, j): block j of the pixel's 3 x 3 blocks, rows 4R + 2b and + 1;
// 18 CH groups, 9 CH k16 steps: K = 432 for 3 slots, 576 for 4.
//
// 16-bit channels_last: the same planes and groups, but a row's 4 columns
// are 12 values (value v: column v / 3, channel v % 3), which the copies
// take as six 4-byte pieces, and plane j = 3b + f holds unit type f of the
// rows 4i + 2b and 4i + 2b + 1: f = 0 the first row's values 0-7, f = 1
// its values 8-11 and the second row's 0-3, f = 2 the second row's 4-11.
// Of 4 channels a row's 4 columns are 32 bytes, two whole units, which the
// copies take as one 16-byte piece each: plane j = 4b + f holds the
// columns 2 (f % 2) and + 1 (value e: column e / 4, channel e % 4) of row
// 4i + 2b + f / 2.
template <typename T, int CH = kC>
struct Layout {
  static constexpr int kPlanes = 2 * CH;
  static constexpr int kGroups = 18 * CH;
  static constexpr int kSteps = 9 * CH;
  static constexpr int kElems = 8;
  static constexpr int kBufs = 2;  // B is half the size of TF32's: room for a second tile's planes (Smem)
  static constexpr bool kStaged = true;  // outputs staged in shared memory for a store warpgroup
  static constexpr int kSlotBytes = kPlaneBytes;  // a plane's slot
  __host__ __device__ static constexpr int plane(int g) { return g / 9; }
  __host__ __device__ static constexpr int row(int g) { return g % 9 / 3; }
  __host__ __device__ static constexpr int col(int g) { return 16 * (g % 3); }
  __host__ __device__ static constexpr int tap_c(int g) { return plane(g) % CH; }
  __host__ __device__ static constexpr int tap_r(int g, int e) { return 4 * row(g) + 2 * (plane(g) / CH) + e / 4; }
  __host__ __device__ static constexpr int tap_s(int g, int e) { return 4 * (g % 3) + e % 4; }
  // plane j: channel, first padded row mod 4
  __host__ __device__ static constexpr int plane_c(int j) { return j % CH; }
  __host__ __device__ static constexpr int plane_a(int j) { return 2 * (j / CH); }
  // channels_last: element e of unit type f: its row of the pair, its value;
  // the tap of group g's element e
  __host__ __device__ static constexpr int nhwc_row(int f, int e) { return f == 0 ? 0 : f == 2 ? 1 : e / 4; }
  __host__ __device__ static constexpr int nhwc_val(int f, int e) { return f == 0 ? e : f == 2 ? 4 + e : (e + 8) % 12; }
  __host__ __device__ static constexpr void nhwc_tap(int g, int e, int& c, int& r, int& s) {
    static_assert(CH == kC || CH == 4, "channels_last unit types: 3 or 4 channels");
    const int f = plane(g) % CH;
    if constexpr (CH == 4) {
      c = e % 4;
      r = 4 * row(g) + 2 * (plane(g) / CH) + f / 2;
      s = 4 * (g % 3) + 2 * (f % 2) + e / 4;
    } else {
      const int v = nhwc_val(f, e);
      c = v % kC;
      r = 4 * row(g) + 2 * (plane(g) / kC) + nhwc_row(f, e);
      s = 4 * (g % 3) + v / kC;
    }
  }
};

// TF32: plane j = 3a + c holds the padded rows 4i + a of channel c. Groups
// in order of a, then c: planes a = 0, 1, 2 with rows R = 0..2 (groups 0
// .. 80, 9 a plane) and a = 3 with R = 0, 1 (r = 4R + a <= 10; groups 81 ..
// 98, 6 a plane), three column groups s0 = 0, 4, 8 each. 99 groups and one
// all-zero group (16 bytes past the last one: real values, zero weights):
// 50 k8 steps, K = 400. The three channels of a row phase a are consecutive
// planes, which channels_last copies together (load_unit_triples).
template <>
struct Layout<float, kC> {
  static constexpr int kPlanes = 4 * kC;
  static constexpr int kGroups = 99;
  static constexpr int kSteps = 50;
  static constexpr int kElems = 4;
  static constexpr int kBufs = 1;  // 154 KB of weights leave room for one
  static constexpr bool kStaged = false;
  // 64 bytes past the plane (6448 = 48 mod 128 bytes): a half-warp's
  // 8-byte channels_last copies into a row phase's three planes hit each
  // bank once (with 6384 twice); 768 bytes of the 1.6 KB left
  static constexpr int kSlotBytes = kPlaneBytes + 64;
  // groups of a plane, group g's index among them
  __host__ __device__ static constexpr int per(int g) { return g < 81 ? 9 : 6; }
  __host__ __device__ static constexpr int w(int g) { return (g < 81 ? g : g - 81) % per(g); }
  __host__ __device__ static constexpr int plane(int g) { return g < 81 ? g / 9 : 9 + (g - 81) / 6; }
  __host__ __device__ static constexpr int row(int g) { return w(g) / 3; }
  __host__ __device__ static constexpr int col(int g) { return 16 * (w(g) % 3); }
  __host__ __device__ static constexpr int tap_c(int g) { return plane_c(plane(g)); }
  __host__ __device__ static constexpr int tap_r(int g, int) { return 4 * row(g) + plane_a(plane(g)); }
  __host__ __device__ static constexpr int tap_s(int g, int e) { return col(g) / 4 + e; }
  __host__ __device__ static constexpr int plane_c(int j) { return j % kC; }
  __host__ __device__ static constexpr int plane_a(int j) { return j / kC; }
  // channels_last (8-byte copies): plane (a, f) in place of (a, c), its
  // unit the values 4f .. 4f + 3 of the row's 12 (3 channels x 4 columns)
  __host__ __device__ static constexpr void nhwc_tap(int g, int e, int& c, int& r, int& s) {
    const int v = 4 * tap_c(g) + e;
    c = v % kC;
    r = tap_r(g, e);
    s = col(g) / 4 + v / kC;
  }
};

// Every tap (c, r, s) of the 11 x 11 window lies in exactly one k slot, for
// both layouts' tap maps.
template <typename T, bool kNhwc, int CH = kC>
constexpr bool taps_once() {
  using L = Layout<T, CH>;
  int seen[CH * kR * kR] = {};
  for (int g = 0; g < L::kGroups; ++g)
    for (int e = 0; e < L::kElems; ++e) {
      int c = L::tap_c(g), r = L::tap_r(g, e), s = L::tap_s(g, e);
      if constexpr (kNhwc) L::nhwc_tap(g, e, c, r, s);
      if (r < kR && s < kR) ++seen[(c * kR + r) * kR + s];
    }
  for (int n : seen)
    if (n != 1) return false;
  return true;
}
static_assert(taps_once<float, false>() && taps_once<float, true>(), "TF32 k slots");
static_assert(taps_once<__nv_bfloat16, false>() && taps_once<__nv_bfloat16, true>(), "16-bit k slots");
static_assert(taps_once<__nv_bfloat16, false, 4>() && taps_once<__nv_bfloat16, true, 4>(),
              "16-bit k slots of 4 channels");

template <typename T>
constexpr int kThreads = 128 * (kConsumers + 1 + Layout<T>::kStaged);

// Shared memory, in this order: the weights (B), the planes' slots, the
// staged outputs (16-bit), the bias (fp32), the full and empty mbarriers of
// each slot, then those of the staging buffer. kBufs: the layout's sets of
// planes where they fit sm_90's 227 KB beside the rest, else one (4
// channels of 96 filters: the weights take 111 KB).
template <typename T, int NT8, int CH = kC>
struct Smem {
  using L = Layout<T, CH>;
  static constexpr int kB = L::kSteps * 2 * NT8 * 8 * 16;
  static constexpr int kStage = L::kStaged ? staged_bytes(NT8, kMT, 2) : 0;
  static constexpr int bytes(int bufs) {
    return kB + bufs * L::kPlanes * (L::kSlotBytes + 16) + kStage + NT8 * 8 * 4 + 16;
  }
  static constexpr int kBufs = bytes(L::kBufs) <= 227 * 1024 ? L::kBufs : 1;
  static constexpr int kSlots = kBufs * L::kPlanes;
  static constexpr int kA = kSlots * L::kSlotBytes;
  static constexpr int kBias = kB + kA + kStage;
  static constexpr int kBars = kBias + NT8 * 8 * 4;
  static constexpr int kBytes = kBars + 16 * kSlots + 16;
  static_assert(kBytes == bytes(kBufs), "the layout above");
};
static_assert(Smem<float, 12>::kBytes <= 227 * 1024, "the TF32 kernel at 96 channels fits sm_90's 227 KB");
static_assert(Smem<__nv_bfloat16, 12>::kBufs == 2 && Smem<__nv_bfloat16, 8, 4>::kBufs == 2 &&
              Smem<__nv_bfloat16, 12, 4>::kBytes <= 227 * 1024, "16-bit planes: two sets but at 4 x 96");

template <typename T>
struct Params {
  const T* x;
  const uint4* wb;  // prepared weights
  const T* bias;    // may be null
  T* y;
  int64_t sN;  // input element strides: image, channel, row, column
  int sC, sY, sX;
  int H, W, K, P, Q, PQ, pad;
  int C;  // input channels, 1 to CH: the planes of channels past C stay zero, never copied
  int tiles_per_img, total_tiles;
  int vec8;   // float, even padding and width, 8-byte aligned: 8-byte copies
  int units;  // channels_last by unit types: 16-bit always, TF32 with 8-byte copies
  const T* w;  // the weights as given (K, C, 11, 11): the exact recomputation reads them
  int accumulate;  // float: add to y's values (put), as a sliced forward's later slices do
  int ysc, ysm;    // output element strides of a channel and a pixel: NCHW or channels_last
  int ysn;         // and of an image (y may be a filter group's channels of a wider output)
};

// B for NT channels in wgmma's K-major layout: per k step two blocks (its
// groups) of NT rows x 16 bytes; TF32-rounded for float.
template <typename T, int NT, bool kNhwc, int CH>
__global__ void prep_weights_planes_kernel(const T* __restrict__ w, int K, int C, T* __restrict__ out) {
  using L = Layout<T, CH>;
  pdl_launch_dependents();  // the main kernel's prologue and first planes need none of this
  const int i = blockIdx.x * blockDim.x + threadIdx.x;  // ((group, n), e)
  if (i >= L::kSteps * 2 * NT * L::kElems) return;
  const int e = i % L::kElems, n = i / L::kElems % NT, g = i / L::kElems / NT;
  float v = 0.f;
  if (g < L::kGroups && n < K) {
    int c = L::tap_c(g), r = L::tap_r(g, e), s = L::tap_s(g, e);
    if constexpr (kNhwc) L::nhwc_tap(g, e, c, r, s);
    if (r < kR && s < kR && c < C) v = to_f(w[((n * C + c) * kR + r) * kR + s]);
  }
  if constexpr (std::is_same_v<T, float>) {
    out[i] = __uint_as_float(to_tf32(v));
  } else {
    out[i] = from_f<T>(v);
  }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// byte offset of group g's origin in a tile's planes (past the last group:
// the zero group, 16 bytes on)
template <typename L>
__host__ __device__ constexpr int group_off(int g) {
  const int h = g < L::kGroups ? g : L::kGroups - 1;
  return L::plane(h) * L::kSlotBytes + L::row(h) * kPitch + L::col(h) + (g < L::kGroups ? 0 : 16);
}
// the plane whose arrival a k step waits for (its second group's)
template <typename L>
__host__ __device__ constexpr int step_plane(int s) {
  return L::plane(2 * s + 1 < L::kGroups ? 2 * s + 1 : L::kGroups - 1);
}

// groups in order of their offsets: each k step's LBO is positive
template <typename L>
constexpr bool offsets_increase() {
  for (int g = 0; g + 1 < 2 * L::kSteps; ++g)
    if (group_off<L>(g + 1) <= group_off<L>(g)) return false;
  return true;
}
static_assert(offsets_increase<Layout<float>>() && offsets_increase<Layout<__nv_bfloat16>>() &&
                  offsets_increase<Layout<__nv_bfloat16, 4>>(),
              "group order");

constexpr int kChunks = kRows * kQf;  // 16-byte units per plane

// The producer warpgroup copies plane after plane as the consumers release
// them; each thread's copies of plane j count as one arrival on full[j] once
// they have landed (cp.async.mbarrier.arrive.noinc), so no thread waits for
// its own copies. A unit is copied in pieces of kB bytes (TF32: 4 columns
// of one row, kB = 8 for even padding and width, else 4; 16-bit: 2 columns
// of the first row, 2 more, then the same of the second row; 16-bit
// channels_last by unit types: consecutive values of the row's 12), and
// consecutive threads take consecutive pieces, so that a warp's copies
// fill contiguous shared memory (one thread a unit: 4-way bank conflicts).
// TF32 values stay fp32: the tensor cores read their TF32 part
// (truncation); rounding them in place first cost more than the planes
// gain. Every plane has the same pieces per thread, so their geometry is
// computed once.
constexpr int kLoaders = 128;

__device__ __forceinline__ const char* opaque(const char* ptr) {
  asm("" : "+l"(ptr));
  return ptr;
}

// A thread's copies into a plane (or a TF32 plane triple): piece v from
// from + src[v] to base + kStride v, bytes(v) of kB (0: zero-filled; the
// thread's last round only if `last`). With every row of the plane in the
// image (inner) no row test and no branch between the pieces (address,
// byte count and copy: ~4 SASS instructions; one more branch a piece slowed
// the whole kernel markedly); the image's first and last tiles test each
// piece's row y + ry[v].
template <int kB, int kStride, int kN, typename Bytes>
__device__ __forceinline__ void copy_pieces(uint32_t base, const char* from, const char* img, const int (&src)[kN],
                                            const int (&ry)[kN], int y, int H, bool inner, bool last, Bytes bytes) {
  auto copy = [&](auto inner_c) {
#pragma unroll
    for (int v = 0; v < kN; ++v) {
      if (v == kN - 1 && !last) break;
      int nb = bytes(v);
      const char* f = from + src[v];
      if constexpr (!decltype(inner_c)::value) {
        const bool ok = (unsigned)(y + ry[v]) < (unsigned)H;
        f = ok ? f : img;
        nb = ok ? nb : 0;
      }
      if constexpr (kB == 16) {
        cp_async16n(base + kStride * v, f, nb);
      } else if constexpr (kB == 8) {
        cp_async8n(base + kStride * v, f, nb);
      } else {
        cp_async4n(base + kStride * v, f, nb);
      }
    }
  };
  if (inner) {
    copy(std::true_type{});
  } else {
    copy(std::false_type{});
  }
}

// TF32 channels_last by unit types (8-byte pieces): a plane of one unit
// type holds 16 of each 48 input bytes, so a warp copying plane after plane
// touched three times the cache lines of an NCHW copy. The three unit types of a row phase a are the consecutive
// planes 3a + f and are copied together: the 6 pieces of a row's 12 values
// (f = piece / 2) go to consecutive threads, 21 units a round of 126
// threads, 19 rounds a plane triple; a warp copies 256 contiguous input
// bytes, and a thread's pieces keep one shared offset plus 336 bytes a
// round. The other two threads only arrive. Row tests as in copy_pieces.
__device__ __forceinline__ void load_unit_triples(const Params<float>& p, uint32_t s_a, uint32_t s_empty,
                                                  uint32_t s_full, int t) {
  using L = Layout<float>;
  constexpr int kPer = 6, kUnits = kLoaders / kPer, kN = kChunks / kUnits;
  static_assert(kN * kUnits == kChunks && L::kBufs == 1, "whole rounds; one set of planes");
  const bool active = t < kPer * kUnits;
  const int k = t % kPer, dst0 = (k >> 1) * L::kSlotBytes + 16 * (t / kPer) + 8 * (k & 1);
  // per round: the unit's first padded row from the plane's, the input byte
  // offset of the piece from that row's start, whether its columns lie in
  // the image (bit v; x and W even: both of a piece's columns or neither)
  int ry[kN], src[kN];
  uint32_t cols = 0;
#pragma unroll
  for (int v = 0; v < kN; ++v) {
    const int u = t / kPer + kUnits * v, i = u / kQf, x = 4 * (u % kQf) - p.pad;
    ry[v] = 4 * i - p.pad;
    src[v] = (ry[v] * p.sY + x * p.sX) * 4 + 8 * k;
    cols |= (unsigned)(x + (k < 3 ? 0 : 2)) < (unsigned)p.W ? 1u << v : 0u;
  }
  constexpr int kSpan = 4 * (kRows - 1);
  int it = 0;
  for (int tile = blockIdx.x; tile < p.total_tiles; tile += gridDim.x, ++it) {
    const int n = tile / p.tiles_per_img, p0 = (tile - n * p.tiles_per_img) * kMT / kQf;
    const float* img = p.x + n * p.sN;
    for (int a = 0; a < 4; ++a) {
      const int slot = kC * a;
      if (it > 0)
        for (int f = 0; f < kC; ++f) mbar_wait(s_empty + 8 * (slot + f), (it - 1) & 1);
      const uint32_t base = s_a + slot * L::kSlotBytes + dst0;
      const int y0 = 4 * p0 + a;
      const bool inner = y0 - p.pad >= 0 && y0 + kSpan - p.pad < p.H;
      const char* from = opaque(reinterpret_cast<const char*>(img + y0 * p.sY));
      if (active)
        copy_pieces<8, 16 * kUnits>(base, from, reinterpret_cast<const char*>(img), src, ry, y0, p.H, inner, true,
                                    [&](int v) { return cols >> v & 1 ? 8 : 0; });
      for (int f = 0; f < kC; ++f) cp_async_arrive_noinc(s_full + 8 * (slot + f));
    }
  }
}

template <typename T, int kB, bool kNhwc, int CH, int kBufs>
__device__ __forceinline__ void load_planes(const Params<T>& p, uint32_t s_a, uint32_t s_empty, uint32_t s_full,
                                            int t) {
  using L = Layout<T, CH>;
  constexpr bool k16 = !std::is_same_v<T, float>;
  constexpr int kPer = 16 / kB, kPieces = kChunks * kPer, kN = (kPieces + kLoaders - 1) / kLoaders;
  static_assert(!k16 || kB == (kNhwc && CH == 4 ? 16 : 4), "16-bit: 4-byte pieces; 4 channels_last channels 16");
  static_assert(k16 || !kNhwc, "TF32 channels_last by unit types: load_unit_triples");
  static_assert(kLoaders % kPer == 0 && kPitch == 16 * kQf, "a thread's pieces lie 16 kLoaders / kPer bytes apart");
  // Piece t + kLoaders v is part k = t % kPer of unit t / kPer + (kLoaders /
  // kPer) v: its shared offset is dst0 + kLoaders kB v. Per piece: its row's
  // offset, the input byte offset from the plane's first padded row (32
  // bits: the launcher keeps an image's bytes below 2^31), and the bytes to
  // copy (0 for padding columns; x and W even for 8-byte and 16-bit pieces,
  // so both values are in or out). channels_last by unit types (kNhwc):
  // where part k lies (16-bit: the row of the pair; the first of its values
  // among the row's 12; of 4 channels a unit type's whole piece) depends on
  // the plane's unit type, so the offsets are the unit's columns' and each
  // plane adds its part's; bits v of lo / hi: columns 0, 1 / 2, 3 in the
  // image (values 0-5 / 6-11).
  const int k = t % kPer, dst0 = 16 * (t / kPer) + kB * k;
  int ry[kN], src[kN], nb[kN];
  uint32_t lo = 0, hi = 0;
#pragma unroll
  for (int v = 0; v < kN; ++v) {
    const int u = t / kPer + kLoaders / kPer * v, i = u / kQf, m = u % kQf;
    if constexpr (kNhwc) {
      const int x = 4 * m - p.pad;
      ry[v] = 4 * i - p.pad;
      src[v] = (ry[v] * p.sY + x * p.sX) * (int)sizeof(T);
      lo |= (unsigned)x < (unsigned)p.W ? 1u << v : 0u;
      hi |= (unsigned)(x + 2) < (unsigned)p.W ? 1u << v : 0u;
    } else {
      const int x = 4 * m + (k16 ? 2 * (k & 1) : k * kB / 4) - p.pad;
      const bool xin = (unsigned)x < (unsigned)p.W;
      ry[v] = 4 * i + (k16 ? k >> 1 : 0) - p.pad;
      src[v] = (ry[v] * p.sY + (xin ? x : 0) * p.sX) * (int)sizeof(T);  // padding: the row's first value
      nb[v] = xin ? kB : 0;
    }
  }
  const bool last = t + kLoaders * (kN - 1) < kPieces;  // this thread has a piece in the last round
  // the padded rows of a plane: -pad .. 4 (kRows - 1) + (1 for 16-bit) - pad
  // from its first; all in the image but in an image's first and last tiles
  constexpr int kSpan = 4 * (kRows - 1) + (k16 ? 1 : 0);
  int it = 0;
  for (int tile = blockIdx.x; tile < p.total_tiles; tile += gridDim.x, ++it) {
    const int n = tile / p.tiles_per_img, p0 = (tile - n * p.tiles_per_img) * kMT / kQf;
    const int buf = it % kBufs, use = it / kBufs;
    const T* img = p.x + n * p.sN;
    for (int j = 0; j < L::kPlanes; ++j) {
      const int slot = buf * L::kPlanes + j;
      if (use > 0) mbar_wait(s_empty + 8 * slot, (use - 1) & 1);
      const uint32_t base = s_a + slot * L::kSlotBytes + dst0;
      const int y0 = 4 * p0 + L::plane_a(j);
      const bool inner = y0 - p.pad >= 0 && y0 + kSpan - p.pad < p.H;
      int y1 = y0;  // the piece's row of the pair (channels_last)
      uint32_t cols = 0;
      // opaque to the compiler, which would otherwise fold the plane's offset
      // into every piece's address (four instructions a piece instead of two)
      const char* from;
      if constexpr (kNhwc && CH == 4) {
        // unit type f: row f / 2 of the pair, columns 2 (f % 2) and + 1
        const int f = j % CH;
        y1 += f / 2;
        cols = f % 2 ? hi : lo;
        from = opaque(reinterpret_cast<const char*>(img + y1 * p.sY + 2 * (f % 2) * p.sX));
      } else if constexpr (kNhwc) {
        // the part's row of the pair and its first value of the row's 12
        const int f = j % kC, row = f == 0 ? 0 : f == 2 ? 1 : k >> 1;
        const int val = 2 * (f == 0 ? k : f == 2 ? 2 + k : (k + 4) % 6);
        y1 += row;
        cols = val < 6 ? lo : hi;
        from = opaque(reinterpret_cast<const char*>(img + y1 * p.sY) + sizeof(T) * val);
      } else {
        from = opaque(reinterpret_cast<const char*>(img + L::plane_c(j) * p.sC + y0 * p.sY));
      }
      // a channel past C: its slot was zeroed once, the kernel's first act
      if (kNhwc || L::plane_c(j) < p.C)
        copy_pieces<kB, kLoaders * kB>(base, from, reinterpret_cast<const char*>(img), src, ry, y1, p.H, inner, last,
                                       [&](int v) {
                                         if constexpr (kNhwc) {
                                           return cols >> v & 1 ? kB : 0;
                                         } else {
                                           return nb[v];
                                         }
                                       });
      cp_async_arrive_noinc(s_full + 8 * slot);
    }
  }
}

// The store warpgroup: a staged tile channel by channel, a warp's lanes on
// consecutive flat pixels (a row's real pixels are contiguous in NCHW), each
// lane 6 pixels 32 apart whose output offsets serve every channel; or, for a
// channels_last output, staged pixel by pixel, in 16-byte pieces of a
// pixel's channels (store_staged_pixels). SLICE: y is a
// filter group's channels of the output (filter_group: its strides in p),
// else the whole output, whose strides follow from K: that case's code,
// compiled apart, measured faster than the general one's (perf-history S38).
template <typename T, int NT8, bool SLICE>
__device__ __forceinline__ void store_tiles(const Params<T>& p, const uint16_t* stage, uint32_t s_sfull,
                                            uint32_t s_sempty, int t) {
  constexpr int kPer = kMT / 32;
  const int warp = t >> 5, lane = t & 31;
  uint16_t* y = reinterpret_cast<uint16_t*>(p.y);
  int it = 0;
  for (int tile = blockIdx.x; tile < p.total_tiles; tile += gridDim.x, ++it) {
    const int n = tile / p.tiles_per_img, f0 = (tile - n * p.tiles_per_img) * kMT;
    int go[kPer];  // offset in a channel's plane, -1: no real pixel
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int f = f0 + lane + 32 * k, pp = f / kQf, q = f - kQf * pp;
      go[k] = q < p.Q && pp < p.P ? pp * p.Q + q : -1;
    }
    uint16_t* img = y + (SLICE ? (int64_t)n * p.ysn : (int64_t)n * p.K * p.PQ);
    mbar_wait(s_sfull, it & 1);
    if (p.ysc == 1) {  // channels_last: a pixel's channels are contiguous
      const int ks = SLICE ? p.ysm : p.K;  // the pixel stride
      store_staged_pixels(
          stage, staged_pixel_row(NT8), p.K, kMT, img,
          [&](int i) -> int64_t {
            const int f = f0 + i, pp = f / kQf, q = f - kQf * pp;
            return q < p.Q && pp < p.P ? (int64_t)(pp * p.Q + q) * ks : -1;
          },
          pixel_piece(p.K, ks, img), t, 128);
      mbar_arrive_if(s_sempty, true);
      continue;
    }
    for (int ch = warp; ch < p.K; ch += 4) {
      const uint16_t* srow = stage + ch * kLs + lane;
      uint16_t* yrow = SLICE ? img + (int64_t)ch * p.ysc : img + ch * p.PQ;
      uint16_t v[kPer];
#pragma unroll
      for (int k = 0; k < kPer; ++k) v[k] = srow[32 * k];
#pragma unroll
      for (int k = 0; k < kPer; ++k)
        if (go[k] >= 0) yrow[go[k]] = v[k];
    }
    mbar_arrive_if(s_sempty, true);
  }
}

// Consumer warpgroup wg: 64 flat pixels of each tile x all channels. Plane
// j's wgmmas are one commit group; once group j has been committed, group
// j - kLag is waited for, after which plane j - kLag - 1 is read by no
// pending wgmma (a step reads at most the plane before its own) and is
// released. kLag = 2 measured faster than 1, 3 or 4 (TF32).
constexpr int kLag = 2;

template <typename T, int NT8, int CH, bool SLICE>
__device__ __forceinline__ void consume(const Params<T>& p, uint32_t s_a, uint32_t s_b, const float* sbias,
                                        uint32_t s_full, uint32_t s_empty, unsigned char* stage, uint32_t s_sfull,
                                        uint32_t s_sempty, int tid) {
  using L = Layout<T, CH>;
  constexpr int kBufs = Smem<T, NT8, CH>::kBufs;
  constexpr int NT = NT8 * 8;
  const int wg = tid >> 7, wtid = tid & 127, warp = wtid >> 5, lane = tid & 31;
  const uint64_t db = gmma_desc(s_b, NT * 16, 128);
  float acc[NT8 * 4];
  int it = 0;
  for (int tile = blockIdx.x; tile < p.total_tiles; tile += gridDim.x, ++it) {
    const int n = tile / p.tiles_per_img, f0 = (tile - n * p.tiles_per_img) * kMT, p0 = f0 / kQf;
    const int bar0 = 8 * (it % kBufs) * L::kPlanes, parity = it / kBufs & 1;
    const uint64_t da =
        gmma_desc(s_a + (it % kBufs) * L::kPlanes * L::kSlotBytes + (f0 - kQf * p0 + 64 * wg) * 16, 0, 128);
    // A warpgroup whose 64 pixels all lie past the image's last (the last
    // tile of an image, e.g. 55 x 57 = 3135 flat pixels: 16 tiles and one
    // block of 64) only keeps the barriers' phases.
    if (f0 + 64 * wg > kQf * (p.P - 1) + p.Q - 1) {
      for (int j = 0; j < L::kPlanes; ++j) {
        mbar_wait(s_full + bar0 + 8 * j, parity);
        mbar_arrive_if(s_empty + bar0 + 8 * j, wtid == 0);
      }
      if constexpr (L::kStaged) {
        if (it > 0) mbar_wait(s_sempty, (it - 1) & 1);
        mbar_arrive_if(s_sfull, true);
      }
      continue;
    }
    static_for<L::kPlanes>([&](auto jc) {
      constexpr int j = decltype(jc)::value;
      mbar_wait(s_full + bar0 + 8 * j, parity);
      gmma_fence();  // after each wait's spin loop, or ptxas inserts one and serializes the wgmmas
      static_for<L::kSteps>([&](auto sc) {
        constexpr int s = decltype(sc)::value;
        if constexpr (step_plane<L>(s) == j) {
          constexpr int off = group_off<L>(2 * s), lbo = group_off<L>(2 * s + 1) - off;
          constexpr uint64_t a_step = (uint64_t)(off >> 4) | ((uint64_t)(lbo >> 4) << 16);
          gmma_ss<T, NT8>(acc, da + a_step, db + (uint64_t)(s * 2 * NT), s > 0);
        }
      });
      gmma_commit();
      if constexpr (j >= kLag) {
        gmma_wait<kLag>();
        if constexpr (j > kLag) mbar_arrive_if(s_empty + bar0 + 8 * (j - kLag - 1), wtid == 0);
      }
    });
    gmma_wait<0>();
    static_for<kLag + 1>([&](auto kc) {
      mbar_arrive_if(s_empty + bar0 + 8 * (L::kPlanes - 1 - kLag + decltype(kc)::value), wtid == 0);
    });
    // NaN outputs recomputed: acc[4 j + 2 h + e] is flat pixel f = fr + 8 h,
    // channel 8 j + 2 (lane % 4) + e
    const int fr = f0 + 64 * wg + 16 * warp + (lane >> 2);
    exact::fix_nan<NT8 * 4>(acc, [&](int i, float v) {
      const int f = fr + 8 * ((i >> 1) & 1), pp = f / kQf, q = f - kQf * pp;
      const int ch = 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
      if (q >= p.Q || pp >= p.P || ch >= p.K) return v;
      return exact::forward(p.x, p.sN, p.sC, p.sY, p.sX, p.H, p.W, p.C, p.w, p.pad, n, ch, pp, q);
    });
    if constexpr (L::kStaged) {
      if (it > 0) mbar_wait(s_sempty, (it - 1) & 1);
      stage_tile<T, NT8>(p.ysc == 1, acc, sbias, stage, kLs, 64 * wg + 16 * warp, lane);
      mbar_arrive_if(s_sfull, true);
    } else {
      // rows 16 warp + lane / 4 (+ 8) of this warpgroup's 64, channels
      // 8 j + 2 (lane % 4) (+ 1): stores with the bias added
      const int fa = f0 + 64 * wg + 16 * warp + (lane >> 2), c0 = 2 * (lane & 3);
      bool ok[2];
      int64_t off[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int f = fa + 8 * h, pp = f / kQf, q = f - kQf * pp;
        ok[h] = q < p.Q && pp < p.P;
        off[h] = (SLICE ? (int64_t)n * p.ysn : (int64_t)n * p.K * p.PQ) + (int64_t)(pp * p.Q + q) * p.ysm;
      }
      // channels_last, K and the pixel stride even: channels c0, c0 + 1 of a pixel in one store
      const bool pairs = p.ysc == 1 && p.K % 2 == 0 && (!SLICE || p.ysm % 2 == 0);
      with_accumulate<T>(p.accumulate, [&](auto add) {
        if (pairs) {
#pragma unroll
          for (int j = 0; j < NT8; ++j) {
            const int ch = 8 * j + c0;
            if (ch >= p.K) continue;
            const float b0 = sbias[ch], b1 = sbias[ch + 1];
#pragma unroll
            for (int h = 0; h < 2; ++h)
              if (ok[h])
                put2<decltype(add)>(p.y + off[h] + ch, acc[4 * j + 2 * h] + b0, acc[4 * j + 2 * h + 1] + b1);
          }
          return;
        }
#pragma unroll
        for (int j = 0; j < NT8; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int ch = 8 * j + c0 + e;
            if (ch >= p.K) continue;
            const float b = sbias[ch];
#pragma unroll
            for (int h = 0; h < 2; ++h)
              if (ok[h]) put<decltype(add)>(p.y + off[h] + (int64_t)ch * p.ysc, acc[4 * j + 2 * h + e] + b);
          }
        }
      });
    }
  }
}

// The consumer warpgroups: the weights and bias, then every tile's wgmmas.
template <typename T, int NT8, int CH, bool SLICE>
__device__ __forceinline__ void consumers(const Params<T>& p, unsigned char* smem, unsigned char* stage, float* sbias,
                                          int tid) {
  using S = Smem<T, NT8, CH>;
  constexpr int NT = NT8 * 8, kSlots = S::kSlots;
  const uint32_t s_b = smem_u32(smem), s_a = s_b + S::kB;
  const uint32_t s_full = s_b + S::kBars, s_empty = s_full + 8 * kSlots;
  const uint32_t s_sfull = s_empty + 8 * kSlots, s_sempty = s_sfull + 8;
  // the weights come from the prep kernel, which may still be running
  // (launch_dependent): the producer's first planes do not wait for them
  pdl_wait();
  for (int i = tid; i < S::kB / 16; i += 128 * kConsumers) cp_async16(smem + 16 * i, p.wb + i);
  cp_async_commit();
  for (int i = tid; i < NT; i += 128 * kConsumers) sbias[i] = p.bias != nullptr && i < p.K ? to_f(p.bias[i]) : 0.f;
  cp_async_wait_all();
  fence_proxy_async();  // for the tensor cores
  asm volatile("bar.sync 1, %0;\n" ::"n"(128 * kConsumers) : "memory");
  consume<T, NT8, CH, SLICE>(p, s_a, s_b, sbias, s_full, s_empty, stage, s_sfull, s_sempty, tid);
}

// Filter group blockIdx.y's part of p, where one launch (SLICE) covers
// every group: filters [k0, k0 + p.K) of a whole output of ysn / PQ
// filters, their weights (a prepared block each) and bias.
template <typename T, int NT8, int CH>
__device__ __forceinline__ Params<T> filter_group(const Params<T>& p) {
  Params<T> q = p;
  const int k0 = (int)blockIdx.y * p.K;
  q.K = min(p.K, p.ysn / p.PQ - k0);
  q.wb = p.wb + blockIdx.y * (Smem<T, NT8, CH>::kB / 16);
  q.bias = p.bias != nullptr ? p.bias + k0 : nullptr;
  q.w = p.w + (int64_t)k0 * p.C * kR * kR;
  q.y = p.y + (int64_t)k0 * p.ysc;
  return q;
}
#endif

template <typename T, int NT8, int CH, bool SLICE>
__global__ void __launch_bounds__(kThreads<T>, 1) conv11s4_fwd_planes_kernel(const Params<T> p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = Layout<T, CH>;
  using S = Smem<T, NT8, CH>;
  constexpr int kSlots = S::kSlots;
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* stage = smem + S::kB + S::kA;
  float* sbias = reinterpret_cast<float*>(smem + S::kBias);
  const uint32_t s_b = smem_u32(smem), s_a = s_b + S::kB;
  const uint32_t s_full = s_b + S::kBars, s_empty = s_full + 8 * kSlots;
  const uint32_t s_sfull = s_empty + 8 * kSlots, s_sempty = s_sfull + 8;
  const int tid = threadIdx.x;
  // fewer than CH channels (NCHW): the slots of the missing channels' planes
  // hold zeros for good, for the tensor cores (fenced below)
  if (p.C < CH) {
    for (int slot = 0; slot < kSlots; ++slot)
      if (L::plane_c(slot % L::kPlanes) >= p.C)
        for (int i = tid; i < L::kSlotBytes / 16; i += blockDim.x)
          reinterpret_cast<uint4*>(smem + S::kB + slot * L::kSlotBytes)[i] = make_uint4(0, 0, 0, 0);
    fence_proxy_async();
  }
  if (tid < kSlots) {
    mbar_init(s_full + 8 * tid, kLoaders);
    mbar_init(s_empty + 8 * tid, kConsumers);
  }
  if (tid == 0) {
    mbar_init(s_sfull, 128 * kConsumers);
    mbar_init(s_sempty, 128);
  }
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  __syncthreads();
  if (tid >= 128 * (kConsumers + 1)) {
    if constexpr (L::kStaged && SLICE)
      store_tiles<T, NT8, true>(filter_group<T, NT8, CH>(p), reinterpret_cast<const uint16_t*>(stage), s_sfull,
                                s_sempty, tid - 128 * (kConsumers + 1));
    else if constexpr (L::kStaged)
      store_tiles<T, NT8, false>(p, reinterpret_cast<const uint16_t*>(stage), s_sfull, s_sempty,
                                 tid - 128 * (kConsumers + 1));
  } else if (tid >= 128 * kConsumers) {
    const int t = tid - 128 * kConsumers;
    if constexpr (std::is_same_v<T, float>) {
      if (p.units) {
        load_unit_triples(p, s_a, s_empty, s_full, t);
      } else if (p.vec8) {
        load_planes<T, 8, false, CH, S::kBufs>(p, s_a, s_empty, s_full, t);
      } else {
        load_planes<T, 4, false, CH, S::kBufs>(p, s_a, s_empty, s_full, t);
      }
    } else {
      if (p.units) {
        load_planes<T, CH == 4 ? 16 : 4, true, CH, S::kBufs>(p, s_a, s_empty, s_full, t);
      } else {
        load_planes<T, 4, false, CH, S::kBufs>(p, s_a, s_empty, s_full, t);
      }
    }
  } else if constexpr (SLICE) {
    consumers<T, NT8, CH, true>(filter_group<T, NT8, CH>(p), smem, stage, sbias, tid);
  } else {
    consumers<T, NT8, CH, false>(p, smem, stage, sbias, tid);
  }
#endif
}

// The prep kernel (one a filter group), then the main kernel as the last
// one's programmatic dependent: one launch over every group, a grid row
// each (filter_group), so that the groups' tiles share the SMs' rounds.
template <typename T, int NT8, int CH>
void launch(const Problem& pr, const Args& a) {
  using L = Layout<T, CH>;
  using S = Smem<T, NT8, CH>;
  static_assert(CH == kC || !std::is_same_v<T, float>, "TF32 planes: 3 channel slots");
  constexpr int NT = NT8 * 8;
  TORCH_INTERNAL_ASSERT(planes_fit(pr, NT8), "forward planes: chosen for a problem it does not fit");
  Params<T> p{};
  set_sizes(p, pr);
  p.C = (int)pr.C;
  TORCH_INTERNAL_ASSERT(p.C == CH || (p.C >= 1 && p.C < CH && CH == kC && !pr.nhwc), "forward planes: channels");
  TORCH_INTERNAL_ASSERT(CH == kC || !pr.nhwc || pr.input_align >= 16, "forward planes: 16-byte pieces of 4 channels");
  const int hw = p.H * p.W;
  p.sN = a.input.stride(0);  // a channel slice's images are C channels apart
  p.sC = pr.nhwc ? 1 : hw;
  p.sY = pr.nhwc ? CH * p.W : p.W;
  p.sX = pr.nhwc ? CH : 1;
  p.vec8 = p.pad % 2 == 0 && p.W % 2 == 0 && pr.input_align >= 8;
  p.units = pr.nhwc && (!std::is_same_v<T, float> || p.vec8);
  p.tiles_per_img = (p.P * kQf + kMT - 1) / kMT;
  const int64_t total = pr.N * (int64_t)p.tiles_per_img;
  p.total_tiles = (int)total;

  const int64_t width = planes_group_width(pr.K);
  const int groups = (int)((pr.K + width - 1) / width);
  TORCH_INTERNAL_ASSERT(width <= NT, "forward planes: filter groups wider than a CTA's");
  TORCH_INTERNAL_ASSERT(groups == 1 || a.output.stride(0) == pr.K * p.PQ, "forward planes: groups need a whole output");

  auto stream = c10::cuda::getCurrentCUDAStream();
  const at::Tensor wbuf = scratch(a.input, groups * S::kB);
  constexpr int kPrepThreads = L::kSteps * 2 * NT * L::kElems;
  auto* prep = p.units ? prep_weights_planes_kernel<T, NT, true, CH> : prep_weights_planes_kernel<T, NT, false, CH>;
  for (int g = 0; g < groups; ++g) {
    const int64_t k0 = g * width;
    prep<<<(kPrepThreads + 255) / 256, 256, 0, stream>>>(
        static_cast<const T*>(a.weight.data_ptr()) + k0 * p.C * kR * kR, (int)std::min(width, pr.K - k0), p.C,
        static_cast<T*>(wbuf.data_ptr()) + g * (S::kB / sizeof(T)));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  p.x = static_cast<const T*>(a.input.data_ptr());
  p.wb = static_cast<const uint4*>(wbuf.data_ptr());
  p.w = static_cast<const T*>(a.weight.data_ptr());
  p.bias = a.bias != nullptr ? static_cast<const T*>(a.bias->data_ptr()) : nullptr;
  p.y = static_cast<T*>(a.output.data_ptr());
  p.ysc = (int)a.output.stride(1);
  p.ysm = (int)a.output.stride(3);
  p.ysn = (int)a.output.stride(0);  // at most kMaxFilters * 55 * 55
  p.accumulate = a.accumulate ? 1 : 0;
  if (groups > 1) p.K = (int)width;  // a group's filters (filter_group)
  auto* kernel =
      groups > 1 ? conv11s4_fwd_planes_kernel<T, NT8, CH, true> : conv11s4_fwd_planes_kernel<T, NT8, CH, false>;
  allow_max_dynamic_smem(kernel);
  const dim3 grid((unsigned)std::min<int64_t>(total, std::max(1, pr.dev.num_sms / groups)), (unsigned)groups);
  launch_dependent(kernel, grid, kThreads<T>, S::kBytes, stream, p);
}

}  // namespace alexop::cuda::forward::planes
