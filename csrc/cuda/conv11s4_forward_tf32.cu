// TF32 forward on wgmma with both operands in shared memory (sm_90a): the
// float32 forward under torch.set_float32_matmul_precision("medium") for
// images whose outputs are 48 to 55 pixels wide (AlexNet's 224 x 224 with
// padding 2, 227 x 227 without), NCHW or channels_last, K <= 96, batches of
// one tile per SM or more.
//
// Why a kernel of its own: the gather kernel (conv11s4_forward_tc.cu) forms
// every A fragment in registers from its patch, a dependent chain of table
// load, patch loads and cvt per k step, which kept the tensor pipe about 31%
// busy. A TF32 value is 4 bytes, so the 4 columns one output pixel reads
// per kernel column group are one 16-byte row of a wgmma core matrix, and
// the next output pixel's row (4 columns on, the stride) is the next 16
// bytes: laid out as below, the tensor cores read A straight from shared
// memory by descriptor, and the MMA loop is one wgmma per k8 step.
//
// Layout. Phase plane (c, a), a = 0..3, holds the padded input rows 4i + a
// of channel c, one 16-byte aligned row of 228 floats (57 x 16 bytes) each,
// column u = padded column u. Output pixel (p, q) is flat pixel f = 57p + q
// (q = 55, 56 are computed and dropped), and its A row for the k group
// (c, r = 4R + a, s0 .. s0 + 3) is the 16 bytes at plane (c, a), row p + R,
// column 4q + s0: the group's origin plus 16 f bytes. A k8 step (two groups)
// is then one descriptor: start at the first group, LBO = the distance to
// the second, SBO = 128 (8 consecutive pixels). K = 99 groups of 4 (s = 11
// zero-weighted) plus one all-zero group = 400.
//
// Tiles of 192 consecutive flat pixels of one image, three consumer
// warpgroups of m64 x all channels; their rows need 7 rows of each of the
// 12 planes (76.6 KB). The weights stay resident (K x 400 TF32 in wgmma's
// K-major layout, 154 KB at K = 96, rounded by a prep kernel). Each plane
// has one buffer, refilled plane by plane: a consumer warpgroup releases
// plane j once its wgmmas that read it have completed, and a producer
// warpgroup copies the plane for the CTA's next tile (cp.async, zero-filled
// outside the image: the padding) and marks it full when the copies land;
// mbarriers both ways. So the next tile's first planes land while this
// tile's last ones are in use. The input values are not rounded: the tensor
// cores use their TF32 part (truncation; rel L2 3.5e-4 against 2.2e-4 for
// rounded operands, the TF32 bound being 1e-3), see load_planes.
//
// Measured (H200, batch 256, 224 x 224, pad 2, K = 96, ms): 0.285-0.29
// against the gather kernel's 0.39 (channels_last 0.36, K = 64 0.25-0.26).
// Switched off in a dev build (before kLag = 2): without the copies 0.240,
// without copies and stores 0.187, so the MMA loop alone runs at about 70%
// of the TF32 peak; the copies (8-byte cp.async at padding 2: the 16-byte chunks of the
// planes sit 8 bytes off the input's) and the wgmma operand reads share
// the SM's L1 / shared-memory bandwidth (79% busy in ncu). The bulk tensor
// copy cannot do the copies: its innermost box start must be 16-byte aligned.
//
// Like the gather kernel, zero-weighted k slots read real input values: an
// Inf/NaN input can reach outputs whose window excludes it.

#include "fast_kernels.h"
#include "launch_utils.h"
#include "ptx.cuh"
#include "wgmma.cuh"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace alexop::cuda {
namespace {

constexpr int kC = 3;
constexpr int kR = 11;
constexpr int kQf = 57;                         // flat pixels per output row
constexpr int kPitch = kQf * 16;                // bytes per plane row
constexpr int kRows = 7;                        // plane rows a tile reads
constexpr int kPlanes = 4 * kC;                 // (c, a)
constexpr int kPlaneBytes = kRows * kPitch;
constexpr int kABytes = kPlanes * kPlaneBytes;  // 76,608
constexpr int kConsumers = 3;                   // MMA warpgroups
constexpr int kMT = 64 * kConsumers;            // flat pixels per tile
constexpr int kThreads = 128 * (kConsumers + 1);
constexpr int kGroups = 99;                     // 3 channels x 11 rows x 3 column groups
constexpr int kSteps = 50;                      // k8 steps: kGroups + 1 zero group
static_assert(kMT + kQf - 1 <= (kRows - 2) * kQf, "a tile's pixels span rows 0 .. kRows - 3 of the window");

// Group g: channel g / 33; in it planes a = 0, 1, 2 with rows R = 0..2 and
// a = 3 with R = 0, 1 (r = 4R + a <= 10), three column groups s0 = 0, 4, 8
// each; in order of their offsets in shared memory, so LBO > 0.
__host__ __device__ constexpr int group_a(int g) { return g % 33 < 27 ? g % 33 / 9 : 3; }
__host__ __device__ constexpr int group_rr(int g) { return (g % 33 - 9 * group_a(g)) / 3; }  // R
__host__ __device__ constexpr int group_s0(int g) { return 4 * ((g % 33 - 9 * group_a(g)) % 3); }

struct Params {
  const float* x;
  const uint4* wb;  // prepared weights
  const float* bias;  // may be null
  float* y;
  int64_t sN;  // input element strides: image, channel, row, column
  int sC, sY, sX;
  int H, W, K, P, Q, PQ, pad;
  int tiles_per_img, total_tiles;
  int vec8;  // NCHW, even padding and width, 8-byte aligned: 8-byte copies
};

// B for NT channels in wgmma's K-major layout: per k8 step two blocks (its
// groups) of NT rows x 16 bytes, TF32-rounded, zero past K and s = 10.
template <int NT>
__global__ void prep_weights_tf32_planes_kernel(const float* __restrict__ w, int K, uint32_t* __restrict__ out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;  // ((group, n), e)
  if (i >= kSteps * 2 * NT * 4) return;
  const int e = i & 3, n = (i >> 2) % NT, g = (i >> 2) / NT;
  float v = 0.f;
  if (g < kGroups && n < K) {
    const int r = 4 * group_rr(g) + group_a(g), s = group_s0(g) + e;
    if (s < kR) v = w[((n * kC + g / 33) * kR + r) * kR + s];
  }
  out[i] = to_tf32(v);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// f(integral_constant<int, i>) for i = 0 .. N - 1: the k loop's plane and
// step become compile-time constants, and so do its descriptor offsets.
template <typename F, int... I>
__device__ __forceinline__ void static_for_seq(F&& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}
template <int N, typename F>
__device__ __forceinline__ void static_for(F&& f) {
  static_for_seq(f, std::make_integer_sequence<int, N>{});
}

// group g's plane, 4c + a
__host__ __device__ constexpr int group_plane(int g) { return 4 * (g / 33) + group_a(g); }
// byte offset of group g's origin in the planes; the zero group sits 16
// bytes past the last one (real values, zero weights)
__host__ __device__ constexpr int group_off(int g) {
  const int h = g < kGroups ? g : kGroups - 1;
  return group_plane(h) * kPlaneBytes + group_rr(h) * kPitch + group_s0(h) * 4 + (g < kGroups ? 0 : 16);
}
// the plane whose arrival a k8 step waits for (its second group's)
__host__ __device__ constexpr int step_plane(int s) {
  return group_plane(2 * s + 1 < kGroups ? 2 * s + 1 : kGroups - 1);
}

constexpr int kChunks = kRows * kQf;  // 16-byte chunks per plane

// The producer warpgroup copies plane after plane as the consumers release
// them; each thread's copies of plane j count as one arrival on full[j] once
// they have landed (cp.async.mbarrier.arrive.noinc), so no thread waits for
// its own copies. The values stay fp32: the tensor cores read their TF32
// part (truncation). Rounding them in place first cost more than the
// planes gain: with two of the four warps copying and two rounding (and
// fencing each plane for the tensor cores) the headline took 0.394 ms
// against 0.306 (H200, same build). Every plane has the same chunks per
// thread, so the chunk geometry is computed once.
constexpr int kLoaders = 128;
constexpr int kPerThread = (kChunks + kLoaders - 1) / kLoaders;

__device__ __forceinline__ void load_planes(const Params& p, uint32_t s_a, uint32_t s_empty, uint32_t s_full,
                                            int t) {
  int cdst[kPerThread], crow[kPerThread], cx[kPerThread];
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const int ch = t + kLoaders * u, i = ch / kQf, m = ch - i * kQf;
    cdst[u] = ch < kChunks ? i * kPitch + m * 16 : -1;
    crow[u] = i;
    cx[u] = 4 * m - p.pad;
  }
  int it = 0;
  for (int tile = blockIdx.x; tile < p.total_tiles; tile += gridDim.x, ++it) {
    const int n = tile / p.tiles_per_img, p0 = (tile - n * p.tiles_per_img) * kMT / kQf;
    const float* img = p.x + n * p.sN;
    for (int j = 0; j < kPlanes; ++j) {
      if (it > 0) mbar_wait(s_empty + 8 * j, (it - 1) & 1);
      const float* chan = img + (j >> 2) * p.sC;
      const uint32_t dst = s_a + j * kPlaneBytes;
#pragma unroll
      for (int u = 0; u < kPerThread; ++u) {
        if (cdst[u] < 0) continue;
        const int y = 4 * (p0 + crow[u]) + (j & 3) - p.pad;
        const bool rok = (unsigned)y < (unsigned)p.H;
        const float* row = chan + (int64_t)y * p.sY;
        if (p.vec8) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int x = cx[u] + 2 * h;  // even, and W even: both values in or out
            const bool ok = rok && (unsigned)x < (unsigned)p.W;
            cp_async8n(dst + cdst[u] + 8 * h, ok ? row + x : p.x, ok ? 8 : 0);
          }
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int x = cx[u] + e;
            const bool ok = rok && (unsigned)x < (unsigned)p.W;
            cp_async4n(dst + cdst[u] + 4 * e, ok ? row + x * p.sX : p.x, ok ? 4 : 0);
          }
        }
      }
      cp_async_arrive_noinc(s_full + 8 * j);
    }
  }
}

// Consumer warpgroup wg: 64 flat pixels of each tile x all channels. Plane
// j's wgmmas are one commit group; once group j has been committed, group
// j - kLag is waited for, after which plane j - kLag - 1 is read by no
// pending wgmma (a step reads at most the plane before its own) and is
// released. kLag = 2 measured 5% faster than 1 (0.286 against 0.300 ms at
// the headline, H200, same build), 3 and 4 slower again.
constexpr int kLag = 2;

template <int NT8>
__device__ __forceinline__ void consume(const Params& p, uint32_t s_a, uint32_t s_b, const float* sbias,
                                        uint32_t s_full, uint32_t s_empty, int tid) {
  constexpr int NT = NT8 * 8;
  const int wg = tid >> 7, wtid = tid & 127, warp = wtid >> 5, lane = tid & 31;
  const uint64_t db = gmma_desc(s_b, NT * 16, 128);
  float acc[NT8 * 4];
#pragma unroll
  for (int i = 0; i < NT8 * 4; ++i) acc[i] = 0.f;
  int it = 0;
  for (int tile = blockIdx.x; tile < p.total_tiles; tile += gridDim.x, ++it) {
    const int n = tile / p.tiles_per_img, f0 = (tile - n * p.tiles_per_img) * kMT, p0 = f0 / kQf;
    const uint64_t da = gmma_desc(s_a + (f0 - kQf * p0 + 64 * wg) * 16, 0, 128);
    static_for<kPlanes>([&](auto jc) {
      constexpr int j = decltype(jc)::value;
      mbar_wait(s_full + 8 * j, it & 1);
      gmma_fence();  // after each wait's spin loop, or ptxas inserts one and serializes the wgmmas
      static_for<kSteps>([&](auto sc) {
        constexpr int s = decltype(sc)::value;
        if constexpr (step_plane(s) == j) {
          constexpr int off = group_off(2 * s), lbo = group_off(2 * s + 1) - off;
          constexpr uint64_t a_step = (uint64_t)(off >> 4) | ((uint64_t)(lbo >> 4) << 16);
          gmma_ss<float, NT8>(acc, da + a_step, db + (uint64_t)(s * 2 * NT), s > 0);
        }
      });
      gmma_commit();
      if constexpr (j >= kLag) {
        gmma_wait<kLag>();
        if constexpr (j > kLag) mbar_arrive_if(s_empty + 8 * (j - kLag - 1), wtid == 0);
      }
    });
    gmma_wait<0>();
    static_for<kLag + 1>([&](auto kc) {
      mbar_arrive_if(s_empty + 8 * (kPlanes - 1 - kLag + decltype(kc)::value), wtid == 0);
    });
    // rows 16 warp + lane / 4 (+ 8) of this warpgroup's 64, channels
    // 8 j + 2 (lane % 4) (+ 1): NCHW stores with the bias added
    const int fa = f0 + 64 * wg + 16 * warp + (lane >> 2), c0 = 2 * (lane & 3);
    bool ok[2];
    int64_t off[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int f = fa + 8 * h, pp = f / kQf, q = f - kQf * pp;
      ok[h] = q < p.Q && pp < p.P;
      off[h] = (int64_t)n * p.K * p.PQ + pp * p.Q + q;
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
          if (ok[h]) p.y[off[h] + (int64_t)ch * p.PQ] = acc[4 * j + 2 * h + e] + b;
      }
    }
  }
}
#endif

template <int NT8>
__global__ void __launch_bounds__(kThreads, 1) conv11s4_fwd_tf32_planes_kernel(const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int NT = NT8 * 8;
  constexpr int kBBytes = kSteps * 2 * NT * 16;
  extern __shared__ __align__(128) unsigned char smem[];
  float* sbias = reinterpret_cast<float*>(smem + kBBytes + kABytes);
  const uint32_t s_b = smem_u32(smem), s_a = s_b + kBBytes;
  const uint32_t s_full = s_a + kABytes + NT * 4, s_empty = s_full + 8 * kPlanes;
  const int tid = threadIdx.x;
  for (int i = tid; i < kBBytes / 16; i += kThreads) cp_async16(smem + 16 * i, p.wb + i);
  cp_async_commit();
  for (int i = tid; i < NT; i += kThreads) sbias[i] = p.bias != nullptr && i < p.K ? p.bias[i] : 0.f;
  if (tid < kPlanes) {
    mbar_init(s_full + 8 * tid, kLoaders);
    mbar_init(s_empty + 8 * tid, kConsumers);
  }
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  cp_async_wait_all();
  fence_proxy_async();  // the weights, for the tensor cores
  __syncthreads();
  if (tid >= 128 * kConsumers) {
    load_planes(p, s_a, s_empty, s_full, tid - 128 * kConsumers);
  } else {
    consume<NT8>(p, s_a, s_b, sbias, s_full, s_empty, tid);
  }
#endif
}

template <int NT8>
bool launch(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias, int pad,
            bool nhwc, const at::Tensor& output) {
  constexpr int NT = NT8 * 8;
  constexpr int kBBytes = kSteps * 2 * NT * 16;
  const auto* prop = at::cuda::getCurrentDeviceProperties();
  const size_t smem = (size_t)kBBytes + kABytes + NT * 4 + 16 * kPlanes;
  if (smem > (size_t)prop->sharedMemPerBlockOptin) return false;
  Params p{};
  p.H = (int)input.size(2);
  p.W = (int)input.size(3);
  p.K = (int)weight.size(0);
  p.P = (int)output.size(2);
  p.Q = (int)output.size(3);
  p.PQ = p.P * p.Q;
  p.pad = pad;
  const int hw = p.H * p.W;
  p.sN = (int64_t)kC * hw;
  p.sC = nhwc ? 1 : hw;
  p.sY = nhwc ? kC * p.W : p.W;
  p.sX = nhwc ? kC : 1;
  p.vec8 = !nhwc && pad % 2 == 0 && p.W % 2 == 0 && reinterpret_cast<uintptr_t>(input.data_ptr()) % 8 == 0;
  p.tiles_per_img = (p.P * kQf + kMT - 1) / kMT;
  const int64_t total = input.size(0) * (int64_t)p.tiles_per_img;
  if (total > INT32_MAX || total < prop->multiProcessorCount) return false;
  p.total_tiles = (int)total;

  auto stream = at::cuda::getCurrentCUDAStream();
  auto wbuf = at::empty({(int64_t)kBBytes}, input.options().dtype(at::kByte));
  constexpr int kPrepThreads = kSteps * 2 * NT * 4;
  prep_weights_tf32_planes_kernel<NT><<<(kPrepThreads + 255) / 256, 256, 0, stream>>>(
      weight.data_ptr<float>(), p.K, static_cast<uint32_t*>(wbuf.data_ptr()));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  p.x = input.data_ptr<float>();
  p.wb = static_cast<const uint4*>(wbuf.data_ptr());
  p.bias = bias.has_value() ? bias->data_ptr<float>() : nullptr;
  p.y = output.data_ptr<float>();
  allow_max_dynamic_smem(conv11s4_fwd_tf32_planes_kernel<NT8>);
  conv11s4_fwd_tf32_planes_kernel<NT8>
      <<<(unsigned)std::min<int64_t>(total, prop->multiProcessorCount), kThreads, smem, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

}  // namespace

bool conv11s4_forward_tf32_planes(const at::Tensor& input, const at::Tensor& weight,
                                  const std::optional<at::Tensor>& bias, int pad, bool nhwc,
                                  const at::Tensor& output) {
  const int64_t K = weight.size(0), Q = output.size(3);
  if (input.scalar_type() != at::kFloat || K > 96 || Q < 48 || Q > 55) return false;
  return K <= 64 ? launch<8>(input, weight, bias, pad, nhwc, output)
                 : launch<12>(input, weight, bias, pad, nhwc, output);
}

}  // namespace alexop::cuda
